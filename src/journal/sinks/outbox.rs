//! The journal's outbox for sinks that take its rows off the node (docs/journal.md, "Events
//! out"): each sink's cursor, the id of the last row it acknowledged, kept in the journal
//! file in a transaction of its own (table `sink_cursors`), and the rows after it, in the
//! order they were written. Delivery reads from here and moves the cursor only after the
//! sink said yes, so a row is delivered at least once: across a sink that is down, a restart
//! and a reboot. The backlog is bounded by the journal's own retention: a row retention
//! deleted before its sink took it is gone, and the lag says so.

use crate::journal::store::read::Row;
use rusqlite::{Connection, OptionalExtension, params};

/// Where a sink seen for the first time starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// After the newest row: what happens from now on (the default: a new receiver is not
    /// sent the journal's whole retention).
    Now,
    /// Before the oldest row the journal keeps.
    Beginning,
}

/// The sink's cursor: the last row id it acknowledged. A sink not seen before gets one at
/// `start`, written at once, so a restart before its first delivery starts from the same
/// place.
pub(crate) fn cursor(conn: &Connection, sink: &str, start: Start, now: f64) -> rusqlite::Result<i64> {
    let known: Option<i64> = conn
        .query_row("SELECT row_id FROM sink_cursors WHERE sink = ?1", params![sink], |r| {
            r.get(0)
        })
        .optional()?;
    if let Some(row_id) = known {
        return Ok(row_id);
    }
    let row_id = match start {
        Start::Now => newest(conn)?,
        Start::Beginning => 0,
    };
    conn.execute(
        "INSERT OR IGNORE INTO sink_cursors (sink, row_id, at) VALUES (?1, ?2, ?3)",
        params![sink, row_id, now],
    )?;
    Ok(row_id)
}

/// The sink's cursor where it has one.
pub(crate) fn known_cursor(conn: &Connection, sink: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT row_id FROM sink_cursors WHERE sink = ?1", params![sink], |r| {
        r.get(0)
    })
    .optional()
}

/// Whether the journal's tables are there yet: the writer makes the file, then its tables.
pub(crate) fn tables_ready(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('events', 'sink_cursors')",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n == 2)
}

/// Whether the journal's row ids began again under `cursor` (a file started anew).
pub(crate) fn started_anew(conn: &Connection, cursor: i64) -> rusqlite::Result<bool> {
    Ok(cursor > newest(conn)?)
}

/// The newest row's id; 0 for an empty journal.
fn newest(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))
}

/// Moves the sink's cursor to `row_id`, never back: an acknowledgement that arrives late
/// (a retry's) cannot undo a newer one.
pub(crate) fn acknowledge(conn: &mut Connection, sink: &str, row_id: i64, now: f64) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    tx.execute(
        "INSERT INTO sink_cursors (sink, row_id, at) VALUES (?1, ?2, ?3)
         ON CONFLICT (sink) DO UPDATE SET row_id = excluded.row_id, at = excluded.at
         WHERE excluded.row_id > sink_cursors.row_id",
        params![sink, row_id, now],
    )?;
    tx.commit()
}

/// Sets the sink's cursor back to before the first row: for a journal file started anew,
/// whose row ids begin again under the old cursor (which [`acknowledge`] never moves back).
pub(crate) fn restart(conn: &mut Connection, sink: &str, now: f64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE sink_cursors SET row_id = 0, at = ?2 WHERE sink = ?1",
        params![sink, now],
    )?;
    Ok(())
}

/// How long a `clear` row whose outcome is not in yet (`still` null) holds the rows from it on
/// back: the local API amends it after the next poll round (at most 10 s, local_api.rs), so
/// nobody off the node is told of a clear without what it let go of. A row still null after
/// this (the daemon stopped in between) goes as it is.
const AMEND_HOLD: f64 = 30.0;

/// Up to `limit` rows after `cursor`, oldest first, stopping before a clear row awaiting its
/// outcome (at most [`AMEND_HOLD`] after it was written, by `now`). A cursor past the newest
/// row means the journal was started anew (a file moved aside: its row ids begin again at 1):
/// then from the first row, and `Restarted` says so.
pub(crate) fn after(conn: &Connection, cursor: i64, limit: usize, now: f64) -> rusqlite::Result<(Vec<Row>, Restarted)> {
    let restarted = Restarted(started_anew(conn, cursor)?);
    let from = if restarted.0 { 0 } else { cursor };
    // CASE: a row whose details are not JSON is no clear awaiting anything (json_type would
    // fail the whole query on it).
    let mut statement = conn.prepare(&format!(
        "SELECT {} FROM events WHERE id > ?1 AND id < COALESCE((
             SELECT MIN(id) FROM events WHERE id > ?1 AND kind = 'clear' AND at > ?3
               AND CASE WHEN json_valid(details) THEN json_type(details, '$.still') END = 'null'
         ), 9223372036854775807) ORDER BY id LIMIT ?2",
        crate::journal::store::read::ROW_COLUMNS
    ))?;
    let rows = statement
        .query_map(
            params![from, limit as i64, now - AMEND_HOLD],
            crate::journal::store::read::row_of,
        )?
        .collect::<rusqlite::Result<Vec<Row>>>()?;
    Ok((rows, restarted))
}

/// Whether the journal's row ids began again under the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Restarted(pub bool);

