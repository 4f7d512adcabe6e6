//! The all-reduce rules (docs/health.md, "Node findings"): the latest all-reduce across the
//! node's GPUs (probe/together.rs) failed (`collective_failed`, unhealthy) or fell short of
//! what its path should carry or of the node's own baseline (`collective_slow`, degraded). One
//! finding for the node, naming the GPUs and the path; it holds until a later run says
//! otherwise or a person clears one of those GPUs (whose validation runs it again).

use super::table::{Check, Rule, StepAdvice};
use crate::model::Snapshot;
use crate::model::collective::CollectiveVerdict;
use crate::model::health::{Finding, HealthState, RuleId};

pub(crate) const COLLECTIVE_FAILED: Rule = Rule {
    reason: RuleId::CollectiveFailed,
    severity: HealthState::Unhealthy,
    worse_when: None,
    when: "the latest all-reduce across the node's NVIDIA GPUs (after its last validation passed; `probe.collective`) failed: an NCCL error, a wrong sum in the checked all-reduce, or a hang past `probe.timeout` (`gpuwarden_collective_runs_total{result=\"failed\"}`)",
    action: "drain the node: jobs across its GPUs would fail or hang. Look at the path the finding names (`nvidia-smi nvlink -s` and `-e`, `nvidia-smi topo -m`, the fabric manager's log), repair, then clear a GPU (`gpuwarden health clear`): its validation runs the all-reduce again",
    ends: false,
    dcgm: None,
    step: StepAdvice::None,
    source: "gpuwarden's all-reduce check (docs/probe.md)",
    check: Check::Device(|_| None),
};

pub(crate) const COLLECTIVE_SLOW: Rule = Rule {
    reason: RuleId::CollectiveSlow,
    severity: HealthState::Degraded,
    worse_when: None,
    when: "the latest all-reduce across the node's NVIDIA GPUs reached less than `probe.collective.nvlink_share` (0.5) of what their NVLinks carry one way at their rate (`pcie_share`, 0.25, of their PCIe links where there is none), or was `probe.regression_pct` below the node's median of earlier runs (`gpuwarden_collective_bus_bandwidth_bytes_per_second`)",
    action: "look at the path the finding names: links down or slow (`nvidia-smi nvlink -s`), a GPU outside the NVLink fabric, a PCIe link trained narrow; multi-GPU jobs run at this pace. The next validation measures it again",
    ends: false,
    dcgm: None,
    step: StepAdvice::None,
    source: "gpuwarden's all-reduce check (docs/probe.md)",
    check: Check::Device(|_| None),
};

/// The node's finding from the latest all-reduce, if it failed or was slow and no GPU of it
/// was cleared since.
pub(crate) fn finding(snapshot: &Snapshot) -> Option<Finding> {
    let run = snapshot.probe.collective.as_ref()?;
    let cleared = run
        .uuids
        .iter()
        .filter_map(|uuid| snapshot.clears.get(uuid))
        .any(|clear| clear.at > run.at);
    let rule = match run.verdict {
        _ if cleared => return None,
        CollectiveVerdict::Passed => return None,
        CollectiveVerdict::Slow => &COLLECTIVE_SLOW,
        CollectiveVerdict::Failed => &COLLECTIVE_FAILED,
    };
    let what = match run.verdict {
        CollectiveVerdict::Failed => "failed",
        _ => "was slow",
    };
    Some(Finding {
        reason: rule.reason.into(),
        severity: rule.severity,
        message: rule.message(
            &format!(
                "the all-reduce across {} over {} {what} at {}: {}",
                run.gpu_list(),
                run.path,
                crate::model::utc_seconds(run.at),
                run.detail,
            )
            .into(),
            None,
        ),
        subject: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::collective::CollectiveRun;
    use crate::model::health::Clear;

    fn run(verdict: CollectiveVerdict) -> CollectiveRun {
        CollectiveRun {
            at: 1000.0,
            gpus: vec![0, 1],
            uuids: vec!["GPU-0".into(), "GPU-1".into()],
            path: "NVLink, 18 links x 26.6 GB/s per GPU".into(),
            bound: Some(478e9),
            baseline: None,
            bus_bandwidth: None,
            nccl: None,
            verdict,
            detail: "ncclAllReduce: unhandled system error".into(),
        }
    }

    #[test]
    fn a_failed_run_is_unhealthy_a_slow_one_degraded_until_a_gpu_of_it_is_cleared() {
        let mut snapshot = Snapshot::default();
        assert_eq!(finding(&snapshot), None, "no run yet");
        let set = |snapshot: &mut Snapshot, verdict| {
            std::sync::Arc::make_mut(&mut snapshot.probe).collective = Some(run(verdict));
        };
        set(&mut snapshot, CollectiveVerdict::Passed);
        assert_eq!(finding(&snapshot), None);
        set(&mut snapshot, CollectiveVerdict::Failed);
        let f = finding(&snapshot).unwrap();
        assert_eq!(
            (f.reason, f.severity),
            (RuleId::CollectiveFailed.into(), HealthState::Unhealthy)
        );
        assert!(
            f.message.starts_with(
                "the all-reduce across GPUs 0, 1 over NVLink, 18 links x 26.6 GB/s per GPU failed at 1970-01-01T00:16:40Z: \
                 ncclAllReduce: unhandled system error: drain the node"
            ),
            "{}",
            f.message
        );
        set(&mut snapshot, CollectiveVerdict::Slow);
        assert_eq!(finding(&snapshot).unwrap().severity, HealthState::Degraded);
        let clear = |at: f64| Clear {
            at,
            reason: "reseated".into(),
            by: "uid 0".into(),
        };
        std::sync::Arc::make_mut(&mut snapshot.clears).insert("GPU-1".into(), clear(900.0));
        assert!(finding(&snapshot).is_some(), "a clear before the run lets nothing go");
        std::sync::Arc::make_mut(&mut snapshot.clears).insert("GPU-1".into(), clear(1100.0));
        assert_eq!(finding(&snapshot), None, "a clear of one of its GPUs after it does");
    }
}
