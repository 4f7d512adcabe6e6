//! Each GPU's recent past, for the status page's trends and `GET /api/v1/history`: a few
//! readings per GPU kept in two bounded rings, one point every 10 s for the last hour and
//! one a minute (the mean of its six) for the last day.
//!
//! A recorder task samples the published snapshot every [`STEP`] (no vendor call: what
//! /metrics serves). A point the GPU did not give (not supported, the GPU lost) is a gap
//! (`null`), never a fake 0. Memory is fixed per GPU: [`Metric::ALL`] x (360 + 1440) `f32`s,
//! about 58 KiB for eight metrics (docs/performance.md); a GPU not seen for a day is dropped,
//! and at most [`MAX_GPUS`] are kept.

use crate::model::{DeviceSnapshot, Snapshot};
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// One point of the hour's ring.
pub(crate) const STEP: Duration = Duration::from_secs(10);
/// Points of the hour's ring: an hour at [`STEP`].
const HOUR_POINTS: usize = 360;
/// Hour points folded into one of the day's ring (a minute).
const FOLD: usize = 6;
/// Points of the day's ring: a day at a minute.
const DAY_POINTS: usize = 1440;
/// GPUs kept: more than any node holds.
pub(crate) const MAX_GPUS: usize = 64;

/// What is kept, with its unit: the trends an operator asks "since when?" of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Metric {
    Temperature,
    SlowdownTemperature,
    Power,
    PowerLimit,
    SmActive,
    DramActive,
    MemoryUsed,
    ClockEventSeconds,
}

impl Metric {
    pub(crate) const ALL: [Metric; 8] = [
        Metric::Temperature,
        Metric::SlowdownTemperature,
        Metric::Power,
        Metric::PowerLimit,
        Metric::SmActive,
        Metric::DramActive,
        Metric::MemoryUsed,
        Metric::ClockEventSeconds,
    ];

    /// The name `/api/v1/history?metric=` takes: the /metrics family it follows.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Metric::Temperature => "gpu_temperature_celsius",
            Metric::SlowdownTemperature => "gpu_temperature_threshold_celsius",
            Metric::Power => "gpu_power_watts",
            Metric::PowerLimit => "gpu_power_limit_watts",
            Metric::SmActive => "gpu_sm_active_ratio",
            Metric::DramActive => "gpu_dram_active_ratio",
            Metric::MemoryUsed => "gpu_memory_used_bytes",
            Metric::ClockEventSeconds => "gpu_clock_event_seconds_total",
        }
    }

    /// What one point is, in words (the API says it with each answer).
    pub(crate) fn meaning(self) -> &'static str {
        match self {
            Metric::Temperature => "GPU die temperature, celsius",
            Metric::SlowdownTemperature => "the slowdown threshold temperature, celsius",
            Metric::Power => "power draw, watts",
            Metric::PowerLimit => "power limit, watts",
            Metric::SmActive => "SM activity, ratio 0..1 (GPM, Hopper and newer)",
            Metric::DramActive => "DRAM bandwidth used, ratio 0..1 (GPM, Hopper and newer)",
            Metric::MemoryUsed => "framebuffer memory used, bytes",
            Metric::ClockEventSeconds => {
                "time in any clock-event (throttle) reason other than idle, seconds per second over the step"
            }
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The value a GPU gives now; None where it does not.
    fn read(self, device: &DeviceSnapshot) -> Option<f64> {
        let r = device.answered()?;
        match self {
            Metric::Temperature => r.die_temperature(),
            Metric::SlowdownTemperature => r.threshold(crate::model::Threshold::Slowdown),
            Metric::Power => r.power_watts,
            Metric::PowerLimit => r.power_limit_watts,
            Metric::SmActive => r.activity.as_ref()?.sm_active,
            Metric::DramActive => r.activity.as_ref()?.dram_active,
            Metric::MemoryUsed => r.memory_used_bytes.map(|b| b as f64),
            // A counter: its growth per second is what a trend shows (below).
            Metric::ClockEventSeconds => {
                let busy: Vec<f64> = r
                    .clock_event_seconds
                    .iter()
                    .filter(|(reason, _)| *reason != crate::model::clock_events::ClockReason::GpuIdle)
                    .map(|(_, seconds)| *seconds)
                    .collect();
                (!busy.is_empty()).then(|| busy.iter().sum())
            }
        }
    }
}

