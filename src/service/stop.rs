//! One stop signal for every thread and task of the daemon.
//!
//! The shape is mini-redis's: the daemon owns a [`Shutdown`]; everything that runs on its own
//! (the poll loop, each source, the refresher, the probe scheduler, the kubelet task, the
//! HTTP server) holds a [`Stop`] handle made from it. [`Shutdown::stop`] tells them all at
//! once; each handle is dropped when its thread or task ends, and when the last one is gone
//! [`Shutdown::wait`] returns: "all stopped" is a dropped sender, not a count kept by hand.
//! A thread stuck inside a driver call never drops its handle; `wait` gives up after its
//! timeout and names what is still running.
//!
//! A thread waits with [`Stop::sleep`] (woken at once by a stop, not at its next tick); a
//! task awaits [`Stop::stopped`]. A thread blocked on something else (a channel) asks to be
//! woken with [`Stop::on_stop`]. A part with a shorter life than the daemon (the kernel-log
//! reader a reload replaces, the NVML event thread of one driver load) gets a
//! [`Stop::child`]: stopped with its parent, or on its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

type Callback = Box<dyn FnOnce() + Send>;

struct Signal {
    stopped: Mutex<bool>,
    wake: Condvar,
    /// For tasks: turns true together with `stopped`.
    token: tokio::sync::watch::Sender<bool>,
    /// Run once, at the stop (at once for one registered after it).
    on_stop: Mutex<Vec<Callback>>,
}

impl Default for Signal {
    fn default() -> Self {
        Signal {
            stopped: Mutex::default(),
            wake: Condvar::new(),
            token: tokio::sync::watch::Sender::new(false),
            on_stop: Mutex::default(),
        }
    }
}

impl Signal {
    fn fire(&self) {
        {
            let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
            if *stopped {
                return;
            }
            *stopped = true;
        }
        self.wake.notify_all();
        self.token.send_replace(true);
        let callbacks = std::mem::take(&mut *self.on_stop.lock().unwrap_or_else(PoisonError::into_inner));
        for callback in callbacks {
            callback();
        }
    }

