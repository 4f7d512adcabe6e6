//! What the journal writes, decided: rows from the queue and from snapshot changes, the facts
//! and counts that changed, batches for the worker and what their answers mean. No waiting
//! here: [`crate::journal::writer::task`] runs the batches, a [`Store`] hook shows each published snapshot.
//! When the database cannot be written (locked, read-only, full disk) it keeps a bounded
//! backlog, reports itself down, logs once what to do and tries again (1 s, doubling to 30 s); a corrupt
//! file is moved aside and a new one started. Its concerns each have a tracker: the GPUs
//! ([`crate::journal::writer::gpu_looks`]), the file ([`crate::journal::writer::file_state`]), the XIDs
//! ([`crate::journal::writer::xid_tally`]), the ports, validations and remediation ([`crate::journal::writer::nic_rows`],
//! [`crate::journal::writer::validation_rows`], [`crate::journal::writer::remediation_rows`]); the writer holds the backlog and
//! the batches.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `board_swap.rs` | A board swap as the journal's writer records it: the swap's row and its validation's, and the command that tells the service state's owner, handed to it... |
//! | `facts.rs` | What the journal remembers of each GPU between snapshots (and restarts: the `gpu_facts` table), and the events that a change in it makes |
//! | `file_state.rs` | Whether the journal's file can be written now, and what the `journal` metrics say of it: open or not, when to try again, the outage's one log line each way,... |
//! | `gpu_looks.rs` | What the journal knows of each GPU and how it decides that a snapshot changed it: the facts per UUID (loaded when the file opens), which of them the file... |
//! | `nic_rows.rs` | The journal's rows about the node's network ports (kind `nic`): each RDMA adapter as first seen in this run and whenever its firmware or board changes, and... |
//! | `refill.rs` | What the journal writes again into a file that was deleted, emptied or replaced while the daemon ran (writer.rs, `refill`), beside every GPU's identity and... |
//! | `remediation_rows.rs` | The journal's `remediation` rows: each GPU's next remediation step (`remediation.mode` advise or auto, health/ladder.rs) when it first appears or changes,... |
//! | `sdc_rows.rs` | The journal's `sdc` and `memtest` rows (docs/probe.md, "Silent data corruption"): each GPU the correctness canary found computing wrong, with the evidence... |
//! | `seen.rs` | What the journal read of one GPU at its last full look, kept so that a round that changed none of it is passed over with one comparison: no facts built,... |
//! | `task.rs` | The journal's task on the runtime: writes what the `Writer` decided, in one transaction at most once a second, through a worker process |
//! | `validation_rows.rs` | The journal's `validation` rows: each change of a GPU's validation (a probe before return to service), whoever made it (the local API's clear, remediation's... |
//! | `xid_outbox.rs` | The journal's XID outbox: every report the XID store counted, kept (bounded) until the writer takes them, never a call from the store into the writer |
//! | `xid_rows.rs` | The rows of counted XIDs and NVSwitch SXIDs, as the journal writes them |
//! | `xid_tally.rs` | What the journal's writer keeps of the XIDs between batches: the row of each counted event (a second source's report of the same event updates it), this... |
//! <!-- /files -->

pub(in crate::journal) mod board_swap;
pub(crate) mod facts;
pub(in crate::journal) mod file_state;
pub(in crate::journal) mod gpu_looks;
pub(crate) mod nic_rows;
pub(crate) mod refill;
pub(crate) mod remediation_rows;
pub(crate) mod sdc_rows;
pub(in crate::journal) mod seen;
pub(in crate::journal) mod task;
pub(crate) mod validation_rows;
pub(in crate::journal) mod xid_outbox;
pub(in crate::journal) mod xid_rows;
pub(in crate::journal) mod xid_tally;

