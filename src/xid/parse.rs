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
//! (`4,1234,5678901,-;NVRM: ...`), `dmesg` (`[ 5.678] NVRM: ...`, `<3>[ 5.678] NVRM: ...` with
//! `-r`), `dmesg -T`, `journalctl -k` or syslog (`... kernel: NVRM: ...`), and journald's export
//! format (`MESSAGE=NVRM: ...` in an entry with `_TRANSPORT=kernel`).
//!
//! **Records, not text to search.** The verdict drains nodes, so a line only counts when the
//! kernel itself logged it and the driver's prefix *begins* its message ([`classify`]). Any
//! user can make the kernel log text of their choosing inside another message (a rejected
//! mount option: `tmpfs: Unknown parameter 'NVRM: Xid (...): 79\x0ax'`, from an unprivileged
//! user namespace), and root's writes to /dev/kmsg carry the user facility: neither is an
//! XID. A /dev/kmsg record is never split at an escaped `\x0a`; the later lines of a multi-line
//! record (as dmesg prints them, indented) only ever finish a notice whose first line the
//! driver logged. A syslog file is weaker: on many set-ups any local user can write a
//! kernel-looking line into it (`logger -t kernel`); docs/xid.md says so.
//! It never panics on any input (a fuzz target holds it to that).

use crate::input::pci::normalize_bus_id;
use serde::Serialize;

/// How the report was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    /// An `NVRM: Xid (...)` line.
    Xid,
    /// "GPU has fallen off the bus" without an XID number; counted as XID 79.
    FallenOffBus,
    /// An NVSwitch error (`nvidia-nvswitch0: SXid (PCI:...): 12028, Non-fatal, ...`): the
    /// report's `xid` is the SXID code and its address the switch's, never a GPU's.
    Sxid {
        /// N of `nvidia-nvswitchN`.
        switch: u32,
        /// The driver wrote `Fatal` (else `Non-fatal`).
        fatal: bool,
    },
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

/// The driver's prefix: a message that begins with anything else is not the driver's.
const DRIVER_PREFIX: &str = "NVRM: ";

/// What one line of a kernel log is, once its wrapper is taken off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLine<'a> {
    /// A message the kernel logged: a /dev/kmsg record of the kernel facility, a dmesg line,
    /// a syslog line tagged `kernel`, or a bare message. `kernel_time_us`: its time since boot
    /// where the wrapper says (the record's identity in this boot, with its text).
    Kernel {
        message: &'a str,
        kernel_time_us: Option<u64>,
        /// A syslog line (`... kernel: ...`): weaker evidence, any local user may write one.
        via_syslog: bool,
        /// The stamp was printed on this line by a format that prints it on *every* line of a
        /// multi-line record (dmesg's `[ seconds]`, as /proc/kmsg gives it to rsyslog's
        /// imklog): a line with the same stamp as the line before is that record's next line.
        stamp_per_line: bool,
    },
    /// A driver message with nothing before it to mark where its record starts (`dmesg -t`,
    /// `journalctl -k -o cat`, a bare line): such a format prints a line break inside any
    /// record, a user's included, as a new line at column 0, so a user can forge one. Not
    /// read by the daemon ([`LogParser`]); `gpuwarden xid scan` reads it for a person.
    Unmarked(&'a str),
    /// An indented later line of a multi-line record, as dmesg prints it.
    Continuation(&'a str),
    /// One field of a journald export entry (`KEY=value`).
    ExportField(&'a str, &'a str),
    /// An empty line: the end of a journald export entry.
    Blank,
    /// Not the kernel's: a /dev/kmsg record of another facility (what user space writes to
    /// /dev/kmsg), another program's syslog line, anything unrecognised.
    NotKernel,
}

/// Takes the wrapper off one log line (see [`LogLine`]).
pub fn classify(line: &str) -> LogLine<'_> {
    if line.trim().is_empty() {
        return LogLine::Blank;
    }
    if line.starts_with([' ', '\t']) {
        return LogLine::Continuation(line.trim());
    }
    if let Some((header, message)) = line.split_once(';')
        && let Some((priority, _sequence, microseconds)) = kmsg_header_fields(header)
    {
        // The kernel's own records have facility 0; user space's writes never do.
        return match priority >> 3 {
            0 => LogLine::Kernel {
                message,
                kernel_time_us: Some(microseconds),
                via_syslog: false,
                stamp_per_line: false,
            },
            _ => LogLine::NotKernel,
        };
    }
    if let Some((key, value)) = line.split_once('=')
        && !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return LogLine::ExportField(key, value);
    }
    // `dmesg -r`: `<priority>` before the rest; the facility must be the kernel's.
    let mut rest = line;
    if let Some(after) = rest.strip_prefix('<')
        && let Some((priority, after)) = after.split_once('>')
        && let Ok(priority) = priority.parse::<u32>()
    {
        if priority >> 3 != 0 {
            return LogLine::NotKernel;
        }
        rest = after;
    }
    if rest.starts_with('[') {
        return dmesg_message(rest).unwrap_or(LogLine::NotKernel);
    }
    if rest.starts_with(DRIVER_PREFIX) || rest.starts_with(NVSWITCH_PREFIX) {
        // `dmesg -t`, `journalctl -k -o cat`, or a bare message.
        return LogLine::Unmarked(rest);
    }
    if let Some(line) = facility_message(rest) {
        return line;
    }
    syslog_message(rest).unwrap_or(LogLine::NotKernel)
}

