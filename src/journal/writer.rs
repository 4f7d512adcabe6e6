//! The journal's writer thread: takes events from the queue and from snapshot changes, and
//! writes them in one transaction at most once a second. When the database cannot be
//! written (locked, read-only, full disk) it keeps a bounded backlog, reports itself down,
//! logs once what to do and tries again every 30 s; a corrupt file is moved aside and a new
//! one started.

use super::db::{self, DbError};
use super::event::{Event, GpuRef, Kind};
use super::facts::{self, GpuFacts};
use super::{Message, Place, Shared};
use crate::model::{JournalStatus, Snapshot, unix_seconds};
use crate::store::{Store, Versioned};
use crate::xid::store::XidEvent;
use rusqlite::{Connection, params};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

/// At most one transaction per this.
const BATCH_EVERY: Duration = Duration::from_secs(1);
/// How long to wait before opening the file again after it failed.
const RETRY_EVERY: Duration = Duration::from_secs(30);
/// Rows kept while the database cannot be written; older ones are dropped (and counted).
const MAX_BACKLOG: usize = 10_000;
/// How often old rows are deleted (retention) and the size cap is checked.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// XID rows per (GPU, code) recorded one by one per minute; the rest of a storm is one
/// `xid_storm` row a minute with its count.
const XID_ROWS_PER_MINUTE: u32 = 10;
/// Remembered XID events whose row a second source's report may still update.
const MAX_XID_ROWS: usize = 4096;

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
    },
    XidJoined {
        group: u64,
        event: XidEvent,
    },
}

/// An XID storm on one (GPU, code): rows in the current minute, and reports not recorded.
#[derive(Default)]
struct Storm {
    minute_start: f64,
    rows: u32,
    suppressed: u64,
    first_suppressed: f64,
}

pub(super) struct Writer {
    place: Place,
    rx: Receiver<Box<Message>>,
    store: Arc<Store>,
    status: Arc<Versioned<Option<JournalStatus>>>,
    shared: Arc<Shared>,
    conn: Option<Connection>,
    retry_at: Instant,
    outage: crate::logging::Outage,
    backlog: Vec<Pending>,
    /// By UUID: what the journal last knew of each GPU (loaded when the file opens).
    facts: BTreeMap<String, GpuFacts>,
    facts_loaded: bool,
    /// GPUs whose stored facts are out of date.
    dirty_facts: BTreeSet<String>,
    /// XID event number -> its row, for another source's report of the same event.
    xid_rows: HashMap<u64, i64>,
    /// This boot's XID counts by (PCI bus id, code), seeded from the file.
    xid_counts: BTreeMap<(String, u32), (u64, f64)>,
    dirty_counts: BTreeSet<(String, u32)>,
    kmsg_sequence: Option<u64>,
    storms: HashMap<(String, u32), Storm>,
    last_generation: u64,
    missing: BTreeSet<String>,
    persistence_enabled: BTreeMap<String, u64>,
    status_now: JournalStatus,
    last_prune: Option<Instant>,
}

impl Writer {
    pub(super) fn new(
        place: Place,
        rx: Receiver<Box<Message>>,
        store: Arc<Store>,
        status: Arc<Versioned<Option<JournalStatus>>>,
        shared: Arc<Shared>,
    ) -> Writer {
        Writer {
            place,
            rx,
            store,
            status,
            shared,
            conn: None,
            retry_at: Instant::now(),
            outage: Default::default(),
            backlog: Vec::new(),
            facts: BTreeMap::new(),
            facts_loaded: false,
            dirty_facts: BTreeSet::new(),
            xid_rows: HashMap::new(),
            xid_counts: BTreeMap::new(),
            dirty_counts: BTreeSet::new(),
            kmsg_sequence: None,
            storms: HashMap::new(),
            last_generation: 0,
            missing: BTreeSet::new(),
            persistence_enabled: BTreeMap::new(),
            status_now: JournalStatus::default(),
            last_prune: None,
        }
    }

