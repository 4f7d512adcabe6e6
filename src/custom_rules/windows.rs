//! Windows over a reading's recent history, for the operator's rules: `increase(series,
//! window)`, `max_over`, `min_over`, `avg_over`, and `xid_count(code[, window])`.
//!
//! Only the series some rule names are kept, per GPU or port, in buckets of a 240th of the
//! longest window a rule asks for (at least a second): each bucket keeps its least, greatest,
//! sum and count, and how much the counter grew in it, so a window's figure is exact to one
//! bucket's span at most, and a series costs 240 buckets whatever the poll interval. The
//! windows count from the daemon's start (or the subject's first sighting): nothing is
//! extrapolated, as with the built-in error rates.
//!
//! The functions are registered once on a context; the values of one subject's windows are
//! put in place (a thread-local table) before its rules run, since CEL functions see only
//! their arguments.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The longest window a rule may ask for.
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(3600);
/// How many buckets cover the longest window in use.
const BUCKETS: u32 = 240;

/// What a window function computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Over {
    /// How much a counter grew (a drop is a counter reset: it grew by its new value).
    Increase,
    Max,
    Min,
    Avg,
    /// `xid_count(code)`: the XIDs of the code since the GPU's last clear.
    XidTotal,
}

impl Over {
    pub const FUNCTIONS: [(&'static str, Over); 5] = [
        ("increase", Over::Increase),
        ("max_over", Over::Max),
        ("min_over", Over::Min),
        ("avg_over", Over::Avg),
        ("xid_count", Over::XidTotal),
    ];

    pub fn from_function(name: &str) -> Option<Over> {
        Over::FUNCTIONS.iter().find(|(n, _)| *n == name).map(|(_, over)| *over)
    }

    pub fn function(self) -> &'static str {
        Over::FUNCTIONS.iter().find(|(_, o)| *o == self).map_or("?", |(n, _)| n)
    }
}

/// One window a rule asks for, its arguments checked at compile time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowCall {
    pub over: Over,
    /// A field's name, or `xid:CODE` for `xid_count`.
    pub series: String,
    /// `None` only for `xid_count(code)`.
    pub window: Option<Duration>,
}

impl WindowCall {
    /// As the rule wrote it, for a finding's message.
    pub fn written(&self) -> String {
        let window = self
            .window
            .map(|w| format!(", \"{}\"", humantime::format_duration(w)))
            .unwrap_or_default();
        match self.series.strip_prefix("xid:") {
            Some(code) => format!("xid_count({code}{window})"),
            None => format!("{}(\"{}\"{window})", self.over.function(), self.series),
        }
    }

    /// The XID code of an `xid_count`.
    pub fn xid_code(&self) -> Option<u32> {
        self.series.strip_prefix("xid:")?.parse().ok()
    }
}

/// One bucket of a series.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    start: Instant,
    min: f64,
    max: f64,
    sum: f64,
    count: u32,
    /// How much the counter grew within it.
    grew: f64,
}

/// One series of one subject.
#[derive(Debug, Default)]
struct Series {
    buckets: VecDeque<Bucket>,
    last: Option<f64>,
}

impl Series {
    fn note(&mut self, value: f64, now: Instant, step: Duration) {
        let grew = match self.last {
            Some(last) if value >= last => value - last,
            // A counter reset (driver reload, GPU reset, a clear of the XIDs): it grew by what
            // it counts now.
            Some(_) => value,
            // The first look: what it counted before is in no window.
            None => 0.0,
        };
        self.last = Some(value);
        match self.buckets.back_mut() {
            Some(b) if now.saturating_duration_since(b.start) < step => {
                b.min = b.min.min(value);
                b.max = b.max.max(value);
                b.sum += value;
                b.count += 1;
                b.grew += grew;
            }
            _ => self.buckets.push_back(Bucket {
                start: now,
                min: value,
                max: value,
                sum: value,
                count: 1,
                grew,
            }),
        }
        while self
            .buckets
            .front()
            .is_some_and(|b| now.saturating_duration_since(b.start) > MAX_WINDOW + step)
        {
            self.buckets.pop_front();
        }
    }

