//! The journal's database work runs in a short-lived child process, `gpuwarden journal-worker`
//! (the daemon's own binary, `/proc/self/exe`), one request on its stdin and one answer on
//! its stdout, JSON both ways.
//!
//! Why a process and not a thread: SQLite's code (parser, B-tree, pager, WAL) is 1.6 MiB of
//! the binary's pages, and once the daemon has run it those pages stay in its resident set
//! (the kernel maps 64 KiB around each page it runs). The daemon idles far more than it
//! writes: a steady node writes nothing, a busy one a few batches an hour. In a child, the
//! daemon's memory stays where it was before the journal (docs/performance.md), and a
//! damaged file that trips a bug in SQLite ends a child, never the daemon.
//!
//! The daemon decides what to write (writer.rs); the worker only opens, writes, prunes and
//! reads. A worker that does not answer within its time is killed and counts as a failed
//! write (the batch is kept and retried).

use crate::journal::event::Kind;
use crate::journal::store::db::{self, DbError};
use crate::journal::store::read::{self, Row};
use crate::journal::writer::facts::GpuFacts;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

pub use crate::journal::store::batch::{Amendment, Batch, Item, Prune, XidCount};

/// The hidden subcommand the daemon runs itself as.
pub const SUBCOMMAND: &str = "journal-worker";
/// The daemon's own binary, even after a package upgrade replaced the file on disk: the
/// worker always speaks the daemon's protocol.
const SELF: &str = "/proc/self/exe";
/// The longest request (a backlog of 10,000 rows of a few KiB) and answer (a reader's rows).
const MAX_REQUEST: u64 = 128 * 1024 * 1024;
const MAX_ANSWER: u64 = 128 * 1024 * 1024;

/// What the daemon asks.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Open (or create) the file for writing, moving a damaged one aside; what it knows.
    Open { path: PathBuf, boot_id: String },
    /// One transaction.
    Write(Batch),
    /// What a restart in this boot takes over (read-only).
    Seed { path: PathBuf, boot_id: String },
    /// The status page's last seven days.
    Timeline { path: PathBuf, now: f64 },
    /// `/api/v1/events`.
    Events {
        path: PathBuf,
        since: Option<f64>,
        gpu: Option<String>,
        kinds: Vec<Kind>,
        limit: usize,
        #[serde(default)]
        before: Option<(f64, i64)>,
        /// Answer as a [`StreamHead`] line and then one row per line (`/api/v1/events`).
        #[serde(default)]
        stream: bool,
    },
}

/// The first line of a streamed events answer: how many rows follow (None: the journal has
/// no such GPU) and the cursor of the page after, when this one is full.
#[derive(Debug, Serialize, Deserialize)]
pub struct StreamHead {
    pub rows: Option<usize>,
    pub next: Option<String>,
}

/// What the worker answers.
// One answer per worker call, moved once: the seed's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    Opened {
        facts: Vec<GpuFacts>,
        xid_counts: Vec<XidCount>,
        bytes: u64,
        /// A damaged file moved aside before this one was started: (what was wrong, where it went).
        moved_aside: Option<(String, PathBuf)>,
    },
    Written {
        rows: u64,
        /// (XID event number, its row) for the XID rows this batch inserted.
        xid_rows: Vec<(u64, i64)>,
        /// The file's pages in use after the batch.
        bytes: Option<u64>,
        /// The file knew this boot before the batch: false when it was deleted, emptied or
        /// replaced since the daemon last wrote it (the writer then fills it again).
        #[serde(default)]
        knew_boot: bool,
        /// The batch had been written before (the same id): nothing was written again.
        #[serde(default)]
        repeated: bool,
    },
    Seed {
        xid_counts: Vec<XidCount>,
        kmsg_sequence: Option<u64>,
        /// Where each kernel-log file was read up to.
        #[serde(default)]
        file_positions: Vec<crate::xid::event::FilePosition>,
        /// This boot's kernel-log lines of counted XIDs and SXIDs (their records' identities).
        #[serde(default)]
        kernel_lines: Vec<String>,
        #[serde(default)]
        clears: crate::model::health::Clears,
        #[serde(default)]
        board_swaps: crate::model::health::BoardSwaps,
        #[serde(default)]
        facts: Vec<crate::journal::writer::facts::GpuFacts>,
        /// (switch, address, code, fatal, count, last seen, message).
        #[serde(default)]
        sxids: Vec<SxidSeed>,
        #[serde(default)]
        validations: crate::model::health::Validations,
        #[serde(default)]
        probe_history: BTreeMap<String, Vec<crate::model::probe::ProbeFigures>>,
        #[serde(default)]
        remediation: crate::model::remediation::Remediations,
        #[serde(default)]
        sdc: crate::journal::SdcSeed,
    },
    Timeline {
        rows: BTreeMap<String, Vec<Row>>,
    },
    /// None: the journal has no such GPU.
    Events {
        rows: Option<Vec<Row>>,
    },
}

