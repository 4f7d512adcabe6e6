//! Reading the journal: the rows `gpuwarden events`, `/api/v1/events` and the status page
//! show, the facts and counts the writer starts from, and what a restart takes over.
//! Everything here but the writer's helpers opens the file read-only.

use crate::journal::Seed;
use crate::journal::event::Kind;
use crate::journal::store::db::{self, DbError};
use crate::journal::writer::facts::GpuFacts;
use crate::xid::store::SeedCounts;
use rusqlite::{Connection, params_from_iter, types::Value as SqlValue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

/// At most this many rows in one answer (the HTTP API's and the CLI's default).
pub(crate) const DEFAULT_LIMIT: usize = 1000;
pub(crate) const MAX_LIMIT: usize = 100_000;
/// At most this many rows in one answer of `/api/v1/events`: a page, with a `Link` to the
/// next (older) one. Two readers at once then hold a few MiB, not hundreds.
pub(crate) const MAX_HTTP_LIMIT: usize = 5000;

/// One row as read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub id: i64,
    /// Unix seconds.
    pub at: f64,
    pub boot_id: String,
    pub host: String,
    pub kind: String,
    pub gpu_uuid: Option<String>,
    pub serial: Option<String>,
    pub pci_bus_id: Option<String>,
    pub summary: String,
    pub details: serde_json::Value,
}

impl Row {
    /// Whether the row is of `kind` (a row a newer daemon wrote may be of a kind this one
    /// does not know, so the column stays the word it read).
    pub fn is(&self, kind: Kind) -> bool {
        self.kind == kind.name()
    }
}

/// Which GPU: its index as the journal last knew it, or its UUID.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GpuSelector {
    Index(u32),
    Uuid(String),
}

impl GpuSelector {
    pub(crate) fn parse(text: &str) -> GpuSelector {
        match text.parse::<u32>() {
            Ok(index) => GpuSelector::Index(index),
            Err(_) => GpuSelector::Uuid(text.to_string()),
        }
    }
}

/// A query over the rows, newest last.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    /// Unix seconds; None: from the first row.
    pub since: Option<f64>,
    /// GPU UUIDs (resolved from a selector); empty: every row.
    pub gpus: Vec<String>,
    pub kinds: Vec<Kind>,
    pub limit: usize,
    /// Only rows before this one, by (time, row id): the next page of a paged answer.
    pub before: Option<(f64, i64)>,
    /// Leave out the baselines: a counter's reading at first sight or at a start (details
    /// `reading`), which say where a count stood, not that anything happened.
    pub hide_baselines: bool,
}

/// A query's parameter that does not parse; says what to write instead.
#[derive(Debug, thiserror::Error)]
pub(crate) enum QueryError {
    #[error("unknown kind {0:?}; the kinds are {known}", known = Kind::ALL.map(Kind::name).join(", "))]
    Kind(String),
    #[error("--since {text:?} is not a duration ({reason}); write it like 30m, 7d or 180d")]
    Since {
        text: String,
        reason: humantime::DurationError,
    },
}

/// A page cursor, `AT_ID` (the oldest row of the page before): Unix seconds and row id.
pub(crate) fn parse_before(text: &str) -> Option<(f64, i64)> {
    let (at, id) = text.rsplit_once('_')?;
    let at: f64 = at.parse().ok().filter(|a: &f64| a.is_finite())?;
    Some((at, id.parse().ok()?))
}

/// The cursor of the page after one whose oldest row is `row`.
pub(crate) fn cursor_after(row: &Row) -> String {
    format!("{}_{}", row.at, row.id)
}

/// Parses `--kind xid,health`: a clear error names the kinds there are.
pub(crate) fn parse_kinds(text: &str) -> Result<Vec<Kind>, QueryError> {
    text.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| Kind::from_name(k).ok_or_else(|| QueryError::Kind(k.to_string())))
        .collect()
}

/// The columns a row is selected with, in [`row_of`]'s order.
pub(crate) const ROW_COLUMNS: &str = "id, at, boot_id, host, kind, gpu_uuid, serial, pci_bus_id, summary, details";