/// The f32's shortest decimal form as an f64 (0.1, not 0.10000000149011612).
fn decimal(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(f64::from(v))
}

/// A fixed ring of points at a fixed step; `NaN` is a gap.
#[derive(Debug, Clone)]
struct Ring {
    points: Vec<f32>,
    /// Where the next point goes.
    next: usize,
    /// Points written since the start (up to the ring's size).
    filled: usize,
}

impl Ring {
    fn new(size: usize) -> Ring {
        Ring {
            points: vec![f32::NAN; size],
            next: 0,
            filled: 0,
        }
    }

    fn push(&mut self, value: Option<f64>) {
        let size = self.points.len();
        self.points[self.next] = value.map_or(f32::NAN, |v| v as f32);
        self.next = (self.next + 1) % size;
        self.filled = (self.filled + 1).min(size);
    }

    /// The newest `n` points (at most those written), newest first.
    fn newest(&self, n: usize) -> impl Iterator<Item = f32> + '_ {
        let size = self.points.len();
        (0..n.min(self.filled)).map(move |back| self.points[(self.next + size - 1 - back) % size])
    }

    /// Oldest first.
    fn values(&self) -> Vec<Option<f64>> {
        let mut values: Vec<Option<f64>> = self
            .newest(self.filled)
            .map(|v| (!v.is_nan()).then(|| decimal(v)))
            .collect();
        values.reverse();
        values
    }

    /// The mean of the newest `n` points that are not gaps; None when all are. Reads those
    /// points alone: the whole ring is converted only when someone asks for it.
    fn mean_of_last(&self, n: usize) -> Option<f64> {
        let last: Vec<f64> = self.newest(n).filter(|v| !v.is_nan()).map(decimal).collect();
        (!last.is_empty()).then(|| last.iter().sum::<f64>() / last.len() as f64)
    }
}

/// One GPU's rings.
#[derive(Debug, Clone)]
struct GpuHistory {
    index: u32,
    hour: Vec<Ring>,
    day: Vec<Ring>,
    /// The clock-event counter's last value, for its growth.
    last_clock_event_seconds: Option<f64>,
    /// Unix seconds of the last sample that saw the GPU.
    last_seen: f64,
}

impl GpuHistory {
    fn new(index: u32) -> GpuHistory {
        GpuHistory {
            index,
            hour: Metric::ALL.iter().map(|_| Ring::new(HOUR_POINTS)).collect(),
            day: Metric::ALL.iter().map(|_| Ring::new(DAY_POINTS)).collect(),
            last_clock_event_seconds: None,
            last_seen: 0.0,
        }
    }
}

/// A metric's points over one range, oldest first, for the API and the page.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Series {
    pub gpu: u32,
    pub uuid: String,
    pub metric: &'static str,
    pub meaning: &'static str,
    pub step_seconds: u64,
    /// (Unix seconds, value or null for a gap), oldest first.
    pub points: Vec<(f64, Option<f64>)>,
}

/// The rings of every GPU, and when the last sample was taken.
#[derive(Debug, Default)]
pub(crate) struct History {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    gpus: BTreeMap<String, GpuHistory>,
    /// Unix seconds of the newest sample, and how many hour points were taken in all.
    last_sample: f64,
    samples: u64,
    /// Unix seconds of the newest point of the day's ring.
    last_fold: f64,
}

/// Which ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Range {
    Hour,
    Day,
}

