//! GPU processes of the GPUs whose driver keeps no list (AMD), from the kernel's DRM client
//! statistics in /proc: walked every `drm_clients::SCAN_EVERY` on a thread of its own, and
//! only while the latest snapshot has such a GPU.

use super::Periodic;
use super::round::PolledGpus;
use crate::attribution::drm_clients;
use crate::config::settings::Settings;
use crate::input::{Input, Skips};
use crate::model::{GpuProcess, Vendor};
use crate::service::logging::Outage;
use crate::service::versioned::Versioned;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Processes by PCI bus id; `None`: the walk could not see every process (a short list is not
/// shown), or there was no walk.
pub(crate) type DrmScan = Option<BTreeMap<String, Vec<GpuProcess>>>;

pub(crate) struct DrmClients {
    polled: Arc<Versioned<PolledGpus>>,
    /// Whether the walk failed last time (its warning is given).
    outage: Outage,
}

impl DrmClients {
    pub(crate) fn new(polled: Arc<Versioned<PolledGpus>>) -> DrmClients {
        DrmClients {
            polled,
            outage: Outage::default(),
        }
    }
}

/// Whether a GPU's processes come from the DRM client walk: its driver keeps no list.
pub(crate) fn wants_drm_clients(vendor: Vendor) -> bool {
    vendor == Vendor::Amd
}

/// How often the DRM-client source looks for AMD GPUs once the first round is published.
const LOOK_AGAIN_AFTER_START: Duration = Duration::from_secs(30);

impl Periodic for DrmClients {
    type Value = DrmScan;
    const NAME: &'static str = "source-drm-clients";

    fn every(&self, _settings: &Settings) -> Option<Duration> {
        let wanted = self.polled.get().gpus.iter().any(|gpu| wants_drm_clients(gpu.vendor));
        wanted.then_some(drm_clients::SCAN_EVERY)
    }

    /// AMD GPUs appear with the first poll round after start, not with a reload: look again
    /// every second until that round, then every half minute (a GPU that comes later, after
    /// a driver load, is seen within that).
    fn look_again_while_off(&self) -> Option<Duration> {
        super::look_again_after_the_first_round(&self.polled, LOOK_AGAIN_AFTER_START)
    }

    fn read(&mut self, settings: &Settings) -> DrmScan {
        let proc_root = &settings.config.processes.proc_root;
        let scanned = drm_clients::scan(proc_root, &mut Skips::new(Input::Proc));
        match &scanned {
            Ok(_) => self.outage.recovered(format!(
                "the process list of GPUs whose driver keeps none (AMD) can be read from {} again",
                proc_root.display()
            )),
            Err(why) => self.outage.failed(format!(
                "no process list for GPUs whose driver keeps none (AMD): {why}; it needs root with \
                 CAP_SYS_PTRACE (docs/metrics.md)"
            )),
        }
        let mut by_gpu = scanned.ok()?;
        let processes = &settings.config.processes;
        if processes.per_process {
            let mut skips = Skips::new(Input::Proc);
            for list in by_gpu.values_mut() {
                crate::attribution::processes::describe_list(list, processes, &mut skips);
            }
        }
        Some(by_gpu)
    }
}
