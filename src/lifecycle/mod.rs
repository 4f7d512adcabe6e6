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
use std::sync::Arc;

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

/// The owner: the only writer of [`ServiceState`], one transition at a time.
#[derive(Default)]
pub struct Lifecycle {
    state: Versioned<ServiceState>,
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

    /// Applies one command as one transition, published only when it changed something; how
    /// many entries it changed.
    pub fn apply(&self, command: Command) -> usize {
        let mut changed = 0;
        self.state.update_when(|state| {
            changed = command.apply_to(state);
            changed > 0
        });
        changed
    }
}
