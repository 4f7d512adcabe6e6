//! Reading what comes from outside the daemon as if an attacker wrote it: the job mapping
//! directory (written by a scheduler's prolog, by people, by job scripts), /proc, sysfs and
//! the kernel log path.
//!
//! Every reader of such files goes through here, so one set of rules holds everywhere:
//! - Nothing can block: files are opened non-blocking, and anything that is not a regular
//!   file (a FIFO, a socket, a device, a directory) is refused before it is read. A FIFO
//!   once froze the poll loop in `open()`.
//! - No symlink is followed where people write ([`Links::Refuse`], `O_NOFOLLOW`): a link to
//!   /etc/shadow once put its lines on /metrics. Sysfs is made of the kernel's own links
//!   (`/sys/bus/pci/devices/*`, `/sys/class/drm/card*/device`), so there they are resolved
//!   and only targets inside the configured sysfs root are read ([`resolve_inside`]).
//! - Bounded: at most a stated number of bytes per file, decoded lossily (invalid UTF-8
//!   becomes U+FFFD, never a dropped reading), and at most a stated number of directory
//!   entries *after* the names that are not ours were filtered out, so stray files cannot
//!   crowd out real ones ([`list_dir`]).
//! - Visible: whatever is skipped is counted by input and reason
//!   (`gpuwarden_input_skipped_total{input,reason}`) and logged, one line per input and
//!   reason per [`LOG_EVERY`], naming an example and how many more there were ([`Skips`]).
//!   A source that cannot be read at all says so once, says when it is back, and says so
//!   again at the next outage ([`Outage`]).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `infiniband.rs` | The node's RDMA devices and their ports, read from sysfs: `/sys/class/infiniband/<dev>/` (`fw_ver`, `board_id`, `hca_type`, the PCI function behind... |
//! | `pci.rs` | PCI bus ids in one form everywhere: `0000:3b:00.0`, lower case, four-digit domain |
//! | `trust.rs` | Whether a path the daemon loads, runs or trusts as root (a library, a rule file, a secret) could have been written by someone else: the file, every... |
//! <!-- /files -->

pub mod infiniband;
pub mod pci;
pub(crate) mod trust;

use crate::service::logging::{RateLimiter, held_back_suffix};
use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How often a skip of one kind (input and reason) is logged; each one is counted.
pub const LOG_EVERY: Duration = Duration::from_secs(300);

/// Where a skipped thing came from: the `input` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Input {
    /// `hpc_jobs.mapping_dir`.
    JobMapping,
    /// `processes.proc_root`: process names, cgroups, DRM clients.
    Proc,
    /// The PCI census and amdgpu's files under `amd.sysfs_root`.
    Sysfs,
    /// `xid.kernel_log_path`.
    KernelLog,
    /// The kubelet's pod-resources answer.
    Kubelet,
}

impl Input {
    pub fn label(self) -> &'static str {
        match self {
            Input::JobMapping => "job_mapping",
            Input::Proc => "proc",
            Input::Sysfs => "sysfs",
            Input::KernelLog => "kernel_log",
            Input::Kubelet => "kubelet",
        }
    }
}

