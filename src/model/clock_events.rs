//! Clock-event (throttle) reasons: NVML's bit mask, amdgpu's ASIC-independent throttler
//! bits, and the label values the metrics use.
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

/// Reasons that mean the board's hardware pulled the clocks down for power: the slowdown
/// signal (power supply, over-current) and the external power brake. Frequent ones point at
/// the PSU, the power cables or the board.
pub const HW_POWER_REASONS: [&str; 2] = ["hw_slowdown", "hw_power_brake_slowdown"];

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

/// amdgpu's ASIC-independent throttler bits (amdgpu_smu.h, `SMU_THROTTLER_*`) grouped into
/// reasons. Where the meaning is NVIDIA's, the name is too: a firmware power limit is
/// `sw_power_cap`, a firmware temperature limit `sw_thermal_slowdown`, a voltage regulator's
/// over-temperature signal `hw_thermal_slowdown`, PROCHOT `hw_slowdown`. The rest keep AMD's
/// meaning under names of their own: current limits (TDC, EDC), APCC, PPM and FIT
/// (the firmware's reliability limit).
pub const AMD_REASONS: [(u64, &str); 8] = [
    (0xff, "sw_power_cap"),               // PPT0-3, SPL, FPPT, SPPT, SPPT_APU
    (0x7f << 16, "current_limit"),        // TDC GFX/SOC/MEM/VDD/CVIP, EDC CPU/GFX
    (1 << 23, "apcc"),                    // APCC
    (0xfff << 32, "sw_thermal_slowdown"), // TEMP_GPU .. TEMP_LIQUID1
    (0b11 << 44, "hw_thermal_slowdown"),  // VRHOT0, VRHOT1
    (0b11 << 46, "hw_slowdown"),          // PROCHOT CPU, PROCHOT GFX
    (1 << 56, "ppm"),                     // PPM
    (1 << 57, "fit_limit"),               // FIT
];

/// Every AMD reason, active when any of its bits is set. The driver reports all of them
/// (there is no "supported" mask), so all are listed.
pub fn decode_amd(status: u64) -> Vec<ClockEvent> {
    AMD_REASONS
        .iter()
        .map(|(bits, reason)| ClockEvent {
            reason,
            active: status & bits != 0,
        })
        .collect()
}

/// dcgm-exporter's names for NVIDIA's reasons (the `clock_event` label of its
/// `DCGM_EXP_CLOCK_EVENTS_*`), by ours.
pub const DCGM_NAMES: [(&str, &str); 9] = [
    ("gpu_idle", "gpu_idle"),
    ("applications_clocks_setting", "clocks_setting"),
    ("sw_power_cap", "power_cap"),
    ("hw_slowdown", "hw_slowdown"),
    ("sync_boost", "sync_boost"),
    ("sw_thermal_slowdown", "sw_thermal"),
    ("hw_thermal_slowdown", "hw_thermal"),
    ("hw_power_brake_slowdown", "hw_power_brake"),
    ("display_clock_setting", "display_clocks"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_bits_map_onto_shared_and_own_reasons() {
        let active = |status: u64| -> Vec<&str> {
            decode_amd(status)
                .into_iter()
                .filter(|e| e.active)
                .map(|e| e.reason)
                .collect()
        };
        assert_eq!(decode_amd(0).len(), 8);
        assert!(active(0).is_empty());
        assert_eq!(active(1 << 4), ["sw_power_cap"]); // SPL
        assert_eq!(active(1 << 36), ["sw_thermal_slowdown"]); // hotspot temperature
        assert_eq!(active(1 << 44 | 1 << 47), ["hw_thermal_slowdown", "hw_slowdown"]);
        assert_eq!(active(1 << 16 | 1 << 57), ["current_limit", "fit_limit"]);
        // Bits no reason claims are not reported as anything.
        assert!(active(1 << 8 | 1 << 30 | 1 << 63).is_empty());
    }

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
