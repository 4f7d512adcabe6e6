//! The kernel-log XID source: /dev/kmsg, or a regular file that carries kernel-log records (a
//! FIFO, socket or directory is refused rather than waited on).
//!
//! Opening /dev/kmsg starts at the oldest record the ring buffer still holds, so XIDs logged
//! before the daemon started are counted (once per daemon run); the reader then blocks for new
//! records. Each /dev/kmsg record carries its time since boot, which dates the XID; lines
//! without that header (a plain file, a FIFO fed by a test) are dated when read. A regular
//! file is followed like `tail -f`, across truncation (read again from the start) and
//! rotation (the new file at the path is opened). The path is `xid.kernel_log_path`.
//!
//! Where a reader got to is kept per path ([`ResumePoints`]), so a reload that turns the
//! reader off and on, or moves it away and back, goes on from there instead of counting the
//! ring buffer (or the file) again. Lines are read as bytes, at most [`MAX_LINE`] of each
//! (the rest of a longer one is skipped, so one huge line cannot hold memory), and invalid
//! UTF-8 is replaced rather than losing the line.

use super::event::{FilePosition, TAIL_BYTES};
use super::parse::{self, LogParser, ReportKind, XidReport};
use super::store::{MAX_RAW_LINE, UNATTRIBUTED, XidEvent, XidSource, XidStore};
use crate::service::stop::Stop;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// The longest line read whole: /dev/kmsg records are at most about 1 KiB (the kernel's
/// PRINTK_MESSAGE_MAX is 2 KiB); a log file's lines beyond 64 KiB are not kernel messages.
pub const MAX_LINE: usize = 64 * 1024;

/// How long the reader waits before it opens a path it could not open again.
const REOPEN_AFTER: Duration = Duration::from_secs(1);

/// Where a reader of one path got to.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Position {
    /// The last /dev/kmsg record sequence number read.
    sequence: Option<u64>,
    /// A regular file's inode and the byte offset read up to.
    file: Option<(u64, u64)>,
}

/// Where each kernel-log path was read up to, kept by the daemon across reloads, and where a
/// file was read up to before a restart (the journal's seed).
#[derive(Debug, Default)]
pub struct ResumePoints {
    positions: Mutex<HashMap<PathBuf, Position>>,
    seeded: Mutex<HashMap<PathBuf, FilePosition>>,
}

impl ResumePoints {
    fn get(&self, path: &Path) -> Position {
        let positions = self.positions.lock().unwrap_or_else(PoisonError::into_inner);
        positions.get(path).copied().unwrap_or_default()
    }

    /// Start reading `path` after /dev/kmsg record `sequence` (the journal's last, from before
    /// a restart in this boot): what was counted then is not counted again.
    pub fn resume_after(&self, path: &Path, sequence: u64) {
        let mut positions = self.positions.lock().unwrap_or_else(PoisonError::into_inner);
        let position = positions.entry(path.to_path_buf()).or_default();
        position.sequence = position.sequence.max(Some(sequence));
    }

    /// Start reading the file at `position.path` where an earlier run of the daemon got to (the
    /// journal's seed), if the same file is still there: same device and inode, long enough,
    /// and the bytes before the offset unchanged.
    pub fn resume_file(&self, position: FilePosition) {
        let mut seeded = self.seeded.lock().unwrap_or_else(PoisonError::into_inner);
        seeded.insert(position.path.clone(), position);
    }

    /// The seeded position of `path`, once.
    fn take_seeded(&self, path: &Path) -> Option<FilePosition> {
        let mut seeded = self.seeded.lock().unwrap_or_else(PoisonError::into_inner);
        seeded.remove(path)
    }

    fn set(&self, path: &Path, position: Position) {
        let mut positions = self.positions.lock().unwrap_or_else(PoisonError::into_inner);
        positions.insert(path.to_path_buf(), position);
    }
}

