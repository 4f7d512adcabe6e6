//! Recognising XID reports in kernel-log text.
//!
//! The NVIDIA driver writes XIDs as `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3,
//! GPU has fallen off the bus.`; older drivers leave out `PCI:`, newer ones may write
//! `pid='<unknown>'`, and some reports carry no pid or name at all. A GPU that drops off the
//! bus may also be reported without an XID number (`NVRM: GPU 0000:3b:00.0: GPU has fallen off
//! the bus.`), which counts as XID 79.
//!
//! The same line can reach us in many wrappings: a raw /dev/kmsg record
//! (`4,1234,5678901,-;NVRM: ...`), `dmesg` (`[ 5.678] NVRM: ...`), `dmesg -T`, `journalctl -k`
//! or syslog. The parser looks for the `NVRM: ` marker wherever it is and ignores the prefix,
//! so it needs no format switch. It never panics on any input (a fuzz target holds it to that).

use crate::pci::normalize_bus_id;
use serde::Serialize;

/// How the report was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    /// An `NVRM: Xid (...)` line.
    Xid,
    /// "GPU has fallen off the bus" without an XID number; counted as XID 79.
    FallenOffBus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct XidReport {
    pub xid: u32,
    /// `0000:3b:00.0`: the kernel's form with the function number, as gpu_info shows it.
    pub pci_bus_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// The driver's text after the XID number (and pid/name), e.g. "GPU has fallen off the bus."
    pub message: String,
    pub kind: ReportKind,
}

/// The XID the line reports, if it reports one.
pub fn parse_line(line: &str) -> Option<XidReport> {
    let start = line.find("NVRM: ")?;
    let message = line[start + "NVRM: ".len()..].trim_end();
    if let Some(rest) = message.strip_prefix("Xid (") {
        return parse_xid(rest);
    }
    parse_fallen_off_bus(message)
}

/// `PCI:0000:3b:00): 79, pid=1234, name=python3, text`
fn parse_xid(rest: &str) -> Option<XidReport> {
    let (location, after) = rest.split_once(')')?;
    let pci_bus_id = normalize_bus_id(location.strip_prefix("PCI:").unwrap_or(location))?;
    let after = after.strip_prefix(':')?.trim_start();
    let digits_end = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
    if digits_end == 0 || digits_end > 5 {
        return None;
    }
    let xid: u32 = after[..digits_end].parse().ok()?;
    let mut tail = after[digits_end..].trim_start();
    // After the number comes a comma, or the end of the line.
    if !tail.is_empty() {
        tail = tail.strip_prefix(',')?.trim_start();
    }
    let mut pid = None;
    let mut process = None;
    if let Some(value) = field(&mut tail, "pid=") {
        pid = Some(value);
        if let Some(value) = field(&mut tail, "name=") {
            process = Some(value);
        }
    }
    Some(XidReport {
        xid,
        pci_bus_id,
        pid,
        process,
        message: tail.to_string(),
        kind: ReportKind::Xid,
    })
}

/// Takes `key=value, ` off the front of `tail`; quotes around the value are dropped.
fn field(tail: &mut &str, key: &str) -> Option<String> {
    let rest = tail.strip_prefix(key)?;
    let (value, remainder) = match rest.split_once(", ") {
        Some((v, r)) => (v, r),
        None => (rest.trim_end_matches(','), ""),
    };
    *tail = remainder.trim_start();
    Some(value.trim_matches('\'').to_string())
}

/// `GPU 0000:3b:00.0: GPU has fallen off the bus.` or `GPU at PCI:0000:3b:00: GPU has ...`
/// or (older) `GPU at 0000:01:00.0 has fallen off the bus.`
fn parse_fallen_off_bus(message: &str) -> Option<XidReport> {
    if !message.contains("has fallen off the bus") {
        return None;
    }
    let rest = message.strip_prefix("GPU ")?;
    let rest = rest.strip_prefix("at ").unwrap_or(rest);
    let rest = rest.strip_prefix("PCI:").unwrap_or(rest);
    let token = rest.split_whitespace().next()?.trim_end_matches(':');
    let pci_bus_id = normalize_bus_id(token)?;
    Some(XidReport {
        xid: 79,
        pci_bus_id,
        pid: None,
        process: None,
        message: "GPU has fallen off the bus.".to_string(),
        kind: ReportKind::FallenOffBus,
    })
}

/// The monotonic time (microseconds since boot) of a raw /dev/kmsg record
/// (`priority,sequence,microseconds,flags;message`), and its sequence number.
pub fn kmsg_record_header(record: &str) -> Option<(u64, u64)> {
    let (header, _) = record.split_once(';')?;
    let mut fields = header.split(',');
    let _priority = fields.next()?;
    let sequence = fields.next()?.parse().ok()?;
    let microseconds = fields.next()?.parse().ok()?;
    Some((sequence, microseconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_xid_with_pid_and_name() {
        let r =
            parse_line("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.").unwrap();
        assert_eq!(r.xid, 79);
        assert_eq!(r.pci_bus_id, "0000:3b:00.0");
        assert_eq!(r.pid.as_deref(), Some("1234"));
        assert_eq!(r.process.as_deref(), Some("python3"));
        assert_eq!(r.message, "GPU has fallen off the bus.");
    }

    #[test]
    fn quoted_unknown_pid() {
        let r = parse_line("NVRM: Xid (PCI:0000:07:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 5(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)").unwrap();
        assert_eq!(
            (r.xid, r.pid.as_deref(), r.process.as_deref()),
            (74, Some("<unknown>"), Some("<unknown>"))
        );
        assert!(r.message.starts_with("NVLink: fatal error detected on link 5"));
    }

    #[test]
    fn old_driver_without_pci_prefix_or_pid() {
        let r = parse_line("[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff")
            .unwrap();
        assert_eq!((r.xid, r.pci_bus_id.as_str(), r.pid.clone()), (3, "0000:01:00.0", None));
    }

    #[test]
    fn fallen_off_bus_without_a_number() {
        for line in [
            "NVRM: GPU 0000:2B:00.0: GPU has fallen off the bus.",
            "kernel: [ 1936.510073] NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
            "NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.",
        ] {
            let r = parse_line(line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!((r.xid, r.kind), (79, ReportKind::FallenOffBus), "{line}");
        }
    }

    #[test]
    fn look_alikes_are_not_xids() {
        for line in [
            "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build",
            "NVRM: Persistence mode is deprecated and will be removed in a future release.",
            "(EE) XID 0x1a00005: BadWindow (invalid Window parameter)",
            "X Error of failed request:  BadMatch; Resource id in failed request:  0x3200003 (XID)",
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error",
            "NVRM: Xid (PCI:0000:3b:00): not-a-number, oops",
            "NVRM: Xid (PCI:zzzz:3b:00): 79, GPU has fallen off the bus.",
            "NVRM: GPU has fallen off the bus",
            "",
        ] {
            assert_eq!(parse_line(line), None, "{line}");
        }
    }

    #[test]
    fn kmsg_header() {
        assert_eq!(kmsg_record_header("4,1234,5678901,-;NVRM: x"), Some((1234, 5678901)));
        assert_eq!(kmsg_record_header("garbage"), None);
    }
}