impl Range {
    pub(crate) fn step_seconds(self) -> u64 {
        match self {
            Range::Hour => STEP.as_secs(),
            Range::Day => STEP.as_secs() * FOLD as u64,
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Range> {
        match text {
            "1h" | "hour" => Some(Range::Hour),
            "1d" | "24h" | "day" => Some(Range::Day),
            _ => None,
        }
    }
}

impl History {
    /// Takes one sample of every GPU in `snapshot`, at `now` (Unix seconds): a point in the
    /// hour's ring, and every sixth one a point (their mean) in the day's.
    pub(crate) fn sample(&self, snapshot: &Snapshot, now: f64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let step = STEP.as_secs_f64();
        let elapsed = now - inner.last_sample;
        inner.last_sample = now;
        inner.samples += 1;
        let fold_now = inner.samples.is_multiple_of(FOLD as u64);
        if fold_now {
            inner.last_fold = now;
        }
        for device in &snapshot.devices {
            let uuid = &device.identity.uuid;
            if !inner.gpus.contains_key(uuid) && inner.gpus.len() >= MAX_GPUS {
                continue;
            }
            let gpu = inner
                .gpus
                .entry(uuid.clone())
                .or_insert_with(|| GpuHistory::new(device.identity.index));
            gpu.index = device.identity.index;
            gpu.last_seen = now;
            for (i, metric) in Metric::ALL.iter().enumerate() {
                let mut value = metric.read(device);
                if *metric == Metric::ClockEventSeconds {
                    let counter = value;
                    value = match (counter, gpu.last_clock_event_seconds) {
                        // Growth per second of wall time; a counter that went back (a
                        // reset) or a first sample is a gap.
                        (Some(now_s), Some(before)) if now_s >= before && elapsed > 0.0 => {
                            Some(((now_s - before) / elapsed.max(step)).min(1.0))
                        }
                        _ => None,
                    };
                    gpu.last_clock_event_seconds = counter;
                }
                gpu.hour[i].push(value);
                if fold_now {
                    let mean = gpu.hour[i].mean_of_last(FOLD);
                    gpu.day[i].push(mean);
                }
            }
        }
        // GPUs gone for a day take no memory.
        inner.gpus.retain(|_, gpu| now - gpu.last_seen < 86_400.0);
    }

    /// `metric` of the GPU with index or UUID `gpu`; None when there is no such GPU.
    pub(crate) fn series(&self, gpu: &str, metric: Metric, range: Range) -> Option<Series> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let (uuid, history) = inner
            .gpus
            .iter()
            .find(|(uuid, h)| uuid.as_str() == gpu || h.index.to_string() == gpu)?;
        let i = Metric::ALL.iter().position(|m| *m == metric)?;
        let ring = match range {
            Range::Hour => &history.hour[i],
            Range::Day => &history.day[i],
        };
        let values = ring.values();
        let step = range.step_seconds() as f64;
        // The newest point is the last sample (hour) or the last fold (day).
        let newest = match range {
            Range::Hour => inner.last_sample,
            Range::Day => inner.last_fold,
        };
        let count = values.len();
        Some(Series {
            gpu: history.index,
            uuid: uuid.clone(),
            metric: metric.name(),
            meaning: metric.meaning(),
            step_seconds: range.step_seconds(),
            points: values
                .into_iter()
                .enumerate()
                .map(|(n, v)| (newest - step * (count - 1 - n) as f64, v))
                .collect(),
        })
    }

    /// Bytes the rings hold (for docs/performance.md's accounting).
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.gpus.len() * Metric::ALL.len() * (HOUR_POINTS + DAY_POINTS) * std::mem::size_of::<f32>()
    }
}

