//! "How many within the last N minutes": the times of counted events, oldest first, bounded,
//! for dcgm-exporter's `*_COUNT` families (XIDs in the XID store, clock-event starts in the
//! coordinator). One type, so the bound and the window's edge are written once.

use std::collections::VecDeque;

/// Times kept: a storm beyond it is still counted in full by the totals beside it, and the
/// recent count then says "at least" this many.
pub(crate) const MAX_TIMES: usize = 1024;

/// Event times, oldest first, at most [`MAX_TIMES`].
#[derive(Debug, Clone)]
pub(crate) struct RecentTimes<T> {
    times: VecDeque<T>,
}

impl<T> Default for RecentTimes<T> {
    fn default() -> Self {
        RecentTimes { times: VecDeque::new() }
    }
}

impl<T: PartialOrd + Copy> RecentTimes<T> {
    /// One more event at `at`; the oldest goes past [`MAX_TIMES`].
    pub(crate) fn push(&mut self, at: T) {
        self.times.push_back(at);
        if self.times.len() > MAX_TIMES {
            self.times.pop_front();
        }
    }

    /// Forgets the events before `since` (the window's start: one at `since` stays).
    pub(crate) fn forget_before(&mut self, since: T) {
        while self.times.front().is_some_and(|at| *at < since) {
            self.times.pop_front();
        }
    }

    /// The events kept.
    pub(crate) fn count(&self) -> u64 {
        self.times.len() as u64
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_window_from_its_start_and_at_most_the_bound() {
        let mut recent = RecentTimes::default();
        for at in 0..5u64 {
            recent.push(at);
        }
        recent.forget_before(2);
        assert_eq!(recent.count(), 3, "2, 3 and 4 stay");
        for at in 0..(MAX_TIMES as u64 + 10) {
            recent.push(100 + at);
        }
        assert_eq!(recent.count(), MAX_TIMES as u64);
        recent.forget_before(u64::MAX);
        assert!(recent.is_empty());
    }
}
