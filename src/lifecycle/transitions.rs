//! The commands [`super::Lifecycle`] takes, and the one transition each makes of the state.

use super::ServiceState;
use crate::model::health::{BoardSwap, Clear, Validation, ValidationKind, ValidationOutcome, Validations};
use crate::model::probe::SdcLift;
use crate::model::remediation::{Attempt, RebootRequired, Refusal};
use crate::model::scheduler::SchedulerReport;
use std::sync::Arc;

/// What a clear does about validation (the clear's step, health/clear.rs).
#[derive(Debug, Clone)]
pub enum ValidationStart {
    /// Nothing: validation is off, or the GPU needs none.
    Nothing,
    /// A new pending validation: the GPU returns to service once a probe passes.
    Start(Validation),
    /// The open validation ends as skipped (`validation` is kept where there was none open).
    Skip {
        validation: Validation,
        outcome: ValidationOutcome,
    },
}

/// One change of a GPU's service state, as the part of the daemon that saw it asks for it.
#[derive(Debug, Clone)]
pub enum Command {
    /// The state the journal brought back at start, whole.
    Seed(ServiceState),
    /// A clear under `key` (a GPU's UUID, or `nic:<device>`) and its validation step, together.
    Clear {
        key: String,
        clear: Clear,
        validation: ValidationStart,
    },
    /// A new board (`uuid`) in a slot where the journal knew another, and the validation it
    /// must pass (`None`: not asked for, or not an NVIDIA board).
    BoardSwapped {
        uuid: String,
        swap: BoardSwap,
        validation: Option<Validation>,
    },
    /// A probe's verdict on the validation started at `since` (a clear in between started
    /// another, which this does not end).
    ValidationEnded {
        uuid: String,
        since: f64,
        outcome: ValidationOutcome,
    },
    /// Suspicions of wrong results lifted: a validation that failed on the canary alone is
    /// started again (nothing else held the GPU out).
    Revalidate(Vec<(String, SdcLift)>),
    /// The node's scheduled validation: a pending one for each of `gpus`.
    SweepStarted { gpus: Vec<String>, at: f64 },
    /// The sweep's pending validations end as skipped: the node went back to work.
    SweepEnded { why: String, at: f64 },
    /// The Slurm health check's report, replacing the last.
    SchedulerReport(SchedulerReport),
    /// Automatic remediation's progress.
    Remediation(RemediationChange),
}

/// A step of automatic remediation (remediation/auto.rs), as the service state keeps it.
#[derive(Debug, Clone)]
pub enum RemediationChange {
    /// Why each GPU that needs a reset waits now (empty: none waits).
    HeldBack(std::collections::BTreeMap<String, Refusal>),
    /// The reset of `uuid` starts.
    ResetStarted { uuid: String },
    /// The reset did not start after all (nothing ran).
    ResetNotStarted,
    /// The reset of `uuid` ended: its attempt kept; a reset done brings the GPU's clear and
    /// the validation it must pass (`returned`), in the same transition.
    ResetEnded {
        uuid: String,
        attempt: Box<Attempt>,
        returned: Option<(Clear, ValidationStart)>,
    },
    /// The node needs a reboot: its mark (`None`: marked already), and the failed reset's
    /// attempt, kept with it: no snapshot shows the GPU let go before the mark.
    RebootRequired {
        mark: Option<RebootRequired>,
        ended: Option<(String, Box<Attempt>)>,
    },
    /// An operator's clear let the reboot mark go.
    RebootLetGo,
}

impl Command {
    /// Whether the sender writes this transition's rows itself, so the [`super::Recorder`] is
    /// not asked: the seed is what the journal already holds, and a board swap is found by the
    /// journal's writer, which queues its rows (the swap's and its validation's) together. It
    /// cannot wait for its own writing; a swap lost by a kill before they are in is found again
    /// at the next start, from the same facts.
    pub(super) fn recorded_by_sender(&self) -> bool {
        matches!(self, Command::Seed(_) | Command::BoardSwapped { .. })
    }

