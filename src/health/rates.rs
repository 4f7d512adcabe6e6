//! How fast a GPU's error counters grow: the errors of the last hour, for the operator's
//! limits in `health.error_rates` (docs/health.md, "Error rates").
//!
//! The driver's counters only go up (until the driver reloads or the GPU resets), so the
//! errors within the last hour are the counter now less its value an hour ago. A sample is
//! kept a minute, so a GPU costs at most 61 samples per counter, whatever the poll interval.
//! Nothing is extrapolated: after a start or a reset the count covers less than an hour, and
//! a limit is crossed only by errors that really happened.

use crate::model::health::{Clears, ErrorCounter, ErrorGrowth, GpuHistory, Growth};
use crate::model::{DeviceReadings, DeviceSnapshot, EccScope, EccType};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How far back the errors are counted.
pub(crate) const WINDOW: Duration = Duration::from_secs(3600);
/// One sample per this long is kept.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// The counter's value in this round's readings; `None` where the GPU does not count it.
fn read(counter: ErrorCounter, r: &DeviceReadings) -> Option<u64> {
    match counter {
        ErrorCounter::EccCorrected => r.ecc_count(EccType::Corrected, EccScope::Volatile),
        ErrorCounter::Nvlink => {
            let links = r.nvlinks.as_ref()?;
            let counted = links.links.iter().any(|l| !l.errors.is_empty());
            counted.then(|| links.links.iter().map(|l| l.errors_total()).sum())
        }
        ErrorCounter::PcieReplay => r.pcie.replay_errors,
    }
}

/// One counter's samples, oldest first: the oldest is the count an hour (or less) ago.
#[derive(Debug, Default)]
pub(crate) struct Window {
    samples: VecDeque<(Instant, u64)>,
}

impl Window {
    pub(crate) fn note(&mut self, value: u64, now: Instant) -> Growth {
        if self.samples.back().is_some_and(|(_, last)| value < *last) {
            // The driver reloaded or the GPU was reset: its counters start from 0 again.
            self.samples.clear();
        }
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > WINDOW)
        {
            self.samples.pop_front();
        }
        let due = self
            .samples
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= SAMPLE_EVERY);
        if due {
            self.samples.push_back((now, value));
        }
        let (since, before) = self.samples.front().copied().unwrap_or((now, value));
        Growth {
            errors: value - before,
            over: now.saturating_duration_since(since),
        }
    }
}

/// Per GPU uuid, what a tracker counts (`S`: its windows), started afresh when an operator
/// clears the GPU after a repair and forgotten when the GPU leaves the round. The error rates
/// and the thermal time keep theirs in one.
#[derive(Debug)]
pub(crate) struct SinceClear<S> {
    /// The state, and the clear (Unix seconds) it counts from.
    gpus: HashMap<String, (S, Option<f64>)>,
}

impl<S> Default for SinceClear<S> {
    fn default() -> Self {
        SinceClear { gpus: HashMap::new() }
    }
}

impl<S: Default> SinceClear<S> {
    /// Calls `note` with each GPU of the round that answered: its readings, its state and the
    /// history to write. A GPU that did not answer keeps its state and is not noted.
    pub(crate) fn each_answered(
        &mut self,
        devices: &mut [DeviceSnapshot],
        clears: &Clears,
        mut note: impl FnMut(&DeviceReadings, &mut S, &mut GpuHistory),
    ) {
        self.gpus
            .retain(|uuid, _| devices.iter().any(|d| &d.identity.uuid == uuid));
        for device in devices {
            let uuid = device.identity.uuid.clone();
            let cleared = clears.get(&uuid).map(|c| c.at);
            let Some((readings, history)) = device.answered_with_history() else {
                continue;
            };
            let (state, counted_from) = self.gpus.entry(uuid).or_default();
            if cleared != *counted_from {
                *state = S::default();
                *counted_from = cleared;
            }
            note(readings, state, history);
        }
    }

    #[cfg(test)]
    pub(crate) fn states(&self) -> impl Iterator<Item = &S> {
        self.gpus.values().map(|(state, _)| state)
    }
}

/// Per GPU uuid, one window per counter. Kept by the health stage across rounds.
#[derive(Debug, Default)]
pub(crate) struct ErrorRateTracker {
    gpus: SinceClear<[Window; 3]>,
}

