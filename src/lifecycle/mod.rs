//! One owner of each GPU's service state: the operators' clears, the boards the journal knew
//! and the swaps it found, the validations a GPU must pass before it returns to service, the
//! scheduler's reports and automatic remediation's attempts, holds and reboot mark. Everything
//! that decides whether a GPU may work besides its readings.
//!
//! Nobody else writes it. The local API (a clear, a scheduler report), the journal's writer (a
//! board swapped), the probe scheduler (a validation's end, a sweep) and automatic remediation
//! (a reset done) send it a typed [`Command`]; [`Lifecycle::apply`] makes each one transition
//! of the one value it publishes, under one lock: a snapshot has a clear together with the
//! validation it starts, a swap with its validation, or neither. Before, each of these was a
//! source of its own, written from six files, and a snapshot's consistency rested on the
//! order the publisher read them in.
//!
//! A transition is on record before anyone reads it: [`Lifecycle::apply`] hands the state
//! before and after to the [`Recorder`] (the journal, journal/writer/validation_rows.rs), waits
//! until it says the rows are in the file, and only then publishes. A daemon killed between
//! the two finds the transition at its next start; none is seen (a taint lifted, a node
//! resumed) that a restart could forget. Transitions wait for each other meanwhile, so what
//! is recorded is what is published, in the same order.
//!
//! | command | what it does |
//! |---|---|
//! | `Seed` | the state the journal brought back, at start |
//! | `Clear` | keeps an operator's (or remediation's) clear, and starts or skips its validation |
//! | `BoardSwapped` | records a new board in a known slot, and starts its validation |
//! | `ValidationEnded` | a probe's verdict on the validation it was run for |
//! | `Revalidate` | validations failed on a lifted suspicion start again |
//! | `SweepStarted`, `SweepEnded` | the node's scheduled validation of every GPU |
//! | `SchedulerReport` | the Slurm health check's report |
//! | `Remediation` | automatic remediation's progress: held back, a reset started or ended (a reset done with its clear and validation), the reboot mark |
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `transitions.rs` | The commands `super::Lifecycle` takes, and the one transition each makes of the state |
//! <!-- /files -->

mod transitions;

use crate::model::health::{BoardSwaps, Clears, KnownBoards, Validations};
use crate::model::remediation::Remediations;
use crate::model::scheduler::SchedulerReport;
use crate::service::versioned::{Changed, Versioned};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

pub(crate) use transitions::{Command, RemediationChange, ValidationStart};

/// A GPU's service state, for every GPU of the node: what [`Lifecycle`] publishes. Each part
/// is shared: a transition replaces the parts it changes and keeps the others' `Arc`s, so a
/// reader can tell an unchanged part by pointer.
#[derive(Debug, Clone, Default)]
pub struct ServiceState {
    /// The operators' clears after a repair, by GPU UUID (or `nic:<device>`).
    pub clears: Arc<Clears>,
    /// The boards the journal knew at start (a new one at a known address is validated from
    /// the first snapshot).
    pub known_boards: Arc<KnownBoards>,
    /// Boards the journal found replaced.
    pub board_swaps: Arc<BoardSwaps>,
    /// GPUs that must pass a probe before they return to service.
    pub validations: Arc<Validations>,
    /// The Slurm health check's latest report.
    pub scheduler: Arc<Option<SchedulerReport>>,
    /// What automatic remediation did and holds: attempts, the GPU being reset, resets held
    /// back, the node's reboot mark.
    pub remediation: Arc<Remediations>,
}

/// Who puts each transition on record before it is published: the journal. Called on the
/// thread that applies the command (never a runtime's worker: the local API hands its commands
/// to the blocking pool); returns once the rows are in the file, or once it gave up waiting.
pub(crate) trait Recorder: Send + Sync {
    fn record(&self, before: &ServiceState, after: &ServiceState);
}

/// The owner: the only writer of [`ServiceState`], one transition at a time.
#[derive(Default)]
pub struct Lifecycle {
    state: Versioned<ServiceState>,
    /// Held from a transition's start to its publish: the next one starts from what this one
    /// published, and the journal has them in the order readers see them.
    one_at_a_time: Mutex<()>,
    recorder: OnceLock<Arc<dyn Recorder>>,
}

impl Lifecycle {
    /// The state now.
    pub fn get(&self) -> Arc<ServiceState> {
        self.state.get()
    }

    /// Moves whenever the state does; read it before [`Lifecycle::get`].
    pub fn version(&self) -> u64 {
        self.state.version()
    }

    /// Signal `changed` at every transition from now on.
    pub fn signal_to(&self, changed: Arc<Changed>) {
        self.state.signal_to(changed)
    }

