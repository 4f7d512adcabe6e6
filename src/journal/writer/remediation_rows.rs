//! The journal's `remediation` rows: each GPU's next remediation step (`remediation.mode`
//! advise or auto, health/ladder.rs) when it first appears or changes, so the report shows
//! what gpuwarden advised and when (a restart states the advice again); and with `auto`, each
//! step the executor ran (its output, exit and duration: `details.attempt`) and the node's
//! reboot mark (`details.reboot_required`), which a restart's seed reads back
//! (journal/store/read.rs, `remediation`).

use crate::journal::event::{Event, GpuRef, Kind};
use crate::model::Snapshot;
use crate::model::health::NextStep;
use crate::model::remediation::{Attempt, RebootRequired};
use serde_json::json;
use std::collections::BTreeMap;

/// What the journal last wrote of every GPU's next step, and of the executor's work.
#[derive(Debug, Default)]
pub(crate) struct RemediationRows {
    seen: BTreeMap<String, NextStep>,
    /// Attempts that started at or before this (Unix seconds) are written (or were seeded).
    /// (A reset's start and the reboot mark are written by the executor itself, and waited
    /// for, before it acts: remediation/auto.rs.)
    attempts_up_to: f64,
}

fn gpu_ref(uuid: &str, index: u32, pci_bus_id: &str, snapshot: &Snapshot) -> GpuRef {
    GpuRef {
        uuid: uuid.to_string(),
        serial: snapshot
            .devices
            .iter()
            .find(|d| d.identity.uuid == uuid)
            .and_then(|d| d.identity.serial.clone()),
        pci_bus_id: pci_bus_id.to_string(),
        index: Some(index),
    }
}

/// A step the executor ran, with its outcome, output and duration (`details.attempt`, what a
/// restart's seed reads back); also what a refill writes again (journal/writer/refill.rs).
pub(crate) fn attempt_row(a: &Attempt, snapshot: &Snapshot, at: f64) -> Event {
    let failed = match &a.outcome {
        crate::model::remediation::AttemptOutcome::Failed { why } => format!(": {why}"),
        _ => String::new(),
    };
    Event::new(
        at,
        Kind::Remediation,
        Some(gpu_ref(&a.uuid, a.index, &a.pci_bus_id, snapshot)),
        format!(
            "{} {} in {:.1} s{failed}",
            a.step,
            a.outcome.label(),
            a.duration_seconds
        ),
        json!({"attempt": a}),
    )
}

/// The node's reboot mark (`details.reboot_required`): written by the executor before the
/// marker file (remediation/auto.rs), and again by a refill.
pub(crate) fn reboot_row(mark: &RebootRequired, gpu: GpuRef) -> Event {
    Event::new(
        mark.since,
        Kind::Remediation,
        Some(gpu),
        format!("reboot required: {}", mark.why),
        json!({"reboot_required": mark}),
    )
}

impl RemediationRows {
    /// Starts after what the seed gave the daemon: those rows are written already.
    pub(crate) fn from_seed(seed: &crate::model::remediation::Remediations) -> RemediationRows {
        RemediationRows {
            seen: BTreeMap::new(),
            attempts_up_to: seed.attempts.iter().map(|a| a.started).fold(0.0, f64::max),
        }
    }

    /// The rows for the steps the executor ran and the reboot mark it set since the last look.
    fn executor_rows(&mut self, snapshot: &Snapshot, now: f64, rows: &mut Vec<Event>) {
        let done = &snapshot.remediation;
        let up_to = self.attempts_up_to;
        for a in done.attempts.iter().filter(|a| a.started > up_to) {
            rows.push(attempt_row(a, snapshot, now));
            self.attempts_up_to = a.started;
        }
    }

    /// The rows for the next steps that appeared or changed since the last look.
    pub(crate) fn look(&mut self, snapshot: &Snapshot, now: f64) -> Vec<Event> {
        let mut rows = Vec::new();
        self.executor_rows(snapshot, now, &mut rows);
        for d in &snapshot.devices {
            let uuid = &d.identity.uuid;
            match &d.health.next_step {
                Some(next) if self.seen.get(uuid) != Some(next) => {
                    let command = next.command.as_ref().map(|c| format!(" (`{c}`)")).unwrap_or_default();
                    rows.push(Event::new(
                        now,
                        Kind::Remediation,
                        Some(GpuRef::of(&d.identity)),
                        format!("next step advised: {}{command}: {}", next.step, next.why),
                        json!({"advice": next}),
                    ));
                    self.seen.insert(uuid.clone(), next.clone());
                }
                Some(_) => {}
                None => {
                    self.seen.remove(uuid);
                }
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceSnapshot, Vendor};

    #[test]
    fn a_row_when_the_advice_appears_or_changes_and_none_while_it_holds() {
        let mut gpu = DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", Default::default());
        let reset = NextStep {
            step: crate::model::health::Step::GpuReset,
            why: "the driver asks for a GPU reset (recovery action)".into(),
            command: Some("nvidia-smi --gpu-reset -i 0000:19:00.0".into()),
        };
        gpu.health.next_step = Some(reset.clone());
        let mut snapshot = Snapshot {
            devices: vec![gpu],
            ..Default::default()
        };
        let mut rows = RemediationRows::default();
        let first = rows.look(&snapshot, 1.0);
        assert_eq!(first.len(), 1);
        assert!(
            first[0]
                .summary
                .starts_with("next step advised: gpu_reset (`nvidia-smi --gpu-reset -i 0000:19:00.0`)")
        );
        assert!(rows.look(&snapshot, 2.0).is_empty(), "the same advice");
        snapshot.devices[0].health.next_step = Some(NextStep {
            step: crate::model::health::Step::RebootRequired,
            why: "the driver asks for a node reboot (recovery action)".into(),
            command: None,
        });
        assert_eq!(
            rows.look(&snapshot, 3.0)[0].details["advice"]["step"],
            "reboot_required"
        );
        snapshot.devices[0].health.next_step = None;
        assert!(rows.look(&snapshot, 4.0).is_empty());
        snapshot.devices[0].health.next_step = Some(reset);
        assert_eq!(rows.look(&snapshot, 5.0).len(), 1, "advised again after it had gone");
    }
}