/// Samples the published snapshot every [`STEP`] until `stop`.
pub(crate) async fn record(
    history: std::sync::Arc<History>,
    store: std::sync::Arc<crate::snapshot::store::Store>,
    stop: crate::service::stop::Stop,
) {
    // On the runtime's beat, with the periodic sources (service::cadence::on_the_beat).
    let first = crate::service::cadence::on_the_beat(STEP, std::time::Instant::now());
    let mut tick = tokio::time::interval_at(first.into(), STEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.stopped() => return,
        }
        let snapshot = store.latest();
        if snapshot.generation > 0 {
            history.sample(&snapshot, crate::model::unix_now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceReadings, DeviceSnapshot, Vendor};

    #[test]
    fn the_mean_of_the_last_points_reads_them_alone_as_the_whole_rings_values_would() {
        let mut ring = Ring::new(8);
        for i in 0..13 {
            // A wrapped ring with gaps.
            ring.push((i % 4 != 1).then_some(0.1 * i as f64));
        }
        let values = ring.values();
        for n in [1, 3, 6, 8, 20] {
            let last: Vec<f64> = values.iter().rev().take(n).flatten().copied().collect();
            let expected = (!last.is_empty()).then(|| last.iter().sum::<f64>() / last.len() as f64);
            assert_eq!(ring.mean_of_last(n), expected, "n = {n}");
        }
        let mut small = Ring::new(3);
        for v in [Some(1.0), Some(2.0), None, Some(4.0)] {
            small.push(v);
        }
        assert_eq!(small.values(), [Some(2.0), None, Some(4.0)], "oldest first, wrapped");
        assert_eq!(small.mean_of_last(2), Some(4.0), "a gap is left out");
        assert_eq!(small.mean_of_last(3), Some(3.0));
        let mut gaps = Ring::new(4);
        gaps.push(None);
        assert_eq!(gaps.mean_of_last(6), None);
        assert_eq!(Ring::new(4).mean_of_last(6), None, "empty");
    }

    fn snapshot(temperature: Option<f64>, throttled_seconds: f64) -> Snapshot {
        let readings = DeviceReadings {
            temperatures: temperature
                .map(|t| (crate::model::Sensor::Gpu, t))
                .into_iter()
                .collect(),
            temperature_thresholds: vec![(crate::model::Threshold::Slowdown, 89.0)],
            power_watts: Some(120.0),
            clock_event_seconds: vec![
                (crate::model::clock_events::ClockReason::GpuIdle, 1000.0),
                (crate::model::clock_events::ClockReason::SwPowerCap, throttled_seconds),
            ],
            ..Default::default()
        };
        Snapshot {
            generation: 1,
            devices: vec![DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", readings)],
            ..Default::default()
        }
    }

    #[test]
    fn an_hour_at_ten_seconds_and_a_day_of_minute_means_bounded_with_gaps_kept() {
        let history = History::default();
        let start = 1_000_000.0;
        // Two hours of samples: the hour's ring keeps the last 360, the day's a mean a minute.
        for n in 0..720u32 {
            let temperature = if n == 700 { None } else { Some(f64::from(n % 60)) };
            history.sample(&snapshot(temperature, f64::from(n)), start + 10.0 * f64::from(n));
        }
        let hour = history.series("0", Metric::Temperature, Range::Hour).unwrap();
        assert_eq!(hour.points.len(), HOUR_POINTS);
        assert_eq!(hour.step_seconds, 10);
        let newest = hour.points.last().unwrap();
        assert_eq!(newest, &(start + 7190.0, Some(f64::from(719 % 60))));
        assert_eq!(
            hour.points[0].0,
            start + 10.0 * 360.0,
            "the oldest kept is an hour back"
        );
        // The missing reading is a gap, not a 0.
        assert!(hour.points.iter().any(|(t, v)| *t == start + 7000.0 && v.is_none()));
        let day = history.series("GPU-0", Metric::Temperature, Range::Day).unwrap();
        assert_eq!(day.points.len(), 720 / FOLD);
        assert_eq!(day.step_seconds, 60);
        // The mean of six points (n % 60 over 714..719 is 54..59).
        assert_eq!(day.points.last().unwrap().1, Some(56.5));
        // The clock-event counter as seconds per second: one more second every 10 s.
        let throttle = history.series("0", Metric::ClockEventSeconds, Range::Hour).unwrap();
        assert_eq!(throttle.points.last().unwrap().1, Some(0.1));
        // Unsupported here (no GPM): a gap at every point.
        let sm = history.series("0", Metric::SmActive, Range::Hour).unwrap();
        assert!(sm.points.iter().all(|(_, v)| v.is_none()));
        assert!(history.series("7", Metric::Temperature, Range::Hour).is_none());
        assert_eq!(history.bytes(), Metric::ALL.len() * (HOUR_POINTS + DAY_POINTS) * 4);
    }

    #[test]
    fn every_metric_has_a_name_the_api_takes_back() {
        for metric in Metric::ALL {
            assert_eq!(Metric::from_name(metric.name()), Some(metric));
        }
        assert_eq!(Range::parse("1d"), Some(Range::Day));
        assert_eq!(Range::parse("1y"), None);
    }
}