/// What `gpuwarden config check` says of a kernel-log path the reader will refuse: anything
/// but a regular file or a character device (/dev/kmsg). None for those, and for a path
/// that is not there (yet).
pub fn caution(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let kind = meta.file_type();
    use std::os::unix::fs::FileTypeExt;
    (!(kind.is_file() || kind.is_char_device())).then(|| {
        format!(
            "xid.kernel_log_path {} is not a regular file or /dev/kmsg (a FIFO, socket or directory): the reader \
             refuses it and counts XIDs from NVML events only. Point it at /dev/kmsg or at a log file",
            path.display()
        )
    })
}

/// How many bytes at a log file's start and at its end are looked at for other programs'
/// lines ([`all_facility`]).
const SNIFF_BYTES: u64 = 16 * 1024;
/// How long a reader that refused an all-facility syslog file waits before it looks again.
const REFUSED_RETRY: Duration = Duration::from_secs(30);

/// Why `file` is refused as a kernel log, when its first or last [`SNIFF_BYTES`] hold a
/// syslog line of another program: it gathers every facility, and any local user can write
/// a kernel-looking line into it (`logger -t kernel "NVRM: Xid ..."`).
fn all_facility_file(path: &Path, file: &std::fs::File, length: u64) -> Option<String> {
    let mut spans = vec![(0, length.min(SNIFF_BYTES))];
    if length > SNIFF_BYTES {
        spans.push((length - SNIFF_BYTES, SNIFF_BYTES));
    }
    for (offset, size) in spans {
        let text = read_span(file, offset, size)?;
        if let Some(tag) = text.lines().find_map(super::syslog_lines::other_programs_syslog_tag) {
            return Some(all_facility_words(path, tag));
        }
    }
    None
}

/// `size` bytes of `file` from `offset`, lossily decoded.
fn read_span(file: &std::fs::File, offset: u64, size: u64) -> Option<String> {
    let mut bytes = vec![0u8; size as usize];
    let read = file.read_at(&mut bytes, offset).ok()?;
    bytes.truncate(read);
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `path` opened as the reader opens it, when it is a regular file: the file and its length.
fn open_regular(path: &Path) -> Option<(std::fs::File, u64)> {
    let file = crate::input::open(
        path,
        crate::input::Links::Follow,
        crate::input::Kinds::RegularOrCharDevice,
    )
    .ok()?;
    let length = file.metadata().ok().filter(|m| m.is_file())?.len();
    Some((file, length))
}

fn all_facility_words(path: &Path, tag: &str) -> String {
    format!(
        "xid.kernel_log_path {} holds other programs' lines ({}): it is an all-facility syslog file, into \
         which any local user can write a kernel-looking XID line (logger -t kernel), so it is not read. \
         Point it at /dev/kmsg (the default) or at a log of the kernel facility only (kern.log)",
        path.display(),
        crate::input::printable(crate::input::truncate_utf8(tag, 64))
    )
}

/// What `gpuwarden config check` refuses as a kernel log: a regular file that holds other
/// programs' syslog lines (see [`all_facility_file`]). None otherwise, and where it cannot be
/// read now.
pub fn all_facility(path: &Path) -> Option<String> {
    let (file, length) = open_regular(path)?;
    all_facility_file(path, &file, length)
}

/// What `gpuwarden config check` says of a kernel log that is a syslog file of the kernel
/// facility: any local user may be able to write into it, where the syslog daemon lets
/// `logger -p kern.*` through.
pub fn syslog_notice(path: &Path) -> Option<String> {
    let (file, length) = open_regular(path)?;
    let size = length.min(SNIFF_BYTES);
    let text = read_span(&file, length - size, size)?;
    let syslog = text
        .lines()
        .any(|line| matches!(parse::classify(line), parse::LogLine::Kernel { via_syslog: true, .. }));
    syslog.then(|| {
        format!(
            "xid.kernel_log_path {} is a syslog file: a local user may be able to write a kernel-looking XID \
             line into it, wherever the syslog daemon accepts the kernel facility from programs (logger -p kern.err \
             -t kernel). A line like that drains a GPU. /dev/kmsg (the default) or journald's export format hold only \
             what the kernel logged",
            path.display()
        )
    })
}

/// When the machine booted, from /proc/uptime; None where that cannot be read.
fn boot_time() -> Option<SystemTime> {
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    SystemTime::now().checked_sub(Duration::try_from_secs_f64(seconds).ok()?)
}

/// Turns one line (as read: its bytes, and how many the reader consumed for it) into XID
/// events, if it reports any. `parser` carries a multi-line notice and a journald export
/// entry from one line to the next.
fn events_from_line(parser: &mut LogParser, line: &[u8], consumed: usize, boot: Option<SystemTime>) -> Vec<XidEvent> {
    let reports = parser.feed(line, consumed);
    if reports.is_empty() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    let header = parse::kmsg_record_header(text);
    let at = header
        .zip(boot)
        .map(|((_, microseconds), boot)| boot + Duration::from_micros(microseconds))
        .map(|t| t.min(SystemTime::now()))
        .unwrap_or_else(SystemTime::now);
    let raw = crate::input::truncate_utf8(text, MAX_RAW_LINE);
    reports
        .into_iter()
        .map(|(report, kernel_time_us)| {
            let sequence = header.map(|(sequence, _)| sequence);
            let identity = kernel_time_us.map(|t| record_identity(t, sequence, &report));
            XidEvent {
                raw: Some(raw.to_string()),
                kmsg_sequence: header.map(|(sequence, _)| sequence),
                identity,
                ..event(report, at)
            }
        })
        .collect()
}

/// One kernel record's identity in this boot: its kernel time and what it says (and its
/// /dev/kmsg sequence number where the line has one), whatever file it was read from: a log
/// file emptied and written again, or the same record in two files, is not a second XID.
fn record_identity(kernel_time_us: u64, sequence: Option<u64>, report: &XidReport) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    kernel_time_us.hash(&mut hasher);
    sequence.hash(&mut hasher);
    report.xid.hash(&mut hasher);
    report.pci_bus_id.hash(&mut hasher);
    report.gpu_instance.hash(&mut hasher);
    report.pid.hash(&mut hasher);
    report.process.hash(&mut hasher);
    report.message.hash(&mut hasher);
    hasher.finish()
}

