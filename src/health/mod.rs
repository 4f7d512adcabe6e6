//! Findings a person should act on, and the health verdict they add up to.
//!
//! [`evaluate`] runs the rules once per snapshot, when it is put together, and stores each
//! GPU's verdict in it; `gpuwarden check` prints the findings, /metrics exports the verdict
//! as `gpu_health` and each finding as `gpu_health_reason`, the status page and systemd's
//! STATUS line count them. The rules are rows of a table (rules/); docs/health.md's table
//! is made of the same rows.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `baseline.rs` | Probe baselines (docs/probe.md, "Baselines"): each new probe's sustained figures compared with the same GPU's own median over its earlier probes and with... |
//! | `clear.rs` | Clearing a GPU after a repair (`gpuwarden health clear`, docs/health.md "Clear after a repair"): what is asked, which GPU it names, and what the answer says |
//! | `clear_nic.rs` | Clearing a network adapter after a repair (`gpuwarden health clear --nic mlx5_0`): a new cable or transceiver should not stay degraded for the hour its old... |
//! | `cli.rs` | `gpuwarden health`: the running daemon's verdict, asked over the local API's socket (local_api.rs) instead of polling the GPUs a second time |
//! | `collective.rs` | The all-reduce rules (docs/health.md, "Node findings"): the latest all-reduce across the node's GPUs (probe/together.rs) failed (`collective_failed`,... |
//! | `custom.rs` | Running the operator's rules (`health.custom_rules`) over each assembled snapshot, after the built-in rules and before the debounce: a rule that fires adds... |
//! | `debounce.rs` | The operator's debounce and hold per rule (`health.rules`): a finding is raised only once its condition has held for the rule's debounce, and once raised it... |
//! | `ladder.rs` | The remediation ladder's next step for a GPU that needs one (`remediation.mode: advise`; docs/health.md, "Remediation"): reboot the node, reset the GPU, or... |
//! | `memory.rs` | The health stage's memory: everything the rules need from earlier rounds and snapshots, in one place |
//! | `network.rs` | The network ports' rules (docs/health.md, "Network ports"): rows of the same shape as the GPUs' (rules/), judged per port over the snapshot's scan and its... |
//! | `nic_trends.rs` | What the health stage remembers of each network port between reads: how often it went down within `network.flap_window`, and how its error counters grew... |
//! | `node.rs` | The node's own findings as rows, like the GPUs' (health/rules/mod.rs) and the ports' (health/network.rs): each row a check over the whole snapshot, run in... |
//! | `nvswitch.rs` | The NVSwitch rule (docs/health.md, "Node findings"): a fatal SXID in the kernel log makes the node unhealthy, with a finding per switch that names the GPUs... |
//! | `rates.rs` | How fast a GPU's error counters grow: the errors of the last hour, for the operator's limits in `health.error_rates` (docs/health.md, "Error rates") |
//! | `rules/` | The health rules, one row each: its reason (the `reason` label), its severity, the condition in words and what to do (docs/health.md's table is these rows;... |
//! | `scheduler_report.rs` | `gpuwarden health scheduler-report`: what the Slurm health check's fleet drain guard decided about this node (deploy/slurm/healthcheck.sh), sent to the... |
//! | `slowdown.rs` | Hardware power slowdown memory: when each GPU last showed one, active in a round or as growth of the driver's counters, so the `hw_slowdown` rule holds its... |
//! | `starts.rs` | Clock-event starts: how often each reason became active from one poll to the next, since the daemon started and within the last `xid::RECENT_WINDOW`... |
//! | `table.rs` | The shape of a health rule, shared by the GPUs' table (rules/) and the network ports' (network.rs): a row (reason, severity, the condition and the action in... |
//! | `thermal_time.rs` | How long each GPU's clocks were slowed for temperature within the last hour, from the driver's own time counters (`gpu_clock_event_seconds_total` for... |
//! | `verdict.rs` | The node's verdict as the local API and `/api/v1/health` answer it: every GPU's state and findings, the node's own findings, and one word for the node |
//! <!-- /files -->

