//! What the journal writes, decided: rows from the queue and from snapshot changes, the facts
//! and counts that changed, batches for the worker and what their answers mean. No waiting
//! here: [`super::task`] runs the batches, a [`Store`] hook shows each published snapshot.
//! When the database cannot be written (locked, read-only, full disk) it keeps a bounded
//! backlog, reports itself down, logs once what to do and tries again every 30 s; a corrupt
//! file is moved aside and a new one started.

use super::event::{Event, GpuRef, Kind};
use super::facts::{self, GpuFacts};
use super::seen::LastSeen;
use super::worker::{Answer, Batch, Failure, Item, Prune, Request, XidCount};
use super::{Message, Place, Shared};
use crate::model::{JournalStatus, Snapshot};
use crate::service::versioned::Versioned;
use crate::snapshot::store::Store;
use crate::xid::outbox::Outgoing;
use crate::xid::store::{Severity, XidEvent, XidStore};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

/// How long to wait before opening the file again after it failed.
const RETRY_EVERY: Duration = Duration::from_secs(30);
/// Rows kept while the database cannot be written; older ones are dropped (and counted).
const MAX_BACKLOG: usize = 10_000;
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
}

pub(super) struct Writer {
    place: Place,
    rx: Receiver<Box<Message>>,
    store: Arc<Store>,
    status: Arc<Versioned<Option<JournalStatus>>>,
    /// Where a board swap goes: the verdict's notice and its validation.
    swaps: super::board_swap::SwapWrites,
    /// What was last written of the validations.
    validation_rows: super::validation_rows::ValidationRows,
    /// What was last written of the advised next steps.
    remediation_rows: super::remediation_rows::RemediationRows,
    /// Where the counted XIDs are taken from (its outbox).
    xids: Arc<XidStore>,
    shared: Arc<Shared>,
    /// The last worker opened or wrote the file: write batches without opening first.
    open: bool,
    retry_at: Instant,
    outage: crate::service::logging::Outage,
    backlog: Vec<Pending>,
    /// By UUID: what the journal last knew of each GPU (loaded when the file opens).
    facts: BTreeMap<String, GpuFacts>,
    facts_loaded: bool,
    /// GPUs whose stored facts are out of date.
    dirty_facts: BTreeSet<String>,
    /// The counted XIDs' rows and this boot's counts.
    tally: super::xid_tally::XidTally,
    /// Who waits for a queued row to be written: (not yet in a batch, in the batch in flight).
    waiting: (Vec<SyncSender<()>>, Vec<SyncSender<()>>),
    last_generation: u64,
    missing: BTreeSet<String>,
    /// What was last written of the network ports.
    nic_rows: super::nic_rows::NicRows,
    persistence_enabled: BTreeMap<String, u64>,
    status_now: JournalStatus,
    last_prune: Option<Instant>,
    /// This run's batches are `run_id:N`.
    run_id: String,
    batch_seq: u64,
    /// A batch that failed: written again first, with the same id.
    pending: Option<Batch>,
    /// GPUs looked at in this run: the first look at each records its counters.
    looked_at: BTreeSet<String>,
    /// By UUID: what the last full look at each GPU read, to pass over a round that changed
    /// none of it.
    seen: BTreeMap<String, LastSeen>,
    /// A batch of this run has been written (a file that then no longer knows this boot
    /// was deleted, emptied or replaced).
    wrote: bool,
    /// Why the last open or write failed, until one succeeds: what the stop's loss is blamed on.
    last_failure: Option<String>,
    /// The first open was tried and the start recorded: snapshots may be looked at.
    pub(super) started: bool,
}

