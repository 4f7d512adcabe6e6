//! The journal's XID outbox: every report the XID store counted, kept (bounded) until the
//! writer takes them, never a call from the store into the writer.
//!
//! The store only counts; it tells this outbox of every counted report, and of every report
//! of another source that joins one ([`crate::xid::store::CountedReports`]), under the
//! store's lock, and this outbox only keeps them under its own. The writer takes them when it
//! looks at a published snapshot (a counted XID signals a publish within a fraction of a
//! second). So nothing of the writer runs under the store's lock, and the journal cannot slow
//! the count.
//!
//! The bounds are the journal's as they were: a storm is folded here before anything is kept
//! (ten rows a minute per GPU and code, then one `xid_storm` row a minute with the count), a
//! fatal or critical XID or the first of a code waits in a lane of its own when the outbox is
//! full, and what still does not fit is counted (`gpuwarden_journal_dropped_total`) and logged
//! with what it was, at most once a minute.

use crate::model::xid::Severity;
use crate::xid::event::XidEvent;
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Reports kept for the consumer: a second of an XID storm on eight GPUs fits.
const OUTBOX: usize = 4096;
/// The most precious reports kept beside it (each ten a minute per GPU and code at most).
const MAX_PRECIOUS: usize = 65_536;
/// XID rows recorded one by one per (GPU, code) per minute; the rest of a storm is one
/// `xid_storm` row a minute with its count.
pub(crate) const XID_ROWS_PER_MINUTE: u32 = 10;

/// A counted report, or another source's report of one.
#[derive(Debug, Clone)]
pub(crate) enum Outgoing {
    /// A new event, `group` its number in the store. `severity`: the code's severity when it
    /// was counted (the operator's policy, else the catalog's).
    Counted {
        group: u64,
        event: XidEvent,
        severity: Severity,
    },
    /// Another source's report of event `group`, which has a row.
    Joined { group: u64, event: XidEvent },
}

impl Outgoing {
    /// What a dropped report was, for the log.
    fn describe(&self) -> String {
        match self {
            Outgoing::Counted { event, .. } => format!("Xid {} at {}", event.xid, event.pci_bus_id),
            Outgoing::Joined { event, .. } => {
                format!("another source's report of Xid {} at {}", event.xid, event.pci_bus_id)
            }
        }
    }
}

/// What a consumer takes at once: the reports in the order they were counted, and the last
/// /dev/kmsg record counted, folded or not (the kernel log resumes after it on a restart).
#[derive(Debug, Default)]
pub(crate) struct Taken {
    pub reports: Vec<Outgoing>,
    pub kmsg_sequence: Option<u64>,
    /// Where a kernel-log file was read up to after the last report counted from it, folded
    /// or not (a restart goes on from there).
    pub file_position: Option<crate::xid::event::FilePosition>,
}

/// A storm that is over: one row with the count not recorded one by one.
#[derive(Debug, PartialEq)]
pub(crate) struct StormRow {
    pub pci_bus_id: String,
    /// The code it was counted under ([`crate::model::xid::OTHER_CODES`] for `other`).
    pub xid: u32,
    pub reports: u64,
    /// Unix seconds of the first report not recorded one by one.
    pub first: f64,
}

/// An XID storm on one (GPU, code): rows in the current minute, reports not recorded one by
/// one, and the events whose rows were kept (another source's report may join them).
#[derive(Default)]
struct Storm {
    minute_start: f64,
    rows: u32,
    suppressed: u64,
    first_suppressed: f64,
    kept_groups: VecDeque<u64>,
    seen: bool,
}

impl Storm {
    /// Whether a report at `at` gets a row of its own; false when it is folded into the count.
    fn admit(&mut self, at: f64, group: u64) -> bool {
        if at - self.minute_start >= 60.0 || at < self.minute_start {
            self.minute_start = at;
            self.rows = 0;
        }
        if self.rows >= XID_ROWS_PER_MINUTE {
            if self.suppressed == 0 {
                self.first_suppressed = at;
            }
            self.suppressed += 1;
            return false;
        }
        self.rows += 1;
        self.kept_groups.push_back(group);
        if self.kept_groups.len() > XID_ROWS_PER_MINUTE as usize {
            self.kept_groups.pop_front();
        }
        true
    }

