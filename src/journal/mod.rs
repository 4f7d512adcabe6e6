//! The health journal: what happened to each GPU, kept in a SQLite database on the node so
//! that a restart or a reboot loses nothing (docs/journal.md).
//!
//! Four rooms, one concern each, and the row they share:
//!
//! | room | what |
//! | --- | --- |
//! | `event.rs` | one row: kind, time, GPU, summary, details |
//! | `store/` | the file: schema, opening, corrupt/locked/read-only/full (`db`); the queries (`read`); the short-lived child process that opens, writes and reads it (`worker`) |
//! | `writer/` | what to write and when: rows from the queue and from snapshot changes, batches (`mod`), the task that writes them (`task`), and a tracker per concern (`facts`, `gpu_looks`, `file_state`, `seen`, `xid_outbox`, `xid_tally`, `xid_rows`, `nic_rows`, `sdc_rows`, `validation_rows`, `remediation_rows`, `board_swap`, `refill`) |
//! | `sinks/` | events out: each sink's thread (`mod`), the rows after its cursor (`outbox`), CloudEvents, OTLP logs, HTTP (`cloudevent`, `otlp`, `webhook`) |
//! | `report/` | one GPU's evidence packet for an RMA (`mod`), and its network, probe and remediation parts |
//! | `cli.rs` | `gpuwarden events` and `gpuwarden report` |
//!
//! Data flow: this boot's XID counts are read from the XID store's snapshot (state the store
//! holds, never rebuilt from a queue that could lose some). The XID store only counts: it tells
//! the journal's XID outbox (`writer/xid_outbox`) of every counted XID (with the kernel-log
//! line and its /dev/kmsg sequence number), and the writer takes them from there when it looks
//! at a published snapshot: a storm is folded there (ten
//! rows a minute per GPU and code, then one `xid_storm` row with the count), and a fatal or
//! critical XID, or the first of a code, never waits on the outbox's room. Nothing of the
//! journal runs under the XID store's lock. Everything else comes from comparing each
//! published snapshot with what the journal knew (a store hook on the publishing thread), and
//! from the events other parts queue ([`Journal::record`]); the task writes at most once a
//! second, and only when woken for work. Nothing on the poll or scrape path waits for the
//! database: what still does not fit is counted (`gpuwarden_journal_dropped_total`) and logged
//! with what it was.
//!
//! At start (before the kernel log is read), [`seed`] gives the XID store this boot's counts
//! and the kernel-log reader the last /dev/kmsg record already counted: a fatal XID keeps its
//! GPU unhealthy after a restart even when the ring buffer has dropped the line, and a line
//! still in the ring buffer is not counted twice.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `cli.rs` | `gpuwarden events` and `gpuwarden report`: read the journal directly and read-only, so they work while the daemon runs and on a node where it does not |
//! | `event.rs` | One journal row: what happened, when, on which boot, host and GPU |
//! | `report/` | One GPU's evidence packet for a vendor (an RMA) or a repair ticket: identity, the verdict as last recorded, the XID timeline with the catalog's names and... |
//! | `sinks/` | Delivery of the journal's rows to each configured sink (docs/journal.md, "Events out"), at least once: one thread per sink reads the rows after its cursor... |
//! | `store/` | The journal's file: its schema and how it is opened, kept and pruned (`db`), the queries that read it (`read`), and the child process that does both for the... |
//! | `writer/` | What the journal writes, decided: rows from the queue and from snapshot changes, the facts and counts that changed, batches for the worker and what their... |
//! <!-- /files -->

pub mod cli;
pub mod event;
pub(crate) mod report;
pub(crate) mod sinks;
pub mod store;
pub(crate) mod writer;

use store::worker;
use writer::{facts, task};

use crate::model::JournalStatus;
use crate::service::versioned::Versioned;
use crate::snapshot::store::Store;
use crate::xid::store::XidStore;
use event::Event;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use std::time::Instant;

/// Events waiting for the writer. A second of an XID storm on eight GPUs fits; beyond, rows
/// are dropped and counted rather than letting the queue grow without bound.
const QUEUE: usize = 4096;