    pub(super) fn run(mut self, stop: crate::stop::Stop) {
        self.open();
        self.push(self.daemon_event("started"));
        let mut next_batch = Instant::now();
        loop {
            let wait = next_batch.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait.min(Duration::from_millis(500))) {
                Ok(message) => self.take(*message),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if stop.is_stopped() {
                break;
            }
            // Nothing published yet (the first poll round runs): rows wait for the GPUs' names.
            if Instant::now() >= next_batch && self.store.latest().generation > 0 {
                self.look_at_snapshot();
                self.flush();
                self.prune_when_due();
                self.publish_status();
                next_batch = Instant::now() + BATCH_EVERY;
            }
        }
        // The last batch: what the queue still holds, the slowdowns still going on, and the stop.
        while let Ok(message) = self.rx.try_recv() {
            self.take(*message);
        }
        self.look_at_snapshot();
        self.storm_rows(Self::now(), true);
        self.end_open_episodes();
        self.push(self.daemon_event("stopped"));
        self.flush();
        self.publish_status();
    }

    fn now() -> f64 {
        unix_seconds(SystemTime::now())
    }

    fn daemon_event(&self, what: &str) -> Event {
        Event::new(
            Self::now(),
            Kind::Daemon,
            None,
            format!("gpuwarden {} {what}", env!("CARGO_PKG_VERSION")),
            json!({"version": env!("CARGO_PKG_VERSION"), "pid": std::process::id()}),
        )
    }