use crate::journal::event::{Event, Kind};
use crate::journal::store::worker::{Amendment, Answer, Batch, Failure, Item, Prune, Request, XidCount};
use crate::journal::writer::facts::GpuFacts;
use crate::journal::writer::xid_outbox::{Outgoing, XidOutbox};
use crate::journal::{Message, Place, Shared};
use crate::model::{JournalStatus, Snapshot};
use crate::service::versioned::Versioned;
use crate::snapshot::store::Store;
use crate::xid::store::{Severity, XidEvent};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

use crate::journal::writer::file_state::{FileState, MAX_BACKLOG};
/// How often old rows are deleted (retention) and the size cap is checked, with a batch.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// On a node with nothing to write, a worker still runs this often to delete old rows.
const IDLE_PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// One row to write, or an XID row to update.
enum Pending {
    Insert {
        event: Event,
        group: Option<u64>,
    },
    /// A counted XID, made into a row at the next batch, when the snapshot says which GPU
    /// is at its address.
    Xid {
        group: u64,
        event: XidEvent,
        /// The code's severity when it was counted (the operator's policy, else the catalog's).
        severity: Severity,
    },
    XidJoined {
        group: u64,
        event: XidEvent,
    },
    Amend(Amendment),
}

pub(super) struct Writer {
    place: Place,
    rx: Receiver<Box<Message>>,
    store: Arc<Store>,
    status: Arc<Versioned<Option<JournalStatus>>>,
    /// What the journal knows of each GPU, and the rows a snapshot's changes call for.
    gpus: crate::journal::writer::gpu_looks::GpuLooks,
    /// The service state's owner, told of the board swaps found (outside the writer's lock).
    pub(super) lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// What was last written of the advised next steps.
    remediation_rows: crate::journal::writer::remediation_rows::RemediationRows,
    /// What was last written of the correctness canary's suspects and digests.
    sdc_rows: crate::journal::writer::sdc_rows::SdcRows,
    /// Where the counted XIDs are taken from: the outbox the XID store tells.
    xids: Arc<XidOutbox>,
    shared: Arc<Shared>,
    /// Whether the file can be written now, and the counts the metrics show.
    file: FileState,
    backlog: Vec<Pending>,
    /// The counted XIDs' rows and this boot's counts.
    tally: crate::journal::writer::xid_tally::XidTally,
    /// Who waits for a queued row to be written: (not yet in a batch, in the batch in flight).
    waiting: (Vec<SyncSender<()>>, Vec<SyncSender<()>>),
    last_generation: u64,
    /// What was last written of the network ports.
    nic_rows: crate::journal::writer::nic_rows::NicRows,
    last_prune: Option<Instant>,
    /// This run's batches are `run_id:N`.
    run_id: String,
    batch_seq: u64,
    /// A batch that failed: written again first, with the same id.
    pending: Option<Batch>,
    /// A batch of this run has been written (a file that then no longer knows this boot
    /// was deleted, emptied or replaced).
    wrote: bool,
    /// The first open was tried and the start recorded: snapshots may be looked at.
    pub(super) started: bool,
}

impl Writer {
    pub(super) fn new(
        place: Place,
        rx: Receiver<Box<Message>>,
        store: Arc<Store>,
        writes_to: crate::journal::WritesTo,
        xids: Arc<XidOutbox>,
        shared: Arc<Shared>,
    ) -> Writer {
        Writer {
            file: FileState::new(place.path.clone()),
            place,
            rx,
            store,
            status: writes_to.status,
            remediation_rows: crate::journal::writer::remediation_rows::RemediationRows::from_seed(
                &writes_to.lifecycle.get().remediation,
            ),
            sdc_rows: crate::journal::writer::sdc_rows::SdcRows::from_seed(&writes_to.probes.get()),
            gpus: crate::journal::writer::gpu_looks::GpuLooks::new(),
            lifecycle: writes_to.lifecycle,
            xids,
            shared,
            backlog: Vec::new(),
            tally: Default::default(),
            waiting: Default::default(),
            last_generation: 0,
            nic_rows: Default::default(),
            last_prune: None,
            run_id: format!(
                "{}-{}",
                std::process::id(),
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ),
            batch_seq: 0,
            pending: None,
            wrote: false,
            started: false,
        }
    }

