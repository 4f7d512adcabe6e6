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

/// A value that a source replaces whole, with a counter that moves on every change: readers
/// take an `Arc` of it without waiting on the writer, and compare counters to learn that it
/// changed without comparing values.
pub struct Versioned<T> {
    current: RwLock<Arc<T>>,
    version: std::sync::atomic::AtomicU64,
}

impl<T: Default> Default for Versioned<T> {
    fn default() -> Self {
        Versioned {
            current: RwLock::new(Arc::new(T::default())),
            version: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl<T> Versioned<T> {
    pub fn get(&self) -> Arc<T> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A number that moves whenever the value does. Read it before [`Versioned::get`]: a
    /// change that lands in between is then seen again, never missed.
    pub fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Replaces the value and moves the counter.
    pub fn set(&self, value: T) {
        let value = Arc::new(value);
        match self.current.write() {
            Ok(mut guard) => *guard = value,
            Err(poisoned) => *poisoned.into_inner() = value,
        }
        self.version.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Replaces the value with what `change` makes of a copy of it.
    pub fn update(&self, change: impl FnOnce(&mut T))
    where
        T: Clone,
    {
        let mut guard = match self.current.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut next = (**guard).clone();
        change(&mut next);
        *guard = Arc::new(next);
        drop(guard);
        self.version.fetch_add(1, std::sync::atomic::Ordering::Release);
    }
}

impl<T: PartialEq> Versioned<T> {
    /// Replaces the value when it differs; true when it did (the counter moved).
    pub fn set_if_changed(&self, value: T) -> bool {
        if *self.get() == value {
            return false;
        }
        self.set(value);
        true
    }
}
