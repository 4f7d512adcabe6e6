//! Side inputs: everything a snapshot holds beside the poll round, each read on a thread or
//! task of its own and kept as a [`Versioned`] value.
//!
//! | source | where it runs | value |
//! | --- | --- | --- |
//! | kernel log | `xid::kmsg`, thread `xid-kernel-log` | counts in the [`XidStore`] |
//! | NVML events | `backend::nvml::events`, thread `xid-nvml-events` | counts in the [`XidStore`] |
//! | job mapping | [`jobs::JobFiles`], task `source-jobs`, every 5 s | job ids per mapping file |
//! | pods | `attribution::kubelet::follow`, a task | the kubelet's device assignments |
//! | DRM clients | [`processes::DrmClients`], task `source-drm-clients`, every 10 s while AMD GPUs exist | processes per PCI address |
//! | PCI census | [`pci::PciCensus`], task `source-pci`, every 30 s | GPUs on the bus |
//! | probe results | `probe::schedule`, thread `probe-scheduler` | the latest report per GPU |
//! | board swaps | the journal's writer; the journal at start | the last day's swaps per new GPU |
//! | clears | the local API's `POST /api/v1/health/clear`; the journal at start | the latest clear per GPU |
//!
//! Nothing else reads the outside world between rounds: the publisher only takes an `Arc` of
//! each value ([`Sources::read`]) and puts the snapshot together from them without I/O, so a
//! slow or hostile input (a FIFO in the job directory, a /proc walk over 100,000 processes)
//! stalls its own source and nothing else. Each source's version moves when its value
//! changes; the refresher publishes a new snapshot when any did ([`Sources::versions`]).
//!
//! The periodic ones share one shape, [`Periodic`]: a period from the settings in force (none:
//! off, and the value is emptied) and a read. A reload applies at the next look (within a
//! second), and reads at once.

pub mod cadence;
pub mod jobs;
pub mod pci;
pub mod poller;
pub mod processes;

use crate::config::settings::{Settings, SharedSettings};
use crate::model::PciGpu;
use crate::model::probe::ProbeSnapshot;
use crate::service::stop::Stop;
use crate::snapshot::store::Versioned;
use crate::sources::cadence::Every;
use crate::xid::store::{XidSnapshot, XidStore};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a periodic source looks at the settings while it waits: a reload that turns it
/// on, off or elsewhere applies within this.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// A side input read every so often on a thread of its own.
pub trait Periodic: Send + 'static {
    type Value: Default + PartialEq + Send + Sync + 'static;
    /// Its name, for the log and the stop signal.
    const NAME: &'static str;
    /// How often to read with these settings; `None`: off.
    fn every(&self, settings: &Settings) -> Option<Duration>;
    /// One read. Never blocks on what others write (crate::input), and says itself what it
    /// skipped.
    fn read(&mut self, settings: &Settings) -> Self::Value;
}

/// Runs `source` as a task until `stop`, keeping its value in `out`. Each read runs on the
/// runtime's blocking pool (a walk of a large /proc never holds up a scrape), one at a time:
/// a read that hangs (a stale network mount) stalls this source alone and piles nothing up.
/// Tasks rather than threads of their own: the pool's one thread serves every source, which
/// keeps the daemon's memory down (a thread costs its stack and a malloc arena).
pub fn spawn<P: Periodic>(source: P, out: Arc<Versioned<P::Value>>, settings: Arc<SharedSettings>, stop: Stop) {
    tokio::spawn(async move {
        let mut source = Some(source);
        let mut every = Every::new(LOOK_AGAIN);
        let mut read_with: Option<Arc<Settings>> = None;
        while let Some(mut running) = source.take() {
            let current = settings.current();
            let wait = match running.every(&current) {
                None => {
                    out.set_if_changed(P::Value::default());
                    read_with = None;
                    LOOK_AGAIN
                }
                Some(period) => {
                    every.set_period(period);
                    // A reload reads at once: the directory or root may have moved.
                    if read_with.as_ref().is_none_or(|s| !Arc::ptr_eq(s, &current)) {
                        every.reset();
                    }
                    if every.take(Instant::now()) {
                        let with = current.clone();
                        let read = tokio::task::spawn_blocking(move || {
                            let value = running.read(&with);
                            (running, value)
                        });
                        let Ok((back, value)) = read.await else {
                            log::error!("the {} source failed and stopped", P::NAME);
                            return;
                        };
                        running = back;
                        out.set_if_changed(value);
                        read_with = Some(current);
                    }
                    every.until_due(Instant::now()).min(LOOK_AGAIN)
                }
            };
            source = Some(running);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.stopped() => break,
            }
        }
    });
}

/// Reads a periodic source once, here and now: for `gpuwarden check`, which has no threads.
pub fn read_once<P: Periodic>(mut source: P, out: &Versioned<P::Value>, settings: &Settings) {
    if source.every(settings).is_some() {
        out.set(source.read(settings));
    }
}