    fn is_fired(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Which handles are alive, by name: what `wait` names when something does not stop.
#[derive(Default)]
struct Running {
    by_name: Mutex<BTreeMap<&'static str, usize>>,
    /// Dropped with the last handle; `wait` sees the channel close.
    all_done: Mutex<Option<tokio::sync::mpsc::Sender<()>>>,
    /// When the stop was given, and how long after it each handle went (the slowest few,
    /// for the log line that says where a slow stop's time went).
    stopped_at: Mutex<Option<std::time::Instant>>,
    went: Mutex<Vec<(&'static str, Duration)>>,
    /// Handles (by name) that asked for more time than the stop's own time-out, and how much
    /// more ([`Stop::ask_for_grace`]).
    grace: Mutex<BTreeMap<&'static str, Duration>>,
}

/// How many of the slowest handles the stop's log line names.
const SLOWEST: usize = 3;

/// How long the stop took and which handles it waited for longest.
pub(crate) struct StopTimes(Arc<Running>);

impl StopTimes {
    /// "in 43 ms; the last to stop: journal (41 ms), http (3 ms)".
    pub(crate) fn took(&self) -> String {
        let since = *self.0.stopped_at.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(since) = since else {
            return String::new();
        };
        let mut went = self.0.went.lock().unwrap_or_else(PoisonError::into_inner).clone();
        went.sort_by_key(|(_, after)| std::cmp::Reverse(*after));
        let slowest: Vec<String> = went
            .iter()
            .take(SLOWEST)
            .map(|(name, after)| format!("{name} ({} ms)", after.as_millis()))
            .collect();
        format!(
            "in {} ms; the last to stop: {}",
            since.elapsed().as_millis(),
            slowest.join(", ")
        )
    }
}

/// The owner's side: stops everything, then waits for it.
pub(crate) struct Shutdown {
    signal: Arc<Signal>,
    running: Arc<Running>,
    all_stopped: tokio::sync::mpsc::Receiver<()>,
}

/// A handle to the stop signal, held by one thread or task for as long as it runs.
pub struct Stop {
    signal: Arc<Signal>,
    running: Arc<Running>,
    name: &'static str,
    /// A clone of the shared sender: the receiver closes when the last handle is dropped.
    _alive: Option<tokio::sync::mpsc::Sender<()>>,
    /// Counted among the handles the stop waits for (false: [`Stop::unawaited`]).
    awaited: bool,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    pub(crate) fn new() -> Shutdown {
        let (sender, all_stopped) = tokio::sync::mpsc::channel(1);
        let running = Running {
            by_name: Mutex::default(),
            all_done: Mutex::new(Some(sender)),
            ..Default::default()
        };
        Shutdown {
            signal: Arc::default(),
            running: Arc::new(running),
            all_stopped,
        }
    }

    /// A handle for the thread or task called `name` (its thread name, for the log).
    pub(crate) fn handle(&self, name: &'static str) -> Stop {
        Stop::new(self.signal.clone(), self.running.clone(), name)
    }

    /// Tells every handle to stop; returns at once.
    pub(crate) fn stop(&self) {
        self.running
            .stopped_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(std::time::Instant::now);
        self.signal.fire();
    }

    /// What the stop's log line reads from, kept past [`Shutdown::wait`].
    pub(crate) fn times(&self) -> StopTimes {
        StopTimes(self.running.clone())
    }

    /// Waits until every handle is dropped, at most `timeout`; the names of those still
    /// running when it gave up (a thread inside a driver call that does not return).
    pub(crate) async fn wait(mut self, timeout: Duration) -> Vec<&'static str> {
        // Our own sender must go too, or the channel never closes.
        self.running
            .all_done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if tokio::time::timeout(timeout, self.all_stopped.recv()).await.is_ok() {
            return Vec::new();
        }
        // A handle still running that asked for grace (a step that must finish on the way
        // out) gets it; the others are not waited for longer on its account but are not
        // cut short before it either: the process ends after both.
        let extra = {
            let running = self.running.by_name.lock().unwrap_or_else(PoisonError::into_inner);
            let grace = self.running.grace.lock().unwrap_or_else(PoisonError::into_inner);
            running.keys().filter_map(|name| grace.get(name)).max().copied()
        };
        if let Some(extra) = extra
            && tokio::time::timeout(extra, self.all_stopped.recv()).await.is_ok()
        {
            return Vec::new();
        }
        self.running
            .by_name
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect()
    }
}

impl Stop {
    fn new(signal: Arc<Signal>, running: Arc<Running>, name: &'static str) -> Stop {
        *running
            .by_name
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name)
            .or_default() += 1;
        let alive = running.all_done.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Stop {
            signal,
            running,
            name,
            _alive: alive,
            awaited: true,
        }
    }

    /// Another handle to the same signal, for a thread or task this one starts.
    pub fn handle(&self, name: &'static str) -> Stop {
        Stop::new(self.signal.clone(), self.running.clone(), name)
    }

    /// Asks the daemon's stop to wait up to `extra` beyond its own time-out for this handle's
    /// thread: for a step that must finish on the way out (persistence mode turned back on
    /// after a GPU reset), bounded well inside systemd's TimeoutStopSec.
    pub fn ask_for_grace(&self, extra: Duration) {
        let mut grace = self.running.grace.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = grace.entry(self.name).or_default();
        *entry = (*entry).max(extra);
    }

    /// A handle to the same signal that the daemon's stop does not wait for: for a thread
    /// that can only stop between blocking C calls (the NVML event wait, up to a second) and
    /// holds nothing that must be written or released before the process ends.
    pub fn unawaited(&self, name: &'static str) -> Stop {
        Stop {
            signal: self.signal.clone(),
            running: self.running.clone(),
            name,
            _alive: None,
            awaited: false,
        }
    }

    /// A signal of its own that also fires when this one does: for a part a reload or a
    /// driver reload replaces while the daemon goes on. Stop it with [`Stop::stop_child`].
    pub fn child(&self, name: &'static str) -> Stop {
        let child = Arc::new(Signal::default());
        let weak = Arc::downgrade(&child);
        self.on_stop(move || {
            if let Some(child) = weak.upgrade() {
                child.fire();
            }
        });
        Stop::new(child, self.running.clone(), name)
    }

    /// Fires this handle's own signal: for a child, ends the child alone; for a daemon's
    /// handle, stops everything (as [`Shutdown::stop`]).
    pub fn stop_child(&self) {
        self.signal.fire();
    }

    pub fn is_stopped(&self) -> bool {
        self.signal.is_fired()
    }

    /// Sleeps `period` or until the stop, whichever comes first; true when stopped.
    pub fn sleep(&self, period: Duration) -> bool {
        let stopped = self.signal.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        let (stopped, _) = self
            .signal
            .wake
            .wait_timeout_while(stopped, period, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        *stopped
    }

    /// Resolves at the stop.
    pub async fn stopped(&self) {
        let mut stopped = self.signal.token.subscribe();
        // Err only when the sender is gone, and the signal owns it.
        let _ = stopped.wait_for(|stopped| *stopped).await;
    }

    /// Runs `wake` at the stop (at once when already stopped): for a thread that blocks on
    /// a channel rather than in [`Stop::sleep`].
    pub fn on_stop(&self, wake: impl FnOnce() + Send + 'static) {
        let mut callbacks = self.signal.on_stop.lock().unwrap_or_else(PoisonError::into_inner);
        if self.signal.is_fired() {
            drop(callbacks);
            wake();
            return;
        }
        callbacks.push(Box::new(wake));
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        if !self.awaited {
            return;
        }
        let since = *self.running.stopped_at.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(since) = since {
            let mut went = self.running.went.lock().unwrap_or_else(PoisonError::into_inner);
            if went.len() < 256 {
                went.push((self.name, since.elapsed()));
            }
        }
        let mut by_name = self.running.by_name.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = by_name.get_mut(self.name) {
            *count -= 1;
            if *count == 0 {
                by_name.remove(self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_sleeping_thread_wakes_at_the_stop_not_at_its_tick() {
        let shutdown = Shutdown::new();
        let stop = shutdown.handle("sleeper");
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let stopped = stop.sleep(Duration::from_secs(30));
            (stopped, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        shutdown.stop();
        let (stopped, slept) = thread.join().unwrap();
        assert!(stopped);
        assert!(slept < Duration::from_secs(5), "slept {slept:?}");
    }

    #[test]
    fn a_sleep_without_a_stop_runs_its_period_and_says_not_stopped() {
        let shutdown = Shutdown::new();
        let stop = shutdown.handle("sleeper");
        assert!(!stop.sleep(Duration::from_millis(20)));
        assert!(!stop.is_stopped());
    }

    #[tokio::test]
    async fn wait_returns_when_every_handle_is_dropped_and_names_those_that_are_not() {
        let shutdown = Shutdown::new();
        let quick = shutdown.handle("quick");
        let stuck = shutdown.handle("stuck-in-a-driver-call");
        let task = tokio::spawn(async move {
            quick.stopped().await;
        });
        shutdown.stop();
        let left = shutdown.wait(Duration::from_millis(200)).await;
        assert_eq!(left, vec!["stuck-in-a-driver-call"]);
        task.await.unwrap();
        drop(stuck);

        let shutdown = Shutdown::new();
        let handle = shutdown.handle("worker");
        let thread = std::thread::spawn(move || while !handle.sleep(Duration::from_secs(10)) {});
        shutdown.stop();
        assert!(shutdown.wait(Duration::from_secs(5)).await.is_empty());
        thread.join().unwrap();
    }

    #[test]
    fn a_child_stops_with_its_parent_or_alone() {
        let shutdown = Shutdown::new();
        let parent = shutdown.handle("daemon");
        let first = parent.child("reader");
        first.stop_child();
        assert!(first.is_stopped());
        assert!(!parent.is_stopped(), "a child's stop must not stop the daemon");
        let second = parent.child("reader");
        shutdown.stop();
        assert!(second.is_stopped());
        assert!(second.sleep(Duration::from_secs(30)));
    }

    #[test]
    fn a_wake_registered_after_the_stop_runs_at_once() {
        let shutdown = Shutdown::new();
        let stop = shutdown.handle("late");
        shutdown.stop();
        let (tx, rx) = std::sync::mpsc::channel();
        stop.on_stop(move || tx.send(()).unwrap());
        assert!(rx.try_recv().is_ok());
    }

    /// The stop does not wait for an unawaited handle (a thread inside a blocking C call),
    /// and says which awaited handles it waited for longest.
    #[tokio::test]
    async fn an_unawaited_handle_is_not_waited_for_and_the_slowest_are_named() {
        let shutdown = Shutdown::new();
        let blocked = shutdown.handle("owner").unawaited("xid-nvml-events");
        let slow = shutdown.handle("journal");
        let times = shutdown.times();
        shutdown.stop();
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(slow);
        });
        let started = Instant::now();
        let left = shutdown.wait(Duration::from_secs(5)).await;
        assert!(left.is_empty(), "{left:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "not held by the blocked thread"
        );
        let took = times.took();
        assert!(took.contains("the last to stop: journal ("), "{took}");
        assert!(!took.contains("xid-nvml-events"), "{took}");
        assert!(blocked.is_stopped(), "it still hears the stop");
        dropper.join().unwrap();
    }

    /// A handle that asked for grace is waited for past the stop's time-out, up to its grace;
    /// without it, the wait ends at the time-out.
    #[tokio::test]
    async fn a_handle_that_asked_for_grace_is_waited_for_longer() {
        let shutdown = Shutdown::new();
        let restoring = shutdown.handle("remediation");
        restoring.ask_for_grace(Duration::from_secs(5));
        shutdown.stop();
        let done = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(restoring);
        });
        let left = shutdown.wait(Duration::from_millis(50)).await;
        assert!(left.is_empty(), "{left:?}");
        done.join().unwrap();
        let shutdown = Shutdown::new();
        let stuck = shutdown.handle("stuck");
        shutdown.stop();
        let started = Instant::now();
        assert_eq!(shutdown.wait(Duration::from_millis(50)).await, ["stuck"]);
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(stuck);
    }
}
