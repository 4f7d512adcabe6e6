//! The health journal: what happened to each GPU, kept in a SQLite database on the node so
//! that a restart or a reboot loses nothing (docs/journal.md).
//!
//! | file | what |
//! | --- | --- |
//! | `event.rs` | one row: kind, time, GPU, summary, details |
//! | `db.rs` | the file: opening, schema, corrupt/locked/read-only/full, read-only readers |
//! | `facts.rs` | what is remembered of each GPU, and the events a change in it makes |
//! | `writer.rs` | the thread that decides what to write: batches, one a second at most |
//! | `worker.rs` | the short-lived child process that opens, writes and reads the file |
//! | `read.rs` | queries for `gpuwarden events`, `/api/v1/events` and the status page |
//! | `report.rs` | one GPU's evidence packet for an RMA (`gpuwarden report`) |
//!
//! Data flow: the XID store tells the journal of every counted XID (with the kernel-log line
//! and its /dev/kmsg sequence number) through [`XidListener`]; everything else comes from
//! comparing published snapshots, at most once a second, on the writer's thread. Nothing on
//! the poll or scrape path waits for the database: events go into a bounded queue, and what
//! does not fit is counted (`gpuwarden_journal_dropped_total`).
//!
//! At start (before the kernel log is read), [`seed`] gives the XID store this boot's counts
//! and the kernel-log reader the last /dev/kmsg record already counted: a fatal XID keeps its
//! GPU unhealthy after a restart even when the ring buffer has dropped the line, and a line
//! still in the ring buffer is not counted twice.

pub mod cli;
pub mod db;
pub mod event;
pub mod facts;
pub mod read;
pub mod report;
pub mod worker;
mod writer;

use crate::model::JournalStatus;
use crate::store::{Store, Versioned};
use crate::xid::store::{XidEvent, XidListener};
use event::Event;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::Duration;

/// Events waiting for the writer. A second of an XID storm on eight GPUs fits; beyond, rows
/// are dropped and counted rather than letting the queue grow without bound.
const QUEUE: usize = 4096;

/// What reaches the writer.
enum Message {
    Event(Event),
    XidCounted {
        group: u64,
        event: XidEvent,
        severity: crate::model::xid::Severity,
    },
    XidJoined {
        group: u64,
        event: XidEvent,
    },
}

/// Where the journal is, and what it stamps on every row.
#[derive(Debug, Clone)]
pub struct Place {
    pub path: PathBuf,
    pub boot_id: String,
    pub host: String,
    pub retention: Duration,
    pub max_bytes: u64,
}

impl Place {
    /// From the config; None when the journal is off (`state.path: ""`).
    pub fn from_config(config: &crate::config::Config, host: &str) -> Option<Place> {
        let state = &config.state;
        if state.path.as_os_str().is_empty() {
            return None;
        }
        Some(Place {
            path: state.path.clone(),
            boot_id: boot_id(&state.boot_id_file),
            host: host.to_string(),
            retention: state.retention,
            max_bytes: state.max_size_mib.saturating_mul(1024 * 1024),
        })
    }
}

/// The kernel's boot id (a UUID per boot), or "unknown" where it cannot be read.
pub fn boot_id(file: &Path) -> String {
    let mut skips = crate::input::Skips::new(crate::input::Input::Proc);
    crate::input::read_value(file, 64, &mut skips)
        .map(|id| crate::input::printable(&id))
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// What a restart in the same boot takes over from the journal.
#[derive(Debug, Default)]
pub struct Seed {
    /// ((PCI bus id, code), count, last seen).
    pub xid_counts: crate::xid::store::SeedCounts,
    /// The last /dev/kmsg record counted.
    pub kmsg_sequence: Option<u64>,
    /// This boot's latest clear per GPU.
    pub clears: crate::model::health::Clears,
    /// The board swaps of the last day.
    pub board_swaps: crate::model::health::BoardSwaps,
}

/// Reads this boot's XID counts and kernel-log position (read-only, in a worker; an empty
/// seed when there is no journal yet or it cannot be read; the writer says why when it starts).
pub fn seed(place: &Place) -> Seed {
    if !place.path.exists() {
        return Seed::default();
    }
    let request = worker::Request::Seed {
        path: place.path.clone(),
        boot_id: place.boot_id.clone(),
    };
    match worker::call(&request, SEED_TIMEOUT) {
        Ok(worker::Answer::Seed {
            xid_counts,
            kmsg_sequence,
            clears,
            board_swaps,
        }) => Seed {
            xid_counts: xid_counts
                .into_iter()
                .map(|(bus, xid, count, last)| {
                    let last = crate::model::from_unix_seconds(last);
                    ((bus, xid), count, last)
                })
                .collect(),
            kmsg_sequence,
            clears,
            board_swaps,
        },
        Ok(other) => {
            log::debug!("journal: no counts from before the restart: unexpected answer {other:?}");
            Seed::default()
        }
        Err(e) => {
            log::debug!("journal: no counts from before the restart: {e}");
            Seed::default()
        }
    }
}

/// How long the start waits for the counts from before a restart: a bad file never holds
/// the daemon's start up for longer.
const SEED_TIMEOUT: Duration = Duration::from_secs(10);

/// The handle the daemon keeps: sends events to the writer.
#[derive(Clone)]
pub struct Journal {
    /// Boxed: the channel allocates all its slots up front, 4096 x 8 bytes this way rather
    /// than 4096 x the size of a message (640 KiB, measured in docs/performance.md).
    tx: SyncSender<Box<Message>>,
    shared: Arc<Shared>,
}

struct Shared {
    /// Rows the queue had no room for.
    dropped: AtomicU64,
}

impl Journal {
    /// Starts the writer, a task on the runtime. It opens the database itself (in a worker):
    /// a bad file never holds the daemon's start up.
    pub fn start(
        place: Place,
        store: Arc<Store>,
        status: Arc<Versioned<Option<JournalStatus>>>,
        board_swaps: Arc<Versioned<crate::model::health::BoardSwaps>>,
        stop: crate::stop::Stop,
    ) -> Journal {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Shared {
            dropped: AtomicU64::new(0),
        });
        let writer = writer::Writer::new(place, rx, store, status, board_swaps, shared.clone());
        // The task ends at the stop signal, after its last batch; dropping its stop handle
        // then tells the daemon's shutdown that it is done.
        tokio::spawn(writer.run(stop));
        Journal { tx, shared }
    }

    /// Queues one event; never waits.
    pub fn record(&self, event: Event) {
        self.send(Message::Event(event));
    }

    fn send(&self, message: Message) {
        match self.tx.try_send(Box::new(message)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl XidListener for Journal {
    fn counted(&self, group: u64, event: &XidEvent, severity: crate::model::xid::Severity) {
        self.send(Message::XidCounted {
            group,
            event: event.clone(),
            severity,
        });
    }

    fn joined(&self, group: u64, event: &XidEvent) {
        self.send(Message::XidJoined {
            group,
            event: event.clone(),
        });
    }
}
