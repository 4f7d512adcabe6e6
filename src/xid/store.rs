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

use super::catalog;
pub(crate) use super::event::{MAX_RAW_LINE, XidEvent, XidSource};
pub(crate) use crate::model::xid::{OTHER_CODES, Severity, UNATTRIBUTED, XidCount, XidSnapshot};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// XIDs counted before a restart: ((PCI bus id, code), count, last seen).
pub(crate) type SeedCounts = Vec<((String, u32), u64, SystemTime)>;

/// At most this many PCI addresses that are no GPU the backends enumerated are counted: a
/// node has a few GPUs, so a log that names thousands of addresses is noise or an attack, and
/// must not become thousands of permanent series. Reports on further addresses are counted as
/// dropped.
const MAX_ADDRESSES: usize = 32;
/// How often the log says that reports on addresses that are no GPU were dropped.
const DROP_LOG_EVERY: Duration = Duration::from_secs(3600);
/// Distinct codes counted one by one per address (and per MIG GPU instance): the catalog has
/// about two hundred and a failing GPU shows a handful. Further codes are counted together
/// under [`OTHER_CODES`] with the highest severity among them, so the counts still add up and
/// a fatal one still makes the GPU unhealthy.
pub(crate) const MAX_CODES_PER_ADDRESS: usize = 64;
/// Beyond those, fatal and critical codes still get counts of their own, up to this many in
/// all: their code is what the verdict, the journal and a restart's seed must keep (a count
/// under `other` comes back from the journal without its severity).
const MAX_SEVERE_CODES_PER_ADDRESS: usize = 256;
/// MIG GPU instances per GPU whose XIDs are counted apart (the largest GPUs have seven).
const MAX_INSTANCES: usize = 16;
/// Recent events kept per (address, code) for joining one event's reports from two
/// sources: enough for any real burst, and a constant cost per report however long the log.
const RECENT_PER_KEY: usize = 64;
/// NVSwitch (switch, code) pairs counted: an HGX baseboard has four switches and a handful
/// of codes in a bad day; a log of forged-looking but kernel-made lines makes no more series.
pub(crate) const MAX_SXID_SERIES: usize = 256;
/// Kernel records remembered by identity, so one read again is not counted again: more than
/// a kernel ring buffer holds of XID lines.
const MAX_IDENTITIES: usize = 8192;

/// One recent event: when, and which sources have reported it.
struct Group {
    at: SystemTime,
    sources: u8,
    id: u64,
}

struct Inner {
    /// Reports of one event from two sources within this window count once (xid.dedup_window;
    /// a reload changes it).
    dedup_window: Duration,
    /// The operator's severities (health.xid_severity; a reload changes them).
    policy: crate::model::xid::XidPolicy,
    counts: BTreeMap<(String, u32), (u64, SystemTime)>,
    /// The times of the events counted within the last `RECENT_WINDOW`, per (address, code).
    recent_times: HashMap<(String, u32), crate::model::recent::RecentTimes<SystemTime>>,
    instance_counts: BTreeMap<(String, u32, u32), (u64, SystemTime)>,
    recent: HashMap<(String, u32), VecDeque<Group>>,
    /// The newest report time seen, to forget groups no new report can join.
    newest: Option<SystemTime>,
    sources: BTreeMap<&'static str, bool>,
    reports: BTreeMap<&'static str, u64>,
    dropped: u64,
    /// One line an hour about the reports dropped (each is counted).
    drop_log: crate::service::logging::RateLimiter,
    /// The identities of the kernel records counted (at most [`MAX_IDENTITIES`], oldest forgotten first).
    identities: std::collections::HashSet<u64>,
    identity_order: VecDeque<u64>,
    /// Records read a second time (a log file emptied and written again) and not counted.
    repeated: u64,
    /// The PCI addresses of the GPUs the backends enumerated, which the address limit never
    /// applies to.
    gpus: std::collections::BTreeSet<String>,
    /// Per address, the highest severity among the codes counted under [`OTHER_CODES`] (as
    /// it was when each was counted).
    other_severity: BTreeMap<String, Severity>,
    /// NVSwitch errors by (switch address, code), apart from the GPUs' XIDs.
    sxids: BTreeMap<(String, u32), crate::model::xid::SxidCount>,
}