/// Every side input's value, shared between its source and the publisher.
#[derive(Clone)]
pub struct Sources {
    pub xids: Arc<XidStore>,
    pub probes: Arc<crate::probe::schedule::ProbeState>,
    pub pods: Arc<crate::attribution::kubelet::PodState>,
    pub jobs: Arc<Versioned<jobs::JobMap>>,
    pub pci: Arc<Versioned<Vec<PciGpu>>>,
    pub drm_clients: Arc<Versioned<processes::DrmScan>>,
    /// The health journal's state (its writer sets it).
    pub journal: Arc<Versioned<Option<crate::model::JournalStatus>>>,
    /// The operators' clears after a repair (`gpuwarden health clear`).
    pub clears: Arc<Versioned<crate::model::health::Clears>>,
    /// Boards the journal found replaced.
    pub board_swaps: Arc<Versioned<crate::model::health::BoardSwaps>>,
    /// Signalled by every source when its value changes.
    pub changed: Arc<crate::snapshot::store::Changed>,
}

/// Each source's version at one moment: equal versions, nothing new to publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Versions {
    xids: u64,
    probes: u64,
    pods: u64,
    /// The job map's: the publisher counts a map's overflow once per version.
    pub jobs: u64,
    pci: u64,
    drm_clients: u64,
    journal: u64,
    clears: u64,
    board_swaps: u64,
}

/// Every side input's value at one moment, as the publisher puts it into a snapshot.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub xid: XidSnapshot,
    pub probe: Arc<ProbeSnapshot>,
    pub pods: Arc<crate::attribution::kubelet::PodSnapshot>,
    pub jobs: Arc<jobs::JobMap>,
    pub pci: Arc<Vec<PciGpu>>,
    pub drm_clients: Arc<processes::DrmScan>,
    pub journal: Option<crate::model::JournalStatus>,
    pub clears: Arc<crate::model::health::Clears>,
    pub board_swaps: Arc<crate::model::health::BoardSwaps>,
    /// What readers of the outside world skipped so far, by (input, reason).
    pub input_skipped: Vec<(&'static str, &'static str, u64)>,
    /// Versions read before the values: a change that lands in between is published again.
    pub versions: Versions,
}

impl Sources {
    /// Empty sources around an XID store: what `check` and the tests start from.
    pub fn new(xids: Arc<XidStore>) -> Sources {
        let sources = Sources {
            xids,
            probes: Arc::default(),
            pods: Arc::default(),
            jobs: Arc::default(),
            pci: Arc::default(),
            drm_clients: Arc::default(),
            journal: Arc::default(),
            clears: Arc::default(),
            board_swaps: Arc::default(),
            changed: Arc::default(),
        };
        let changed = &sources.changed;
        sources.xids.signal_to(changed.clone());
        sources.probes.signal_to(changed.clone());
        sources.pods.signal_to(changed.clone());
        sources.jobs.signal_to(changed.clone());
        sources.pci.signal_to(changed.clone());
        sources.drm_clients.signal_to(changed.clone());
        sources.journal.signal_to(changed.clone());
        sources.clears.signal_to(changed.clone());
        sources.board_swaps.signal_to(changed.clone());
        sources
    }

    pub fn versions(&self) -> Versions {
        Versions {
            xids: self.xids.changes(),
            probes: self.probes.version(),
            pods: self.pods.version(),
            jobs: self.jobs.version(),
            pci: self.pci.version(),
            drm_clients: self.drm_clients.version(),
            journal: self.journal.version(),
            clears: self.clears.version(),
            board_swaps: self.board_swaps.version(),
        }
    }

    /// Takes every value; no I/O, no lock held beyond the copy of an `Arc`.
    pub fn read(&self) -> Inputs {
        let versions = self.versions();
        Inputs {
            xid: self.xids.snapshot(),
            probe: self.probes.get(),
            pods: self.pods.get(),
            jobs: self.jobs.get(),
            pci: self.pci.get(),
            drm_clients: self.drm_clients.get(),
            journal: (*self.journal.get()).clone(),
            clears: self.clears.get(),
            board_swaps: self.board_swaps.get(),
            input_skipped: crate::input::skipped_totals()
                .into_iter()
                .map(|(input, reason, n)| (input.label(), reason.label(), n))
                .collect(),
            versions,
        }
    }

    /// Starts the periodic sources' tasks (the others are started by their owners); inside
    /// the runtime.
    pub fn spawn_periodic(
        &self,
        settings: &Arc<SharedSettings>,
        store: &Arc<crate::snapshot::store::Store>,
        stop: &Stop,
    ) {
        let handle = |name| stop.handle(name);
        spawn(
            jobs::JobFiles::default(),
            self.jobs.clone(),
            settings.clone(),
            handle(jobs::JobFiles::NAME),
        );
        spawn(
            pci::PciCensus,
            self.pci.clone(),
            settings.clone(),
            handle(pci::PciCensus::NAME),
        );
        let drm = processes::DrmClients::new(store.clone());
        spawn(
            drm,
            self.drm_clients.clone(),
            settings.clone(),
            handle(processes::DrmClients::NAME),
        );
    }

    /// Reads the periodic sources once, here and now (`gpuwarden check`).
    pub fn read_periodic_once(&self, settings: &Settings, store: &Arc<crate::snapshot::store::Store>) {
        read_once(jobs::JobFiles::default(), &self.jobs, settings);
        read_once(pci::PciCensus, &self.pci, settings);
        read_once(processes::DrmClients::new(store.clone()), &self.drm_clients, settings);
    }
}
