//! Sorting the results of NVML calls into values, unsupported readings and failures, and
//! timing them.

use crate::backend::PollReport;
use nvml_wrapper::error::NvmlError;
use std::time::{Duration, Instant};

/// What the calls of one poll came to, beside their values.
#[derive(Debug, Default)]
pub(crate) struct CallErrors {
    pub errors: Vec<(&'static str, String)>,
    /// Set once any call said the GPU is lost.
    pub lost: bool,
    /// Set once any call said NVML is not initialised or the driver is not loaded.
    pub library_gone: bool,
    /// Time spent inside the calls made through `read`.
    pub call_time: Duration,
    /// The same by call name.
    pub call_times: Vec<(&'static str, f64)>,
}

impl CallErrors {
    /// The value of a call, or `None` when the device does not support it (left out of the
    /// output) or the call failed (recorded, and counted by the caller).
    pub(crate) fn read<T>(
        &mut self,
        call: &'static str,
        make_call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        let started = Instant::now();
        let result = make_call();
        let took = started.elapsed();
        self.call_time += took;
        match self.call_times.iter_mut().find(|(name, _)| *name == call) {
            Some((_, seconds)) => *seconds += took.as_secs_f64(),
            None => self.call_times.push((call, took.as_secs_f64())),
        }
        match result {
            Ok(value) => Some(value),
            // An older driver without the symbol simply does not offer the reading.
            Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => None,
            Err(e) => {
                if matches!(e, NvmlError::GpuLost) {
                    self.lost = true;
                }
                if matches!(e, NvmlError::Uninitialized | NvmlError::DriverNotLoaded) {
                    self.library_gone = true;
                }
                self.errors.push((call, e.to_string()));
                None
            }
        }
    }

    /// The report of a poll that could not reach the device (lost, or NVML gone).
    pub(crate) fn into_lost_report(self) -> PollReport {
        PollReport {
            readings: None,
            library_gone: self.library_gone,
            call_seconds: self.call_time.as_secs_f64(),
            call_times: self.call_times,
            errors: self.errors,
            persistence: None,
        }
    }
}
