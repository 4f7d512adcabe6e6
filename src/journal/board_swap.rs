//! A board swap as the journal's writer records it: the row, the verdict's notice and the
//! validation a new board must pass before its node returns to service.

use super::event::Event;
use super::facts::{self, GpuFacts};
use crate::model::Vendor;
use crate::model::health::{BoardSwap, BoardSwaps, Validation, Validations};
use crate::service::versioned::Versioned;
use std::sync::Arc;

/// The sources a board swap sets.
pub struct SwapWrites {
    /// The verdict's notice (`board_replaced`).
    pub board_swaps: Arc<Versioned<BoardSwaps>>,
    /// The validation it starts (`health.validate_after_clear`).
    pub validations: Arc<Versioned<Validations>>,
}

impl SwapWrites {
    /// `new` took the slot of `previous`: its validation (where asked for), then its notice;
    /// gives back the row.
    pub fn record(&self, previous: &GpuFacts, new: &GpuFacts, vendor: Vendor, now: f64, validate: bool) -> Event {
        // A new board proves itself with a probe before its node returns to service
        // (the probe is CUDA's: NVIDIA boards only).
        if validate && vendor == Vendor::Nvidia {
            let why = format!(
                "a new board in slot {} (it replaced serial {})",
                new.pci_bus_id,
                previous.serial.as_deref().unwrap_or("unknown")
            );
            self.validations.update(|all| {
                all.insert(
                    new.uuid.clone(),
                    Validation {
                        since: now,
                        why,
                        outcome: None,
                        kind: Default::default(),
                    },
                );
            });
        }
        // After the validation: the health stage validates an unrecorded swap until it sees
        // this entry, and reads it before the validations (sources/mod.rs), so no snapshot
        // has the swap without its validation.
        self.board_swaps.update(|swaps| {
            swaps.insert(
                new.uuid.clone(),
                BoardSwap {
                    at: now,
                    previous_uuid: previous.uuid.clone(),
                    previous_serial: previous.serial.clone(),
                },
            );
        });
        facts::board_swap(previous, new, now)
    }
}
