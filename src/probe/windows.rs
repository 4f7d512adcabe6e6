//! Turning timed windows of work into the two figures a probe reports: the burst (what a
//! cool GPU does for a moment) and the sustained rate (what it keeps up once clocks and
//! power have settled). An H200 GEMM bursts to ~790 TFLOP/s and is power-capped to ~680
//! within 50 ms; a single average would hide both.
//!
//! Windows are short (25 ms) so that the burst is what a quick PyTorch matmul shows (a few
//! warm-up matmuls, then 20 timed ones: 28 ms on an H200): measured there, the best 25 ms
//! window of the first second was 791-794 TFLOP/s against the quick matmul's 792-794, while
//! the best 100 ms window, the length used before, was 736-742 because the power cap had
//! already bitten (scripts/gpu/gemm-burst-profile.py, docs/probe.md).

/// One timed window: when it started (seconds from the start of the test), how long the GPU
/// took (CUDA events) and how much work it held (FLOPs or bytes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Window {
    pub start: f64,
    pub seconds: f64,
    pub units: f64,
}

/// The burst window lies within this many seconds of the start.
pub(crate) const BURST_SPAN_SECONDS: f64 = 1.0;

/// Target length of one window; scripts/gpu/probe-vs-pytorch.py uses the same. Short enough
/// that a window ends before an H200's power cap bites (about 25-50 ms into a GEMM), long
/// enough that the host's time between windows is a rounding error.
pub(crate) const WINDOW_SECONDS: f64 = 0.025;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rates {
    /// Best window that started within the first second, units per second.
    pub burst: f64,
    /// All work in windows that started in the second half of the run, divided by their
    /// time; the last window alone when there is only one.
    pub sustained: f64,
}

pub(crate) fn summarize(windows: &[Window]) -> Option<Rates> {
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
pub(crate) fn ops_per_window(one_op_seconds: f64) -> u32 {
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
        windows_of(0.1, rates)
    }

    fn windows_of(seconds: f64, rates: &[f64]) -> Vec<Window> {
        let mut start = 0.0;
        rates
            .iter()
            .map(|r| {
                let w = Window {
                    start,
                    seconds,
                    units: r * seconds,
                };
                start += seconds;
                w
            })
            .collect()
    }

    #[test]
    fn the_burst_is_caught_before_the_power_cap_bites() {
        // What an H200 GEMM did (scripts/gpu/gemm-burst-profile.py): ~792 TFLOP/s for the first
        // 25-50 ms, then ~680 under the power cap. Windows of WINDOW_SECONDS see the 792 a
        // quick matmul shows; one 100 ms window would average it away.
        let per_ms = |ms: usize| -> Vec<f64> { (0..ms).map(|t| if t < 40 { 792.0 } else { 680.0 }).collect() };
        let merge = |ms_per_window: usize| -> Vec<f64> {
            per_ms(5000)
                .chunks(ms_per_window)
                .map(|c| c.iter().sum::<f64>() / c.len() as f64)
                .collect()
        };
        let short = (WINDOW_SECONDS * 1000.0).round() as usize;
        let r = summarize(&windows_of(WINDOW_SECONDS, &merge(short))).unwrap();
        assert!((r.burst - 792.0).abs() < 1e-9, "{r:?}");
        assert!((r.sustained - 680.0).abs() < 1e-9, "{r:?}");
        let long = summarize(&windows_of(0.1, &merge(100))).unwrap();
        assert!(long.burst < 740.0, "{long:?}");
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
        assert_eq!(ops_per_window(0.001), 25);
        assert_eq!(ops_per_window(0.0014), 17);
        assert_eq!(ops_per_window(0.5), 1);
        assert_eq!(ops_per_window(0.0), 1);
        assert_eq!(ops_per_window(f64::NAN), 1);
    }
}