/// What reaches the writer through the queue (XIDs come from the XID store's outbox).
enum Message {
    Event(Event),
    /// A row whose writer waits until it is in the file ([`Journal::record_and_wait`]).
    Confirmed(Event, std::sync::mpsc::SyncSender<()>),
    /// Fields set in a row written before ([`Journal::amend`]); the sender waits too.
    Amend(store::worker::Amendment, std::sync::mpsc::SyncSender<()>),
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
    /// The file was there and answered: what the seed lacks, the journal lacks (an empty seed
    /// from a file that could not be read says nothing).
    pub answered: bool,
    /// ((PCI bus id, code), count, last seen).
    pub xid_counts: crate::xid::store::SeedCounts,
    /// The last /dev/kmsg record counted.
    pub kmsg_sequence: Option<u64>,
    /// Where each kernel-log file was read up to, whatever the boot (the file outlives it).
    pub file_positions: Vec<crate::xid::event::FilePosition>,
    /// This boot's kernel-log lines of counted XIDs and SXIDs: their records are not counted
    /// again when read again.
    pub kernel_lines: Vec<String>,
    /// This boot's latest clear per GPU.
    pub clears: crate::model::health::Clears,
    /// The board swaps of the last day.
    pub board_swaps: crate::model::health::BoardSwaps,
    /// Every GPU's last known facts: the writer starts from them, so it finds a board swap
    /// even while the file cannot be written yet (another program holds its lock).
    pub facts: Vec<facts::GpuFacts>,
    /// This boot's NVSwitch errors.
    pub sxids: Vec<crate::model::xid::SxidCount>,
    /// Each GPU's latest validation, whatever the boot.
    pub validations: crate::model::health::Validations,
    /// Each GPU's latest probes' figures, oldest first (its baseline).
    pub probe_history: std::collections::BTreeMap<String, Vec<crate::model::probe::ProbeFigures>>,
    /// The last day's and this boot's automatic remediation.
    pub remediation: crate::model::remediation::Remediations,
    /// The correctness canary's suspects and agreement digests.
    pub sdc: SdcSeed,
}

/// What the journal keeps of the checks only the probe makes (journal/writer/sdc_rows.rs): the
/// correctness canary, the HBM pattern test and the all-reduce across the node's GPUs.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SdcSeed {
    /// By GPU UUID: its newest wrong results not cleared since.
    pub suspects: std::collections::BTreeMap<String, crate::model::probe::SdcSuspect>,
    /// Each key's newest agreement digest (a list: JSON keys are strings).
    pub references: Vec<(crate::model::probe::SdcKey, crate::model::probe::SdcReference)>,
    /// By GPU UUID: its newest memory errors of the HBM pattern test not cleared since.
    #[serde(default)]
    pub hbm: std::collections::BTreeMap<String, crate::model::probe::HbmSuspect>,
    /// The latest all-reduce across the node's GPUs, unless a GPU of it was cleared since.
    #[serde(default)]
    pub collective: Option<crate::model::collective::CollectiveRun>,
    /// The node's all-reduce figures, oldest first (its baseline).
    #[serde(default)]
    pub collective_figures: Vec<(String, f64)>,
}

/// The daemon's hold on its journal: an exclusive lock on `<state.path>.lock` for as long as
/// it runs (the kernel lets go of it when the process ends, `kill -9` too). Two daemons on one
/// file would write every row twice; the second is refused at start.
#[derive(Debug)]
pub struct JournalLock {
    _file: Option<std::fs::File>,
}

impl JournalLock {
    /// No lock: the lock file cannot be made (a read-only state directory, which the writer
    /// reports and retries on its own). Only another daemon holding it refuses the start.
    pub fn none() -> JournalLock {
        JournalLock { _file: None }
    }
}

/// Why the journal could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "journal {path} is in use by another gpuwarden ({holder}, per {lock}); stop it, or give this one another state.path"
    )]
    InUse { path: String, lock: String, holder: String },
    #[error(
        "cannot lock the journal {path} ({lock}): {source}; make state.path's directory writable by gpuwarden or set state.path"
    )]
    Io {
        path: String,
        lock: String,
        source: std::io::Error,
    },
}

