//! Automatic remediation's families (`remediation.mode: auto`; model/remediation.rs): what it
//! did, what holds it back, and whether the node needs a reboot. Absent in the other modes.

use super::{Family, Kind, Read};
use crate::model::Snapshot;
use crate::model::remediation::Remediations;

/// The executor's state, with `auto` on.
fn auto(snapshot: &Snapshot) -> Option<&Remediations> {
    snapshot
        .health_limits
        .remediation
        .as_ref()
        .filter(|r| r.auto)
        .map(|_| snapshot.remediation.as_ref())
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpuwarden_remediation_failed",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when automatic remediation failed in this boot: the last reset of a GPU failed, or the node needs a reboot; 0 otherwise; absent unless remediation.mode is auto (GpuwardenRemediationFailed).",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| s.flag(auto(snapshot).map(Remediations::failed))),
    },
    Family {
        name: "gpuwarden_reboot_required",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when automatic remediation found the node needs a reboot (a reset failed, or a GPU's step is a reboot; the reboot_required finding and remediation.reboot_marker say why); absent unless remediation.mode is auto.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| s.flag(auto(snapshot).map(|r| r.reboot_required.is_some()))),
    },
    Family {
        name: "gpu_remediation_resets",
        kind: Kind::Gauge,
        unit: "",
        help: "Automatic resets of the GPU within the last 24 hours, by outcome (succeeded, failed, interrupted: the daemon stopped while it ran); remediation.max_resets_per_day caps them. Absent unless remediation.mode is auto.",
        labels: &["outcome"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            let Some(done) = auto(snapshot) else {
                return;
            };
            let now = crate::model::remediation::Now {
                wall: crate::model::unix_now(),
                boot: crate::service::clock::boot_seconds(),
            };
            for outcome in crate::model::remediation::AttemptOutcome::LABELS {
                let n = done
                    .attempts
                    .iter()
                    .filter(|a| {
                        a.uuid == d.identity.uuid
                            && a.step == crate::model::health::Step::GpuReset
                            && a.outcome.label() == outcome
                    })
                    .filter(|a| a.within_a_day(now))
                    .count();
                s.labelled(&[outcome], n as f64);
            }
        }),
    },
    Family {
        name: "gpu_remediation_held_back",
        kind: Kind::Gauge,
        unit: "",
        help: "1 for the guard (reboot_required, paused, fleet_guard, scheduler, processes, reset_budget) that holds back the automatic reset of a GPU whose next step is one; absent otherwise. gpuwarden's log says what the guard saw.",
        labels: &["guard"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            if let Some(refusal) = auto(snapshot).and_then(|r| r.held_back.get(&d.identity.uuid)) {
                s.labelled(&[refusal.guard.label()], 1.0);
            }
        }),
    },
];