    /// Whether this minute's storm is over (or the daemon stops) and has a row to write.
    fn due(&self, now: f64, stopping: bool) -> bool {
        self.suppressed > 0 && (stopping || now - self.minute_start >= 60.0)
    }
}

/// The outbox the XID store tells and the writer takes from.
#[derive(Default)]
pub(crate) struct XidOutbox {
    kept: Mutex<Outbox>,
}

impl XidOutbox {
    fn kept(&self) -> MutexGuard<'_, Outbox> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Everything kept since the last take, in the order it was counted.
    pub(crate) fn take(&self) -> Taken {
        self.kept().take()
    }

    /// The storms whose minute is over at `now` (all of them when `stopping`), each once.
    pub(crate) fn storms_due(&self, now: f64, stopping: bool) -> Vec<StormRow> {
        self.kept().storms_due(now, stopping)
    }

    /// Reports that did not fit, since start.
    pub(crate) fn dropped(&self) -> u64 {
        self.kept().dropped
    }
}

impl crate::xid::store::CountedReports for XidOutbox {
    fn counted(&self, group: u64, event: &XidEvent, severity: Severity, counted_as: u32) {
        self.kept().counted(group, event, severity, counted_as);
    }

    fn joined(&self, group: u64, event: &XidEvent) {
        self.kept().joined(group, event);
    }
}

/// What is kept, under the outbox's lock.
#[derive(Default)]
struct Outbox {
    reports: VecDeque<Outgoing>,
    /// Reports that must not be lost (a fatal or critical XID, the first of a code) while
    /// `reports` is full.
    precious: VecDeque<Outgoing>,
    storms: HashMap<(String, u32), Storm>,
    kmsg_sequence: Option<u64>,
    file_position: Option<crate::xid::event::FilePosition>,
    dropped: u64,
    drop_log: Option<crate::service::logging::RateLimiter>,
}

impl Outbox {
    /// A counted report, under the code it is counted as.
    fn counted(&mut self, group: u64, event: &XidEvent, severity: Severity, counted_as: u32) {
        self.note_sequence(event);
        let at = crate::model::unix_seconds(event.at);
        // Folded by the code it is counted under: the store bounds those.
        let storm = self.storms.entry((event.pci_bus_id.clone(), counted_as)).or_default();
        let first = !storm.seen;
        storm.seen = true;
        if !storm.admit(at, group) {
            return;
        }
        let precious = first || severity >= Severity::Critical;
        let report = Outgoing::Counted {
            group,
            event: event.clone(),
            severity,
        };
        self.keep(report, precious);
    }

    /// Another source's report of event `group`: kept when that event has a row (a report
    /// of an event folded into a storm's count has none to join).
    fn joined(&mut self, group: u64, event: &XidEvent) {
        self.note_sequence(event);
        let has_row = [event.xid, crate::model::xid::OTHER_CODES].iter().any(|code| {
            self.storms
                .get(&(event.pci_bus_id.clone(), *code))
                .is_some_and(|storm| storm.kept_groups.contains(&group))
        });
        if has_row {
            let report = Outgoing::Joined {
                group,
                event: event.clone(),
            };
            self.keep(report, false);
        }
    }

    fn note_sequence(&mut self, event: &XidEvent) {
        if let Some(sequence) = event.kmsg_sequence {
            self.kmsg_sequence = self.kmsg_sequence.max(Some(sequence));
        }
        // One reader thread, lines in order: the latest is the furthest.
        if let Some(position) = &event.file_position {
            self.file_position = Some(position.clone());
        }
    }

    fn keep(&mut self, report: Outgoing, precious: bool) {
        if self.reports.len() < OUTBOX {
            self.reports.push_back(report);
            return;
        }
        if precious && self.precious.len() < MAX_PRECIOUS {
            self.precious.push_back(report);
            return;
        }
        self.dropped += 1;
        let limiter = self
            .drop_log
            .get_or_insert_with(|| crate::service::logging::RateLimiter::new(Duration::from_secs(60)));
        if let Some(held_back) = limiter.allow("journal-queue-full") {
            log::warn!(
                "journal: the XID outbox is full; dropped a row ({}){}",
                report.describe(),
                crate::service::logging::held_back_suffix(held_back)
            );
        }
    }