    /// The last batch's rows, at the stop: what the queue still holds, the slowdowns still
    /// going on, and the stop itself.
    pub(super) fn last_rows(&mut self) {
        self.take_queued();
        let snapshot = self.store.latest();
        self.look_at(&snapshot);
        self.storm_rows(crate::model::unix_now(), true);
        for row in self.gpus.end_open_episodes() {
            self.push(row);
        }
        self.push(self.daemon_event("stopped"));
    }

    /// Whether the last batch is written (or nothing was left).
    pub(super) fn all_written(&self) -> bool {
        self.pending.is_none() && self.backlog.is_empty()
    }

    /// Says what the stop loses, blaming what failed.
    pub(super) fn log_loss(&self) {
        let lost = self.backlog.len() + self.pending.as_ref().map_or(0, |b| b.items.len());
        if lost > 0 {
            // Blame what failed: an unwritable file is not a hung worker.
            let why = self.file.blame();
            log::error!(
                "journal {}: {lost} row(s) could not be written before the stop ({why}); they are \
                 lost. Metrics and the kernel log still hold what they were about",
                self.place.path.display()
            );
        }
    }

    /// Something to write: rows, or facts or counts that changed.
    pub(super) fn has_work(&self) -> bool {
        !self.backlog.is_empty() || self.gpus.has_dirty() || self.tally.has_unwritten()
    }

    /// When the writer must look again with nothing new arriving: a failed batch or a closed
    /// file at its retry time, else the idle deletion of old rows.
    pub(super) fn next_due(&self) -> Instant {
        if self.pending.is_some() || !self.file.is_open() {
            return self.file.retry_at();
        }
        match self.last_prune {
            Some(at) => at + IDLE_PRUNE_EVERY,
            None => Instant::now(),
        }
    }

    /// A retry now (the stop's last batch).
    pub(super) fn retry_now(&mut self) {
        self.file.retry_now();
    }

