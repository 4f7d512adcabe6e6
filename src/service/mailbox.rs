//! A channel whose receiver goes to sleep at once when there is nothing to take.
//!
//! The poll loop's threads wait twice a round: each GPU thread for its next poll (a request,
//! or the timetable's time), the coordinator for the GPU threads' answers. std's `mpsc` (like
//! crossbeam's channels, which it comes from) spins before it sleeps: up to 127 PAUSE
//! instructions and a few `sched_yield`s, which pays off when a message is microseconds away,
//! and never here, where it is most of a second away, or a whole NVML poll. A mutex, a
//! condition variable and a queue block at once: about 20 µs of the coordinator's round on a
//! 2-core VM, within the noise on an H100 (docs/performance.md, "The poll loop's waits").
//!
//! Same shape as `mpsc`: senders clone, one receiver; `send` fails once the receiver is gone,
//! `recv` once every sender is gone and the queue is empty. The error types are `mpsc`'s.

use std::collections::VecDeque;
use std::sync::mpsc::{RecvTimeoutError, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when a message comes or the last sender goes.
    arrived: Condvar,
}

struct State<T> {
    queue: VecDeque<T>,
    /// `try_send` says Full at this many messages waiting (`send` does not look).
    capacity: usize,
    senders: usize,
    receiver_alive: bool,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
}

/// A mailbox: `capacity` is where `try_send` says Full (`usize::MAX`: never).
pub fn mailbox<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            capacity,
            senders: 1,
            receiver_alive: true,
        }),
        arrived: Condvar::new(),
    });
    (Sender { shared: shared.clone() }, Receiver { shared })
}

impl<T> Sender<T> {
    /// Queues `message`; gives it back when the receiver is gone.
    pub fn send(&self, message: T) -> Result<(), T> {
        {
            let mut state = self.shared.lock();
            if !state.receiver_alive {
                return Err(message);
            }
            state.queue.push_back(message);
        }
        // After the unlock, so that the woken receiver does not wait again for the lock.
        self.shared.arrived.notify_one();
        Ok(())
    }

    /// Queues `message` unless `capacity` messages wait already or the receiver is gone.
    pub fn try_send(&self, message: T) -> Result<(), TrySendError<T>> {
        {
            let mut state = self.shared.lock();
            if !state.receiver_alive {
                return Err(TrySendError::Disconnected(message));
            }
            if state.queue.len() >= state.capacity {
                return Err(TrySendError::Full(message));
            }
            state.queue.push_back(message);
        }
        self.shared.arrived.notify_one();
        Ok(())
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut state = self.shared.lock();
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            // A receiver waiting for a message that can no longer come must hear it.
            self.shared.arrived.notify_all();
        }
    }
}

impl<T> Receiver<T> {
    /// The next message, waiting as long as it takes; None once every sender is gone.
    pub fn recv(&self) -> Option<T> {
        let mut state = self.shared.lock();
        loop {
            if let Some(message) = state.queue.pop_front() {
                return Some(message);
            }
            if state.senders == 0 {
                return None;
            }
            state = self.shared.arrived.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The next message, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.shared.lock();
        loop {
            if let Some(message) = state.queue.pop_front() {
                return Ok(message);
            }
            if state.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            // A timeout too long to add to now waits without one.
            let Some(deadline) = deadline else {
                state = self.shared.arrived.wait(state).unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            state = self
                .shared
                .arrived
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The next message if one waits.
    pub fn try_recv(&self) -> Option<T> {
        self.shared.lock().queue.pop_front()
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.receiver_alive = false;
        // Nobody will read them: messages go now, not with the last sender.
        state.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_arrive_in_order_and_try_send_stops_at_the_capacity() {
        let (tx, rx) = mailbox(2);
        assert!(tx.try_send(1).is_ok());
        assert!(tx.try_send(2).is_ok());
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        assert_eq!(rx.try_recv(), Some(1));
        assert_eq!(rx.recv(), Some(2));
        assert_eq!(rx.try_recv(), None);
    }

    #[test]
    fn a_waiting_receiver_wakes_for_a_message_from_another_thread() {
        let (tx, rx) = mailbox(usize::MAX);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            tx.send(7).is_ok()
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(7));
        assert!(sender.join().unwrap_or(false));
    }

    #[test]
    fn recv_timeout_gives_up_at_its_deadline() {
        let (_tx, rx) = mailbox::<u8>(1);
        let started = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(80)),
            Err(RecvTimeoutError::Timeout)
        );
        assert!(started.elapsed() >= Duration::from_millis(80));
    }

    #[test]
    fn the_last_sender_gone_ends_a_wait_and_a_gone_receiver_fails_a_send() {
        let (tx, rx) = mailbox::<u8>(1);
        let second = tx.clone();
        drop(tx);
        let waiter = std::thread::spawn(move || rx.recv());
        std::thread::sleep(Duration::from_millis(50));
        // One sender left: the waiter still waits.
        assert!(!waiter.is_finished());
        drop(second);
        assert_eq!(waiter.join().ok(), Some(None));

        let (tx, rx) = mailbox::<u8>(1);
        tx.send(1).ok();
        drop(rx);
        assert_eq!(tx.send(2), Err(2));
        assert!(matches!(tx.try_send(3), Err(TrySendError::Disconnected(3))));
    }

    #[test]
    fn a_message_already_queued_is_taken_after_the_senders_went() {
        let (tx, rx) = mailbox(usize::MAX);
        tx.send("last words").ok();
        drop(tx);
        assert_eq!(rx.recv_timeout(Duration::from_secs(1)), Ok("last words"));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(1)),
            Err(RecvTimeoutError::Disconnected)
        );
    }
}
