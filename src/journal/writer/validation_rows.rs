//! The journal's `validation` rows: each change of a GPU's validation (a probe before return
//! to service), whoever made it (the local API's clear, remediation's reset, the probe
//! scheduler's outcome, the node's sweep), written by the service state's owner before it
//! publishes the change ([`ValidationRecorder`], a [`crate::lifecycle::Recorder`]): a taint
//! lifted or a node resumed on a passed validation finds that pass in the file after any
//! restart. A board swap's validation row is queued by the writer with the swap's
//! (journal/writer/board_swap.rs). A restart's seed reads the newest row per GPU back
//! (journal/store/read.rs, `validations`), so a GPU cannot skip its probe by a restart.

use crate::journal::Journal;
use crate::journal::event::{Event, GpuRef, Kind};
use crate::lifecycle::{Recorder, ServiceState};
use crate::model::Snapshot;
use crate::model::health::{Validation, Validations};
use crate::snapshot::store::Store;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a transition waits for its rows: past it, it is published anyway (the rows stay
/// queued), so a journal on a stalled disk slows a validation's end, never stops it.
const RECORD_WAIT: Duration = Duration::from_secs(5);

/// Puts each transition's validation changes in the journal before the owner publishes it.
pub(crate) struct ValidationRecorder {
    journal: Journal,
    /// Where a row finds its GPU's index and address.
    store: Arc<Store>,
}

impl ValidationRecorder {
    pub(crate) fn new(journal: Journal, store: Arc<Store>) -> ValidationRecorder {
        ValidationRecorder { journal, store }
    }
}

impl Recorder for ValidationRecorder {
    fn record(&self, before: &ServiceState, after: &ServiceState) {
        let rows = changed(
            &before.validations,
            &after.validations,
            &self.store.latest(),
            crate::model::unix_now(),
        );
        if rows.is_empty() {
            return;
        }
        let deadline = Instant::now() + RECORD_WAIT;
        let written = rows
            .into_iter()
            .map(|row| (row.summary.clone(), self.journal.record_soon(row)))
            .collect::<Vec<_>>();
        for (summary, confirmed) in written {
            if !confirmed.wait_until(deadline) {
                log::warn!(
                    "journal: a validation row was not in the file within {RECORD_WAIT:?} ({summary}); publishing it \
                     anyway, the row stays queued"
                );
            }
        }
    }
}

/// The rows for the validations that differ between `before` and `after`.
fn changed(before: &Arc<Validations>, after: &Arc<Validations>, snapshot: &Snapshot, now: f64) -> Vec<Event> {
    if Arc::ptr_eq(before, after) {
        return Vec::new();
    }
    after
        .iter()
        .filter(|(uuid, v)| before.get(*uuid) != Some(v))
        .map(|(uuid, v)| row(snapshot, uuid, v, now))
        .collect()
}

/// One GPU's validation as a row (also what a refill writes again: journal/writer/refill.rs).
pub(crate) fn row(snapshot: &Snapshot, uuid: &str, validation: &Validation, now: f64) -> Event {
    let gpu = GpuRef::in_snapshot(snapshot, uuid);
    let summary = match &validation.outcome {
        None => format!(
            "validation pending after {}: out of service until a probe passes",
            validation.why
        ),
        Some(outcome) => format!("validation {}: {}", outcome.label(), outcome.detail()),
    };
    Event::new(
        now,
        Kind::Validation,
        Some(gpu),
        summary,
        json!({"state": validation.state(), "validation": validation}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::ValidationOutcome;
    use crate::model::{DeviceSnapshot, Vendor};

    #[test]
    fn a_row_for_each_change_and_none_for_what_did_not_change() {
        let pending = Validation {
            since: 100.0,
            why: "cleared by uid 0: reseated".into(),
            outcome: None,
            kind: Default::default(),
        };
        let seeded = Arc::new(Validations::from([("GPU-1".to_string(), pending.clone())]));
        let snapshot = Snapshot {
            devices: vec![DeviceSnapshot::for_test(
                0,
                Vendor::Nvidia,
                "0000:19:00.0",
                Default::default(),
            )],
            ..Default::default()
        };
        assert!(
            changed(&seeded, &seeded.clone(), &snapshot, 101.0).is_empty(),
            "the same state"
        );
        let mut next = (*seeded).clone();
        next.insert("GPU-0".into(), pending.clone());
        let next = Arc::new(next);
        let written = changed(&seeded, &next, &snapshot, 102.0);
        assert_eq!(written.len(), 1, "only GPU-0's changed: {written:?}");
        assert_eq!(written[0].gpu.as_ref().unwrap().pci_bus_id, "0000:19:00.0");
        assert!(
            written[0].summary.starts_with("validation pending"),
            "{}",
            written[0].summary
        );
        let mut failed = (*next).clone();
        failed.get_mut("GPU-0").unwrap().outcome = Some(ValidationOutcome::Failed {
            at: 104.0,
            detail: "failed the probe: hbm_copy 2000.0 GB/s".into(),
        });
        let written = changed(&next, &Arc::new(failed), &snapshot, 104.0);
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].details["state"], "failed");
        let back: Validation = serde_json::from_value(written[0].details["validation"].clone()).unwrap();
        assert_eq!(back.failed(), Some("failed the probe: hbm_copy 2000.0 GB/s"));
    }
}