/// The facility names `dmesg -x` decodes (and talosctl prints): only `kern` is the kernel's.
const FACILITIES: [&str; 20] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv", "ftp", "local0",
    "local1", "local2", "local3", "local4", "local5", "local6", "local7",
];
/// The level names `dmesg -x` decodes (`warning` is talosctl's spelling of `warn`).
const LEVELS: [&str; 9] = [
    "emerg", "alert", "crit", "err", "warn", "warning", "notice", "info", "debug",
];

/// A record whose facility and level are decoded at its start: `dmesg -x`
/// (`kern  :warn  : [  512.123456] NVRM: ...`, and with `--time-format iso`
/// `kern  :warn  : 2025-01-21T04:41:44,283575+00:00 NVRM: ...`), and the host-prefixed form
/// of cluster tools (`192.168.11.119: kern: warning: [2026-04-22T21:26:20.599716692Z]: NVRM:
/// ...`, talosctl dmesg). The facility marks every record's start as /dev/kmsg's header does,
/// so a `kern` record counts and any other facility (what user space writes) does not.
fn facility_message(line: &str) -> Option<LogLine<'_>> {
    let (kernel, rest) = decoded(line).or_else(|| {
        // A host (no blanks in it) before the facility.
        let (host, rest) = line.split_once(": ")?;
        (!host.is_empty() && !host.contains(char::is_whitespace))
            .then_some(rest)
            .and_then(decoded)
    })?;
    if !kernel {
        return Some(LogLine::NotKernel);
    }
    let rest = rest.trim_start_matches(' ');
    if let Some(stamped) = rest.strip_prefix('[') {
        // `[  512.123456] ` (dmesg -x) or `[2026-04-22T21:26:20.599716692Z]: ` (talosctl).
        let (stamp, message) = stamped.split_once(']')?;
        let message = message.strip_prefix(':').unwrap_or(message);
        return Some(LogLine::Kernel {
            message: message.trim_start_matches(' '),
            kernel_time_us: seconds_to_micros(stamp.trim()),
            via_syslog: false,
            stamp_per_line: true,
        });
    }
    // `--time-format iso`: a date and time before the message; or no time at all (`-t`).
    let message = match rest.split_once(' ') {
        Some((stamp, message)) if is_iso_time(stamp) => message,
        _ => rest,
    };
    Some(LogLine::Kernel {
        message,
        kernel_time_us: None,
        via_syslog: false,
        stamp_per_line: false,
    })
}

/// `kern  :warn  : rest`: whether the facility is the kernel's, and the rest.
fn decoded(line: &str) -> Option<(bool, &str)> {
    let (facility, rest) = line.split_once(':')?;
    let facility = facility.trim_end();
    if !FACILITIES.contains(&facility) {
        return None;
    }
    let (level, rest) = rest.split_once(':')?;
    if !LEVELS.contains(&level.trim()) {
        return None;
    }
    Some((facility == "kern", rest.strip_prefix(' ')?))
}

/// `2025-01-21T04:41:44,283575+00:00`: a date, a `T`, then a time.
pub(super) fn is_iso_time(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() >= 19
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b'T'
        && bytes[13] == b':'
}

/// `[ 1936.510073] message` (dmesg) or `[Sun Nov 22 02:38:41 2026] message` (dmesg -T).
fn dmesg_message(line: &str) -> Option<LogLine<'_>> {
    let (stamp, message) = line.strip_prefix('[')?.split_once(']')?;
    let message = message.strip_prefix(' ')?.trim_start_matches(' ');
    Some(LogLine::Kernel {
        message,
        kernel_time_us: seconds_to_micros(stamp.trim()),
        via_syslog: false,
        stamp_per_line: true,
    })
}

/// `1936.510073` -> 1_936_510_073 microseconds; None for a wall-clock stamp.
fn seconds_to_micros(stamp: &str) -> Option<u64> {
    let (seconds, fraction) = stamp.split_once('.')?;
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: u64 = seconds.parse().ok()?;
    // The first six digits of the fraction, padded with zeros: microseconds.
    let micros = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(6)
        .fold(0u64, |micros, digit| micros * 10 + u64::from(digit - b'0'));
    seconds.checked_mul(1_000_000)?.checked_add(micros)
}

/// `Nov 22 02:40:01 host kernel: message` or `2026-11-22T02:42:00+00:00 host kernel: message`:
/// the first `: ` must end the tag `kernel`, whose message may carry the kernel's own
/// `[ seconds]` stamp. Another program's line (`sshd[12]: ...`) is not the kernel's.
fn syslog_message(line: &str) -> Option<LogLine<'_>> {
    let (before, message) = line.split_once(": ")?;
    if before.rsplit(' ').next()? != "kernel" {
        return None;
    }
    let line = if message.starts_with('[') {
        dmesg_message(message)?
    } else {
        LogLine::Kernel {
            message,
            kernel_time_us: None,
            via_syslog: true,
            stamp_per_line: false,
        }
    };
    Some(match line {
        LogLine::Kernel {
            message,
            kernel_time_us,
            stamp_per_line,
            ..
        } => LogLine::Kernel {
            message,
            kernel_time_us,
            via_syslog: true,
            stamp_per_line,
        },
        other => other,
    })
}

