//! One GPU's poll thread and the coordinator's view of it: the thread keeps the timetable
//! itself (it polls when its round is due, or at once when asked, and says which round it
//! will poll next), so that a round wakes the coordinator once, for the answers. A GPU whose
//! driver call hangs keeps only this thread busy. The coordinator (poller.rs) hands out
//! rounds, waits for answers and publishes; it knows the thread by its [`Worker`].

use crate::backend::{DevicePoller, PollReport};
use crate::model::{DeviceIdentity, DeviceReadings};
use crate::sources::grid::SharedGrid;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant, SystemTime};

/// What a GPU thread sends back: which worker (by id), for which round, and what it read.
pub(super) struct PollResult {
    pub(super) worker: usize,
    pub(super) round: u64,
    pub(super) report: PollReport,
    pub(super) elapsed: Duration,
    /// The timetable's round the thread polls next unless asked first: the answer the
    /// coordinator then waits for from it.
    pub(super) next: Option<u64>,
}

/// What the coordinator tells a GPU thread.
pub(super) enum Request {
    /// Poll now, for this round.
    Poll(u64),
    /// The timetable changed: work out the next round again.
    Timetable,
}

/// The coordinator's view of one GPU and its thread.
pub(super) struct Worker {
    /// Unique for the coordinator's lifetime: a backend's workers are replaced after its
    /// library is initialised anew while other backends' stay, so positions are not stable.
    pub(super) id: usize,
    /// Which of the coordinator's backends handed out this GPU's poller.
    pub(super) backend: usize,
    /// The `backend` label its durations and errors are counted under.
    pub(super) backend_name: &'static str,
    pub(super) identity: Arc<DeviceIdentity>,
    /// Sends a round number to poll for at once (else the thread polls on the timetable);
    /// dropping it ends the thread.
    pub(super) requests: Option<SyncSender<Request>>,
    /// The round this GPU's thread owes an answer for, if any: asked for, or due on the
    /// timetable. One owed for a round already over means the thread is stuck in a call.
    pub(super) busy_with: Option<u64>,
    /// The last round it answered in time.
    pub(super) answered: u64,
    pub(super) up: bool,
    pub(super) lost: bool,
    pub(super) last_good_poll: Option<SystemTime>,
    pub(super) readings: Option<DeviceReadings>,
    /// Alive while its thread runs (a GPU reset waits for the library's threads to end).
    pub(super) alive: std::sync::Weak<()>,
}

impl Worker {
    /// This round's answer: readings (up), or none (the driver says the GPU is lost). Logs
    /// the changes: lost, and answering again.
    pub(super) fn take(&mut self, readings: Option<DeviceReadings>) {
        let (was_up, was_lost) = (self.up, self.lost);
        let answered_before = self.last_good_poll.is_some();
        self.up = readings.is_some();
        self.lost = readings.is_none();
        self.readings = readings;
        if self.up {
            self.last_good_poll = Some(SystemTime::now());
            if !was_up && (was_lost || answered_before) {
                crate::gpu_log!(
                    log::Level::Info,
                    self.identity,
                    "GPU {} ({}) answers again",
                    self.identity.index,
                    self.identity.uuid
                );
            }
        } else if !was_lost {
            crate::gpu_log!(
                log::Level::Error,
                self.identity,
                "GPU {} ({}, {}) is lost: the driver reports it fell off the bus",
                self.identity.index,
                self.identity.uuid,
                self.identity.pci_bus_id
            );
        }
    }
}

/// The timetable's next round after `last` for a thread that looks now, and when it is due.
pub(super) fn plan_after(grid: &SharedGrid, last: u64) -> Option<(u64, Instant)> {
    grid.get().and_then(|g| g.next_after(last, Instant::now()))
}

/// A GPU thread's wait for its next poll: the round it is asked for, or else the planned
/// round of the timetable when it is due (with no timetable, only asked rounds); a notice
/// that the timetable changed plans again. None once the coordinator let go of the thread.
pub(super) fn next_poll(
    requests: &Receiver<Request>,
    grid: &SharedGrid,
    last: u64,
    mut plan: Option<(u64, Instant)>,
) -> Option<u64> {
    loop {
        let request = match plan {
            None => requests.recv().ok()?,
            Some((round, due)) => match requests.recv_timeout(due.saturating_duration_since(Instant::now())) {
                Ok(request) => request,
                Err(RecvTimeoutError::Timeout) => return Some(round),
                Err(RecvTimeoutError::Disconnected) => return None,
            },
        };
        match request {
            Request::Poll(round) => return Some(round),
            Request::Timetable => plan = plan_after(grid, last),
        }
    }
}