impl Inner {
    /// Counts one SXID; false (and counted as dropped) past [`MAX_SXID_SERIES`] pairs.
    fn count_sxid(&mut self, event: &XidEvent, nvswitch: super::event::Nvswitch) -> bool {
        let key = (event.pci_bus_id.clone(), event.xid);
        if !self.sxids.contains_key(&key) && self.sxids.len() >= MAX_SXID_SERIES {
            self.dropped += 1;
            return false;
        }
        let message = event.raw.as_deref().map(super::parse::message_of).unwrap_or_default();
        let count = self.sxids.entry(key).or_insert_with(|| crate::model::xid::SxidCount {
            switch: nvswitch.switch,
            pci_bus_id: event.pci_bus_id.clone(),
            sxid: event.xid,
            fatal: nvswitch.fatal,
            count: 0,
            last_seen: event.at,
            message: String::new(),
        });
        count.count += 1;
        count.last_seen = count.last_seen.max(event.at);
        // One fatal report of the code makes its count fatal.
        count.fatal |= nvswitch.fatal;
        count.message = message;
        true
    }

    /// True when this kernel record (by its identity) was counted before: read again from a
    /// log emptied and written again, or found in two places. Remembers it otherwise.
    fn read_before(&mut self, identity: Option<u64>) -> bool {
        let Some(identity) = identity else {
            return false;
        };
        if self.identities.contains(&identity) {
            self.repeated += 1;
            if self.repeated == 1 {
                log::info!(
                    "a kernel-log record already counted was read again (the log was emptied and \
                     written again, or the same record is in two places); not counted twice"
                );
            }
            return true;
        }
        self.remember(identity);
        false
    }

    /// Keeps `identity` among the records counted, forgetting the oldest past the bound.
    fn remember(&mut self, identity: u64) {
        if !self.identities.insert(identity) {
            return;
        }
        self.identity_order.push_back(identity);
        if self.identity_order.len() > MAX_IDENTITIES
            && let Some(oldest) = self.identity_order.pop_front()
        {
            self.identities.remove(&oldest);
        }
    }

    /// A report on an address past the limit of addresses that are no GPU: counted as dropped.
    fn drop_report(&mut self, event: &XidEvent) {
        self.dropped += 1;
        if let Some(held_back) = self.drop_log.allow("dropped") {
            log::warn!(
                "the XID store holds XIDs for {MAX_ADDRESSES} PCI addresses that are no GPU, its limit; \
                 reports on further addresses are counted in gpuwarden_xid_dropped_total only \
                 (this one: {:?}, Xid {}){}",
                event.pci_bus_id,
                event.xid,
                crate::service::logging::held_back_suffix(held_back)
            );
        }
    }

    /// Counts an XID on a MIG GPU instance: at most `MAX_INSTANCES` instances per address and
    /// `MAX_CODES_PER_ADDRESS` codes per instance, further codes as `OTHER_CODES`.
    fn count_instance(&mut self, bus: &str, instance: u32, code: u32, at: SystemTime) {
        let on_bus = |k: &(String, u32, u32)| k.0 == bus;
        let instances: std::collections::BTreeSet<u32> =
            self.instance_counts.keys().filter(|k| on_bus(k)).map(|k| k.1).collect();
        if !instances.contains(&instance) && instances.len() >= MAX_INSTANCES {
            return;
        }
        let codes = self
            .instance_counts
            .keys()
            .filter(|k| on_bus(k) && k.1 == instance && k.2 != OTHER_CODES)
            .count();
        let mut instance_key = (bus.to_string(), instance, code);
        if !self.instance_counts.contains_key(&instance_key) && codes >= MAX_CODES_PER_ADDRESS {
            instance_key.2 = OTHER_CODES;
        }
        let entry = self.instance_counts.entry(instance_key).or_insert((0, at));
        entry.0 += 1;
        entry.1 = entry.1.max(at);
    }

