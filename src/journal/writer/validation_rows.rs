//! The journal's `validation` rows: each change of a GPU's validation (a probe before return
//! to service) as the snapshots show it, whoever made it (the local API's clear, the board
//! swap below, the probe scheduler's outcome). A restart's seed reads the newest row per GPU
//! back (journal/store/read.rs, `validations`), so a GPU cannot skip its probe by a restart.

use crate::journal::event::{Event, GpuRef, Kind};
use crate::model::Snapshot;
use crate::model::health::{Validation, Validations};
use serde_json::json;
use std::sync::Arc;

/// What the journal last wrote of every GPU's validation.
#[derive(Debug, Default)]
pub(crate) struct ValidationRows {
    seen: Arc<Validations>,
}

impl ValidationRows {
    /// Starts from what the seed gave the daemon: those rows are written already.
    pub(crate) fn from_seed(seen: Arc<Validations>) -> ValidationRows {
        ValidationRows { seen }
    }

    /// The rows for what changed since the last look.
    pub(crate) fn look(&mut self, snapshot: &Snapshot, now: f64) -> Vec<Event> {
        if Arc::ptr_eq(&self.seen, &snapshot.validations) {
            return Vec::new();
        }
        let rows = snapshot
            .validations
            .iter()
            .filter(|(uuid, v)| self.seen.get(*uuid) != Some(v))
            .map(|(uuid, v)| row(snapshot, uuid, v, now))
            .collect();
        self.seen = snapshot.validations.clone();
        rows
    }
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
    fn a_row_for_each_change_and_none_for_what_the_seed_held() {
        let pending = Validation {
            since: 100.0,
            why: "cleared by uid 0: reseated".into(),
            outcome: None,
            kind: Default::default(),
        };
        let seeded: Validations = [("GPU-1".to_string(), pending.clone())].into();
        let mut rows = ValidationRows::from_seed(Arc::new(seeded.clone()));
        let mut snapshot = Snapshot {
            devices: vec![DeviceSnapshot::for_test(
                0,
                Vendor::Nvidia,
                "0000:19:00.0",
                Default::default(),
            )],
            validations: Arc::new(seeded.clone()),
            ..Default::default()
        };
        assert!(rows.look(&snapshot, 101.0).is_empty(), "the seed's rows are written");
        let mut next = seeded.clone();
        next.insert("GPU-0".into(), pending.clone());
        snapshot.validations = Arc::new(next.clone());
        let written = rows.look(&snapshot, 102.0);
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].gpu.as_ref().unwrap().pci_bus_id, "0000:19:00.0");
        assert!(
            written[0].summary.starts_with("validation pending"),
            "{}",
            written[0].summary
        );
        assert!(rows.look(&snapshot, 103.0).is_empty(), "nothing new");
        next.get_mut("GPU-0").unwrap().outcome = Some(ValidationOutcome::Failed {
            at: 104.0,
            detail: "failed the probe: hbm_copy 2000.0 GB/s".into(),
        });
        snapshot.validations = Arc::new(next);
        let written = rows.look(&snapshot, 104.0);
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].details["state"], "failed");
        let back: Validation = serde_json::from_value(written[0].details["validation"].clone()).unwrap();
        assert_eq!(back.failed(), Some("failed the probe: hbm_copy 2000.0 GB/s"));
    }
}
