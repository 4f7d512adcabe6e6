//! The status page's probe trend: one small chart per GPU of a test's sustained figure over
//! the probes the daemon knows (its journal's history and every probe since), with its own
//! baseline dashed, the same median `probe_regressed` judges by. A GPU drifting down shows as
//! a line falling away from its dashes.

use crate::health::baseline::{MIN_BASELINE, median};
use crate::model::probe::{ProbeSnapshot, Test};
use crate::serve::history::Series;
use crate::serve::html::escape;

/// The tests charted, in order of preference: the first the GPU has figures for.
const CHARTED: [Test; 3] = [Test::GemmBf16, Test::HbmCopy, Test::FmaFp32];

/// The chart for the GPU `uuid` (index `gpu`), or None with fewer than two probes.
pub(crate) fn trend(probes: &ProbeSnapshot, uuid: &str, gpu: u32, baseline_probes: usize) -> Option<String> {
    let history = probes.history.get(uuid)?;
    let test = CHARTED
        .into_iter()
        .find(|t| history.iter().filter(|f| f.sustained(*t).is_some()).count() >= 2)?;
    let points: Vec<(f64, Option<f64>)> = history.iter().map(|f| (f.started, f.sustained(test))).collect();
    let earlier: Vec<f64> = history
        .iter()
        .rev()
        .skip(1)
        .take(baseline_probes)
        .filter_map(|f| f.sustained(test))
        .collect();
    let baseline = (earlier.len() >= MIN_BASELINE).then(|| median(earlier));
    let start = points.first()?.0;
    let end = points.last()?.0;
    let unit = test.unit();
    let last = points.last().and_then(|(_, v)| *v);
    let series = Series {
        gpu,
        uuid: uuid.to_string(),
        metric: "probe_sustained",
        meaning: "the probe's sustained figure",
        step_seconds: 0,
        points,
    };
    let caption = match (last, baseline) {
        (Some(last), Some(b)) => format!(
            "{} {} over {} probes; baseline {}",
            test.name(),
            unit.human(last),
            history.len(),
            unit.human(b)
        ),
        (Some(last), None) => format!("{} {} over {} probes", test.name(), unit.human(last), history.len()),
        _ => return None,
    };
    let chart = crate::serve::sparkline::Chart {
        lines: vec![(&series, "probe")],
        reference: baseline,
        floor: None,
        ceiling: None,
        markers: &[],
        title: format!(
            "GPU {gpu} {} sustained, each probe; dashed: its own baseline",
            test.name()
        ),
    };
    Some(format!(
        "<br>{}<br><small>{}</small>",
        crate::serve::sparkline::render(&chart, start, end.max(start + 1.0)),
        escape(&caption)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::probe::ProbeFigures;

    #[test]
    fn a_chart_with_its_baseline_once_there_are_probes_enough() {
        let mut probes = ProbeSnapshot::default();
        let figures = |at: f64, gemm: f64| ProbeFigures {
            started: at,
            tests: vec![(Test::GemmBf16, Some(gemm * 1.05), Some(gemm))],
        };
        probes.history.insert("GPU-0".into(), [figures(1.0, 675e12)].into());
        assert_eq!(trend(&probes, "GPU-0", 0, 10), None, "one probe is no trend");
        probes.history.insert(
            "GPU-0".into(),
            [
                figures(1.0, 675e12),
                figures(2.0, 670e12),
                figures(3.0, 680e12),
                figures(4.0, 610e12),
            ]
            .into(),
        );
        let chart = trend(&probes, "GPU-0", 0, 10).unwrap();
        assert!(chart.contains("<svg class=\"spark\""), "{chart}");
        assert!(
            chart.contains("gemm_bf16 610.0 TFLOP/s over 4 probes; baseline 675.0 TFLOP/s"),
            "{chart}"
        );
        assert_eq!(trend(&probes, "GPU-9", 9, 10), None);
    }
}