pub(crate) mod baseline;
pub(crate) mod clear;
pub(crate) mod clear_nic;
pub mod cli;
pub(crate) mod collective;
pub mod custom;
pub(crate) mod debounce;
pub(crate) mod ladder;
pub(crate) mod memory;
pub(crate) mod network;
pub(crate) mod nic_trends;
pub(crate) mod node;
pub(crate) mod nvswitch;
pub(crate) mod rates;
pub(crate) mod rules;
pub mod scheduler_report;
pub(crate) mod slowdown;
pub(crate) mod starts;
pub(crate) mod table;
pub(crate) mod thermal_time;
pub(crate) mod verdict;

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
            reason: rule.reason.into(),
            severity: hit.severity.unwrap_or(rule.severity),
            message: rule.message(&hit, Some(seen.device.identity.index)),
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
            let now = crate::model::unix_now();
            let next_step = snapshot.health_limits.remediation.as_ref().and_then(|limits| {
                let ladder = ladder::Ladder {
                    limits,
                    tried: &snapshot.remediation,
                    now,
                    boot: crate::service::clock::boot_seconds(),
                };
                // Only the XIDs an operator's (or a reset's) clear did not let go of: a
                // failed validation after a reset is a person's to look at, not another reset.
                let xids = xids_since_clear(snapshot, device);
                ladder::next_step(device, &findings, &xids, &ladder)
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
    // The node's own findings, row by row, after every GPU's verdict (a reboot's row reads
    // the GPUs' next steps).
    snapshot.node_findings = node::NODE_ROWS.iter().flat_map(|row| row(snapshot)).collect();
}

/// The GPU's XIDs seen after its last clear, as the rules count them.
/// Borrowed as they are when the GPU was never cleared (every round on a healthy node).
pub(super) fn xids_since_clear<'a>(
    snapshot: &'a Snapshot,
    device: &DeviceSnapshot,
) -> std::borrow::Cow<'a, [crate::model::xid::XidCount]> {
    let all = snapshot.xid.for_bus(&device.identity.pci_bus_id);
    match snapshot.clears.get(&device.identity.uuid).map(|c| c.time()) {
        None => std::borrow::Cow::Borrowed(all),
        Some(at) => all.iter().filter(|x| x.last_seen > at).cloned().collect(),
    }
}

fn device_findings(snapshot: &Snapshot, device: &DeviceSnapshot) -> Vec<Finding> {
    let cleared = snapshot.clears.get(&device.identity.uuid).map(|c| c.time());
    let probe_comparisons = baseline::compare(device, snapshot, &snapshot.health_limits.probe_regression, cleared);
    let unrecorded = unrecorded_swap(snapshot, device);
    findings(&Seen {
        probe_comparisons: &probe_comparisons,
        device,
        xids: snapshot.xid.for_bus(&device.identity.pci_bus_id),
        probe: snapshot.probe.reports.get(&device.identity.uuid),
        sdc_suspect: snapshot.probe.sdc_suspects.get(&device.identity.uuid),
        hbm_suspect: snapshot.probe.hbm_suspects.get(&device.identity.uuid),
        probe_error: snapshot
            .probe
            .last_error
            .get(&device.identity.uuid)
            .map(|e| e.why.as_str()),
        validation: unrecorded.as_ref().or(snapshot.validations.get(&device.identity.uuid)),
        limits: &snapshot.health_limits,
        cleared,
        board_swap: snapshot.board_swaps.get(&device.identity.uuid),
        fabric_manager: snapshot.fabric_manager.as_ref(),
        resetting: resetting(snapshot),
        now: SystemTime::now(),
    })
}

