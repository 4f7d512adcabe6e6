//! "Read this every N seconds": one type for every tier and source that keeps a reading
//! between reads (the NVML slow, GPM and topology tiers, the job directory, the PCI census,
//! the DRM client walk), so the rule "due when never read or when the period has passed" is
//! written once.

use std::time::{Duration, Instant};

/// A period and when it last ran.
#[derive(Debug, Clone)]
pub struct Every {
    period: Duration,
    last: Option<Instant>,
}

impl Every {
    pub const fn new(period: Duration) -> Every {
        Every { period, last: None }
    }

    /// A new period applies from the last run (a reload that shortens it makes it due sooner).
    pub fn set_period(&mut self, period: Duration) {
        self.period = period;
    }

    /// Never read, or the period has passed since.
    pub fn is_due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|at| now.saturating_duration_since(at) >= self.period)
    }

    /// True (and counts as run now) when due.
    pub fn take(&mut self, now: Instant) -> bool {
        let due = self.is_due(now);
        if due {
            self.last = Some(now);
        }
        due
    }

    /// Due at once, as if never run.
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// How long until it is due; zero when it is.
    pub fn until_due(&self, now: Instant) -> Duration {
        match self.last {
            None => Duration::ZERO,
            Some(at) => (at + self.period).saturating_duration_since(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_when_never_run_then_after_each_period() {
        let start = Instant::now();
        let mut every = Every::new(Duration::from_secs(10));
        assert!(every.take(start));
        assert!(!every.take(start + Duration::from_secs(9)));
        assert_eq!(every.until_due(start + Duration::from_secs(4)), Duration::from_secs(6));
        assert!(every.take(start + Duration::from_secs(10)));
        every.reset();
        assert!(every.is_due(start + Duration::from_secs(11)));
    }
}
