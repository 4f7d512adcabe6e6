//! A batch: what one write transaction of the journal holds (rows in the order they
//! happened, another source's report joined to an XID row, a row's fields amended, the GPUs'
//! facts and this boot's counts, old rows to prune), and how the worker writes it (worker.rs
//! runs it in its child and answers for it).

use crate::journal::event::{Event, Kind};
use crate::journal::writer::facts::GpuFacts;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::PathBuf;

/// A counted XID's running total in this boot: (PCI bus id, code, count, last seen).
pub type XidCount = (String, u32, u64, f64);

/// One transaction's worth: rows in the order they happened, the GPUs' changed facts, this
/// boot's changed XID counts, and old rows to delete when that is due.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Batch {
    /// Unique per batch of a daemon run: a batch written again (its worker answered after
    /// its time-out, so the writer tried again) is recognised and not written twice.
    #[serde(default)]
    pub id: String,
    pub path: PathBuf,
    pub boot_id: String,
    pub host: String,
    pub items: Vec<Item>,
    pub facts: Vec<GpuFacts>,
    pub counts: Vec<XidCount>,
    pub kmsg_sequence: Option<u64>,
    /// Where a kernel-log file was read up to (kept per path in `kernel_log_files`).
    #[serde(default)]
    pub file_position: Option<crate::xid::event::FilePosition>,
    pub prune: Option<Prune>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Item {
    /// A new row; `group` the XID store's event number for an XID row.
    Insert { event: Event, group: Option<u64> },
    /// Another source's report of XID event `group`, whose row an earlier batch wrote as
    /// `row` (or this batch does).
    Join {
        group: u64,
        row: Option<i64>,
        source: String,
        raw: Option<String>,
        kmsg_sequence: Option<u64>,
    },
    /// Fields set in the details of the `kind` row of `gpu_uuid` written at `at` (a clear's
    /// outcome, known one poll round after its row had to be in the file). A row that is gone
    /// is left.
    Amend(Amendment),
}

/// What [`Item::Amend`] changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Amendment {
    pub kind: Kind,
    pub gpu_uuid: String,
    pub at: f64,
    /// An object: each of its fields replaces the row's.
    pub set: serde_json::Value,
}

/// Rows older than `oldest` (Unix seconds) go, then the oldest until the file fits `max_bytes`;
/// this boot's XID counts and kernel-log position stay, however old.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prune {
    pub oldest: f64,
    pub max_bytes: u64,
    /// The minute's pruning is due; otherwise only a file over its cap is pruned.
    #[serde(default = "due_by_default")]
    pub due: bool,
}

fn due_by_default() -> bool {
    true
}

/// What a batch wrote: rows, (XID event number, row) for its XID rows, and whether it had
/// been written before.
pub(crate) type Written = (u64, Vec<(u64, i64)>, bool);

impl Batch {
    /// Rows inserted, the rows of the XID events it inserted, and whether it had been
    /// written before (then nothing is written again).
    pub(crate) fn write(&self, conn: &mut Connection) -> rusqlite::Result<Written> {
        let tx = conn.transaction()?;
        if !self.id.is_empty() {
            let now = crate::model::unix_now();
            let new = tx.execute(
                "INSERT OR IGNORE INTO batches (id, at) VALUES (?1, ?2)",
                params![self.id, now],
            )?;
            if new == 0 {
                return Ok((0, Vec::new(), true));
            }
        }
        let (rows, new_xid_rows) = self.write_items(&tx)?;
        self.write_facts_and_counts(&tx)?;
        let now = crate::model::unix_now();
        tx.execute(
            "INSERT INTO boots (boot_id, first_seen, host, kmsg_sequence) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (boot_id) DO UPDATE SET kmsg_sequence = max(coalesce(kmsg_sequence, 0), coalesce(?4, 0))",
            params![self.boot_id, now, self.host, self.kmsg_sequence.map(|s| s as i64)],
        )?;
        if let Some(position) = &self.file_position {
            tx.execute(
                "INSERT INTO kernel_log_files (path, device, inode, offset, tail, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (path) DO UPDATE SET device = ?2, inode = ?3, offset = ?4, tail = ?5, at = ?6",
                params![
                    position.path.to_string_lossy(),
                    position.device as i64,
                    position.inode as i64,
                    position.offset as i64,
                    position.tail,
                    now
                ],
            )?;
        }
        tx.commit()?;
        Ok((rows, new_xid_rows, false))
    }