    /// Everything kept, the precious lane first (it filled while the outbox was full, so it
    /// holds the older reports of the two).
    fn take(&mut self) -> Taken {
        let mut reports: Vec<Outgoing> = self.precious.drain(..).collect();
        reports.extend(self.reports.drain(..));
        Taken {
            reports,
            kmsg_sequence: self.kmsg_sequence,
            file_position: self.file_position.clone(),
        }
    }

    /// The storms whose minute is over at `now` (all of them when `stopping`), each once.
    fn storms_due(&mut self, now: f64, stopping: bool) -> Vec<StormRow> {
        let mut rows = Vec::new();
        for ((bus, xid), storm) in &mut self.storms {
            if storm.due(now, stopping) {
                rows.push(StormRow {
                    pci_bus_id: bus.clone(),
                    xid: *xid,
                    reports: storm.suppressed,
                    first: storm.first_suppressed,
                });
                storm.suppressed = 0;
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xid::event::XidSource;
    use crate::xid::store::CountedReports;

    fn event(bus: &str, xid: u32, at: f64) -> XidEvent {
        XidEvent {
            pci_bus_id: bus.into(),
            gpu_instance: None,
            xid,
            source: XidSource::KernelLog,
            at: crate::model::from_unix_seconds(at),
            raw: None,
            kmsg_sequence: Some(at as u64),
            identity: None,
            nvswitch: None,
            file_position: None,
        }
    }

    #[test]
    fn a_storm_keeps_ten_rows_a_minute_and_counts_the_rest() {
        let outbox = XidOutbox::default();
        for i in 0..25 {
            outbox.counted(i, &event("0000:19:00.0", 31, 100.0 + i as f64), Severity::Warning, 31);
        }
        let taken = outbox.take();
        assert_eq!(taken.reports.len(), XID_ROWS_PER_MINUTE as usize);
        assert_eq!(taken.kmsg_sequence, Some(124));
        assert!(outbox.storms_due(130.0, false).is_empty(), "the minute is not over");
        let rows = outbox.storms_due(161.0, false);
        assert_eq!(
            rows,
            [StormRow {
                pci_bus_id: "0000:19:00.0".into(),
                xid: 31,
                reports: 15,
                first: 110.0
            }]
        );
        assert!(outbox.storms_due(200.0, true).is_empty(), "each storm row once");
    }

    #[test]
    fn a_full_outbox_keeps_the_fatal_and_the_first_of_a_code_and_counts_the_rest() {
        let outbox = XidOutbox::default();
        // Distinct GPUs, so no storm folds them: the outbox's own bound is what is tested.
        for i in 0..OUTBOX as u64 + 10 {
            let bus = format!("0000:{:02x}:{:02x}.0", i / 256, i % 256);
            // Each is the first of its code on its GPU, so precious: kept beside the outbox.
            outbox.counted(i, &event(&bus, 13, 100.0), Severity::Warning, 13);
        }
        // A second report of a code seen before is not precious once the outbox is full.
        outbox.counted(9000, &event("0000:00:00.0", 13, 101.0), Severity::Warning, 13);
        outbox.counted(9001, &event("0000:00:01.0", 48, 101.0), Severity::Fatal, 48);
        assert_eq!(outbox.dropped(), 1);
        let taken = outbox.take();
        assert_eq!(taken.reports.len(), OUTBOX + 11);
        // The lane first: the reports kept beside the full outbox.
        assert!(matches!(taken.reports[0], Outgoing::Counted { group, .. } if group == OUTBOX as u64));
        assert!(outbox.take().reports.is_empty(), "taken once");
    }

    #[test]
    fn another_sources_report_joins_only_an_event_with_a_row() {
        let outbox = XidOutbox::default();
        for i in 0..12 {
            outbox.counted(i, &event("0000:19:00.0", 31, 100.0), Severity::Warning, 31);
        }
        outbox.take();
        outbox.joined(3, &event("0000:19:00.0", 31, 100.0));
        outbox.joined(11, &event("0000:19:00.0", 31, 100.0));
        let taken = outbox.take();
        assert_eq!(
            taken.reports.len(),
            1,
            "event 11 was folded into the storm: no row to join"
        );
        assert!(matches!(taken.reports[0], Outgoing::Joined { group: 3, .. }));
    }
}