/// The message of a kernel-log line as the parser reads it (after the code and severity);
/// empty for a line it does not take.
pub fn message_of(raw: &str) -> String {
    parse_line(raw).map(|r| r.message).unwrap_or_default()
}

/// The XID the line reports, if it reports one, on its own: a notice spread over several
/// lines needs a [`LogParser`]. The line is any of the wrappings the module names.
pub fn parse_line(line: &str) -> Option<XidReport> {
    match classify(line) {
        LogLine::Kernel { message, .. } | LogLine::Unmarked(message) => parse_message(message),
        _ => None,
    }
}

/// The XID a kernel message (its wrapper taken off) reports: the driver's prefix begins it.
fn parse_message(message: &str) -> Option<XidReport> {
    if let Some(report) = parse_sxid(message) {
        return Some(report);
    }
    let message = message.strip_prefix(DRIVER_PREFIX)?.trim_end();
    if let Some(rest) = message.strip_prefix("Xid (") {
        return parse_xid(rest);
    }
    parse_fallen_off_bus(message)
}

/// How many lines after "The NVIDIA GPU <address>" its "fallen off the bus" line may come.
const NOTICE_LINES: u8 = 4;

/// The longest journald export entry's message kept while the entry is read.
const MAX_EXPORT_MESSAGE: usize = 4096;

/// Parses a log line by line, carrying the address of a multi-line "fallen off the bus"
/// notice from its first line to its last, and the fields of a journald export entry to its end.
#[derive(Debug, Default)]
pub struct LogParser {
    /// The address of "NVRM: The NVIDIA GPU <address>", and how many more lines may finish it.
    notice: Option<(String, u8)>,
    /// The journald export entry being read: its message, kernel time and whether its
    /// transport is the kernel.
    entry: ExportEntry,
    /// A binary journald export field being read (see [`LogParser::feed`]).
    binary: Option<BinaryField>,
    /// A driver line came wrapped as syslog (weaker evidence: see the module's doc).
    pub saw_syslog: bool,
    /// Read driver lines that do not mark their record's start ([`LogLine::Unmarked`]) as
    /// records: `gpuwarden xid scan` does, for a person's paste; the daemon never does.
    pub read_unmarked: bool,
    /// Driver lines refused as unmarked so far.
    pub refused_unmarked: u64,
    /// The kernel time of the latest record read in a format that stamps every line, and
    /// whether the driver's prefix began it: a line with the same stamp is that record's.
    last_stamp: Option<(u64, bool)>,
    /// Driver-looking lines refused as the later lines of a record the driver did not begin.
    pub refused_continuations: u64,
}

/// A journald export field in its binary form: a line with the bare name, then a 64-bit
/// little-endian length, the bytes (line breaks and all) and a line break. Its bytes are
/// whatever the logging process wrote, so they are skipped by their length, never read as
/// lines: a user's message could otherwise carry a whole forged entry.
#[derive(Debug, Default)]
struct BinaryField {
    message: bool,
    /// The length's bytes read so far.
    header: Vec<u8>,
    /// Bytes of the field still to come, its closing line break included, once the length is read.
    remaining: Option<u64>,
    /// The value, as much of it as is kept (a message).
    value: Vec<u8>,
}

#[derive(Debug, Default)]
struct ExportEntry {
    /// A field of it has been read.
    started: bool,
    /// Its `_TRANSPORT` fields: one, or the entry is not believed.
    transports: u8,
    message: Option<String>,
    kernel_time_us: Option<u64>,
    kernel: bool,
}

impl LogParser {
    /// A parser that reads unmarked driver lines as records: for a person's paste only.
    pub fn reading_unmarked() -> LogParser {
        LogParser {
            read_unmarked: true,
            ..Default::default()
        }
    }

