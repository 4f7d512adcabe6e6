//! The journal's task on the runtime: writes what the [`Writer`] decided, in one transaction
//! at most once a second, through a worker process.
//!
//! It sleeps until there is something to write. A published snapshot reaches the writer
//! through a [`Store`] hook on the publishing thread (which only compares and queues), a
//! queued row through [`Journal::record`](crate::journal::Journal) or the XID listener; either wakes
//! the task only when a row, a fact or a count waits. Otherwise the task wakes for a retry
//! (a closed file, a failed batch) and for the hourly deletion of old rows: a quiet node
//! costs the runtime no wake-up a second (docs/performance.md, "Against a C loop").

use crate::journal::Shared;
use crate::journal::store::worker::{self, Answer, Failure, Request};
use crate::journal::writer::Writer;
use crate::service::stop::Stop;
use crate::snapshot::store::Store;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// At most one transaction per this.
const BATCH_EVERY: Duration = Duration::from_secs(1);
/// A worker that has not answered by then is killed; the batch is kept and retried (with
/// the same id, so a worker that did commit before it was killed is not written twice).
const WORKER_TIMEOUT: Duration = Duration::from_secs(30);
/// When the daemon stops: how long a batch in flight may still take before its worker is
/// killed, and how long the last batch (a fresh worker) may take. Both well inside the
/// daemon's own stop time-out.
const STOP_GRACE: Duration = Duration::from_millis(400);
const LAST_BATCH_TIMEOUT: Duration = Duration::from_millis(900);

/// The writer, shared by the task and the store's hook; held only for what does not wait.
pub(super) type SharedWriter = Arc<Mutex<Writer>>;

fn lock(writer: &SharedWriter) -> MutexGuard<'_, Writer> {
    writer.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lets `store` show the writer each snapshot as it is published, and wakes the task when
/// that made something to write.
pub(in crate::journal) fn look_at_each_snapshot(store: &Store, writer: SharedWriter, shared: Arc<Shared>) {
    store.on_publish(Box::new(move |snapshot| {
        let mut w = lock(&writer);
        if !w.started {
            return;
        }
        // A counted XID is what made this publish, often: its row waits no longer.
        w.take_xids();
        w.look_at(snapshot);
        if w.has_work() {
            shared.wake.notify_one();
        }
        tell_swaps(w);
    }));
}

/// Tells the service state's owner of the board swaps found, on a thread of their own: the
/// owner may be waiting for this task to record another transition (which needs the writer,
/// and the publisher's thread or this task's to go on). A board swap is rare: a thread for it
/// costs nothing on a node where none happens.
fn tell_swaps(mut writer: MutexGuard<'_, Writer>) {
    let swaps = writer.take_swaps();
    if swaps.is_empty() {
        return;
    }
    let lifecycle = writer.lifecycle.clone();
    drop(writer);
    let told = std::thread::Builder::new()
        .name("gpuwarden-swap".into())
        .spawn(move || {
            for swap in swaps {
                lifecycle.apply(swap);
            }
        });
    if let Err(e) = told {
        log::error!(
            "journal: cannot start a thread to tell of a board swap ({e}); the running daemon does not hold the new board out until a restart takes the swap and its validation back from their rows"
        );
    }
}

/// The task: until the stop, writes whatever is waiting when woken; then the last batch.
/// A task rather than a thread of its own: it is idle almost always, and a thread costs
/// the daemon a stack and a malloc arena (docs/performance.md).
pub(in crate::journal) async fn run(writer: SharedWriter, shared: Arc<Shared>, stop: Stop) {
    open(&writer, WORKER_TIMEOUT).await;
    {
        let mut w = lock(&writer);
        let started = w.daemon_event("started");
        w.push(started);
        w.started = true;
    }
    let mut last_batch: Option<Instant> = None;
    loop {
        let due = lock(&writer).next_due();
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep_until(due.into()) => {}
            _ = stop.stopped() => break,
        }
        // A storm of wake-ups still makes one transaction a second.
        if let Some(wait) = last_batch.and_then(|at| (at + BATCH_EVERY).checked_duration_since(Instant::now())) {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.stopped() => break,
            }
        }
        let published = {
            let mut w = lock(&writer);
            if !w.take_queued() {
                break;
            }
            // A queued row names its GPU from the facts: look at what is published now. Before
            // the first round is, rows wait (the first publish wakes the task again).
            let published = w.look_at_latest();
            tell_swaps(w);
            published
        };
        if !published {
            // Looked at again in a second, or at the first publish.
            last_batch = Some(Instant::now());
            continue;
        }
        flush(&writer, Some(&stop), WORKER_TIMEOUT).await;
        lock(&writer).publish_status();
        last_batch = Some(Instant::now());
    }
    lock(&writer).last_rows();
    // A batch that failed (its worker stalled and was killed) first, then the rest, each
    // with a fresh worker tried at once.
    for _ in 0..2 {
        lock(&writer).retry_now();
        flush(&writer, None, LAST_BATCH_TIMEOUT).await;
        if lock(&writer).all_written() {
            break;
        }
    }
    let mut w = lock(&writer);
    w.log_loss();
    w.publish_status();
    // What a late publish brings is not looked at: nobody would write it.
    w.started = false;
}

/// Opens the file when it is not known good and a retry is due.
async fn open(writer: &SharedWriter, timeout: Duration) {
    let Some(request) = lock(writer).open_request() else {
        return;
    };
    let answer = worker::call_blocking_pool(request, timeout).await;
    lock(writer).opened(answer);
}

/// Writes the next batch, if any. `stop`: the daemon's stop, which cuts a stalled worker short.
async fn flush(writer: &SharedWriter, stop: Option<&Stop>, timeout: Duration) {
    open(writer, timeout).await;
    let Some(batch) = lock(writer).take_batch() else {
        return;
    };
    let answer = call_until_stop(Request::Write(batch.clone()), timeout, stop).await;
    lock(writer).written(batch, answer);
    // The request's text and the answer: give the heap back, the daemon idles far more
    // than it writes.
    crate::service::logging::trim_heap();
}

/// A worker call that the daemon's stop cuts short: once `stop` is heard, a worker that has
/// not answered within [`STOP_GRACE`] is killed (a stopped one too: SIGKILL), so the stop
/// never waits out [`WORKER_TIMEOUT`] and leaves no worker behind.
async fn call_until_stop(request: Request, timeout: Duration, stop: Option<&Stop>) -> Result<Answer, Failure> {
    let call = worker::call_blocking_pool(request, timeout);
    let Some(stop) = stop else {
        return call.await;
    };
    tokio::pin!(call);
    tokio::select! {
        answer = &mut call => answer,
        _ = stop.stopped() => match tokio::time::timeout(STOP_GRACE, &mut call).await {
            Ok(answer) => answer,
            Err(_) => {
                worker::abort_running();
                call.await
            }
        },
    }
}
