//! The probe history of one GPU in `gpuwarden report`: every probe the journal kept, oldest
//! first, each test's sustained figure beside the GPU's own baseline at the time (the median
//! of its earlier `probe.baseline_probes` probes, as `probe_regressed` judges it), so a slow
//! drift shows as a column of growing percentages.

use crate::health::baseline::{MIN_BASELINE, median, percent_below};
use crate::journal::store::read::Row;
use crate::model::probe::{ProbeFigures, ProbeReport, Test};
use serde::Serialize;

/// One test of one probe against the baseline of the probes before it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figure {
    pub test: Test,
    pub burst: Option<f64>,
    pub sustained: Option<f64>,
    /// The median of the GPU's earlier probes (at most `baseline_probes`), once there were
    /// enough of them.
    pub baseline: Option<f64>,
    /// Percent below the baseline (negative: above).
    pub below_baseline_pct: Option<f64>,
}

/// One probe.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProbeRow {
    pub at: f64,
    /// pass, FAIL or no verdict.
    pub result: &'static str,
    pub figures: Vec<Figure>,
}

/// The history from the journal's `probe` rows (whatever their order), oldest first; a row
/// that is not a probe report the daemon wrote is left out.
pub(crate) fn history(rows: &[Row], baseline_probes: usize) -> Vec<ProbeRow> {
    let mut reports: Vec<ProbeReport> = rows
        .iter()
        .filter(|r| r.is(crate::journal::event::Kind::Probe))
        .filter_map(|r| serde_json::from_value(r.details.clone()).ok())
        .collect();
    reports.sort_by(|a, b| a.started.total_cmp(&b.started));
    let mut earlier: Vec<ProbeFigures> = Vec::new();
    let mut out = Vec::new();
    for report in &reports {
        let window = &earlier[earlier.len().saturating_sub(baseline_probes)..];
        let figures = report
            .tests
            .iter()
            .map(|t| {
                let before: Vec<f64> = window.iter().filter_map(|f| f.sustained(t.test)).collect();
                let baseline = (before.len() >= MIN_BASELINE).then(|| median(before));
                Figure {
                    test: t.test,
                    burst: t.burst,
                    sustained: t.sustained,
                    baseline,
                    below_baseline_pct: t.sustained.zip(baseline).map(|(s, b)| percent_below(s, b)),
                }
            })
            .collect();
        out.push(ProbeRow {
            at: report.started,
            result: match report.passed() {
                Some(true) => "pass",
                Some(false) => "FAIL",
                None => "no verdict",
            },
            figures,
        });
        earlier.push(ProbeFigures::of(report));
    }
    out
}

/// The history as a Markdown table: a column per test, "sustained (burst), vs baseline".
pub(crate) fn markdown(history: &[ProbeRow]) -> String {
    if history.is_empty() {
        return "None recorded.\n".to_string();
    }
    let tests: Vec<Test> = Test::ALL
        .into_iter()
        .filter(|t| history.iter().any(|p| p.figures.iter().any(|f| f.test == *t)))
        .collect();
    let mut out = String::from("| time (UTC) | result |");
    for t in &tests {
        out.push_str(&format!(" {} sustained (burst), vs own baseline |", t.name()));
    }
    out.push_str("\n| --- | --- |");
    out.push_str(&" --- |".repeat(tests.len()));
    out.push('\n');
    for row in history {
        out.push_str(&format!("| {} | {} |", crate::model::utc_seconds(row.at), row.result));
        for t in &tests {
            let cell = row.figures.iter().find(|f| f.test == *t).map(cell).unwrap_or_default();
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    out
}

fn cell(f: &Figure) -> String {
    let unit = f.test.unit();
    let Some(sustained) = f.sustained else {
        return "no figure".to_string();
    };
    let burst = f.burst.map(|b| format!(" ({})", unit.human(b))).unwrap_or_default();
    let versus = match f.below_baseline_pct {
        Some(pct) if pct >= 0.0 => format!(", {pct:.1}% below"),
        Some(pct) => format!(", {:.1}% above", -pct),
        None => ", no baseline yet".to_string(),
    };
    format!("{}{burst}{versus}", unit.human(sustained))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(at: f64, gemm: f64) -> Row {
        let pass = Some(gemm >= 540e12);
        let report = ProbeReport::for_test("GPU-0", at, Test::GemmBf16, (gemm * 1.1, gemm), Some(600e12), pass);
        Row {
            id: at as i64,
            at,
            boot_id: "b".into(),
            host: "h".into(),
            kind: "probe".into(),
            gpu_uuid: Some("GPU-0".into()),
            serial: None,
            pci_bus_id: None,
            summary: String::new(),
            details: serde_json::to_value(report).unwrap(),
        }
    }

    #[test]
    fn each_probe_is_shown_against_the_median_of_those_before_it() {
        // Newest first, as the journal reads them; a row of another shape is left out.
        let mut rows: Vec<Row> = [700e12, 690e12, 660e12, 675e12, 680e12]
            .iter()
            .enumerate()
            .map(|(i, g)| row(1_790_000_000.0 + i as f64 * 86_400.0, *g))
            .rev()
            .collect();
        let mut odd = row(1.0, 1.0);
        odd.details = serde_json::json!({"not": "a report"});
        rows.push(odd);
        let history = history(&rows, 10);
        assert_eq!(history.len(), 5);
        assert_eq!(history[0].figures[0].sustained, Some(700e12), "oldest first");
        assert_eq!(history[2].figures[0].baseline, None, "two before it: no baseline");
        let fourth = &history[3].figures[0];
        assert_eq!(fourth.baseline, Some(690e12), "median of 700, 690, 660");
        assert_eq!(history[4].figures[0].baseline, Some(682.5e12), "median of four");
        let text = markdown(&history);
        assert!(
            text.contains("| gemm_bf16 sustained (burst), vs own baseline |"),
            "{text}"
        );
        assert!(text.contains("675.0 TFLOP/s (742.5 TFLOP/s), 2.2% below"), "{text}");
        assert!(
            text.contains("700.0 TFLOP/s (770.0 TFLOP/s), no baseline yet"),
            "{text}"
        );
    }
}
