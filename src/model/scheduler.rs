//! What the scheduler's side says of this node: the Slurm health check reports its fleet drain
//! guard's latest decision and the node as Slurm shows it (drained, by whom; jobs running) at
//! each run (`gpuwarden health scheduler-report`, deploy/slurm/healthcheck.sh), which the daemon serves
//! (`gpuwarden_drain_guard_*`, alert GpuwardenDrainGuardActive; `gpuwarden_scheduler_*`). A report counts
//! for [`REPORT_FRESH`]: a check that stopped running says nothing any more.

use serde::{Deserialize, Serialize};

/// How long a report counts.
pub const REPORT_FRESH: std::time::Duration = std::time::Duration::from_secs(600);

/// The fleet drain guard's decision about this node, and what it counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainGuard {
    /// It did not drain this node: `drained` reached `max`.
    pub refused: bool,
    /// Nodes of this node's partitions drained with a `gpuwarden:` reason.
    pub drained: u32,
    /// Nodes in those partitions.
    pub nodes: u32,
    /// `max_drained` as the program was given it: `5`, `10%`.
    pub max: String,
}

/// Who drained the node, as the scheduler shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Drained {
    /// Drained with a `gpuwarden:` reason.
    Gpuwarden,
    /// Drained by someone else (an admin, another tool).
    Other,
    /// Not drained.
    None,
}

impl Drained {
    pub const ALL: [Drained; 3] = [Drained::Gpuwarden, Drained::Other, Drained::None];

    pub fn label(self) -> &'static str {
        match self {
            Drained::Gpuwarden => "gpuwarden",
            Drained::Other => "other",
            Drained::None => "none",
        }
    }
}

/// The node as the scheduler showed it at the health check's last run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeState {
    pub drained: Drained,
    /// Jobs running on the node; None where the check could not ask (squeue failed).
    #[serde(default)]
    pub jobs: Option<u32>,
}

/// The latest report, as the daemon keeps it: each part with when it came (Unix seconds,
/// the daemon's clock), since the check reports its drain guard only when it considers a drain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulerReport {
    pub drain_guard: Option<(f64, DrainGuard)>,
    pub node: Option<(f64, NodeState)>,
}

fn fresh<T>(part: &Option<(f64, T)>, now: f64) -> Option<&T> {
    part.as_ref()
        .filter(|(at, _)| now - at <= REPORT_FRESH.as_secs_f64() && now >= at - 60.0)
        .map(|(_, value)| value)
}

impl SchedulerReport {
    /// The drain guard's decision, while it is fresh at `now` (Unix seconds).
    pub fn drain_guard_at(&self, now: f64) -> Option<&DrainGuard> {
        fresh(&self.drain_guard, now)
    }

    /// The node's state, while it is fresh at `now` (Unix seconds).
    pub fn node_at(&self, now: f64) -> Option<&NodeState> {
        fresh(&self.node, now)
    }

    /// Whether the drain guard's refusal stands at `now`: its latest decision, fresh, was a
    /// refusal, and no later report shows the node drained by gpuwarden after all (a slower,
    /// overlapping run of the check whose refusal came in after the drain). None without a
    /// fresh decision.
    pub fn drain_refused_at(&self, now: f64) -> Option<bool> {
        let (decided, guard) = self.drain_guard.as_ref()?;
        fresh(&self.drain_guard, now)?;
        let drained_since = fresh(&self.node, now).is_some_and(|node| node.drained == Drained::Gpuwarden)
            && self.node.as_ref().is_some_and(|(at, _)| at >= decided);
        Some(guard.refused && !drained_since)
    }

    /// When the node's state came (Unix seconds), while it is fresh at `now`.
    pub fn node_reported_at(&self, now: f64) -> Option<f64> {
        fresh(&self.node, now).and(self.node.as_ref().map(|(at, _)| *at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_counts_for_ten_minutes() {
        let guard = DrainGuard {
            refused: true,
            drained: 2,
            nodes: 3,
            max: "2".into(),
        };
        let node = NodeState {
            drained: Drained::Gpuwarden,
            jobs: Some(0),
        };
        let report = SchedulerReport {
            drain_guard: Some((1000.0, guard.clone())),
            node: Some((1500.0, node.clone())),
        };
        assert_eq!(report.drain_guard_at(1000.0 + 599.0), Some(&guard));
        assert_eq!(report.drain_guard_at(1000.0 + 601.0), None, "stale");
        assert_eq!(report.drain_guard_at(800.0), None, "a clock that went back");
        assert_eq!(report.node_at(1601.0), Some(&node), "each part has its own time");
    }

    #[test]
    fn a_refusal_that_came_in_after_the_node_was_drained_by_gpuwarden_does_not_stand() {
        let guard = |refused| DrainGuard {
            refused,
            drained: 2,
            nodes: 3,
            max: "2".into(),
        };
        let node = |drained| NodeState { drained, jobs: Some(0) };
        let mut report = SchedulerReport {
            drain_guard: Some((1000.0, guard(true))),
            node: Some((990.0, node(Drained::None))),
        };
        assert_eq!(report.drain_refused_at(1001.0), Some(true));
        report.node = Some((1010.0, node(Drained::Other)));
        assert_eq!(
            report.drain_refused_at(1011.0),
            Some(true),
            "an admin's drain is not ours"
        );
        report.node = Some((1010.0, node(Drained::Gpuwarden)));
        assert_eq!(
            report.drain_refused_at(1011.0),
            Some(false),
            "drained by gpuwarden since"
        );
        report.drain_guard = Some((1020.0, guard(true)));
        assert_eq!(report.drain_refused_at(1021.0), Some(true), "refused again after that");
        assert_eq!(report.drain_refused_at(1020.0 + 601.0), None, "stale");
    }
}
