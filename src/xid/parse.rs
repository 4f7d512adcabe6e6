//! Recognising XID reports in kernel-log text.
//!
//! The NVIDIA driver writes XIDs as `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3,
//! GPU has fallen off the bus.`; older drivers leave out `PCI:` (and the oldest the domain:
//! `Xid (0001:00)` is bus 01, device 00), newer ones may write `pid='<unknown>'`, and some
//! reports carry no pid or name at all. On a GPU in MIG mode the parenthesis also names the
//! GPU instance and often the compute instance (`PCI:0000:01:00 GPU-I:05 GPU-CI:01`, as
//! kernel_rc.c prints them). A report whose address was not printed or was redacted
//! (`Xid (PCI:...)`) is still an XID, with no bus id.
//!
//! A GPU that drops off the bus may also be reported without an XID number, on one line
//! (`NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.`) or as the three-line notice of nv.c
//! (`NVRM: The NVIDIA GPU 0000:3b:00.0` / `NVRM: (PCI ID: 10de:2335) installed in this system
//! has` / `NVRM: fallen off the bus and is not responding to commands.`), which reaches us as
//! three lines from dmesg or a log file and as one record with `\x0a` escapes from /dev/kmsg.
//! Either counts as XID 79 for that address; [`LogParser`] carries the address from the first
//! line to the last.
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
    /// None when the driver printed no address (or it was redacted): counted, unattributed.
    pub pci_bus_id: Option<String>,
    /// The MIG GPU instance (`GPU-I:05`) and compute instance (`GPU-CI:01`) the driver
    /// attributes the error to, on a GPU in MIG mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// The driver's text after the XID number (and pid/name), e.g. "GPU has fallen off the bus."
    pub message: String,
    pub kind: ReportKind,
}

/// The XID the line reports, if it reports one, on its own: a notice spread over several
/// lines needs a [`LogParser`].
pub fn parse_line(line: &str) -> Option<XidReport> {
    let start = line.find("NVRM: ")?;
    let message = line[start + "NVRM: ".len()..].trim_end();
    if let Some(rest) = message.strip_prefix("Xid (") {
        return parse_xid(rest);
    }
    parse_fallen_off_bus(message)
}

/// How many lines after "The NVIDIA GPU <address>" its "fallen off the bus" line may come.
const NOTICE_LINES: u8 = 4;

/// Parses a log line by line, carrying the address of a multi-line "fallen off the bus"
/// notice from its first line to its last.
#[derive(Debug, Default)]
pub struct LogParser {
    /// The address of "NVRM: The NVIDIA GPU <address>", and how many more lines may finish it.
    notice: Option<(String, u8)>,
}

impl LogParser {
    /// The XIDs one line (or one /dev/kmsg record, whose inner line breaks are escaped as
    /// `\x0a`) reports.
    pub fn parse(&mut self, line: &str) -> Vec<XidReport> {
        line.split("\\x0a")
            .flat_map(|part| part.split('\n'))
            .filter_map(|part| self.parse_part(part))
            .collect()
    }