    /// Put every transition on record with `recorder` before it is published, from now on
    /// (once; later calls are ignored).
    pub(crate) fn record_with(&self, recorder: Arc<dyn Recorder>) {
        let _ = self.recorder.set(recorder);
    }

    /// Applies one command as one transition, put on record and then published, only when it
    /// changed something; how many entries it changed.
    pub fn apply(&self, command: Command) -> usize {
        let _one = self.one_at_a_time.lock().unwrap_or_else(PoisonError::into_inner);
        let before = self.state.get();
        let mut after = (*before).clone();
        let recorded_by_sender = command.recorded_by_sender();
        let changed = command.apply_to(&mut after);
        if changed == 0 {
            return 0;
        }
        if let Some(recorder) = self.recorder.get().filter(|_| !recorded_by_sender) {
            recorder.record(&before, &after);
        }
        self.state.set(after);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::{BoardSwap, Clear, Validation};

    /// Writes down, at each record, what a reader of the owner sees at that moment.
    #[derive(Default)]
    struct Witness {
        owner: OnceLock<std::sync::Weak<Lifecycle>>,
        seen: Mutex<Vec<(usize, usize, usize)>>,
    }

    impl Recorder for Witness {
        fn record(&self, before: &ServiceState, after: &ServiceState) {
            let published = self
                .owner
                .get()
                .and_then(|o| o.upgrade())
                .map_or(0, |o| o.get().validations.len());
            let seen = (before.validations.len(), after.validations.len(), published);
            self.seen.lock().unwrap().push(seen);
        }
    }

    fn pending(since: f64) -> Validation {
        Validation {
            since,
            why: "test".into(),
            outcome: None,
            kind: Default::default(),
        }
    }

    #[test]
    fn a_transition_is_on_record_before_anyone_reads_it_and_a_swap_or_seed_is_the_senders() {
        let lifecycle = Arc::new(Lifecycle::default());
        let witness = Arc::new(Witness::default());
        witness.owner.set(Arc::downgrade(&lifecycle)).unwrap();
        lifecycle.record_with(witness.clone());
        lifecycle.apply(Command::Clear {
            key: "GPU-0".into(),
            clear: Clear {
                at: 10.0,
                reason: "reseated".into(),
                by: "uid 0".into(),
            },
            validation: ValidationStart::Start(pending(10.0)),
        });
        // Recorded with the state before and after, while readers still saw the one before.
        assert_eq!(*witness.seen.lock().unwrap(), vec![(0, 1, 0)]);
        assert_eq!(lifecycle.get().validations.len(), 1, "published after the record");
        // The journal's writer writes a swap's rows itself; the seed is the journal's own.
        lifecycle.apply(Command::BoardSwapped {
            uuid: "GPU-1".into(),
            swap: BoardSwap {
                at: 20.0,
                previous_uuid: "GPU-9".into(),
                previous_serial: None,
            },
            validation: Some(pending(20.0)),
        });
        lifecycle.apply(Command::Seed(ServiceState::default()));
        assert_eq!(witness.seen.lock().unwrap().len(), 1, "neither asked the recorder");
        // A command that changes nothing is neither recorded nor published.
        let version = lifecycle.version();
        lifecycle.apply(Command::SweepEnded {
            why: "work".into(),
            at: 30.0,
        });
        assert_eq!((witness.seen.lock().unwrap().len(), lifecycle.version()), (1, version));
    }

    /// Transitions from many threads while the recorder is slow: each is recorded from the state
    /// the one before published, so the records chain and nothing is lost.
    #[test]
    fn transitions_wait_for_each_others_record_and_none_is_lost() {
        struct Chain(Mutex<Vec<(usize, usize)>>);
        impl Recorder for Chain {
            fn record(&self, before: &ServiceState, after: &ServiceState) {
                std::thread::sleep(std::time::Duration::from_millis(2));
                self.0
                    .lock()
                    .unwrap()
                    .push((before.validations.len(), after.validations.len()));
            }
        }
        let lifecycle = Arc::new(Lifecycle::default());
        let chain = Arc::new(Chain(Mutex::new(Vec::new())));
        lifecycle.record_with(chain.clone());
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let lifecycle = lifecycle.clone();
                std::thread::spawn(move || {
                    lifecycle.apply(Command::SweepStarted {
                        gpus: vec![format!("GPU-{n}")],
                        at: n as f64,
                    })
                })
            })
            .collect();
        threads.into_iter().for_each(|t| assert_eq!(t.join().unwrap(), 1));
        assert_eq!(lifecycle.get().validations.len(), 8);
        let records = chain.0.lock().unwrap().clone();
        let expected: Vec<(usize, usize)> = (0..8).map(|n| (n, n + 1)).collect();
        assert_eq!(records, expected, "each record starts where the last one ended");
    }
}