/// Locks the journal at `place` for this daemon (see [`JournalLock`]). The lock file is
/// opened without following a link, and holds the holder's pid for the error message.
pub fn lock(place: &Place) -> Result<JournalLock, LockError> {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = place.path.as_os_str().to_os_string();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let shown = || (place.path.display().to_string(), lock_path.display().to_string());
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(&lock_path)
        .map_err(|source| {
            let (path, lock) = shown();
            LockError::Io { path, lock, source }
        })?;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let error = std::io::Error::last_os_error();
        let (path, lock) = shown();
        if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(LockError::Io {
                path,
                lock,
                source: error,
            });
        }
        let mut holder = String::new();
        let _ = (&mut file).take(32).read_to_string(&mut holder);
        let holder = crate::input::printable(holder.trim());
        let holder = if holder.is_empty() {
            "pid unknown".to_string()
        } else {
            format!("pid {holder}")
        };
        return Err(LockError::InUse { path, lock, holder });
    }
    let _ = file.set_len(0);
    let _ = file.seek(std::io::SeekFrom::Start(0));
    let _ = writeln!(file, "{}", std::process::id());
    Ok(JournalLock { _file: Some(file) })
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
            file_positions,
            kernel_lines,
            clears,
            board_swaps,
            facts,
            sxids,
            validations,
            probe_history,
            remediation,
            sdc,
        }) => Seed {
            answered: true,
            xid_counts: xid_counts
                .into_iter()
                .map(|(bus, xid, count, last)| {
                    let last = crate::model::from_unix_seconds(last);
                    ((bus, xid), count, last)
                })
                .collect(),
            kmsg_sequence,
            file_positions,
            kernel_lines,
            clears,
            board_swaps,
            facts,
            sxids: sxids.into_iter().map(worker::sxid_of_seed).collect(),
            validations,
            probe_history,
            remediation,
            sdc,
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

/// How long a start waits for the journal's lock: a previous daemon that is still stopping
/// (a restart) lets go of it within its own stop time-out.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// [`lock`], tried again every 200 ms for [`LOCK_WAIT`] while another daemon holds it.
pub async fn lock_waiting(place: &Place) -> Result<JournalLock, LockError> {
    let started = Instant::now();
    loop {
        match lock(place) {
            Err(LockError::InUse { .. }) if started.elapsed() < LOCK_WAIT => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// How long the start waits for the counts from before a restart: a bad file never holds
/// the daemon's start up for longer.
const SEED_TIMEOUT: Duration = Duration::from_secs(10);

/// The handle the daemon keeps: sends events to the writer.
#[derive(Clone)]
pub struct Journal {
    /// Held for as long as any handle lives (the daemon's run).
    _lock: Arc<JournalLock>,
    /// Boxed: the channel allocates all its slots up front, 4096 x 8 bytes this way rather
    /// than 4096 x the size of a message (640 KiB, measured in docs/performance.md).
    tx: SyncSender<Box<Message>>,
    shared: Arc<Shared>,
}

/// Says when a row queued by [`Journal::record_soon`] is in the file.
pub(crate) struct Confirmation(std::sync::mpsc::Receiver<()>);

impl Confirmation {
    /// Waits until the row is committed, or until `deadline`; whether it was.
    pub(crate) fn wait_until(self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        self.0.recv_timeout(left).is_ok()
    }
}

struct Shared {
    /// Rows the queue had no room for.
    dropped: AtomicU64,
    /// Rate-limits the log line for dropped rows.
    drop_log: Mutex<crate::service::logging::RateLimiter>,
    /// Wakes the writer's task: a row was queued (or dropped), or a snapshot made one.
    wake: tokio::sync::Notify,
}

/// The sources the journal's writer sets: its own state; and the service state's owner, which
/// it tells of the board swaps it finds (and reads once, for the remediation the seed brought
/// back, already written), and whose transitions' validation rows it writes before they are
/// published (journal/writer/validation_rows.rs).
pub struct WritesTo {
    pub status: Arc<Versioned<Option<JournalStatus>>>,
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// Read once, for the correctness canary's suspects and digests the seed brought back.
    pub probes: Arc<crate::probe::schedule::ProbeState>,
}

impl Journal {
    /// Starts the writer, a task on the runtime. It opens the database itself (in a worker):
    /// a bad file never holds the daemon's start up.
    pub fn start(
        lock: JournalLock,
        place: Place,
        facts: Vec<facts::GpuFacts>,
        store: Arc<Store>,
        writes_to: WritesTo,
        xids: Arc<XidStore>,
        stop: crate::service::stop::Stop,
    ) -> Journal {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Shared {
            dropped: AtomicU64::new(0),
            drop_log: Mutex::new(crate::service::logging::RateLimiter::new(Duration::from_secs(60))),
            wake: tokio::sync::Notify::new(),
        });
        // Every counted XID is kept for the writer to take (it looks at each publish, which a
        // counted XID brings within a fraction of a second).
        let outbox = Arc::new(writer::xid_outbox::XidOutbox::default());
        xids.report_to(outbox.clone());
        let lifecycle = writes_to.lifecycle.clone();
        let mut writer = writer::Writer::new(place, rx, store.clone(), writes_to, outbox, shared.clone());
        writer.start_from(facts);
        let writer = Arc::new(Mutex::new(writer));
        task::look_at_each_snapshot(&store, writer.clone(), shared.clone());
        // The task ends at the stop signal, after its last batch; dropping its stop handle
        // then tells the daemon's shutdown that it is done.
        tokio::spawn(task::run(writer, shared.clone(), stop));
        let journal = Journal {
            _lock: Arc::new(lock),
            tx,
            shared,
        };
        // From now on the owner of the service state has each validation's change in the file
        // before it publishes it.
        lifecycle.record_with(Arc::new(writer::validation_rows::ValidationRecorder::new(
            journal.clone(),
            store,
        )));
        journal
    }

    /// Queues one event; never waits.
    pub fn record(&self, event: Event) {
        self.send(Message::Event(event));
    }

    /// Queues one event and waits until it is committed to the file, at most `timeout`: for
    /// what must be on record before the daemon acts (a GPU reset's start, a reboot mark), so
    /// a daemon stopped or killed right after still finds it at its next start. False when
    /// it could not be written in time (the row stays queued).
    pub fn record_and_wait(&self, event: Event, timeout: Duration) -> bool {
        self.record_soon(event).wait_until(Instant::now() + timeout)
    }

    /// Queues one event; what comes back says when it is committed to the file (several rows
    /// queued first and then waited for go in one batch).
    pub(crate) fn record_soon(&self, event: Event) -> Confirmation {
        self.send_confirmed(|done| Message::Confirmed(event, done))
    }

    /// Sets `amendment`'s fields in a row written before (a clear's outcome, known a poll
    /// round after its row had to be in the file); what comes back says when it is in.
    pub(crate) fn amend(&self, amendment: store::worker::Amendment) -> Confirmation {
        self.send_confirmed(|done| Message::Amend(amendment, done))
    }

    /// Queues the message `make` builds around the writer's "it is in the file" signal.
    fn send_confirmed(&self, make: impl FnOnce(std::sync::mpsc::SyncSender<()>) -> Message) -> Confirmation {
        let (done, written) = std::sync::mpsc::sync_channel(1);
        self.send(make(done));
        Confirmation(written)
    }

    fn send(&self, message: Message) {
        if let Err(TrySendError::Full(message) | TrySendError::Disconnected(message)) =
            self.tx.try_send(Box::new(message))
        {
            self.dropped(&message);
        }
        // After the row is in (a permit waits for a task that is busy): never blocks.
        self.shared.wake.notify_one();
    }

    fn dropped(&self, message: &Message) {
        self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        let event = match message {
            Message::Event(event) | Message::Confirmed(event, _) => {
                format!("{:?} event: {}", event.kind, event.summary)
            }
            Message::Amend(amendment, _) => format!("the amendment of a {:?} row", amendment.kind),
        };
        let mut limiter = self.shared.drop_log.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held_back) = limiter.allow("journal-queue-full") {
            log::warn!(
                "journal: the queue is full; dropped a row ({event}){}",
                crate::service::logging::held_back_suffix(held_back)
            );
        }
    }
}