    /// Makes this command's transition of `state`; how many entries it changed (0: none, and
    /// nothing is published).
    pub(super) fn apply_to(self, state: &mut ServiceState) -> usize {
        match self {
            Command::Seed(seed) => {
                *state = seed;
                1
            }
            Command::Clear { key, clear, validation } => {
                let validated = match validation {
                    ValidationStart::Nothing => 0,
                    ValidationStart::Start(v) => {
                        Arc::make_mut(&mut state.validations).insert(key.clone(), v);
                        1
                    }
                    ValidationStart::Skip { validation, outcome } => {
                        let all = Arc::make_mut(&mut state.validations);
                        all.entry(key.clone()).or_insert(validation).outcome = Some(outcome);
                        1
                    }
                };
                Arc::make_mut(&mut state.clears).insert(key, clear);
                1 + validated
            }
            Command::BoardSwapped { uuid, swap, validation } => {
                let validated = validation.map_or(0, |v| {
                    Arc::make_mut(&mut state.validations).insert(uuid.clone(), v);
                    1
                });
                Arc::make_mut(&mut state.board_swaps).insert(uuid, swap);
                1 + validated
            }
            Command::ValidationEnded { uuid, since, outcome } => {
                let open = state.validations.get(&uuid).is_some_and(|v| v.since == since);
                if open && let Some(v) = Arc::make_mut(&mut state.validations).get_mut(&uuid) {
                    v.outcome = Some(outcome);
                }
                usize::from(open)
            }
            Command::Revalidate(lifted) => revalidate(&mut state.validations, &lifted),
            Command::SweepStarted { gpus, at } => {
                let all = Arc::make_mut(&mut state.validations);
                for uuid in &gpus {
                    all.insert(
                        uuid.clone(),
                        Validation {
                            since: at,
                            why: "the node's scheduled validation (probe.mode: node)".into(),
                            outcome: None,
                            kind: ValidationKind::Sweep,
                        },
                    );
                }
                gpus.len()
            }
            Command::SweepEnded { why, at } => {
                let open = |v: &Validation| v.kind == ValidationKind::Sweep && v.pending();
                let pending = state.validations.values().filter(|v| open(v)).count();
                if pending > 0 {
                    for v in Arc::make_mut(&mut state.validations).values_mut().filter(|v| open(v)) {
                        v.outcome = Some(ValidationOutcome::Skipped {
                            at,
                            detail: format!("{why}: the node went back to work before its validation ended"),
                        });
                    }
                }
                pending
            }
            Command::SchedulerReport(report) => {
                state.scheduler = Arc::new(Some(report));
                1
            }
            Command::Remediation(change) => change.apply_to(state),
        }
    }
}

impl RemediationChange {
    fn apply_to(self, state: &mut ServiceState) -> usize {
        match self {
            RemediationChange::HeldBack(held_back) => {
                if state.remediation.held_back == held_back {
                    return 0;
                }
                Arc::make_mut(&mut state.remediation).held_back = held_back;
                1
            }
            RemediationChange::ResetStarted { uuid } => {
                Arc::make_mut(&mut state.remediation).running = Some(uuid);
                1
            }
            RemediationChange::ResetNotStarted => {
                Arc::make_mut(&mut state.remediation).running = None;
                1
            }
            RemediationChange::ResetEnded {
                uuid,
                attempt,
                returned,
            } => {
                let returned = returned.map_or(0, |(clear, validation)| {
                    Command::Clear {
                        key: uuid.clone(),
                        clear,
                        validation,
                    }
                    .apply_to(state)
                });
                finish(state, &uuid, *attempt);
                1 + returned
            }
            RemediationChange::RebootRequired { mark, ended } => {
                let remediation = Arc::make_mut(&mut state.remediation);
                let marked = mark.map_or(0, |mark| {
                    remediation.reboot_required = Some(mark);
                    1
                });
                let ended = ended.map_or(0, |(uuid, attempt)| {
                    finish(state, &uuid, *attempt);
                    1
                });
                marked + ended
            }
            RemediationChange::RebootLetGo => {
                Arc::make_mut(&mut state.remediation).reboot_required = None;
                1
            }
        }
    }
}

