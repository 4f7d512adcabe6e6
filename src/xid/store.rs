//! XID counters: every report counted once, from whichever source saw it first.
//!
//! The kernel log and NVML's event set both report most XIDs, and the driver may log one
//! event twice (an `Xid ...: 79` line and a "GPU has fallen off the bus" line). A report
//! joins a recent group (same GPU, same code, within `dedup_window`) when that group has no
//! report from the same source yet; otherwise it starts a new group and is counted. So a
//! repeat from one source is always counted (no repeats hidden), and the same event seen by
//! two sources is counted once.
//!
//! Counters are kept by PCI bus id, apart from the poller's device list, so they survive a
//! GPU falling off the bus and NVML being re-initialised.

use super::catalog::{self, Severity};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Where a report came from. The kernel log's "fallen off the bus" line without a number is
/// a source of its own, so that it groups with the `Xid ...: 79` line beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Nvml,
    KernelLog,
    KernelLogFallenOffBus,
}

impl Source {
    /// The source label: the kernel log's two kinds of line are one source.
    pub fn label(self) -> &'static str {
        match self {
            Source::Nvml => super::nvml_events::SOURCE_NAME,
            Source::KernelLog | Source::KernelLogFallenOffBus => super::kmsg::SOURCE_NAME,
        }
    }

    fn bit(self) -> u8 {
        match self {
            Source::Nvml => 1,
            Source::KernelLog => 2,
            Source::KernelLogFallenOffBus => 4,
        }
    }
}

#[derive(Debug, Clone)]
pub struct XidEvent {
    pub pci_bus_id: String,
    pub xid: u32,
    pub source: Source,
    pub at: SystemTime,
}

/// One XID code on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XidCount {
    pub xid: u32,
    pub severity: Severity,
    pub count: u64,
    #[serde(serialize_with = "crate::model::serialize_system_time")]
    pub last_seen: SystemTime,
}

/// What the renderers and the health rules read, by PCI bus id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct XidSnapshot {
    pub by_bus: BTreeMap<String, Vec<XidCount>>,
    /// Each source that has been started, and whether it is reading now.
    pub sources: BTreeMap<&'static str, bool>,
    /// Reports received per source, before de-duplication.
    pub reports: BTreeMap<&'static str, u64>,
}

impl XidSnapshot {
    pub fn for_bus(&self, pci_bus_id: &str) -> &[XidCount] {
        self.by_bus.get(pci_bus_id).map(Vec::as_slice).unwrap_or(&[])
    }
}

struct Group {
    pci_bus_id: String,
    xid: u32,
    at: SystemTime,
    sources: u8,
}

struct Inner {
    counts: BTreeMap<(String, u32), (u64, SystemTime)>,
    recent: VecDeque<Group>,
    sources: BTreeMap<&'static str, bool>,
    reports: BTreeMap<&'static str, u64>,
}

pub struct XidStore {
    dedup_window: Duration,
    inner: Mutex<Inner>,
}

