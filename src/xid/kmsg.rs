//! The kernel-log XID source: /dev/kmsg, or any file or FIFO that carries kernel-log lines.
//!
//! Opening /dev/kmsg starts at the oldest record the ring buffer still holds, so XIDs logged
//! before the daemon started are counted (once per daemon run); the reader then blocks for new
//! records. Each /dev/kmsg record carries its time since boot, which dates the XID; lines
//! without that header (a plain file, a FIFO fed by a test) are dated when read. A regular
//! file is followed like `tail -f`. The path is `xid.kernel_log_path`.

use super::parse::{self, ReportKind};
use super::store::{Source, XidEvent, XidStore};
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// When the machine booted, from /proc/uptime; None where that cannot be read.
fn boot_time() -> Option<SystemTime> {
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let seconds: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    SystemTime::now().checked_sub(Duration::from_secs_f64(seconds))
}

/// Turns one line into an XID event, if it reports one.
fn event_from_line(line: &str, boot: Option<SystemTime>) -> Option<XidEvent> {
    // Continuation lines of a /dev/kmsg record (" SUBSYSTEM=pci") start with a space.
    if line.starts_with(' ') {
        return None;
    }
    let report = parse::parse_line(line)?;
    let at = parse::kmsg_record_header(line)
        .zip(boot)
        .map(|((_, microseconds), boot)| boot + Duration::from_micros(microseconds))
        .map(|t| t.min(SystemTime::now()))
        .unwrap_or_else(SystemTime::now);
    let source = match report.kind {
        ReportKind::Xid => Source::KernelLog,
        ReportKind::FallenOffBus => Source::KernelLogFallenOffBus,
    };
    Some(XidEvent {
        pci_bus_id: report.pci_bus_id,
        xid: report.xid,
        source,
        at,
    })
}

fn record(store: &XidStore, event: XidEvent) {
    let (bus, xid) = (event.pci_bus_id.clone(), event.xid);
    if store.record(event) {
        super::log_xid(&bus, xid, "kernel log");
    }
}

/// Reads what the log holds now and returns; for `gpuwarden check`. /dev/kmsg is opened
/// non-blocking, so this ends when the ring buffer is read.
pub fn read_backlog(path: &Path, store: &XidStore) -> std::io::Result<usize> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let boot = boot_time();
    let mut reader = BufReader::with_capacity(16 * 1024, file);
    let mut line = String::new();
    let mut found = 0;
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return Ok(found),
            Ok(_) => {
                if let Some(event) = event_from_line(line.trim_end(), boot) {
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
/// it elsewhere). A record read after `stop` is left for the reader that replaces this one.
pub fn spawn_follower(path: PathBuf, store: Arc<XidStore>, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("xid-kernel-log".into())
        .spawn(move || follow(&path, &store, &stop))?;
    Ok(())
}

fn follow(path: &Path, store: &XidStore, stop: &AtomicBool) {
    let mut warned = false;
    while !stop.load(Ordering::Relaxed) {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) => {
                store.set_source_up(Source::KERNEL_LOG, false);
                if !warned {
                    log::warn!(
                        "cannot read the kernel log {} ({e}): XIDs are counted from NVML events only; \
                         run as root or set xid.kernel_log_path",
                        path.display()
                    );
                    warned = true;
                }
                std::thread::sleep(Duration::from_secs(30));
                continue;
            }
        };
        store.set_source_up(Source::KERNEL_LOG, true);
        if warned {
            log::info!("reading the kernel log {} again", path.display());
            warned = false;
        }
        let boot = boot_time();
        let mut reader = BufReader::with_capacity(16 * 1024, file);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                // End of a regular file, or a FIFO whose writer went away: wait for more.
                Ok(0) => {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(_) => {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Some(event) = event_from_line(line.trim_end(), boot) {
                        record(store, event);
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::InvalidData) => continue,
                Err(e) => {
                    log::warn!(
                        "reading the kernel log {} failed ({e}); opening it again",
                        path.display()
                    );
                    store.set_source_up(Source::KERNEL_LOG, false);
                    std::thread::sleep(Duration::from_secs(1));
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmsg_records_are_dated_from_boot() {
        let boot = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let e = event_from_line(
            "3,811,5000000,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",
            Some(boot),
        )
        .unwrap();
        assert_eq!(e.at, boot + Duration::from_secs(5));
        assert_eq!((e.xid, e.source), (48, Source::KernelLog));
    }

    #[test]
    fn continuation_lines_are_skipped() {
        assert!(event_from_line(" SUBSYSTEM=pci NVRM: Xid (PCI:0000:3b:00): 48, x", None).is_none());
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
