//! The scheduler side's families (`gpuwarden_drain_guard_*`): the Slurm health check's fleet
//! drain guard as it last reported about this node (model/scheduler.rs). Node series, absent
//! without a report in the last 10 minutes.

use super::{Family, Kind, Read};

fn guard(snapshot: &crate::model::Snapshot) -> Option<&crate::model::scheduler::DrainGuard> {
    let now = crate::model::unix_now();
    snapshot.scheduler.as_ref()?.drain_guard_at(now)
}

fn node(snapshot: &crate::model::Snapshot) -> Option<&crate::model::scheduler::NodeState> {
    let now = crate::model::unix_now();
    snapshot.scheduler.as_ref()?.node_at(now)
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpuwarden_scheduler_node_drained",
        kind: Kind::Gauge,
        unit: "",
        help: "The node as the Slurm health check last saw it: 1 for who drained it (gpuwarden, other: an admin or another tool) or none, 0 for the others; absent without a report in the last 10 minutes.",
        labels: &["by"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(n) = node(snapshot) {
                for by in crate::model::scheduler::Drained::ALL {
                    s.labelled(&[by.label()], super::one_if(n.drained == by));
                }
            }
        }),
    },
    Family {
        name: "gpuwarden_scheduler_jobs",
        kind: Kind::Gauge,
        unit: "",
        help: "Jobs running on the node as the Slurm health check last saw them (squeue); absent without a report in the last 10 minutes or where squeue did not answer.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| s.count(node(snapshot).and_then(|n| n.jobs).map(u64::from))),
    },
    Family {
        name: "gpuwarden_drain_guard_refused",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the fleet's cap last kept this unhealthy node in service: the Slurm health check's drain guard (max_drained nodes of its partitions already drained by gpuwarden) or the Kubernetes taint's (kubernetes.node.max_tainted nodes already tainted); 0 when it last allowed it or a later run shows the node drained by gpuwarden; absent without a decision in the last 10 minutes (GpuwardenDrainGuardActive).",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            let now = crate::model::unix_now();
            s.flag(snapshot.scheduler.as_ref().and_then(|r| r.drain_refused_at(now)))
        }),
    },
    Family {
        name: "gpuwarden_drain_guard_drained_nodes",
        kind: Kind::Gauge,
        unit: "",
        help: "Nodes out by gpuwarden as the fleet's cap last counted them: drained with a gpuwarden: reason in this node's partitions (Slurm), or carrying the taint gpuwarden/unhealthy among kubernetes.node.fleet_selector's nodes (Kubernetes).",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(g) = guard(snapshot) {
                s.value(f64::from(g.drained));
            }
        }),
    },
    Family {
        name: "gpuwarden_drain_guard_nodes",
        kind: Kind::Gauge,
        unit: "",
        help: "Nodes the fleet's cap counted among: this node's partitions (Slurm) or kubernetes.node.fleet_selector's nodes (Kubernetes).",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(g) = guard(snapshot) {
                s.value(f64::from(g.nodes));
            }
        }),
    },
];