/// The identities of kernel records as the journal kept their lines (`raw`), for the XID
/// store's memory after a restart: a record read again is not counted again, whatever
/// resume point the file's reader has. Lines without a kernel time have none.
pub fn identities_of_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<u64> {
    let mut found = Vec::new();
    for line in lines {
        let sequence = parse::kmsg_record_header(line).map(|(sequence, _)| sequence);
        for (report, kernel_time_us) in LogParser::default().parse_timed(line) {
            if let Some(time) = kernel_time_us {
                found.push(record_identity(time, sequence, &report));
            }
        }
    }
    found
}

/// The bytes of `file` just before `offset` (at most [`TAIL_BYTES`]); None when they cannot
/// be read whole.
fn tail_before(file: &std::fs::File, offset: u64) -> Option<Vec<u8>> {
    let length = offset.min(TAIL_BYTES as u64) as usize;
    let mut tail = vec![0u8; length];
    file.read_exact_at(&mut tail, offset - length as u64).ok()?;
    Some(tail)
}

fn event(report: XidReport, at: SystemTime) -> XidEvent {
    let (source, nvswitch) = match report.kind {
        ReportKind::Xid => (XidSource::KernelLog, None),
        ReportKind::FallenOffBus => (XidSource::KernelLogFallenOffBus, None),
        ReportKind::Sxid { switch, fatal } => (XidSource::KernelLog, Some(super::event::Nvswitch { switch, fatal })),
    };
    XidEvent {
        pci_bus_id: report.pci_bus_id.unwrap_or_else(|| UNATTRIBUTED.to_string()),
        gpu_instance: report.gpu_instance,
        xid: report.xid,
        source,
        at,
        raw: None,
        kmsg_sequence: None,
        identity: None,
        nvswitch,
        file_position: None,
    }
}

