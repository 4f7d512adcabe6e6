//! What the journal knows of each GPU and how it decides that a snapshot changed it: the
//! facts per UUID (loaded when the file opens), which of them the file has not caught up
//! with, the first look of this run, the last full look (to pass over a round that changed
//! nothing), persistence turned on, board swaps, and GPUs on the PCI bus no backend
//! enumerates. It only compares and hands back rows; the writer queues them and carries the
//! changed facts to the file.

use crate::journal::event::{Event, GpuRef, Kind};
use crate::journal::writer::facts::{self, GpuFacts};
use crate::journal::writer::seen::LastSeen;
use crate::model::{DeviceSnapshot, Snapshot};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

pub(super) struct GpuLooks {
    /// By UUID: what the journal last knew of each GPU (loaded when the file opens).
    facts: BTreeMap<String, GpuFacts>,
    facts_loaded: bool,
    /// GPUs whose stored facts are out of date.
    dirty_facts: BTreeSet<String>,
    /// GPUs looked at in this run: the first look at each records its counters.
    looked_at: BTreeSet<String>,
    /// By UUID: what the last full look at each GPU read, to pass over a round that changed
    /// none of it.
    seen: BTreeMap<String, LastSeen>,
    /// PCI addresses of GPUs on the bus that no backend enumerates, as last written.
    missing: BTreeSet<String>,
    /// By UUID: how often gpuwarden turned persistence mode on, as last written.
    persistence_enabled: BTreeMap<String, u64>,
    /// Where a board swap goes: the verdict's notice and its validation.
    swaps: crate::journal::writer::board_swap::SwapWrites,
}

impl GpuLooks {
    pub(super) fn new() -> GpuLooks {
        GpuLooks {
            facts: BTreeMap::new(),
            facts_loaded: false,
            dirty_facts: BTreeSet::new(),
            looked_at: BTreeSet::new(),
            seen: BTreeMap::new(),
            missing: BTreeSet::new(),
            persistence_enabled: BTreeMap::new(),
            swaps: Default::default(),
        }
    }

    /// Each GPU's facts as the seed read them, before the file is open for writing: rows name
    /// their GPU, and a board swap is found, even while another program holds the file's
    /// write lock (the facts its first open brings add to these, never replace them).
    pub(super) fn start_from(&mut self, facts: Vec<GpuFacts>) {
        for f in facts {
            self.facts.insert(f.uuid.clone(), f);
        }
    }

    /// What the file knew at its first open; false when it was loaded already.
    pub(super) fn load(&mut self, facts: Vec<GpuFacts>) -> bool {
        if self.facts_loaded {
            return false;
        }
        self.facts_loaded = true;
        for f in facts {
            self.facts.entry(f.uuid.clone()).or_insert(f);
        }
        true
    }

    /// The GPU at `pci_bus_id` as the journal knows it, else just its address.
    pub(super) fn gpu_at(&self, pci_bus_id: &str) -> Option<GpuRef> {
        if pci_bus_id.is_empty() {
            return None;
        }
        self.facts
            .values()
            .find(|f| f.pci_bus_id == pci_bus_id)
            .map(GpuFacts::gpu_ref)
            .or_else(|| {
                Some(GpuRef {
                    pci_bus_id: pci_bus_id.to_string(),
                    ..Default::default()
                })
            })
    }

    /// Whether some GPU's stored facts are out of date.
    pub(super) fn has_dirty(&self) -> bool {
        !self.dirty_facts.is_empty()
    }

    /// The facts the file has not caught up with.
    pub(super) fn dirty(&self) -> Vec<GpuFacts> {
        self.dirty_facts
            .iter()
            .filter_map(|uuid| self.facts.get(uuid).cloned())
            .collect()
    }

    /// The out-of-date facts went into a batch (a failed batch keeps them).
    pub(super) fn taken(&mut self) {
        self.dirty_facts.clear();
    }

    /// A new file (moved aside, or deleted under the daemon): every GPU's facts go into it.
    pub(super) fn write_all_again(&mut self) {
        self.dirty_facts.extend(self.facts.keys().cloned());
    }

