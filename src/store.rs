//! The snapshot store: the one place pollers write and renderers read.
//!
//! The poller publishes a whole new [`Snapshot`] once per round; readers clone an `Arc` and
//! never hold a lock while they work, so a scrape never waits on a poll and a poll never
//! waits on a scrape.

use crate::model::Snapshot;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

pub struct Store {
    current: RwLock<Arc<Snapshot>>,
    published_at: Mutex<Option<Instant>>,
}

impl Store {
    pub fn new() -> Store {
        Store {
            current: RwLock::new(Arc::new(Snapshot::default())),
            published_at: Mutex::new(None),
        }
    }

    pub fn latest(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Publishes the snapshot of a poll round: it also tells /healthz that the poll loop turns.
    pub fn publish(&self, snapshot: Snapshot) {
        self.replace(snapshot);
        if let Ok(mut at) = self.published_at.lock() {
            *at = Some(Instant::now());
        }
    }

    /// Publishes a snapshot that only brings news from between two rounds (an XID, a probe
    /// result); it says nothing about the poll loop.
    pub fn replace(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        match self.current.write() {
            Ok(mut guard) => *guard = snapshot,
            Err(poisoned) => *poisoned.into_inner() = snapshot,
        }
    }

    /// When the poller last published a round; `None` before the first round.
    pub fn published_at(&self) -> Option<Instant> {
        self.published_at.lock().ok().and_then(|at| *at)
    }
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}
