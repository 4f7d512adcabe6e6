//! `gpuwarden health scheduler-report`: what the Slurm health check's fleet drain guard decided about
//! this node (deploy/slurm/healthcheck.sh), sent to the daemon's local API, which serves it
//! as `gpuwarden_drain_guard_*` (alert GpuwardenDrainGuardActive). The request and its checks;
//! the model of what is kept is model/scheduler.rs.

use crate::model::scheduler::{DrainGuard, NodeState};
use serde::{Deserialize, Serialize};

/// `POST /api/v1/health/report`'s body.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_guard: Option<DrainGuard>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeState>,
}

/// The longest `max` kept: a count or a percentage.
const MAX_MAX: usize = 16;

/// Why a report was refused; each says what to send.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReportError {
    #[error("drain_guard.max is {0:?}; write a count or a percentage (5, 10%)")]
    Max(String),
    #[error("drain_guard.drained ({drained}) is more than drain_guard.nodes ({nodes})")]
    Counts { drained: u32, nodes: u32 },
}

impl ReportRequest {
    /// The drain guard's report, checked: `max` a count or a percentage, the counts sane.
    pub fn checked(&self) -> Result<Option<DrainGuard>, ReportError> {
        let Some(guard) = self.drain_guard.clone() else {
            return Ok(None);
        };
        let digits = guard.max.strip_suffix('%').unwrap_or(&guard.max);
        if guard.max.len() > MAX_MAX || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            let shown: String = guard.max.chars().take(MAX_MAX).collect();
            return Err(ReportError::Max(crate::input::printable(&shown)));
        }
        if guard.drained > guard.nodes {
            return Err(ReportError::Counts {
                drained: guard.drained,
                nodes: guard.nodes,
            });
        }
        Ok(Some(guard))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(max: &str, drained: u32, nodes: u32) -> ReportRequest {
        ReportRequest {
            drain_guard: Some(DrainGuard {
                refused: true,
                drained,
                nodes,
                max: max.into(),
            }),
            node: None,
        }
    }

    #[test]
    fn a_count_or_a_percentage_and_sane_counts_only() {
        assert!(request("2", 2, 3).checked().is_ok());
        assert!(request("10%", 2, 30).checked().is_ok());
        for bad in ["", "%", "ten", "5%%", "-1", "1e3", "\u{1b}[2J", &"9".repeat(17)] {
            assert!(
                matches!(request(bad, 0, 3).checked(), Err(ReportError::Max(_))),
                "{bad:?}"
            );
        }
        assert_eq!(
            request("2", 4, 3).checked(),
            Err(ReportError::Counts { drained: 4, nodes: 3 })
        );
        let none = ReportRequest {
            drain_guard: None,
            node: None,
        };
        assert_eq!(none.checked(), Ok(None));
    }
}