/// Why a request failed: for the log line, the write-error counter and the HTTP answer.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub message: String,
    /// What an operator should do about it.
    pub advice: String,
    /// The file is damaged: move it aside and start a new one.
    pub corrupt: bool,
    /// Where the damaged file went, when the worker moved it.
    pub moved_aside: Option<PathBuf>,
}

impl From<DbError> for Failure {
    fn from(e: DbError) -> Failure {
        Failure {
            message: e.to_string(),
            advice: e.advice().to_string(),
            corrupt: e.is_corrupt(),
            moved_aside: None,
        }
    }
}

impl Failure {
    fn of_worker(what: String) -> Failure {
        Failure {
            message: format!("the journal worker ({SELF} {SUBCOMMAND}): {what}"),
            advice: "see the error".to_string(),
            corrupt: false,
            moved_aside: None,
        }
    }
}

type Reply = Result<Answer, Failure>;

// ---- the daemon's side ----

/// Runs one request in a worker process; kills it after `timeout`.
pub fn call(request: &Request, timeout: Duration) -> Reply {
    let input = serde_json::to_vec(request).map_err(|e| Failure::of_worker(format!("cannot encode: {e}")))?;
    let output = run_child(&input, timeout).map_err(|e| Failure::of_worker(e.to_string()))?;
    serde_json::from_slice::<Reply>(&output)
        .map_err(|e| Failure::of_worker(format!("unreadable answer ({} bytes): {e}", output.len())))?
}

/// [`call`] from the runtime: on its blocking pool, so no task waits on the child.
pub async fn call_blocking_pool(request: Request, timeout: Duration) -> Reply {
    tokio::task::spawn_blocking(move || call(&request, timeout))
        .await
        .unwrap_or_else(|e| Err(Failure::of_worker(format!("the call did not finish: {e}"))))
}