/// Why something was skipped: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// A symbolic link where none is followed.
    Symlink,
    /// A FIFO, socket, device or directory where a regular file belongs.
    NotRegularFile,
    /// A sysfs link whose target is outside the sysfs root.
    OutsideRoot,
    /// Longer than the byte bound: read up to it, the rest ignored.
    TooLarge,
    /// Could not be opened or read (permissions, an I/O error).
    Unreadable,
    /// A directory entry whose name is not one this input reads (an editor's or a script's
    /// temporary file, a dotfile).
    Name,
    /// A line or value that is not valid where it stands (a job id with control characters).
    InvalidValue,
    /// Beyond the bound on entries or series: the rest were not looked at.
    TooMany,
    /// A kernel-log line that does not mark where its record starts (`dmesg -t`,
    /// `journalctl -k -o cat`): any user can forge one (xid/parse.rs).
    Unmarked,
    /// A driver-looking kernel-log line that is the later line of a record the driver did
    /// not begin (same stamp as the line before, in rsyslog's kern.log): a user's text.
    ForeignRecord,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Symlink => "symlink",
            Reason::NotRegularFile => "not_regular_file",
            Reason::OutsideRoot => "outside_root",
            Reason::TooLarge => "too_large",
            Reason::Unreadable => "unreadable",
            Reason::Name => "name",
            Reason::InvalidValue => "invalid_value",
            Reason::TooMany => "too_many",
            Reason::Unmarked => "unmarked",
            Reason::ForeignRecord => "foreign_record",
        }
    }

    fn explain(self) -> &'static str {
        match self {
            Reason::Symlink => "a symbolic link (not followed here)",
            Reason::NotRegularFile => "not a regular file (a FIFO, socket, device or directory)",
            Reason::OutsideRoot => "a link that leads outside the sysfs root",
            Reason::TooLarge => "larger than gpuwarden reads (the rest is ignored)",
            Reason::Unreadable => "unreadable",
            Reason::Name => "a name that is not read here",
            Reason::InvalidValue => "an invalid value",
            Reason::TooMany => "beyond the limit on entries or series",
            Reason::Unmarked => {
                "a driver line with no mark of where its kernel record starts (dmesg -t, journalctl -o cat): \
                 any user can forge one, so it is not read; use /dev/kmsg, journald's export format, syslog \
                 or dmesg with a timestamp or -x (docs/health.md, \"Where XIDs are read\")"
            }
            Reason::ForeignRecord => {
                "a driver line inside a kernel record that something else began (the same stamp as the line \
                 before, as /proc/kmsg prints a multi-line record's lines): a user's text, not an XID"
            }
        }
    }
}

struct Ledger {
    counts: BTreeMap<(Input, Reason), u64>,
    limiter: RateLimiter,
}

static LEDGER: Mutex<Option<Ledger>> = Mutex::new(None);

/// Every skip counted since start, by input and reason (for `gpuwarden_input_skipped_total`).
pub fn skipped_totals() -> Vec<(Input, Reason, u64)> {
    let ledger = LEDGER.lock().unwrap_or_else(PoisonError::into_inner);
    ledger
        .as_ref()
        .map(|l| l.counts.iter().map(|((i, r), n)| (*i, *r, *n)).collect())
        .unwrap_or_default()
}

/// Skips of one read of one input, gathered and then counted and logged together: a
/// directory with 100,000 stray files is one log line, not 100,000.
pub struct Skips {
    input: Input,
    /// Per reason: how many, and the first one's description.
    found: BTreeMap<Reason, (u64, String)>,
}

impl Skips {
    pub fn new(input: Input) -> Skips {
        Skips {
            input,
            found: BTreeMap::new(),
        }
    }

    /// Drops what was gathered uncounted: the same skips were counted at an earlier look.
    pub fn forget(&mut self) {
        self.found.clear();
    }

    pub fn add(&mut self, reason: Reason, what: impl Display) {
        let entry = self.found.entry(reason).or_insert_with(|| (0, what.to_string()));
        entry.0 += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// How many were skipped for `reason` in this read.
    pub fn count(&self, reason: Reason) -> u64 {
        self.found.get(&reason).map_or(0, |(n, _)| *n)
    }
}

impl Drop for Skips {
    /// Counts what was gathered and logs it (rate-limited), whatever path the reader left by.
    fn drop(&mut self) {
        if self.found.is_empty() {
            return;
        }
        let mut guard = LEDGER.lock().unwrap_or_else(PoisonError::into_inner);
        let ledger = guard.get_or_insert_with(|| Ledger {
            counts: BTreeMap::new(),
            limiter: RateLimiter::new(LOG_EVERY),
        });
        for (reason, (count, example)) in std::mem::take(&mut self.found) {
            *ledger.counts.entry((self.input, reason)).or_default() += count;
            let key = format!("{}/{}", self.input.label(), reason.label());
            if let Some(held_back) = ledger.limiter.allow(&key) {
                let more = if count > 1 {
                    format!(" and {} more like it", count - 1)
                } else {
                    String::new()
                };
                log::warn!(
                    "{}: skipped {example}{more}: {}{}",
                    self.input.label(),
                    reason.explain(),
                    held_back_suffix(held_back)
                );
            }
        }
    }
}

/// `text` with every control character (a newline in a label value, an escape sequence)
/// shown as U+FFFD: for names from outside that end up in labels and logs.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
}