    fn over(&self, over: Over, window: Duration, now: Instant) -> Option<f64> {
        // A bucket that started a whole window ago holds the growth up to that moment: out.
        let inside = self
            .buckets
            .iter()
            .filter(|b| now.saturating_duration_since(b.start) < window);
        match over {
            Over::Increase => Some(inside.map(|b| b.grew).sum()),
            Over::Max => inside.map(|b| b.max).reduce(f64::max),
            Over::Min => inside.map(|b| b.min).reduce(f64::min),
            Over::Avg => {
                let (sum, count) = inside.fold((0.0, 0u32), |(s, c), b| (s + b.sum, c + b.count));
                (count > 0).then(|| sum / f64::from(count))
            }
            Over::XidTotal => None,
        }
    }
}

/// One GPU's or port's series.
#[derive(Debug, Default)]
struct Subject {
    series: HashMap<String, Series>,
}

/// Every subject's series that a rule names.
#[derive(Debug, Default)]
pub(crate) struct Histories {
    subjects: HashMap<String, Subject>,
}

/// The bucket span for the longest window in use.
pub(crate) fn step_for(longest: Duration) -> Duration {
    (longest / BUCKETS).max(Duration::from_secs(1))
}

impl Histories {
    /// Notes `value` of `series` for `subject` (a GPU's UUID, a port's `mlx5_0/1`).
    pub(crate) fn note(&mut self, subject: &str, series: &str, value: f64, now: Instant, step: Duration) {
        // Looked up before inserting: a poll's every note would otherwise allocate the keys.
        if !self.subjects.contains_key(subject) {
            self.subjects.insert(subject.to_string(), Subject::default());
        }
        let Some(s) = self.subjects.get_mut(subject) else {
            return;
        };
        if !s.series.contains_key(series) {
            s.series.insert(series.to_string(), Series::default());
        }
        if let Some(history) = s.series.get_mut(series) {
            history.note(value, now, step);
        }
    }

    /// The figure of `call` for `subject` now; `None` where its series has no samples.
    pub(crate) fn figure(&self, subject: &str, call: &WindowCall, now: Instant) -> Option<f64> {
        let series = self.subjects.get(subject)?.series.get(&call.series)?;
        series.over(call.over, call.window?, now)
    }

    /// Forgets the subjects not in `present`, and the series no rule names any more.
    pub(crate) fn retain(&mut self, present: &dyn Fn(&str) -> bool, named: &dyn Fn(&str) -> bool) {
        self.subjects.retain(|subject, _| present(subject));
        for subject in self.subjects.values_mut() {
            subject.series.retain(|series, _| named(series));
        }
    }

    /// Starts a subject's series afresh (an operator's clear).
    pub(crate) fn forget(&mut self, subject: &str) {
        self.subjects.remove(subject);
    }
}

