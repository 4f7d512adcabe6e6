//! The HTTP server's connection slots, and who gives one up when they run out.
//!
//! The server keeps at most `MAX_CONNECTIONS` open (http.rs). A client that holds them all
//! (5,000 connections from one unprivileged process, a request on each every 80 s, well inside
//! the 90 s idle limit) used to lock Prometheus out: every fresh scrape waited in the kernel's
//! accept queue until it timed out. Now, when no slot is free, the connections that have waited
//! longest for a request (idle between requests, or a head not finished) are closed to admit
//! new ones, as nginx does when its worker connections run out (`ngx_drain_connections` closes
//! up to 32 reusable keep-alive connections). A connection being answered is never closed. Go's
//! net/http has no such limit at all (a `LimitListener` only blocks accept, which is what
//! starved scrapes here); a cap per client address was not chosen because any local user can
//! connect from every address of 127.0.0.0/8, and a monitoring host behind NAT shares one.
//! A scraper whose kept-alive connection was closed this way opens a new one (Prometheus's
//! client retries a request on a reused connection the server closed), which is admitted.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::Waker;
use std::time::Instant;

/// How many waiting connections one eviction closes: a burst of new clients is admitted
/// without an eviction per accept (nginx drains 32).
pub(crate) const EVICT_AT_ONCE: usize = 16;
/// Only a connection that has waited this long is closed: the writes of a response in flight
/// keep its wait younger, so an answer is never cut off.
pub(crate) const MIN_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A connection's phase, as [`Tracker`] keeps it.
const WAITING: u8 = 0;
const ANSWERING: u8 = 1;

/// One connection's state, shared between its stream (keep_alive.rs) and the registry.
#[derive(Debug)]
pub(crate) struct Tracker {
    phase: AtomicU8,
    /// Milliseconds since the registry's start when its current wait for a request began.
    waiting_since: AtomicU64,
    evict: AtomicBool,
    waker: Mutex<Option<Waker>>,
    epoch: Instant,
}

impl Tracker {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The head is in: the connection is being answered, and is not closed to admit others.
    pub(crate) fn answering(&self) {
        self.phase.store(ANSWERING, Ordering::Relaxed);
    }

    /// A response went out: the wait for the next request starts now.
    pub(crate) fn waiting(&self) {
        self.waiting_since.store(self.now_ms(), Ordering::Relaxed);
        self.phase.store(WAITING, Ordering::Relaxed);
    }

    /// Whether the registry asked this connection to close while it waits.
    pub(crate) fn evicted(&self) -> bool {
        self.evict.load(Ordering::Relaxed) && self.phase.load(Ordering::Relaxed) == WAITING
    }

    /// Keeps the waker of a read that waits, so an eviction can wake it.
    pub(crate) fn park(&self, waker: &Waker) {
        let mut slot = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }

    fn close(&self) {
        self.evict.store(true, Ordering::Relaxed);
        if let Some(waker) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            waker.wake();
        }
    }
}

/// Every open connection's tracker, by the order they came.
#[derive(Debug)]
pub(crate) struct Registry {
    open: Mutex<Vec<Weak<Tracker>>>,
    epoch: Instant,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            open: Mutex::new(Vec::new()),
            epoch: Instant::now(),
        }
    }
}

impl Registry {
    /// A tracker for a connection just accepted: waiting for its first head.
    pub(crate) fn admit(&self) -> Arc<Tracker> {
        let tracker = Arc::new(Tracker {
            phase: AtomicU8::new(WAITING),
            waiting_since: AtomicU64::new(self.epoch.elapsed().as_millis() as u64),
            evict: AtomicBool::new(false),
            waker: Mutex::new(None),
            epoch: self.epoch,
        });
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        // Closed connections' entries go now and then, so the list stays the size of what is open.
        if open.len() >= 64 && open.len().is_power_of_two() {
            open.retain(|w| w.strong_count() > 0);
        }
        open.push(Arc::downgrade(&tracker));
        tracker
    }

    /// Closes up to `count` of the connections that have waited longest for a request, and at
    /// least `min_wait` (never one being answered: a response's writes keep its wait young);
    /// how many it asked to close.
    pub(crate) fn evict_longest_waiting(&self, count: usize, min_wait: std::time::Duration) -> usize {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|w| w.strong_count() > 0);
        let Some(before) = self.epoch.elapsed().checked_sub(min_wait) else {
            return 0;
        };
        let before = before.as_millis() as u64;
        let mut waiting: Vec<Arc<Tracker>> = open
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|t| {
                t.phase.load(Ordering::Relaxed) == WAITING
                    && !t.evict.load(Ordering::Relaxed)
                    && t.waiting_since.load(Ordering::Relaxed) <= before
            })
            .collect();
        drop(open);
        waiting.sort_by_key(|t| t.waiting_since.load(Ordering::Relaxed));
        let chosen = waiting.len().min(count);
        for tracker in &waiting[..chosen] {
            tracker.close();
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    #[test]
    fn the_longest_waiting_go_first_and_one_being_answered_never() {
        let registry = Registry::default();
        let oldest = registry.admit();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let busy = registry.admit();
        busy.answering();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let newer = registry.admit();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let newest = registry.admit();
        assert_eq!(
            registry.evict_longest_waiting(2, Duration::from_secs(60)),
            0,
            "none has waited a minute"
        );
        assert_eq!(registry.evict_longest_waiting(2, Duration::ZERO), 2);
        assert!(oldest.evicted() && newer.evicted());
        assert!(!busy.evicted() && !newest.evicted());
        // One chosen while it waited whose request came in meanwhile is not cut off mid-answer.
        assert_eq!(
            registry.evict_longest_waiting(5, Duration::ZERO),
            1,
            "only the newest was left waiting"
        );
        newest.answering();
        assert!(!newest.evicted(), "it is being answered");
        newest.waiting();
        assert!(newest.evicted(), "closed once its answer is out");
        // Closed connections leave the list.
        drop((oldest, newer, newest));
        assert_eq!(registry.evict_longest_waiting(5, Duration::ZERO), 0);
        assert_eq!(registry.open.lock().unwrap().len(), 1);
    }
}
