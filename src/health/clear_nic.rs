//! Clearing a network adapter after a repair (`gpuwarden health clear --nic mlx5_0`): a new
//! cable or transceiver should not stay degraded for the hour its old symbol errors and link
//! downs take to leave the window. The clear is kept with the GPUs' (`Clears`, under
//! `nic:<device>`); from it on, the health memory counts the adapter's ports' flaps and error
//! growth afresh (health/nic_trends.rs), and the debouncer lets go of their held findings.
//! What still holds (a port that is still down) comes back at the next read, and the answer
//! says so.

use super::clear::ClearError;
use super::verdict::FindingView;
use crate::model::Snapshot;
use crate::model::health::Finding;
use serde::{Deserialize, Serialize};

/// The key of an adapter's clear among the GPUs' (by UUID), and of its journal rows.
pub(crate) fn key(device: &str) -> String {
    format!("nic:{device}")
}

/// The device name of a clear's key; None for a GPU's.
pub(crate) fn device_of(key: &str) -> Option<&str> {
    key.strip_prefix("nic:")
}

/// What the daemon answers once the next snapshot has looked at the adapter again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct NicClearAnswer {
    pub device: String,
    pub pci_bus_id: Option<String>,
    /// The reasons of the findings the clear let go of.
    pub cleared: Vec<String>,
    /// Findings about its ports still present after the clear.
    pub still: Vec<FindingView>,
    /// False when no snapshot came within the wait: `still` is as of the last one.
    pub polled_after: bool,
}

/// The adapter named `name` in the snapshot's scan.
pub(crate) fn find_nic<'a>(snapshot: &'a Snapshot, name: &str) -> Result<&'a crate::model::nic::NicDevice, ClearError> {
    snapshot
        .nics
        .devices
        .iter()
        .find(|d| d.name == name.trim())
        .ok_or_else(|| ClearError::NoSuchNic(crate::input::printable(name.trim())))
}

/// The node's findings about the ports of `device` (subjects `device/N`).
pub(crate) fn findings_of<'a>(snapshot: &'a Snapshot, device: &'a str) -> impl Iterator<Item = &'a Finding> + 'a {
    snapshot.node_findings.iter().filter(move |f| {
        f.subject
            .as_deref()
            .and_then(|s| s.split_once('/'))
            .is_some_and(|(d, _)| d == device)
    })
}

pub(crate) fn answer(before: &Snapshot, after: &Snapshot, device: &str, polled_after: bool) -> NicClearAnswer {
    let still: Vec<FindingView> = findings_of(after, device).map(FindingView::from).collect();
    let mut cleared: Vec<String> = findings_of(before, device)
        .filter(|f| {
            !still
                .iter()
                .any(|s| s.reason == f.reason.label() && s.subject == f.subject)
        })
        .map(|f| f.reason.to_string())
        .collect();
    cleared.dedup();
    NicClearAnswer {
        device: device.to_string(),
        pci_bus_id: find_nic(after, device).ok().and_then(|d| d.pci_bus_id.clone()),
        cleared,
        still,
        polled_after,
    }
}

/// For a person, as the GPU's clear says it.
pub(crate) fn text(answer: &NicClearAnswer) -> String {
    let nic = format!(
        "network adapter {} ({})",
        answer.device,
        answer.pci_bus_id.as_deref().unwrap_or("no PCI address")
    );
    let mut out = match answer.cleared.as_slice() {
        [] => format!("cleared {nic}: nothing was held\n"),
        reasons => format!("cleared {nic}: let go of {}\n", reasons.join(", ")),
    };
    if answer.still.is_empty() {
        out.push_str("no finding left\n");
        return out;
    }
    out.push_str("still present; its condition still holds:\n");
    for f in &answer.still {
        out.push_str(&format!("  {}: {}: {}\n", f.severity, f.reason, f.message));
    }
    out
}