/// A reset's end: none runs, the GPU no longer waits, its attempt kept.
fn finish(state: &mut ServiceState, uuid: &str, attempt: Attempt) {
    let remediation = Arc::make_mut(&mut state.remediation);
    remediation.running = None;
    remediation.held_back.remove(uuid);
    remediation.keep(attempt);
}

/// A GPU whose validation failed on a suspicion lifted since is validated again: nothing else
/// held it out, and a person should not have to clear what the daemon got wrong.
fn revalidate(validations: &mut Arc<Validations>, lifted: &[(String, SdcLift)]) -> usize {
    // Failed on the canary alone: shortfalls come first in the detail, the memtest after.
    let on_the_canary_alone = |v: &Validation| {
        matches!(&v.outcome, Some(ValidationOutcome::Failed { detail, .. })
            if detail.starts_with("failed the probe: sdc (") && !detail.contains("memtest ("))
    };
    let again: Vec<&(String, SdcLift)> = lifted
        .iter()
        .filter(|(uuid, _)| validations.get(uuid).is_some_and(on_the_canary_alone))
        .collect();
    for (uuid, lift) in &again {
        if let Some(v) = Arc::make_mut(validations).get_mut(uuid) {
            *v = Validation {
                since: lift.at,
                why: format!("its suspicion of wrong results was lifted: {}", lift.why),
                outcome: None,
                kind: v.kind,
            };
        }
    }
    again.len()
}

#[cfg(test)]
mod tests {
    use super::super::Lifecycle;
    use super::*;

    fn pending(since: f64, kind: ValidationKind) -> Validation {
        Validation {
            since,
            why: "test".into(),
            outcome: None,
            kind,
        }
    }

    fn clear(at: f64) -> Clear {
        Clear {
            at,
            reason: "reseated".into(),
            by: "uid 0".into(),
        }
    }

    #[test]
    fn a_clear_and_its_validation_are_one_transition() {
        let lifecycle = Lifecycle::default();
        let before = lifecycle.version();
        let changed = lifecycle.apply(Command::Clear {
            key: "GPU-0".into(),
            clear: clear(10.0),
            validation: ValidationStart::Start(pending(10.0, ValidationKind::Repair)),
        });
        assert_eq!(changed, 2);
        assert_eq!(lifecycle.version(), before + 1, "one transition, one version");
        let state = lifecycle.get();
        assert!(state.clears.contains_key("GPU-0") && state.validations["GPU-0"].pending());
        // Skipped: the open validation ends as skipped, the clear kept.
        lifecycle.apply(Command::Clear {
            key: "GPU-0".into(),
            clear: clear(20.0),
            validation: ValidationStart::Skip {
                validation: pending(20.0, ValidationKind::Repair),
                outcome: ValidationOutcome::Skipped {
                    at: 20.0,
                    detail: "skipped by uid 0".into(),
                },
            },
        });
        let state = lifecycle.get();
        assert_eq!(state.validations["GPU-0"].since, 10.0, "the open one, ended");
        assert_eq!(state.validations["GPU-0"].state(), "skipped");
        assert_eq!(state.clears["GPU-0"].at, 20.0);
    }

    /// A reader polling while clears land never sees a clear without the validation it
    /// started: the hand-over has no gap to read.
    #[test]
    fn no_reader_sees_a_clear_without_its_validation() {
        let lifecycle = Arc::new(Lifecycle::default());
        let reader = {
            let lifecycle = lifecycle.clone();
            std::thread::spawn(move || {
                let mut looks = 0;
                while lifecycle.get().clears.len() < 500 {
                    let state = lifecycle.get();
                    let gap = state.clears.keys().find(|k| !state.validations.contains_key(*k));
                    assert!(gap.is_none(), "{gap:?} cleared without its validation");
                    looks += 1;
                }
                looks
            })
        };
        for n in 0..500 {
            lifecycle.apply(Command::Clear {
                key: format!("GPU-{n}"),
                clear: clear(n as f64),
                validation: ValidationStart::Start(pending(n as f64, ValidationKind::Repair)),
            });
        }
        assert!(reader.join().unwrap() > 0);
    }