impl XidStore {
    pub fn new(dedup_window: Duration) -> XidStore {
        XidStore {
            dedup_window,
            inner: Mutex::new(Inner {
                counts: BTreeMap::new(),
                recent: VecDeque::new(),
                sources: BTreeMap::new(),
                reports: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Records one report; true when it was counted, false when it duplicated one already
    /// counted from another source.
    pub fn record(&self, event: XidEvent) -> bool {
        let window = self.dedup_window;
        let mut inner = self.lock();
        *inner.reports.entry(event.source.label()).or_insert(0) += 1;
        let near = |a: SystemTime, b: SystemTime| {
            a.duration_since(b)
                .or_else(|_| b.duration_since(a))
                .map(|d| d <= window)
                .unwrap_or(false)
        };
        // Forget groups that no new report can join any more (reports arrive roughly in
        // order; a backlog read at start-up carries its own, older times).
        let newest = inner
            .recent
            .iter()
            .map(|g| g.at)
            .max()
            .unwrap_or(event.at)
            .max(event.at);
        while inner
            .recent
            .front()
            .is_some_and(|g| !near(g.at, newest) && g.at < newest)
        {
            inner.recent.pop_front();
        }
        let bit = event.source.bit();
        if let Some(group) = inner.recent.iter_mut().find(|g| {
            g.pci_bus_id == event.pci_bus_id && g.xid == event.xid && g.sources & bit == 0 && near(g.at, event.at)
        }) {
            group.sources |= bit;
            return false;
        }
        inner.recent.push_back(Group {
            pci_bus_id: event.pci_bus_id.clone(),
            xid: event.xid,
            at: event.at,
            sources: bit,
        });
        let entry = inner
            .counts
            .entry((event.pci_bus_id, event.xid))
            .or_insert((0, event.at));
        entry.0 += 1;
        entry.1 = entry.1.max(event.at);
        true
    }

    pub fn set_source_up(&self, source: &'static str, up: bool) {
        self.lock().sources.insert(source, up);
    }

    pub fn snapshot(&self) -> XidSnapshot {
        let inner = self.lock();
        let mut by_bus: BTreeMap<String, Vec<XidCount>> = BTreeMap::new();
        for ((bus, xid), (count, last_seen)) in &inner.counts {
            by_bus.entry(bus.clone()).or_default().push(XidCount {
                xid: *xid,
                severity: catalog::severity(*xid),
                count: *count,
                last_seen: *last_seen,
            });
        }
        XidSnapshot {
            by_bus,
            sources: inner.sources.clone(),
            reports: inner.reports.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUS: &str = "0000:3b:00.0";

    fn event(xid: u32, source: Source, at_s: u64) -> XidEvent {
        XidEvent {
            pci_bus_id: BUS.into(),
            xid,
            source,
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at_s),
        }
    }

    fn count(store: &XidStore, xid: u32) -> u64 {
        store
            .snapshot()
            .for_bus(BUS)
            .iter()
            .find(|c| c.xid == xid)
            .map(|c| c.count)
            .unwrap_or(0)
    }

    #[test]
    fn the_same_event_from_two_sources_counts_once() {
        let store = XidStore::new(Duration::from_secs(10));
        assert!(store.record(event(79, Source::KernelLog, 100)));
        assert!(!store.record(event(79, Source::Nvml, 101)));
        assert!(!store.record(event(79, Source::KernelLogFallenOffBus, 101)));
        assert_eq!(count(&store, 79), 1);
    }

    #[test]
    fn repeats_from_one_source_are_all_counted() {
        let store = XidStore::new(Duration::from_secs(10));
        for t in [100, 101, 102] {
            assert!(store.record(event(13, Source::KernelLog, t)));
        }
        // Each NVML report pairs with one kernel report.
        for t in [100, 101, 102] {
            assert!(!store.record(event(13, Source::Nvml, t)));
        }
        assert_eq!(count(&store, 13), 3);
    }

    #[test]
    fn outside_the_window_it_is_a_new_event() {
        let store = XidStore::new(Duration::from_secs(10));
        assert!(store.record(event(31, Source::KernelLog, 100)));
        assert!(store.record(event(31, Source::Nvml, 200)));
        assert_eq!(count(&store, 31), 2);
        let last = store.snapshot().for_bus(BUS)[0].last_seen;
        assert_eq!(last, SystemTime::UNIX_EPOCH + Duration::from_secs(200));
    }

    #[test]
    fn different_gpus_and_codes_do_not_merge() {
        let store = XidStore::new(Duration::from_secs(10));
        assert!(store.record(event(79, Source::KernelLog, 100)));
        assert!(store.record(event(48, Source::Nvml, 100)));
        let mut other = event(79, Source::Nvml, 100);
        other.pci_bus_id = "0000:5d:00.0".into();
        assert!(store.record(other));
    }
}
