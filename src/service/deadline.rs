//! A blocking call that must not hold its caller past a deadline (a connect to a socket whose
//! daemon is stopped, a read from a peer that never answers): it runs on a thread of its own
//! and is waited for at most so long. A call that never returns is left behind with its
//! thread, which ends with the process.

use std::time::Duration;

/// Why no answer came in time.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Late {
    #[error("no thread for the call: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

/// Runs `call` on a thread named `name` and waits for its answer at most `timeout`.
pub(crate) fn within<T: Send + 'static>(
    name: &str,
    timeout: Duration,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Late> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            // The caller may have stopped waiting: then nobody wants the answer.
            let _ = tx.send(call());
        })
        .map_err(Late::Spawn)?;
    rx.recv_timeout(timeout).map_err(|_| Late::TimedOut(timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn an_answer_in_time_comes_back() {
        assert_eq!(within("quick", Duration::from_secs(5), || 42).unwrap(), 42);
    }

    #[test]
    fn a_call_that_hangs_is_left_behind_at_the_deadline() {
        let started = Instant::now();
        let late = within("hangs", Duration::from_millis(100), || {
            std::thread::sleep(Duration::from_secs(30));
        });
        assert!(matches!(late, Err(Late::TimedOut(_))), "{late:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }
}
