//! Clock-event starts: how often each reason became active from one poll to the next, since
//! the daemon started and within the last `xid::RECENT_WINDOW` (dcgm-exporter's
//! `DCGM_EXP_CLOCK_EVENTS_TOTAL` and `_COUNT`).

use crate::model::DeviceSnapshot;
use crate::model::clock_events::ClockReason;

#[derive(Debug, Default)]
struct GpuStarts {
    /// The reasons active at the last poll that answered; `None` before the first (which
    /// only primes: a reason already active at start is not a start seen).
    active: Option<Vec<ClockReason>>,
    totals: std::collections::BTreeMap<ClockReason, u64>,
    recent: std::collections::BTreeMap<ClockReason, crate::model::recent::RecentTimes<std::time::Instant>>,
}

/// Counts, per GPU, how often each clock-event reason became active from one poll to the next
/// (edge-counted, as dcgm-exporter's `DCGM_EXP_CLOCK_EVENTS_TOTAL`): a reason that comes and
/// goes between two polls is not seen, which is why the driver's time counters
/// (`gpu_clock_event_seconds_total`) are the better signal where the GPU has them.
#[derive(Debug, Default)]
pub(crate) struct EventStartCounter {
    gpus: std::collections::HashMap<String, GpuStarts>,
}

impl EventStartCounter {
    /// Notes this round and writes each device's `clock_event_starts`; a GPU gone from the
    /// round is forgotten.
    pub(crate) fn track(&mut self, devices: &mut [DeviceSnapshot], now: std::time::Instant) {
        self.gpus
            .retain(|uuid, _| devices.iter().any(|d| &d.identity.uuid == uuid));
        let window = crate::model::xid::RECENT_WINDOW;
        for device in devices {
            let gpu = self.gpus.entry(device.identity.uuid.clone()).or_default();
            if let Some(r) = device.answered() {
                let now_active: Vec<ClockReason> =
                    r.clock_events.iter().filter(|e| e.active).map(|e| e.reason).collect();
                if let Some(before) = &gpu.active {
                    for reason in now_active.iter().filter(|r| !before.contains(r)) {
                        *gpu.totals.entry(*reason).or_default() += 1;
                        gpu.recent.entry(*reason).or_default().push(now);
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
            device.history.clock_event_starts = gpu
                .totals
                .iter()
                .map(|(reason, total)| crate::model::ClockEventStarts {
                    reason: *reason,
                    total: *total,
                    recent: gpu.recent.get(reason).map_or(0, |t| t.count()),
                })
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClockEvent, DeviceReadings, Vendor};
    use std::time::{Duration, Instant};

    fn gpu(active: &[&'static str]) -> DeviceSnapshot {
        let readings = DeviceReadings {
            clock_events: ["sw_power_cap", "hw_thermal_slowdown"]
                .into_iter()
                .map(|reason| ClockEvent {
                    reason: ClockReason::from_label(reason).unwrap(),
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
            last = devices[0].history.clock_event_starts.clone();
        }
        let of = |reason| last.iter().find(|s| s.reason == reason).map(|s| (s.total, s.recent));
        assert_eq!(of(ClockReason::SwPowerCap), Some((2, 2)));
        assert_eq!(of(ClockReason::HwThermalSlowdown), Some((1, 1)));
        // Ten minutes on, nothing new: the totals stay, the recent counts are 0.
        let mut devices = [gpu(&["sw_power_cap"])];
        counter.track(&mut devices, start + Duration::from_secs(600));
        let starts = &devices[0].history.clock_event_starts;
        assert!(starts.iter().all(|s| s.recent == 0), "{starts:?}");
        assert_eq!(starts.iter().map(|s| s.total).sum::<u64>(), 3);
    }
}