    /// The operator's severity for `code`, else the catalog's.
    fn severity(&self, code: u32) -> Severity {
        self.policy.chosen(code).unwrap_or_else(|| catalog::severity(code))
    }

    /// Whether XIDs on `address` may be counted. A GPU the backends enumerated always may:
    /// noise must never crowd out a real GPU's XIDs.
    fn has_room_for(&self, address: &str) -> bool {
        if self.gpus.contains(address) || self.counts.keys().any(|(a, _)| a == address) {
            return true;
        }
        let others: std::collections::BTreeSet<&String> = self
            .counts
            .keys()
            .map(|(a, _)| a)
            .filter(|a| !self.gpus.contains(*a))
            .collect();
        others.len() < MAX_ADDRESSES
    }

    /// The code a report of `code` on `address` is counted under: its own, or
    /// [`OTHER_CODES`] once the address holds [`MAX_CODES_PER_ADDRESS`] others.
    fn counted_as(&mut self, address: &str, code: u32) -> u32 {
        let key = (address.to_string(), code);
        if self.counts.contains_key(&key) {
            return code;
        }
        let codes = self
            .counts
            .range((address.to_string(), 0)..=(address.to_string(), OTHER_CODES))
            .filter(|((_, c), _)| *c != OTHER_CODES)
            .count();
        let severity = self.severity(code);
        if codes < MAX_CODES_PER_ADDRESS || (severity >= Severity::Critical && codes < MAX_SEVERE_CODES_PER_ADDRESS) {
            return code;
        }
        let highest = self.other_severity.entry(address.to_string()).or_insert(severity);
        *highest = (*highest).max(severity);
        OTHER_CODES
    }

    /// The severity a count shows: the code's, or for [`OTHER_CODES`] the highest among them.
    fn count_severity(&self, address: &str, code: u32) -> Severity {
        if code == OTHER_CODES {
            return self.other_severity.get(address).copied().unwrap_or(Severity::Unknown);
        }
        self.severity(code)
    }
}

/// The one consumer of the store's counted reports (the journal, which writes each down):
/// told of each as it is counted, often while the store holds its lock, so it only keeps them
/// (bounded) for later and never calls back into the store. The store counts; what is written, folded or dropped is the consumer's business.
pub trait CountedReports: Send + Sync {
    /// A new event, `group` its number in the store, `severity` the code's when it was
    /// counted (the operator's policy, else the catalog's), `counted_as` the code it is
    /// counted under (`OTHER_CODES` past the per-GPU bound).
    fn counted(&self, group: u64, event: &XidEvent, severity: Severity, counted_as: u32);
    /// Another source's report of event `group`.
    fn joined(&self, group: u64, event: &XidEvent);
}

pub struct XidStore {
    inner: Mutex<Inner>,
    /// Bumped whenever what [`XidStore::snapshot`] returns changes, so the publisher can put
    /// a new XID into the served snapshot at once instead of at the next poll round.
    changes: AtomicU64,
    /// Signalled with every change, once set (the daemon's refresher waits for it).
    changed: std::sync::OnceLock<std::sync::Arc<crate::service::versioned::Changed>>,
    /// Who is told of every counted report (the journal's XID outbox), once one asks.
    /// Told after `inner`'s lock is taken, never before; it must not call back into the store.
    counted_to: std::sync::OnceLock<Arc<dyn CountedReports>>,
    /// The last event's number.
    groups: AtomicU64,
}

impl XidStore {
    /// Signal `changed` at every change from now on (once).
    pub fn signal_to(&self, changed: std::sync::Arc<crate::service::versioned::Changed>) {
        let _ = self.changed.set(changed);
    }

