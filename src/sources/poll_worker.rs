//! One GPU's poll thread, and the grid it polls on.
//!
//! The thread keeps to the coordinator's grid by itself (round `n` at `at + n × interval`), as
//! a plain C loop would: at each slot it polls and sends the answer. So a round costs the
//! coordinator one wake-up, the answer, instead of three (its own timer, waking the thread
//! with a request, the answer): on an H100 the hand-offs were a third of the coordinator's
//! CPU (docs/performance.md, "Against a C loop"). Vendor libraries are only ever called from
//! these threads, never from the async runtime that serves HTTP.

use crate::backend::{DevicePoller, PollReport};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What a GPU thread sends back: which worker (by id), for which round, and what it read.
pub(super) struct PollResult {
    pub worker: usize,
    pub round: u64,
    pub report: PollReport,
    pub elapsed: Duration,
}

/// The rounds' grid: round `round` is due at `at`, the next one `interval` later.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Grid {
    pub round: u64,
    pub at: Instant,
    pub interval: Duration,
}

impl Grid {
    /// The next slot.
    pub fn next(self) -> Grid {
        Grid {
            round: self.round + 1,
            at: self.at.checked_add(self.interval).unwrap_or(self.at),
            ..self
        }
    }

    /// The slot a GPU thread polls after a poll that ended at `now`: the next one, or, when
    /// the poll ran past it (a slow or hung call), the latest slot that has begun, at once.
    /// Rounds skipped that way go unanswered (the GPU reads down for them), as they did when
    /// a busy thread was not asked.
    pub fn after(self, now: Instant) -> Grid {
        let next = self.next();
        if next.at > now || self.interval.is_zero() {
            return next;
        }
        let behind = (now.duration_since(next.at).as_nanos() / self.interval.as_nanos()) as u64;
        let skip = u32::try_from(behind).unwrap_or(u32::MAX);
        Grid {
            round: next.round + u64::from(skip),
            at: next.at.checked_add(self.interval.saturating_mul(skip)).unwrap_or(now),
            ..next
        }
    }
}

/// What the coordinator tells a GPU thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Order {
    /// Poll now for this round, then wait for the next order (`gpuwarden check`, the first
    /// round).
    Once(u64),
    /// Poll on this grid from its first slot on (at once when that slot has begun), until
    /// told otherwise.
    Every(Grid),
}

/// The thread's body: follows its orders until the coordinator drops their channel, or until
/// `answer` says nobody listens any more.
pub(super) fn run(
    mut poller: Box<dyn DevicePoller>,
    worker: usize,
    orders: Receiver<Order>,
    answer: impl Fn(PollResult) -> bool,
) {
    let mut grid: Option<Grid> = None;
    loop {
        let round = match next_round(&orders, &mut grid) {
            Next::Poll(round) => round,
            Next::Wait => continue,
            Next::End => return,
        };
        let started = Instant::now();
        let report = poller.poll();
        let result = PollResult {
            worker,
            round,
            report,
            elapsed: started.elapsed(),
        };
        if !answer(result) {
            return;
        }
        if let Some(g) = grid.as_mut() {
            *g = g.after(Instant::now());
        }
    }
}

enum Next {
    Poll(u64),
    Wait,
    End,
}

/// Waits for the grid's next slot or a new order, whichever comes first.
fn next_round(orders: &Receiver<Order>, grid: &mut Option<Grid>) -> Next {
    let order = match *grid {
        None => match orders.recv() {
            Ok(order) => order,
            Err(_) => return Next::End,
        },
        Some(g) => match orders.recv_timeout(g.at.saturating_duration_since(Instant::now())) {
            Ok(order) => order,
            Err(RecvTimeoutError::Timeout) => return Next::Poll(g.round),
            Err(RecvTimeoutError::Disconnected) => return Next::End,
        },
    };
    match order {
        Order::Once(round) => {
            *grid = None;
            Next::Poll(round)
        }
        Order::Every(g) => {
            *grid = Some(g);
            if g.at <= Instant::now() {
                Next::Poll(g.round)
            } else {
                Next::Wait
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(at: Instant) -> Grid {
        Grid {
            round: 5,
            at,
            interval: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_poll_on_time_waits_for_the_next_slot() {
        let start = Instant::now();
        let after = grid(start).after(start + Duration::from_millis(300));
        assert_eq!((after.round, after.at), (6, start + Duration::from_secs(1)));
    }

    #[test]
    fn a_poll_that_ran_past_slots_polls_at_once_for_the_latest_begun() {
        let start = Instant::now();
        // Ended 3.4 s after slot 5: slots 6, 7 and 8 have begun; 8 is polled at once.
        let after = grid(start).after(start + Duration::from_millis(3400));
        assert_eq!((after.round, after.at), (8, start + Duration::from_secs(3)));
        // Exactly on a slot's time: that slot.
        let after = grid(start).after(start + Duration::from_secs(2));
        assert_eq!((after.round, after.at), (7, start + Duration::from_secs(2)));
    }

    /// A poller that counts its polls.
    struct Counting(std::sync::Arc<std::sync::atomic::AtomicU32>);

    impl DevicePoller for Counting {
        fn identity(&self) -> &crate::model::DeviceIdentity {
            unreachable!("not asked in these tests")
        }
        fn backend_name(&self) -> &'static str {
            "test"
        }
        fn poll(&mut self) -> PollReport {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            PollReport::default()
        }
    }

    #[test]
    fn the_thread_polls_on_its_grid_without_being_asked_and_ends_with_its_orders() {
        let polls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (orders_tx, orders_rx) = std::sync::mpsc::channel();
        let (answers_tx, answers_rx) = std::sync::mpsc::channel();
        let poller = Box::new(Counting(polls.clone()));
        let thread = std::thread::spawn(move || run(poller, 3, orders_rx, |r| answers_tx.send(r).is_ok()));
        orders_tx.send(Order::Once(1)).unwrap();
        let first = answers_rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!((first.worker, first.round), (3, 1));
        let start = Instant::now() + Duration::from_millis(50);
        orders_tx
            .send(Order::Every(Grid {
                round: 2,
                at: start,
                interval: Duration::from_millis(50),
            }))
            .unwrap();
        let rounds: Vec<u64> = (0..4)
            .map(|_| answers_rx.recv_timeout(Duration::from_secs(5)).unwrap().round)
            .collect();
        assert_eq!(rounds, [2, 3, 4, 5], "one answer per slot, in order");
        assert!(
            Instant::now() >= start + Duration::from_millis(150),
            "not before their slots"
        );
        drop(orders_tx);
        thread.join().unwrap();
        let after = polls.load(std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(
            polls.load(std::sync::atomic::Ordering::SeqCst),
            after,
            "no poll once the orders are gone"
        );
    }
}
