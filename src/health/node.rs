//! The node's own findings as rows, like the GPUs' (health/rules/mod.rs) and the ports'
//! (health/network.rs): each row a check over the whole snapshot, run in order by
//! `super::evaluate` after every GPU's verdict, each finding made by its rule's words
//! (`Rule::message`), so docs/health.md's table, the alerts and the report say the same.

use super::rules::{self, Rule};
use crate::model::Snapshot;
use crate::model::health::Finding;

/// One row of the node's checks: its findings over the whole snapshot.
pub(crate) type NodeRow = fn(&Snapshot) -> Vec<Finding>;

/// The node's rows, in the order their findings are listed; the comment above each says which
/// rules its findings are made by (a row over the ports makes several).
pub(crate) const NODE_ROWS: &[NodeRow] = &[
    // gpu_missing: a GPU on the PCI bus that no backend shows
    gpu_missing,
    // the network ports' rules (health/network.rs)
    super::network::findings,
    // the NVSwitches' SXIDs (health/nvswitch.rs)
    super::nvswitch::findings,
    // fabric_manager_down
    fabric_manager_down,
    // reboot_required: the mark, or a GPU whose step became a reboot
    reboot_required,
    // collective: the GPUs together (health/collective.rs)
    collective,
];

/// A finding of `rule` with `seen` and the rule's action, about `subject`.
fn finding(rule: &Rule, seen: String, subject: String) -> Finding {
    Finding {
        reason: rule.reason.into(),
        severity: rule.severity,
        message: rule.message(&seen.into(), None),
        subject: Some(subject),
    }
}

fn gpu_missing(snapshot: &Snapshot) -> Vec<Finding> {
    snapshot
        .missing_gpus()
        .map(|gpu| {
            let driver = match &gpu.driver {
                Some(driver) => format!("bound to {driver}"),
                None => "no driver bound".to_string(),
            };
            finding(
                &rules::GPU_MISSING,
                format!(
                    "{} GPU {} is on the PCI bus but no backend shows it ({driver}): it fell off the bus at boot or the \
                     driver did not bind",
                    gpu.vendor, gpu.pci_bus_id
                ),
                gpu.pci_bus_id.clone(),
            )
        })
        .collect()
}

fn fabric_manager_down(snapshot: &Snapshot) -> Vec<Finding> {
    super::nvswitch::fabric_manager_down(snapshot).into_iter().collect()
}

fn collective(snapshot: &Snapshot) -> Vec<Finding> {
    super::collective::finding(snapshot).into_iter().collect()
}

/// The reboot mark automatic remediation wrote; without one, a GPU whose step became a
/// reboot in this very snapshot.
fn reboot_required(snapshot: &Snapshot) -> Vec<Finding> {
    match &snapshot.remediation.reboot_required {
        Some(r) => vec![finding(
            &rules::REBOOT_REQUIRED,
            format!(
                "the node needs a reboot since {}: {}",
                crate::model::utc_seconds(r.since),
                r.why
            ),
            r.uuid.clone(),
        )],
        None => reboot_pending(snapshot).into_iter().collect(),
    }
}

/// In auto mode a GPU whose step became a reboot (a reset that did not hold, the driver or
/// the catalog asking) is the node's reboot in this very snapshot: the executor writes the
/// mark a moment later, and in between the node must not read fit (a Slurm check would
/// resume it). The same transition that publishes what made the step (a validation that
/// passed, a new XID) publishes this finding.
fn reboot_pending(snapshot: &Snapshot) -> Option<Finding> {
    let auto = snapshot.health_limits.remediation.as_ref().is_some_and(|r| r.auto);
    if !auto {
        return None;
    }
    snapshot.devices.iter().find_map(|d| {
        let step = d
            .health
            .next_step
            .as_ref()
            .filter(|s| s.step == crate::model::health::Step::RebootRequired)?;
        Some(finding(
            &rules::REBOOT_REQUIRED,
            format!(
                "the node needs a reboot: GPU {}: {}; automatic remediation marks it now",
                d.identity.index, step.why
            ),
            d.identity.uuid.clone(),
        ))
    })
}
