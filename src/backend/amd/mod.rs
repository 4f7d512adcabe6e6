//! AMD GPUs. The amdgpu sysfs backend needs no library: hwmon, the `gpu_metrics` table, the
//! PCI device's link files and the RAS counters under /sys/class/drm/cardN/device. Where ROCm
//! SMI is installed it reads the GPUs it sees, each paired with its sysfs twin for what ROCm
//! SMI lacks; the rest stay with sysfs.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `gpu_metrics.rs` | The `gpu_metrics` file amdgpu exposes in sysfs: a binary table whose layout the kernel defines per (format, content) revision in include/kgd_pp_interface.h |
//! | `rocm_smi.rs` | ROCm SMI (librocm_smi64), loaded at run time with libloading: the binary builds and starts where ROCm is not installed |
//! | `sysfs.rs` | The amdgpu sysfs backend: every reading from files under `amd.sysfs_root` (`/` by default; tests and users point it at a copy of the tree) |
//! <!-- /files -->

pub mod gpu_metrics;
pub(crate) mod rocm_smi;
pub(crate) mod sysfs;

use crate::backend::{Backend, BackendState, DevicePoller};
use crate::config::Amd;

/// AMD's [`Backend`]: GPUs are enumerated once, at the first discovery (no hot-plug).
pub struct AmdBackend {
    config: Amd,
    enumerated: bool,
    sysfs_up: bool,
    /// The tree was read and no amdgpu driver is loaded: no AMD GPU on this node.
    driver_absent: bool,
    rocm_smi_tried: bool,
    rocm_smi_up: bool,
}

impl AmdBackend {
    pub fn new(config: &Amd) -> AmdBackend {
        AmdBackend {
            config: config.clone(),
            enumerated: false,
            sysfs_up: false,
            driver_absent: false,
            rocm_smi_tried: false,
            rocm_smi_up: false,
        }
    }

    /// ROCm SMI takes the GPUs it sees out of `sysfs_pollers` (each ROCm poller keeps its
    /// sysfs twin for what ROCm SMI does not read); those it does not see stay with sysfs.
    fn start_rocm_smi(&mut self, sysfs_pollers: &mut Vec<sysfs::SysfsDevicePoller>) -> Vec<Box<dyn DevicePoller>> {
        match rocm_smi::load(&self.config.rocm_smi.library_path) {
            Ok(smi) => {
                let driver_version = sysfs_pollers
                    .first()
                    .map(|p| p.identity().driver_version.clone())
                    .unwrap_or_default();
                let pollers = rocm_smi::device_pollers(smi, sysfs_pollers, &driver_version);
                log::info!("ROCm SMI {} ready: {} AMD GPU(s)", smi.version, pollers.len());
                self.rocm_smi_up = true;
                pollers
                    .into_iter()
                    .map(|p| Box::new(p) as Box<dyn DevicePoller>)
                    .collect()
            }
            // Most nodes have no ROCm: not a warning. The sysfs backend reads AMD GPUs then.
            Err(e) => {
                log::info!("ROCm SMI not used ({e}); AMD GPUs, if any, are read from sysfs");
                Vec::new()
            }
        }
    }
}

impl Backend for AmdBackend {
    fn status(&self) -> Vec<BackendState> {
        let note = if self.driver_absent {
            "no amdgpu driver is loaded (no AMD GPU to read)"
        } else {
            "the amdgpu sysfs tree cannot be read (see the log)"
        };
        let mut status = vec![BackendState {
            name: sysfs::BACKEND,
            up: self.sysfs_up,
            note: (!self.sysfs_up).then_some(note),
            absent: self.driver_absent,
        }];
        // ROCm SMI is only tried where sysfs shows AMD GPUs: on other nodes it is not in use
        // at all (and its library would print errors about the missing driver).
        if let Some(up) = self.rocm_smi_tried.then_some(self.rocm_smi_up) {
            status.push(BackendState {
                name: rocm_smi::BACKEND,
                up,
                note: (!up).then_some("ROCm SMI could not be loaded or initialised; sysfs reads the AMD GPUs"),
                absent: false,
            });
        }
        status
    }

    /// A tree that cannot be read leaves the backend down; a node without AMD GPUs has it up
    /// with none.
    fn discover(&mut self) -> Option<Vec<Box<dyn DevicePoller>>> {
        if self.enumerated {
            return None;
        }
        self.enumerated = true;
        let root = self.config.sysfs_root.clone();
        match sysfs::device_pollers(&root) {
            Ok(mut sysfs_pollers) => {
                let mut pollers = if self.config.rocm_smi.enabled && !sysfs_pollers.is_empty() {
                    self.rocm_smi_tried = true;
                    self.start_rocm_smi(&mut sysfs_pollers)
                } else {
                    Vec::new()
                };
                if !sysfs_pollers.is_empty() {
                    log::info!(
                        "amdgpu sysfs: {} AMD GPU(s) under {}",
                        sysfs_pollers.len(),
                        root.display()
                    );
                }
                pollers.extend(sysfs_pollers.into_iter().map(|p| Box::new(p) as Box<dyn DevicePoller>));
                // Up when the amdgpu driver is loaded: without it sysfs has nothing to read.
                self.sysfs_up = sysfs::driver_loaded(&root);
                self.driver_absent = !self.sysfs_up;
                Some(pollers)
            }
            Err(e) => {
                log::warn!(
                    "cannot read {} ({e}): no AMD GPU metrics; on a node without AMD GPUs set amd.enabled: false",
                    sysfs::drm_dir(&root).display()
                );
                None
            }
        }
    }
}

impl DevicePoller for sysfs::SysfsDevicePoller {
    fn identity(&self) -> &crate::model::DeviceIdentity {
        sysfs::SysfsDevicePoller::identity(self)
    }
    fn backend_name(&self) -> &'static str {
        sysfs::BACKEND
    }
    fn poll(&mut self) -> crate::backend::PollReport {
        sysfs::SysfsDevicePoller::poll(self)
    }
}

impl DevicePoller for rocm_smi::RocmDevicePoller {
    fn identity(&self) -> &crate::model::DeviceIdentity {
        rocm_smi::RocmDevicePoller::identity(self)
    }
    fn backend_name(&self) -> &'static str {
        rocm_smi::BACKEND
    }
    fn poll(&mut self) -> crate::backend::PollReport {
        rocm_smi::RocmDevicePoller::poll(self)
    }
}