    /// The XIDs one line read from a log as bytes reports; `consumed` is how many bytes the
    /// reader took for it (its line break included, and whatever of a long line it skipped),
    /// which keeps a binary journald export field in step whatever it holds.
    pub fn feed(&mut self, line: &[u8], consumed: usize) -> Vec<(XidReport, Option<u64>)> {
        if let Some(mut field) = self.binary.take() {
            let had_break = consumed > line.len();
            let mut bytes = line;
            let mut consumed = consumed as u64;
            if field.remaining.is_none() {
                let take = (8 - field.header.len()).min(bytes.len());
                field.header.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                consumed -= take as u64;
                if field.header.len() < 8 {
                    // A line break inside the length: it is one of its bytes.
                    if had_break {
                        field.header.push(b'\n');
                        consumed -= 1;
                    }
                    if field.header.len() < 8 {
                        self.binary = Some(field);
                        return Vec::new();
                    }
                }
                let mut length = [0u8; 8];
                length.copy_from_slice(&field.header[..8]);
                // The value and its closing line break.
                field.remaining = Some(u64::from_le_bytes(length).saturating_add(1));
            }
            if field.message {
                let room = MAX_EXPORT_MESSAGE.saturating_sub(field.value.len());
                field.value.extend_from_slice(&bytes[..bytes.len().min(room)]);
                if had_break && field.value.len() < MAX_EXPORT_MESSAGE {
                    field.value.push(b'\n');
                }
            }
            let remaining = field.remaining.unwrap_or(0).saturating_sub(consumed);
            if remaining > 0 {
                field.remaining = Some(remaining);
                self.binary = Some(field);
            } else if field.message {
                // The closing line break is not part of the value.
                if field.value.last() == Some(&b'\n') {
                    field.value.pop();
                }
                self.entry.message = Some(String::from_utf8_lossy(&field.value).into_owned());
            }
            return Vec::new();
        }
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\n', '\r']);
        // A bare field name inside an export entry: its binary value follows.
        if self.entry.started
            && !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            self.binary = Some(BinaryField {
                message: text == "MESSAGE",
                ..Default::default()
            });
            return Vec::new();
        }
        self.parse_timed(text)
    }

    /// The XIDs one line (or one /dev/kmsg record, whose inner line breaks are escaped as
    /// `\x0a` and never split) reports.
    pub fn parse(&mut self, line: &str) -> Vec<XidReport> {
        self.parse_timed(line).into_iter().map(|(report, _)| report).collect()
    }

    /// As [`LogParser::parse`], each report with the kernel time of its record where the
    /// wrapper gives it (microseconds since boot).
    pub fn parse_timed(&mut self, line: &str) -> Vec<(XidReport, Option<u64>)> {
        match classify(line) {
            LogLine::Kernel {
                message,
                kernel_time_us,
                via_syslog,
                stamp_per_line,
            } => {
                let driver_line = message.starts_with(DRIVER_PREFIX) || message.starts_with(NVSWITCH_PREFIX);
                let same_record = stamp_per_line
                    && kernel_time_us.is_some()
                    && self.last_stamp.is_some_and(|(time, _)| Some(time) == kernel_time_us);
                let mut starts_record = true;
                if same_record {
                    // The next line of the record before (rsyslog's kern.log prints each line
                    // of a multi-line record with the record's stamp). A record someone else's
                    // text began (a segfault naming a user's file, whose name holds a line
                    // break and a driver line) never reports an XID, whatever its lines say.
                    if self.last_stamp.is_some_and(|(_, driver)| !driver) {
                        if driver_line {
                            self.refused_continuations += 1;
                        }
                        self.notice = None;
                        return Vec::new();
                    }
                    // The driver's own record: its next line finishes a notice it began.
                    starts_record = self.notice.is_none();
                } else if stamp_per_line {
                    self.last_stamp = kernel_time_us.map(|time| (time, driver_line));
                }
                let report = self.kernel_message(message, starts_record);
                self.saw_syslog |= via_syslog && report.is_some();
                report.map(|r| (r, kernel_time_us)).into_iter().collect()
            }
            LogLine::Unmarked(message) if self.read_unmarked => self
                .kernel_message(message, true)
                .map(|r| (r, None))
                .into_iter()
                .collect(),
            LogLine::Unmarked(_) => {
                self.notice = None;
                self.refused_unmarked += 1;
                Vec::new()
            }
            // Only ever the rest of a notice whose first line the driver logged, in its record.
            LogLine::Continuation(text) => self
                .kernel_message(text, false)
                .map(|r| (r, None))
                .into_iter()
                .collect(),
            LogLine::ExportField(key, value) => {
                if key == "__CURSOR" {
                    let ended = self.end_entry();
                    self.entry.started = true;
                    return ended;
                }
                self.entry.started = true;
                match key {
                    "MESSAGE" => {
                        self.entry.message = Some(crate::input::truncate_utf8(value, MAX_EXPORT_MESSAGE).to_string())
                    }
                    "_TRANSPORT" => {
                        self.entry.transports = self.entry.transports.saturating_add(1);
                        self.entry.kernel = value == "kernel";
                    }
                    "_SOURCE_MONOTONIC_TIMESTAMP" => self.entry.kernel_time_us = value.parse().ok(),
                    _ => {}
                }
                Vec::new()
            }
            LogLine::Blank => self.end_entry(),
            // Another record: a notice is finished within its own record or not at all.
            LogLine::NotKernel => {
                self.notice = None;
                Vec::new()
            }
        }
    }

    /// The end of a journald export entry: its message counts when the kernel logged it.
    fn end_entry(&mut self) -> Vec<(XidReport, Option<u64>)> {
        let entry = std::mem::take(&mut self.entry);
        match (entry.kernel && entry.transports == 1, entry.message) {
            (true, Some(message)) => self
                .kernel_message(&message, true)
                .map(|r| (r, entry.kernel_time_us))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        }
    }

    fn age_notice(&mut self) {
        if let Some((address, left)) = self.notice.take()
            && left > 1
        {
            self.notice = Some((address, left - 1));
        }
    }

    /// One kernel message. `starts_record`: false for the indented later line of a record,
    /// which may only finish a notice.
    fn kernel_message(&mut self, message: &str, starts_record: bool) -> Option<XidReport> {
        // A notice's later lines come in its own record (the driver logs it with one printk):
        // a new record ends the wait, so another record (a user's, whose text may hold a line
        // break and the notice's last words) never finishes it.
        if starts_record && !self.read_unmarked {
            self.notice = None;
        }
        // The NVSwitch driver's own prefix begins its message, as the GPU driver's does.
        if starts_record && let Some(report) = parse_sxid(message) {
            return Some(report);
        }
        let Some(text) = message.strip_prefix(DRIVER_PREFIX) else {
            self.age_notice();
            return None;
        };
        if starts_record {
            if let Some(report) = parse_message(message) {
                self.notice = None;
                return Some(report);
            }
            if let Some(rest) = text.strip_prefix("The NVIDIA GPU ") {
                // The address, up to the first character that cannot be part of one (a
                // space, or the `\x0a` of a /dev/kmsg record or `#012` of rsyslog).
                let end = rest
                    .find(|c: char| !(c.is_ascii_hexdigit() || c == ':' || c == '.'))
                    .unwrap_or(rest.len());
                let address = normalize_bus_id(&rest[..end])?;
                // The whole notice in one record or line.
                if rest.contains("fallen off the bus and is not responding") {
                    self.notice = None;
                    return Some(fallen_off_bus(address));
                }
                self.notice = Some((address, NOTICE_LINES));
                return None;
            }
        }
        let (address, left) = self.notice.take()?;
        if text.contains("fallen off the bus and is not responding") {
            return Some(fallen_off_bus(address));
        }
        if left > 1 {
            self.notice = Some((address, left - 1));
        }
        None
    }
}