/// A new board in a slot where the journal knew another, before the journal has recorded the
/// swap (its writer looks at a snapshot only after it is published): the validation the
/// journal is about to start, so that the node is never "ok" in between. It comes before
/// any other validation the GPU has (an idle sweep's, which holds nothing). Off where the
/// journal would start none (`validate_after_clear: false`, a board that is not NVIDIA's).
fn unrecorded_swap(snapshot: &Snapshot, device: &DeviceSnapshot) -> Option<crate::model::health::Validation> {
    let id = &device.identity;
    let waits = snapshot.health_limits.validate_after_clear
        && id.vendor == crate::model::Vendor::Nvidia
        && !snapshot.board_swaps.contains_key(&id.uuid)
        && snapshot.known_boards.is_unrecorded_swap(&id.uuid, &id.pci_bus_id);
    waits.then(|| crate::model::health::Validation {
        since: crate::model::unix_now(),
        why: format!(
            "a new board in slot {} (the journal knew another board there and is recording the swap)",
            id.pci_bus_id
        ),
        outcome: None,
        kind: crate::model::health::ValidationKind::Repair,
    })
}

/// The GPU automatic remediation resets now, named as the snapshot shows it.
fn resetting(snapshot: &Snapshot) -> Option<rules::Resetting<'_>> {
    let uuid = snapshot.remediation.running.as_deref()?;
    let device = snapshot.devices.iter().find(|d| d.identity.uuid == uuid);
    Some(rules::Resetting {
        uuid,
        index: device.map_or(u32::MAX, |d| d.identity.index),
        pci_bus_id: device.map_or("", |d| d.identity.pci_bus_id.as_str()),
    })
}

