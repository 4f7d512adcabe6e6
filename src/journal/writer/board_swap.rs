//! A board swap as the journal's writer records it: the row, and the owner of the service
//! state told of the swap and the validation a new board must pass before it returns to service.

use crate::journal::event::Event;
use crate::journal::writer::facts::{self, GpuFacts};
use crate::lifecycle::{Command, Lifecycle};
use crate::model::Vendor;
use crate::model::health::{BoardSwap, Validation};
use std::sync::Arc;

/// Where a board swap goes: the service state's owner.
pub(crate) struct SwapWrites {
    pub lifecycle: Arc<Lifecycle>,
}

impl SwapWrites {
    /// `new` took the slot of `previous`: its notice and its validation (where asked for),
    /// one transition; gives back the row.
    pub(crate) fn record(
        &self,
        previous: &GpuFacts,
        new: &GpuFacts,
        vendor: Vendor,
        now: f64,
        validate: bool,
    ) -> Event {
        // A new board proves itself with a probe before its node returns to service
        // (the probe is CUDA's: NVIDIA boards only).
        let validation = (validate && vendor == Vendor::Nvidia).then(|| Validation {
            since: now,
            why: format!(
                "a new board in slot {} (it replaced serial {})",
                new.pci_bus_id,
                previous.serial.as_deref().unwrap_or("unknown")
            ),
            outcome: None,
            kind: Default::default(),
        });
        // The swap with its validation: no snapshot has one without the other.
        self.lifecycle.apply(Command::BoardSwapped {
            uuid: new.uuid.clone(),
            swap: BoardSwap {
                at: now,
                previous_uuid: previous.uuid.clone(),
                previous_serial: previous.serial.clone(),
            },
            validation,
        });
        facts::board_swap(previous, new, now)
    }
}
