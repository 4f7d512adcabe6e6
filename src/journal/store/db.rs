//! The database file: opening it for the writer (and what to do when it is corrupt, locked,
//! read-only or on a full disk), its schema, and opening it read-only for the readers.
//!
//! SQLite in WAL mode with `synchronous=NORMAL`: a committed transaction survives the process
//! being killed (`kill -9`); a power cut may lose the last transactions, never the file.
//! Readers (`gpuwarden events`, `/api/v1/events`) never block the writer, nor it them.

use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema this build writes. A file with a newer one is left alone (a downgrade).
pub(crate) const SCHEMA_VERSION: i64 = 1;

pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    boot_id TEXT NOT NULL,
    host TEXT NOT NULL,
    kind TEXT NOT NULL,
    gpu_uuid TEXT,
    serial TEXT,
    pci_bus_id TEXT,
    summary TEXT NOT NULL,
    details TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_at ON events (at);
CREATE INDEX IF NOT EXISTS events_gpu ON events (gpu_uuid, at);
CREATE TABLE IF NOT EXISTS gpu_facts (
    uuid TEXT PRIMARY KEY,
    pci_bus_id TEXT NOT NULL,
    serial TEXT,
    facts TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS xid_counts (
    boot_id TEXT NOT NULL,
    pci_bus_id TEXT NOT NULL,
    xid INTEGER NOT NULL,
    count INTEGER NOT NULL,
    last_at REAL NOT NULL,
    PRIMARY KEY (boot_id, pci_bus_id, xid)
);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS boots (
    boot_id TEXT PRIMARY KEY,
    first_seen REAL NOT NULL,
    host TEXT NOT NULL,
    kmsg_sequence INTEGER
);
CREATE TABLE IF NOT EXISTS sink_cursors (
    sink TEXT PRIMARY KEY,
    row_id INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kernel_log_files (
    path TEXT PRIMARY KEY,
    device INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    tail BLOB NOT NULL,
    at REAL NOT NULL
);
";

/// Why the writer cannot use the file now.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{}: {source}", .path.display())]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error("{} is a symbolic link; the journal is not written through links", .0.display())]
    Link(PathBuf),
    /// A FIFO, socket, device or directory where the file (or its -wal/-shm) should be: opening
    /// or reading it could block the writer, or write somewhere no one meant.
    #[error("{} is not a regular file; remove it or set state.path to another file", .0.display())]
    NotAFile(PathBuf),
    #[error("{} was written by a newer gpuwarden (schema {found}, this one writes {SCHEMA_VERSION}); \
             set state.path to another file or upgrade", .path.display())]
    Newer { path: PathBuf, found: i64 },
    /// A damaged file that could not be moved aside.
    #[error("{} is damaged and stays in place: {detail}", .path.display())]
    Corrupt { path: PathBuf, detail: String },
}

impl DbError {
    /// The error of a SQLite call on the file at `path`.
    pub fn sqlite(path: &Path) -> impl Fn(rusqlite::Error) -> DbError + '_ {
        move |source| DbError::Sqlite {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A file that is not a database or is damaged: move it aside and start anew.
    pub fn is_corrupt(&self) -> bool {
        match self {
            DbError::Corrupt { .. } => true,
            DbError::Sqlite { source, .. } => is_corrupt(source),
            _ => false,
        }
    }

    /// What an operator should do about it, for the log line (which says the retry itself,
    /// from the writer's back-off: not repeated here).
    pub fn advice(&self) -> &'static str {
        let code = match self {
            DbError::Sqlite { source, .. } => source.sqlite_error_code(),
            _ => None,
        };
        match code {
            Some(ErrorCode::ReadOnly) | Some(ErrorCode::PermissionDenied) | Some(ErrorCode::CannotOpen) => {
                "make state.path's directory writable by gpuwarden (systemd: StateDirectory=gpuwarden; \
                 Kubernetes: a hostPath volume), or set state.path"
            }
            Some(ErrorCode::DiskFull) => "free space on the state directory's file system",
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => {
                "another program holds the database's write lock (an open sqlite3 transaction?); end it"
            }
            _ => "see the error",
        }
    }
}

pub(crate) fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase)
    )
}

