//! The snapshot store: the one place pollers write and renderers read.
//!
//! The poller publishes a whole new [`Snapshot`] once per round; readers clone an `Arc` and
//! never hold a lock while they work, so a scrape never waits on a poll and a poll never
//! waits on a scrape.
//!
//! A consumer that must see every snapshot (the journal) registers a hook with
//! [`Store::on_publish`]: it runs on the publishing thread, right after the swap, so the
//! consumer needs no timer of its own and nothing wakes on a node where nothing happens. A
//! hook only compares and queues; it must never block (no file, no socket, no wait).

use crate::model::Snapshot;
use crate::model::health::Clears;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

/// Called with each snapshot as it is published.
pub(crate) type PublishHook = Box<dyn Fn(&Snapshot) + Send + Sync>;

pub struct Store {
    current: RwLock<Arc<Snapshot>>,
    /// When the poller last published a round, and the clears that round was judged with.
    published: Mutex<Option<(Instant, Arc<Clears>)>>,
    hooks: Mutex<Vec<PublishHook>>,
}

impl Store {
    pub fn new() -> Store {
        Store {
            current: RwLock::new(Arc::new(Snapshot::default())),
            published: Mutex::new(None),
            hooks: Mutex::new(Vec::new()),
        }
    }

    /// Runs `hook` with every snapshot published from now on, on the publishing thread.
    pub fn on_publish(&self, hook: PublishHook) {
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner).push(hook);
    }

    pub fn latest(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Publishes the snapshot of a poll round: it also tells /healthz that the poll loop turns.
    pub fn publish(&self, snapshot: Snapshot) {
        let clears = snapshot.clears.clone();
        self.replace(snapshot);
        if let Ok(mut published) = self.published.lock() {
            *published = Some((Instant::now(), clears));
        }
    }

    /// Publishes a snapshot that only brings news from between two rounds (an XID, a probe
    /// result); it says nothing about the poll loop.
    pub fn replace(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        match self.current.write() {
            Ok(mut guard) => *guard = snapshot.clone(),
            Err(poisoned) => *poisoned.into_inner() = snapshot.clone(),
        }
        // Publishers are the poll thread and the refresher, one round at a time each; the
        // lock keeps two of them from running one hook at once.
        for hook in self.hooks.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            hook(&snapshot);
        }
    }

    /// When the poller last published a round; `None` before the first round.
    pub fn published_at(&self) -> Option<Instant> {
        self.published.lock().ok().and_then(|p| p.as_ref().map(|(at, _)| *at))
    }

    /// The operators' clears the last published round judged its GPUs with (a snapshot made
    /// between rounds may carry newer ones that no rate window has seen yet); `None` before
    /// the first round.
    pub fn round_clears(&self) -> Option<(Instant, Arc<Clears>)> {
        self.published.lock().ok().and_then(|p| p.clone())
    }
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

#[cfg(test)]
mod versioned_tests {
    use super::*;

    #[test]
    fn a_publish_hook_sees_every_snapshot_after_it_is_in_place() {
        let store = Arc::new(Store::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (hook_seen, hook_store) = (seen.clone(), Arc::downgrade(&store));
        store.on_publish(Box::new(move |snapshot| {
            // What the hook is shown is what readers get from now on.
            let latest = hook_store.upgrade().map(|s| s.latest().generation);
            hook_seen.lock().unwrap().push((snapshot.generation, latest));
        }));
        for generation in [1, 2] {
            store.publish(Snapshot {
                generation,
                ..Snapshot::default()
            });
        }
        store.replace(Snapshot {
            generation: 3,
            ..Snapshot::default()
        });
        assert_eq!(*seen.lock().unwrap(), vec![(1, Some(1)), (2, Some(2)), (3, Some(3))]);
    }
}