/// A row selected with [`ROW_COLUMNS`]; details that are not JSON read as null (the row is
/// still shown, and still goes out).
pub(crate) fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let details: String = r.get(9)?;
    Ok(Row {
        id: r.get(0)?,
        at: r.get(1)?,
        boot_id: r.get(2)?,
        host: r.get(3)?,
        kind: r.get(4)?,
        gpu_uuid: r.get(5)?,
        serial: r.get(6)?,
        pci_bus_id: r.get(7)?,
        summary: r.get(8)?,
        details: serde_json::from_str(&details).unwrap_or(serde_json::Value::Null),
    })
}

/// Rows matching `query`, oldest first, the newest `limit` of them.
pub(crate) fn events(conn: &Connection, query: &Query) -> rusqlite::Result<Vec<Row>> {
    let mut sql = format!("SELECT {ROW_COLUMNS} FROM events WHERE 1");
    let mut values: Vec<SqlValue> = Vec::new();
    if let Some(since) = query.since {
        sql.push_str(" AND at >= ?");
        values.push(SqlValue::Real(since));
    }
    if !query.gpus.is_empty() {
        sql.push_str(&format!(" AND gpu_uuid IN ({})", vec!["?"; query.gpus.len()].join(",")));
        values.extend(query.gpus.iter().map(|g| SqlValue::Text(g.clone())));
    }
    if !query.kinds.is_empty() {
        sql.push_str(&format!(" AND kind IN ({})", vec!["?"; query.kinds.len()].join(",")));
        values.extend(query.kinds.iter().map(|k| SqlValue::Text(k.name().to_string())));
    }
    if query.hide_baselines {
        // CASE: json_extract would fail the whole query on a row whose details are not JSON.
        sql.push_str(" AND CASE WHEN json_valid(details) THEN json_extract(details, '$.reading') IS NULL ELSE 1 END");
    }
    if let Some((at, id)) = query.before {
        sql.push_str(" AND (at < ? OR (at = ? AND id < ?))");
        values.extend([SqlValue::Real(at), SqlValue::Real(at), SqlValue::Integer(id)]);
    }
    let limit = query.limit.clamp(1, MAX_LIMIT);
    sql.push_str(&format!(" ORDER BY at DESC, id DESC LIMIT {limit}"));
    let mut statement = conn.prepare(&sql)?;
    let mut rows: Vec<Row> = statement
        .query_map(params_from_iter(values), row_of)?
        .collect::<rusqlite::Result<_>>()?;
    rows.reverse();
    Ok(rows)
}

/// Every GPU's last known facts.
pub(crate) fn load_facts(conn: &Connection) -> rusqlite::Result<Vec<GpuFacts>> {
    let mut statement = conn.prepare("SELECT facts FROM gpu_facts ORDER BY at")?;
    let texts: Vec<String> = statement
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(texts
        .iter()
        .filter_map(|t| serde_json::from_str::<GpuFacts>(t).ok())
        .collect())
}

/// Every board `facts` knows, and the addresses it knew boards at.
pub(crate) fn known_boards(facts: &[GpuFacts]) -> crate::model::health::KnownBoards {
    let mut known = crate::model::health::KnownBoards::default();
    for facts in facts {
        if !facts.pci_bus_id.is_empty() {
            known.addresses.insert(facts.pci_bus_id.clone());
        }
        known.uuids.insert(facts.uuid.clone());
    }
    known
}

/// The GPU `selector` names, as the journal last knew it: by UUID, or the GPU last seen
/// with that index (a GPU that moved to another address is found by its UUID).
pub(crate) fn find_gpu(conn: &Connection, selector: &GpuSelector) -> rusqlite::Result<Option<GpuFacts>> {
    let facts = load_facts(conn)?;
    Ok(match selector {
        GpuSelector::Uuid(uuid) => facts.into_iter().find(|f| &f.uuid == uuid),
        // The newest facts with that index at an address (a swapped-out board has none).
        GpuSelector::Index(index) => facts
            .into_iter()
            .rev()
            .find(|f| f.index == *index && !f.pci_bus_id.is_empty()),
    })
}