    #[test]
    fn a_board_swap_brings_its_validation_and_parts_left_alone_keep_their_arc() {
        let lifecycle = Lifecycle::default();
        lifecycle.apply(Command::SchedulerReport(SchedulerReport::default()));
        let before = lifecycle.get();
        lifecycle.apply(Command::BoardSwapped {
            uuid: "GPU-new".into(),
            swap: BoardSwap {
                at: 5.0,
                previous_uuid: "GPU-old".into(),
                previous_serial: None,
            },
            validation: Some(pending(5.0, ValidationKind::Repair)),
        });
        let after = lifecycle.get();
        assert!(after.board_swaps.contains_key("GPU-new") && after.validations["GPU-new"].pending());
        assert!(
            Arc::ptr_eq(&before.clears, &after.clears),
            "the clears were not touched"
        );
        assert!(Arc::ptr_eq(&before.scheduler, &after.scheduler));
        assert!(!Arc::ptr_eq(&before.validations, &after.validations));
        // An AMD board (no CUDA probe): the swap alone.
        lifecycle.apply(Command::BoardSwapped {
            uuid: "GPU-amd".into(),
            swap: BoardSwap {
                at: 6.0,
                previous_uuid: "GPU-x".into(),
                previous_serial: None,
            },
            validation: None,
        });
        assert!(!lifecycle.get().validations.contains_key("GPU-amd"));
    }

    #[test]
    fn a_verdict_ends_only_the_validation_it_was_for_and_no_change_publishes_nothing() {
        let lifecycle = Lifecycle::default();
        lifecycle.apply(Command::Clear {
            key: "GPU-0".into(),
            clear: clear(10.0),
            validation: ValidationStart::Start(pending(10.0, ValidationKind::Repair)),
        });
        let passed = |since| Command::ValidationEnded {
            uuid: "GPU-0".into(),
            since,
            outcome: ValidationOutcome::Passed {
                at: 12.0,
                detail: "passed".into(),
            },
        };
        // A probe for an older validation (a clear started this one since): nothing.
        let version = lifecycle.version();
        assert_eq!(lifecycle.apply(passed(5.0)), 0);
        assert_eq!(lifecycle.version(), version, "nothing changed, nothing published");
        assert!(lifecycle.get().validations["GPU-0"].pending());
        assert_eq!(lifecycle.apply(passed(10.0)), 1);
        assert_eq!(lifecycle.get().validations["GPU-0"].state(), "passed");
        // No sweep under way: ending one changes nothing.
        let version = lifecycle.version();
        let end = || Command::SweepEnded {
            why: "job 7".into(),
            at: 13.0,
        };
        assert_eq!(lifecycle.apply(end()), 0);
        assert_eq!(lifecycle.version(), version);
        lifecycle.apply(Command::SweepStarted {
            gpus: vec!["GPU-1".into()],
            at: 14.0,
        });
        assert_eq!(lifecycle.apply(end()), 1);
        let state = lifecycle.get();
        assert_eq!(state.validations["GPU-1"].state(), "skipped");
        assert_eq!(
            state.validations["GPU-0"].state(),
            "passed",
            "a repair's validation is not the sweep's"
        );
    }

    #[test]
    fn a_lifted_suspicion_validates_again_only_what_failed_on_the_canary_alone() {
        let failed = |detail: &str| Validation {
            outcome: Some(ValidationOutcome::Failed {
                at: 3.0,
                detail: detail.into(),
            }),
            ..pending(1.0, ValidationKind::Repair)
        };
        let lifecycle = Lifecycle::default();
        lifecycle.apply(Command::Seed(ServiceState {
            validations: Arc::new(
                [
                    ("GPU-0".to_string(), failed("failed the probe: sdc (mismatch)")),
                    (
                        "GPU-1".to_string(),
                        failed("failed the probe: sdc (mismatch); memtest (walking ones)"),
                    ),
                    ("GPU-2".to_string(), failed("failed the probe: gemm_tflops 310 < 600")),
                ]
                .into(),
            ),
            ..Default::default()
        }));
        let lift = |gpu| SdcLift {
            at: 9.0,
            gpu,
            why: "a clean canary".into(),
            key: crate::model::probe::SdcKey {
                model: "H100".into(),
                sms: 132,
                driver: "580".into(),
                cublas: "13".into(),
                canary: 1,
            },
            digest: "d".into(),
        };
        let lifted = ["GPU-0", "GPU-1", "GPU-2", "GPU-9"]
            .iter()
            .enumerate()
            .map(|(n, uuid)| (uuid.to_string(), lift(n as u32)))
            .collect();
        assert_eq!(lifecycle.apply(Command::Revalidate(lifted)), 1);
        let state = lifecycle.get();
        assert!(state.validations["GPU-0"].pending() && state.validations["GPU-0"].since == 9.0);
        assert_eq!(state.validations["GPU-1"].state(), "failed", "the memtest failed too");
        assert_eq!(state.validations["GPU-2"].state(), "failed", "not the canary's");
    }

