//! The PCI census as a source: the GPUs on the bus, looked at every [`LOOK_EVERY`] with
//! `pci_census` on (they change at boot and at hot-plug; each look reads a few hundred small
//! files under /sys).

use super::Periodic;
use crate::config::settings::Settings;
use crate::model::PciGpu;
use std::time::Duration;

pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(30);

pub(crate) struct PciCensus;

impl Periodic for PciCensus {
    type Value = Vec<PciGpu>;
    const NAME: &'static str = "source-pci";

    fn every(&self, settings: &Settings) -> Option<Duration> {
        settings.config.pci_census.then_some(LOOK_EVERY)
    }

    fn read(&mut self, settings: &Settings) -> Vec<PciGpu> {
        // `/` on a host, a fixture tree in tests.
        crate::input::pci::gpus_on_the_bus(&settings.sys_root)
    }
}
