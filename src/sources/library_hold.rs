//! Following a GPU reset's hold on the GPU libraries (remediation/auto.rs asks for it): the
//! backends that hold GPU handles let go (their GPUs read as down meanwhile), the hold hears
//! when every thread using them ended and the library was shut down, and the backends are
//! initialised again once the hold is lifted.

use crate::backend::{Backend, LibraryHold};
use crate::sources::gpu_thread::Worker;

#[derive(Default)]
pub(super) struct HoldFollower {
    /// The request, shared with the remediation that resets the GPU.
    hold: LibraryHold,
    /// The backends (slots) let go of for the hold in force.
    holding: Option<Vec<usize>>,
}

impl HoldFollower {
    pub(super) fn new(hold: LibraryHold) -> HoldFollower {
        HoldFollower { hold, holding: None }
    }

    /// New backends were made (a reload): a hold in force lets go of them at the next look.
    pub(super) fn new_backends(&mut self) {
        self.holding = None;
    }

    /// One look, before each round: let go, say released, or resume, as the hold asks.
    pub(super) fn follow(&mut self, backends: &mut [Box<dyn Backend>], workers: &mut [Worker]) {
        if !self.hold.requested() {
            for slot in self.holding.take().unwrap_or_default() {
                backends[slot].resume();
            }
            return;
        }
        let slots = self.holding.get_or_insert_with(|| {
            let slots: Vec<usize> = (0..backends.len()).filter(|s| backends[*s].hold()).collect();
            for worker in workers.iter_mut().filter(|w| slots.contains(&w.backend)) {
                // Dropping the request channel ends the thread after its current poll.
                worker.requests = None;
                worker.busy_with = None;
                worker.up = false;
                worker.readings = None;
            }
            slots
        });
        let threads_ended = workers
            .iter()
            .filter(|w| slots.contains(&w.backend))
            .all(|w| w.alive.strong_count() == 0);
        if !self.hold.released() && threads_ended && slots.iter().all(|s| backends[*s].shut_down_held()) {
            self.hold.set_released();
        }
    }
}