/// The NVSwitch driver's prefix: `nvidia-nvswitch` and the switch's number.
const NVSWITCH_PREFIX: &str = "nvidia-nvswitch";

/// `nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted
/// PRIV error`: the switch's number and address, the code, the severity the driver gives and
/// its text. The prefix must begin the message, as for XIDs; anything not in this shape
/// (another severity word, no address, a code of more than five digits) is not an SXID.
fn parse_sxid(message: &str) -> Option<XidReport> {
    let rest = message.strip_prefix(NVSWITCH_PREFIX)?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    if digits == 0 || digits > 3 {
        return None;
    }
    let switch: u32 = rest[..digits].parse().ok()?;
    let rest = rest[digits..].strip_prefix(": SXid (")?;
    let (location, after) = rest.split_once(')')?;
    let address = location.trim();
    let pci_bus_id = normalize_bus_id(address.strip_prefix("PCI:").unwrap_or(address))?;
    let after = after.strip_prefix(':')?.trim_start();
    let code_end = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
    if code_end == 0 || code_end > 5 {
        return None;
    }
    let code: u32 = after[..code_end].parse().ok()?;
    let tail = after[code_end..].strip_prefix(',')?.trim_start();
    let (severity, text) = tail.split_once(',').unwrap_or((tail, ""));
    let fatal = match severity.trim() {
        "Fatal" => true,
        "Non-fatal" => false,
        _ => return None,
    };
    Some(XidReport {
        xid: code,
        pci_bus_id: Some(pci_bus_id),
        gpu_instance: None,
        compute_instance: None,
        pid: None,
        process: None,
        message: text.trim().to_string(),
        kind: ReportKind::Sxid { switch, fatal },
    })
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
    let (_, sequence, microseconds) = kmsg_header_fields(header)?;
    Some((sequence, microseconds))
}

