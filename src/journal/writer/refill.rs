//! What the journal writes again into a file that was deleted, emptied or replaced while the
//! daemon ran (writer.rs, `refill`), beside every GPU's identity and this boot's XID counts:
//! what a restart's seed reads back to hold its decisions, so an emptied file does not let a
//! restart forget them. This boot's clears (a cleared fatal XID stays cleared), every GPU's
//! validation (a GPU awaiting its probe stays out), this boot's reset attempts (the reset
//! budget; an earlier boot's within the day are not written again, since every row is
//! stamped with this boot) and the node's reboot mark. Pure: a snapshot in, rows out.

use crate::journal::event::{Event, GpuRef, Kind};
use crate::model::Snapshot;
use serde_json::json;

/// The rows a restart's seed needs, from what `snapshot` holds now (`now`: Unix seconds).
pub(crate) fn rows(snapshot: &Snapshot, now: f64) -> Vec<Event> {
    let mut rows = Vec::new();
    for (key, clear) in snapshot.clears.iter() {
        // A clear is dated by its row (the seed reads `at`): written at its own time.
        rows.push(Event::new(
            clear.at,
            Kind::Clear,
            Some(GpuRef::in_snapshot(snapshot, key)),
            format!(
                "cleared by {}: {} (written again: the journal was emptied)",
                clear.by, clear.reason
            ),
            json!({"reason": clear.reason, "by": clear.by, "refilled": true}),
        ));
    }
    for (uuid, validation) in snapshot.validations.iter() {
        rows.push(crate::journal::writer::validation_rows::row(
            snapshot, uuid, validation, now,
        ));
    }
    let remediation = &snapshot.remediation;
    // This boot's only: the rows are stamped with this boot, and an earlier boot's failed
    // reset must not read as this boot's (it would make the ladder's step a reboot).
    for attempt in remediation.attempts.iter().filter(|a| a.this_boot) {
        rows.push(crate::journal::writer::remediation_rows::attempt_row(
            attempt,
            snapshot,
            attempt.started,
        ));
    }
    if let Some(mark) = &remediation.reboot_required {
        rows.push(crate::journal::writer::remediation_rows::reboot_row(
            mark,
            GpuRef::in_snapshot(snapshot, &mark.uuid),
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::{Clear, Validation, ValidationKind};
    use crate::model::remediation::{Attempt, AttemptOutcome, RebootRequired, Remediations};

    #[test]
    fn a_refill_writes_again_what_the_seed_reads_back() {
        let attempt = |uuid: &str, started: f64, this_boot: bool| {
            Attempt::for_test(uuid, started, AttemptOutcome::Succeeded, this_boot)
        };
        let snapshot = Snapshot {
            clears: std::sync::Arc::new(
                [(
                    "GPU-0".to_string(),
                    Clear {
                        at: 100.0,
                        reason: "reseated".into(),
                        by: "uid 0".into(),
                    },
                )]
                .into(),
            ),
            validations: std::sync::Arc::new(
                [(
                    "GPU-0".to_string(),
                    Validation {
                        since: 100.0,
                        why: "a clear".into(),
                        outcome: None,
                        kind: ValidationKind::Repair,
                    },
                )]
                .into(),
            ),
            remediation: std::sync::Arc::new(Remediations {
                attempts: vec![attempt("GPU-1", 50.0, false), attempt("GPU-0", 90.0, true)],
                reboot_required: Some(RebootRequired {
                    since: 95.0,
                    uuid: "GPU-0".into(),
                    index: 0,
                    why: "a reset failed".into(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let rows = rows(&snapshot, 200.0);
        let kinds: Vec<&str> = rows.iter().map(|r| r.kind.name()).collect();
        assert_eq!(kinds, ["clear", "validation", "remediation", "remediation"]);
        assert_eq!((rows[0].at, &rows[0].details["reason"]), (100.0, &json!("reseated")));
        assert_eq!(rows[2].details["attempt"]["uuid"], "GPU-0", "this boot's attempt only");
        assert_eq!(rows[2].at, 90.0);
        assert_eq!(rows[3].details["reboot_required"]["why"], "a reset failed");
    }
}
