//! What the journal's writer keeps of the XIDs between batches: the row of each counted event
//! (a second source's report of the same event updates it), this boot's counts by GPU address
//! and code with those not yet written, and where the kernel log was read up to. One of the
//! writer's concerns, kept apart from its files, batches and GPUs.

use crate::journal::store::worker::XidCount;
use crate::model::{Snapshot, unix_seconds};
use crate::xid::event::FilePosition;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Remembered XID events whose row a second source's report may still update.
const MAX_XID_ROWS: usize = 4096;

#[derive(Debug, Default)]
pub(super) struct XidTally {
    /// XID event number -> its row, for another source's report of the same event.
    rows: HashMap<u64, i64>,
    /// This boot's XID counts by (PCI bus id, code): the file's, then the XID store's (which
    /// the file seeded at start) whenever it holds more.
    counts: BTreeMap<(String, u32), (u64, f64)>,
    /// Counts changed since the last batch.
    dirty: BTreeSet<(String, u32)>,
    kmsg_sequence: Option<u64>,
    /// Where the kernel-log file was read up to after the last XID taken from it.
    file_position: Option<FilePosition>,
}

impl XidTally {
    /// How far the XID store's readers got with what the writer just took from it.
    pub(super) fn read_up_to(&mut self, kmsg_sequence: Option<u64>, file_position: Option<FilePosition>) {
        self.kmsg_sequence = self.kmsg_sequence.max(kmsg_sequence);
        self.file_position = file_position.or(self.file_position.take());
    }

    /// This boot's counts as the XID store holds them: what the file has is never lowered
    /// (a seed that could not be read at start leaves the store short of it).
    pub(super) fn take_counts(&mut self, snapshot: &Snapshot) {
        for (bus, counts) in &snapshot.xid.by_bus {
            for count in counts {
                let key = (bus.clone(), count.xid);
                let last = unix_seconds(count.last_seen);
                let known = self.counts.entry(key.clone()).or_insert((0, last));
                if count.count > known.0 {
                    *known = (count.count, known.1.max(last));
                    self.dirty.insert(key);
                }
            }
        }
    }

    /// The counts the file had at its first open, added to what this run counted before it.
    pub(super) fn load(&mut self, counts: Vec<XidCount>) {
        for (bus, xid, n, last) in counts {
            let entry = self.counts.entry((bus, xid)).or_insert((0, 0.0));
            entry.0 += n;
            entry.1 = entry.1.max(last);
        }
    }

    /// A new file (the old one moved aside, deleted or replaced): its rows are not there to
    /// update, and every count must be written again.
    pub(super) fn write_all_again(&mut self) {
        self.rows.clear();
        self.dirty.extend(self.counts.keys().cloned());
    }

    /// The rows a written batch gave its counted events.
    pub(super) fn written(&mut self, rows: Vec<(u64, i64)>) {
        if self.rows.len() + rows.len() > MAX_XID_ROWS {
            self.rows.clear();
        }
        self.rows.extend(rows);
    }

    /// The row of the counted event `group`, where one was written in this run.
    pub(super) fn row_of(&self, group: u64) -> Option<i64> {
        self.rows.get(&group).copied()
    }

    pub(super) fn has_unwritten(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The counts to write with the next batch.
    pub(super) fn unwritten(&self) -> Vec<XidCount> {
        self.dirty
            .iter()
            .filter_map(|key| {
                self.counts
                    .get(key)
                    .map(|(count, last)| (key.0.clone(), key.1, *count, *last))
            })
            .collect()
    }

    /// The next batch holds them.
    pub(super) fn taken(&mut self) {
        self.dirty.clear();
    }

    pub(super) fn kmsg_sequence(&self) -> Option<u64> {
        self.kmsg_sequence
    }

    pub(super) fn file_position(&self) -> Option<FilePosition> {
        self.file_position.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_counts_are_added_to_and_never_lowered_and_rows_are_bounded() {
        let mut tally = XidTally::default();
        tally.load(vec![("0000:19:00.0".into(), 79, 2, 100.0)]);
        assert!(!tally.has_unwritten(), "loaded counts are the file's already");
        tally.write_all_again();
        assert_eq!(tally.unwritten(), [("0000:19:00.0".to_string(), 79, 2, 100.0)]);
        tally.taken();
        assert!(!tally.has_unwritten());
        tally.written((0..MAX_XID_ROWS as u64).map(|g| (g, g as i64)).collect());
        assert_eq!(tally.row_of(7), Some(7));
        tally.written(vec![(1 << 40, 1)]);
        assert_eq!(tally.row_of(7), None, "over the bound: forgotten, not grown");
        assert_eq!(tally.row_of(1 << 40), Some(1));
        tally.read_up_to(Some(5), None);
        tally.read_up_to(Some(3), None);
        assert_eq!(tally.kmsg_sequence(), Some(5), "never back");
    }
}
