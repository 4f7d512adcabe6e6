//! Logging set-up, and a limiter so a failing call logs once, not once a second.
//!
//! Under systemd (stderr connected to the journal) records go to the journal natively, with
//! structured fields from the log call's key-values: `gpu_uuid`, `pci_bus_id` and `xid`
//! become `GPU_UUID`, `PCI_BUS_ID` and `XID`, so `journalctl -u gpuwarden XID=79` works.
//! Anywhere else they go to stderr as text.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Logs to the journal when connected to it, else to stderr, at `default_level` ("info",
/// "warn", ...); `RUST_LOG` overrides the level on stderr.
pub fn init(default_level: &str) {
    if systemd_journal_logger::connected_to_journal()
        && let Ok(journal) = systemd_journal_logger::JournalLog::new()
    {
        let journal = journal.with_syslog_identifier("gpuwarden".to_string());
        if journal.install().is_ok() {
            let level = std::env::var("RUST_LOG")
                .ok()
                .and_then(|l| l.parse().ok())
                .or(default_level.parse().ok());
            log::set_max_level(level.unwrap_or(log::LevelFilter::Info));
            return;
        }
    }
    let env = env_logger::Env::default().default_filter_or(default_level);
    // Ignore the error of a second init (tests may call this more than once).
    let _ = env_logger::Builder::from_env(env).format_target(false).try_init();
}

/// Lets one message per key through per `period`, and says how many were held back.
pub struct RateLimiter {
    period: Duration,
    seen: HashMap<String, (Instant, u64)>,
}

impl RateLimiter {
    pub fn new(period: Duration) -> RateLimiter {
        RateLimiter {
            period,
            seen: HashMap::new(),
        }
    }

    /// `Some(suppressed)` when a message for `key` may be logged now, with the number of
    /// messages for it held back since the last one; `None` to stay quiet.
    pub fn allow(&mut self, key: &str) -> Option<u64> {
        let now = Instant::now();
        match self.seen.get_mut(key) {
            Some((last, suppressed)) if now.duration_since(*last) < self.period => {
                *suppressed += 1;
                None
            }
            Some((last, suppressed)) => {
                let held = *suppressed;
                *last = now;
                *suppressed = 0;
                Some(held)
            }
            None => {
                self.seen.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// The suffix for a log line that `RateLimiter::allow` let through after holding others back.
pub fn held_back_suffix(held_back: u64) -> String {
    if held_back > 0 {
        format!(" ({held_back} more since the last report)")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_warns_once_says_when_it_is_over_and_warns_again() {
        let mut outage = Outage::default();
        outage.recovered("no-op");
        assert!(!outage.is_failing());
        outage.failed("down");
        outage.failed("still down");
        assert!(outage.is_failing());
        outage.recovered("back");
        assert!(!outage.is_failing());
        outage.failed("down again");
        assert!(outage.is_failing());
    }

    #[test]
    fn repeats_within_the_period_are_held_back_and_counted() {
        let mut limiter = RateLimiter::new(Duration::from_millis(50));
        assert_eq!(limiter.allow("a"), Some(0));
        assert_eq!(limiter.allow("a"), None);
        assert_eq!(limiter.allow("a"), None);
        assert_eq!(limiter.allow("b"), Some(0), "keys are independent");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(limiter.allow("a"), Some(2));
    }
}

/// The one "warn once, say when it is back" helper, for a source that is read again and
/// again (the job mapping directory, /proc, the kernel log, the kubelet, NVML events): logs a
/// warning when it cannot be read, a line when it can again, and a warning again at the next
/// outage; stays quiet while nothing changes.
#[derive(Debug, Default)]
pub struct Outage {
    failing: bool,
}

impl Outage {
    /// The source could not be read: warns when it could before.
    pub fn failed(&mut self, what: impl std::fmt::Display) {
        if self.begins() {
            log::warn!("{what}");
        } else {
            log::debug!("{what}");
        }
    }

    /// The source was read: says so when it could not be before.
    pub fn recovered(&mut self, what: impl std::fmt::Display) {
        if self.ends() {
            log::info!("{what}");
        }
    }

    /// Marks a failure; true when there was none before: the moment to warn, for a caller
    /// that logs in its own shape (`gpu_log!` with the GPU's fields).
    pub fn begins(&mut self) -> bool {
        !std::mem::replace(&mut self.failing, true)
    }

    /// Marks the end of a failure; true when there was one: the moment to say it is over.
    pub fn ends(&mut self) -> bool {
        std::mem::replace(&mut self.failing, false)
    }

    pub fn is_failing(&self) -> bool {
        self.failing
    }
}

/// A log line about one GPU: its uuid and PCI bus id go with it as structured fields
/// (journald's `GPU_UUID=` and `PCI_BUS_ID=`, so `journalctl GPU_UUID=...` finds every line
/// about one GPU), given the GPU's [`crate::model::DeviceIdentity`].
#[macro_export]
macro_rules! gpu_log {
    ($level:expr, $identity:expr, $($message:tt)+) => {
        log::log!(
            $level,
            gpu_uuid = $identity.uuid.as_str(), pci_bus_id = $identity.pci_bus_id.as_str();
            $($message)+
        )
    };
}

/// Returns free heap memory to the kernel (glibc's malloc_trim); a no-op elsewhere.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a padding size and only touches the allocator's free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
