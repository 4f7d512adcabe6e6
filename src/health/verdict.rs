//! The node's verdict as the local API and `/api/v1/health` answer it: every GPU's state and
//! findings, the node's own findings, and one word for the node. What `gpuwarden health`,
//! Slurm's health check and node-problem-detector read; the same snapshot /metrics shows.

use crate::model::Snapshot;
use crate::model::health::{Finding, HealthState};
use serde::{Deserialize, Serialize};

/// The node's one word: `unhealthy` when a GPU is unhealthy or a node finding is (a GPU
/// missing from the bus); `degraded` when one is degraded; `ok`; `validating` while the idle
/// node's scheduled validation runs and nothing is unhealthy; `unknown` before the first poll
/// (and, read by the CLI, any word a newer daemon says that this one does not know).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictState {
    Ok,
    Degraded,
    Unhealthy,
    Validating,
    #[serde(other)]
    Unknown,
}

impl VerdictState {
    pub fn label(self) -> &'static str {
        match self {
            VerdictState::Ok => "ok",
            VerdictState::Degraded => "degraded",
            VerdictState::Unhealthy => "unhealthy",
            VerdictState::Validating => "validating",
            VerdictState::Unknown => "unknown",
        }
    }
}

impl From<HealthState> for VerdictState {
    fn from(state: HealthState) -> VerdictState {
        match state {
            HealthState::Ok => VerdictState::Ok,
            HealthState::Degraded => VerdictState::Degraded,
            HealthState::Unhealthy => VerdictState::Unhealthy,
        }
    }
}

impl std::fmt::Display for VerdictState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A finding's severity as the verdict says it: a finding that leaves its GPU ok is a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Notice,
    Degraded,
    Unhealthy,
}

impl Level {
    /// Worst first, as `gpuwarden health` lists them.
    pub const WORST_FIRST: [Level; 3] = [Level::Unhealthy, Level::Degraded, Level::Notice];

    pub fn label(self) -> &'static str {
        match self {
            Level::Notice => "notice",
            Level::Degraded => "degraded",
            Level::Unhealthy => "unhealthy",
        }
    }
}

impl From<HealthState> for Level {
    fn from(state: HealthState) -> Level {
        match state {
            HealthState::Ok => Level::Notice,
            HealthState::Degraded => Level::Degraded,
            HealthState::Unhealthy => Level::Unhealthy,
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeVerdict {
    pub state: VerdictState,
    /// "8 GPU(s): 1 unhealthy, 0 degraded", as systemd's status line says it.
    pub summary: String,
    pub gpus: Vec<GpuVerdict>,
    pub node_findings: Vec<FindingView>,
    /// The snapshot's number: it grows with every poll round.
    pub generation: u64,
    /// The idle node's scheduled validation while it runs (`probe.mode: node`): "4 of 8 GPUs
    /// to go". The state is then `validating` unless something is unhealthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validating: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuVerdict {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    pub name: String,
    pub serial: Option<String>,
    pub state: HealthState,
    pub findings: Vec<FindingView>,
    /// What to do next about it, with `remediation.mode: advise` (health/ladder.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_step: Option<crate::model::health::NextStep>,
    /// With `remediation.mode: auto`: the guard that holds its reset back now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_back: Option<crate::model::remediation::Refusal>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindingView {
    pub reason: String,
    pub severity: Level,
    pub message: String,
    /// A node finding's subject: a network port (`mlx5_0/1`), a missing GPU's PCI address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl From<&Finding> for FindingView {
    fn from(f: &Finding) -> FindingView {
        FindingView {
            reason: f.reason.to_string(),
            severity: f.severity.into(),
            message: f.message.clone(),
            subject: f.subject.clone(),
        }
    }
}

/// The node's scheduled validation while it runs: how many of its GPUs are still to be probed.
pub(crate) fn sweep(snapshot: &Snapshot) -> Option<String> {
    use crate::model::health::ValidationKind;
    let sweep: Vec<_> = snapshot
        .devices
        .iter()
        .filter_map(|d| snapshot.validations.get(&d.identity.uuid))
        .filter(|v| v.kind == ValidationKind::Sweep)
        .collect();
    let pending = sweep.iter().filter(|v| v.pending()).count();
    (pending > 0).then(|| {
        format!(
            "the node's scheduled validation: {pending} of {} GPU(s) to probe; new work waits until it ends",
            sweep.len()
        )
    })
}

pub(crate) fn of(snapshot: &Snapshot) -> NodeVerdict {
    let worst = snapshot.worst_health().unwrap_or(HealthState::Ok);
    let validating = sweep(snapshot);
    NodeVerdict {
        state: if snapshot.generation == 0 {
            VerdictState::Unknown
        } else if worst != HealthState::Unhealthy && validating.is_some() {
            VerdictState::Validating
        } else {
            worst.into()
        },
        validating,
        summary: snapshot.health_summary(),
        gpus: snapshot
            .devices
            .iter()
            .map(|d| GpuVerdict {
                index: d.identity.index,
                uuid: d.identity.uuid.clone(),
                pci_bus_id: d.identity.pci_bus_id.clone(),
                name: d.identity.name.clone(),
                serial: d.identity.serial.clone(),
                state: d.health.state,
                findings: d.health.findings.iter().map(FindingView::from).collect(),
                next_step: d.health.next_step.clone(),
                held_back: snapshot.remediation.held_back.get(&d.identity.uuid).cloned(),
            })
            .collect(),
        node_findings: snapshot.node_findings.iter().map(FindingView::from).collect(),
        generation: snapshot.generation,
    }
}

impl NodeVerdict {
    /// The findings at `state` (unhealthy, say), each with its GPU (None: the node's own).
    pub fn at(&self, level: Level) -> impl Iterator<Item = (Option<&GpuVerdict>, &FindingView)> {
        let gpus = self
            .gpus
            .iter()
            .flat_map(|g| g.findings.iter().map(move |f| (Some(g), f)));
        let node = self.node_findings.iter().map(|f| (None, f));
        gpus.chain(node).filter(move |(_, f)| f.severity == level)
    }

    /// The findings at `state` as one line each: "GPU 3 (GPU-5f2c..., 0000:19:00.0)
    /// xid_fatal: fatal XID since boot: Xid 48 ...", "node gpu_missing: ...".
    pub fn lines_at(&self, level: Level) -> Vec<String> {
        self.at(level)
            .map(|(gpu, f)| match gpu {
                Some(g) => format!(
                    "GPU {} ({}, {}) {}: {}",
                    g.index, g.uuid, g.pci_bus_id, f.reason, f.message
                ),
                None => format!("node {}: {}", f.reason, f.message),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The node's and a finding's word is the same in the JSON as in the CLI's text, and a
    /// word a newer daemon says that this CLI does not know reads as unknown (exit 2).
    #[test]
    fn verdict_words_are_one_spelling_and_a_new_one_reads_unknown() {
        for state in [
            VerdictState::Ok,
            VerdictState::Degraded,
            VerdictState::Unhealthy,
            VerdictState::Validating,
            VerdictState::Unknown,
        ] {
            assert_eq!(serde_json::to_string(&state).unwrap(), format!("\"{state}\""));
        }
        for level in Level::WORST_FIRST {
            assert_eq!(serde_json::to_string(&level).unwrap(), format!("\"{level}\""));
        }
        let newer: VerdictState = serde_json::from_str("\"draining\"").unwrap();
        assert_eq!(newer, VerdictState::Unknown);
    }
}
