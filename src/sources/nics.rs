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
pub(crate) const FIND_AGAIN_EVERY: Duration = Duration::from_secs(300);

#[derive(Default)]
pub(crate) struct NicPorts {
    /// The adapters as found, when, and under which sysfs root.
    found: Option<(Adapters, Instant, std::path::PathBuf)>,
    /// The last read of every counter, and when.
    all_counters: Option<(NicScan, Instant)>,
}

impl Periodic for NicPorts {
    type Value = NicScan;
    const NAME: &'static str = "source-nics";

    fn every(&self, settings: &Settings) -> Option<Duration> {
        let network = &settings.config.network;
        // A node with no RDMA adapter has nothing to read between two searches for adapters
        // (a hot-plugged one shows at the next, as on a node with some): the source wakes only
        // for those, not every `network.interval` (measured: a third of the runtime's wake-ups
        // on a node without RDMA hardware; docs/performance.md).
        let none_found = self
            .found
            .as_ref()
            .is_some_and(|(adapters, _, root)| adapters.is_empty() && *root == settings.sys_root);
        let period = if none_found {
            FIND_AGAIN_EVERY.max(network.interval)
        } else {
            network.interval
        };
        network.enabled.then_some(period)
    }

    fn read(&mut self, settings: &Settings) -> NicScan {
        let root = &settings.sys_root;
        let fresh =
            |found: &(Adapters, Instant, std::path::PathBuf)| found.1.elapsed() < FIND_AGAIN_EVERY && found.2 == *root;
        let (adapters, at, _) = match self.found.take() {
            Some(kept) if fresh(&kept) => kept,
            stale => {
                let known = stale
                    .filter(|(_, _, known_root)| known_root == root)
                    .map(|(known, ..)| known);
                let (Ok(adapters) | Err(adapters)) = find_again(root, known);
                (adapters, Instant::now(), root.clone())
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
            let adapters = match find_again(root, Some(adapters)) {
                Ok(found) => found,
                // Kept: this read stands, a vanished port in it reads as down.
                Err(known) => {
                    self.found = Some((known, at, root.clone()));
                    return scan;
                }
            };
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

/// The adapters found again under `root`; `Err(known)` where the class directory held more
/// entries than are looked at (counted as skipped) and so may hide real adapters: the ones
/// known are kept rather than a list that may miss them.
fn find_again(root: &std::path::Path, known: Option<Adapters>) -> Result<Adapters, Adapters> {
    let found = infiniband::discover(root, &infiniband::gpu_places(root));
    match known {
        Some(known) if found.overflowed() && !known.is_empty() => Err(known),
        _ => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ndr-ib fixture tree, settings reading it, and a source that has read its four
    /// adapters once.
    fn ndr_source() -> (tempfile::TempDir, std::path::PathBuf, Settings, NicPorts) {
        let (dir, root) = crate::input::infiniband::fixture("ndr-ib");
        let mut config = crate::config::Config::default();
        config.amd.sysfs_root = root.clone();
        let settings = Settings::serving_nothing(config);
        let mut source = NicPorts::default();
        assert_eq!(source.read(&settings).devices.len(), 4);
        (dir, root, settings, source)
    }

    #[test]
    fn what_changes_is_read_each_time_and_a_gone_adapter_is_found_again_at_once() {
        let (_dir, root, settings, mut source) = ndr_source();
        let dev1 = std::fs::canonicalize(root.join("sys/class/infiniband/mlx5_1")).unwrap();
        std::fs::write(dev1.join("ports/1/state"), "1: DOWN\n").unwrap();
        std::fs::write(dev1.join("ports/1/counters/link_downed"), "7\n").unwrap();
        std::fs::write(dev1.join("ports/1/counters/symbol_error"), "99\n").unwrap();
        let scan = source.read(&settings);
        let port = &scan.devices[1].ports[0];
        assert_eq!(port.up(), Some(false), "the state is read each time");
        assert_eq!(
            port.counter(crate::model::nic::PortCounter::LinkDowned),
            Some(7),
            "so is link_downed"
        );
        assert_eq!(
            port.counter(crate::model::nic::PortCounter::SymbolError),
            Some(0),
            "the others once a minute"
        );
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

    /// 50,000 entries in class/infiniband (here: more than are looked at) and a port that
    /// vanishes: the known adapters stay, the vanished port reads as down (issue #51, item 8:
    /// every port, and a standing finding, had vanished).
    #[test]
    fn a_flooded_class_directory_keeps_the_known_adapters() {
        let (_dir, root, settings, mut source) = ndr_source();
        let class = root.join("sys/class/infiniband");
        for i in 0..5000 {
            std::os::unix::fs::symlink(root.join("nowhere"), class.join(format!("z_{i:05}"))).unwrap();
        }
        let dev1 = std::fs::canonicalize(class.join("mlx5_1")).unwrap();
        std::fs::remove_dir_all(dev1.join("ports/1")).unwrap();
        for _ in 0..2 {
            let scan = source.read(&settings);
            let names: Vec<&str> = scan.devices.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]);
            assert_eq!(scan.devices[1].ports[0].up(), Some(false));
            assert_eq!(scan.devices[0].ports[0].up(), Some(true));
        }
    }

    #[test]
    fn a_node_without_rdma_adapters_is_looked_at_only_when_adapters_are_searched_for() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = crate::config::Config::default();
        config.amd.sysfs_root = dir.path().to_path_buf();
        let settings = Settings::serving_nothing(config);
        let mut source = NicPorts::default();
        assert_eq!(
            source.every(&settings),
            Some(settings.config.network.interval),
            "before the first look"
        );
        assert!(source.read(&settings).devices.is_empty());
        assert_eq!(source.every(&settings), Some(FIND_AGAIN_EVERY));
        let (_fixture, root) = crate::input::infiniband::fixture("ndr-ib");
        let mut with_ports = settings.config.clone();
        with_ports.amd.sysfs_root = root;
        let with_ports = Settings::serving_nothing(with_ports);
        assert_eq!(
            source.every(&with_ports),
            Some(with_ports.config.network.interval),
            "another root is searched at the usual pace"
        );
        assert_eq!(source.read(&with_ports).devices.len(), 4);
        assert_eq!(source.every(&with_ports), Some(with_ports.config.network.interval));
    }
}