    /// The rows `device` calls for in `snapshot`, into `rows`.
    pub(super) fn look_at_gpu(
        &mut self,
        device: &DeviceSnapshot,
        snapshot: &Snapshot,
        now: f64,
        rows: &mut Vec<Event>,
    ) {
        // A round that changed nothing the journal records (most do): passed over.
        let known = self.facts.get(&device.identity.uuid);
        if known.is_some_and(|f| f.episodes.is_empty())
            && self
                .seen
                .get(&device.identity.uuid)
                .is_some_and(|s| s.unchanged(device, snapshot))
        {
            #[cfg(debug_assertions)]
            if let Some(last) = known {
                crate::journal::writer::seen::assert_nothing_missed(last, device, snapshot, now);
            }
            return;
        }
        let uuid = device.identity.uuid.clone();
        // Taken out (not cloned) and put back below: this runs for every GPU every round.
        let last = self.facts.remove(&uuid);
        let mut new = facts::facts_of(device, snapshot, last.as_ref(), now);
        if last.is_none()
            && let Some(previous) = self
                .facts
                .values()
                .find(|f| f.pci_bus_id == new.pci_bus_id && f.uuid != new.uuid && !f.pci_bus_id.is_empty())
                .cloned()
        {
            let validate = snapshot.health_limits.validate_after_clear;
            rows.extend(self.board_swapped(&previous, &new, device, snapshot, now, validate));
        }
        rows.extend(facts::changes(
            last.as_ref(),
            &mut new,
            facts::ProbeNow::of(snapshot, &uuid),
            now,
        ));
        // Known from before a restart: this run's first reading of its counters.
        if self.looked_at.insert(uuid.clone()) && last.is_some() {
            rows.extend(facts::first_readings(&new, now, "at start"));
        }
        rows.extend(self.note_persistence(&uuid, snapshot, &new, now));
        if !last.as_ref().is_some_and(|last| last.same_stored_facts(&new)) {
            self.dirty_facts.insert(uuid.clone());
        }
        self.seen.insert(uuid.clone(), LastSeen::of(device, snapshot));
        self.facts.insert(uuid, new);
    }

    /// `new` took the slot of the board `previous` (a swap): its row, the verdict's notice, a
    /// validation where asked for, and the old board's facts no longer at this address.
    fn board_swapped(
        &mut self,
        previous: &GpuFacts,
        new: &GpuFacts,
        device: &DeviceSnapshot,
        snapshot: &Snapshot,
        now: f64,
        validate: bool,
    ) -> Vec<Event> {
        let rows = self.swaps.record(previous, new, device, snapshot, now, validate);
        // The old board's facts stay (its history keeps its serial), but no longer at
        // this address.
        self.seen.remove(&previous.uuid);
        if let Some(old) = self.facts.get_mut(&previous.uuid) {
            old.pci_bus_id = String::new();
            self.dirty_facts.insert(previous.uuid.clone());
        }
        rows
    }

    /// The board swaps found since the last take, as commands for the service state's owner.
    pub(super) fn take_swaps(&mut self) -> Vec<crate::lifecycle::Command> {
        self.swaps.take_untold()
    }

    /// A row each time gpuwarden turned a GPU's persistence mode on.
    fn note_persistence(&mut self, uuid: &str, snapshot: &Snapshot, facts: &GpuFacts, now: f64) -> Option<Event> {
        let enabled = snapshot.persistence_enabled(uuid);
        let before = self.persistence_enabled.insert(uuid.to_string(), enabled).unwrap_or(0);
        (enabled > before).then(|| {
            Event::new(
                now,
                Kind::Persistence,
                Some(facts.gpu_ref()),
                "gpuwarden turned persistence mode on".into(),
                json!({"times_since_start": enabled}),
            )
        })
    }

    /// A row for each GPU newly on the PCI bus that no backend enumerates.
    pub(super) fn look_at_missing(&mut self, snapshot: &Snapshot, now: f64, rows: &mut Vec<Event>) {
        let missing: BTreeSet<String> = snapshot.missing_gpus().map(|g| g.pci_bus_id.clone()).collect();
        for bus in missing.difference(&self.missing) {
            let driver = snapshot
                .pci_gpus
                .iter()
                .find(|g| &g.pci_bus_id == bus)
                .and_then(|g| g.driver.clone());
            rows.push(Event::new(
                now,
                Kind::PciMissing,
                Some(GpuRef {
                    pci_bus_id: bus.clone(),
                    ..Default::default()
                }),
                format!("a GPU on the PCI bus at {bus} that no backend enumerates"),
                json!({"driver": driver}),
            ));
        }
        self.missing = missing;
    }

    /// At the stop: a row for each slowdown episode still going on.
    pub(super) fn end_open_episodes(&mut self) -> Vec<Event> {
        let mut rows = Vec::new();
        for f in self.facts.values_mut() {
            let gpu = Some(f.gpu_ref());
            for (reason, (start, last)) in std::mem::take(&mut f.episodes) {
                rows.push(facts::episode_event(&reason, start, last, &gpu));
            }
        }
        rows
    }
}
