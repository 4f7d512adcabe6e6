//! Whether the journal's file can be written now, and what the `journal` metrics say of it:
//! open or not, when to try again, the outage's one log line each way, why the last open or
//! write failed, and the counts (rows written, write errors, rows dropped, bytes).

use crate::journal::store::worker::Failure;
use crate::model::JournalStatus;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The first wait before opening the file again after it failed: short, since a start under
/// load or a lock held for a moment is the common cause and the sinks read nothing meanwhile.
pub(super) const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between tries: the back-off doubles from `FIRST_RETRY` up to this.
pub(super) const RETRY_EVERY: Duration = Duration::from_secs(30);
/// Rows kept while the database cannot be written; older ones are dropped (and counted).
pub(super) const MAX_BACKLOG: usize = 10_000;

pub(super) struct FileState {
    path: PathBuf,
    /// The last worker opened or wrote the file: write batches without opening first.
    open: bool,
    retry_at: Instant,
    /// The wait after the next failure; back to `FIRST_RETRY` once the file opens or a batch is
    /// written.
    backoff: Duration,
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
            backoff: FIRST_RETRY,
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
        self.backoff = FIRST_RETRY;
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
        self.backoff = FIRST_RETRY;
        self.last_failure = None;
    }

    /// An open or a write failed: closed, logged once for the outage, tried again later.
    pub(super) fn failed(&mut self, e: &Failure) {
        self.last_failure = Some(e.to_string());
        self.outage.failed(format!(
            "journal {}: cannot write: {e}; {}. Metrics and health go on; the journal keeps up to \
             {MAX_BACKLOG} rows in memory and tries again after {}s, backing off to every {}s",
            self.path.display(),
            e.advice,
            FIRST_RETRY.as_secs(),
            RETRY_EVERY.as_secs()
        ));
        self.open = false;
        self.status.up = false;
        self.status.write_errors += 1;
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(RETRY_EVERY);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Failure {
        Failure {
            message: "database is locked".to_string(),
            advice: "close the other program".to_string(),
            corrupt: false,
            moved_aside: None,
        }
    }

    /// The wait before the next open, measured from now (rounded up to whole seconds).
    fn wait_s(file: &FileState) -> u64 {
        let wait = file.retry_at().saturating_duration_since(Instant::now());
        (wait.as_millis() as u64).div_ceil(1000)
    }

    #[test]
    fn a_failed_open_is_tried_again_after_a_second_then_backs_off_to_thirty() {
        let mut file = FileState::new(PathBuf::from("/var/lib/gpuwarden/journal.db"));
        assert!(file.open_due(), "a new file is opened at once");
        let mut waits = Vec::new();
        for _ in 0..8 {
            file.failed(&failure());
            waits.push(wait_s(&file));
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert!(!file.open_due(), "not before its retry time");
        assert_eq!(file.status(0).write_errors, 8);
        assert!(!file.status(0).up);
    }

    #[test]
    fn an_open_or_a_written_batch_starts_the_back_off_over() {
        let mut file = FileState::new(PathBuf::from("/var/lib/gpuwarden/journal.db"));
        for _ in 0..4 {
            file.failed(&failure());
        }
        file.opened(4096);
        file.failed(&failure());
        assert_eq!(wait_s(&file), 1, "after an open, the first wait again");
        for _ in 0..3 {
            file.failed(&failure());
        }
        file.wrote(5, None);
        file.failed(&failure());
        assert_eq!(wait_s(&file), 1, "after a written batch, the first wait again");
    }
}
