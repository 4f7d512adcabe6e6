//! Clock-event (throttle) reasons: NVML's bit mask, amdgpu's ASIC-independent throttler
//! bits, and the label values the metrics use.
//!
//! NVML reports why the clocks are below their maximum as a bit mask
//! (`nvmlDeviceGetCurrentClocksEventReasons`) and says which bits the device can report at
//! all (`...SupportedClocksEventReasons`). We emit one 0/1 series per *supported* reason, so
//! a dashboard can tell "not throttled" from "cannot tell".

use crate::model::label::label_enum;
use serde::Serialize;

label_enum! {
    /// Why the clocks are below their maximum: the `reason` label of `gpu_clock_event_*`.
    /// NVIDIA's reasons by NVML's names; AMD's where they mean the same under the same name,
    /// and AMD's own (`current_limit`, `apcc`, `ppm`, `fit_limit`) otherwise.
    pub enum ClockReason {
        GpuIdle => "gpu_idle",
        ApplicationsClocksSetting => "applications_clocks_setting",
        SwPowerCap => "sw_power_cap",
        HwSlowdown => "hw_slowdown",
        SyncBoost => "sync_boost",
        SwThermalSlowdown => "sw_thermal_slowdown",
        HwThermalSlowdown => "hw_thermal_slowdown",
        HwPowerBrakeSlowdown => "hw_power_brake_slowdown",
        DisplayClockSetting => "display_clock_setting",
        CurrentLimit => "current_limit",
        Apcc => "apcc",
        Ppm => "ppm",
        FitLimit => "fit_limit",
    }
}

impl ClockReason {
    /// dcgm-exporter's name (the `clock_event` label of its `DCGM_EXP_CLOCK_EVENTS_*`), for
    /// NVIDIA's reasons; AMD's own have none.
    pub const fn dcgm_name(self) -> Option<&'static str> {
        Some(match self {
            ClockReason::GpuIdle => "gpu_idle",
            ClockReason::ApplicationsClocksSetting => "clocks_setting",
            ClockReason::SwPowerCap => "power_cap",
            ClockReason::HwSlowdown => "hw_slowdown",
            ClockReason::SyncBoost => "sync_boost",
            ClockReason::SwThermalSlowdown => "sw_thermal",
            ClockReason::HwThermalSlowdown => "hw_thermal",
            ClockReason::HwPowerBrakeSlowdown => "hw_power_brake",
            ClockReason::DisplayClockSetting => "display_clocks",
            ClockReason::CurrentLimit | ClockReason::Apcc | ClockReason::Ppm | ClockReason::FitLimit => return None,
        })
    }
}

/// How often one clock-event reason became active (seen inactive, then active, poll to poll).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockEventStarts {
    pub reason: ClockReason,
    pub total: u64,
    /// Within the last `xid::RECENT_WINDOW` (5 minutes).
    pub recent: u64,
}

/// One clock-event (throttle) reason the device supports, and whether it is active now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClockEvent {
    pub reason: ClockReason,
    pub active: bool,
}

/// NVML's reason bits (nvml.h, `nvmlClocksEventReason*`) and the reason of each.
pub(crate) const NVIDIA_REASONS: [(u64, ClockReason); 9] = [
    (0x1, ClockReason::GpuIdle),
    (0x2, ClockReason::ApplicationsClocksSetting),
    (0x4, ClockReason::SwPowerCap),
    (0x8, ClockReason::HwSlowdown),
    (0x10, ClockReason::SyncBoost),
    (0x20, ClockReason::SwThermalSlowdown),
    (0x40, ClockReason::HwThermalSlowdown),
    (0x80, ClockReason::HwPowerBrakeSlowdown),
    (0x100, ClockReason::DisplayClockSetting),
];

/// The reasons that mean the GPU is too hot: what GpuThermalViolation alerts on.
pub(crate) const THERMAL_REASONS: [ClockReason; 2] = [ClockReason::SwThermalSlowdown, ClockReason::HwThermalSlowdown];

