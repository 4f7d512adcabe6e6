//! The node's InfiniBand and RoCE ports as a source: every `network.interval` (10 s), a read
//! of what changes on each port (states, rate, counters, the adapter's PCIe link, a RoCE
//! interface's state) under /sys/class/infiniband (crate::input::infiniband). What does not
//! change (the adapters, their firmware and ports, where the GPUs sit in the PCI tree) is
//! found again only every [`FIND_AGAIN_EVERY`], or at once when a read finds a port gone; and
//! of the counters only `link_downed` is read each time, all of them every
//! `network.counters_interval` (60 s; benches/nic_read.rs measures each part; docs/performance.md has
//! the figures).

use super::Periodic;
use crate::config::settings::Settings;
use crate::input::infiniband::{self, Adapters};
use crate::model::nic::NicScan;
use std::time::{Duration, Instant};

/// How long the adapters as found are kept: a hot-plugged adapter shows within this.
pub const FIND_AGAIN_EVERY: Duration = Duration::from_secs(300);

#[derive(Default)]
pub struct NicPorts {
    /// The adapters as found, when, and under which sysfs root.
    found: Option<(Adapters, Instant, std::path::PathBuf)>,
    /// The last read of every counter, and when.
    all_counters: Option<(NicScan, Instant)>,
}

impl Periodic for NicPorts {
    type Value = NicScan;
    const NAME: &'static str = "source-nics";

    fn every(&self, settings: &Settings) -> Option<Duration> {
        settings
            .config
            .network
            .enabled
            .then_some(settings.config.network.interval)
    }

    fn read(&mut self, settings: &Settings) -> NicScan {
        let root = &settings.sys_root;
        let fresh =
            |found: &(Adapters, Instant, std::path::PathBuf)| found.1.elapsed() < FIND_AGAIN_EVERY && found.2 == *root;
        let (adapters, at, _) = match self.found.take().filter(fresh) {
            Some(kept) => kept,
            None => {
                let places = infiniband::gpu_places(root);
                (infiniband::discover(root, &places), Instant::now(), root.clone())
            }
        };
        let earlier = self
            .all_counters
            .as_ref()
            .filter(|(_, when)| when.elapsed() < settings.config.network.counters_interval && at <= *when)
            .map(|(scan, _)| scan);
        let full = earlier.is_none();
        let (scan, gone) = infiniband::read(&adapters, earlier);
        if gone {
            // An adapter went or its driver reloaded: find them again, and read them whole.
            let places = infiniband::gpu_places(root);
            let adapters = infiniband::discover(root, &places);
            let (scan, _) = infiniband::read(&adapters, None);
            self.found = Some((adapters, Instant::now(), root.clone()));
            self.all_counters = Some((scan.clone(), Instant::now()));
            return scan;
        }
        if full {
            self.all_counters = Some((scan.clone(), Instant::now()));
        }
        self.found = Some((adapters, at, root.clone()));
        scan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_changes_is_read_each_time_and_a_gone_adapter_is_found_again_at_once() {
        let (_dir, root) = crate::input::infiniband::fixture("ndr-ib");
        let mut config = crate::config::Config::default();
        config.amd.sysfs_root = root.clone();
        let settings = Settings::serving_nothing(config);
        let mut source = NicPorts::default();
        assert_eq!(source.read(&settings).devices.len(), 4);
        let dev1 = std::fs::canonicalize(root.join("sys/class/infiniband/mlx5_1")).unwrap();
        std::fs::write(dev1.join("ports/1/state"), "1: DOWN\n").unwrap();
        std::fs::write(dev1.join("ports/1/counters/link_downed"), "7\n").unwrap();
        std::fs::write(dev1.join("ports/1/counters/symbol_error"), "99\n").unwrap();
        let scan = source.read(&settings);
        let port = &scan.devices[1].ports[0];
        assert_eq!(port.up(), Some(false), "the state is read each time");
        assert_eq!(port.counter("link_downed"), Some(7), "so is link_downed");
        assert_eq!(port.counter("symbol_error"), Some(0), "the others once a minute");
        assert_eq!(port.counters.len(), 11, "kept from the last full read");
        // mlx5_3 goes away (its driver unbound): the next read does not show it.
        std::fs::remove_file(root.join("sys/class/infiniband/mlx5_3")).unwrap();
        let dev3 = std::fs::canonicalize(
            root.join("sys/devices/pci0000:c0/0000:c0:01.0/0000:48:00.0/0000:49:01.0/0000:4a:00.0/infiniband"),
        )
        .unwrap();
        std::fs::remove_dir_all(dev3).unwrap();
        let names: Vec<String> = source.read(&settings).devices.into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2"]);
    }
}