/// Starts the thread of one GPU: it polls `poller` when its round is due on the timetable
/// (`grid`) or at once when asked, and gives each answer to `answer` (false: nobody listens,
/// the thread ends). Returns where to ask it (none when the thread could not start) and a
/// handle that is alive while it runs (a GPU reset waits for the library's threads to end).
pub(super) fn spawn(
    id: usize,
    identity: &DeviceIdentity,
    mut poller: Box<dyn DevicePoller>,
    grid: SharedGrid,
    answer: impl Fn(PollResult) -> bool + Send + 'static,
) -> (Option<SyncSender<Request>>, std::sync::Weak<()>) {
    // A poll request and a timetable notice at most: a busy (hung) thread is not asked
    // again (`busy_with`), and a notice never keeps a request out.
    let (requests_tx, requests_rx) = sync_channel::<Request>(2);
    let running = Arc::new(());
    let alive = Arc::downgrade(&running);
    let spawned = std::thread::Builder::new()
        .name(format!("poll-gpu{}", identity.index))
        .spawn(move || {
            let _running = running;
            let mut last = 0;
            let mut plan = plan_after(&grid, last);
            while let Some(round) = next_poll(&requests_rx, &grid, last, plan) {
                last = last.max(round);
                let started = Instant::now();
                let report = poller.poll();
                let elapsed = started.elapsed();
                // Told to the coordinator with the answer, so that it waits for the round
                // this thread will really poll.
                plan = plan_after(&grid, last);
                let result = PollResult {
                    worker: id,
                    round,
                    report,
                    elapsed,
                    next: plan.map(|(next, _)| next),
                };
                if !answer(result) {
                    break;
                }
            }
        });
    let requests = match spawned {
        Ok(_) => Some(requests_tx),
        Err(e) => {
            log::error!("cannot start the poll thread for GPU {}: {e}", identity.index);
            None
        }
    };
    (requests, alive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::grid::Grid;

    fn grid_from(first: u64, origin: Instant) -> SharedGrid {
        let grid = SharedGrid::default();
        grid.set(Grid {
            first,
            origin,
            interval: Duration::from_secs(1),
        });
        grid
    }

    #[test]
    fn a_gpu_thread_polls_when_its_round_is_due_or_at_once_when_asked() {
        let (tx, rx) = sync_channel::<Request>(2);
        // Due in 50 ms: the thread sleeps until then and polls that round.
        let started = Instant::now();
        let grid = grid_from(7, started + Duration::from_millis(50));
        assert_eq!(next_poll(&rx, &grid, 0, plan_after(&grid, 0)), Some(7));
        assert!(started.elapsed() >= Duration::from_millis(50));
        // Asked for a round: at once, whatever the timetable says.
        assert!(tx.try_send(Request::Poll(42)).is_ok());
        let asked = Instant::now();
        assert_eq!(next_poll(&rx, &grid, 7, plan_after(&grid, 7)), Some(42));
        assert!(asked.elapsed() < Duration::from_millis(500));
    }

    #[test]
    fn a_new_timetable_is_read_again_and_no_timetable_waits_for_a_request() {
        let (tx, rx) = sync_channel::<Request>(2);
        let grid = SharedGrid::default();
        let waiter = {
            let grid = grid.clone();
            std::thread::spawn(move || next_poll(&rx, &grid, 3, plan_after(&grid, 3)))
        };
        // No timetable: the thread waits; then one comes, and the notice makes it read it.
        std::thread::sleep(Duration::from_millis(30));
        grid.set(Grid {
            first: 4,
            origin: Instant::now() + Duration::from_millis(20),
            interval: Duration::from_secs(1),
        });
        assert!(tx.try_send(Request::Timetable).is_ok());
        assert_eq!(waiter.join().ok().flatten(), Some(4));
    }

    #[test]
    fn a_thread_let_go_of_stops_waiting() {
        let (tx, rx) = sync_channel::<Request>(2);
        let grid = grid_from(1, Instant::now() + Duration::from_secs(3600));
        drop(tx);
        assert_eq!(next_poll(&rx, &grid, 0, plan_after(&grid, 0)), None);
    }
}
