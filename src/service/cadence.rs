//! "Read this every N seconds": one type for every tier and source that keeps a reading
//! between reads (the NVML slow, GPM and topology tiers, the job directory, the PCI census,
//! the DRM client walk), so the rule "due when never read or when the period has passed" is
//! written once.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The runtime's periodic work (the side sources, the history recorder, the kubelet's
/// refresh) keeps one beat: each wakes at a whole number of its periods since one moment, so
/// work of equal or multiple periods (10, 15 and 30 s) wakes the runtime together rather
/// than each at its own phase. A wake of an idle runtime costs more than the work it does
/// (docs/performance.md, "Fewer instructions a round, the runtime on one beat").
static BEAT_EPOCH: OnceLock<Instant> = OnceLock::new();

/// The first instant at or after `earliest` on `period`'s beat (the same for every caller
/// with the same period, whenever it asks). A zero period: `earliest` itself.
pub(crate) fn on_the_beat(period: Duration, earliest: Instant) -> Instant {
    beat_from(*BEAT_EPOCH.get_or_init(Instant::now), period, earliest)
}

/// When the next read of something read every `period` is due after one at `read_at`: on the
/// beat, at least half a period on, so a read at an odd moment (a reload's) is followed by one
/// on the beat and the gap stays within half a period and one and a half.
pub(crate) fn next_on_the_beat(period: Duration, read_at: Instant) -> Instant {
    on_the_beat(period, read_at + period / 2)
}

fn beat_from(epoch: Instant, period: Duration, earliest: Instant) -> Instant {
    let since = earliest.saturating_duration_since(epoch).as_nanos();
    let step = period.as_nanos();
    if step == 0 {
        return earliest;
    }
    let beats = since.div_ceil(step);
    let offset = u64::try_from(beats.saturating_mul(step)).unwrap_or(u64::MAX);
    epoch
        .checked_add(Duration::from_nanos(offset))
        .unwrap_or(earliest)
        .max(earliest)
}

/// A period and when it last ran.
#[derive(Debug, Clone)]
pub(crate) struct Every {
    period: Duration,
    last: Option<Instant>,
    /// A shorter wait between the first run and the second (GPM: a value needs two samples,
    /// and a dashboard should not wait a whole period after every start for it).
    first: Option<Duration>,
    /// Runs since new or reset, counted to 2.
    runs: u8,
}

impl Every {
    pub(crate) const fn new(period: Duration) -> Every {
        Every {
            period,
            last: None,
            first: None,
            runs: 0,
        }
    }

    /// The second run comes `first` after the first (if shorter than the period), the rest a
    /// period apart; again after a reset.
    pub(crate) const fn first_after(mut self, first: Duration) -> Every {
        self.first = Some(first);
        self
    }

    fn wait(&self) -> Duration {
        match self.first {
            Some(first) if self.runs == 1 => first.min(self.period),
            _ => self.period,
        }
    }

    /// Never read, or the period has passed since, give or take a twentieth of it: the GPU
    /// threads wake on the rounds' timetable, each a few microseconds more or less late, and a
    /// tier whose period is a whole number of rounds must not slip a round when this round's
    /// wake was a little less late than the last one's.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        let wait = self.wait();
        self.last
            .is_none_or(|at| now.saturating_duration_since(at) + wait / 20 >= wait)
    }

    /// True (and counts as run now) when due.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        let due = self.is_due(now);
        if due {
            self.last = Some(now);
            self.runs = self.runs.saturating_add(1).min(2);
        }
        due
    }

    /// Due at once, as if never run.
    pub(crate) fn reset(&mut self) {
        self.last = None;
        self.runs = 0;
    }

    /// How long until it is due; zero when it is.
    #[cfg(test)]
    pub(crate) fn until_due(&self, now: Instant) -> Duration {
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
    fn beats_of_multiple_periods_fall_together_and_a_read_at_an_odd_moment_comes_back_on_the_beat() {
        let epoch = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(beat_from(epoch, s(10), epoch + s(3)), epoch + s(10));
        assert_eq!(
            beat_from(epoch, s(10), epoch + s(20)),
            epoch + s(20),
            "on the beat is not after it"
        );
        assert_eq!(beat_from(epoch, s(30), epoch + s(21)), epoch + s(30));
        assert_eq!(
            beat_from(epoch, s(15), epoch + s(21)),
            epoch + s(30),
            "15 s and 30 s meet every 30 s"
        );
        // A read after a reload at 23 s: the next on the 10 s beat, at least 5 s later.
        let read = epoch + s(23);
        let next = beat_from(epoch, s(10), read + s(5));
        assert_eq!(next, epoch + s(30));
        let gap = next - read;
        assert!(gap >= s(5) && gap <= s(15));
        assert_eq!(beat_from(epoch, Duration::ZERO, epoch + s(7)), epoch + s(7));
        // Before the epoch (a clock read just before it was set): the epoch.
        assert_eq!(beat_from(epoch + s(1), s(10), epoch), epoch + s(1));
    }

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