/// `priority,sequence,microseconds,flags[,...]`: all three numbers, or not a record header.
fn kmsg_header_fields(header: &str) -> Option<(u32, u64, u64)> {
    let mut fields = header.split(',');
    let priority = fields.next()?.parse().ok()?;
    let sequence = fields.next()?.parse().ok()?;
    let microseconds = fields.next()?.parse().ok()?;
    fields.next()?;
    Some((priority, sequence, microseconds))
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
        let one_line = "[ 12.5] NVRM: The NVIDIA GPU 0000:05:00.0 installed in this system has fallen off the bus and is not responding to commands.";
        assert_eq!(
            LogParser::default().parse(one_line)[0].pci_bus_id.as_deref(),
            Some("0000:05:00.0")
        );
        // The first line alone, or followed by something else, is nothing.
        let mut parser = LogParser::default();
        assert!(parser.parse(notice[0]).is_empty());
        for _ in 0..NOTICE_LINES {
            assert!(parser.parse("               NVRM: something else").is_empty());
        }
        assert!(parser.parse(notice[2]).is_empty(), "too far from its address");
    }

    /// A notice is finished within its own record: another record, whose later lines a user
    /// wrote (a crashing program's name with a line break in it), never finishes it.
    #[test]
    fn a_notice_is_never_finished_by_another_record() {
        let forged = [
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) is not supported",
            "[ 1844.000001] traps: x[4242] general protection fault ip:0 sp:0 error:0 in x",
            "               NVRM: fallen off the bus and is not responding to commands.",
        ];
        let mut parser = LogParser::default();
        let reports: Vec<XidReport> = forged.iter().flat_map(|l| parser.parse(l)).collect();
        assert!(reports.is_empty(), "{reports:?}");
        // The same as /dev/kmsg records: the user's record carries the escaped line break.
        let mut parser = LogParser::default();
        assert!(
            parser
                .parse("3,900,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0")
                .is_empty()
        );
        assert!(
            parser
                .parse("6,901,1844000001,-;x[4242]: segfault at 0\x0aNVRM: fallen off the bus and is not responding to commands.")
                .is_empty()
        );
        assert!(
            parser
                .parse(" NVRM: fallen off the bus and is not responding to commands.")
                .is_empty()
        );
    }

    /// `dmesg -t` and `journalctl -k -o cat` print a user's line break as a new line at
    /// column 0: a driver line with nothing before it is not read as a record (and is
    /// counted as refused); `gpuwarden xid scan` reads it for a person.
    #[test]
    fn an_unmarked_driver_line_is_refused_and_counted() {
        let forged = "NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.";
        let sxid = "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up";
        let mut parser = LogParser::default();
        assert!(parser.parse(forged).is_empty());
        assert!(parser.parse(sxid).is_empty());
        assert_eq!(parser.refused_unmarked, 2);
        let mut scan = LogParser::reading_unmarked();
        assert_eq!(scan.parse(forged)[0].xid, 79);
        assert_eq!(scan.parse(sxid)[0].xid, 20034);
        assert_eq!(scan.refused_unmarked, 0);
        // Marked, the same text is the kernel's.
        assert_eq!(
            LogParser::default().parse(&format!("[  512.123456] {forged}"))[0].xid,
            79
        );
    }

    /// `dmesg -x` (with and without `--time-format iso` or a time) and the host-prefixed form
    /// of cluster tools mark each record with its facility: `kern` counts, `user` never does.
    #[test]
    fn a_decoded_facility_marks_the_record_and_only_kern_counts() {
        let read = |line: &str| LogParser::default().parse_timed(line);
        let cases: &[(&str, Option<u64>)] = &[
            (
                "kern  :warn  : 2025-01-21T04:41:44,283575+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
                None,
            ),
            (
                "kern  :warn  : [  512.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
                Some(512_123_456),
            ),
            (
                "kern  :err   : NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
                None,
            ),
            (
                "192.168.11.119: kern: warning: [2026-04-22T21:26:20.599716692Z]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
                None,
            ),
        ];
        for (line, time) in cases {
            let found = read(line);
            assert_eq!(found.len(), 1, "{line}");
            assert_eq!(
                (found[0].0.xid, found[0].0.pci_bus_id.as_deref()),
                (79, Some("0000:3b:00.0")),
                "{line}"
            );
            assert_eq!(found[0].1, *time, "{line}");
        }
        for line in [
            "user  :warn  : [  512.123456] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            "user  :notice: 2025-01-21T04:41:44,283575+00:00 NVRM: Xid (PCI:0000:3b:00): 79, x",
            "192.168.11.119: user: warning: [2026-04-22T21:26:20.599716692Z]: NVRM: Xid (PCI:0000:3b:00): 79, x",
            "kern  :bogus : NVRM: Xid (PCI:0000:3b:00): 79, x",
            "a host: kern: warning: NVRM: Xid (PCI:0000:3b:00): 79, x",
        ] {
            assert!(read(line).is_empty(), "{line}");
        }
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

    /// Every shape of a forged XID found so far: none is counted, whatever the wrapper.
    #[test]
    fn text_a_user_can_make_the_kernel_log_is_never_an_xid() {
        let forged = [
            // A rejected tmpfs option from an unprivileged user namespace, as /dev/kmsg has it.
            "4,344,118757994,-;tmpfs: Unknown parameter 'NVRM: Xid (PCI:0000:19:00): 79\\x0ax'",
            // The same with the driver's line after the escaped break.
            "4,345,118757995,-;tmpfs: Unknown parameter 'x\\x0aNVRM: Xid (PCI:0000:19:00): 79'",
            // Root writing to /dev/kmsg: the user facility (1), whatever the level.
            "12,346,118757996,-;NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            "11,347,118757997,-;NVRM: Xid (PCI:0000:19:00): 48, DBE",
            // As rsyslog writes the tmpfs record into kern.log (its line break as #012).
            "Nov 25 10:00:00 node kernel: tmpfs: Unknown parameter 'NVRM: Xid (PCI:0000:19:00): 79#012x'",
            "Nov 25 10:00:00 node kernel: [  118.757994] tmpfs: Unknown parameter 'NVRM: Xid (PCI:0000:19:00): 79'",
            // Another program's syslog line that quotes the driver.
            "Nov 25 10:00:00 node sshd[12]: NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y",
            "Nov 25 10:00:00 node alice: NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y",
            // dmesg: the first line of the record is not the driver's.
            "[  118.757994] tmpfs: Unknown parameter 'NVRM: Xid (PCI:0000:19:00): 79",
            // dmesg -r of a user-facility record.
            "<12>[  118.757994] NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y",
        ];
        for line in forged {
            assert_eq!(parse_line(line), None, "{line}");
            assert!(LogParser::default().parse(line).is_empty(), "{line}");
        }
        // The later, indented line of a user's record, as dmesg prints it, on its own.
        let mut parser = LogParser::default();
        assert!(parser.parse("[  118.757994] tmpfs: Unknown parameter 'x").is_empty());
        assert!(
            parser
                .parse("               NVRM: Xid (PCI:0000:19:00): 79'")
                .is_empty(),
            "a continuation line is never an XID of its own"
        );
        // The genuine records around them still count.
        for line in [
            "3,348,118757998,-;NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            "<3>[  118.757994] NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y",
            "Nov 25 10:00:00 node kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y",
        ] {
            assert_eq!(parse_line(line).map(|r| r.xid), Some(79), "{line}");
        }
    }

    #[test]
    fn nvswitch_errors_are_sxids_of_their_switch_and_never_a_gpus_xid() {
        for (line, switch, address, code, fatal, text) in [
            (
                "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error",
                0,
                "0000:05:00.0",
                12028,
                false,
                "Link 44 egress non-posted PRIV error",
            ),
            (
                "3,900,131453740743,-;nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
                2,
                "0000:07:00.0",
                20034,
                true,
                "Link 30 LTSSM Fault Up",
            ),
            (
                "[131453.740743] nvidia-nvswitch11: SXid (PCI:0001:C3:00.0): 24007, Fatal",
                11,
                "0001:c3:00.0",
                24007,
                true,
                "",
            ),
        ] {
            let r = parse_line(line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(r.kind, ReportKind::Sxid { switch, fatal }, "{line}");
            assert_eq!(
                (r.xid, r.pci_bus_id.as_deref(), r.message.as_str()),
                (code, Some(address), text)
            );
        }
        for not in [
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Severe, Link 44",
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 123456, Fatal, too long a code",
            "nvidia-nvswitch0: SXid (nowhere): 12028, Fatal, no address",
            "nvidia-nvswitchX: SXid (PCI:0000:05:00.0): 12028, Fatal, no number",
            "nvidia-nvswitch0: Probing 0000:05:00.0",
        ] {
            assert_eq!(parse_line(not), None, "{not}");
        }
    }

    /// The forgery rules of XIDs hold for SXIDs: text quoted inside another message, a user
    /// facility record, another program's syslog line, none of them counts.
    #[test]
    fn text_a_user_can_make_the_kernel_log_is_never_an_sxid() {
        let sxid = "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up";
        for forged in [
            format!("4,344,118757994,-;tmpfs: Unknown parameter '{sxid}'"),
            format!("4,345,118757995,-;tmpfs: Unknown parameter 'x\\x0a{sxid}'"),
            format!("12,346,118757996,-;{sxid}"),
            format!("Nov 25 10:00:00 node alice: {sxid}"),
            format!("[  118.757994] tmpfs: Unknown parameter '{sxid}'"),
            format!("NVRM: Xid (PCI:0000:19:00): 13, pid=7, name={sxid}"),
        ] {
            let reports = LogParser::default().parse(&forged);
            assert!(
                reports.iter().all(|r| !matches!(r.kind, ReportKind::Sxid { .. })),
                "{forged}: {reports:?}"
            );
        }
        let mut parser = LogParser::default();
        assert!(parser.parse("[  118.757994] tmpfs: Unknown parameter 'x").is_empty());
        assert!(
            parser.parse(&format!("               {sxid}'")).is_empty(),
            "a continuation line"
        );
        assert!(matches!(
            parse_line(&format!("3,348,118757998,-;{sxid}")).map(|r| r.kind),
            Some(ReportKind::Sxid { switch: 0, fatal: true })
        ));
    }

    #[test]
    fn a_process_name_cannot_smuggle_a_second_xid_into_a_driver_record() {
        // The driver's own record names the process, whose name is the user's to choose.
        let line = "3,350,5000000,-;NVRM: Xid (PCI:0000:5d:00): 13, pid=7, name=a\\x0aNVRM: Xid (PCI:0000:19:00): 79, Graphics Exception";
        let reports = LogParser::default().parse(line);
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(
            (reports[0].xid, reports[0].pci_bus_id.as_deref()),
            (13, Some("0000:5d:00.0"))
        );
    }

    /// journald's export format: only an entry whose transport is the kernel counts, and a
    /// binary field's bytes (a user's message with line breaks) are skipped by their length.
    #[test]
    fn journald_export_counts_only_the_kernels_entries() {
        fn binary(name: &str, value: &[u8]) -> Vec<u8> {
            let mut out = format!("{name}\n").into_bytes();
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
            out.extend_from_slice(value);
            out.push(b'\n');
            out
        }
        let mut log = Vec::new();
        // A kernel entry: counted, with its kernel time.
        log.extend_from_slice(
            b"__CURSOR=s=1\n__REALTIME_TIMESTAMP=1\n_SOURCE_MONOTONIC_TIMESTAMP=5000000\n_TRANSPORT=kernel\n\
              MESSAGE=NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE\nSYSLOG_IDENTIFIER=kernel\n\n",
        );
        // logger -t kernel: the syslog transport.
        log.extend_from_slice(
            b"__CURSOR=s=2\n_TRANSPORT=syslog\nSYSLOG_IDENTIFIER=kernel\nMESSAGE=NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y\n\n",
        );
        // A user's message whose bytes hold a whole forged kernel entry (a length byte of 10,
        // a line break, included).
        let mut forged =
            b"x\n\n__CURSOR=s=9\n_TRANSPORT=kernel\nMESSAGE=NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y\n\n"
                .to_vec();
        // 266 bytes: the length's first byte is 10, a line break.
        forged.resize(266, b' ');
        log.extend_from_slice(b"__CURSOR=s=3\n_TRANSPORT=stdout\n");
        log.extend_from_slice(&binary("MESSAGE", &forged));
        log.extend_from_slice(b"\n");
        // A user's entry that adds a kernel transport of its own: two transports, not believed.
        log.extend_from_slice(
            b"__CURSOR=s=4\n_TRANSPORT=journal\n_TRANSPORT=kernel\nMESSAGE=NVRM: Xid (PCI:0000:19:00): 79, y\n\n",
        );
        // The kernel's three-line notice, as a binary message.
        log.extend_from_slice(b"__CURSOR=s=5\n_TRANSPORT=kernel\n");
        log.extend_from_slice(&binary(
            "MESSAGE",
            b"NVRM: The NVIDIA GPU 0000:b4:00.0\nNVRM: (PCI ID: 10de:2335) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.",
        ));
        log.extend_from_slice(b"\n");
        let mut parser = LogParser::default();
        let mut found = Vec::new();
        for line in log.split_inclusive(|b| *b == b'\n') {
            let text = line.strip_suffix(b"\n").unwrap_or(line);
            found.extend(parser.feed(text, line.len()));
        }
        let found: Vec<_> = found
            .iter()
            .map(|(r, t)| (r.xid, r.pci_bus_id.clone().unwrap_or_default(), *t))
            .collect();
        assert_eq!(
            found,
            vec![
                (48, "0000:19:00.0".to_string(), Some(5_000_000)),
                (79, "0000:b4:00.0".to_string(), None)
            ]
        );
    }

    #[test]
    fn dmesg_stamps_are_kernel_times() {
        assert_eq!(seconds_to_micros("1936.510073"), Some(1_936_510_073));
        assert_eq!(seconds_to_micros("5.5"), Some(5_500_000));
        assert_eq!(seconds_to_micros("Sun Nov 22 02:38:41 2026"), None);
        assert_eq!(seconds_to_micros("99999999999999999999.1"), None);
    }

    #[test]
    fn an_xid_read_from_a_syslog_line_is_noted_as_weaker_evidence() {
        let mut parser = LogParser::default();
        parser.parse("3,1,5,-;NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, y");
        parser.parse("[ 5.0] NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, y");
        parser.parse("Nov 25 10:00:00 node kernel: tmpfs: nothing");
        assert!(!parser.saw_syslog);
        parser.parse("Nov 25 10:00:00 node kernel: [ 6.0] NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, y");
        assert!(parser.saw_syslog);
    }

    /// rsyslog's imklog reads /proc/kmsg, which prints every line of a multi-line record with
    /// the record's own stamp: a user's crashing program whose file name holds a line break
    /// and a driver line puts a well-formed Xid 79 line into kern.log. Its stamp is the
    /// segfault line's: it is that record's, and not counted. The driver's own multi-line
    /// notice, stamped the same way, is still read, and a driver line with its own stamp is.
    #[test]
    fn a_later_line_of_a_users_record_in_rsyslogs_kern_log_is_not_an_xid() {
        let mut parser = LogParser::default();
        let forged = parser.parse(
            "2026-12-06T03:00:00.123456+00:00 node kernel: [ 1234.567890] evil[4242]: segfault at 0 ip 0 sp 0 error 4 in x",
        );
        assert!(forged.is_empty());
        let forged = parser.parse(
            "2026-12-06T03:00:00.123456+00:00 node kernel: [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
        );
        assert!(forged.is_empty(), "{forged:?}");
        assert_eq!(parser.refused_continuations, 1);
        // The same as dmesg would print it without indenting (and as `dmesg -x` with a stamp).
        let forged = parser.parse("[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, again");
        assert!(forged.is_empty());
        // The next record, with a stamp of its own: the driver's.
        let real = parser
            .parse("Dec  6 03:00:01 node kernel: [ 1234.600000] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE");
        assert_eq!(real.len(), 1);
        // The driver's own three-line notice, each line with the record's stamp.
        let notice = [
            "Dec  6 03:00:02 node kernel: [ 1235.000001] NVRM: The NVIDIA GPU 0000:5d:00.0",
            "Dec  6 03:00:02 node kernel: [ 1235.000001] NVRM: (PCI ID: 10de:2335) installed in this system has",
            "Dec  6 03:00:02 node kernel: [ 1235.000001] NVRM: fallen off the bus and is not responding to commands.",
        ];
        let found: Vec<XidReport> = notice.iter().flat_map(|l| parser.parse(l)).collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].xid, found[0].pci_bus_id.as_deref()),
            (79, Some("0000:5d:00.0"))
        );
        // /dev/kmsg records never share a line, so one stamp twice there is two records.
        let mut parser = LogParser::default();
        assert_eq!(
            parser
                .parse("3,1,1000,-;NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, y")
                .len(),
            1
        );
        assert_eq!(
            parser
                .parse("3,2,1000,-;NVRM: Xid (PCI:0000:19:00): 31, pid=1, name=x, y")
                .len(),
            1
        );
    }

    #[test]
    fn kmsg_header() {
        assert_eq!(kmsg_record_header("4,1234,5678901,-;NVRM: x"), Some((1234, 5678901)));
        assert_eq!(kmsg_record_header("garbage"), None);
    }
}
