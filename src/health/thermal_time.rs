//! How long each GPU's clocks were slowed for temperature within the last hour, from the
//! driver's own time counters (`gpu_clock_event_seconds_total` for `sw_thermal_slowdown` and
//! `hw_thermal_slowdown`), for the `thermal_slowdown_time` rule (docs/health.md).
//!
//! A GPU whose cooling falls short (a clogged filter, a failing fan, a cold plate that lost
//! contact) slows down again and again, often for less than a second, between two polls,
//! where the `thermal_slowdown` rule, which looks at the reasons active at a poll, sees only
//! some of it. The driver counts every nanosecond, so the time within the last hour is the
//! counter now less its value an hour ago, kept as `rates::Window` keeps the error counters
//! (one sample a minute, in milliseconds; a counter that goes back starts again).

use super::rates::{SinceClear, Window};
use crate::model::clock_events::{ClockReason, THERMAL_REASONS};
use crate::model::health::{Clears, ThermalTime};
use crate::model::{DeviceReadings, DeviceSnapshot};
use std::time::{Duration, Instant};

/// Per GPU uuid, one window per thermal counter. Kept by the health stage across rounds.
#[derive(Debug, Default)]
pub(crate) struct ThermalTimeTracker {
    gpus: SinceClear<[Window; THERMAL_REASONS.len()]>,
}

/// A counter's value in this round's readings, in whole milliseconds; `None` where the GPU
/// does not count it or the driver answered something that is not a time (negative, NaN).
fn millis(r: &DeviceReadings, reason: ClockReason) -> Option<u64> {
    let (_, seconds) = r.clock_event_seconds.iter().find(|(name, _)| *name == reason)?;
    // `as` saturates a value past u64's range; one that is not a time is left out.
    (seconds.is_finite() && *seconds >= 0.0).then(|| (seconds * 1000.0) as u64)
}

impl ThermalTimeTracker {
    /// Notes this round's thermal counters and writes each device's
    /// `history.thermal_slowdown`: the longer of the two counters' times within the last
    /// hour. A GPU that did not answer keeps its windows and has none this round; a GPU gone
    /// from the round is forgotten; a GPU an operator cleared counts from the clear.
    pub(crate) fn track(&mut self, devices: &mut [DeviceSnapshot], clears: &Clears, now: Instant) {
        self.gpus.each_answered(devices, clears, |readings, windows, history| {
            // The two counters may overlap (both reasons active at once), so their times are
            // not added: the longer one is a floor under the time the clocks were slowed.
            history.thermal_slowdown = THERMAL_REASONS
                .iter()
                .zip(windows.iter_mut())
                .filter_map(|(reason, window)| {
                    let growth = window.note(millis(readings, *reason)?, now);
                    Some(ThermalTime {
                        slowed: Duration::from_millis(growth.errors),
                        over: growth.over,
                    })
                })
                .max_by_key(|t| t.slowed);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Vendor;
    use crate::model::health::Clear;

    fn gpu(sw: Option<f64>, hw: Option<f64>) -> DeviceSnapshot {
        let mut readings = DeviceReadings::default();
        for (reason, seconds) in [
            (ClockReason::SwThermalSlowdown, sw),
            (ClockReason::HwThermalSlowdown, hw),
        ] {
            if let Some(s) = seconds {
                readings.clock_event_seconds.push((reason, s));
            }
        }
        readings.clock_event_seconds.push((ClockReason::SwPowerCap, 9.0e9));
        DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", readings)
    }

    /// Feeds (minute from the start, software counter, hardware counter) and returns the last
    /// round's time.
    fn fed(
        tracker: &mut ThermalTimeTracker,
        start: Instant,
        clears: &Clears,
        rounds: &[(u64, Option<f64>, Option<f64>)],
    ) -> Option<ThermalTime> {
        let mut last = None;
        for (minute, sw, hw) in rounds {
            let mut devices = [gpu(*sw, *hw)];
            tracker.track(&mut devices, clears, start + Duration::from_secs(minute * 60));
            last = devices[0].history.thermal_slowdown;
        }
        last
    }

    #[test]
    fn the_time_slowed_within_the_last_hour_is_the_longer_counters_growth() {
        let start = Instant::now();
        let mut tracker = ThermalTimeTracker::default();
        // 5000 s slowed before the daemon started do not count; the power cap never does.
        let time = fed(
            &mut tracker,
            start,
            &Clears::new(),
            &[
                (0, Some(5000.0), Some(0.0)),
                (10, Some(5120.0), Some(30.0)),
                (30, Some(5400.5), Some(60.0)),
            ],
        );
        assert_eq!(
            time,
            Some(ThermalTime {
                slowed: Duration::from_millis(400_500),
                over: Duration::from_secs(30 * 60)
            })
        );
        // At 65 minutes the sample of minute 0 is more than an hour old: 5400.5 less the 5120
        // of minute 10.
        let time = fed(&mut tracker, start, &Clears::new(), &[(65, Some(5400.5), Some(60.0))]);
        assert_eq!(time.map(|t| t.slowed), Some(Duration::from_millis(280_500)));
        // Two cool hours later, nothing.
        let time = fed(
            &mut tracker,
            start,
            &Clears::new(),
            &[(140, Some(5400.5), Some(60.0)), (200, Some(5400.5), Some(60.0))],
        );
        assert_eq!(time.map(|t| t.slowed), Some(Duration::ZERO));
    }

    #[test]
    fn hostile_or_missing_counters_are_left_out_and_a_reset_starts_again() {
        let start = Instant::now();
        let mut tracker = ThermalTimeTracker::default();
        let clears = Clears::new();
        assert_eq!(
            fed(&mut tracker, start, &clears, &[(0, None, None)]),
            None,
            "no counters, no time"
        );
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let time = fed(&mut tracker, start, &clears, &[(1, Some(bad), None)]);
            assert_eq!(time, None, "{bad} is not a time");
        }
        // A value past u64's milliseconds saturates rather than wrapping; then the driver
        // reloads and the counter starts from 0: counted from there, not as a huge growth.
        fed(&mut tracker, start, &clears, &[(2, None, Some(1.0e300))]);
        let time = fed(
            &mut tracker,
            start,
            &clears,
            &[(3, None, Some(2.0)), (5, None, Some(12.0))],
        );
        assert_eq!(
            time,
            Some(ThermalTime {
                slowed: Duration::from_secs(10),
                over: Duration::from_secs(120)
            })
        );
    }

    #[test]
    fn a_clear_counts_from_the_clear_and_a_gpu_gone_is_forgotten() {
        let start = Instant::now();
        let mut tracker = ThermalTimeTracker::default();
        fed(
            &mut tracker,
            start,
            &Clears::new(),
            &[(0, Some(0.0), None), (20, Some(900.0), None)],
        );
        let clears: Clears = [(
            "GPU-0".to_string(),
            Clear {
                at: 1.0e9,
                reason: "new thermal paste".into(),
                by: "uid 0".into(),
            },
        )]
        .into_iter()
        .collect();
        let time = fed(
            &mut tracker,
            start,
            &clears,
            &[(21, Some(900.0), None), (31, Some(960.0), None)],
        );
        assert_eq!(time.map(|t| t.slowed), Some(Duration::from_secs(60)));
        tracker.track(&mut [], &clears, start);
        assert_eq!(tracker.gpus.states().count(), 0);
    }
}
