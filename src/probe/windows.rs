//! Turning timed windows of work into the two figures a probe reports: the burst (what a
//! cool GPU does for a moment) and the sustained rate (what it keeps up once clocks and
//! power have settled). An H200 GEMM bursts to ~775 TFLOP/s and is power-capped to ~650
//! within seconds; a single average would hide both.

/// One timed window: when it started (seconds from the start of the test), how long the GPU
/// took (CUDA events) and how much work it held (FLOPs or bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub start: f64,
    pub seconds: f64,
    pub units: f64,
}

/// The burst window lies within this many seconds of the start.
pub const BURST_SPAN_SECONDS: f64 = 1.0;

/// Target length of one window; scripts/probe-vs-pytorch.py uses the same.
pub const WINDOW_SECONDS: f64 = 0.1;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Best window that started within the first second, units per second.
    pub burst: f64,
    /// All work in windows that started in the second half of the run, divided by their
    /// time; the last window alone when there is only one.
    pub sustained: f64,
}

pub fn summarize(windows: &[Window]) -> Option<Rates> {
    let rate = |w: &Window| w.units / w.seconds;
    let valid: Vec<&Window> = windows.iter().filter(|w| w.seconds > 0.0).collect();
    let last = valid.last()?;
    let total = last.start + last.seconds;
    let burst = valid
        .iter()
        .filter(|w| w.start < BURST_SPAN_SECONDS)
        .map(|w| rate(w))
        .fold(f64::NAN, f64::max);
    let tail: Vec<&&Window> = valid.iter().filter(|w| w.start >= total / 2.0).collect();
    let (units, seconds) = if tail.is_empty() {
        (last.units, last.seconds)
    } else {
        tail.iter().fold((0.0, 0.0), |(u, s), w| (u + w.units, s + w.seconds))
    };
    Some(Rates {
        burst: if burst.is_nan() { rate(valid[0]) } else { burst },
        sustained: units / seconds,
    })
}

/// How many operations fill one window, from the time one operation took.
pub fn ops_per_window(one_op_seconds: f64) -> u32 {
    if one_op_seconds <= 0.0 || !one_op_seconds.is_finite() {
        return 1;
    }
    (WINDOW_SECONDS / one_op_seconds).clamp(1.0, 100_000.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rates: &[f64]) -> Vec<Window> {
        // 0.1 s windows at the given rates.
        let mut start = 0.0;
        rates
            .iter()
            .map(|r| {
                let w = Window {
                    start,
                    seconds: 0.1,
                    units: r * 0.1,
                };
                start += 0.1;
                w
            })
            .collect()
    }

    #[test]
    fn burst_is_the_best_early_window_and_sustained_the_second_half() {
        // A power-capped GEMM: 775 for half a second, then down to 650.
        let mut rates = vec![775.0; 5];
        rates.extend(vec![650.0; 45]);
        let r = summarize(&run(&rates)).unwrap();
        assert!((r.burst - 775.0).abs() < 1e-9, "{r:?}");
        assert!((r.sustained - 650.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn a_late_peak_is_not_a_burst() {
        let mut rates = vec![500.0; 20];
        rates.push(900.0);
        let r = summarize(&run(&rates)).unwrap();
        assert!((r.burst - 500.0).abs() < 1e-9, "{r:?}");
        // 900 is in the second half and counts towards the sustained rate.
        assert!(r.sustained > 500.0 && r.sustained < 900.0, "{r:?}");
    }

    #[test]
    fn one_window_gives_both_figures() {
        let r = summarize(&run(&[42.0])).unwrap();
        assert_eq!((r.burst, r.sustained), (42.0, 42.0));
        assert_eq!(summarize(&[]), None);
    }

    #[test]
    fn window_sizing() {
        assert_eq!(ops_per_window(0.001), 100);
        assert_eq!(ops_per_window(0.5), 1);
        assert_eq!(ops_per_window(0.0), 1);
        assert_eq!(ops_per_window(f64::NAN), 1);
    }
}
