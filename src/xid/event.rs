//! One XID report as a source hands it to the store: which GPU, which code, from where and
//! when, with the kernel-log line. Shared by the store and the journal's XID outbox.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::SystemTime;

/// The longest kernel-log line kept with an XID.
pub(crate) const MAX_RAW_LINE: usize = 1024;

/// Where a report came from. The kernel log's "fallen off the bus" line without a number is
/// a source of its own, so that it groups with the `Xid ...: 79` line beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XidSource {
    Nvml,
    KernelLog,
    KernelLogFallenOffBus,
}

impl XidSource {
    /// The `source` label of the XID self metrics: the kernel log's two kinds of line are
    /// one source.
    pub fn label(self) -> &'static str {
        match self {
            XidSource::Nvml => "nvml_events",
            XidSource::KernelLog | XidSource::KernelLogFallenOffBus => "kernel_log",
        }
    }

    pub(super) fn bit(self) -> u8 {
        match self {
            XidSource::Nvml => 1,
            XidSource::KernelLog => 2,
            XidSource::KernelLogFallenOffBus => 4,
        }
    }
}

#[derive(Debug, Clone)]
pub struct XidEvent {
    /// The GPU's bus id; [`UNATTRIBUTED`] when the report does not say.
    pub pci_bus_id: String,
    /// The MIG GPU instance the driver attributed it to.
    pub gpu_instance: Option<u32>,
    pub xid: u32,
    pub source: XidSource,
    pub at: SystemTime,
    /// The kernel-log line it came from (at most [`MAX_RAW_LINE`] bytes), for the journal.
    pub raw: Option<String>,
    /// The /dev/kmsg record's sequence number: the journal resumes after it on a restart, so
    /// a line still in the ring buffer is not counted twice.
    pub kmsg_sequence: Option<u64>,
    /// The kernel record's identity in this boot (its kernel time and text), where the log
    /// gives its time: the same record read twice is one report.
    pub identity: Option<u64>,
    /// An NVSwitch error (SXID) rather than a GPU's XID: `pci_bus_id` is the switch's and
    /// `xid` the SXID code. Counted apart from the GPUs' XIDs.
    pub nvswitch: Option<Nvswitch>,
    /// A kernel log that is a regular file: where it was read up to after this report's line.
    /// The journal keeps the latest with the rows, so a restart goes on from there instead of
    /// counting the file again (/dev/kmsg has `kmsg_sequence` for that).
    pub file_position: Option<FilePosition>,
}

/// The most bytes before a resume point kept to recognise the file there.
pub(crate) const TAIL_BYTES: usize = 256;

/// Where a kernel-log file was read up to: its device and inode, the offset, and the bytes
/// just before it (at most [`TAIL_BYTES`]), which must still be there for a restart to go on
/// from the offset: a file emptied and written again, or another file at the same inode,
/// is read from its start (its records' identities still keep a line counted once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePosition {
    pub path: PathBuf,
    pub device: u64,
    pub inode: u64,
    pub offset: u64,
    pub tail: Vec<u8>,
}

/// Which NVSwitch reported an SXID, and how the driver rated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nvswitch {
    /// N of `nvidia-nvswitchN`.
    pub switch: u32,
    pub fatal: bool,
}
