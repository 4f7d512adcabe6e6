//! A value that a source replaces whole, with a counter that moves on every change
//! ([`Versioned`]), and the "something changed" signal ([`Changed`]) that sources give and the
//! refresher waits for. Ground-floor primitives: the sources, the XID store, the backends and
//! the snapshot store all build on them.

use std::sync::{Arc, RwLock};

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
        self.update_when(|value| {
            change(value);
            true
        });
    }
}

impl<T: Clone> Versioned<T> {
    /// As [`Versioned::update`], but the value is replaced (and the counter moved) only when
    /// `change` says it changed something; what it said.
    pub fn update_when(&self, change: impl FnOnce(&mut T) -> bool) -> bool {
        let mut guard = match self.current.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut next = (**guard).clone();
        if !change(&mut next) {
            return false;
        }
        *guard = Arc::new(next);
        drop(guard);
        self.moved_on();
        true
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
mod tests {
    use super::*;
    use std::time::Duration;

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