    fn push(&mut self, event: Event) {
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
            Message::XidCounted { group, event } => self.xid_counted(group, event),
            Message::XidJoined { group, event } => {
                self.note_sequence(&event);
                self.queue(Pending::XidJoined { group, event });
            }
        }
    }

    fn note_sequence(&mut self, event: &XidEvent) {
        if event.kmsg_sequence.is_some() {
            self.kmsg_sequence = self.kmsg_sequence.max(event.kmsg_sequence);
        }
    }

    /// A counted XID: into this boot's counts always; a row of its own unless its (GPU,
    /// code) is in a storm.
    fn xid_counted(&mut self, group: u64, event: XidEvent) {
        self.note_sequence(&event);
        let at = unix_seconds(event.at);
        let key = (event.pci_bus_id.clone(), event.xid);
        let count = self.xid_counts.entry(key.clone()).or_insert((0, at));
        count.0 += 1;
        count.1 = count.1.max(at);
        self.dirty_counts.insert(key.clone());
        let storm = self.storms.entry(key).or_default();
        if at - storm.minute_start >= 60.0 || at < storm.minute_start {
            storm.minute_start = at;
            storm.rows = 0;
        }
        if storm.rows >= XID_ROWS_PER_MINUTE {
            if storm.suppressed == 0 {
                storm.first_suppressed = at;
            }
            storm.suppressed += 1;
            return;
        }
        storm.rows += 1;
        self.queue(Pending::Xid { group, event });
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

    fn xid_event(&self, event: &XidEvent) -> Event {
        let entry = crate::xid::catalog::lookup(event.xid);
        let severity = crate::xid::catalog::severity(event.xid);
        let name = entry.map(|e| e.name).unwrap_or("unknown");
        Event::new(
            unix_seconds(event.at),
            Kind::Xid,
            self.gpu_at(&event.pci_bus_id),
            format!("Xid {} ({name}, {})", event.xid, severity.label()),
            json!({
                "xid": event.xid,
                "name": name,
                "severity": severity.label(),
                "nvidia_action": entry.map(|e| e.nvidia_action),
                "action": entry.map(|e| e.action()),
                "sources": [event.source.label()],
                "raw": event.raw,
                "kmsg_sequence": event.kmsg_sequence,
                "gpu_instance": event.gpu_instance,
            }),
        )
    }

    /// Storms whose minute is over (all of them at stop): one row each with the count not
    /// recorded one by one.
    fn storm_rows(&mut self, now: f64, stopping: bool) {
        let mut rows = Vec::new();
        for ((bus, xid), storm) in &mut self.storms {
            if storm.suppressed > 0 && (stopping || now - storm.minute_start >= 60.0) {
                rows.push((bus.clone(), *xid, storm.suppressed, storm.first_suppressed));
                storm.suppressed = 0;
            }
        }
        for (bus, xid, n, first) in rows {
            let gpu = self.gpu_at(&bus);
            self.push(Event::new(
                first,
                Kind::XidStorm,
                gpu,
                format!("{n} more reports of Xid {xid} within a minute, counted but not recorded one by one"),
                json!({"xid": xid, "reports": n}),
            ));
        }
    }

    /// Compares the newest snapshot with what the journal knew, GPU by GPU.
    fn look_at_snapshot(&mut self) {
        let snapshot = self.store.latest();
        if snapshot.generation == self.last_generation || snapshot.devices.is_empty() {
            return;
        }
        self.last_generation = snapshot.generation;
        let now = Self::now();
        self.storm_rows(now, false);
        for device in &snapshot.devices {
            self.look_at_gpu(device, &snapshot, now);
        }
        self.look_at_node(&snapshot, now);
    }

    fn look_at_gpu(&mut self, device: &crate::model::DeviceSnapshot, snapshot: &Snapshot, now: f64) {
        let uuid = device.identity.uuid.clone();
        let last = self.facts.get(&uuid).cloned();
        let mut new = facts::facts_of(device, snapshot, last.as_ref(), now);
        if last.is_none()
            && let Some(previous) = self
                .facts
                .values()
                .find(|f| f.pci_bus_id == new.pci_bus_id && f.uuid != new.uuid && !f.pci_bus_id.is_empty())
                .cloned()
        {
            self.push(facts::board_swap(&previous, &new, now));
            // The old board's facts stay (its history keeps its serial), but no longer at
            // this address.
            if let Some(old) = self.facts.get_mut(&previous.uuid) {
                old.pci_bus_id = String::new();
                self.dirty_facts.insert(previous.uuid.clone());
            }
        }
        let probe = snapshot.probe.reports.get(&uuid);
        for event in facts::changes(last.as_ref(), &mut new, probe, now) {
            self.push(event);
        }
        let enabled = snapshot
            .persistence_attempts
            .get(&(uuid.clone(), "enabled"))
            .copied()
            .unwrap_or(0);
        let before = self.persistence_enabled.insert(uuid.clone(), enabled).unwrap_or(0);
        if enabled > before {
            self.push(Event::new(
                now,
                Kind::Persistence,
                Some(new.gpu_ref()),
                "gpuwarden turned persistence mode on".into(),
                json!({"times_since_start": enabled}),
            ));
        }
        if last.as_ref().map(GpuFacts::key) != Some(new.key()) {
            self.dirty_facts.insert(uuid.clone());
        }
        self.facts.insert(uuid, new);
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

    /// Opens the file when it is not open and a retry is due; moves a corrupt one aside.
    fn open(&mut self) {
        if self.conn.is_some() || Instant::now() < self.retry_at {
            return;
        }
        let path = self.place.path.clone();
        let opened = match db::open_for_writing(&path) {
            Err(e) if e.is_corrupt() => self.set_aside(&e).and_then(|()| db::open_for_writing(&path)),
            other => other,
        };
        match opened {
            Ok(conn) => {
                self.outage
                    .recovered(format!("journal {}: writing again", path.display()));
                self.conn = Some(conn);
                self.load_state();
            }
            Err(e) => self.failed(&e),
        }
    }

    /// Moves a damaged file (found by `e`) aside, saying where; Err when it cannot be moved.
    fn set_aside(&self, e: &DbError) -> Result<(), DbError> {
        let path = &self.place.path;
        match db::move_aside(path) {
            Ok(aside) => {
                log::warn!(
                    "journal {}: {e}; moved it to {} and started a new one (the old one can be \
                     inspected with sqlite3)",
                    path.display(),
                    aside.display()
                );
                Ok(())
            }
            Err(io) => Err(DbError::Corrupt {
                path: path.clone(),
                detail: format!("{e}; moving it aside failed: {io}"),
            }),
        }
    }

    fn move_aside_and_reopen(&mut self, e: &DbError) {
        match self.set_aside(e) {
            Ok(()) => {
                self.retry_at = Instant::now();
                self.open();
            }
            Err(e) => log::warn!("journal {}: {e}", self.place.path.display()),
        }
    }

    fn failed(&mut self, e: &DbError) {
        self.outage.failed(format!(
            "journal {}: cannot write: {e}; {}. Metrics and health go on; the journal keeps up to \
             {MAX_BACKLOG} rows in memory and tries again every {}s",
            self.place.path.display(),
            e.advice(),
            RETRY_EVERY.as_secs()
        ));
        self.conn = None;
        self.status_now.up = false;
        self.status_now.write_errors += 1;
        self.retry_at = Instant::now() + RETRY_EVERY;
    }

    /// What the file knows at open: each GPU's facts, this boot's XID counts.
    fn load_state(&mut self) {
        let Some(conn) = &self.conn else { return };
        if !self.facts_loaded {
            match super::read::load_facts(conn) {
                Ok(facts) => {
                    for f in facts {
                        self.facts.entry(f.uuid.clone()).or_insert(f);
                    }
                    self.facts_loaded = true;
                }
                Err(e) => log::warn!("journal: cannot read the GPUs' last state: {e}"),
            }
            match super::read::xid_counts(conn, &self.place.boot_id) {
                Ok(counts) => {
                    for ((bus, xid), n, last) in counts {
                        let entry = self.xid_counts.entry((bus, xid)).or_insert((0, 0.0));
                        entry.0 += n;
                        entry.1 = entry.1.max(unix_seconds(last));
                    }
                }
                Err(e) => log::warn!("journal: cannot read this boot's XID counts: {e}"),
            }
        }
    }

    /// Writes the backlog, the changed facts and counts in one transaction.
    fn flush(&mut self) {
        self.open();
        let backlog = std::mem::take(&mut self.backlog);
        self.backlog = backlog
            .into_iter()
            .map(|pending| match pending {
                Pending::Xid { group, event } => Pending::Insert {
                    event: self.xid_event(&event),
                    group: Some(group),
                },
                other => other,
            })
            .collect();
        let dirty = !self.backlog.is_empty() || !self.dirty_facts.is_empty() || !self.dirty_counts.is_empty();
        let Some(conn) = self.conn.as_mut() else { return };
        if !dirty {
            return;
        }
        let batch = Batch {
            place: &self.place,
            backlog: &self.backlog,
            facts: self
                .dirty_facts
                .iter()
                .filter_map(|uuid| self.facts.get(uuid))
                .collect(),
            counts: self
                .dirty_counts
                .iter()
                .filter_map(|key| self.xid_counts.get(key).map(|c| (key, *c)))
                .collect(),
            kmsg_sequence: self.kmsg_sequence,
            xid_rows: &self.xid_rows,
        };
        match batch.write(conn) {
            Ok((rows, new_xid_rows)) => {
                // Give SQLite's page cache back between batches: the daemon idles far more
                // than it writes (docs/performance.md).
                let _ = conn.execute_batch("PRAGMA shrink_memory");
                crate::logging::trim_heap();
                self.status_now.rows_written += rows;
                self.status_now.up = true;
                if self.xid_rows.len() + new_xid_rows.len() > MAX_XID_ROWS {
                    self.xid_rows.clear();
                }
                self.xid_rows.extend(new_xid_rows);
                self.backlog.clear();
                self.dirty_facts.clear();
                self.dirty_counts.clear();
            }
            Err(e) => {
                let e = DbError::Sqlite {
                    path: self.place.path.clone(),
                    source: e,
                };
                self.failed(&e);
                if e.is_corrupt() {
                    // Found damaged while writing: moved aside at once, the batch kept for the
                    // new file.
                    self.move_aside_and_reopen(&e);
                }
            }
        }
    }

    /// Deletes rows past the retention, then the oldest until the file is under its cap.
    fn prune_when_due(&mut self) {
        if self.last_prune.is_some_and(|t| t.elapsed() < PRUNE_EVERY) {
            return;
        }
        self.last_prune = Some(Instant::now());
        let Some(conn) = &self.conn else { return };
        let oldest = Self::now() - self.place.retention.as_secs_f64();
        match db::prune(conn, oldest, self.place.max_bytes) {
            Ok(bytes) => self.status_now.bytes = bytes,
            Err(e) => log::warn!("journal: cannot delete old rows: {e}"),
        }
    }

    fn publish_status(&mut self) {
        let mut status = self.status_now.clone();
        status.dropped += self.shared.dropped.load(Ordering::Relaxed);
        status.up = self.conn.is_some() && status.up;
        self.status.set_if_changed(Some(status));
    }
}

type XidCountRow<'a> = (&'a (String, u32), (u64, f64));