/// How far the sink is behind: rows after its cursor, and the time of the oldest of them
/// (`None` when it has taken everything).
pub(crate) fn lag(conn: &Connection, cursor: i64) -> rusqlite::Result<(u64, Option<f64>)> {
    conn.query_row(
        "SELECT COUNT(*), MIN(at) FROM events WHERE id > ?1",
        params![cursor],
        |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer makes the file, then its tables: a sink that opens it in between sees no
    /// tables and waits (before: "no such table: sink_cursors", a failure and a back-off).
    #[test]
    fn a_file_without_the_journals_tables_is_not_ready() {
        let conn = Connection::open_in_memory().unwrap();
        assert!(!tables_ready(&conn).unwrap());
        conn.execute_batch("CREATE TABLE events (id INTEGER PRIMARY KEY)")
            .unwrap();
        assert!(!tables_ready(&conn).unwrap(), "one of the two");
        assert!(tables_ready(&journal()).unwrap());
    }

    fn journal() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(crate::journal::store::db::SCHEMA).unwrap();
        conn
    }

    fn write(conn: &Connection, at: f64, details: &str) -> i64 {
        conn.execute(
            "INSERT INTO events (at, boot_id, host, kind, summary, details) VALUES (?1, 'b', 'node-1', 'xid', 's', ?2)",
            params![at, details],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    #[test]
    fn a_new_sink_starts_now_or_at_the_beginning_and_keeps_its_place() {
        let mut conn = journal();
        let first = write(&conn, 10.0, "{}");
        let second = write(&conn, 11.0, "{}");
        assert_eq!(cursor(&conn, "ops", Start::Now, 100.0).unwrap(), second);
        assert_eq!(cursor(&conn, "audit", Start::Beginning, 100.0).unwrap(), 0);
        let (rows, restarted) = after(&conn, 0, 10, 1e9).unwrap();
        assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), [first, second]);
        assert_eq!(restarted, Restarted(false));
        // Its place is kept: asking again, with another start, changes nothing.
        assert_eq!(cursor(&conn, "audit", Start::Now, 101.0).unwrap(), 0);
        acknowledge(&mut conn, "audit", first, 102.0).unwrap();
        assert_eq!(cursor(&conn, "audit", Start::Now, 103.0).unwrap(), first);
        // A late acknowledgement never moves it back.
        acknowledge(&mut conn, "audit", second, 104.0).unwrap();
        acknowledge(&mut conn, "audit", first, 105.0).unwrap();
        assert_eq!(cursor(&conn, "audit", Start::Now, 106.0).unwrap(), second);
    }

    #[test]
    fn rows_come_in_order_in_pages_and_a_restarted_journal_is_read_from_its_first_row() {
        let conn = journal();
        let ids: Vec<i64> = (0..5).map(|i| write(&conn, 10.0 + f64::from(i), "{}")).collect();
        let (page, _) = after(&conn, ids[1], 2, 1e9).unwrap();
        assert_eq!(page.iter().map(|r| r.id).collect::<Vec<_>>(), &ids[2..4]);
        assert_eq!(lag(&conn, ids[1]).unwrap(), (3, Some(12.0)));
        assert_eq!(lag(&conn, ids[4]).unwrap(), (0, None));
        // A cursor past every row: the file was started anew. Set back, the sink takes the
        // new file's rows from its first, and acknowledges move it on again.
        let mut conn = conn;
        acknowledge(&mut conn, "ops", 9_999, 1.0).unwrap();
        let (page, restarted) = after(&conn, 9_999, 10, 1e9).unwrap();
        assert_eq!(restarted, Restarted(true));
        assert_eq!(page.len(), 5);
        restart(&mut conn, "ops", 2.0).unwrap();
        assert_eq!(cursor(&conn, "ops", Start::Now, 3.0).unwrap(), 0);
        acknowledge(&mut conn, "ops", ids[0], 4.0).unwrap();
        let (page, restarted) = after(&conn, cursor(&conn, "ops", Start::Now, 5.0).unwrap(), 10, 1e9).unwrap();
        assert_eq!((page.len(), restarted), (4, Restarted(false)));
    }

    #[test]
    fn a_clear_awaiting_its_outcome_holds_itself_and_what_follows_back_for_a_while() {
        let conn = journal();
        let clear = |at: f64, details: &str| {
            conn.execute(
                "INSERT INTO events (at, boot_id, host, kind, gpu_uuid, summary, details)
                 VALUES (?1, 'b', 'node-1', 'clear', 'GPU-0', 's', ?2)",
                params![at, details],
            )
            .unwrap();
            conn.last_insert_rowid()
        };
        let before = write(&conn, 99.0, "{}");
        let awaiting = clear(100.0, r#"{"reason":"reseated","cleared":null,"still":null}"#);
        let after_it = write(&conn, 101.0, "{}");
        let ids = |now| {
            after(&conn, 0, 10, now)
                .unwrap()
                .0
                .iter()
                .map(|r| r.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(105.0), [before], "held back, and nothing after it goes first");
        // Amended: everything goes.
        conn.execute(
            "UPDATE events SET details = ?1 WHERE id = ?2",
            params![r#"{"reason":"reseated","cleared":["xid_fatal"],"still":[]}"#, awaiting],
        )
        .unwrap();
        assert_eq!(ids(105.0), [before, awaiting, after_it]);
        // Never amended (the daemon stopped in between): it goes once the hold is over. A
        // clear row without the fields at all (remediation's, a refill's) is never held.
        let stale = clear(200.0, r#"{"cleared":null,"still":null}"#);
        let unheld = clear(201.0, r#"{"reason":"GPU reset","by":"gpuwarden"}"#);
        assert_eq!(ids(210.0).last(), Some(&after_it));
        assert_eq!(ids(200.0 + AMEND_HOLD + 1.0).last(), Some(&unheld));
        assert!(ids(231.0).contains(&stale));
    }

    #[test]
    fn a_row_whose_details_are_not_json_still_goes_out() {
        let conn = journal();
        write(&conn, 10.0, "{not json\u{0}");
        let (rows, _) = after(&conn, 0, 10, 1e9).unwrap();
        assert_eq!(rows[0].details, serde_json::Value::Null);
    }
}
