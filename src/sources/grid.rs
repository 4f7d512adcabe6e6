//! The poll rounds' timetable, shared by the coordinator and the GPU threads.
//!
//! Round `first` is due at `origin`, each next one `interval` later. Every GPU thread reads it
//! to know when to poll next and sleeps until then on its own: a round costs no hand-off from
//! the coordinator to the GPU threads, and the coordinator wakes only for the answers. On an
//! H100 each wake of an otherwise idle thread costs about 25 µs of CPU (docs/performance.md,
//! "The poll loop's waits"), as much as a sixth of the daemon's own work a round.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Grid {
    pub first: u64,
    pub origin: Instant,
    pub interval: Duration,
}

impl Grid {
    /// When `round` is due; None before `first` or past what an `Instant` holds.
    pub(crate) fn due(&self, round: u64) -> Option<Instant> {
        let steps = round.checked_sub(self.first)?;
        let offset = self.interval.as_nanos().checked_mul(u128::from(steps))?;
        self.origin
            .checked_add(Duration::from_nanos(u64::try_from(offset).ok()?))
    }

    /// The first round after `after` that is due at `not_before` or later, and when: a thread
    /// that fell behind (a long poll, a stopped process) skips the rounds it missed.
    pub(crate) fn next_after(&self, after: u64, not_before: Instant) -> Option<(u64, Instant)> {
        let candidate = after.saturating_add(1).max(self.first);
        let at = self.due(candidate)?;
        if at >= not_before || self.interval.is_zero() {
            return Some((candidate, at));
        }
        let behind = not_before.duration_since(at).as_nanos();
        let skip = behind.div_ceil(self.interval.as_nanos());
        let round = candidate.checked_add(u64::try_from(skip).ok()?)?;
        Some((round, self.due(round)?))
    }
}

/// The timetable in force, if any: None while the coordinator asks each round itself (the
/// first round, `gpuwarden check`).
#[derive(Clone, Default)]
pub(crate) struct SharedGrid {
    grid: Arc<Mutex<Option<Grid>>>,
}

impl SharedGrid {
    pub(crate) fn get(&self) -> Option<Grid> {
        *self.grid.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set(&self, grid: Grid) {
        *self.grid.lock().unwrap_or_else(PoisonError::into_inner) = Some(grid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> (Grid, Instant) {
        let origin = Instant::now();
        let g = Grid {
            first: 10,
            origin,
            interval: Duration::from_secs(1),
        };
        (g, origin)
    }

    #[test]
    fn rounds_are_due_one_interval_apart_from_the_first() {
        let (g, origin) = grid();
        assert_eq!(g.due(9), None, "before the first round");
        assert_eq!(g.due(10), Some(origin));
        assert_eq!(g.due(13), Some(origin + Duration::from_secs(3)));
    }

    #[test]
    fn the_next_round_is_the_following_one_when_on_time() {
        let (g, origin) = grid();
        // Just after round 10 was polled: round 11, one interval after it.
        let next = g.next_after(10, origin + Duration::from_millis(2));
        assert_eq!(next, Some((11, origin + Duration::from_secs(1))));
        // A thread that has polled nothing yet starts at the first round.
        assert_eq!(g.next_after(0, origin - Duration::from_millis(5)), Some((10, origin)));
    }

    #[test]
    fn a_thread_that_fell_behind_skips_the_rounds_it_missed() {
        let (g, origin) = grid();
        // Round 10's poll took 2.3 s: rounds 11 and 12 are past, 13 is next.
        let next = g.next_after(10, origin + Duration::from_millis(2300));
        assert_eq!(next, Some((13, origin + Duration::from_secs(3))));
        // Exactly on a round's time: that round.
        assert_eq!(g.next_after(10, origin + Duration::from_secs(2)).map(|n| n.0), Some(12));
    }

    #[test]
    fn far_futures_give_none_rather_than_overflow() {
        let (g, origin) = grid();
        assert_eq!(g.next_after(u64::MAX, origin), None);
        let huge = Grid {
            interval: Duration::MAX,
            ..g
        };
        assert_eq!(huge.due(12), None);
    }
}
