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

/// Remembers, per GPU, when a hardware power slowdown was last seen: active in a round's
/// readings, or its driver counters grew since the last round that had them. The health
/// rules hold the finding for a while after (a brake that fires between polls still counts).
#[derive(Debug, Default)]
pub struct HwSlowdownTracker {
    /// Per GPU uuid: the last counter total, and when a slowdown was last seen.
    seen: std::collections::HashMap<String, (Option<f64>, Option<std::time::Instant>)>,
}

impl HwSlowdownTracker {
    /// Notes this round and writes each device's `hw_slowdown_seen`.
    pub fn track(&mut self, devices: &mut [crate::model::DeviceSnapshot]) {
        for device in devices {
            let entry = self.seen.entry(device.identity.uuid.clone()).or_default();
            if let Some(r) = device.answered() {
                let active = HW_POWER_REASONS.iter().any(|reason| r.clock_event_active(reason));
                let counters: Vec<f64> = r
                    .clock_event_seconds
                    .iter()
                    .filter(|(reason, _)| HW_POWER_REASONS.contains(reason))
                    .map(|(_, s)| *s)
                    .collect();
                let total = (!counters.is_empty()).then(|| counters.iter().sum::<f64>());
                let grew = entry.0.zip(total).is_some_and(|(before, now)| now > before);
                if active || grew {
                    entry.1 = Some(std::time::Instant::now());
                }
                if total.is_some() {
                    entry.0 = total;
                }
            }
            device.hw_slowdown_seen = entry.1;
        }
    }
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

#[derive(Debug, Default)]
struct GpuStarts {
    /// The reasons active at the last poll that answered; `None` before the first (which
    /// only primes: a reason already active at start is not a start seen).
    active: Option<Vec<&'static str>>,
    totals: std::collections::BTreeMap<&'static str, u64>,
    recent: std::collections::BTreeMap<&'static str, crate::model::recent::RecentTimes<std::time::Instant>>,
}

/// Counts, per GPU, how often each clock-event reason became active from one poll to the next
/// (edge-counted, as dcgm-exporter's `DCGM_EXP_CLOCK_EVENTS_TOTAL`): a reason that comes and
/// goes between two polls is not seen, which is why the driver's time counters
/// (`gpu_clock_event_seconds_total`) are the better signal where the GPU has them.
#[derive(Debug, Default)]
pub struct EventStartCounter {
    gpus: std::collections::HashMap<String, GpuStarts>,
}

impl EventStartCounter {
    /// Notes this round and writes each device's `clock_event_starts`; a GPU gone from the
    /// round is forgotten.
    pub fn track(&mut self, devices: &mut [crate::model::DeviceSnapshot], now: std::time::Instant) {
        self.gpus
            .retain(|uuid, _| devices.iter().any(|d| &d.identity.uuid == uuid));
        let window = crate::model::xid::RECENT_WINDOW;
        for device in devices {
            let gpu = self.gpus.entry(device.identity.uuid.clone()).or_default();
            if let Some(r) = device.answered() {
                let now_active: Vec<&'static str> =
                    r.clock_events.iter().filter(|e| e.active).map(|e| e.reason).collect();
                if let Some(before) = &gpu.active {
                    for reason in now_active.iter().filter(|r| !before.contains(r)) {
                        *gpu.totals.entry(reason).or_default() += 1;
                        gpu.recent.entry(reason).or_default().push(now);
                    }
                }
                gpu.active = Some(now_active);
            }
            // Shortly after boot the window reaches back before the clock's start: nothing
            // to forget then.
            if let Some(since) = now.checked_sub(window) {
                for times in gpu.recent.values_mut() {
                    times.forget_before(since);
                }
            }
            device.clock_event_starts = gpu
                .totals
                .iter()
                .map(|(reason, total)| crate::model::ClockEventStarts {
                    reason,
                    total: *total,
                    recent: gpu.recent.get(reason).map_or(0, |t| t.count()),
                })
                .collect();
        }
    }
}

#[cfg(test)]
mod start_tests {
    use super::*;
    use crate::model::{DeviceReadings, DeviceSnapshot, Vendor};
    use std::time::{Duration, Instant};

    fn gpu(active: &[&'static str]) -> DeviceSnapshot {
        let readings = DeviceReadings {
            clock_events: ["sw_power_cap", "hw_thermal_slowdown"]
                .into_iter()
                .map(|reason| ClockEvent {
                    reason,
                    active: active.contains(&reason),
                })
                .collect(),
            ..Default::default()
        };
        DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", readings)
    }

    #[test]
    fn starts_are_counted_from_inactive_to_active_not_at_the_first_look() {
        let mut counter = EventStartCounter::default();
        let start = Instant::now();
        let rounds: [&[&'static str]; 6] = [
            &["sw_power_cap"], // active at start: primes, not a start seen
            &["sw_power_cap"],
            &[],
            &["sw_power_cap", "hw_thermal_slowdown"],
            &["hw_thermal_slowdown"],
            &["sw_power_cap"],
        ];
        let mut last = Vec::new();
        for (i, active) in rounds.iter().enumerate() {
            let mut devices = [gpu(active)];
            counter.track(&mut devices, start + Duration::from_secs(i as u64));
            last = devices[0].clock_event_starts.clone();
        }
        let of = |reason| last.iter().find(|s| s.reason == reason).map(|s| (s.total, s.recent));
        assert_eq!(of("sw_power_cap"), Some((2, 2)));
        assert_eq!(of("hw_thermal_slowdown"), Some((1, 1)));
        // Ten minutes on, nothing new: the totals stay, the recent counts are 0.
        let mut devices = [gpu(&["sw_power_cap"])];
        counter.track(&mut devices, start + Duration::from_secs(600));
        let starts = &devices[0].clock_event_starts;
        assert!(starts.iter().all(|s| s.recent == 0), "{starts:?}");
        assert_eq!(starts.iter().map(|s| s.total).sum::<u64>(), 3);
    }
}
