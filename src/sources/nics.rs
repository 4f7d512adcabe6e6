//! The node's InfiniBand and RoCE ports as a source: every `network.interval` (10 s), a read
//! of each RDMA device's ports under /sys/class/infiniband (crate::input::infiniband). Where
//! the GPUs sit in the PCI tree changes only at hot-plug, so it is looked up again only every
//! [`GPU_PLACES_EVERY`] or when the set of adapters changes.

use super::Periodic;
use crate::config::settings::Settings;
use crate::input::infiniband::{self, GpuPlaces};
use crate::model::nic::NicScan;
use std::time::{Duration, Instant};

/// How long the GPUs' places in the PCI tree are kept before they are read again.
pub const GPU_PLACES_EVERY: Duration = Duration::from_secs(300);

#[derive(Default)]
pub struct NicPorts {
    /// The GPUs' places, when they were read, and the adapters they were read for.
    places: Option<(GpuPlaces, Instant, Vec<Option<String>>)>,
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
        let fresh = |places: &(GpuPlaces, Instant, Vec<Option<String>>)| places.1.elapsed() < GPU_PLACES_EVERY;
        let places = match self.places.take().filter(fresh) {
            Some(kept) => kept,
            None => (infiniband::gpu_places(root), Instant::now(), Vec::new()),
        };
        let scan = infiniband::read_nics(root, &places.0);
        let adapters: Vec<Option<String>> = scan.devices.iter().map(|d| d.pci_bus_id.clone()).collect();
        if !places.2.is_empty() && places.2 != adapters {
            // An adapter came or went (hot-plug, a driver reload): look at the GPUs again now.
            self.places = None;
            return self.read(settings);
        }
        self.places = Some((places.0, places.1, adapters));
        scan
    }
}