    /// Takes the XIDs counted since the last take and every queued message; false when the
    /// daemon's handles are gone.
    pub(super) fn take_queued(&mut self) -> bool {
        self.take_xids();
        loop {
            match self.rx.try_recv() {
                Ok(message) => self.take(*message),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Takes the XIDs the store counted since the last take (its outbox: folded, bounded),
    /// each made into a row at the next batch.
    pub(super) fn take_xids(&mut self) {
        let taken = self.xids.take();
        self.tally.read_up_to(taken.kmsg_sequence, taken.file_position);
        for report in taken.reports {
            match report {
                Outgoing::Counted { group, event, severity } => self.queue(Pending::Xid { group, event, severity }),
                Outgoing::Joined { group, event } => self.queue(Pending::XidJoined { group, event }),
            }
        }
    }

    pub(super) fn daemon_event(&self, what: &str) -> Event {
        Event::new(
            crate::model::unix_now(),
            Kind::Daemon,
            None,
            format!("gpuwarden {} {what}", env!("CARGO_PKG_VERSION")),
            json!({"version": env!("CARGO_PKG_VERSION"), "pid": std::process::id()}),
        )
    }

    pub(super) fn push(&mut self, mut event: Event) {
        with_work_on_gpu(&mut event, &self.store.latest());
        self.queue(Pending::Insert { event, group: None });
    }

    fn queue(&mut self, pending: Pending) {
        if self.backlog.len() >= MAX_BACKLOG {
            self.backlog.remove(0);
            self.file.dropped_one();
        }
        self.backlog.push(pending);
    }

    fn take(&mut self, message: Message) {
        match message {
            Message::Event(event) => self.push(event),
            Message::Confirmed(event, done) => {
                self.push(event);
                self.waiting.0.push(done);
            }
            Message::Amend(amendment, done) => {
                self.queue(Pending::Amend(amendment));
                self.waiting.0.push(done);
            }
        }
    }

    /// Storms whose minute is over (all of them at stop): one row each with the count not
    /// recorded one by one.
    fn storm_rows(&mut self, now: f64, stopping: bool) {
        for row in self.xids.storms_due(now, stopping) {
            let (bus, xid, n, first) = (row.pci_bus_id, row.xid, row.reports, row.first);
            let gpu = self.gpus.gpu_at(&bus);
            self.push(Event::new(
                first,
                Kind::XidStorm,
                gpu,
                format!(
                    "{n} more reports of Xid {} within a minute, counted but not recorded one by one",
                    crate::model::xid::code_label(xid)
                ),
                json!({
                    "xid": if xid == crate::model::xid::OTHER_CODES { json!("other") } else { json!(xid) },
                    "reports": n
                }),
            ));
        }
    }

    /// Compares a published snapshot with what the journal knew, GPU by GPU. Called on the
    /// publishing thread (a [`Store`] hook) and by the writer task: only compares and queues.
    pub(super) fn look_at(&mut self, snapshot: &Snapshot) {
        // Nothing published yet (the first poll round runs): rows wait for the GPUs' names.
        if snapshot.generation == 0 || snapshot.generation == self.last_generation {
            return;
        }
        self.tally.take_counts(snapshot);
        if snapshot.devices.is_empty() {
            return;
        }
        self.last_generation = snapshot.generation;
        let now = crate::model::unix_now();
        self.storm_rows(now, false);
        let mut rows = Vec::new();
        for device in &snapshot.devices {
            self.gpus.look_at_gpu(device, snapshot, now, &mut rows);
        }
        self.gpus.look_at_missing(snapshot, now, &mut rows);
        rows.extend(self.nic_rows.look(snapshot, now));
        rows.extend(self.remediation_rows.look(snapshot, now));
        rows.extend(self.sdc_rows.look(snapshot, now));
        rows.into_iter().for_each(|row| self.push(row));
    }

    /// The board swaps found since the last take: commands for the owner, which the caller
    /// applies once it let go of the writer.
    pub(super) fn take_swaps(&mut self) -> Vec<crate::lifecycle::Command> {
        self.gpus.take_swaps()
    }

    /// Looks at the newest snapshot (what a queued row may need to name its GPU); false
    /// while nothing is published (the first poll round runs): rows wait for the GPUs' names.
    pub(super) fn look_at_latest(&mut self) -> bool {
        let snapshot = self.store.latest();
        self.look_at(&snapshot);
        snapshot.generation > 0
    }

    /// The request that opens the file when it is not known good and a retry is due (in a
    /// worker, which moves a damaged file aside); None when it is open or not due.
    pub(super) fn open_request(&self) -> Option<Request> {
        if !self.file.open_due() {
            return None;
        }
        Some(Request::Open {
            path: self.place.path.clone(),
            boot_id: self.place.boot_id.clone(),
        })
    }

    /// The open's answer; takes over what the file knows the first time.
    pub(super) fn opened(&mut self, answer: Result<Answer, Failure>) {
        match answer {
            Ok(Answer::Opened {
                facts,
                xid_counts,
                bytes,
                moved_aside,
            }) => {
                if let Some((what, aside)) = moved_aside {
                    self.moved_aside(&what, &aside);
                }
                self.file.opened(bytes);
                self.load_state(facts, xid_counts);
            }
            Ok(other) => self.failed(&unexpected(&other)),
            Err(e) => self.failed(&e),
        }
    }

    /// A damaged file was moved aside: say where, and write everything known into the new one.
    fn moved_aside(&mut self, what: &str, aside: &std::path::Path) {
        log::warn!(
            "journal {}: {what}; moved it to {} and started a new one (the old one can be \
             inspected with sqlite3)",
            self.place.path.display(),
            aside.display()
        );
        self.tally.write_all_again();
        self.gpus.write_all_again();
    }

    fn failed(&mut self, e: &Failure) {
        self.file.failed(e);
        if let Some(aside) = &e.moved_aside {
            // Found damaged while writing: a new file at once, the batch kept for it.
            self.moved_aside(&e.message, aside);
            self.file.retry_now();
        }
    }

    /// Each GPU's facts as the seed read them, before the file is open for writing
    /// ([`crate::journal::writer::gpu_looks::GpuLooks::start_from`]).
    pub(super) fn start_from(&mut self, facts: Vec<GpuFacts>) {
        self.gpus.start_from(facts);
    }

    /// What the file knew at its first open: each GPU's facts, this boot's XID counts.
    fn load_state(&mut self, facts: Vec<GpuFacts>, counts: Vec<XidCount>) {
        if self.gpus.load(facts) {
            self.tally.load(counts);
        }
    }

    /// The batch to write now, taken out of the writer's hands: the one that failed (kept
    /// whole, written again with its id), else the backlog, the changed facts and counts, with
    /// old rows deleted when that is due. None when the file is not open or there is nothing
    /// to write (a node with nothing to write runs no worker but the hourly deletion).
    pub(super) fn take_batch(&mut self) -> Option<Batch> {
        if !self.file.is_open() {
            return None;
        }
        self.pending.take().or_else(|| self.next_batch())
    }

    /// The worker's answer to `batch`; a batch that failed is kept for the retry.
    pub(super) fn written(&mut self, batch: Batch, answer: Result<Answer, Failure>) {
        let prune_due = batch.prune.as_ref().is_some_and(|p| p.due);
        match answer {
            Ok(Answer::Written {
                rows,
                xid_rows,
                bytes,
                knew_boot,
                repeated,
            }) => {
                if prune_due {
                    self.last_prune = Some(Instant::now());
                }
                if repeated {
                    log::info!(
                        "journal {}: batch {} had already been written (its worker answered late); not written twice",
                        self.place.path.display(),
                        batch.id
                    );
                }
                self.file.wrote(rows, bytes);
                for done in self.waiting.1.drain(..) {
                    let _ = done.try_send(());
                }
                self.tally.written(xid_rows);
                if self.wrote && !knew_boot {
                    self.refill();
                }
                self.wrote = true;
            }
            Ok(other) => {
                self.pending = Some(batch);
                self.failed(&unexpected(&other));
            }
            Err(e) => {
                self.pending = Some(batch);
                self.failed(&e);
            }
        }
    }

    /// The next batch from what is waiting, taken out of the writer's hands; None when there
    /// is nothing to write and no pruning due.
    fn next_batch(&mut self) -> Option<Batch> {
        let backlog = std::mem::take(&mut self.backlog);
        let latest = self.store.latest();
        self.backlog = backlog
            .into_iter()
            .map(|pending| match pending {
                Pending::Xid { group, event, severity } => {
                    let mut event =
                        crate::journal::writer::xid_rows::xid_event(&event, severity, |bus| self.gpus.gpu_at(bus));
                    with_work_on_gpu(&mut event, &latest);
                    Pending::Insert {
                        event,
                        group: Some(group),
                    }
                }
                other => other,
            })
            .collect();
        let dirty = !self.backlog.is_empty() || self.gpus.has_dirty() || self.tally.has_unwritten();
        let since_prune = self.last_prune.map(|t| t.elapsed());
        let prune_due = since_prune.is_none_or(|t| t >= PRUNE_EVERY);
        if !dirty && since_prune.is_some_and(|t| t < IDLE_PRUNE_EVERY) {
            return None;
        }
        self.batch_seq += 1;
        let batch = self.batch(prune_due);
        // The whole backlog goes into this batch: its rows' waiters hear when it is written.
        self.waiting.1.append(&mut self.waiting.0);
        self.backlog.clear();
        self.gpus.taken();
        self.tally.taken();
        Some(batch)
    }

    /// The file no longer knows this boot: it was deleted, emptied or replaced while the
    /// daemon ran. Say so, and write every GPU's identity and this boot's counts into it again.
    fn refill(&mut self) {
        log::warn!(
            "journal {}: the file was deleted, emptied or replaced while gpuwarden ran; writing again what a \
             restart needs (GPUs, this boot's XID counts, clears, validations, resets, reboot mark)",
            self.place.path.display()
        );
        self.tally.write_all_again();
        let rows = crate::journal::writer::refill::rows(&self.store.latest(), crate::model::unix_now());
        rows.into_iter().for_each(|row| self.push(row));
        self.gpus.write_all_again();
    }

    /// The worker's request for what is waiting.
    fn batch(&self, prune: bool) -> Batch {
        let items = self
            .backlog
            .iter()
            .filter_map(|pending| match pending {
                Pending::Insert { event, group } => Some(Item::Insert {
                    event: event.clone(),
                    group: *group,
                }),
                // Made into rows before the batch (flush).
                Pending::Xid { .. } => None,
                Pending::Amend(amendment) => Some(Item::Amend(amendment.clone())),
                Pending::XidJoined { group, event } => Some(Item::Join {
                    group: *group,
                    row: self.tally.row_of(*group),
                    source: event.source.label().to_string(),
                    raw: event.raw.clone(),
                    kmsg_sequence: event.kmsg_sequence,
                }),
            })
            .collect();
        Batch {
            id: format!("{}:{}", self.run_id, self.batch_seq),
            path: self.place.path.clone(),
            boot_id: self.place.boot_id.clone(),
            host: self.place.host.clone(),
            items,
            facts: self.gpus.dirty(),
            counts: self.tally.unwritten(),
            kmsg_sequence: self.tally.kmsg_sequence(),
            file_position: self.tally.file_position(),
            prune: Some(Prune {
                oldest: crate::model::unix_now() - self.place.retention.as_secs_f64(),
                max_bytes: self.place.max_bytes,
                due: prune,
            }),
        }
    }

    pub(super) fn publish_status(&mut self) {
        let dropped_elsewhere = self.shared.dropped.load(Ordering::Relaxed) + self.xids.dropped();
        self.status.set_if_changed(Some(self.file.status(dropped_elsewhere)));
    }
}

fn unexpected(answer: &Answer) -> Failure {
    Failure {
        message: format!("the journal worker answered something else: {answer:?}"),
        advice: "a bug: please report it".to_string(),
        corrupt: false,
        moved_aside: None,
    }
}

/// Adds to a GPU's row the batch jobs and pods on that GPU when it was written (details
/// `on_gpu`: what an exported event carries, docs/journal.md "Events out"), from the latest
/// snapshot; nothing when none holds it. Kept on the row, not on every series: the job label
/// is what fleets drop from metrics for cardinality.
fn with_work_on_gpu(event: &mut Event, snapshot: &Snapshot) {
    let Some(uuid) = event.gpu.as_ref().map(|g| g.uuid.as_str()) else {
        return;
    };
    let jobs = snapshot.jobs.get(uuid).filter(|j| !j.is_empty());
    let pods = snapshot.pods.get(uuid).filter(|p| !p.is_empty());
    if jobs.is_none() && pods.is_none() {
        return;
    }
    if let Some(details) = event.details.as_object_mut().filter(|d| !d.contains_key("on_gpu")) {
        let pods: Vec<serde_json::Value> = pods
            .into_iter()
            .flatten()
            .map(|p| serde_json::json!({"namespace": p.namespace, "pod": p.pod, "container": p.container}))
            .collect();
        details.insert(
            "on_gpu".into(),
            serde_json::json!({"jobs": jobs.cloned().unwrap_or_default(), "pods": pods}),
        );
    }
}
