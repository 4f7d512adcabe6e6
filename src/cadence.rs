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

    pub fn period(&self) -> Duration {
        self.period
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

/// A reading kept between reads of its tier: read when due, served from the last read in
/// between. A failed read (`None`) is kept as such until the next one.
#[derive(Debug, Clone)]
pub struct Tier<T> {
    every: Every,
    value: Option<T>,
}

impl<T> Tier<T> {
    pub const fn new(period: Duration) -> Tier<T> {
        Tier {
            every: Every::new(period),
            value: None,
        }
    }

    /// The reading, read anew with `read` when the tier is due.
    pub fn get(&mut self, now: Instant, read: impl FnOnce() -> T) -> &T {
        if self.every.take(now) {
            return self.value.insert(read());
        }
        self.value.get_or_insert_with(read)
    }

    pub fn set_period(&mut self, period: Duration) {
        self.every.set_period(period);
    }

    /// Read anew at the next `get` (after a reset of what it depends on).
    pub fn forget(&mut self) {
        self.every.reset();
        self.value = None;
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

    #[test]
    fn a_tier_reads_once_per_period_and_serves_the_last_read_between() {
        let start = Instant::now();
        let mut tier = Tier::new(Duration::from_secs(10));
        let mut reads = 0;
        let mut read = |at| {
            *tier.get(at, || {
                reads += 1;
                reads
            })
        };
        assert_eq!(read(start), 1);
        assert_eq!(read(start + Duration::from_secs(5)), 1);
        assert_eq!(read(start + Duration::from_secs(10)), 2);
    }
}
