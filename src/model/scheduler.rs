//! What the scheduler's side says of this node: the Slurm health check reports its fleet drain
//! guard's latest decision (`gpuwarden health report`, deploy/slurm/healthcheck.sh), which the
//! daemon serves (`gpuwarden_drain_guard_*`, alert GpuwardenDrainGuardActive). A report counts
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

/// The latest report, as the daemon keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerReport {
    /// Unix seconds, the daemon's clock when it came.
    pub at: f64,
    pub drain_guard: Option<DrainGuard>,
}

impl SchedulerReport {
    /// The drain guard's decision, while the report is fresh at `now` (Unix seconds).
    pub fn drain_guard_at(&self, now: f64) -> Option<&DrainGuard> {
        (now - self.at <= REPORT_FRESH.as_secs_f64() && now >= self.at - 60.0)
            .then_some(self.drain_guard.as_ref())
            .flatten()
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
        let report = SchedulerReport {
            at: 1000.0,
            drain_guard: Some(guard.clone()),
        };
        assert_eq!(report.drain_guard_at(1000.0 + 599.0), Some(&guard));
        assert_eq!(report.drain_guard_at(1000.0 + 601.0), None, "stale");
        assert_eq!(report.drain_guard_at(800.0), None, "a clock that went back");
    }
}