    /// The batch's rows, each XID joined to its row (written in this batch or before): the
    /// number inserted and (XID event number, row) for the XID rows inserted.
    fn write_items(&self, tx: &rusqlite::Transaction) -> rusqlite::Result<(u64, Vec<(u64, i64)>)> {
        let mut rows = 0;
        let mut new_xid_rows: Vec<(u64, i64)> = Vec::new();
        let mut insert = tx.prepare(
            "INSERT INTO events (at, boot_id, host, kind, gpu_uuid, serial, pci_bus_id, summary, details)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        for item in &self.items {
            match item {
                Item::Insert { event, group } => {
                    let gpu = event.gpu.as_ref();
                    insert.execute(params![
                        event.at,
                        self.boot_id,
                        self.host,
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
                Item::Join {
                    group,
                    row,
                    source,
                    raw,
                    kmsg_sequence,
                } => {
                    let row = new_xid_rows
                        .iter()
                        .rev()
                        .find(|(g, _)| g == group)
                        .map(|(_, r)| *r)
                        .or(*row);
                    if let Some(row) = row {
                        join_xid(tx, row, source, raw.as_deref(), *kmsg_sequence)?;
                    }
                }
                Item::Amend(amendment) => amend(tx, amendment)?,
            }
        }
        Ok((rows, new_xid_rows))
    }

    /// Each GPU's facts and this boot's XID counts, replacing what the file had.
    fn write_facts_and_counts(&self, tx: &rusqlite::Transaction) -> rusqlite::Result<()> {
        let now = crate::model::unix_now();
        for f in &self.facts {
            let text = serde_json::to_string(f).unwrap_or_default();
            tx.execute(
                "INSERT INTO gpu_facts (uuid, pci_bus_id, serial, facts, at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (uuid) DO UPDATE SET pci_bus_id = ?2, serial = ?3, facts = ?4, at = ?5",
                params![f.uuid, f.pci_bus_id, f.serial, text, now],
            )?;
        }
        for (bus, xid, count, last) in &self.counts {
            tx.execute(
                "INSERT INTO xid_counts (boot_id, pci_bus_id, xid, count, last_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (boot_id, pci_bus_id, xid) DO UPDATE SET count = ?4, last_at = ?5",
                params![self.boot_id, bus, xid, *count as i64, last],
            )?;
        }
        Ok(())
    }
}

/// Sets an amendment's fields in its row's details (the newest such row, should a clock have
/// made two at the same time). A row that is gone is left.
fn amend(tx: &rusqlite::Transaction, amendment: &Amendment) -> rusqlite::Result<()> {
    let row = tx
        .query_row(
            "SELECT id FROM events WHERE gpu_uuid = ?1 AND at = ?2 AND kind = ?3 ORDER BY id DESC LIMIT 1",
            params![amendment.gpu_uuid, amendment.at, amendment.kind.name()],
            |r| r.get::<_, i64>(0),
        )
        .optional()?;
    let Some(row) = row else {
        return Ok(());
    };
    change_details(tx, row, |details| {
        if let (Some(details), Some(set)) = (details.as_object_mut(), amendment.set.as_object()) {
            details.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    })
}

/// Another source's report of an XID already written: its source, and the kernel-log line
/// when the row has none yet. A row that is gone (pruned, or in a file moved aside) is left.
fn join_xid(
    tx: &rusqlite::Transaction,
    row: i64,
    source: &str,
    raw: Option<&str>,
    kmsg_sequence: Option<u64>,
) -> rusqlite::Result<()> {
    change_details(tx, row, |details| {
        if let Some(sources) = details.get_mut("sources").and_then(|s| s.as_array_mut()) {
            let label = json!(source);
            if !sources.contains(&label) {
                sources.push(label);
            }
        }
        if details.get("raw").is_none_or(|r| r.is_null()) && raw.is_some() {
            details["raw"] = json!(raw);
            details["kmsg_sequence"] = json!(kmsg_sequence);
        }
    })
}

/// Rewrites row `row`'s details with what `change` makes of them (details that are not JSON
/// are taken as `{}`); a row that is gone is left.
fn change_details(
    tx: &rusqlite::Transaction,
    row: i64,
    change: impl FnOnce(&mut serde_json::Value),
) -> rusqlite::Result<()> {
    let Some(details) = tx
        .query_row("SELECT details FROM events WHERE id = ?1", [row], |r| {
            r.get::<_, String>(0)
        })
        .optional()?
    else {
        return Ok(());
    };
    let mut details: serde_json::Value = serde_json::from_str(&details).unwrap_or_else(|_| json!({}));
    change(&mut details);
    tx.execute(
        "UPDATE events SET details = ?1 WHERE id = ?2",
        params![details.to_string(), row],
    )?;
    Ok(())
}