fn record(store: &XidStore, event: XidEvent) {
    let (bus, xid, nvswitch) = (event.pci_bus_id.clone(), event.xid, event.nvswitch);
    if let Some(nvswitch) = nvswitch {
        if store.record(event) {
            super::log_sxid(&bus, xid, nvswitch);
        }
        return;
    }
    if store.record(event) {
        let bus = if bus.is_empty() {
            "(address not printed)"
        } else {
            bus.as_str()
        };
        super::log_xid(bus, xid, store.severity(xid), "kernel log");
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes into `line` (without its newline), skipping
/// the rest of a longer one. Returns the bytes consumed, 0 at the end of the input.
fn read_line_capped(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<usize> {
    line.clear();
    let mut consumed = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(consumed);
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (&available[..end], Some(end + 1)),
            None => (available, None),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = done.unwrap_or(available.len());
        reader.consume(used);
        consumed += used;
        if done.is_some() {
            return Ok(consumed);
        }
    }
}

/// Reads what the log holds now and returns; for `gpuwarden check`. /dev/kmsg is opened
/// non-blocking, so this ends when the ring buffer is read.
pub fn read_backlog(path: &Path, store: &XidStore) -> std::io::Result<usize> {
    use crate::input::{Kinds, Links, Refused};
    let file = crate::input::open(path, Links::Follow, Kinds::RegularOrCharDevice).map_err(|e| match e {
        Refused::Missing => std::io::Error::new(ErrorKind::NotFound, format!("{} not found", path.display())),
        skip => std::io::Error::other(skip.to_string()),
    })?;
    let boot = boot_time();
    let mut reader = BufReader::with_capacity(16 * 1024, file);
    let mut parser = LogParser::default();
    let mut line = Vec::new();
    let mut found = 0;
    loop {
        match read_line_capped(&mut reader, &mut line) {
            Ok(0) => return Ok(found),
            Ok(consumed) => {
                for event in events_from_line(&mut parser, &line, consumed, boot) {
                    record(store, event);
                    found += 1;
                }
            }
            // Records overwritten while we read: carry on from the oldest one left.
            Err(e) if e.kind() == ErrorKind::BrokenPipe => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(found),
            Err(e) if e.kind() == ErrorKind::InvalidData => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Follows the kernel log on a thread of its own until `stop` is set (a reload that points
/// it elsewhere). A record read after `stop` is left for the reader that replaces this one;
/// `resume` says where an earlier reader of the same path got to.
pub fn spawn_follower(
    path: PathBuf,
    store: Arc<XidStore>,
    stop: Stop,
    resume: Arc<ResumePoints>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("xid-kernel-log".into())
        .spawn(move || follow(&path, &store, &stop, &resume))?;
    Ok(())
}

/// A syslog file is weaker evidence than /dev/kmsg: on many set-ups any local user can write
/// a kernel-looking line into it (`logger -t kernel`). Said once per daemon run, at the first
/// XID read from a syslog line.
fn notice_once_of_syslog(path: &Path) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::info!(
            "notice: xid.kernel_log_path {} is a syslog file; any local user may be able to write a \
             kernel-looking XID line into it (logger -t kernel). /dev/kmsg (the default) or journald's \
             export format hold only what the kernel logged; see docs/health.md, \"Where XIDs are read\"",
            path.display()
        );
    }
}

fn follow(path: &Path, store: &XidStore, stop: &Stop, resume: &ResumePoints) {
    // /dev/kmsg is waited on with no time-out; the stop writes this to end the wait.
    let wake = match crate::input::Wake::new() {
        Ok(wake) => {
            let wake = std::sync::Arc::new(wake);
            stop.on_stop({
                let wake = wake.clone();
                move || wake.wake()
            });
            Some(wake)
        }
        Err(e) => {
            log::debug!("no eventfd ({e}): the kernel-log reader looks for its stop every second");
            None
        }
    };
    let follower = Follower {
        path,
        store,
        stop,
        resume,
        wake: wake.as_deref(),
    };
    let mut outage = crate::service::logging::Outage::default();
    while !stop.is_stopped() {
        let wait = match follower.open(&mut outage) {
            Ok(opened) => match follower.read(opened) {
                After::Stop => return,
                After::Reopen => continue,
                After::Refused(why) => follower.refuse(&mut outage, why),
            },
            Err(wait) => wait,
        };
        if stop.sleep(wait) {
            return;
        }
    }
}

/// One kernel-log reader's inputs and outputs.
struct Follower<'a> {
    path: &'a Path,
    store: &'a XidStore,
    stop: &'a Stop,
    resume: &'a ResumePoints,
    /// Written at the stop: the wait for /dev/kmsg needs no time-out.
    wake: Option<&'a crate::input::Wake>,
}

/// The log as opened: where reading goes on from, and the parser's state.
struct Opened {
    reader: BufReader<std::fs::File>,
    raw: std::os::fd::RawFd,
    /// A regular file's inode (rotation shows as a new one); `None` for /dev/kmsg.
    inode: Option<u64>,
    /// A regular file's device: with the inode, what the journal's resume point names.
    device: u64,
    offset: u64,
    position: Position,
    parser: LogParser,
    boot: Option<SystemTime>,
    /// A regular file's changes (inotify): the wait at its end. `None` for /dev/kmsg, or
    /// where inotify is not there: then the end is looked at again every 100 ms.
    watch: Option<crate::input::FileWatch>,
}

/// What the reader does after the log ended or failed.
#[derive(PartialEq)]
enum After {
    Stop,
    Reopen,
    /// Not a kernel log after all (another program's syslog line in it): why.
    Refused(String),
}

impl Follower<'_> {
    /// Through crate::input: a regular file or a character device (/dev/kmsg); a FIFO,
    /// socket or directory is refused rather than waited on. It stays non-blocking: with
    /// nothing new, the thread waits in poll(2) until a record or the stop (its eventfd).
    /// Err: how long to wait before it is opened again.
    fn open(&self, outage: &mut crate::service::logging::Outage) -> Result<Opened, Duration> {
        let opened = crate::input::open(
            self.path,
            crate::input::Links::Follow,
            crate::input::Kinds::RegularOrCharDevice,
        );
        let mut file = match opened {
            Ok(f) => f,
            Err(e) => {
                if let crate::input::Refused::Skip(reason, what) = &e {
                    crate::input::Skips::new(crate::input::Input::KernelLog).add(*reason, what);
                }
                self.store.set_source_up(XidSource::KernelLog, false);
                outage.failed(format!(
                    "cannot read the kernel log {} ({e}): XIDs are counted from NVML events only; \
                     run as root or set xid.kernel_log_path",
                    self.path.display()
                ));
                // Looked at again soon: whatever stood at the path (a FIFO, a directory,
                // nothing) may be a regular file again a moment later, and an XID written then
                // must be read. An open that is refused costs a system call; the log line is
                // rate-limited.
                return Err(REOPEN_AFTER);
            }
        };
        // A regular file: go on from where an earlier reader of this file stopped.
        let regular = file.metadata().ok().filter(|m| m.is_file());
        if let Some(why) = regular
            .as_ref()
            .and_then(|meta| all_facility_file(self.path, &file, meta.len()))
        {
            return Err(self.refuse(outage, why));
        }
        self.store.set_source_up(XidSource::KernelLog, true);
        outage.recovered(format!("reading the kernel log {} again", self.path.display()));
        let position = self.resume.get(self.path);

        let mut offset = 0;
        let seeded = self.resume.take_seeded(self.path);
        if let (Some(meta), Some((seen_inode, seen_offset))) = (&regular, position.file)
            && seen_inode == meta.ino()
            && seen_offset <= meta.len()
            && file.seek(SeekFrom::Start(seen_offset)).is_ok()
        {
            offset = seen_offset;
        } else if let (Some(meta), Some(seeded)) = (&regular, seeded) {
            offset = self.go_on_from_seed(&mut file, meta, &seeded);
        }
        let watch = regular
            .as_ref()
            .and_then(|_| crate::input::FileWatch::new(self.path).ok());
        Ok(Opened {
            watch,
            raw: file.as_raw_fd(),
            inode: regular.as_ref().map(|m| m.ino()),
            device: regular.as_ref().map_or(0, |m| m.dev()),
            reader: BufReader::with_capacity(16 * 1024, file),
            offset,
            position,
            parser: LogParser::default(),
            boot: boot_time(),
        })
    }

    /// Says the log is refused (`why`), source down; how long until it is looked at again (a
    /// rotation may bring a file of the kernel's).
    fn refuse(&self, outage: &mut crate::service::logging::Outage, why: String) -> Duration {
        self.store.set_source_up(XidSource::KernelLog, false);
        outage.failed(why);
        REFUSED_RETRY
    }

    /// Where a file read before a restart goes on from: the journal's resume point when the
    /// same file is still there with the bytes before it unchanged, else its start.
    fn go_on_from_seed(&self, file: &mut std::fs::File, meta: &std::fs::Metadata, seeded: &FilePosition) -> u64 {
        let same_file = seeded.device == meta.dev() && seeded.inode == meta.ino() && seeded.offset <= meta.len();
        let unchanged = same_file && tail_before(file, seeded.offset).as_deref() == Some(seeded.tail.as_slice());
        if unchanged && file.seek(SeekFrom::Start(seeded.offset)).is_ok() {
            log::info!(
                "kernel log {}: going on from byte {}, where the last run read up to (what came before was counted then)",
                self.path.display(),
                seeded.offset
            );
            return seeded.offset;
        }
        log::info!(
            "kernel log {}: not the file the last run read up to byte {} (replaced, rotated or rewritten); \
             reading it from its start, records counted before are recognised and not counted again",
            self.path.display(),
            seeded.offset
        );
        0
    }

    /// Reads lines until the stop, a rotation or an error.
    fn read(&self, mut log: Opened) -> After {
        let mut line = Vec::new();
        loop {
            match read_line_capped(&mut log.reader, &mut line) {
                // End of a regular file: wait for more, or start over after a rotation.
                Ok(0) => {
                    if let Some(after) = self.at_end(&mut log) {
                        return after;
                    }
                }
                Ok(consumed) => {
                    if self.stop.is_stopped() {
                        return After::Stop;
                    }
                    if log.inode.is_some()
                        && let Some(tag) =
                            super::syslog_lines::other_programs_syslog_tag(&String::from_utf8_lossy(&line))
                    {
                        // Left unread: the file is refused from here on, not half believed.
                        return After::Refused(all_facility_words(self.path, tag));
                    }
                    self.take_line(&mut log, &line, consumed);
                }
                // /dev/kmsg has no new record: wait for one, or the stop.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if self.stop.is_stopped() {
                        return After::Stop;
                    }
                    match self.wake {
                        Some(wake) => crate::input::wait_readable_or_woken(log.raw, wake, None),
                        None => crate::input::wait_readable(log.raw, Duration::from_secs(1)),
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::InvalidData) => continue,
                Err(e) => {
                    log::warn!(
                        "reading the kernel log {} failed ({e}); opening it again",
                        self.path.display()
                    );
                    self.store.set_source_up(XidSource::KernelLog, false);
                    return match self.stop.sleep(Duration::from_secs(1)) {
                        true => After::Stop,
                        false => After::Reopen,
                    };
                }
            }
        }
    }

    /// At the end of a regular file: `Some` when reading ends here (a stop, or a rotated
    /// file to open anew), `None` to read on after a short wait (or from the start of a file
    /// truncated in place).
    fn at_end(&self, log: &mut Opened) -> Option<After> {
        if self.stop.is_stopped() {
            return Some(After::Stop);
        }
        if let Some(inode) = log.inode {
            match std::fs::metadata(self.path) {
                // Rotated: a new file at the path. Read it from its start.
                Ok(meta) if meta.ino() != inode => {
                    log.position.file = None;
                    self.resume.set(self.path, log.position);
                    return Some(After::Reopen);
                }
                Ok(meta) if meta.len() < log.offset && log.reader.seek(SeekFrom::Start(0)).is_ok() => {
                    log.offset = 0;
                }
                _ => {}
            }
        }
        match &log.watch {
            Some(watch) => {
                // A change wakes it at once; the time-out covers what inotify does not see
                // (a file written from another host over a network file system).
                watch.wait(self.wake, Duration::from_secs(2));
                self.stop.is_stopped().then_some(After::Stop)
            }
            None => self.stop.sleep(Duration::from_millis(100)).then_some(After::Stop),
        }
    }

    /// A regular file's position after the line just read, for the journal.
    fn file_position(&self, log: &Opened) -> Option<FilePosition> {
        let inode = log.inode?;
        Some(FilePosition {
            path: self.path.to_path_buf(),
            device: log.device,
            inode,
            offset: log.offset,
            tail: tail_before(log.reader.get_ref(), log.offset)?,
        })
    }

    /// Counts the XIDs of one line, unless an earlier reader (before a reload) counted it.
    fn take_line(&self, log: &mut Opened, line: &[u8], consumed: usize) {
        log.offset += consumed as u64;
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        let sequence = parse::kmsg_record_header(text).map(|(sequence, _)| sequence);
        let seen = sequence.zip(log.position.sequence).is_some_and(|(s, last)| s <= last);
        if !seen {
            let refused = log.parser.refused_unmarked;
            let foreign = log.parser.refused_continuations;
            for mut event in events_from_line(&mut log.parser, line, consumed, log.boot) {
                event.file_position = self.file_position(log);
                record(self.store, event);
            }
            if log.parser.saw_syslog {
                notice_once_of_syslog(self.path);
            }
            if log.parser.refused_continuations > foreign {
                crate::input::Skips::new(crate::input::Input::KernelLog).add(
                    crate::input::Reason::ForeignRecord,
                    format!("{:?}", crate::input::truncate_utf8(text, 120)),
                );
            }
            if log.parser.refused_unmarked > refused {
                crate::input::Skips::new(crate::input::Input::KernelLog).add(
                    crate::input::Reason::Unmarked,
                    format!("{:?}", crate::input::truncate_utf8(text, 120)),
                );
            }
        }
        if sequence.is_some() {
            log.position.sequence = sequence.max(log.position.sequence);
        }
        log.position.file = log.inode.map(|inode| (inode, log.offset));
        self.resume.set(self.path, log.position);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmsg_records_are_dated_from_boot() {
        let boot = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let line = "3,811,5000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE";
        let e = events_from_line(&mut LogParser::default(), line.as_bytes(), line.len() + 1, Some(boot)).remove(0);
        assert_eq!(e.at, boot + Duration::from_secs(5));
        assert_eq!((e.xid, e.source), (48, XidSource::KernelLog));
    }

    #[test]
    fn continuation_lines_are_skipped() {
        assert!(events_from_line(&mut LogParser::default(), b" SUBSYSTEM=pci", 14, None).is_empty());
    }

    #[test]
    fn backlog_of_a_file_is_read_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kmsg");
        std::fs::write(
            &path,
            "4,1,100,-;NVRM: loading NVIDIA UNIX Open Kernel Module\n\
             3,2,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n\
             3,3,201,-;NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n\
             3,4,300,-;NVRM: Xid (PCI:0000:5d:00): 13, Graphics Exception\n",
        )
        .unwrap();
        let store = XidStore::new(Duration::from_secs(10));
        assert_eq!(read_backlog(&path, &store).unwrap(), 3);
        let snap = store.snapshot();
        assert_eq!(
            snap.for_bus("0000:3b:00.0").len(),
            1,
            "79 and its fallen-off line are one event"
        );
        assert_eq!(snap.for_bus("0000:3b:00.0")[0].count, 1);
        assert_eq!(snap.for_bus("0000:5d:00.0")[0].xid, 13);
    }
}
