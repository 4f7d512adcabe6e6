//! The probe report as a person reads it: one line per test with burst, sustained,
//! expected, the verdict and what the GPU did under load.

use super::{ProbeReport, TestResult};
use std::fmt::Write;

pub(crate) fn render(report: &ProbeReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "GPU {}  {}  {}", report.gpu, report.name, report.uuid);
    match &report.expectation {
        Some(source) => {
            let _ = writeln!(
                out,
                "expected values: {source}; a test passes at {:.0}% of its expected value",
                report.pass_fraction * 100.0
            );
        }
        None => {
            let _ = writeln!(
                out,
                "expected values: none for this model (add a probe.expected row to the config); no pass/fail"
            );
        }
    }
    let _ = writeln!(
        out,
        "{:<10} {:>16} {:>16} {:>16}  {:<6} under load",
        "test", "burst", "sustained", "expected", "result"
    );
    for t in &report.tests {
        let _ = writeln!(out, "{}", test_line(t));
    }
    if let Some(canary) = crate::model::probe::SdcOutcome::of(report) {
        let checks: Vec<String> = canary
            .exact
            .iter()
            .map(|c| format!("{} {}/{} wrong", c.name, c.mismatches, c.elements))
            .collect();
        let _ = writeln!(
            out,
            "sdc: {}; agreement GEMM {} cubed, {} runs, digest {} ({})",
            checks.join(", "),
            canary.side,
            canary.repeats,
            canary.digest,
            canary.key.describe()
        );
        for fault in canary.faults() {
            let _ = writeln!(out, "sdc WRONG: {fault}");
        }
    }
    if let Some(memtest) = crate::model::probe::MemtestOutcome::of(report) {
        let _ = writeln!(
            out,
            "memtest: {} MiB, {} of {} passes{} in {:.2} s of GPU time, {} word(s) wrong",
            memtest.bytes >> 20,
            memtest.passes.len(),
            super::memtest::plan().len(),
            if memtest.complete {
                ""
            } else {
                " (the time budget ran out)"
            },
            memtest.seconds,
            memtest.errors
        );
        for fault in memtest.faults() {
            let _ = writeln!(out, "memtest WRONG: {fault}");
        }
    }
    let verdict = match report.passed() {
        Some(true) => "PASS",
        Some(false) => "FAIL",
        None => "no verdict",
    };
    let _ = writeln!(out, "probe took {:.1} s: {verdict}", report.wall_seconds);
    out
}

fn test_line(t: &TestResult) -> String {
    let unit = t.test.unit();
    let figure = |v: Option<f64>| v.map(|v| unit.human(v)).unwrap_or_else(|| "-".into());
    if let Some(why) = &t.skipped {
        return format!("{:<10} skipped: {why}", t.test.name());
    }
    let result = match t.pass {
        Some(true) => "pass",
        Some(false) => "FAIL",
        None => "-",
    };
    format!(
        "{:<10} {:>16} {:>16} {:>16}  {:<6} {}",
        t.test.name(),
        figure(t.burst),
        figure(t.sustained),
        figure(t.expected),
        result,
        under_load_text(t)
    )
}

fn under_load_text(t: &TestResult) -> String {
    let u = &t.under_load;
    let mut parts = Vec::new();
    if let Some(c) = u.peak_temperature_celsius {
        parts.push(format!("peak {c:.0} C"));
    }
    if let Some(c) = u.peak_memory_temperature_celsius {
        parts.push(format!("memory {c:.0} C"));
    }
    if let Some(hz) = u.mean_sm_clock_hertz {
        parts.push(format!("SM {:.0} MHz", hz / 1e6));
    }
    if let Some(w) = u.mean_power_watts {
        parts.push(format!("{w:.0} W"));
    }
    let pct = |v: Option<f64>| v.map(|v| format!("{:.0}%", v * 100.0));
    if let Some(sm) = pct(u.mean_sm_active_ratio) {
        let tensor = pct(u.mean_tensor_active_ratio).unwrap_or_else(|| "-".into());
        let dram = pct(u.mean_dram_active_ratio).unwrap_or_else(|| "-".into());
        parts.push(format!("GPM SM {sm} tensor {tensor} DRAM {dram}"));
    }
    for (reason, seconds) in &u.clock_event_seconds {
        parts.push(format!("{reason} {seconds:.1}s"));
    }
    if parts.is_empty() {
        "no samples".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{Test, UnderLoad};
    use std::collections::BTreeMap;

    fn report() -> ProbeReport {
        let mut under = UnderLoad {
            samples: 50,
            peak_temperature_celsius: Some(63.0),
            mean_sm_clock_hertz: Some(1755e6),
            mean_power_watts: Some(699.4),
            ..Default::default()
        };
        under.clock_event_seconds.insert("sw_power_cap".into(), 4.1);
        ProbeReport {
            gpu: 0,
            uuid: "GPU-1".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            started: 0.0,
            wall_seconds: 14.23,
            expectation: Some("shipped: H100 80GB HBM3".into()),
            pass_fraction: 0.9,
            tests: vec![
                TestResult {
                    test: Test::GemmBf16,
                    params: BTreeMap::from([("n".into(), 8192)]),
                    duration_seconds: 5.0,
                    burst: Some(745.2e12),
                    sustained: Some(580.0e12),
                    expected: Some(660e12),
                    pass: Some(false),
                    skipped: None,
                    under_load: under,
                    sdc: None,
                    memtest: None,
                },
                TestResult {
                    test: Test::PcieH2d,
                    params: BTreeMap::new(),
                    duration_seconds: 2.0,
                    burst: None,
                    sustained: None,
                    expected: Some(52e9),
                    pass: None,
                    skipped: Some("cuMemHostAlloc failed".into()),
                    under_load: UnderLoad::default(),
                    sdc: None,
                    memtest: None,
                },
            ],
        }
    }

    #[test]
    fn text_report_says_what_failed_and_why() {
        let text = render(&report());
        assert!(text.contains("GPU 0  NVIDIA H100 80GB HBM3"), "{text}");
        assert!(text.contains("passes at 90%"), "{text}");
        let gemm = text.lines().find(|l| l.starts_with("gemm_bf16")).unwrap();
        for part in [
            "745.2 TFLOP/s",
            "580.0 TFLOP/s",
            "660.0 TFLOP/s",
            "FAIL",
            "peak 63 C",
            "SM 1755 MHz",
            "699 W",
            "sw_power_cap 4.1s",
        ] {
            assert!(gemm.contains(part), "{part} missing in {gemm}");
        }
        assert!(text.contains("pcie_h2d   skipped: cuMemHostAlloc failed"), "{text}");
        assert!(text.trim_end().ends_with("probe took 14.2 s: FAIL"), "{text}");
    }

    #[test]
    fn verdict_ignores_tests_without_an_expectation() {
        let mut r = report();
        r.tests[0].pass = Some(true);
        assert_eq!(r.passed(), Some(true));
        r.tests[0].pass = None;
        assert_eq!(r.passed(), None);
    }
}