/// One transaction's worth.
struct Batch<'a> {
    place: &'a Place,
    backlog: &'a [Pending],
    facts: Vec<&'a GpuFacts>,
    /// ((PCI bus id, code), (count, last seen)).
    counts: Vec<XidCountRow<'a>>,
    kmsg_sequence: Option<u64>,
    xid_rows: &'a HashMap<u64, i64>,
}

impl Batch<'_> {
    /// Rows inserted, and the rows of the XID events it inserted.
    fn write(&self, conn: &mut Connection) -> rusqlite::Result<(u64, Vec<(u64, i64)>)> {
        let tx = conn.transaction()?;
        let mut rows = 0;
        let mut new_xid_rows: Vec<(u64, i64)> = Vec::new();
        {
            let mut insert = tx.prepare(
                "INSERT INTO events (at, boot_id, host, kind, gpu_uuid, serial, pci_bus_id, summary, details)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?;
            for pending in self.backlog {
                match pending {
                    Pending::Insert { event, group } => {
                        let gpu = event.gpu.as_ref();
                        insert.execute(params![
                            event.at,
                            self.place.boot_id,
                            self.place.host,
                            event.kind.name(),
                            gpu.map(|g| g.uuid.as_str()).filter(|u| !u.is_empty()),
                            gpu.and_then(|g| g.serial.as_deref()),
                            gpu.map(|g| g.pci_bus_id.as_str()),
                            event.summary,
                            event.details.to_string(),
                        ])?;
                        rows += 1;
                        if let Some(group) = group {
                            new_xid_rows.push((*group, tx.last_insert_rowid()));
                        }
                    }
                    // Made into rows before the batch (flush).
                    Pending::Xid { .. } => {}
                    Pending::XidJoined { group, event } => {
                        let row = new_xid_rows
                            .iter()
                            .rev()
                            .find(|(g, _)| g == group)
                            .map(|(_, r)| *r)
                            .or_else(|| self.xid_rows.get(group).copied());
                        if let Some(row) = row {
                            join_xid(&tx, row, event)?;
                        }
                    }
                }
            }
        }
        for f in &self.facts {
            let text = serde_json::to_string(f).unwrap_or_default();
            tx.execute(
                "INSERT INTO gpu_facts (uuid, pci_bus_id, serial, facts, at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (uuid) DO UPDATE SET pci_bus_id = ?2, serial = ?3, facts = ?4, at = ?5",
                params![f.uuid, f.pci_bus_id, f.serial, text, unix_seconds(SystemTime::now())],
            )?;
        }
        for ((bus, xid), (count, last)) in &self.counts {
            tx.execute(
                "INSERT INTO xid_counts (boot_id, pci_bus_id, xid, count, last_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (boot_id, pci_bus_id, xid) DO UPDATE SET count = ?4, last_at = ?5",
                params![self.place.boot_id, bus, xid, *count as i64, last],
            )?;
        }
        tx.execute(
            "INSERT INTO boots (boot_id, first_seen, host, kmsg_sequence) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (boot_id) DO UPDATE SET kmsg_sequence = max(coalesce(kmsg_sequence, 0), coalesce(?4, 0))",
            params![
                self.place.boot_id,
                unix_seconds(SystemTime::now()),
                self.place.host,
                self.kmsg_sequence.map(|s| s as i64)
            ],
        )?;
        tx.commit()?;
        Ok((rows, new_xid_rows))
    }
}

/// Another source's report of an XID already written: its source, and the kernel-log line
/// when the row has none yet.
fn join_xid(tx: &rusqlite::Transaction, row: i64, event: &XidEvent) -> rusqlite::Result<()> {
    let details: String = tx.query_row("SELECT details FROM events WHERE id = ?1", [row], |r| r.get(0))?;
    let mut details: serde_json::Value = serde_json::from_str(&details).unwrap_or_else(|_| json!({}));
    if let Some(sources) = details.get_mut("sources").and_then(|s| s.as_array_mut()) {
        let label = json!(event.source.label());
        if !sources.contains(&label) {
            sources.push(label);
        }
    }
    if details.get("raw").is_none_or(|r| r.is_null()) && event.raw.is_some() {
        details["raw"] = json!(event.raw);
        details["kmsg_sequence"] = json!(event.kmsg_sequence);
    }
    tx.execute(
        "UPDATE events SET details = ?1 WHERE id = ?2",
        params![details.to_string(), row],
    )?;
    Ok(())
}
