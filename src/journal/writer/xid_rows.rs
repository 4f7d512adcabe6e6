//! The rows of counted XIDs and NVSwitch SXIDs, as the journal writes them.

use crate::journal::event::{Event, GpuRef, Kind};
use crate::model::unix_seconds;
use crate::xid::store::{Severity, XidEvent};
use serde_json::json;

/// A counted XID's row, on the GPU at its address (`gpu_at`: the journal's lookup, made only
/// for a GPU's XID, not an NVSwitch's).
pub(crate) fn xid_event(event: &XidEvent, severity: Severity, gpu_at: impl FnOnce(&str) -> Option<GpuRef>) -> Event {
    if let Some(nvswitch) = event.nvswitch {
        return sxid_event(event, nvswitch);
    }
    let entry = crate::xid::catalog::lookup(event.xid);
    let name = entry.map(|e| e.name).unwrap_or("unknown");
    Event::new(
        unix_seconds(event.at),
        Kind::Xid,
        gpu_at(&event.pci_bus_id),
        format!("Xid {} ({name}, {})", event.xid, severity.label()),
        json!({
            "xid": event.xid,
            "name": name,
            "severity": severity.label(),
            "nvidia_action": entry.map(|e| e.nvidia_action),
            "action": entry.map(|e| e.action()),
            "sources": [event.source.label()],
            "raw": event.raw,
            "kmsg_sequence": event.kmsg_sequence,
            "gpu_instance": event.gpu_instance,
        }),
    )
}

/// An NVSwitch error's row: its switch (the GPU columns hold `nvswitch:<address>` and the
/// switch's address), code, unit, the driver's severity and the kernel-log line.
fn sxid_event(event: &XidEvent, nvswitch: crate::xid::event::Nvswitch) -> Event {
    let unit = crate::xid::sxid::block(event.xid).map(|b| b.unit);
    let severity = if nvswitch.fatal { "fatal" } else { "non_fatal" };
    Event::new(
        unix_seconds(event.at),
        Kind::Sxid,
        Some(GpuRef {
            uuid: format!("nvswitch:{}", event.pci_bus_id),
            serial: None,
            pci_bus_id: event.pci_bus_id.clone(),
            index: None,
        }),
        format!(
            "SXid {} ({}, {severity}) on NVSwitch {} at {}",
            event.xid,
            unit.unwrap_or("an unknown unit"),
            nvswitch.switch,
            event.pci_bus_id
        ),
        json!({
            "sxid": event.xid,
            "switch": nvswitch.switch,
            "fatal": nvswitch.fatal,
            "unit": unit,
            "raw": event.raw,
            "kmsg_sequence": event.kmsg_sequence,
        }),
    )
}
