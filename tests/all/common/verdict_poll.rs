//! The node's verdict asked every 0.1 s on a thread, as a health check that runs at any moment
//! would ask it: a hand-over (a reset, a clear, a restart, a stop) must never show a moment
//! in which a node that was out of service reads as fit to resume.

use super::BIN;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One ask: when, `gpuwarden health`'s exit code (0 healthy, 1 unhealthy, 2 unknown) and its
/// first line.
#[derive(Debug, Clone)]
pub struct Ask {
    pub at: Duration,
    pub code: i32,
    pub first_line: String,
}

/// Asks `gpuwarden health --socket SOCKET` every 0.1 s until [`VerdictPoll::finish`].
pub struct VerdictPoll {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Ask>>>,
}

impl VerdictPoll {
    pub fn start(socket: PathBuf) -> VerdictPoll {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut asks = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                let next = Instant::now() + Duration::from_millis(100);
                let out = Command::new(BIN).arg("health").arg("--socket").arg(&socket).output();
                if let Ok(out) = out {
                    let text = String::from_utf8_lossy(&out.stdout);
                    asks.push(Ask {
                        at: started.elapsed(),
                        code: out.status.code().unwrap_or(-1),
                        first_line: text.lines().next().unwrap_or("").to_string(),
                    });
                }
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            asks
        });
        VerdictPoll {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops asking; every answer, oldest first.
    pub fn finish(mut self) -> Vec<Ask> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for VerdictPoll {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The answers with runs of the same code folded: `[0, 1, 0]` for a node that went out of
/// service once and came back.
pub fn code_runs(asks: &[Ask]) -> Vec<i32> {
    let mut runs: Vec<i32> = Vec::new();
    for ask in asks {
        if runs.last() != Some(&ask.code) {
            runs.push(ask.code);
        }
    }
    runs
}

/// Says where the verdict let go between its first unhealthy answer and its last: every
/// answer in between must be unhealthy (1), or, where `unknown_ok`, unknown (2: no daemon to
/// ask, which a health check does not resume on).
pub fn assert_held_throughout(asks: &[Ask], unknown_ok: bool) {
    let first = asks.iter().position(|a| a.code == 1);
    let last = asks.iter().rposition(|a| a.code == 1);
    let (Some(first), Some(last)) = (first, last) else {
        panic!("never unhealthy: {asks:#?}");
    };
    for ask in &asks[first..=last] {
        let held = ask.code == 1 || (unknown_ok && ask.code == 2);
        assert!(
            held,
            "the verdict let go at {:?} (exit {}: {}); folded codes {:?}; every answer:\n{asks:#?}",
            ask.at,
            ask.code,
            ask.first_line,
            code_runs(asks)
        );
    }
}
