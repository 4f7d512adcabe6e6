//! Findings a person should act on, and the health verdict they add up to.
//!
//! [`evaluate`] runs the rules once per snapshot, when it is put together, and stores each
//! GPU's verdict in it; `gpuwarden check` prints the findings, /metrics exports the verdict
//! as `gpu_health` and each finding as `gpu_health_reason`, the status page and systemd's
//! STATUS line count them. The rules are rows of a table (rules.rs); docs/health.md's table
//! is made of the same rows.

pub mod baseline;
pub mod clear;
pub mod clear_nic;
pub mod cli;
pub mod debounce;
pub mod ladder;
pub mod memory;
pub mod network;
pub mod nic_trends;
pub mod nvswitch;
pub mod rates;
pub mod rules;
pub mod scheduler_report;
pub mod slowdown;
pub mod starts;
pub mod table;
pub mod thermal_time;
pub mod verdict;

pub use crate::model::health::{DeviceHealth, Finding, HealthState};
use crate::model::{DeviceSnapshot, Snapshot};
use rules::{Check, RULES, Seen};
use std::time::SystemTime;

/// Everything about one GPU that a person should act on: the rules' findings, in the
/// rules' order.
pub fn findings(seen: &Seen) -> Vec<Finding> {
    let readings = seen.device.answered();
    let mut out = Vec::new();
    for rule in RULES {
        let hit = match (&rule.check, readings) {
            (Check::Device(check), _) => check(seen),
            (Check::Readings(check), Some(r)) => check(seen, r),
            (Check::Readings(_), None) | (Check::Port(_), _) => None,
        };
        let Some(hit) = hit else {
            continue;
        };
        out.push(Finding {
            reason: rule.reason,
            severity: hit.severity.unwrap_or(rule.severity),
            message: hit.message,
            subject: None,
        });
        if rule.ends {
            break;
        }
    }
    out
}

/// Computes every GPU's verdict for this snapshot, from its readings, its XIDs (matched by
/// PCI bus id, with the snapshot's critical-XID hold) and its last probe.
pub fn evaluate(snapshot: &mut Snapshot) {
    let verdicts: Vec<DeviceHealth> = snapshot
        .devices
        .iter()
        .map(|device| {
            let findings = device_findings(snapshot, device);
            let now = crate::model::unix_seconds(SystemTime::now());
            let next_step = snapshot.health_limits.remediation.as_ref().and_then(|limits| {
                let ladder = ladder::Ladder {
                    limits,
                    tried: &snapshot.remediation,
                    now,
                };
                ladder::next_step(
                    device,
                    &findings,
                    snapshot.xid.for_bus(&device.identity.pci_bus_id),
                    &ladder,
                )
            });
            DeviceHealth {
                state: state(&findings),
                findings,
                next_step,
            }
        })
        .collect();
    for (device, health) in snapshot.devices.iter_mut().zip(verdicts) {
        device.health = health;
    }
    snapshot.node_findings = snapshot
        .missing_gpus()
        .map(|gpu| Finding {
            reason: rules::GPU_MISSING.reason,
            severity: rules::GPU_MISSING.severity,
            message: format!(
                "{} GPU {} is on the PCI bus but no backend shows it ({}): it fell off the bus at boot or \
                 the driver did not bind; check dmesg, then reseat or replace it",
                gpu.vendor,
                gpu.pci_bus_id,
                match &gpu.driver {
                    Some(driver) => format!("bound to {driver}"),
                    None => "no driver bound".to_string(),
                }
            ),
            subject: Some(gpu.pci_bus_id.clone()),
        })
        .collect();
    let ports = network::findings(snapshot);
    snapshot.node_findings.extend(ports);
    let switches = nvswitch::findings(snapshot);
    snapshot.node_findings.extend(switches);
    let manager = nvswitch::fabric_manager_down(snapshot);
    snapshot.node_findings.extend(manager);
    let reboot = snapshot.remediation.reboot_required.as_ref().map(|r| Finding {
        reason: rules::REBOOT_REQUIRED.reason,
        severity: rules::REBOOT_REQUIRED.severity,
        message: format!(
            "the node needs a reboot since {}: {}; drain it and reboot it (gpuwarden does not)",
            crate::model::utc_seconds(r.since),
            r.why
        ),
        subject: Some(r.uuid.clone()),
    });
    snapshot.node_findings.extend(reboot);
}

fn device_findings(snapshot: &Snapshot, device: &DeviceSnapshot) -> Vec<Finding> {
    let cleared = snapshot.clears.get(&device.identity.uuid).map(|c| c.time());
    let probe_comparisons = baseline::compare(device, snapshot, &snapshot.health_limits.probe_regression, cleared);
    findings(&Seen {
        probe_comparisons: &probe_comparisons,
        device,
        xids: snapshot.xid.for_bus(&device.identity.pci_bus_id),
        probe: snapshot.probe.reports.get(&device.identity.uuid),
        probe_error: snapshot.probe.last_error.get(&device.identity.uuid).map(String::as_str),
        validation: snapshot.validations.get(&device.identity.uuid),
        limits: &snapshot.health_limits,
        cleared,
        board_swap: snapshot.board_swaps.get(&device.identity.uuid),
        fabric_manager: snapshot.fabric_manager.as_ref(),
        now: SystemTime::now(),
    })
}

/// The worst severity among the findings, `Ok` when there are none.
pub fn state(findings: &[Finding]) -> HealthState {
    findings.iter().map(|f| f.severity).max().unwrap_or(HealthState::Ok)
}
