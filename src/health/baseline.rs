//! Probe baselines (docs/probe.md, "Baselines"): each new probe's sustained figures compared
//! with the same GPU's own median over its earlier probes and with the median of the other
//! GPUs of its model on this node. A GPU that passes against the model's expected figures
//! can still be slower than it was, or than its neighbours: in a synchronous job the slowest
//! GPU sets the pace. Pure: the probe state (its history seeded from the journal) and the
//! snapshot's devices in, the regressions out; `probe_regressed` (rules/) words them.

use crate::model::health::ProbeRegression;
use crate::model::probe::{ProbeSnapshot, Test};
use crate::model::{DeviceSnapshot, Snapshot};
use std::time::SystemTime;

/// Fewer earlier probes than this make no baseline of a GPU's own.
pub(crate) const MIN_BASELINE: usize = 3;

/// One test's figure against its references.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub test: Test,
    /// The latest probe's sustained figure (base units per second).
    pub figure: f64,
    /// The median of the GPU's own earlier probes, and how many.
    pub own: Option<(f64, usize)>,
    /// The median of the latest figures of the node's other GPUs of the same model, and how
    /// many.
    pub node: Option<(f64, usize)>,
    /// More than the limit below `own` / `node`.
    pub below_own: bool,
    pub below_node: bool,
}

impl Comparison {
    pub fn regressed(&self) -> bool {
        self.below_own || self.below_node
    }
}

/// Every test of `device`'s latest probe (one after `cleared`, if any) against its
/// references; empty when it has no probe.
pub(crate) fn compare(
    device: &DeviceSnapshot,
    snapshot: &Snapshot,
    limits: &ProbeRegression,
    cleared: Option<SystemTime>,
) -> Vec<Comparison> {
    let probes: &ProbeSnapshot = &snapshot.probe;
    let uuid = &device.identity.uuid;
    let Some(latest) = probes.reports.get(uuid) else {
        return Vec::new();
    };
    if cleared.is_some_and(|c| crate::model::from_unix_seconds(latest.started) <= c) {
        return Vec::new();
    }
    let earlier: Vec<_> = probes
        .history
        .get(uuid)
        .map(|h| h.iter().filter(|f| f.started < latest.started).collect())
        .unwrap_or_default();
    let earlier = &earlier[earlier.len().saturating_sub(limits.baseline_probes)..];
    let peers: Vec<_> = snapshot
        .devices
        .iter()
        .filter(|d| d.identity.uuid != *uuid && d.identity.name == device.identity.name)
        .filter_map(|d| probes.reports.get(&d.identity.uuid))
        .collect();
    let factor = 1.0 - limits.pct / 100.0;
    latest
        .tests
        .iter()
        .filter(|t| t.test.has_baseline())
        .filter_map(|t| {
            let figure = t.sustained.filter(|v| *v > 0.0)?;
            let own: Vec<f64> = earlier.iter().filter_map(|f| f.sustained(t.test)).collect();
            let own = (own.len() >= MIN_BASELINE).then(|| (median(own.clone()), own.len()));
            let node: Vec<f64> = peers
                .iter()
                .filter_map(|r| r.tests.iter().find(|p| p.test == t.test)?.sustained)
                .collect();
            let node = (!node.is_empty()).then(|| (median(node.clone()), node.len()));
            let below = |reference: Option<(f64, usize)>| reference.is_some_and(|(r, _)| figure < r * factor);
            Some(Comparison {
                test: t.test,
                figure,
                below_own: below(own),
                below_node: below(node),
                own,
                node,
            })
        })
        .collect()
}

