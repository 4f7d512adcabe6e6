//! Whether the journal's file can be written now, and what the `journal` metrics say of it:
//! open or not, when to try again, the outage's one log line each way, why the last open or
//! write failed, and the counts (rows written, write errors, rows dropped, bytes).

use crate::journal::store::worker::Failure;
use crate::model::JournalStatus;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long to wait before opening the file again after it failed.
pub(super) const RETRY_EVERY: Duration = Duration::from_secs(30);
/// Rows kept while the database cannot be written; older ones are dropped (and counted).
pub(super) const MAX_BACKLOG: usize = 10_000;

pub(super) struct FileState {
    path: PathBuf,
    /// The last worker opened or wrote the file: write batches without opening first.
    open: bool,
    retry_at: Instant,
    outage: crate::service::logging::Outage,
    /// Why the last open or write failed, until one succeeds: what the stop's loss is blamed on.
    last_failure: Option<String>,
    status: JournalStatus,
}

impl FileState {
    pub(super) fn new(path: PathBuf) -> FileState {
        FileState {
            path,
            open: false,
            retry_at: Instant::now(),
            outage: Default::default(),
            last_failure: None,
            status: JournalStatus::default(),
        }
    }

    pub(super) fn is_open(&self) -> bool {
        self.open
    }

    /// Whether the file should be opened now: not known good, and its retry is due.
    pub(super) fn open_due(&self) -> bool {
        !self.open && Instant::now() >= self.retry_at
    }

    pub(super) fn retry_at(&self) -> Instant {
        self.retry_at
    }

    /// A retry now (the stop's last batch, a new file after a damaged one was moved aside).
    pub(super) fn retry_now(&mut self) {
        self.retry_at = Instant::now();
    }

    /// The file opened: writing again.
    pub(super) fn opened(&mut self, bytes: u64) {
        self.outage
            .recovered(format!("journal {}: writing again", self.path.display()));
        self.open = true;
        self.last_failure = None;
        self.status.up = true;
        self.status.bytes = bytes;
    }

    /// A batch was written.
    pub(super) fn wrote(&mut self, rows: u64, bytes: Option<u64>) {
        if let Some(bytes) = bytes {
            self.status.bytes = bytes;
        }
        self.status.rows_written += rows;
        self.status.up = true;
        self.last_failure = None;
    }

    /// An open or a write failed: closed, logged once for the outage, tried again later.
    pub(super) fn failed(&mut self, e: &Failure) {
        self.last_failure = Some(e.to_string());
        self.outage.failed(format!(
            "journal {}: cannot write: {e}; {}. Metrics and health go on; the journal keeps up to \
             {MAX_BACKLOG} rows in memory and tries again every {}s",
            self.path.display(),
            e.advice,
            RETRY_EVERY.as_secs()
        ));
        self.open = false;
        self.status.up = false;
        self.status.write_errors += 1;
        self.retry_at = Instant::now() + RETRY_EVERY;
    }

    /// A row dropped from a full backlog.
    pub(super) fn dropped_one(&mut self) {
        self.status.dropped += 1;
    }

    /// What failed last, for the stop's loss ("the journal worker did not answer" when nothing
    /// did: then the worker hung).
    pub(super) fn blame(&self) -> &str {
        self.last_failure
            .as_deref()
            .unwrap_or("the journal worker did not answer")
    }

    /// The status to publish, with the rows dropped elsewhere (the queue, the XID outbox).
    pub(super) fn status(&self, dropped_elsewhere: u64) -> JournalStatus {
        let mut status = self.status.clone();
        status.dropped += dropped_elsewhere;
        status.up = self.open && status.up;
        status
    }
}