    /// Tell `to` of every report counted from now on, and of every other source's report
    /// that joins one (once; the journal asks at its start).
    pub fn report_to(&self, to: Arc<dyn CountedReports>) {
        let _ = self.counted_to.set(to);
    }

    fn tell_joined(&self, group: u64, event: &XidEvent) {
        if let Some(to) = self.counted_to.get() {
            to.joined(group, event);
        }
    }

    fn tell_counted(&self, group: u64, event: &XidEvent, severity: Severity, counted_as: u32) {
        if let Some(to) = self.counted_to.get() {
            to.counted(group, event, severity, counted_as);
        }
    }

    /// Counts from before a restart in this boot (the journal's), added to what this store
    /// counts: ((PCI bus id, code), count, last seen).
    pub fn seed(&self, counts: &SeedCounts) {
        let mut inner = self.lock();
        for ((bus, xid), count, last) in counts {
            let entry = inner.counts.entry((bus.clone(), *xid)).or_insert((0, *last));
            entry.0 += count;
            entry.1 = entry.1.max(*last);
        }
        drop(inner);
        if !counts.is_empty() {
            self.moved_on();
        }
    }

    /// The identities of the kernel records this boot's journal holds, before the kernel log
    /// is read: one read again after a restart is not counted again.
    pub fn seed_identities(&self, identities: &[u64]) {
        let mut inner = self.lock();
        for identity in identities {
            inner.remember(*identity);
        }
    }

    /// This boot's SXIDs as the journal kept them, before the kernel log is read: a fatal one
    /// holds the node unhealthy after a restart whose kernel-log reader resumes past it.
    pub fn seed_sxids(&self, seen: &[crate::model::xid::SxidCount]) {
        let mut inner = self.lock();
        for x in seen {
            let key = (x.pci_bus_id.clone(), x.sxid);
            if !inner.sxids.contains_key(&key) && inner.sxids.len() >= MAX_SXID_SERIES {
                break;
            }
            let entry = inner
                .sxids
                .entry(key)
                .or_insert_with(|| crate::model::xid::SxidCount { count: 0, ..x.clone() });
            entry.count += x.count;
            entry.fatal |= x.fatal;
            entry.last_seen = entry.last_seen.max(x.last_seen);
        }
        drop(inner);
        if !seen.is_empty() {
            self.moved_on();
        }
    }

    fn moved_on(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
        if let Some(changed) = self.changed.get() {
            changed.signal();
        }
    }