/// The median (the mean of the middle two for an even count); `values` is not empty.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// How far below a reference, in percent.
pub(crate) fn percent_below(figure: f64, reference: f64) -> f64 {
    (1.0 - figure / reference) * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Vendor;
    use crate::model::probe::ProbeReport;
    use std::sync::Arc;

    fn report(uuid: &str, started: f64, gemm: f64) -> ProbeReport {
        ProbeReport::for_test(
            uuid,
            started,
            Test::GemmBf16,
            (gemm * 1.02, gemm),
            Some(600e12),
            Some(true),
        )
    }

    fn node(gpus: usize) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for i in 0..gpus {
            let mut d = DeviceSnapshot::for_test(
                i as u32,
                Vendor::Nvidia,
                &format!("0000:{:02x}:00.0", i),
                Default::default(),
            );
            std::sync::Arc::make_mut(&mut d.identity).name = "NVIDIA H100 80GB HBM3".into();
            snapshot.devices.push(d);
        }
        snapshot
    }

    const LIMITS: ProbeRegression = ProbeRegression {
        pct: 7.0,
        baseline_probes: 10,
    };

    /// GPU 0, alone of its model, probed `figures` a day apart: the last one's comparison.
    fn after(figures: &[f64]) -> Comparison {
        let mut snapshot = node(1);
        let uuid = snapshot.devices[0].identity.uuid.clone();
        let mut keyed = ProbeSnapshot::default();
        for (i, f) in figures.iter().enumerate() {
            keyed.keep(&uuid, report(&uuid, i as f64 * 86_400.0, *f));
        }
        snapshot.probe = Arc::new(keyed);
        compare(&snapshot.devices[0], &snapshot, &LIMITS, None).remove(0)
    }

    #[test]
    fn a_gpu_slowing_by_ten_percent_over_five_probes_is_caught_once_past_the_limit() {
        let steady = [675e12; 5];
        // 2% slower each probe: 98, 96, 94, 92, 90 % of where it was.
        let mut figures = steady.to_vec();
        let mut seen = Vec::new();
        for step in 1..=5 {
            figures.push(675e12 * (1.0 - 0.02 * step as f64));
            seen.push(after(&figures).below_own);
        }
        assert_eq!(
            seen,
            [false, false, false, true, true],
            "caught at 8% and 10% below, not at 6%"
        );
        let last = after(&figures);
        let (own, n) = last.own.unwrap();
        assert_eq!(own, 675e12, "the median of its earlier ten resists the drift");
        assert_eq!(n, 9);
    }

    #[test]
    fn no_own_baseline_before_three_earlier_probes() {
        let c = after(&[675e12, 675e12, 500e12]);
        assert_eq!(c.own, None);
        assert!(!c.regressed());
        assert!(after(&[675e12, 675e12, 675e12, 500e12]).below_own);
    }

    #[test]
    fn a_gpu_below_its_neighbours_of_the_same_model_is_caught_and_other_models_do_not_count() {
        let mut snapshot = node(4);
        std::sync::Arc::make_mut(&mut snapshot.devices[3].identity).name = "NVIDIA H200".into();
        let mut probes = ProbeSnapshot::default();
        let uuids: Vec<String> = snapshot.devices.iter().map(|d| d.identity.uuid.clone()).collect();
        probes.keep(&uuids[0], report(&uuids[0], 10.0, 600e12));
        probes.keep(&uuids[1], report(&uuids[1], 11.0, 675e12));
        probes.keep(&uuids[2], report(&uuids[2], 12.0, 670e12));
        // A faster model beside them is not a neighbour.
        probes.keep(&uuids[3], report(&uuids[3], 13.0, 900e12));
        snapshot.probe = Arc::new(probes);
        let slow = compare(&snapshot.devices[0], &snapshot, &LIMITS, None).remove(0);
        assert_eq!(slow.node, Some((672.5e12, 2)));
        assert!(slow.below_node && !slow.below_own, "{slow:?}");
        let fine = compare(&snapshot.devices[1], &snapshot, &LIMITS, None).remove(0);
        assert!(!fine.regressed(), "{fine:?}");
        let alone = compare(&snapshot.devices[3], &snapshot, &LIMITS, None).remove(0);
        assert_eq!(alone.node, None, "no other H200");
        // A probe from before a clear is not judged.
        let cleared = Some(crate::model::from_unix_seconds(10.5));
        assert!(compare(&snapshot.devices[0], &snapshot, &LIMITS, cleared).is_empty());
    }

    #[test]
    fn the_canary_and_the_pattern_test_are_judged_right_or_wrong_not_by_speed() {
        // What a real H200 pair's sweep gave: the canary's GEMM 8.5 % apart on healthy GPUs.
        let mut snapshot = node(2);
        let uuids: Vec<String> = snapshot.devices.iter().map(|d| d.identity.uuid.clone()).collect();
        for test in [Test::Sdc, Test::Memtest] {
            let mut probes = ProbeSnapshot::default();
            for (uuid, figure) in uuids.iter().zip([659e12, 720e12]) {
                probes.keep(
                    uuid,
                    ProbeReport::for_test(uuid, 10.0, test, (figure, figure), None, Some(true)),
                );
            }
            snapshot.probe = Arc::new(probes);
            assert!(
                compare(&snapshot.devices[0], &snapshot, &LIMITS, None).is_empty(),
                "{test:?}"
            );
        }
        // The same figures as a GEMM's are a regression.
        let mut probes = ProbeSnapshot::default();
        probes.keep(&uuids[0], report(&uuids[0], 10.0, 659e12));
        probes.keep(&uuids[1], report(&uuids[1], 11.0, 720e12));
        snapshot.probe = Arc::new(probes);
        assert!(
            compare(&snapshot.devices[0], &snapshot, &LIMITS, None)
                .remove(0)
                .below_node
        );
    }
}