/// `text` with its lines kept and every other control character (an escape sequence) shown
/// as U+FFFD: for a command's output kept in the journal and shown in a report.
pub fn printable_lines(text: &str) -> String {
    text.lines().map(printable).collect::<Vec<_>>().join("\n")
}

/// The node's host name (/proc/sys/kernel/hostname), or "" where it cannot be read.
pub fn hostname() -> String {
    read_text(Path::new("/proc/sys/kernel/hostname"), 256, Links::Follow)
        .map(|text| printable(text.text.trim()))
        .unwrap_or_default()
}

/// At most `max` bytes of `text`, cut at a character boundary.
pub fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Whether the last component of a path may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Where people and job scripts write: a link is refused (`O_NOFOLLOW`).
    Refuse,
    /// The configured path itself (an administrator's choice): followed.
    Follow,
}

/// Which kinds of file a reader takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kinds {
    /// Regular files only.
    Regular,
    /// Regular files and character devices (`/dev/kmsg`).
    RegularOrCharDevice,
}

/// Why a file was not read.
#[derive(Debug)]
pub enum Refused {
    /// It is not there (a process that ended, a file the GPU does not have): not a skip.
    Missing,
    /// It is there and was not read, for this reason; the text says what was seen.
    Skip(Reason, String),
}

impl Refused {
    /// Counts a skip into `skips`; a missing file is not one.
    pub fn record(self, skips: &mut Skips) {
        if let Refused::Skip(reason, what) = self {
            skips.add(reason, what);
        }
    }
}

impl Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Missing => write!(f, "not found"),
            Refused::Skip(reason, what) => write!(f, "{what}: {}", reason.explain()),
        }
    }
}

fn refused(path: &Path, e: &std::io::Error) -> Refused {
    if e.kind() == ErrorKind::NotFound {
        return Refused::Missing;
    }
    // O_NOFOLLOW on a link fails with ELOOP.
    if e.raw_os_error() == Some(libc::ELOOP) {
        return Refused::Skip(Reason::Symlink, path.display().to_string());
    }
    Refused::Skip(Reason::Unreadable, format!("{} ({e})", path.display()))
}

/// Opens a file for reading without blocking, refusing what `kinds` does not take, and
/// refusing a link in the last component when `links` says so. The type is checked twice:
/// before opening (opening a device can have effects) and on the open descriptor (the path
/// may have been swapped in between).
pub fn open(path: &Path, links: Links, kinds: Kinds) -> Result<std::fs::File, Refused> {
    let before = match links {
        Links::Refuse => std::fs::symlink_metadata(path),
        Links::Follow => std::fs::metadata(path),
    }
    .map_err(|e| refused(path, &e))?;
    let kind_ok = |t: std::fs::FileType| t.is_file() || (kinds == Kinds::RegularOrCharDevice && t.is_char_device());
    if before.file_type().is_symlink() {
        return Err(Refused::Skip(Reason::Symlink, path.display().to_string()));
    }
    if !kind_ok(before.file_type()) {
        return Err(Refused::Skip(Reason::NotRegularFile, path.display().to_string()));
    }
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| refused(path, &e))?;
    let after = file.metadata().map_err(|e| refused(path, &e))?;
    if !kind_ok(after.file_type()) {
        return Err(Refused::Skip(Reason::NotRegularFile, path.display().to_string()));
    }
    Ok(file)
}

/// Waits until `fd` has something to read, `timeout` at most (a follower of /dev/kmsg with no
/// eventfd waits here rather than in a blocking read, so it sees a stop within the timeout).
pub fn wait_readable(fd: std::os::fd::RawFd, timeout: std::time::Duration) {
    wait_any(&[fd], Some(timeout));
}

/// Waits until `fd` has something to read or `wake` (an eventfd, see [`Wake`]) is written,
/// at most `timeout`; `None`: no limit.
pub fn wait_readable_or_woken(fd: std::os::fd::RawFd, wake: &Wake, timeout: Option<std::time::Duration>) {
    use std::os::fd::AsRawFd;
    wait_any(&[fd, wake.fd.as_raw_fd()], timeout);
}