    fn parse_part(&mut self, line: &str) -> Option<XidReport> {
        if let Some(report) = parse_line(line) {
            self.notice = None;
            return Some(report);
        }
        let message = line
            .find("NVRM: ")
            .map(|start| line[start + "NVRM: ".len()..].trim_end());
        if let Some(address) = message
            .and_then(|m| m.strip_prefix("The NVIDIA GPU "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(normalize_bus_id)
        {
            // The whole notice on one line (some syslog forwarders join it).
            if line.contains("fallen off the bus and is not responding") {
                self.notice = None;
                return Some(fallen_off_bus(address));
            }
            self.notice = Some((address, NOTICE_LINES));
            return None;
        }
        let (address, left) = self.notice.take()?;
        if line.contains("fallen off the bus and is not responding") {
            return Some(fallen_off_bus(address));
        }
        if left > 1 {
            self.notice = Some((address, left - 1));
        }
        None
    }
}

fn fallen_off_bus(pci_bus_id: String) -> XidReport {
    XidReport {
        xid: 79,
        pci_bus_id: Some(pci_bus_id),
        gpu_instance: None,
        compute_instance: None,
        pid: None,
        process: None,
        message: "GPU has fallen off the bus.".to_string(),
        kind: ReportKind::FallenOffBus,
    }
}

/// The address block of an `Xid (...)` line: (bus id, GPU instance, compute instance), or
/// None when it is not an address block at all. A bus id of None: not printed or redacted.
fn parse_location(location: &str) -> Option<(Option<String>, Option<u32>, Option<u32>)> {
    let mut tokens = location.split_whitespace();
    let address = tokens.next().unwrap_or("");
    let address = address.strip_prefix("PCI:").unwrap_or(address);
    // "", "...", "xx:xx:xx", "<redacted>": an XID whose GPU the line does not say.
    let redacted = address.starts_with('<') && address.ends_with('>')
        || address
            .chars()
            .all(|c| matches!(c, '.' | '*' | '?' | '#' | 'x' | 'X' | ':'));
    let pci_bus_id = if redacted {
        None
    } else {
        Some(normalize_bus_id(address).or_else(|| old_driver_address(address))?)
    };
    let (mut gpu_instance, mut compute_instance) = (None, None);
    for token in tokens {
        // Anything else in the block is not an address block we know: not an XID line.
        if let Some(n) = token.strip_prefix("GPU-I:") {
            gpu_instance = Some(n.parse().ok()?);
        } else {
            let n = token.strip_prefix("GPU-CI:")?;
            compute_instance = Some(n.parse().ok()?);
        }
    }
    Some((pci_bus_id, gpu_instance, compute_instance))
}

/// Old drivers' `0001:00`: the bus (printed with four digits) and the device, no domain.
fn old_driver_address(address: &str) -> Option<String> {
    let (bus, device) = address.split_once(':')?;
    let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
    if !hex(bus, 4) || !hex(device, 2) || u32::from_str_radix(bus, 16).ok()? > 0xff {
        return None;
    }
    normalize_bus_id(&format!("0000:{}:{device}", &bus[2..]))
}

/// `PCI:0000:3b:00): 79, pid=1234, name=python3, text`
fn parse_xid(rest: &str) -> Option<XidReport> {
    let (location, after) = rest.split_once(')')?;
    let (pci_bus_id, gpu_instance, compute_instance) = parse_location(location)?;
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
        gpu_instance,
        compute_instance,
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
    Some(fallen_off_bus(normalize_bus_id(token)?))
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
        assert_eq!(r.pci_bus_id.as_deref(), Some("0000:3b:00.0"));
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
        assert_eq!(
            (r.xid, r.pci_bus_id.as_deref(), r.pid.clone()),
            (3, Some("0000:01:00.0"), None)
        );
    }

    #[test]
    fn every_address_block_the_drivers_print() {
        // (line, xid, bus id, GPU instance, compute instance)
        type Case<'a> = (&'a str, u32, Option<&'a str>, Option<u32>, Option<u32>);
        let cases: &[Case] = &[
            // MIG, from kernel_rc.c's comment and format strings.
            (
                "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
                94,
                Some("0000:01:00.0"),
                Some(5),
                None,
            ),
            (
                "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics Exception",
                13,
                Some("0000:3b:00.0"),
                Some(1),
                Some(2),
            ),
            // Redacted or not printed: counted with no bus id.
            (
                "NVRM: Xid (PCI:...): 137, pid=1, name=x, NVLink error",
                137,
                None,
                None,
                None,
            ),
            ("NVRM: Xid (): 79, GPU has fallen off the bus.", 79, None, None, None),
            ("NVRM: Xid (PCI:<redacted>): 48, DBE", 48, None, None, None),
            // Old drivers: bus and device, no domain.
            (
                "NVRM: Xid (0001:00): 13, 0003 00000000 0000a297 00001b00",
                13,
                Some("0000:01:00.0"),
                None,
                None,
            ),
            (
                "NVRM: Xid (0041:00): 31, Ch 00000010",
                31,
                Some("0000:41:00.0"),
                None,
                None,
            ),
        ];
        for (line, xid, bus, gi, ci) in cases {
            let r = parse_line(line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(
                (r.xid, r.pci_bus_id.as_deref(), r.gpu_instance, r.compute_instance),
                (*xid, *bus, *gi, *ci),
                "{line}"
            );
        }
    }

    #[test]
    fn the_fallen_off_the_bus_notice_over_several_lines_is_xid_79_once() {
        let notice = [
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
            "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
            "               NVRM: fallen off the bus and is not responding to commands.",
        ];
        let mut parser = LogParser::default();
        let reports: Vec<XidReport> = notice.iter().flat_map(|l| parser.parse(l)).collect();
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(
            (reports[0].xid, reports[0].pci_bus_id.as_deref()),
            (79, Some("0000:b3:00.0"))
        );
        assert_eq!(reports[0].kind, ReportKind::FallenOffBus);
        // As one /dev/kmsg record, its line breaks escaped.
        let record = "3,901,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.";
        let reports = LogParser::default().parse(record);
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(reports[0].pci_bus_id.as_deref(), Some("0000:b3:00.0"));
        // As one journal entry with real line breaks, and on one line.
        assert_eq!(LogParser::default().parse(&notice.join("\n")).len(), 1);
        let one_line = "NVRM: The NVIDIA GPU 0000:05:00.0 installed in this system has fallen off the bus and is not responding to commands.";
        assert_eq!(
            LogParser::default().parse(one_line)[0].pci_bus_id.as_deref(),
            Some("0000:05:00.0")
        );
        // The first line alone, or followed by something else, is nothing.
        let mut parser = LogParser::default();
        assert!(parser.parse(notice[0]).is_empty());
        for _ in 0..NOTICE_LINES {
            assert!(parser.parse("NVRM: something else").is_empty());
        }
        assert!(parser.parse(notice[2]).is_empty(), "too far from its address");
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
            "NVRM: Xid (PCI:0000:3b:00 GPU-X:1): 79, an unknown token in the address block",
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:x): 79, not an instance number",
            "NVRM: Xid (unknown): 79, words are not a redaction",
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