impl Writer {
    pub(super) fn new(
        place: Place,
        rx: Receiver<Box<Message>>,
        store: Arc<Store>,
        writes_to: super::WritesTo,
        xids: Arc<XidStore>,
        shared: Arc<Shared>,
    ) -> Writer {
        Writer {
            place,
            rx,
            store,
            status: writes_to.status,
            validation_rows: super::validation_rows::ValidationRows::from_seed(writes_to.validations.get()),
            remediation_rows: super::remediation_rows::RemediationRows::from_seed(&writes_to.remediation.get()),
            swaps: super::board_swap::SwapWrites {
                board_swaps: writes_to.board_swaps,
                validations: writes_to.validations,
            },
            xids,
            shared,
            open: false,
            retry_at: Instant::now(),
            outage: Default::default(),
            backlog: Vec::new(),
            facts: BTreeMap::new(),
            facts_loaded: false,
            dirty_facts: BTreeSet::new(),
            tally: Default::default(),
            waiting: Default::default(),
            last_generation: 0,
            missing: BTreeSet::new(),
            nic_rows: Default::default(),
            persistence_enabled: BTreeMap::new(),
            status_now: JournalStatus::default(),
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
            looked_at: BTreeSet::new(),
            seen: BTreeMap::new(),
            wrote: false,
            last_failure: None,
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
        self.end_open_episodes();
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
            let why = self
                .last_failure
                .as_deref()
                .unwrap_or("the journal worker did not answer");
            log::error!(
                "journal {}: {lost} row(s) could not be written before the stop ({why}); they are \
                 lost. Metrics and the kernel log still hold what they were about",
                self.place.path.display()
            );
        }
    }

    /// Something to write: rows, or facts or counts that changed.
    pub(super) fn has_work(&self) -> bool {
        !self.backlog.is_empty() || !self.dirty_facts.is_empty() || self.tally.has_unwritten()
    }

    /// When the writer must look again with nothing new arriving: a failed batch or a closed
    /// file at its retry time, else the idle deletion of old rows.
    pub(super) fn next_due(&self) -> Instant {
        if self.pending.is_some() || !self.open {
            return self.retry_at;
        }
        match self.last_prune {
            Some(at) => at + IDLE_PRUNE_EVERY,
            None => Instant::now(),
        }
    }