/// Each GPU's index as the journal last knew it, by UUID.
pub(crate) fn gpu_indexes(conn: &Connection) -> rusqlite::Result<std::collections::BTreeMap<String, u32>> {
    Ok(load_facts(conn)?.into_iter().map(|f| (f.uuid, f.index)).collect())
}

/// This boot's XID counts.
pub(crate) fn xid_counts(conn: &Connection, boot_id: &str) -> rusqlite::Result<SeedCounts> {
    let mut statement = conn.prepare("SELECT pci_bus_id, xid, count, last_at FROM xid_counts WHERE boot_id = ?1")?;
    let rows = statement.query_map([boot_id], |r| {
        let last: f64 = r.get(3)?;
        Ok((
            (r.get::<_, String>(0)?, r.get::<_, u32>(1)?),
            r.get::<_, i64>(2)?.max(0) as u64,
            crate::model::from_unix_seconds(last),
        ))
    })?;
    rows.collect()
}

/// What a restart in boot `boot_id` takes over (read-only).
pub(crate) fn seed(path: &Path, boot_id: &str) -> Result<Seed, DbError> {
    let conn = db::open_read_only(path)?;
    let err = DbError::sqlite(path);
    let kmsg_sequence: Option<i64> = conn
        .query_row("SELECT kmsg_sequence FROM boots WHERE boot_id = ?1", [boot_id], |r| {
            r.get(0)
        })
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            other => Err(other),
        })
        .map_err(&err)?;
    Ok(Seed {
        answered: true,
        xid_counts: xid_counts(&conn, boot_id).map_err(&err)?,
        kmsg_sequence: kmsg_sequence.filter(|s| *s > 0).map(|s| s as u64),
        file_positions: file_positions(&conn).map_err(&err)?,
        kernel_lines: kernel_lines(&conn, boot_id).map_err(&err)?,
        clears: clears(&conn, boot_id).map_err(&err)?,
        board_swaps: board_swaps(&conn, SystemTime::now()).map_err(&err)?,
        facts: load_facts(&conn).map_err(&err)?,
        sxids: sxids(&conn, boot_id).map_err(&err)?,
        validations: validations(&conn).map_err(&err)?,
        probe_history: probe_history(&conn).map_err(&err)?,
        sdc: sdc(&conn).map_err(&err)?,
        remediation: remediation(&conn, boot_id, SystemTime::now()).map_err(&err)?,
    })
}

/// The most kernel-log files whose resume point a restart takes over, and this boot's XID lines.
const MAX_FILE_POSITIONS: usize = 16;
const MAX_KERNEL_LINES: usize = 8192;

/// Where each kernel-log file was read up to, newest first (a file the daemon wrote before
/// this table existed has none: read from the start as before).
fn file_positions(conn: &Connection) -> rusqlite::Result<Vec<crate::xid::event::FilePosition>> {
    if !has_table(conn, "kernel_log_files")? {
        return Ok(Vec::new());
    }
    let mut statement = conn.prepare(&format!(
        "SELECT path, device, inode, offset, tail FROM kernel_log_files ORDER BY at DESC LIMIT {MAX_FILE_POSITIONS}"
    ))?;
    let rows = statement.query_map([], |r| {
        let tail: Vec<u8> = r.get(4)?;
        Ok(crate::xid::event::FilePosition {
            path: std::path::PathBuf::from(r.get::<_, String>(0)?),
            device: r.get::<_, i64>(1)? as u64,
            inode: r.get::<_, i64>(2)? as u64,
            offset: r.get::<_, i64>(3)?.max(0) as u64,
            tail: tail.into_iter().take(crate::xid::event::TAIL_BYTES).collect(),
        })
    })?;
    rows.collect()
}

/// This boot's kernel-log lines of XID and SXID rows, newest first.
fn kernel_lines(conn: &Connection, boot_id: &str) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare(&format!(
        "SELECT json_extract(details, '$.raw') FROM events WHERE boot_id = ?1 AND kind IN ('xid', 'sxid') \
         AND json_extract(details, '$.raw') IS NOT NULL ORDER BY at DESC, id DESC LIMIT {MAX_KERNEL_LINES}"
    ))?;
    let rows = statement.query_map([boot_id], |r| r.get::<_, String>(0))?;
    rows.collect()
}

fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// What automatic remediation did in the last day and in this boot, from the `remediation`
/// rows that carry an attempt or a reboot mark: the resets count against the day's budget, a
/// failed one of this boot makes the ladder's step a reboot, and this boot's reboot mark stays.
pub(crate) fn remediation(
    conn: &Connection,
    boot_id: &str,
    now: SystemTime,
) -> rusqlite::Result<crate::model::remediation::Remediations> {
    use crate::model::remediation::{Attempt, MAX_ATTEMPTS, RESET_WINDOW_SECONDS, RebootRequired, Remediations};
    let since = crate::model::unix_seconds(now) - RESET_WINDOW_SECONDS;
    let mut statement = conn.prepare(
        "SELECT boot_id, details FROM (SELECT boot_id, details, at FROM events WHERE kind = 'remediation' \
         AND (at >= ?1 OR boot_id = ?2) ORDER BY at DESC LIMIT ?3) ORDER BY at",
    )?;
    let rows = statement.query_map(rusqlite::params![since, boot_id, 4 * MAX_ATTEMPTS as u32], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut out = Remediations::default();
    // Resets whose start is on record: each counts, with its outcome when that is too.
    let mut started: Vec<Attempt> = Vec::new();
    for row in rows {
        let (boot, details) = row?;
        let this_boot = boot == boot_id;
        // A row the daemon did not write (or an older shape) is left out, not trusted.
        let Ok(details) = serde_json::from_str::<serde_json::Value>(&details) else {
            continue;
        };
        if let Some(Ok(mut attempt)) = details
            .get("attempt")
            .map(|a| serde_json::from_value::<Attempt>(a.clone()))
        {
            attempt.this_boot = this_boot;
            started.retain(|s| (s.uuid.as_str(), s.started) != (attempt.uuid.as_str(), attempt.started));
            out.keep(attempt);
        }
        if let Some(Ok(mut attempt)) = details
            .get("attempt_started")
            .map(|a| serde_json::from_value::<Attempt>(a.clone()))
        {
            attempt.this_boot = this_boot;
            started.push(attempt);
        }
        if let Some(Ok(mark)) = details
            .get("reboot_required")
            .filter(|_| this_boot)
            .map(|m| serde_json::from_value::<RebootRequired>(m.clone()))
        {
            out.reboot_required = Some(mark);
        }
    }
    // A start with no outcome: the daemon stopped or died during the reset.
    for attempt in started {
        out.keep(attempt);
    }
    out.attempts.sort_by(|a, b| a.started.total_cmp(&b.started));
    Ok(out)
}

/// Each GPU's latest validation from its newest `validation` row, whatever the boot: a reboot
/// between a clear and its probe does not let the GPU skip it.
pub(crate) fn validations(conn: &Connection) -> rusqlite::Result<crate::model::health::Validations> {
    let rows = newest_per_gpu(conn, "validation", "1 = ?1", 1)?;
    Ok(rows
        .into_iter()
        .filter_map(|(uuid, (_, details))| {
            let validation = serde_json::from_value(details.get("validation")?.clone()).ok()?;
            Some((uuid, validation))
        })
        .collect())
}

/// The most probe rows a restart's seed reads (a node's GPUs times their history).
const MAX_PROBE_ROWS: u32 = 64 * crate::model::probe::MAX_HISTORY as u32;

/// Each GPU's latest [`MAX_HISTORY`](crate::model::probe::MAX_HISTORY) probes' figures,
/// oldest first, from the `probe` rows (whatever the boot: a baseline outlives reboots).
pub(crate) fn probe_history(
    conn: &Connection,
) -> rusqlite::Result<BTreeMap<String, Vec<crate::model::probe::ProbeFigures>>> {
    let mut statement = conn.prepare(
        "SELECT gpu_uuid, details FROM (SELECT gpu_uuid, details, at, \
         ROW_NUMBER() OVER (PARTITION BY gpu_uuid ORDER BY at DESC) AS newest \
         FROM events WHERE kind = 'probe' AND gpu_uuid IS NOT NULL) \
         WHERE newest <= ?1 ORDER BY at LIMIT ?2",
    )?;
    let rows = statement.query_map(
        rusqlite::params![crate::model::probe::MAX_HISTORY as u32, MAX_PROBE_ROWS],
        |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
    )?;
    let mut out: BTreeMap<String, Vec<crate::model::probe::ProbeFigures>> = BTreeMap::new();
    for row in rows {
        let (uuid, details) = row?;
        // A row the daemon did not write (or an older shape) is left out, not trusted.
        let Ok(report) = serde_json::from_str::<crate::model::probe::ProbeReport>(&details) else {
            continue;
        };
        out.entry(uuid)
            .or_default()
            .push(crate::model::probe::ProbeFigures::of(&report));
    }
    Ok(out)
}

/// The most `sdc` rows a restart's seed reads.
const MAX_SDC_ROWS: u32 = 1000;

/// The correctness canary's state from the `sdc` rows, whatever the boot: each GPU's newest
/// suspect unless its suspicion was lifted (a `lifted` row) or a clear of that GPU came after it (a clear in an earlier boot counts too:
/// wrong results are sticky only until a person clears them), and each key's newest
/// agreement digest. Rows that do not parse are left out, not trusted.
pub(crate) fn sdc(conn: &Connection) -> rusqlite::Result<crate::journal::SdcSeed> {
    use crate::model::probe::{SdcKey, SdcReference, SdcSuspect};
    let mut statement =
        conn.prepare("SELECT gpu_uuid, details FROM events WHERE kind = 'sdc' ORDER BY at DESC, id DESC LIMIT ?1")?;
    let rows = statement.query_map(rusqlite::params![MAX_SDC_ROWS], |r| {
        Ok((r.get::<_, Option<String>>(0)?, r.get::<_, String>(1)?))
    })?;
    let mut suspects = BTreeMap::new();
    let mut references = BTreeMap::new();
    // A GPU's newest row decides: a suspect, or its suspicion lifted.
    let mut decided = std::collections::BTreeSet::new();
    for row in rows {
        let (uuid, details) = row?;
        let Ok(details) = serde_json::from_str::<serde_json::Value>(&details) else {
            continue;
        };
        if let (Some(uuid), Some(lift)) = (&uuid, details.get("lifted")) {
            if serde_json::from_value::<crate::model::probe::SdcLift>(lift.clone()).is_ok() {
                decided.insert(uuid.clone());
            }
        } else if let (Some(uuid), Some(suspect)) = (uuid, details.get("suspect")) {
            if let Ok(suspect) = serde_json::from_value::<SdcSuspect>(suspect.clone())
                && decided.insert(uuid.clone())
            {
                suspects.insert(uuid, suspect);
            }
        } else if let (Some(key), Some(reference)) = (details.get("key"), details.get("reference"))
            && let (Ok(key), Ok(reference)) = (
                serde_json::from_value::<SdcKey>(key.clone()),
                serde_json::from_value::<SdcReference>(reference.clone()),
            )
        {
            references.entry(key).or_insert(reference);
        }
    }
    let cleared = newest_per_gpu(conn, "clear", "1 = ?1", 1)?;
    suspects.retain(|uuid: &String, suspect: &mut SdcSuspect| cleared.get(uuid).is_none_or(|(at, _)| *at < suspect.at));
    let mut hbm = BTreeMap::new();
    for (uuid, (_, details)) in newest_per_gpu(conn, "memtest", "1 = ?1", 1)? {
        if let Some(suspect) = details
            .get("suspect")
            .and_then(|s| serde_json::from_value::<crate::model::probe::HbmSuspect>(s.clone()).ok())
            .filter(|s| cleared.get(&uuid).is_none_or(|(at, _)| *at < s.at))
        {
            hbm.insert(uuid, suspect);
        }
    }
    let (collective, collective_figures) = collective(conn, &cleared)?;
    Ok(crate::journal::SdcSeed {
        suspects,
        references: references.into_iter().collect(),
        hbm,
        collective,
        collective_figures,
    })
}

/// The latest all-reduce run and the node's figures, oldest first.
type CollectiveSeed = (Option<crate::model::collective::CollectiveRun>, Vec<(String, f64)>);

/// The `collective` rows, whatever the boot: the latest run (left out when a clear of one of
/// its GPUs came after it, as the finding would let go), and the figures that make the node's
/// baseline, oldest first. Rows that do not parse are left out.
fn collective(
    conn: &Connection,
    cleared: &BTreeMap<String, (f64, serde_json::Value)>,
) -> rusqlite::Result<CollectiveSeed> {
    use crate::model::collective::{CollectiveHistory, CollectiveRun, MAX_FIGURES};
    let mut statement =
        conn.prepare("SELECT details FROM events WHERE kind = 'collective' ORDER BY at DESC, id DESC LIMIT ?1")?;
    let rows = statement.query_map(rusqlite::params![MAX_FIGURES as u32], |r| r.get::<_, String>(0))?;
    let mut runs = Vec::new();
    for row in rows {
        let details = serde_json::from_str::<serde_json::Value>(&row?).unwrap_or_default();
        if let Some(run) = details
            .get("run")
            .and_then(|r| serde_json::from_value::<CollectiveRun>(r.clone()).ok())
        {
            runs.push(run);
        }
    }
    let latest = runs
        .first()
        .filter(|run| {
            !run.uuids
                .iter()
                .any(|u| cleared.get(u).is_some_and(|(at, _)| *at > run.at))
        })
        .cloned();
    let mut history = CollectiveHistory::default();
    for run in runs.iter().rev() {
        history.keep(run);
    }
    Ok((latest, history.figures.into_iter().collect()))
}

/// The board swaps of the last [`BOARD_SWAP_NOTICE`] by the new board's UUID, from the
/// `board_swap` rows (whatever the boot: a swap is found after the reboot it took).
pub(crate) fn board_swaps(conn: &Connection, now: SystemTime) -> rusqlite::Result<crate::model::health::BoardSwaps> {
    use crate::model::health::{BOARD_SWAP_NOTICE, BoardSwap};
    let since = crate::model::unix_seconds(now) - BOARD_SWAP_NOTICE.as_secs_f64();
    let rows = newest_per_gpu(conn, "board_swap", "at >= ?1", since)?;
    Ok(rows
        .into_iter()
        .map(|(uuid, (at, details))| {
            let swap = BoardSwap {
                at,
                previous_uuid: text(&details, "previous_uuid").unwrap_or_default(),
                previous_serial: text(&details, "previous_serial"),
            };
            (uuid, swap)
        })
        .collect())
}

/// The most `sxid` rows a restart's seed reads.
const MAX_SXID_ROWS: u32 = 10_000;

/// This boot's SXIDs from the `sxid` rows, counted by (switch address, code): what a restart
/// gives the XID store before the kernel log is read.
pub(crate) fn sxids(conn: &Connection, boot_id: &str) -> rusqlite::Result<Vec<crate::model::xid::SxidCount>> {
    let mut statement = conn.prepare(
        "SELECT at, pci_bus_id, details FROM events WHERE kind = 'sxid' AND boot_id = ?1 ORDER BY at LIMIT ?2",
    )?;
    let rows = statement.query_map(rusqlite::params![boot_id, MAX_SXID_ROWS], |r| {
        Ok((
            r.get::<_, f64>(0)?,
            r.get::<_, Option<String>>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut counts: std::collections::BTreeMap<(String, u32), crate::model::xid::SxidCount> = Default::default();
    for row in rows {
        let (at, address, details) = row?;
        let details: serde_json::Value = serde_json::from_str(&details).unwrap_or_default();
        let (Some(address), Some(code)) = (address, details.get("sxid").and_then(|v| v.as_u64())) else {
            continue;
        };
        let Ok(code) = u32::try_from(code) else {
            continue;
        };
        let switch = details.get("switch").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        let fatal = details.get("fatal").and_then(|v| v.as_bool()).unwrap_or(false);
        let message = text(&details, "raw")
            .map(|raw| crate::xid::parse::message_of(&raw))
            .unwrap_or_default();
        let entry = counts
            .entry((address.clone(), code))
            .or_insert_with(|| crate::model::xid::SxidCount {
                switch,
                pci_bus_id: address,
                sxid: code,
                fatal: false,
                count: 0,
                last_seen: crate::model::from_unix_seconds(at),
                message: String::new(),
            });
        entry.count += 1;
        entry.fatal |= fatal;
        entry.last_seen = entry.last_seen.max(crate::model::from_unix_seconds(at));
        entry.message = message;
    }
    Ok(counts.into_values().collect())
}

/// This boot's latest clear per GPU UUID, from its `clear` rows.
pub(crate) fn clears(conn: &Connection, boot_id: &str) -> rusqlite::Result<crate::model::health::Clears> {
    let rows = newest_per_gpu(conn, "clear", "boot_id = ?1", boot_id)?;
    Ok(rows
        .into_iter()
        .map(|(uuid, (at, details))| {
            let clear = crate::model::health::Clear {
                at,
                reason: text(&details, "reason").unwrap_or_default(),
                by: text(&details, "by").unwrap_or_default(),
            };
            (uuid, clear)
        })
        .collect())
}

/// The most rows [`newest_per_gpu`] looks at: far more than a node's GPUs are ever cleared
/// or swapped in the span it reads.
const MAX_NEWEST: u32 = 1000;

/// The newest row of `kind` per GPU UUID among those where `filter` (a condition on `?1`,
/// written here, never from input) holds for `value`: (time, details).
fn newest_per_gpu(
    conn: &Connection,
    kind: &str,
    filter: &str,
    value: impl rusqlite::ToSql,
) -> rusqlite::Result<std::collections::BTreeMap<String, (f64, serde_json::Value)>> {
    let mut statement = conn.prepare(&format!(
        "SELECT gpu_uuid, at, details FROM events WHERE kind = ?2 AND {filter} AND gpu_uuid IS NOT NULL \
         ORDER BY at DESC LIMIT ?3"
    ))?;
    let rows = statement.query_map(rusqlite::params![value, kind, MAX_NEWEST], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?, r.get::<_, String>(2)?))
    })?;
    let mut out = std::collections::BTreeMap::new();
    for row in rows {
        let (uuid, at, details) = row?;
        let details: serde_json::Value = serde_json::from_str(&details).unwrap_or_default();
        // Newest first: the first row of a GPU is its newest.
        out.entry(uuid).or_insert((at, details));
    }
    Ok(out)
}

/// A text field of a row's details, control characters replaced.
fn text(details: &serde_json::Value, key: &str) -> Option<String> {
    details.get(key).and_then(|v| v.as_str()).map(crate::input::printable)
}

/// The boots the journal has seen, oldest first: (boot id, first seen).
pub(crate) fn boots(conn: &Connection) -> rusqlite::Result<Vec<(String, f64)>> {
    let mut statement = conn.prepare("SELECT boot_id, first_seen FROM boots ORDER BY first_seen")?;
    let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Reads `--since 7d` (a duration back from now) or a Unix time.
pub(crate) fn parse_since(text: &str, now: SystemTime) -> Result<f64, QueryError> {
    if let Ok(seconds) = text.parse::<f64>() {
        return Ok(seconds);
    }
    let back = humantime::parse_duration(text).map_err(|reason| QueryError::Since {
        text: text.to_string(),
        reason,
    })?;
    let now = crate::model::unix_seconds(now);
    Ok(now - back.as_secs_f64())
}

/// How far back the status page's timeline looks, and how many rows per GPU it shows.
pub(crate) const TIMELINE_SPAN: f64 = 7.0 * 24.0 * 3600.0;
pub(crate) const TIMELINE_PER_GPU: usize = 12;

/// The newest rows of the last seven days by GPU UUID (node rows under ""), at most
/// [`TIMELINE_PER_GPU`] each, oldest first: the status page's timeline.
pub(crate) fn timeline(path: &Path, now: f64) -> Result<std::collections::BTreeMap<String, Vec<Row>>, DbError> {
    let conn = db::open_read_only(path)?;
    let rows = events(
        &conn,
        &Query {
            since: Some(now - TIMELINE_SPAN),
            limit: 5000,
            ..Default::default()
        },
    )
    .map_err(DbError::sqlite(path))?;
    let mut by_gpu: std::collections::BTreeMap<String, Vec<Row>> = Default::default();
    for row in rows.into_iter().rev() {
        let list = by_gpu.entry(row.gpu_uuid.clone().unwrap_or_default()).or_default();
        if list.len() < TIMELINE_PER_GPU {
            list.push(row);
        }
    }
    for list in by_gpu.values_mut() {
        list.reverse();
    }
    Ok(by_gpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_with(rows: &[(f64, &str, &str)]) -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = db::open_for_writing(&dir.path().join("state.db")).unwrap();
        for (at, boot, details) in rows {
            conn.execute(
                "INSERT INTO events (at, boot_id, host, kind, summary, details) \
                 VALUES (?1, ?2, 'node-1', 'remediation', 'a row', ?3)",
                rusqlite::params![at, boot, details],
            )
            .unwrap();
        }
        (dir, conn)
    }

    fn attempt_json(uuid: &str, started: f64, outcome: &str) -> String {
        format!(
            r#"{{"attempt": {{"uuid": "{uuid}", "index": 0, "pci_bus_id": "0000:19:00.0", "step": "gpu_reset",
              "why": "Xid 94", "started": {started}, "duration_seconds": 2.5, "outcome": {outcome}, "output": "ok"}}}}"#
        )
    }

    #[test]
    fn the_seed_keeps_good_remediation_rows_and_leaves_out_hostile_or_older_ones() {
        let now = SystemTime::now();
        let t = crate::model::unix_seconds(now);
        let good = attempt_json("GPU-a", t - 60.0, r#"{"result": "succeeded"}"#);
        let failed_last_boot = attempt_json("GPU-b", t - 120.0, r#"{"result": "failed", "why": "exit status 1"}"#);
        let reboot_this_boot = r#"{"reboot_required": {"since": 1.0, "uuid": "GPU-a", "index": 0, "why": "failed"}}"#;
        let reboot_last_boot = r#"{"reboot_required": {"since": 1.0, "uuid": "GPU-b", "index": 1, "why": "old"}}"#;
        let (_dir, conn) = journal_with(&[
            (t - 200.0, "boot-now", "not json at all {"),
            (t - 190.0, "boot-now", "[1, 2, 3]"),
            (t - 180.0, "boot-now", r#"{"attempt": "a string, not an attempt"}"#),
            (
                t - 170.0,
                "boot-now",
                r#"{"attempt": {"uuid": "GPU-x", "index": "zero"}}"#,
            ),
            (t - 165.0, "boot-now", r#"{"reboot_required": {"since": "yesterday"}}"#),
            (t - 160.0, "boot-now", &"x".repeat(100_000)),
            (t - 130.0, "boot-old", reboot_last_boot),
            (t - 120.0, "boot-old", &failed_last_boot),
            (t - 60.0, "boot-now", &good),
            (t - 50.0, "boot-now", reboot_this_boot),
            // Outside the day's window and from another boot: not a reset of today's budget.
            (
                t - 2.0 * 86_400.0,
                "boot-older",
                &attempt_json("GPU-c", t - 2.0 * 86_400.0, r#"{"result": "succeeded"}"#),
            ),
        ]);
        let seed = remediation(&conn, "boot-now", now).unwrap();
        let kept: Vec<(&str, bool)> = seed.attempts.iter().map(|a| (a.uuid.as_str(), a.this_boot)).collect();
        assert_eq!(kept, [("GPU-b", false), ("GPU-a", true)], "{seed:?}");
        assert_eq!(
            seed.reboot_required.as_ref().map(|r| r.uuid.as_str()),
            Some("GPU-a"),
            "a reboot mark lasts its boot only"
        );
        assert!(seed.failed(), "this boot's reboot mark makes remediation failed");
    }
}