/// Opens (or creates) the database for the writer, checks it and brings the schema up.
pub(crate) fn open_for_writing(path: &Path) -> Result<Connection, DbError> {
    check_files(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(DbError::sqlite(path))?;
    setup(&conn, path)?;
    Ok(conn)
}

/// The database and its side files are each a regular file or absent. The state directory is
/// root's, but a link there could still point the writes at any file, and a FIFO would block
/// the open or the first read: refuse both rather than follow or wait.
fn check_files(path: &Path) -> Result<(), DbError> {
    for file in [
        path.to_path_buf(),
        with_suffix(path, "-wal"),
        with_suffix(path, "-shm"),
        with_suffix(path, "-journal"),
    ] {
        let Ok(meta) = std::fs::symlink_metadata(&file) else {
            continue; // absent: SQLite creates it
        };
        if meta.file_type().is_symlink() {
            return Err(DbError::Link(file));
        }
        if !meta.file_type().is_file() {
            return Err(DbError::NotAFile(file));
        }
    }
    Ok(())
}

fn setup(conn: &Connection, path: &Path) -> Result<(), DbError> {
    let err = || DbError::sqlite(path);
    // A short wait: the writer is a thread of its own, but a reader's checkpoint or an
    // operator's sqlite3 must not stall it for long; the batch is retried next second.
    conn.busy_timeout(Duration::from_millis(200)).map_err(err())?;
    // Only takes effect on a new file (before the first table): lets the size cap give
    // deleted pages back to the file system.
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL").map_err(err())?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(err())?;
    if !mode.eq_ignore_ascii_case("wal") {
        log::warn!(
            "journal {}: journal_mode is {mode}, not WAL (a file system without shared memory?)",
            path.display()
        );
    }
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(err())?;
    // 64 KiB of page cache, not SQLite's 2 MiB default: the writer appends, and the pages it
    // touches are the tail of the table and of two indexes (docs/performance.md).
    conn.pragma_update(None, "cache_size", -64).map_err(err())?;
    // No integrity check of the whole file at open: it reads every page (and SQLite's
    // checking code) into memory for as long as the daemon runs. A damaged file shows as
    // SQLITE_CORRUPT or SQLITE_NOTADB at the first read or write, and is moved aside then.
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(err())?;
    if version > SCHEMA_VERSION {
        return Err(DbError::Newer {
            path: path.to_path_buf(),
            found: version,
        });
    }
    conn.execute_batch(SCHEMA).map_err(err())?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(err())?;
    Ok(())
}

/// Moves a corrupt file (and its WAL and shared-memory files) aside as
/// `state.db.corrupt-UNIXTIME`, so a new one can start and the old one can be looked at.
pub(crate) fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let aside = with_suffix(path, &format!(".corrupt-{stamp}"));
    std::fs::rename(path, &aside)?;
    for side in ["-wal", "-shm"] {
        let file = with_suffix(path, side);
        if file.exists() {
            let _ = std::fs::rename(&file, with_suffix(&aside, side));
        }
    }
    Ok(aside)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Opens the database read-only, for `events`, `report` and the HTTP API: works while the
/// daemon writes (WAL), and never changes the file.
pub(crate) fn open_read_only(path: &Path) -> Result<Connection, DbError> {
    check_files(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(DbError::sqlite(path))?;
    conn.busy_timeout(Duration::from_secs(2))
        .map_err(DbError::sqlite(path))?;
    conn.pragma_update(None, "query_only", true)
        .map_err(DbError::sqlite(path))?;
    Ok(conn)
}

/// Opens the database for a sink's deliveries (journal/sinks/mod.rs): reads rows and writes only
/// its cursor; never creates the file (the writer does).
pub(crate) fn open_for_cursors(path: &Path) -> Result<Connection, DbError> {
    check_files(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(DbError::sqlite(path))?;
    conn.busy_timeout(Duration::from_secs(2))
        .map_err(DbError::sqlite(path))?;
    Ok(conn)
}

/// The file's size in bytes as SQLite counts it (pages in use, not the free list).
pub(crate) fn used_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    conn.query_row(
        "SELECT (page_count - freelist_count) * page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()",
        [],
        |row| row.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
}

/// How long a batch's id is kept to recognise it written again: far longer than a worker's
/// time-out and the retries after it.
const BATCH_IDS_KEPT_FOR: f64 = 86_400.0;

/// Deletes rows older than `oldest` (Unix seconds), then the oldest rows until the file's
/// pages in use fit `max_bytes`, and gives the freed pages back to the file system. Returns
/// the size after. This boot's (`boot_id`) XID counts and kernel-log position stay however
/// old they are: a restart must find a fatal XID of this boot even with a retention shorter
/// than the uptime. Other boots' counts go by age, and by size once no event row is left.
pub(crate) fn prune(conn: &Connection, oldest: f64, max_bytes: u64, boot_id: &str) -> rusqlite::Result<u64> {
    conn.execute("DELETE FROM events WHERE at < ?1", [oldest])?;
    conn.execute(
        "DELETE FROM xid_counts WHERE last_at < ?1 AND boot_id != ?2",
        rusqlite::params![oldest, boot_id],
    )?;
    conn.execute(
        "DELETE FROM boots WHERE first_seen < ?1 AND boot_id != ?2",
        rusqlite::params![oldest, boot_id],
    )?;
    let now = crate::model::unix_now();
    conn.execute("DELETE FROM batches WHERE at < ?1", [now - BATCH_IDS_KEPT_FOR])?;
    let mut bytes = used_bytes(conn)?;
    // A tenth of the rows at a time: a few rounds bring a file back under its cap.
    for _ in 0..40 {
        if bytes <= max_bytes {
            break;
        }
        let rows: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0))?;
        if rows > 0 {
            conn.execute(
                "DELETE FROM events WHERE id IN (SELECT id FROM events ORDER BY id LIMIT ?1)",
                [(rows / 10).max(1)],
            )?;
        } else {
            // No events left: the counts of the oldest tenth of the other boots.
            let boots: i64 = conn.query_row(
                "SELECT count(DISTINCT boot_id) FROM xid_counts WHERE boot_id != ?1",
                [boot_id],
                |r| r.get(0),
            )?;
            let deleted = conn.execute(
                "DELETE FROM xid_counts WHERE boot_id IN (SELECT boot_id FROM xid_counts WHERE boot_id != ?1
                 GROUP BY boot_id ORDER BY max(last_at) LIMIT ?2)",
                rusqlite::params![boot_id, (boots / 10).max(1)],
            )?;
            conn.execute("DELETE FROM batches", [])?;
            if deleted == 0 {
                break;
            }
        }
        bytes = used_bytes(conn)?;
    }
    // It frees one page per step (each a result row): step it to the end.
    let mut vacuum = conn.prepare("PRAGMA incremental_vacuum")?;
    let mut freed = vacuum.query([])?;
    while freed.next()?.is_some() {}
    drop(freed);
    used_bytes(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insert(conn: &Connection, at: f64, details: &str) {
        conn.execute(
            "INSERT INTO events (at, boot_id, host, kind, summary, details) VALUES (?1, 'b', 'h', 'xid', 's', ?2)",
            rusqlite::params![at, details],
        )
        .unwrap();
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn rows_past_the_retention_go_and_the_newest_stay() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_for_writing(&dir.path().join("state.db")).unwrap();
        for at in [100.0, 200.0, 300.0, 400.0] {
            insert(&conn, at, "{}");
        }
        prune(&conn, 250.0, u64::MAX, "this-boot").unwrap();
        let left: Vec<f64> = conn
            .prepare("SELECT at FROM events ORDER BY at")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(left, vec![300.0, 400.0]);
    }

    #[test]
    fn over_the_size_cap_the_oldest_rows_go_until_it_fits_and_the_file_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let conn = open_for_writing(&path).unwrap();
        let details = format!("{{\"raw\": \"{}\"}}", "x".repeat(2000));
        for i in 0..2000 {
            insert(&conn, f64::from(i), &details);
        }
        let full = used_bytes(&conn).unwrap();
        assert!(full > 4 << 20, "{full}");
        let cap = 1 << 20;
        let after = prune(&conn, 0.0, cap, "this-boot").unwrap();
        assert!(after <= cap, "{after} > {cap}");
        let left = count(&conn);
        assert!(left > 0 && left < 2000, "{left}");
        // The newest are the ones kept.
        let newest: f64 = conn.query_row("SELECT max(at) FROM events", [], |r| r.get(0)).unwrap();
        assert_eq!(newest, 1999.0);
        // Freed pages went back to the file system (auto_vacuum=incremental), after a checkpoint.
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        let on_disk = std::fs::metadata(&path).unwrap().len();
        assert!(on_disk < 2 * cap, "{on_disk}");
    }

    #[test]
    fn garbage_is_corrupt_and_is_moved_aside_with_its_side_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        std::fs::write(&path, "not a database at all, but long enough to have a header........").unwrap();
        std::fs::write(dir.path().join("state.db-wal"), "x").unwrap();
        let e = open_for_writing(&path).unwrap_err();
        assert!(e.is_corrupt(), "{e}");
        let aside = move_aside(&path).unwrap();
        assert!(aside.to_string_lossy().contains("state.db.corrupt-"));
        assert!(!path.exists() && aside.exists());
        assert!(!dir.path().join("state.db-wal").exists());
        assert!(open_for_writing(&path).is_ok());
    }

    #[test]
    fn a_link_at_the_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        let path = dir.path().join("state.db");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(matches!(open_for_writing(&path), Err(DbError::Link(_))));
        assert!(matches!(open_read_only(&path), Err(DbError::Link(_))));
    }

    #[test]
    fn a_fifo_socket_or_directory_at_the_path_or_beside_it_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        // A FIFO at the path: opening it for reading would wait for a writer forever.
        crate::input::make_fifo(&path);
        assert!(matches!(open_for_writing(&path), Err(DbError::NotAFile(_))));
        assert!(matches!(open_read_only(&path), Err(DbError::NotAFile(_))));
        std::fs::remove_file(&path).unwrap();
        // A socket as the WAL beside a good file.
        assert!(open_for_writing(&path).is_ok());
        let wal = dir.path().join("state.db-wal");
        let _ = std::fs::remove_file(&wal);
        let _listener = std::os::unix::net::UnixListener::bind(&wal).unwrap();
        let e = open_for_writing(&path).unwrap_err();
        assert!(matches!(&e, DbError::NotAFile(p) if p == &wal), "{e}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::remove_file(&wal).unwrap();
        // A directory as the shared-memory file.
        std::fs::create_dir(dir.path().join("state.db-shm")).unwrap();
        assert!(matches!(open_read_only(&path), Err(DbError::NotAFile(_))));
    }

    /// A retention shorter than the uptime: this boot's XID counts and position stay, an
    /// older boot's go; by size, other boots' counts go once no event is left.
    #[test]
    fn this_boots_counts_outlive_the_retention_and_the_size_cap() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open_for_writing(&dir.path().join("state.db")).unwrap();
        for (boot, last) in [("this-boot", 10.0), ("old-boot", 10.0)] {
            conn.execute(
                "INSERT INTO xid_counts (boot_id, pci_bus_id, xid, count, last_at) VALUES (?1, '0000:19:00.0', 79, 1, ?2)",
                rusqlite::params![boot, last],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO boots (boot_id, first_seen, host, kmsg_sequence) VALUES (?1, 5.0, 'h', 9)",
                [boot],
            )
            .unwrap();
        }
        prune(&conn, 1000.0, u64::MAX, "this-boot").unwrap();
        let boots: Vec<String> = conn
            .prepare("SELECT boot_id FROM xid_counts")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(boots, vec!["this-boot".to_string()]);
        let positions: i64 = conn.query_row("SELECT count(*) FROM boots", [], |r| r.get(0)).unwrap();
        assert_eq!(positions, 1);
        // Many old boots' counts and no events: the cap takes them, never this boot's.
        for boot in 0..3000 {
            for xid in 0..10 {
                conn.execute(
                    "INSERT INTO xid_counts (boot_id, pci_bus_id, xid, count, last_at) VALUES (?1, '0000:19:00.0', ?2, 1, ?3)",
                    rusqlite::params![format!("boot-{boot}"), xid, 2000.0 + f64::from(boot)],
                )
                .unwrap();
            }
        }
        let cap = 256 * 1024;
        assert!(used_bytes(&conn).unwrap() > 2 * cap);
        let after = prune(&conn, 1000.0, cap, "this-boot").unwrap();
        assert!(after <= cap, "{after}");
        let ours: i64 = conn
            .query_row("SELECT count(*) FROM xid_counts WHERE boot_id = 'this-boot'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(ours, 1);
    }
}
