//! What the poller hands on after each round, and how, so that it knows nothing of the stages
//! after it: the round's part of a snapshot goes to a [`RoundSink`] (the daemon and `check`
//! wire it to the publisher), and the GPUs it polled go into a versioned value
//! ([`PolledGpus`]) that the side sources a GPU turns on (the PCIe AER counts, the DRM
//! clients, the fabric manager's check) read, instead of the published snapshot.

use crate::model::{BackendStatus, DeviceSnapshot, DurationHistogram, HealthCounts, PersistenceAttempts, Vendor};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one poll round contributes to a snapshot.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoundPart {
    pub backends: Arc<BTreeMap<&'static str, BackendStatus>>,
    pub devices: Vec<DeviceSnapshot>,
    pub persistence_attempts: Arc<PersistenceAttempts>,
    pub round_duration: DurationHistogram,
}

/// Where the poller hands each round; it answers the verdict's counts after it (systemd's
/// STATUS= line), `None` where no GPU was shown.
pub(crate) type RoundSink = Box<dyn Fn(RoundPart) -> Option<HealthCounts> + Send>;

/// The GPUs the last round polled, as the side sources need them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolledGpus {
    /// Whether a round was handed on yet: until then the sources look again every second.
    pub after_first_round: bool,
    pub gpus: Vec<PolledGpu>,
}

/// One polled GPU: where it is, whose it is, whether it reports an NVLink fabric.
#[derive(Debug, Clone, PartialEq)]
pub struct PolledGpu {
    pub pci_bus_id: String,
    pub vendor: Vendor,
    pub fabric: bool,
}

impl PolledGpus {
    /// The GPUs of a round, after it.
    pub fn of(devices: &[DeviceSnapshot]) -> PolledGpus {
        PolledGpus {
            after_first_round: true,
            gpus: devices
                .iter()
                .map(|d| PolledGpu {
                    pci_bus_id: d.identity.pci_bus_id.clone(),
                    vendor: d.identity.vendor,
                    fabric: d.readings.as_ref().is_some_and(|r| r.fabric.is_some()),
                })
                .collect(),
        }
    }
}
