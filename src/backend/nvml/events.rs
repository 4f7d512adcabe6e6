//! The NVML XID source (the only NVML calls outside the pollers, so it lives with them): an event set registered for critical-XID and double-bit-ECC events on
//! every GPU, waited on by a thread of its own.
//!
//! `nvmlEventSetWait` blocks inside the driver, so it gets its own thread and a one-second
//! timeout. Registration goes through the raw symbol: nvml-wrapper frees the whole set when
//! one GPU refuses to register, and a GPU that does not support events must not cost us the
//! others. A double-bit ECC event is the same event as XID 48 and is counted as such.

use crate::service::stop::Stop;
use crate::xid::store::{XidEvent, XidSource, XidStore};
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Starts the event thread for the GPUs with these (index, PCI bus id); it ends within a
/// second of `stop` (the daemon's, or a driver reload's: a new thread replaces it).
/// The answer is alive while the thread runs (a GPU reset waits for it to end).
pub(crate) fn spawn(
    nvml: &'static Nvml,
    gpus: Vec<(u32, String)>,
    store: Arc<XidStore>,
    stop: Stop,
) -> std::io::Result<std::sync::Weak<()>> {
    let running = Arc::new(());
    let alive = Arc::downgrade(&running);
    std::thread::Builder::new()
        .name("xid-nvml-events".into())
        .spawn(move || {
            run(nvml, &gpus, &store, &stop);
            drop(running);
        })?;
    Ok(alive)
}

fn run(nvml: &'static Nvml, gpus: &[(u32, String)], store: &XidStore, stop: &Stop) {
    let set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(e) => {
            log::warn!("cannot create an NVML event set ({e}): XIDs are counted from the kernel log only");
            store.set_source_up(XidSource::Nvml, false);
            return;
        }
    };
    let Ok(register) = nvml.lib().nvmlDeviceRegisterEvents.as_ref() else {
        log::warn!("this NVML has no nvmlDeviceRegisterEvents: XIDs are counted from the kernel log only");
        store.set_source_up(XidSource::Nvml, false);
        return;
    };
    // An older driver without the event wait: say so once, and rely on the kernel log.
    if nvml.lib().nvmlEventSetWait_v2.is_err() {
        log::info!("this NVML has no nvmlEventSetWait_v2: XIDs are counted from the kernel log only");
        store.set_source_up(XidSource::Nvml, false);
        return;
    }
    let wanted = EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
    // Device handles are stable for the life of this Nvml; map them back to bus ids.
    let mut bus_by_handle = HashMap::new();
    for (index, bus) in gpus {
        let device = match nvml.device_by_index(*index) {
            Ok(d) => d,
            Err(e) => {
                log::warn!("GPU {index}: no handle for XID events ({e})");
                continue;
            }
        };
        // SAFETY: a valid device handle and event set, as nvml.h declares the call.
        let code = unsafe { register(device.handle(), wanted.bits(), set.handle()) };
        match nvml_wrapper::error::nvml_try(code) {
            Ok(()) => {
                // SAFETY: the raw handle is only used as a key, never called through.
                bus_by_handle.insert(unsafe { device.handle() } as usize, bus.clone());
            }
            Err(e) => log::warn!("GPU {index} ({bus}) does not report XID events through NVML: {e}"),
        }
    }
    if bus_by_handle.is_empty() {
        store.set_source_up(XidSource::Nvml, false);
        return;
    }
    store.set_source_up(XidSource::Nvml, true);
    log::info!("listening for NVML XID events on {} GPU(s)", bus_by_handle.len());
    let mut outage = crate::service::logging::Outage::default();
    while !stop.is_stopped() {
        match set.wait(1000) {
            // An event that arrives as we are told to stop belongs to our successor.
            Ok(_) if stop.is_stopped() => break,
            Ok(data) => {
                outage.recovered("waiting for NVML events works again");
                // SAFETY: the raw handle is only compared with the keys, never called through.
                let handle = unsafe { data.device.handle() } as usize;
                if let (Some(bus), Some(xid)) = (bus_by_handle.get(&handle), xid_of(&data)) {
                    record(store, bus, xid);
                }
            }
            Err(NvmlError::Timeout) => outage.recovered("waiting for NVML events works again"),
            Err(e) => {
                // A lost GPU can make the wait fail; keep listening for the others.
                outage.failed(format!("waiting for NVML events failed: {e}; retrying"));
                if stop.sleep(Duration::from_secs(1)) {
                    break;
                }
            }
        }
    }
}

/// The XID an event reports: its own for a critical XID event, 48 for a double-bit ECC one.
fn xid_of(data: &nvml_wrapper::struct_wrappers::event::EventData) -> Option<u32> {
    if data.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
        match data.event_data {
            Some(XidError::Value(v)) => Some(u32::try_from(v).unwrap_or(u32::MAX)),
            _ => None,
        }
    } else if data.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
        Some(48)
    } else {
        None
    }
}

fn record(store: &XidStore, bus: &str, xid: u32) {
    let event = XidEvent {
        pci_bus_id: bus.to_string(),
        gpu_instance: None,
        xid,
        source: XidSource::Nvml,
        at: SystemTime::now(),
        raw: None,
        kmsg_sequence: None,
        identity: None,
        nvswitch: None,
        file_position: None,
    };
    if store.record(event) {
        crate::xid::log_xid(bus, xid, store.severity(xid), "NVML event set");
    }
}
