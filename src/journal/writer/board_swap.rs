//! A board swap as the journal's writer records it: the swap's row and its validation's, and
//! the command that tells the service state's owner, handed to it once the writer's lock is
//! let go (the owner waits for the journal to record its other transitions, and the journal's
//! task needs that lock to write them).

use crate::journal::event::{Event, GpuRef};
use crate::journal::writer::facts::{self, GpuFacts};
use crate::lifecycle::Command;
use crate::model::health::{BoardSwap, Validation};
use crate::model::{DeviceSnapshot, Snapshot, Vendor};

/// The swaps found and not yet told to the owner.
#[derive(Default)]
pub(crate) struct SwapWrites {
    untold: Vec<Command>,
}

impl SwapWrites {
    /// `new` (on `device`) took the slot of `previous`: its notice and its validation (where
    /// asked for), one command for the owner; gives back the rows, the swap's and, where a
    /// validation starts, its row, queued in one batch.
    pub(crate) fn record(
        &mut self,
        previous: &GpuFacts,
        new: &GpuFacts,
        device: &DeviceSnapshot,
        snapshot: &Snapshot,
        now: f64,
        validate: bool,
    ) -> Vec<Event> {
        // A new board proves itself with a probe before its node returns to service
        // (the probe is CUDA's: NVIDIA boards only).
        let validation = (validate && device.identity.vendor == Vendor::Nvidia).then(|| Validation {
            since: now,
            why: format!(
                "a new board in slot {} (it replaced serial {})",
                new.pci_bus_id,
                previous.serial.as_deref().unwrap_or("unknown")
            ),
            outcome: None,
            kind: Default::default(),
        });
        let mut rows = vec![facts::board_swap(previous, new, now)];
        if let Some(validation) = &validation {
            let mut row = crate::journal::writer::validation_rows::row(snapshot, &new.uuid, validation, now);
            row.gpu = Some(GpuRef::of(&device.identity));
            rows.push(row);
        }
        // The swap with its validation: no snapshot has one without the other.
        self.untold.push(Command::BoardSwapped {
            uuid: new.uuid.clone(),
            swap: BoardSwap {
                at: now,
                previous_uuid: previous.uuid.clone(),
                previous_serial: previous.serial.clone(),
            },
            validation,
        });
        rows
    }

    /// The commands for the owner, to apply without the writer's lock.
    pub(crate) fn take_untold(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.untold)
    }
}