    fn attempt(uuid: &str, outcome: crate::model::remediation::AttemptOutcome) -> Box<Attempt> {
        Box::new(Attempt {
            uuid: uuid.into(),
            index: 0,
            pci_bus_id: "0000:19:00.0".into(),
            step: crate::model::health::Step::GpuReset,
            why: "Xid 94".into(),
            started: 30.0,
            duration_seconds: 2.0,
            outcome,
            output: String::new(),
            this_boot: true,
            started_boot: Some(100.0),
        })
    }

    /// The reset hand-over: a reset done is its attempt, the GPU's clear and its validation in
    /// one transition (no snapshot has the GPU let go of its fault without its validation, nor
    /// the reset still running beside its clear); a failed one is its attempt with the mark.
    #[test]
    fn a_reset_ends_in_one_transition_with_its_clear_and_validation_or_its_reboot_mark() {
        use crate::model::remediation::AttemptOutcome;
        let lifecycle = Lifecycle::default();
        let change = |c| lifecycle.apply(Command::Remediation(c));
        change(RemediationChange::ResetStarted { uuid: "GPU-0".into() });
        assert_eq!(lifecycle.get().remediation.running.as_deref(), Some("GPU-0"));
        let version = lifecycle.version();
        change(RemediationChange::ResetEnded {
            uuid: "GPU-0".into(),
            attempt: attempt("GPU-0", AttemptOutcome::Succeeded),
            returned: Some((
                clear(32.0),
                ValidationStart::Start(pending(32.0, ValidationKind::Repair)),
            )),
        });
        assert_eq!(lifecycle.version(), version + 1, "one transition");
        let state = lifecycle.get();
        assert_eq!(state.remediation.running, None);
        assert_eq!(state.remediation.attempts.len(), 1);
        assert!(state.clears.contains_key("GPU-0") && state.validations["GPU-0"].pending());

        change(RemediationChange::ResetStarted { uuid: "GPU-1".into() });
        let mark = RebootRequired {
            since: 40.0,
            uuid: "GPU-1".into(),
            index: 1,
            why: "the GPU reset of GPU 1 failed".into(),
        };
        change(RemediationChange::RebootRequired {
            mark: Some(mark),
            ended: Some((
                "GPU-1".into(),
                attempt("GPU-1", AttemptOutcome::Failed { why: "exit 1".into() }),
            )),
        });
        let state = lifecycle.get();
        assert!(state.remediation.reboot_required.is_some() && state.remediation.running.is_none());
        assert_eq!(state.remediation.attempts.len(), 2);
        assert!(!state.clears.contains_key("GPU-1"), "a failed reset clears nothing");
        // Held back: the same holds again publish nothing.
        let held: std::collections::BTreeMap<String, Refusal> = [(
            "GPU-2".to_string(),
            Refusal {
                guard: crate::model::remediation::Guard::Paused,
                why: "paused".into(),
            },
        )]
        .into();
        assert_eq!(change(RemediationChange::HeldBack(held.clone())), 1);
        assert_eq!(change(RemediationChange::HeldBack(held)), 0);
        change(RemediationChange::RebootLetGo);
        assert!(lifecycle.get().remediation.reboot_required.is_none());
    }
}
