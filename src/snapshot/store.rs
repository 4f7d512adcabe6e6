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
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

/// Called with each snapshot as it is published.
pub type PublishHook = Box<dyn Fn(&Snapshot) + Send + Sync>;

pub struct Store {
    current: RwLock<Arc<Snapshot>>,
    published_at: Mutex<Option<Instant>>,
    hooks: Mutex<Vec<PublishHook>>,
}

impl Store {
    pub fn new() -> Store {
        Store {
            current: RwLock::new(Arc::new(Snapshot::default())),
            published_at: Mutex::new(None),
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
        self.published_at.lock().ok().and_then(|at| *at)
    }
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

/// "Something changed": sources signal it, the refresher waits for it, so nothing polls for
/// news while there is none. A signal given while nobody waits is kept for the next wait.
#[derive(Default)]
pub struct Changed {
    notify: tokio::sync::Notify,
}

impl Changed {
    pub fn signal(&self) {
        self.notify.notify_one();
    }

    /// Resolves at the next signal, or at once for one given since the last wait.
    pub async fn wait(&self) {
        self.notify.notified().await;
    }
}

/// A value that a source replaces whole, with a counter that moves on every change: readers
/// take an `Arc` of it without waiting on the writer, and compare counters to learn that it
/// changed without comparing values.
pub struct Versioned<T> {
    current: RwLock<Arc<T>>,
    version: std::sync::atomic::AtomicU64,
    /// Signalled on every change, once set.
    changed: std::sync::OnceLock<Arc<Changed>>,
}

impl<T: Default> Default for Versioned<T> {
    fn default() -> Self {
        Versioned {
            current: RwLock::new(Arc::new(T::default())),
            version: std::sync::atomic::AtomicU64::new(0),
            changed: std::sync::OnceLock::new(),
        }
    }
}

impl<T> Versioned<T> {
    /// Signal `changed` at every change from now on (once; later calls are ignored).
    pub fn signal_to(&self, changed: Arc<Changed>) {
        let _ = self.changed.set(changed);
    }

    fn moved_on(&self) {
        self.version.fetch_add(1, std::sync::atomic::Ordering::Release);
        if let Some(changed) = self.changed.get() {
            changed.signal();
        }
    }

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
        self.moved_on();
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
        self.moved_on();
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

#[cfg(test)]
mod versioned_tests {
    use super::*;
    use std::time::Duration;

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

    #[tokio::test]
    async fn a_change_is_signalled_and_kept_for_a_waiter_that_comes_later() {
        let changed = Arc::new(Changed::default());
        let value: Versioned<u32> = Versioned::default();
        value.signal_to(changed.clone());
        assert!(!value.set_if_changed(0), "the same value is no change");
        let before = value.version();
        assert!(value.set_if_changed(7));
        assert!(value.version() > before);
        assert_eq!(*value.get(), 7);
        // The signal was given before anyone waited: the wait returns at once.
        tokio::time::timeout(Duration::from_secs(1), changed.wait())
            .await
            .expect("the change was signalled");
        // And nothing more until the next change.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), changed.wait())
                .await
                .is_err()
        );
    }
}
