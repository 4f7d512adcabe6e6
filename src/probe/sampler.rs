//! Samples the GPU through NVML while the probe runs, so the report can say what happened
//! under load: peak temperature, mean SM clock and power, and how long each clock-event
//! (throttle) reason was active. A probe that is slow because the board is power-capped or
//! too hot says so here, next to the number.
//!
//! Only samples taken while the timed windows run count (counting a GEMM's set-up too, its
//! random inputs and cuBLAS start-up, an H200's mean SM activity read 87 % against dmon's 95 %),
//! and the first of them gives no GPM activity, which it measured partly before the load.
//! A test shorter than one sample interval keeps what was sampled during its set-up.

use super::{Test, UnderLoad};
use crate::backend::nvml::NvmlDevicePoller;
use crate::model::DeviceReadings;
use crate::model::{ClockDomain, Sensor};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The few readings a probe report needs from one poll.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Sample {
    pub temperature: Option<f64>,
    pub memory_temperature: Option<f64>,
    pub sm_clock_hertz: Option<f64>,
    pub power_watts: Option<f64>,
    pub active_reasons: Vec<crate::model::clock_events::ClockReason>,
    /// GPM activity since the previous sample: SM active, tensor active, DRAM active.
    pub sm_active: Option<f64>,
    pub tensor_active: Option<f64>,
    pub dram_active: Option<f64>,
}

impl Sample {
    pub(crate) fn from_readings(r: &DeviceReadings) -> Sample {
        Sample {
            temperature: r.temperature(Sensor::Gpu),
            memory_temperature: r.temperature(Sensor::Memory),
            sm_clock_hertz: r.clock(ClockDomain::Sm),
            power_watts: r.power_watts,
            active_reasons: r.clock_events.iter().filter(|e| e.active).map(|e| e.reason).collect(),
            sm_active: r.activity.as_ref().and_then(|a| a.sm_active),
            tensor_active: r.activity.as_ref().and_then(|a| a.tensor_active),
            dram_active: r.activity.as_ref().and_then(|a| a.dram_active),
        }
    }
}

/// Peak, means and reason durations over the samples of one test; each sample stands for
/// one `interval`.
pub(crate) fn summarize(samples: &[Sample], interval: Duration) -> UnderLoad {
    fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
        let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
        (n > 0).then(|| sum / f64::from(n))
    }
    fn peak(values: impl Iterator<Item = f64>) -> Option<f64> {
        values.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    }
    let mut reasons: BTreeMap<String, f64> = BTreeMap::new();
    for sample in samples {
        for reason in &sample.active_reasons {
            *reasons.entry(reason.to_string()).or_default() += interval.as_secs_f64();
        }
    }
    UnderLoad {
        samples: samples.len() as u32,
        peak_temperature_celsius: peak(samples.iter().filter_map(|s| s.temperature)),
        peak_memory_temperature_celsius: peak(samples.iter().filter_map(|s| s.memory_temperature)),
        mean_sm_clock_hertz: mean(samples.iter().filter_map(|s| s.sm_clock_hertz)),
        mean_power_watts: mean(samples.iter().filter_map(|s| s.power_watts)),
        mean_sm_active_ratio: mean(samples.iter().filter_map(|s| s.sm_active)),
        mean_tensor_active_ratio: mean(samples.iter().filter_map(|s| s.tensor_active)),
        mean_dram_active_ratio: mean(samples.iter().filter_map(|s| s.dram_active)),
        clock_event_seconds: reasons,
    }
}

#[derive(Default)]
struct Current {
    test: Option<Test>,
    /// Samples since `begin`, or since `load_started` once it has been called.
    samples: Vec<Sample>,
    /// Samples of the set-up, kept for a test that ends before a sample under load comes.
    before_load: Option<Vec<Sample>>,
}

impl Current {
    fn push(&mut self, mut sample: Sample) {
        if self.test.is_none() {
            return;
        }
        if self.before_load.is_some() && self.samples.is_empty() {
            // Its GPM interval began before the load did.
            (sample.sm_active, sample.tensor_active, sample.dram_active) = (None, None, None);
        }
        self.samples.push(sample);
    }

    fn load_started(&mut self) {
        self.before_load = Some(std::mem::take(&mut self.samples));
    }

    fn take(&mut self) -> Vec<Sample> {
        self.test = None;
        let under_load = std::mem::take(&mut self.samples);
        match self.before_load.take() {
            Some(set_up) if under_load.is_empty() => set_up,
            _ => under_load,
        }
    }
}

/// A thread that polls one GPU every `interval` and keeps the samples of the running test.
pub(crate) struct Sampler {
    current: Arc<Mutex<Current>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    interval: Duration,
}

