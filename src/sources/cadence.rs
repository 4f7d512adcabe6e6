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
    /// A shorter wait between the first run and the second (GPM: a value needs two samples,
    /// and a dashboard should not wait a whole period after every start for it).
    first: Option<Duration>,
    /// Runs since new or reset, counted to 2.
    runs: u8,
}

impl Every {
    pub const fn new(period: Duration) -> Every {
        Every {
            period,
            last: None,
            first: None,
            runs: 0,
        }
    }

    /// The second run comes `first` after the first (if shorter than the period), the rest a
    /// period apart; again after a reset.
    pub const fn first_after(mut self, first: Duration) -> Every {
        self.first = Some(first);
        self
    }

    fn wait(&self) -> Duration {
        match self.first {
            Some(first) if self.runs == 1 => first.min(self.period),
            _ => self.period,
        }
    }

    /// A new period applies from the last run (a reload that shortens it makes it due sooner).
    pub fn set_period(&mut self, period: Duration) {
        self.period = period;
    }

    /// Never read, or the period has passed since, give or take a twentieth of it: the GPU
    /// threads wake on the rounds' timetable, each a few microseconds more or less late, and a
    /// tier whose period is a whole number of rounds must not slip a round when this round's
    /// wake was a little less late than the last one's.
    pub fn is_due(&self, now: Instant) -> bool {
        let wait = self.wait();
        self.last
            .is_none_or(|at| now.saturating_duration_since(at) + wait / 20 >= wait)
    }

    /// True (and counts as run now) when due.
    pub fn take(&mut self, now: Instant) -> bool {
        let due = self.is_due(now);
        if due {
            self.last = Some(now);
            self.runs = self.runs.saturating_add(1).min(2);
        }
        due
    }

    /// Due at once, as if never run.
    pub fn reset(&mut self) {
        self.last = None;
        self.runs = 0;
    }

    /// How long until it is due; zero when it is.
    pub fn until_due(&self, now: Instant) -> Duration {
        match self.last {
            None => Duration::ZERO,
            Some(at) => (at + self.wait()).saturating_duration_since(now),
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

    #[test]
    fn a_round_that_woke_a_little_less_late_than_the_last_still_finds_the_tier_due() {
        let start = Instant::now();
        let mut every = Every::new(Duration::from_secs(1));
        assert!(every.take(start + Duration::from_micros(60)));
        assert!(every.take(start + Duration::from_secs(1) + Duration::from_micros(5)));
        // Half a period is not "a little".
        assert!(!every.take(start + Duration::from_millis(1500)));
    }

    #[test]
    fn a_shorter_first_wait_applies_once_and_again_after_a_reset() {
        let start = Instant::now();
        let mut every = Every::new(Duration::from_secs(30)).first_after(Duration::from_secs(1));
        assert!(every.take(start));
        assert!(every.take(start + Duration::from_secs(1)), "the second run after 1 s");
        assert!(!every.take(start + Duration::from_secs(2)), "then every 30 s");
        assert!(every.take(start + Duration::from_secs(31)));
        every.reset();
        assert!(every.take(start + Duration::from_secs(32)));
        assert!(every.take(start + Duration::from_secs(33)));
    }
}