/// Bumped by [`abort_running`]: a worker started before the bump is killed at once.
static ABORTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Kills every worker running now (the daemon stops and cannot wait for a stalled one).
pub fn abort_running() {
    ABORTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Starts a worker process with its stdin and stdout piped to us.
fn spawn_worker() -> std::io::Result<(std::process::Child, std::process::ChildStdin, std::process::ChildStdout)> {
    let mut child = Command::new(SELF)
        .arg(SUBCOMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    match (child.stdin.take(), child.stdout.take()) {
        (Some(stdin), Some(stdout)) => Ok((child, stdin, stdout)),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(std::io::Error::other("no pipes to the worker"))
        }
    }
}

fn run_child(input: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let aborts = ABORTS.load(std::sync::atomic::Ordering::SeqCst);
    let (mut child, mut stdin, stdout) = spawn_worker()?;
    let deadline = Instant::now() + timeout;
    std::thread::scope(|scope| {
        // Both ends on threads of their own: a worker that stops reading or writing is
        // killed at the deadline instead of holding this thread.
        scope.spawn(move || {
            let _ = stdin.write_all(input);
        });
        let reader = scope.spawn(move || {
            let mut out = Vec::new();
            stdout.take(MAX_ANSWER).read_to_end(&mut out).map(|_| out)
        });
        let status = loop {
            match child.try_wait()? {
                Some(status) => break status,
                None if Instant::now() >= deadline || ABORTS.load(std::sync::atomic::Ordering::SeqCst) != aborts => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {timeout:?} (or the daemon stops); killed it"),
                    ));
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        let out = reader
            .join()
            .map_err(|_| std::io::Error::other("the worker's reader panicked"))??;
        if !status.success() && out.is_empty() {
            return Err(std::io::Error::other(format!("it ended with {status}")));
        }
        Ok(out)
    })
}

/// A streamed events answer being read: the worker's rows, a line each, read as they come.
/// A watchdog kills the worker at its deadline or at the daemon's stop ([`abort_running`]; a
/// read then ends with an error); dropping the stream kills it too and reaps it.
pub struct RowStream {
    child: std::sync::Arc<std::sync::Mutex<Option<std::process::Child>>>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The longest row line read: rows are a summary and details of a few KiB.
const MAX_ROW_LINE: usize = 1024 * 1024;

impl RowStream {
    /// Starts a streamed events request and reads its head.
    pub fn open(request: &Request, timeout: Duration) -> Result<(StreamHead, RowStream), Failure> {
        let input = serde_json::to_vec(request).map_err(|e| Failure::of_worker(format!("cannot encode: {e}")))?;
        let (child, mut stdin, stdout) = spawn_worker().map_err(|e| Failure::of_worker(e.to_string()))?;
        let child = std::sync::Arc::new(std::sync::Mutex::new(Some(child)));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (watched, finished) = (child.clone(), done.clone());
        let deadline = Instant::now() + timeout;
        let aborts = ABORTS.load(std::sync::atomic::Ordering::SeqCst);
        std::thread::Builder::new()
            .name("journal-stream".into())
            .spawn(move || {
                let _ = stdin.write_all(&input);
                drop(stdin);
                // Until the deadline or the daemon's stop (`abort_running`), whichever comes first.
                while Instant::now() < deadline && ABORTS.load(std::sync::atomic::Ordering::SeqCst) == aborts {
                    if finished.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let mut child = watched.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(child) = child.as_mut() {
                    let _ = child.kill();
                }
            })
            .map_err(|e| Failure::of_worker(e.to_string()))?;
        let mut stream = RowStream {
            child,
            stdout: std::io::BufReader::new(stdout),
            done,
        };
        let head = match stream.next_line() {
            Some(Ok(line)) => serde_json::from_slice::<Result<StreamHead, Failure>>(&line)
                .map_err(|e| Failure::of_worker(format!("unreadable answer: {e}")))??,
            Some(Err(e)) => return Err(e),
            None => return Err(Failure::of_worker(format!("no answer within {timeout:?}"))),
        };
        Ok((head, stream))
    }

    /// The next row's line (JSON, without its line break); None at the end.
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, Failure>> {
        use std::io::BufRead;
        let mut line = Vec::new();
        match (&mut self.stdout)
            .take(MAX_ROW_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => None,
            Ok(_) if line.last() != Some(&b'\n') => Some(Err(Failure::of_worker(
                "a row cut short (the worker was killed at its deadline, or a row is over 1 MiB)".to_string(),
            ))),
            Ok(_) => {
                line.pop();
                Some(Ok(line))
            }
            Err(e) => Some(Err(Failure::of_worker(e.to_string()))),
        }
    }
}

impl Drop for RowStream {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut child = self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(mut child) = child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---- the worker's side ----

/// `gpuwarden journal-worker`: one request from stdin, one answer to stdout. Exit 0 when
/// an answer (a failure too) was written.
pub fn serve() -> i32 {
    let mut input = Vec::new();
    let reply = match std::io::stdin().take(MAX_REQUEST).read_to_end(&mut input) {
        Ok(_) => match serde_json::from_slice::<Request>(&input) {
            Ok(Request::Events {
                path,
                since,
                gpu,
                kinds,
                limit,
                before,
                stream: true,
            }) => return stream_events(events(&path, since, gpu, kinds, limit, before), limit),
            Ok(request) => answer(request),
            Err(e) => Err(Failure::of_worker(format!("unreadable request: {e}"))),
        },
        Err(e) => Err(Failure::of_worker(format!("cannot read the request: {e}"))),
    };
    let text = serde_json::to_vec(&reply).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    match out.write_all(&text).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// Writes an events answer as a stream: a `Result<StreamHead, Failure>` line, then one row
/// per line (JSON has no raw line breaks).
fn stream_events(reply: Reply, limit: usize) -> i32 {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (head, rows): (Result<StreamHead, Failure>, Vec<Row>) = match reply {
        Ok(Answer::Events { rows: Some(rows) }) => {
            let next = (rows.len() == limit)
                .then(|| rows.first().map(read::cursor_after))
                .flatten();
            (
                Ok(StreamHead {
                    rows: Some(rows.len()),
                    next,
                }),
                rows,
            )
        }
        Ok(Answer::Events { rows: None }) => (Ok(StreamHead { rows: None, next: None }), Vec::new()),
        Ok(other) => (
            Err(Failure::of_worker(format!("unexpected answer {other:?}"))),
            Vec::new(),
        ),
        Err(e) => (Err(e), Vec::new()),
    };
    let mut write = || -> std::io::Result<()> {
        serde_json::to_writer(&mut out, &head)?;
        out.write_all(b"\n")?;
        for row in &rows {
            serde_json::to_writer(&mut out, row)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    };
    match write() {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// An SXID count as the seed carries it: (switch, address, code, fatal, count, last seen in
/// Unix seconds, message).
pub type SxidSeed = (u32, String, u32, bool, u64, f64, String);

fn seed_of_sxid(x: crate::model::xid::SxidCount) -> SxidSeed {
    let last = crate::model::unix_seconds(x.last_seen);
    (x.switch, x.pci_bus_id, x.sxid, x.fatal, x.count, last, x.message)
}

pub fn sxid_of_seed(s: SxidSeed) -> crate::model::xid::SxidCount {
    let (switch, pci_bus_id, sxid, fatal, count, last, message) = s;
    crate::model::xid::SxidCount {
        switch,
        pci_bus_id,
        sxid,
        fatal,
        count,
        last_seen: crate::model::from_unix_seconds(last),
        message,
    }
}

fn answer(request: Request) -> Reply {
    match request {
        Request::Open { path, boot_id } => open(&path, &boot_id),
        Request::Write(batch) => write(&batch),
        Request::Seed { path, boot_id } => {
            let seed = read::seed(&path, &boot_id)?;
            Ok(Answer::Seed {
                xid_counts: seed.xid_counts.into_iter().map(count_of_seed).collect(),
                kmsg_sequence: seed.kmsg_sequence,
                file_positions: seed.file_positions,
                kernel_lines: seed.kernel_lines,
                clears: seed.clears,
                board_swaps: seed.board_swaps,
                facts: seed.facts,
                sxids: seed.sxids.into_iter().map(seed_of_sxid).collect(),
                validations: seed.validations,
                probe_history: seed.probe_history,
                remediation: seed.remediation,
                sdc: seed.sdc,
            })
        }
        Request::Timeline { path, now } => read::timeline(&path, now)
            .map(|rows| Answer::Timeline { rows })
            .map_err(Failure::from),
        Request::Events {
            path,
            since,
            gpu,
            kinds,
            limit,
            before,
            ..
        } => events(&path, since, gpu, kinds, limit, before),
    }
}

fn count_of_seed(((bus, xid), count, last): ((String, u32), u64, SystemTime)) -> XidCount {
    (bus, xid, count, crate::model::unix_seconds(last))
}

/// The file for writing; a damaged one is moved aside and a new one started.
fn open_for_writing(path: &Path) -> Result<(Connection, Option<(String, PathBuf)>), Failure> {
    match db::open_for_writing(path) {
        Ok(conn) => Ok((conn, None)),
        Err(e) if e.is_corrupt() => {
            let aside = move_aside(path, &e)?;
            let conn = db::open_for_writing(path)?;
            Ok((conn, Some((e.to_string(), aside))))
        }
        Err(e) => Err(e.into()),
    }
}

fn move_aside(path: &Path, e: &DbError) -> Result<PathBuf, Failure> {
    db::move_aside(path).map_err(|io| {
        Failure::from(DbError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("{e}; moving it aside failed: {io}"),
        })
    })
}

fn open(path: &Path, boot_id: &str) -> Reply {
    let (conn, moved_aside) = open_for_writing(path)?;
    let sqlite = DbError::sqlite(path);
    let facts = read::load_facts(&conn).map_err(&sqlite)?;
    let xid_counts = read::xid_counts(&conn, boot_id).map_err(&sqlite)?;
    let bytes = db::used_bytes(&conn).map_err(&sqlite)?;
    Ok(Answer::Opened {
        facts,
        xid_counts: xid_counts.into_iter().map(count_of_seed).collect(),
        bytes,
        moved_aside,
    })
}

fn write(batch: &Batch) -> Reply {
    let (mut conn, moved_aside) = open_for_writing(&batch.path)?;
    if let Some((what, aside)) = moved_aside {
        // Damaged since the last batch: the rows the daemon still knows (this batch's XID
        // joins to rows of the old file) go nowhere; the daemon reopens and says so.
        return Err(Failure {
            message: what,
            advice: "a new file was started".to_string(),
            corrupt: true,
            moved_aside: Some(aside),
        });
    }
    let sqlite = DbError::sqlite(&batch.path);
    let knew_boot = conn
        .query_row("SELECT count(*) FROM boots WHERE boot_id = ?1", [&batch.boot_id], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(&sqlite)?
        > 0;
    let (rows, xid_rows, repeated) = match batch.write(&mut conn).map_err(&sqlite) {
        Ok(written) => written,
        Err(e) if e.is_corrupt() => {
            drop(conn);
            let aside = move_aside(&batch.path, &e)?;
            let mut failure = Failure::from(e);
            failure.moved_aside = Some(aside);
            return Err(failure);
        }
        Err(e) => return Err(e.into()),
    };
    let used = db::used_bytes(&conn).map_err(&sqlite)?;
    // Pruned when due, and at once after a burst that took the file over its cap.
    let bytes = match &batch.prune {
        Some(prune) if prune.due || used > prune.max_bytes => {
            db::prune(&conn, prune.oldest, prune.max_bytes, &batch.boot_id).map_err(&sqlite)?
        }
        _ => used,
    };
    Ok(Answer::Written {
        rows,
        xid_rows,
        bytes: Some(bytes),
        knew_boot,
        repeated,
    })
}

fn events(
    path: &Path,
    since: Option<f64>,
    gpu: Option<String>,
    kinds: Vec<Kind>,
    limit: usize,
    before: Option<(f64, i64)>,
) -> Reply {
    let conn = db::open_read_only(path)?;
    let sqlite = DbError::sqlite(path);
    let mut query = read::Query {
        since,
        gpus: Vec::new(),
        kinds,
        limit,
        before,
        // The API's rows are for tools: all of them.
        hide_baselines: false,
    };
    if let Some(gpu) = gpu {
        match read::find_gpu(&conn, &read::GpuSelector::parse(&gpu)).map_err(&sqlite)? {
            Some(facts) => query.gpus = vec![facts.uuid],
            None => return Ok(Answer::Events { rows: None }),
        }
    }
    let rows = read::events(&conn, &query).map_err(&sqlite)?;
    Ok(Answer::Events { rows: Some(rows) })
}