/// The worst severity among the findings, `Ok` when there are none.
pub fn state(findings: &[Finding]) -> HealthState {
    findings.iter().map(|f| f.severity).max().unwrap_or(HealthState::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::{Clear, LadderLimits, Validation, ValidationKind, ValidationOutcome};
    use crate::model::xid::{Severity, XidCount};
    use crate::model::{DeviceReadings, Vendor};
    use std::time::Duration;

    /// A GPU reset for a fatal XID whose validation then failed: the clear that came with the
    /// reset let the XID go, so the next step is a person's service, not another reset (the
    /// reset budget would otherwise be spent on a GPU that a reset does not mend).
    #[test]
    fn a_failed_validation_after_a_reset_asks_for_service_not_another_reset() {
        let now = SystemTime::now();
        let at = |ago: u64| crate::model::unix_seconds(now - Duration::from_secs(ago));
        let mut snapshot = Snapshot {
            devices: vec![DeviceSnapshot::for_test(
                0,
                Vendor::Nvidia,
                "0000:19:00.0",
                DeviceReadings::default(),
            )],
            ..Default::default()
        };
        snapshot.xid.by_bus.insert(
            "0000:19:00.0".into(),
            vec![XidCount {
                xid: 94,
                severity: Severity::Fatal,
                count: 1,
                last_seen: now - Duration::from_secs(120),
                recent: 0,
            }],
        );
        snapshot.health_limits.remediation = Some(LadderLimits {
            reset_command: vec!["nvidia-smi".into(), "-r".into()],
            max_resets_per_day: 3,
            auto: true,
        });
        let step = |snapshot: &mut Snapshot| {
            evaluate(snapshot);
            let health = &snapshot.devices[0].health;
            (
                health.state,
                health.next_step.as_ref().map(|s| s.step.label().to_string()),
            )
        };
        assert_eq!(step(&mut snapshot), (HealthState::Unhealthy, Some("gpu_reset".into())));
        // The reset's clear, then its validation's probe failed.
        snapshot.clears = std::sync::Arc::new(
            [(
                "GPU-0".to_string(),
                Clear {
                    at: at(60),
                    reason: "GPU reset by gpuwarden's automatic remediation".into(),
                    by: "gpuwarden remediation".into(),
                },
            )]
            .into(),
        );
        snapshot.validations = std::sync::Arc::new(
            [(
                "GPU-0".to_string(),
                Validation {
                    since: at(60),
                    why: "GPU reset".into(),
                    outcome: Some(ValidationOutcome::Failed {
                        at: at(30),
                        detail: "gemm_bf16 short".into(),
                    }),
                    kind: ValidationKind::Repair,
                },
            )]
            .into(),
        );
        let (state, next) = step(&mut snapshot);
        assert_eq!(state, HealthState::Unhealthy, "the failed validation keeps it out");
        assert_eq!(next.as_deref(), Some("service"), "{:?}", snapshot.devices[0].health);
        // A new fatal XID after the clear does not make it a reset's again: its failed
        // validation still stands, and the strongest step of its findings wins.
        snapshot.xid.by_bus.get_mut("0000:19:00.0").unwrap()[0].last_seen = now;
        assert_eq!(step(&mut snapshot).1.as_deref(), Some("service"));
        // Once a person cleared that (a repair), the new XID's reset is the step.
        snapshot.validations = Default::default();
        assert_eq!(step(&mut snapshot).1.as_deref(), Some("gpu_reset"));
    }

    /// A new board where the journal knew another is validating from the first snapshot, not
    /// from the journal writer's first look at one (published before it looks): the swap's
    /// hand-over never reads ok. Only where the journal would start a validation.
    #[test]
    fn a_new_board_at_a_known_address_is_validating_before_the_journal_records_it() {
        let board = |vendor, pci: &str| DeviceSnapshot::for_test(0, vendor, pci, DeviceReadings::default());
        let mut snapshot = Snapshot {
            devices: vec![board(Vendor::Nvidia, "0000:19:00.0")],
            ..Default::default()
        };
        snapshot.health_limits.validate_after_clear = true;
        snapshot.known_boards = std::sync::Arc::new(crate::model::health::KnownBoards {
            uuids: ["GPU-old".to_string(), "AMD-0".to_string()].into(),
            addresses: ["0000:19:00.0".to_string()].into(),
        });
        let validating = |snapshot: &mut Snapshot| {
            evaluate(snapshot);
            let health = &snapshot.devices[0].health;
            let finding = health.findings.iter().find(|f| rules::VALIDATING.made(f));
            finding.map(|f| (health.state, f.message.clone()))
        };
        let (state, message) = validating(&mut snapshot).expect("validating");
        assert_eq!(state, HealthState::Unhealthy);
        assert!(
            message.contains("a new board in slot 0000:19:00.0 (the journal knew another board there"),
            "{message}"
        );
        // Recorded: the journal's own validation (set before the swap) says it from now on.
        let mut recorded = snapshot.clone();
        recorded.board_swaps = std::sync::Arc::new(
            [(
                "GPU-0".to_string(),
                crate::model::health::BoardSwap {
                    at: 1.0,
                    previous_uuid: "GPU-old".into(),
                    previous_serial: None,
                },
            )]
            .into(),
        );
        assert_eq!(validating(&mut recorded), None);
        // A board the journal knows (it moved), a new address, validation off, an AMD board:
        // the journal starts none, so neither does the health stage.
        let mut known = snapshot.clone();
        known.known_boards = std::sync::Arc::new(crate::model::health::KnownBoards {
            uuids: ["GPU-0".to_string()].into(),
            addresses: ["0000:19:00.0".to_string()].into(),
        });
        assert_eq!(validating(&mut known), None);
        let mut elsewhere = snapshot.clone();
        elsewhere.devices = vec![board(Vendor::Nvidia, "0000:2a:00.0")];
        assert_eq!(validating(&mut elsewhere), None);
        let mut off = snapshot.clone();
        off.health_limits.validate_after_clear = false;
        assert_eq!(validating(&mut off), None);
        let mut amd = snapshot.clone();
        amd.devices = vec![board(Vendor::Amd, "0000:19:00.0")];
        amd.known_boards = std::sync::Arc::new(crate::model::health::KnownBoards {
            uuids: ["GPU-old".to_string()].into(),
            addresses: ["0000:19:00.0".to_string()].into(),
        });
        assert_eq!(validating(&mut amd), None);
    }
}