/// Reasons that mean the board's hardware pulled the clocks down for power: the slowdown
/// signal (power supply, over-current) and the external power brake. Frequent ones point at
/// the PSU, the power cables or the board.
pub(crate) const HW_POWER_REASONS: [ClockReason; 2] = [ClockReason::HwSlowdown, ClockReason::HwPowerBrakeSlowdown];

/// One [`ClockEvent`] per supported reason, active when its bit is set in `active`.
pub(crate) fn decode_nvidia(active: u64, supported: u64) -> Vec<ClockEvent> {
    NVIDIA_REASONS
        .iter()
        .filter(|(bit, _)| supported & bit != 0)
        .map(|&(bit, reason)| ClockEvent {
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
pub(crate) const AMD_REASONS: [(u64, ClockReason); 8] = [
    (0xff, ClockReason::SwPowerCap),               // PPT0-3, SPL, FPPT, SPPT, SPPT_APU
    (0x7f << 16, ClockReason::CurrentLimit),       // TDC GFX/SOC/MEM/VDD/CVIP, EDC CPU/GFX
    (1 << 23, ClockReason::Apcc),                  // APCC
    (0xfff << 32, ClockReason::SwThermalSlowdown), // TEMP_GPU .. TEMP_LIQUID1
    (0b11 << 44, ClockReason::HwThermalSlowdown),  // VRHOT0, VRHOT1
    (0b11 << 46, ClockReason::HwSlowdown),         // PROCHOT CPU, PROCHOT GFX
    (1 << 56, ClockReason::Ppm),                   // PPM
    (1 << 57, ClockReason::FitLimit),              // FIT
];

/// Every AMD reason, active when any of its bits is set. The driver reports all of them
/// (there is no "supported" mask), so all are listed.
pub(crate) fn decode_amd(status: u64) -> Vec<ClockEvent> {
    AMD_REASONS
        .iter()
        .map(|&(bits, reason)| ClockEvent {
            reason,
            active: status & bits != 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_bits_map_onto_shared_and_own_reasons() {
        let active = |status: u64| -> Vec<&str> {
            decode_amd(status)
                .into_iter()
                .filter(|e| e.active)
                .map(|e| e.reason.label())
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
        assert_eq!(active, vec![ClockReason::SwPowerCap]);
    }

    #[test]
    fn unsupported_reasons_are_left_out() {
        let events = decode_nvidia(0x40 | 0x20, 0x40 | 0x4);
        let reasons: Vec<_> = events.iter().map(|e| (e.reason, e.active)).collect();
        assert_eq!(
            reasons,
            vec![(ClockReason::SwPowerCap, false), (ClockReason::HwThermalSlowdown, true)]
        );
    }
}

#[cfg(test)]
mod names {
    use super::*;

    /// Each reason's label is the one the wire has always used, and dcgm-exporter's names
    /// are its nine.
    #[test]
    fn reasons_keep_their_labels_and_dcgm_names() {
        let nvidia: Vec<&str> = NVIDIA_REASONS.iter().map(|(_, r)| r.label()).collect();
        assert_eq!(
            nvidia,
            [
                "gpu_idle",
                "applications_clocks_setting",
                "sw_power_cap",
                "hw_slowdown",
                "sync_boost",
                "sw_thermal_slowdown",
                "hw_thermal_slowdown",
                "hw_power_brake_slowdown",
                "display_clock_setting",
            ]
        );
        assert!(NVIDIA_REASONS.iter().all(|(_, r)| r.dcgm_name().is_some()));
        assert!(AMD_REASONS.iter().filter(|(_, r)| r.dcgm_name().is_none()).count() == 4);
        assert_eq!(
            ClockReason::ApplicationsClocksSetting.dcgm_name(),
            Some("clocks_setting")
        );
    }
}
