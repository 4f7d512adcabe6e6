//! Backends: one per vendor library, each turning vendor calls into vendor-neutral readings.
//!
//! A backend enumerates its GPUs and hands out one device poller per GPU; the poller
//! (poller.rs) runs each on a thread of its own. A poll returns a [`PollReport`]: the
//! readings, the calls that failed, and what happened to persistence mode.

pub mod amd;
pub mod nvml;

use crate::model::{DeviceIdentity, DeviceReadings};

/// One GPU of one backend, polled on a thread of its own.
pub trait DevicePoller: Send {
    fn identity(&self) -> &DeviceIdentity;
    /// Reads every supported value once. Never panics and never blocks the caller for long
    /// on purpose; a vendor call that hangs is what the poller's deadline is for.
    fn poll(&mut self) -> PollReport;
}

impl DevicePoller for nvml::NvmlDevicePoller {
    fn identity(&self) -> &DeviceIdentity {
        nvml::NvmlDevicePoller::identity(self)
    }
    fn poll(&mut self) -> PollReport {
        nvml::NvmlDevicePoller::poll(self)
    }
}

impl DevicePoller for amd::sysfs::SysfsDevicePoller {
    fn identity(&self) -> &DeviceIdentity {
        amd::sysfs::SysfsDevicePoller::identity(self)
    }
    fn poll(&mut self) -> PollReport {
        amd::sysfs::SysfsDevicePoller::poll(self)
    }
}

/// What an attempt to turn persistence mode on came to; counted by result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistenceOutcome {
    Enabled,
    NotPermitted,
    Failed,
}

impl PersistenceOutcome {
    pub fn label(self) -> &'static str {
        match self {
            PersistenceOutcome::Enabled => "enabled",
            PersistenceOutcome::NotPermitted => "not_permitted",
            PersistenceOutcome::Failed => "failed",
        }
    }
}

/// The result of one poll of one device.
#[derive(Debug, Default)]
pub struct PollReport {
    /// `None` when the device could not be reached at all (lost, fallen off the bus).
    pub readings: Option<DeviceReadings>,
    /// (call, error) for every call that failed. "Not supported" is not a failure.
    pub errors: Vec<(&'static str, String)>,
    pub persistence: Option<PersistenceOutcome>,
    /// NVML answered "uninitialized" or "driver not loaded": the driver went away under us
    /// (an unload for an upgrade); the handles are no longer good.
    pub nvml_gone: bool,
    /// Time spent inside vendor calls during this poll: the floor under the poll's wall time.
    pub call_seconds: f64,
}

impl PollReport {
    pub fn lost(calls: CallErrors) -> PollReport {
        PollReport {
            readings: None,
            nvml_gone: calls.nvml_gone,
            call_seconds: calls.call_time.as_secs_f64(),
            errors: calls.errors,
            persistence: None,
        }
    }
}

/// Sorts the results of vendor calls into values, unsupported readings and failures.
#[derive(Debug, Default)]
pub struct CallErrors {
    pub errors: Vec<(&'static str, String)>,
    /// Set once any call said the GPU is lost.
    pub lost: bool,
    /// Set once any call said NVML is not initialised or the driver is not loaded.
    pub nvml_gone: bool,
    /// Time spent inside the calls made through `read`.
    pub call_time: std::time::Duration,
}

impl CallErrors {
    /// The value of a call, or `None` when the device does not support it (left out of the
    /// output) or the call failed (recorded, and counted by the caller).
    pub fn read<T>(
        &mut self,
        call: &'static str,
        make_call: impl FnOnce() -> Result<T, nvml_wrapper::error::NvmlError>,
    ) -> Option<T> {
        use nvml_wrapper::error::NvmlError;
        let started = std::time::Instant::now();
        let result = make_call();
        self.call_time += started.elapsed();
        match result {
            Ok(value) => Some(value),
            // An older driver without the symbol simply does not offer the reading.
            Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => None,
            Err(e) => {
                if matches!(e, NvmlError::GpuLost) {
                    self.lost = true;
                }
                if matches!(e, NvmlError::Uninitialized | NvmlError::DriverNotLoaded) {
                    self.nvml_gone = true;
                }
                self.errors.push((call, e.to_string()));
                None
            }
        }
    }
}

impl DevicePoller for amd::rocm_smi::RocmDevicePoller {
    fn identity(&self) -> &DeviceIdentity {
        amd::rocm_smi::RocmDevicePoller::identity(self)
    }
    fn poll(&mut self) -> PollReport {
        amd::rocm_smi::RocmDevicePoller::poll(self)
    }
}
