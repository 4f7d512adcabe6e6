//! XID errors: the catalog, the kernel-log parser, the two sources and the counters.
//!
//! NVML's event set (backend/nvml/events.rs) and the kernel log (kmsg.rs) both report XIDs;
//! the store counts each event once (store.rs) and keeps the counts apart from the poller, so
//! they survive a lost GPU and an NVML re-initialisation. The publisher puts a copy of the
//! counts into every snapshot; metrics and the health rules read it from there.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `catalog.rs` | The XID catalog: what each code means and what to do about it |
//! | `cli.rs` | `gpuwarden xid explain CODE` and `gpuwarden xid scan [FILE]` |
//! | `event.rs` | One XID report as a source hands it to the store: which GPU, which code, from where and when, with the kernel-log line |
//! | `kmsg.rs` | The kernel-log XID source: /dev/kmsg, or a regular file that carries kernel-log records (a FIFO, socket or directory is refused rather than waited on) |
//! | `parse.rs` | Recognising XID reports in kernel-log text |
//! | `store.rs` | XID counters: every report counted once, from whichever source saw it first |
//! | `sxid.rs` | NVSwitch errors (SXIDs): what `gpuwarden xid explain` can say of a code, from the unit of the switch it comes from |
//! | `syslog_lines.rs` | Lines of an all-facility syslog file (/var/log/syslog, /var/log/messages): another program's line tells a kernel log from a file any local user can write a... |
//! <!-- /files -->

pub(crate) mod catalog;
pub mod cli;
pub(crate) mod event;
pub mod kmsg;
pub mod parse;
pub(crate) mod store;
pub(crate) mod sxid;
pub(crate) mod syslog_lines;

use crate::service::logging::RateLimiter;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// One log line per counted XID, at most one a minute per GPU and code, at the severity the
/// XID was counted with (the operator's policy, else NVIDIA's catalog): a code the policy makes
/// fatal is logged as fatal, not as the catalog's word for it.
pub fn log_xid(pci_bus_id: &str, xid: u32, severity: catalog::Severity, source: &str) {
    static LIMITER: OnceLock<Mutex<RateLimiter>> = OnceLock::new();
    let limiter = LIMITER.get_or_init(|| Mutex::new(RateLimiter::new(Duration::from_secs(60))));
    let Some(held_back) = limiter
        .lock()
        .ok()
        .and_then(|mut l| l.allow(&format!("{pci_bus_id}/{xid}")))
    else {
        return;
    };
    let entry = catalog::lookup(xid);
    let name = entry.map(|e| e.name).unwrap_or("unknown");
    let action = entry
        .map(|e| e.action())
        .unwrap_or_else(|| catalog::UNKNOWN_ACTION.to_string());
    let repeats = crate::service::logging::held_back_suffix(held_back);
    // Fatal ones are errors of the node; application faults and notices are not.
    let level = match severity {
        catalog::Severity::Fatal => log::Level::Error,
        catalog::Severity::Critical => log::Level::Warn,
        _ => log::Level::Info,
    };
    log::log!(
        level,
        pci_bus_id = pci_bus_id, xid = xid;
        "Xid {xid} ({name}, {}) on GPU {pci_bus_id}, from the {source}: {action}{repeats}",
        severity.label()
    );
}

/// One log line per counted SXID, at most one a minute per switch and code.
pub fn log_sxid(pci_bus_id: &str, sxid: u32, nvswitch: event::Nvswitch) {
    static LIMITER: OnceLock<Mutex<RateLimiter>> = OnceLock::new();
    let limiter = LIMITER.get_or_init(|| Mutex::new(RateLimiter::new(Duration::from_secs(60))));
    let Some(held_back) = limiter
        .lock()
        .ok()
        .and_then(|mut l| l.allow(&format!("{pci_bus_id}/{sxid}")))
    else {
        return;
    };
    let repeats = crate::service::logging::held_back_suffix(held_back);
    let (level, severity) = if nvswitch.fatal {
        (log::Level::Error, "fatal")
    } else {
        (log::Level::Warn, "non-fatal")
    };
    log::log!(
        level,
        "SXid {sxid} ({severity}, {}) on NVSwitch {} at {pci_bus_id}, from the kernel log{repeats}",
        sxid::block(sxid).map_or("an unknown unit", |b| b.unit),
        nvswitch.switch
    );
}
