//! Clock-event (throttle) reasons: NVML's bit mask, and the label values the metrics use.
//!
//! NVML reports why the clocks are below their maximum as a bit mask
//! (`nvmlDeviceGetCurrentClocksEventReasons`) and says which bits the device can report at
//! all (`...SupportedClocksEventReasons`). We emit one 0/1 series per *supported* reason, so
//! a dashboard can tell "not throttled" from "cannot tell".

use crate::model::ClockEvent;

/// NVML's reason bits (nvml.h, `nvmlClocksEventReason*`) and our label for each.
pub const NVIDIA_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The reasons that mean the GPU is too hot: what GpuThermalViolation alerts on.
pub const THERMAL_REASONS: [&str; 2] = ["sw_thermal_slowdown", "hw_thermal_slowdown"];

/// One [`ClockEvent`] per supported reason, active when its bit is set in `active`.
pub fn decode_nvidia(active: u64, supported: u64) -> Vec<ClockEvent> {
    NVIDIA_REASONS
        .iter()
        .filter(|(bit, _)| supported & bit != 0)
        .map(|(bit, reason)| ClockEvent {
            reason,
            active: active & bit != 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h200_mask_under_power_cap() {
        // Read on an H200 under a sustained bf16 matmul: supported 511, active 4.
        let events = decode_nvidia(0x4, 511);
        assert_eq!(events.len(), 9);
        let active: Vec<_> = events.iter().filter(|e| e.active).map(|e| e.reason).collect();
        assert_eq!(active, vec!["sw_power_cap"]);
    }

    #[test]
    fn unsupported_reasons_are_left_out() {
        let events = decode_nvidia(0x40 | 0x20, 0x40 | 0x4);
        let reasons: Vec<_> = events.iter().map(|e| (e.reason, e.active)).collect();
        assert_eq!(reasons, vec![("sw_power_cap", false), ("hw_thermal_slowdown", true)]);
    }
}
