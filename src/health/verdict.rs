//! The node's verdict as the local API and `/api/v1/health` answer it: every GPU's state and
//! findings, the node's own findings, and one word for the node. What `gpuwarden health`,
//! Slurm's health check and node-problem-detector read; the same snapshot /metrics shows.

use crate::model::Snapshot;
use crate::model::health::{Finding, HealthState};
use serde::{Deserialize, Serialize};

/// The node: `unhealthy` when a GPU is unhealthy or a node finding is (a GPU missing from
/// the bus); `degraded` when one is degraded; `ok`; `unknown` before the first poll.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeVerdict {
    pub state: String,
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
    pub state: String,
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
    pub severity: String,
    pub message: String,
    /// A node finding's subject: a network port (`mlx5_0/1`), a missing GPU's PCI address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl From<&Finding> for FindingView {
    fn from(f: &Finding) -> FindingView {
        FindingView {
            reason: f.reason.to_string(),
            severity: f.severity.finding_label().to_string(),
            message: f.message.clone(),
            subject: f.subject.clone(),
        }
    }
}

/// The node's scheduled validation while it runs: how many of its GPUs are still to be probed.
pub fn sweep(snapshot: &Snapshot) -> Option<String> {
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

pub fn of(snapshot: &Snapshot) -> NodeVerdict {
    let worst = snapshot.worst_health().unwrap_or(HealthState::Ok);
    let validating = sweep(snapshot);
    NodeVerdict {
        state: if snapshot.generation == 0 {
            "unknown".to_string()
        } else if worst != HealthState::Unhealthy && validating.is_some() {
            "validating".to_string()
        } else {
            worst.label().to_string()
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
                state: d.health.state.label().to_string(),
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
    pub fn at<'a>(&'a self, state: &'a str) -> impl Iterator<Item = (Option<&'a GpuVerdict>, &'a FindingView)> + 'a {
        let gpus = self
            .gpus
            .iter()
            .flat_map(|g| g.findings.iter().map(move |f| (Some(g), f)));
        let node = self.node_findings.iter().map(|f| (None, f));
        gpus.chain(node).filter(move |(_, f)| f.severity == state)
    }

    /// The findings at `state` as one line each: "GPU 3 (GPU-5f2c..., 0000:19:00.0)
    /// xid_fatal: fatal XID since boot: Xid 48 ...", "node gpu_missing: ...".
    pub fn lines_at(&self, state: &str) -> Vec<String> {
        self.at(state)
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