thread_local! {
    /// The figures of the subject whose rules run now, by call.
    static FIGURES: RefCell<Vec<(WindowCall, Option<f64>)>> = const { RefCell::new(Vec::new()) };
    /// Set for `config check`'s dry run: every window gives 1.
    static SAMPLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Puts the figures of the next subject's windows in place.
pub(crate) fn set_figures(figures: Vec<(WindowCall, Option<f64>)>) {
    FIGURES.with(|f| *f.borrow_mut() = figures);
}

/// The figure of `call` for the subject whose rules run now.
pub(crate) fn current(call: &WindowCall) -> Option<f64> {
    FIGURES.with(|f| f.borrow().iter().find(|(c, _)| c == call).and_then(|(_, v)| *v))
}

/// Runs `f` with every window giving a sample value (the dry run).
pub(crate) fn with_samples<T>(f: impl FnOnce() -> T) -> T {
    SAMPLE.with(|s| s.set(true));
    let out = f();
    SAMPLE.with(|s| s.set(false));
    out
}

/// The figure the window function `over` with these arguments has now.
pub(crate) fn lookup(over: Over, args: &[cel::Value]) -> Result<cel::Value, cel::ExecutionError> {
    use cel::Value;
    let call = parse_args(over, args).map_err(|e| cel::ExecutionError::function_error(over.function(), e))?;
    if SAMPLE.with(std::cell::Cell::get) {
        return Ok(if over == Over::XidTotal || call.xid_code().is_some() {
            Value::Int(1)
        } else {
            Value::Float(1.0)
        });
    }
    match current(&call) {
        Some(v) if call.xid_code().is_some() => Ok(Value::Int(v as i64)),
        Some(v) => Ok(Value::Float(v)),
        // No samples (a reading the GPU does not give): the rule does not apply, as with an
        // absent field.
        None => Err(cel::ExecutionError::NoSuchKey(std::sync::Arc::new(call.series))),
    }
}

/// What is wrong with a window function's arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum WindowArgsError {
    #[error("the window is a string like \"10m\"")]
    WindowNotAString,
    #[error("the window \"{text}\": {why}")]
    WindowUnreadable { text: String, why: String },
    #[error("the window \"{0}\" must be more than 0 and at most 1h")]
    WindowOutOfRange(String),
    #[error("xid_count takes an XID code, and a window like \"10m\" if counted over one")]
    XidArguments,
    #[error("{0} takes a reading's name and a window: {0}(\"power_w\", \"10m\")")]
    SeriesArguments(&'static str),
}

/// A window function's arguments as a call: `(series, window)`, or `(code[, window])` for
/// `xid_count`. Err: what is wrong with them.
pub(crate) fn parse_args(over: Over, args: &[cel::Value]) -> Result<WindowCall, WindowArgsError> {
    use cel::Value;
    let window = |v: Option<&Value>| {
        let Some(v) = v else { return Ok(None) };
        let Value::String(text) = v else {
            return Err(WindowArgsError::WindowNotAString);
        };
        let window = humantime::parse_duration(text).map_err(|e| WindowArgsError::WindowUnreadable {
            text: text.to_string(),
            why: e.to_string(),
        })?;
        if window.is_zero() || window > MAX_WINDOW {
            return Err(WindowArgsError::WindowOutOfRange(text.to_string()));
        }
        Ok(Some(window))
    };
    match (over, args) {
        (Over::XidTotal, [Value::Int(code)] | [Value::Int(code), _]) if (0..=u32::MAX as i64).contains(code) => {
            let window = window(args.get(1))?;
            Ok(WindowCall {
                over: if window.is_some() {
                    Over::Increase
                } else {
                    Over::XidTotal
                },
                series: format!("xid:{code}"),
                window,
            })
        }
        (Over::XidTotal, _) => Err(WindowArgsError::XidArguments),
        (_, [Value::String(series), w]) => Ok(WindowCall {
            over,
            series: series.to_string(),
            window: window(Some(w))?,
        }),
        _ => Err(WindowArgsError::SeriesArguments(over.function())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(over: Over, series: &str, secs: u64) -> WindowCall {
        WindowCall {
            over,
            series: series.into(),
            window: Some(Duration::from_secs(secs)),
        }
    }

    /// A counter over ten minutes at a 1 s poll: the growth within the window, a reset counted
    /// as growth by its new value, and the least/greatest/mean of a gauge.
    #[test]
    fn windows_take_growth_extremes_and_means_over_their_span() {
        let start = Instant::now();
        let step = step_for(Duration::from_secs(600));
        let mut h = Histories::default();
        for s in 0..=600u64 {
            let at = start + Duration::from_secs(s);
            // 1 error a second for the first 300 s, then the counter resets to 0 and counts 2/s.
            let counter = if s <= 300 { s as f64 } else { ((s - 300) * 2) as f64 };
            h.note("GPU-0", "ecc_corrected", counter, at, step);
            h.note("GPU-0", "temperature_c", if s == 450 { 95.0 } else { 60.0 }, at, step);
        }
        let now = start + Duration::from_secs(600);
        let increase = h
            .figure("GPU-0", &call(Over::Increase, "ecc_corrected", 600), now)
            .unwrap();
        // 300 before the reset, the reset's own 2, then 299 x 2.
        assert!((increase - 900.0).abs() <= 2.0 * step.as_secs_f64() + 2.0, "{increase}");
        let last_minute = h
            .figure("GPU-0", &call(Over::Increase, "ecc_corrected", 60), now)
            .unwrap();
        assert!(
            (last_minute - 120.0).abs() <= 2.0 * step.as_secs_f64() + 2.0,
            "{last_minute}"
        );
        assert_eq!(
            h.figure("GPU-0", &call(Over::Max, "temperature_c", 600), now),
            Some(95.0)
        );
        assert_eq!(
            h.figure("GPU-0", &call(Over::Max, "temperature_c", 60), now),
            Some(60.0)
        );
        assert_eq!(
            h.figure("GPU-0", &call(Over::Min, "temperature_c", 600), now),
            Some(60.0)
        );
        let avg = h.figure("GPU-0", &call(Over::Avg, "temperature_c", 600), now).unwrap();
        // One 95 among about 600 samples of 60 (the bucket that began a whole window ago is out).
        assert!(avg > 60.0 + 35.0 / 602.0 && avg < 60.0 + 35.0 / 590.0, "{avg}");
        assert_eq!(h.figure("GPU-1", &call(Over::Max, "temperature_c", 600), now), None);
        assert_eq!(h.figure("GPU-0", &call(Over::Max, "power_w", 600), now), None);
    }

    /// An hour of a 1 s poll keeps 240 buckets or so, not 3600 samples.
    #[test]
    fn a_series_costs_its_buckets_whatever_the_poll() {
        let start = Instant::now();
        let step = step_for(MAX_WINDOW);
        let mut series = Series::default();
        for s in 0..7200u64 {
            series.note(s as f64, start + Duration::from_secs(s), step);
        }
        assert!(series.buckets.len() <= BUCKETS as usize + 2, "{}", series.buckets.len());
    }

    /// What a counter held at the first look (XIDs from before the daemon started, or before
    /// a reload added the rule) is in no window; what came after is.
    #[test]
    fn a_counter_counts_from_its_first_look() {
        let start = Instant::now();
        let step = Duration::from_secs(1);
        let mut h = Histories::default();
        h.note("GPU-0", "xid:79", 5.0, start, step);
        let now = start + Duration::from_secs(30);
        assert_eq!(h.figure("GPU-0", &call(Over::Increase, "xid:79", 600), now), Some(0.0));
        h.note("GPU-0", "xid:79", 6.0, now, step);
        assert_eq!(h.figure("GPU-0", &call(Over::Increase, "xid:79", 600), now), Some(1.0));
    }

    #[test]
    fn window_arguments_are_checked() {
        use cel::Value;
        let s = |t: &str| Value::String(std::sync::Arc::new(t.into()));
        assert!(parse_args(Over::Increase, &[s("ecc_corrected"), s("10m")]).is_ok());
        for (over, args, says) in [
            (Over::Increase, vec![s("ecc_corrected"), s("2h")], "at most 1h"),
            (
                Over::Increase,
                vec![s("ecc_corrected"), s("soon")],
                "the window \"soon\"",
            ),
            (Over::Max, vec![s("power_w")], "takes a reading's name and a window"),
            (Over::XidTotal, vec![s("79")], "takes an XID code"),
            (Over::XidTotal, vec![Value::Int(79), Value::Int(10)], "a string like"),
        ] {
            let e = parse_args(over, &args).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        let xid = parse_args(Over::XidTotal, &[Value::Int(79), s("10m")]).unwrap();
        assert_eq!((xid.over, xid.series.as_str()), (Over::Increase, "xid:79"));
        assert_eq!(xid.written(), "xid_count(79, \"10m\")");
    }
}