    pub fn new(dedup_window: Duration) -> XidStore {
        XidStore {
            changes: AtomicU64::new(0),
            changed: std::sync::OnceLock::new(),
            counted_to: std::sync::OnceLock::new(),
            groups: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                dedup_window,
                policy: Default::default(),
                counts: BTreeMap::new(),
                recent_times: HashMap::new(),
                instance_counts: BTreeMap::new(),
                recent: HashMap::new(),
                newest: None,
                sources: BTreeMap::new(),
                reports: BTreeMap::new(),
                dropped: 0,
                drop_log: crate::service::logging::RateLimiter::new(DROP_LOG_EVERY),
                other_severity: BTreeMap::new(),
                sxids: BTreeMap::new(),
                identities: Default::default(),
                identity_order: Default::default(),
                repeated: 0,
                gpus: Default::default(),
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
    /// counted from another source (or the store is full). Constant work per report.
    pub fn record(&self, event: XidEvent) -> bool {
        let mut inner = self.lock();
        let window = inner.dedup_window;
        *inner.reports.entry(event.source.label()).or_insert(0) += 1;
        let near = |a: SystemTime, b: SystemTime| {
            a.duration_since(b)
                .or_else(|_| b.duration_since(a))
                .map(|d| d <= window)
                .unwrap_or(false)
        };
        if inner.read_before(event.identity) {
            return false;
        }
        if let Some(nvswitch) = event.nvswitch {
            let counted = inner.count_sxid(&event, nvswitch);
            drop(inner);
            if counted {
                // To the journal as its own row (a fatal one survives a restart from there).
                let id = self.groups.fetch_add(1, Ordering::Relaxed) + 1;
                let severity = if nvswitch.fatal {
                    Severity::Fatal
                } else {
                    Severity::Warning
                };
                self.tell_counted(id, &event, severity, event.xid);
            }
            self.moved_on();
            return counted;
        }
        if !inner.has_room_for(&event.pci_bus_id) {
            inner.drop_report(&event);
            self.moved_on();
            return false;
        }
        let counted_as = inner.counted_as(&event.pci_bus_id, event.xid);
        if counted_as == OTHER_CODES && !inner.counts.contains_key(&(event.pci_bus_id.clone(), OTHER_CODES)) {
            log::warn!(
                "{} has XIDs of {MAX_CODES_PER_ADDRESS} distinct codes; further codes (first: Xid {}) are \
                 counted together as xid=\"other\"",
                event.pci_bus_id,
                event.xid
            );
        }
        let key = (event.pci_bus_id.clone(), counted_as);
        let newest = inner.newest.map_or(event.at, |n| n.max(event.at));
        inner.newest = Some(newest);
        let groups = inner.recent.entry(key.clone()).or_default();
        // Forget events no new report can join any more (reports arrive roughly in order; a
        // backlog read at start-up carries its own, older times).
        while groups.front().is_some_and(|g| !near(g.at, newest) && g.at < newest) {
            groups.pop_front();
        }
        let bit = event.source.bit();
        if let Some(group) = groups.iter_mut().find(|g| g.sources & bit == 0 && near(g.at, event.at)) {
            group.sources |= bit;
            let id = group.id;
            self.tell_joined(id, &event);
            return false;
        }
        let id = self.groups.fetch_add(1, Ordering::Relaxed) + 1;
        groups.push_back(Group {
            at: event.at,
            sources: bit,
            id,
        });
        if groups.len() > RECENT_PER_KEY {
            groups.pop_front();
        }
        if let Some(instance) = event.gpu_instance {
            inner.count_instance(&key.0, instance, key.1, event.at);
        }
        inner.recent_times.entry(key.clone()).or_default().push(event.at);
        let entry = inner.counts.entry(key).or_insert((0, event.at));
        entry.0 += 1;
        entry.1 = entry.1.max(event.at);
        let severity = inner.severity(event.xid);
        self.tell_counted(id, &event, severity, counted_as);
        self.moved_on();
        true
    }

    pub fn set_source_up(&self, source: XidSource, up: bool) {
        if self.lock().sources.insert(source.label(), up) != Some(up) {
            self.moved_on();
        }
    }

    /// A source turned off by a reload: it is not read, so it has no state to show.
    pub fn forget_source(&self, source: XidSource) {
        if self.lock().sources.remove(source.label()).is_some() {
            self.moved_on();
        }
    }

    /// The PCI addresses of the GPUs the backends enumerate now (the publisher says, every
    /// round): their XIDs are always counted, whatever else the log names.
    pub fn set_gpus<'a>(&self, addresses: impl Iterator<Item = &'a str>) {
        let mut inner = self.lock();
        for address in addresses {
            if !inner.gpus.contains(address) {
                inner.gpus.insert(address.to_string());
            }
        }
    }

    /// Applies the operator's XID severities (at start and on reload): to every count,
    /// those from before too, from the next snapshot on.
    pub fn set_policy(&self, policy: crate::model::xid::XidPolicy) {
        self.lock().policy = policy;
        self.moved_on();
    }

    /// The severity `code` has now (the operator's, else the catalog's).
    pub fn severity(&self, code: u32) -> Severity {
        self.lock().severity(code)
    }

    /// Applies a reloaded `xid.dedup_window` to the reports that come from now on.
    pub fn set_dedup_window(&self, window: Duration) {
        self.lock().dedup_window = window;
    }

    /// A number that changes whenever the counts or the sources' states change.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> XidSnapshot {
        let mut inner = self.lock();
        // Times that fell out of the window go (a snapshot is taken every round).
        let since = SystemTime::now() - crate::model::xid::RECENT_WINDOW;
        inner.recent_times.retain(|_, times| {
            times.forget_before(since);
            !times.is_empty()
        });
        let mut by_bus: BTreeMap<String, Vec<XidCount>> = BTreeMap::new();
        for ((bus, xid), (count, last_seen)) in &inner.counts {
            let recent = inner
                .recent_times
                .get(&(bus.clone(), *xid))
                .map_or(0, |times| times.count());
            by_bus.entry(bus.clone()).or_default().push(XidCount {
                xid: *xid,
                severity: inner.count_severity(bus, *xid),
                count: *count,
                last_seen: *last_seen,
                recent,
            });
        }
        let mut by_instance: BTreeMap<(String, u32), Vec<XidCount>> = BTreeMap::new();
        for ((bus, instance, xid), (count, last_seen)) in &inner.instance_counts {
            by_instance.entry((bus.clone(), *instance)).or_default().push(XidCount {
                xid: *xid,
                severity: inner.count_severity(bus, *xid),
                count: *count,
                last_seen: *last_seen,
                recent: 0,
            });
        }
        XidSnapshot {
            by_bus,
            by_instance,
            dropped: inner.dropped,
            sources: inner.sources.clone(),
            reports: inner.reports.clone(),
            sxids: inner.sxids.values().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUS: &str = "0000:3b:00.0";

    fn event(xid: u32, source: XidSource, at_s: u64) -> XidEvent {
        XidEvent {
            gpu_instance: None,
            pci_bus_id: BUS.into(),
            xid,
            source,
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(at_s),
            raw: None,
            kmsg_sequence: None,
            identity: None,
            nvswitch: None,
            file_position: None,
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
        assert!(store.record(event(79, XidSource::KernelLog, 100)));
        assert!(!store.record(event(79, XidSource::Nvml, 101)));
        assert!(!store.record(event(79, XidSource::KernelLogFallenOffBus, 101)));
        assert_eq!(count(&store, 79), 1);
    }

    #[test]
    fn the_operators_severities_apply_to_counts_from_before_and_say_so() {
        let store = XidStore::new(Duration::from_secs(10));
        let severity_of = |store: &XidStore, xid| {
            store
                .snapshot()
                .by_bus
                .values()
                .flatten()
                .find(|c| c.xid == xid)
                .map(|c| c.severity)
        };
        assert!(store.record(event(13, XidSource::KernelLog, 100)));
        assert!(store.record(event(48, XidSource::KernelLog, 100)));
        assert_eq!(severity_of(&store, 13), Some(Severity::Warning), "the catalog's");
        let changes = store.changes();
        store.set_policy(crate::model::xid::XidPolicy {
            all: Some(Severity::Info),
            codes: [(13, Severity::Fatal)].into(),
        });
        assert!(store.changes() > changes, "a new snapshot is due");
        assert_eq!(severity_of(&store, 13), Some(Severity::Fatal));
        assert_eq!(severity_of(&store, 48), Some(Severity::Info), "all: ignore");
        assert_eq!(count(&store, 13), 1, "counted whatever its severity");
        store.set_policy(Default::default());
        assert_eq!(severity_of(&store, 48), Some(Severity::Fatal));
    }

    #[test]
    fn repeats_from_one_source_are_all_counted() {
        let store = XidStore::new(Duration::from_secs(10));
        for t in [100, 101, 102] {
            assert!(store.record(event(13, XidSource::KernelLog, t)));
        }
        // Each NVML report pairs with one kernel report.
        for t in [100, 101, 102] {
            assert!(!store.record(event(13, XidSource::Nvml, t)));
        }
        assert_eq!(count(&store, 13), 3);
    }

    #[test]
    fn outside_the_window_it_is_a_new_event() {
        let store = XidStore::new(Duration::from_secs(10));
        assert!(store.record(event(31, XidSource::KernelLog, 100)));
        assert!(store.record(event(31, XidSource::Nvml, 200)));
        assert_eq!(count(&store, 31), 2);
        let last = store.snapshot().for_bus(BUS)[0].last_seen;
        assert_eq!(last, SystemTime::UNIX_EPOCH + Duration::from_secs(200));
    }

    #[test]
    fn different_gpus_and_codes_do_not_merge() {
        let store = XidStore::new(Duration::from_secs(10));
        assert!(store.record(event(79, XidSource::KernelLog, 100)));
        assert!(store.record(event(48, XidSource::Nvml, 100)));
        let mut other = event(79, XidSource::Nvml, 100);
        other.pci_bus_id = "0000:5d:00.0".into();
        assert!(store.record(other));
    }

    /// 40,000 distinct codes on one GPU: 64 counted one by one, the rest as `other`, with
    /// the highest severity among them; every report counted (the values add up).
    #[test]
    fn distinct_codes_per_gpu_are_bounded_and_still_add_up() {
        let store = XidStore::new(Duration::from_secs(10));
        store.set_gpus([BUS].into_iter());
        for code in 1000..41_000u32 {
            assert!(store.record(event(code, XidSource::KernelLog, u64::from(code))));
        }
        // A fatal code beyond the limit keeps a count of its own.
        assert!(store.record(event(79, XidSource::KernelLog, 50_000)));
        let snapshot = store.snapshot();
        let counts = snapshot.for_bus(BUS);
        assert_eq!(counts.len(), MAX_CODES_PER_ADDRESS + 2);
        let total: u64 = counts.iter().map(|c| c.count).sum();
        assert_eq!(total, 40_001);
        let other = counts.iter().find(|c| c.xid == OTHER_CODES).unwrap();
        assert_eq!(other.code(), "other");
        assert_eq!(other.severity, Severity::Unknown);
        assert_eq!(
            counts.iter().find(|c| c.xid == 79).map(|c| c.severity),
            Some(Severity::Fatal)
        );
        // With every code fatal by policy, the severe codes too are bounded, and `other`
        // carries the highest severity among what it holds.
        let store = XidStore::new(Duration::from_secs(10));
        store.set_gpus([BUS].into_iter());
        store.set_policy(crate::model::xid::XidPolicy {
            all: Some(Severity::Fatal),
            codes: Default::default(),
        });
        for code in 1000..2000u32 {
            store.record(event(code, XidSource::KernelLog, u64::from(code)));
        }
        let snapshot = store.snapshot();
        let counts = snapshot.for_bus(BUS);
        assert_eq!(counts.len(), MAX_SEVERE_CODES_PER_ADDRESS + 1);
        let other = counts.iter().find(|c| c.xid == OTHER_CODES).unwrap();
        assert_eq!(
            (other.count, other.severity),
            (1000 - MAX_SEVERE_CODES_PER_ADDRESS as u64, Severity::Fatal)
        );
        assert_eq!(snapshot.dropped, 0);
        // Addresses that are no GPU: 32 of them, further ones dropped and counted.
        for n in 0..40u32 {
            let mut e = event(13, XidSource::KernelLog, 60_000);
            e.pci_bus_id = format!("0000:{:02x}:00.0", 0x80 + n);
            store.record(e);
        }
        let snapshot = store.snapshot();
        assert_eq!(snapshot.by_bus.len(), 1 + MAX_ADDRESSES);
        assert_eq!(snapshot.dropped, 8);
    }

    #[test]
    fn a_record_read_twice_is_counted_once() {
        let store = XidStore::new(Duration::from_secs(10));
        let mut e = event(48, XidSource::KernelLog, 100);
        e.identity = Some(7);
        assert!(store.record(e.clone()));
        assert!(!store.record(e.clone()), "the same record again");
        e.identity = Some(8);
        assert!(store.record(e), "another record");
        assert_eq!(count(&store, 48), 2);
    }
}