    /// A retry now (the stop's last batch).
    pub(super) fn retry_now(&mut self) {
        self.retry_at = Instant::now();
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
        let taken = self.xids.take_reports();
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

    pub(super) fn push(&mut self, event: Event) {
        self.queue(Pending::Insert { event, group: None });
    }

    fn queue(&mut self, pending: Pending) {
        if self.backlog.len() >= MAX_BACKLOG {
            self.backlog.remove(0);
            self.status_now.dropped += 1;
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
        }
    }

    fn gpu_at(&self, pci_bus_id: &str) -> Option<GpuRef> {
        self.facts
            .values()
            .find(|f| f.pci_bus_id == pci_bus_id && !pci_bus_id.is_empty())
            .map(GpuFacts::gpu_ref)
            .or_else(|| {
                (!pci_bus_id.is_empty()).then(|| GpuRef {
                    pci_bus_id: pci_bus_id.to_string(),
                    ..Default::default()
                })
            })
    }

    /// Storms whose minute is over (all of them at stop): one row each with the count not
    /// recorded one by one.
    fn storm_rows(&mut self, now: f64, stopping: bool) {
        for row in self.xids.storm_rows(now, stopping) {
            let (bus, xid, n, first) = (row.pci_bus_id, row.xid, row.reports, row.first);
            let gpu = self.gpu_at(&bus);
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
        for device in &snapshot.devices {
            self.look_at_gpu(device, snapshot, now);
        }
        self.look_at_node(snapshot, now);
    }

    /// Looks at the newest snapshot (what a queued row may need to name its GPU); false
    /// while nothing is published (the first poll round runs): rows wait for the GPUs' names.
    pub(super) fn look_at_latest(&mut self) -> bool {
        let snapshot = self.store.latest();
        self.look_at(&snapshot);
        snapshot.generation > 0
    }

    fn look_at_gpu(&mut self, device: &crate::model::DeviceSnapshot, snapshot: &Snapshot, now: f64) {
        // A round that changed nothing the journal records (most do): passed over.
        let known = self.facts.get(&device.identity.uuid);
        if known.is_some_and(|f| f.episodes.is_empty())
            && self
                .seen
                .get(&device.identity.uuid)
                .is_some_and(|s| s.unchanged(device, snapshot))
        {
            #[cfg(debug_assertions)]
            if let Some(last) = known {
                super::seen::assert_nothing_missed(last, device, snapshot, now);
            }
            return;
        }
        let uuid = device.identity.uuid.clone();
        // Taken out (not cloned) and put back below: this runs for every GPU every round.
        let last = self.facts.remove(&uuid);
        let mut new = facts::facts_of(device, snapshot, last.as_ref(), now);
        if last.is_none()
            && let Some(previous) = self
                .facts
                .values()
                .find(|f| f.pci_bus_id == new.pci_bus_id && f.uuid != new.uuid && !f.pci_bus_id.is_empty())
                .cloned()
        {
            self.board_swapped(
                &previous,
                &new,
                device,
                now,
                snapshot.health_limits.validate_after_clear,
            );
        }
        for event in facts::changes(last.as_ref(), &mut new, facts::ProbeNow::of(snapshot, &uuid), now) {
            self.push(event);
        }
        // Known from before a restart: this run's first reading of its counters.
        if !self.looked_at.contains(&uuid) {
            self.looked_at.insert(uuid.clone());
            if last.is_some() {
                for event in facts::first_readings(&new, now, "at start") {
                    self.push(event);
                }
            }
        }
        self.note_persistence(&uuid, snapshot, &new, now);
        if !last.as_ref().is_some_and(|last| last.same_stored_facts(&new)) {
            self.dirty_facts.insert(uuid.clone());
        }
        self.seen.insert(uuid.clone(), LastSeen::of(device, snapshot));
        self.facts.insert(uuid, new);
    }

    /// `new` took the slot of the board `previous` (a swap): a row, the verdict's notice, a
    /// validation where asked for, and the old board's facts no longer at this address.
    fn board_swapped(
        &mut self,
        previous: &GpuFacts,
        new: &GpuFacts,
        device: &crate::model::DeviceSnapshot,
        now: f64,
        validate: bool,
    ) {
        let row = self.swaps.record(previous, new, device.identity.vendor, now, validate);
        self.push(row);
        // The old board's facts stay (its history keeps its serial), but no longer at
        // this address.
        self.seen.remove(&previous.uuid);
        if let Some(old) = self.facts.get_mut(&previous.uuid) {
            old.pci_bus_id = String::new();
            self.dirty_facts.insert(previous.uuid.clone());
        }
    }

    /// A row each time gpuwarden turned a GPU's persistence mode on.
    fn note_persistence(&mut self, uuid: &str, snapshot: &Snapshot, facts: &GpuFacts, now: f64) {
        let enabled = snapshot.persistence_enabled(uuid);
        let before = self.persistence_enabled.get(uuid).copied().unwrap_or(0);
        if enabled == before {
            return;
        }
        self.persistence_enabled.insert(uuid.to_string(), enabled);
        if enabled > before {
            self.push(Event::new(
                now,
                Kind::Persistence,
                Some(facts.gpu_ref()),
                "gpuwarden turned persistence mode on".into(),
                json!({"times_since_start": enabled}),
            ));
        }
    }

    fn look_at_node(&mut self, snapshot: &Snapshot, now: f64) {
        let missing: BTreeSet<String> = snapshot.missing_gpus().map(|g| g.pci_bus_id.clone()).collect();
        let new: Vec<String> = missing.difference(&self.missing).cloned().collect();
        for bus in &new {
            let driver = snapshot
                .pci_gpus
                .iter()
                .find(|g| &g.pci_bus_id == bus)
                .and_then(|g| g.driver.clone());
            self.push(Event::new(
                now,
                Kind::PciMissing,
                Some(GpuRef {
                    pci_bus_id: bus.clone(),
                    ..Default::default()
                }),
                format!("a GPU on the PCI bus at {bus} that no backend enumerates"),
                json!({"driver": driver}),
            ));
        }
        self.missing = missing;
        for row in self.nic_rows.look(snapshot, now) {
            self.push(row);
        }
        for row in self.validation_rows.look(snapshot, now) {
            self.push(row);
        }
        for row in self.remediation_rows.look(snapshot, now) {
            self.push(row);
        }
    }

    fn end_open_episodes(&mut self) {
        let mut rows = Vec::new();
        for f in self.facts.values_mut() {
            let gpu = Some(f.gpu_ref());
            for (reason, (start, last)) in std::mem::take(&mut f.episodes) {
                rows.push(facts::episode_event(&reason, start, last, &gpu));
            }
        }
        for row in rows {
            self.push(row);
        }
    }

    /// The request that opens the file when it is not known good and a retry is due (in a
    /// worker, which moves a damaged file aside); None when it is open or not due.
    pub(super) fn open_request(&self) -> Option<Request> {
        if self.open || Instant::now() < self.retry_at {
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
                self.outage
                    .recovered(format!("journal {}: writing again", self.place.path.display()));
                self.open = true;
                self.last_failure = None;
                self.status_now.up = true;
                self.status_now.bytes = bytes;
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
        self.dirty_facts.extend(self.facts.keys().cloned());
    }

    fn failed(&mut self, e: &Failure) {
        self.last_failure = Some(e.to_string());
        self.outage.failed(format!(
            "journal {}: cannot write: {e}; {}. Metrics and health go on; the journal keeps up to \
             {MAX_BACKLOG} rows in memory and tries again every {}s",
            self.place.path.display(),
            e.advice,
            RETRY_EVERY.as_secs()
        ));
        self.open = false;
        self.status_now.up = false;
        self.status_now.write_errors += 1;
        self.retry_at = Instant::now() + RETRY_EVERY;
        if let Some(aside) = &e.moved_aside {
            // Found damaged while writing: a new file at once, the batch kept for it.
            self.moved_aside(&e.message, aside);
            self.retry_at = Instant::now();
        }
    }

    /// Each GPU's facts as the seed read them, before the file is open for writing: rows name
    /// their GPU, and a board swap is found, even while another program holds the file's
    /// write lock (the facts its first open brings add to these, never replace them).
    pub(super) fn start_from(&mut self, facts: Vec<GpuFacts>) {
        for f in facts {
            self.facts.insert(f.uuid.clone(), f);
        }
    }

    /// What the file knew at its first open: each GPU's facts, this boot's XID counts.
    fn load_state(&mut self, facts: Vec<GpuFacts>, counts: Vec<XidCount>) {
        if self.facts_loaded {
            return;
        }
        self.facts_loaded = true;
        for f in facts {
            self.facts.entry(f.uuid.clone()).or_insert(f);
        }
        self.tally.load(counts);
    }

    /// The batch to write now, taken out of the writer's hands: the one that failed (kept
    /// whole, written again with its id), else the backlog, the changed facts and counts, with
    /// old rows deleted when that is due. None when the file is not open or there is nothing
    /// to write (a node with nothing to write runs no worker but the hourly deletion).
    pub(super) fn take_batch(&mut self) -> Option<Batch> {
        if !self.open {
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
                if let Some(bytes) = bytes {
                    self.status_now.bytes = bytes;
                }
                if repeated {
                    log::info!(
                        "journal {}: batch {} had already been written (its worker answered late); not written twice",
                        self.place.path.display(),
                        batch.id
                    );
                }
                self.status_now.rows_written += rows;
                self.status_now.up = true;
                for done in self.waiting.1.drain(..) {
                    let _ = done.try_send(());
                }
                self.last_failure = None;
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
        self.backlog = backlog
            .into_iter()
            .map(|pending| match pending {
                Pending::Xid { group, event, severity } => Pending::Insert {
                    event: super::xid_rows::xid_event(&event, severity, |bus| self.gpu_at(bus)),
                    group: Some(group),
                },
                other => other,
            })
            .collect();
        let dirty = !self.backlog.is_empty() || !self.dirty_facts.is_empty() || self.tally.has_unwritten();
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
        self.dirty_facts.clear();
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
        let rows = super::refill::rows(&self.store.latest(), crate::model::unix_now());
        rows.into_iter().for_each(|row| self.push(row));
        self.dirty_facts.extend(self.facts.keys().cloned());
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
            facts: self
                .dirty_facts
                .iter()
                .filter_map(|uuid| self.facts.get(uuid).cloned())
                .collect(),
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
        let mut status = self.status_now.clone();
        status.dropped += self.shared.dropped.load(Ordering::Relaxed) + self.xids.reports_dropped();
        status.up = self.open && status.up;
        self.status.set_if_changed(Some(status));
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