impl ErrorRateTracker {
    /// Notes this round's counters and writes each device's `error_growth`. A GPU that did
    /// not answer keeps its windows and has no growth this round (its rules are not looked
    /// at); a GPU gone from the round is forgotten; a GPU an operator cleared after a repair
    /// counts from the clear.
    pub(crate) fn track(&mut self, devices: &mut [DeviceSnapshot], clears: &Clears, now: Instant) {
        self.gpus.each_answered(devices, clears, |readings, windows, history| {
            let mut growth = ErrorGrowth::default();
            for (counter, window) in ErrorCounter::ALL.into_iter().zip(windows.iter_mut()) {
                growth.set(counter, read(counter, readings).map(|value| window.note(value, now)));
            }
            history.error_growth = growth;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EccCount, Vendor};

    fn gpu(corrected: Option<u64>, replays: Option<u64>) -> DeviceSnapshot {
        let mut readings = DeviceReadings::default();
        readings.pcie.replay_errors = replays;
        if let Some(count) = corrected {
            readings.ecc_errors.push(EccCount {
                error_type: EccType::Corrected,
                scope: EccScope::Volatile,
                count,
            });
        }
        DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", readings)
    }

    /// Feeds (minutes from the start, corrected count) and returns the last growth.
    fn fed(tracker: &mut ErrorRateTracker, start: Instant, rounds: &[(u64, u64)]) -> Growth {
        let mut last = None;
        for (minute, count) in rounds {
            let mut devices = [gpu(Some(*count), None)];
            tracker.track(&mut devices, &Clears::new(), start + Duration::from_secs(minute * 60));
            last = devices[0].history.error_growth.get(ErrorCounter::EccCorrected);
        }
        last.unwrap()
    }

    #[test]
    fn the_errors_of_the_last_hour_are_counted_and_older_ones_drop_out() {
        let start = Instant::now();
        let mut tracker = ErrorRateTracker::default();
        // 1000 errors before we started do not count; 30 in the first half hour do.
        let growth = fed(&mut tracker, start, &[(0, 1000), (10, 1010), (30, 1030)]);
        assert_eq!(
            growth,
            Growth {
                errors: 30,
                over: Duration::from_secs(30 * 60)
            }
        );
        // At 70 minutes the first 10 minutes are more than an hour ago.
        let growth = fed(&mut tracker, start, &[(70, 1040)]);
        assert_eq!(growth.errors, 30, "1040 less the 1010 seen at minute 10");
        assert_eq!(growth.over, Duration::from_secs(60 * 60));
        // Two quiet hours later nothing is counted.
        let growth = fed(&mut tracker, start, &[(130, 1040), (190, 1040)]);
        assert_eq!(growth.errors, 0);
    }

    #[test]
    fn a_counter_that_goes_back_starts_again_instead_of_wrapping() {
        let start = Instant::now();
        let mut tracker = ErrorRateTracker::default();
        let growth = fed(&mut tracker, start, &[(0, 500), (5, 900), (6, 3), (8, 10)]);
        assert_eq!(
            growth,
            Growth {
                errors: 7,
                over: Duration::from_secs(120)
            }
        );
    }

    #[test]
    fn a_gpu_without_the_counter_has_no_growth_and_samples_are_bounded() {
        let start = Instant::now();
        let mut tracker = ErrorRateTracker::default();
        // Polled every second for three hours: one sample a minute is kept.
        for second in 0..3 * 3600 {
            let mut devices = [gpu(Some(second), None)];
            tracker.track(&mut devices, &Clears::new(), start + Duration::from_secs(second));
            assert_eq!(devices[0].history.error_growth.get(ErrorCounter::PcieReplay), None);
            assert_eq!(devices[0].history.error_growth.get(ErrorCounter::Nvlink), None);
        }
        let kept = tracker.gpus.states().map(|windows| windows[0].samples.len()).max();
        assert!(kept <= Some(61), "{kept:?}");
        // A GPU gone from the round is forgotten.
        tracker.track(&mut [], &Clears::new(), start);
        assert_eq!(tracker.gpus.states().count(), 0);
    }

    #[test]
    fn an_operators_clear_counts_from_the_clear() {
        let start = Instant::now();
        let mut tracker = ErrorRateTracker::default();
        fed(&mut tracker, start, &[(0, 0), (10, 400)]);
        let clears: Clears = [(
            "GPU-0".to_string(),
            crate::model::health::Clear {
                at: 1.0e9,
                reason: "reseated".into(),
                by: "uid 0".into(),
            },
        )]
        .into();
        let mut growth_at = |minute: u64, count: u64| {
            let mut devices = [gpu(Some(count), None)];
            tracker.track(&mut devices, &clears, start + Duration::from_secs(minute * 60));
            devices[0]
                .history
                .error_growth
                .get(ErrorCounter::EccCorrected)
                .unwrap()
                .errors
        };
        assert_eq!(growth_at(11, 400), 0, "the 400 before the clear do not count");
        assert_eq!(growth_at(12, 405), 5);
    }
}