impl Sampler {
    pub(crate) fn start(mut poller: NvmlDevicePoller, interval: Duration) -> Sampler {
        let current = Arc::new(Mutex::new(Current::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (current.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("probe-sampler".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    let report = poller.poll();
                    if let Some(readings) = report.readings {
                        let sample = Sample::from_readings(&readings);
                        c.lock().unwrap_or_else(PoisonError::into_inner).push(sample);
                    }
                    std::thread::sleep(interval);
                }
            })
            .ok();
        Sampler {
            current,
            stop,
            thread,
            interval,
        }
    }

    /// Starts keeping samples for `test`.
    pub(crate) fn begin(&self, test: Test) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current.test = Some(test);
        current.samples.clear();
        current.before_load = None;
    }

    /// The test's set-up is done and its timed windows begin.
    pub(crate) fn load_started(&self) {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .load_started();
    }

    /// Stops keeping samples and summarises those of the test that just ended.
    pub(crate) fn end(&self) -> UnderLoad {
        let samples = self.current.lock().unwrap_or_else(PoisonError::into_inner).take();
        summarize(&samples, self.interval)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::clock_events::ClockReason;

    fn sample(temp: f64, clock_mhz: f64, watts: f64, reasons: &[&'static str]) -> Sample {
        Sample {
            temperature: Some(temp),
            memory_temperature: None,
            sm_clock_hertz: Some(clock_mhz * 1e6),
            power_watts: Some(watts),
            active_reasons: reasons.iter().map(|r| ClockReason::from_label(r).unwrap()).collect(),
            sm_active: Some(0.96),
            tensor_active: None,
            dram_active: Some(0.17),
        }
    }

    #[test]
    fn summary_of_a_power_capped_run() {
        let samples = [
            sample(40.0, 1980.0, 500.0, &[]),
            sample(55.0, 1800.0, 700.0, &["sw_power_cap"]),
            sample(61.0, 1700.0, 700.0, &["sw_power_cap"]),
            sample(60.0, 1700.0, 700.0, &["sw_power_cap", "sw_thermal_slowdown"]),
        ];
        let u = summarize(&samples, Duration::from_millis(100));
        assert_eq!(u.samples, 4);
        assert_eq!(u.peak_temperature_celsius, Some(61.0));
        assert_eq!(u.peak_memory_temperature_celsius, None);
        assert!((u.mean_sm_clock_hertz.unwrap() - 1795e6).abs() < 1.0);
        assert!((u.mean_power_watts.unwrap() - 650.0).abs() < 1e-9);
        assert!((u.clock_event_seconds["sw_power_cap"] - 0.3).abs() < 1e-9);
        assert!((u.clock_event_seconds["sw_thermal_slowdown"] - 0.1).abs() < 1e-9);
        assert!(!u.clock_event_seconds.contains_key("hw_slowdown"));
        assert_eq!(u.mean_sm_active_ratio, Some(0.96));
        assert_eq!(u.mean_tensor_active_ratio, None, "no GPM reading, no mean");
    }

    #[test]
    fn only_samples_under_load_count_and_the_first_gives_no_activity() {
        let mut current = Current {
            test: Some(Test::GemmBf16),
            ..Current::default()
        };
        let idle = || Sample {
            sm_active: Some(0.0),
            ..sample(35.0, 1980.0, 120.0, &[])
        };
        current.push(idle());
        current.push(idle());
        current.load_started();
        current.push(Sample {
            sm_active: Some(0.5),
            ..sample(45.0, 1980.0, 400.0, &[])
        });
        current.push(sample(60.0, 1700.0, 700.0, &["sw_power_cap"]));
        current.push(sample(61.0, 1700.0, 700.0, &["sw_power_cap"]));
        let u = summarize(&current.take(), Duration::from_millis(100));
        assert_eq!(u.samples, 3);
        assert!((u.mean_power_watts.unwrap() - 600.0).abs() < 1e-9, "{u:?}");
        assert_eq!(u.mean_sm_active_ratio, Some(0.96), "the straddling 0.5 is left out");
        assert!(current.take().is_empty(), "nothing is kept between tests");
        current.push(idle());
        assert!(current.samples.is_empty(), "no test, no samples");
    }

    #[test]
    fn a_test_shorter_than_a_sample_keeps_its_set_up_samples() {
        let mut current = Current {
            test: Some(Test::HbmCopy),
            ..Current::default()
        };
        current.push(sample(40.0, 1980.0, 300.0, &[]));
        current.load_started();
        let u = summarize(&current.take(), Duration::from_millis(100));
        assert_eq!(u.samples, 1);
        assert_eq!(u.mean_sm_active_ratio, Some(0.96));
    }

    #[test]
    fn no_samples_no_figures() {
        let u = summarize(&[], Duration::from_millis(100));
        assert_eq!(u, UnderLoad::default());
    }
}