/// poll(2) over `fds` for something to read, at most `timeout` (`None`: no limit). The
/// result only says whether to read, and a failed poll means reading again, which reports
/// the error: so nothing is returned.
fn wait_any(fds: &[std::os::fd::RawFd], timeout: Option<std::time::Duration>) {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let millis = timeout.map_or(-1, |t| libc::c_int::try_from(t.as_millis()).unwrap_or(libc::c_int::MAX));
    // SAFETY: `polls.len()` valid pollfds for the length of the call.
    unsafe {
        libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, millis);
    }
}

/// Changes to one file through inotify: written to, truncated, moved or deleted, or a new
/// file made in its directory (a rotation). A reader at a file's end waits on this instead of
/// looking again every so often.
pub struct FileWatch {
    fd: std::os::fd::OwnedFd,
}

impl FileWatch {
    pub fn new(path: &std::path::Path) -> std::io::Result<FileWatch> {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: inotify_init1 takes no pointers; a non-negative result is a new descriptor.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` was just opened and is owned by nothing else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let watch = |target: &std::path::Path, mask: u32| -> std::io::Result<()> {
            let name = std::ffi::CString::new(target.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
            // SAFETY: a valid inotify descriptor and a NUL-terminated path that outlives the call.
            let added = unsafe { libc::inotify_add_watch(raw, name.as_ptr(), mask) };
            if added < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        watch(
            path,
            libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_CLOSE_WRITE | libc::IN_MOVE_SELF | libc::IN_DELETE_SELF,
        )?;
        // A new file at the path after a rotation; without it, the time-out of `wait` finds it.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = watch(dir, libc::IN_CREATE | libc::IN_MOVED_TO);
        }
        Ok(FileWatch { fd })
    }

    /// Waits until the file changes, `wake` is written, or `timeout`; then empties the queue
    /// of changes (the caller looks at the file itself).
    pub fn wait(&self, wake: Option<&Wake>, timeout: std::time::Duration) {
        use std::os::fd::AsRawFd;
        match wake {
            Some(wake) => wait_any(&[self.fd.as_raw_fd(), wake.fd.as_raw_fd()], Some(timeout)),
            None => wait_any(&[self.fd.as_raw_fd()], Some(timeout)),
        }
        let mut events = [0u8; 4096];
        loop {
            // SAFETY: reads into a buffer we own, at most its length; non-blocking, so an
            // empty queue ends the loop with EAGAIN.
            let read = unsafe { libc::read(self.fd.as_raw_fd(), events.as_mut_ptr().cast(), events.len()) };
            if read <= 0 {
                break;
            }
        }
    }
}

/// A file descriptor another thread writes to wake a reader out of its wait (an eventfd):
/// a thread can then wait for its input with no time-out and still see its stop at once.
pub struct Wake {
    fd: std::os::fd::OwnedFd,
}

impl Wake {
    pub fn new() -> std::io::Result<Wake> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(Wake { fd })
    }

    /// Wakes the waiter (and every later wait: the count stays until read, and nothing reads it).
    pub fn wake(&self) {
        use std::os::fd::AsRawFd;
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own; a full counter (never
        // reached) would only fail the write, and the waiter is awake already.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }
}

/// A file's text, at most `max_bytes` of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    /// Decoded lossily: invalid UTF-8 becomes U+FFFD.
    pub text: String,
    /// The file was longer than `max_bytes`; `text` holds its beginning.
    pub truncated: bool,
}

/// Reads at most `max_bytes` of a regular file, never blocking and never holding more than
/// that in memory (a 20 MB `class` file once cost 40 MB at every read).
pub fn read_bytes(path: &Path, max_bytes: usize, links: Links) -> Result<(Vec<u8>, bool), Refused> {
    let file = open(path, links, Kinds::Regular)?;
    let mut bytes = Vec::with_capacity(max_bytes.min(4096));
    // One byte more than allowed tells whether there was more.
    file.take(max_bytes as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refused(path, &e))?;
    let truncated = bytes.len() > max_bytes;
    bytes.truncate(max_bytes);
    Ok((bytes, truncated))
}

/// [`read_bytes`], decoded lossily.
pub fn read_text(path: &Path, max_bytes: usize, links: Links) -> Result<Text, Refused> {
    let (bytes, truncated) = read_bytes(path, max_bytes, links)?;
    Ok(Text {
        text: String::from_utf8_lossy(&bytes).into_owned(),
        truncated,
    })
}

/// A small sysfs or /proc value (a number, a word), trimmed; `None` when missing, not a
/// regular file, or empty. Skips other than a missing file go into `skips`.
pub fn read_value(path: &Path, max_bytes: usize, skips: &mut Skips) -> Option<String> {
    match read_text(path, max_bytes, Links::Refuse) {
        Ok(t) => {
            if t.truncated {
                skips.add(Reason::TooLarge, path.display());
            }
            Some(t.text.trim().to_string()).filter(|s| !s.is_empty())
        }
        Err(refused) => {
            refused.record(skips);
            None
        }
    }
}

/// The entries of `dir` whose names `wanted` takes, at most `max` of them, with the names
/// it does not take counted as [`Reason::Name`] and those beyond `max` as
/// [`Reason::TooMany`]. Names are decoded lossily before `wanted` sees them. Nothing is
/// opened or stat'ed here, so a directory of a hundred thousand stray files costs one pass
/// over its names. At most `max_scanned` names are looked at in all, so even a directory
/// with millions of entries ends in bounded time (what is left is counted as too many).
pub fn list_dir<T>(
    dir: &Path,
    max: usize,
    max_scanned: usize,
    skips: &mut Skips,
    mut wanted: impl FnMut(&str) -> Option<T>,
) -> std::io::Result<Vec<(T, PathBuf)>> {
    let entries = std::fs::read_dir(dir)?;
    let mut out = Vec::new();
    for (scanned, entry) in entries.enumerate() {
        if scanned >= max_scanned {
            skips.add(
                Reason::TooMany,
                format!("{} (more than {max_scanned} entries)", dir.display()),
            );
            break;
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                skips.add(Reason::Unreadable, format!("an entry of {} ({e})", dir.display()));
                continue;
            }
        };
        let name = entry.file_name();
        let name = name.to_string_lossy();
        match wanted(&name) {
            None => skips.add(Reason::Name, entry.path().display()),
            Some(_) if out.len() >= max => {
                skips.add(Reason::TooMany, format!("{} (more than {max})", entry.path().display()))
            }
            Some(key) => out.push((key, entry.path())),
        }
    }
    Ok(out)
}

/// Resolves `path` (following the kernel's links) and returns the target when it lies
/// inside `root`, itself resolved; [`Reason::OutsideRoot`] otherwise. For sysfs, where
/// every device is reached through links, and a link placed there to /etc must not be read.
pub fn resolve_inside(root: &Path, path: &Path) -> Result<PathBuf, Refused> {
    let root = std::fs::canonicalize(root).map_err(|e| refused(root, &e))?;
    let target = std::fs::canonicalize(path).map_err(|e| refused(path, &e))?;
    if target.starts_with(&root) {
        Ok(target)
    } else {
        Err(Refused::Skip(
            Reason::OutsideRoot,
            format!("{} -> {}", path.display(), target.display()),
        ))
    }
}

/// Makes a FIFO at `path`, for the hostile-input tests of every reader.
#[cfg(test)]
pub(crate) fn make_fifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap_or_default();
    // SAFETY: a valid NUL-terminated path.
    let made = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_fifo_is_refused_at_once_without_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("0");
        make_fifo(&fifo);
        let started = std::time::Instant::now();
        for links in [Links::Refuse, Links::Follow] {
            match read_text(&fifo, 100, links) {
                Err(Refused::Skip(Reason::NotRegularFile, _)) => {}
                other => panic!("{other:?}"),
            }
        }
        // Nor where the kernel log reader takes a character device.
        assert!(matches!(
            open(&fifo, Links::Follow, Kinds::RegularOrCharDevice),
            Err(Refused::Skip(Reason::NotRegularFile, _))
        ));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn sockets_directories_and_devices_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for path in [
            socket.as_path(),
            dir.path(),
            Path::new("/dev/null"),
            Path::new("/dev/zero"),
        ] {
            assert!(
                matches!(
                    read_text(path, 100, Links::Follow),
                    Err(Refused::Skip(Reason::NotRegularFile, _))
                ),
                "{}",
                path.display()
            );
        }
        // The kernel log reader takes a character device.
        assert!(open(Path::new("/dev/null"), Links::Follow, Kinds::RegularOrCharDevice).is_ok());
    }

    #[test]
    fn a_symlink_is_refused_where_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root:$6$hash:19000::::::\n").unwrap();
        let link = dir.path().join("3");
        symlink(&secret, &link).unwrap();
        assert!(matches!(
            read_text(&link, 100, Links::Refuse),
            Err(Refused::Skip(Reason::Symlink, _))
        ));
        // A dangling link too, and a link to a directory.
        let dangling = dir.path().join("4");
        symlink("/nonexistent", &dangling).unwrap();
        assert!(matches!(
            read_text(&dangling, 100, Links::Refuse),
            Err(Refused::Skip(Reason::Symlink, _))
        ));
        // The configured path itself may be a link.
        assert_eq!(
            read_text(&link, 100, Links::Follow).unwrap().text,
            "root:$6$hash:19000::::::\n"
        );
    }

    #[test]
    fn reads_are_bounded_and_lossy() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 1 << 20]).unwrap();
        let t = read_text(&big, 64, Links::Refuse).unwrap();
        assert_eq!((t.text.len(), t.truncated), (64, true));
        let exact = dir.path().join("exact");
        std::fs::write(&exact, "12345").unwrap();
        assert!(!read_text(&exact, 5, Links::Refuse).unwrap().truncated);
        let binary = dir.path().join("binary");
        std::fs::write(&binary, b"py\xfftho\x00n").unwrap();
        assert_eq!(read_text(&binary, 64, Links::Refuse).unwrap().text, "py\u{fffd}tho\0n");
        assert!(matches!(
            read_text(&dir.path().join("gone"), 64, Links::Refuse),
            Err(Refused::Missing)
        ));
    }

    #[test]
    fn listing_filters_names_before_it_bounds_entries() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..2000 {
            std::fs::write(dir.path().join(format!(".stray{i}")), "").unwrap();
        }
        for i in 0..8 {
            std::fs::write(dir.path().join(i.to_string()), "").unwrap();
        }
        let mut skips = Skips::new(Input::JobMapping);
        let found = list_dir(dir.path(), 16, 1_000_000, &mut skips, |n| n.parse::<u32>().ok()).unwrap();
        assert_eq!(found.len(), 8, "every real file, whatever the strays");
        assert_eq!(skips.count(Reason::Name), 2000);
        assert_eq!(skips.count(Reason::TooMany), 0);
        // Beyond the bound on wanted entries: counted.
        let found = list_dir(dir.path(), 5, 1_000_000, &mut skips, |n| n.parse::<u32>().ok()).unwrap();
        assert_eq!(found.len(), 5);
        assert_eq!(skips.count(Reason::TooMany), 3);
        drop(skips);
        let totals = skipped_totals();
        assert!(
            totals
                .iter()
                .any(|(i, r, n)| *i == Input::JobMapping && *r == Reason::Name && *n >= 4000)
        );
    }

    #[test]
    fn sysfs_links_are_read_only_inside_the_root() {
        let root = tempfile::tempdir().unwrap();
        let sys = root.path().join("sys");
        std::fs::create_dir_all(sys.join("devices/pci0000:00/0000:19:00.0")).unwrap();
        std::fs::create_dir_all(sys.join("bus/pci/devices")).unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:19:00.0",
            sys.join("bus/pci/devices/0000:19:00.0"),
        )
        .unwrap();
        symlink("/etc", sys.join("bus/pci/devices/0000:66:00.0")).unwrap();
        let inside = resolve_inside(&sys, &sys.join("bus/pci/devices/0000:19:00.0")).unwrap();
        assert!(inside.ends_with("devices/pci0000:00/0000:19:00.0"));
        assert!(matches!(
            resolve_inside(&sys, &sys.join("bus/pci/devices/0000:66:00.0")),
            Err(Refused::Skip(Reason::OutsideRoot, _))
        ));
    }
}
