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
//! | PCIe AER | [`pcie_aer::PcieAerCounts`], task `source-pcie-aer`, every 30 s while the node has GPUs | each GPU's AER totals since boot |
//! | fabric manager | [`fabric_manager::FabricManagerCheck`], task `source-fabric-manager`, every 30 s while a GPU reports an NVLink fabric | whether nvidia-fabricmanager runs |
//! | network ports | [`nics::NicPorts`], task `source-nics`, every `network.interval` (10 s) | RDMA devices and their ports |
//! | probe results | `probe::schedule`, thread `probe-scheduler` | the latest report per GPU |
//! | service state | [`crate::lifecycle::Lifecycle`], its one writer, at the commands of the local API, the journal, the probe scheduler and remediation | clears, boards and swaps, validations, the scheduler's report, remediation's attempts and reboot mark |
//!
//! Nothing else reads the outside world between rounds: the publisher only takes an `Arc` of
//! each value ([`Sources::read`]) and puts the snapshot together from them without I/O, so a
//! slow or hostile input (a FIFO in the job directory, a /proc walk over 100,000 processes)
//! stalls its own source and nothing else. Each source's version moves when its value
//! changes; the refresher publishes a new snapshot when any did ([`Sources::versions`]).
//!
//! The periodic ones share one shape, [`Periodic`]: a period from the settings in force (none:
//! off, and the value is emptied) and a read. Each sleeps until its next read or a reload,
//! which reads at once; one that is off does not wake. Reads come on the runtime's beat
//! ([`crate::service::cadence::on_the_beat`]), so sources of the same or multiple periods wake it together.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `fabric_manager.rs` | Whether nvidia-fabricmanager runs, as a source: on a node whose GPUs report an NVLink fabric and whose PCI bus shows the NVSwitches (the host of an HGX... |
//! | `gpu_thread.rs` | One GPU's poll thread and the coordinator's view of it: the thread keeps the timetable itself (it polls when its round is due, or at once when asked, and... |
//! | `grid.rs` | The poll rounds' timetable, shared by the coordinator and the GPU threads |
//! | `jobs.rs` | The job mapping directory as a source: read every `READ_EVERY` on a thread of its own (a FIFO or a directory of a million files there stalls this thread,... |
//! | `library_hold.rs` | Following a GPU reset's hold on the GPU libraries (remediation/auto.rs asks for it): the backends that hold GPU handles let go (their GPUs read as down... |
//! | `nics.rs` | The node's InfiniBand and RoCE ports as a source: every `network.interval` (10 s), a read of what changes on each port (states, rate, counters, the... |
//! | `pci.rs` | The PCI census as a source: the GPUs on the bus, looked at every `LOOK_EVERY` with `pci_census` on (they change at boot and at hot-plug; each look reads a... |
//! | `pcie_aer.rs` | Each GPU's PCIe Advanced Error Reporting (AER) counts, as a source: every `LOOK_EVERY` while the node has GPUs, the kernel's totals since boot in... |
//! | `poller.rs` | The poll loop: one OS thread per GPU (gpu_thread.rs), a coordinator that gives each round a deadline |
//! | `processes.rs` | GPU processes of the GPUs whose driver keeps no list (AMD), from the kernel's DRM client statistics in /proc: walked every `drm_clients::SCAN_EVERY` on a... |
//! | `round.rs` | What the poller hands on after each round, and how, so that it knows nothing of the stages after it: the round's part of a snapshot goes to a `RoundSink`... |
//! <!-- /files -->

pub(crate) mod fabric_manager;
pub(crate) mod gpu_thread;
pub(crate) mod grid;
pub(crate) mod jobs;
pub(crate) mod library_hold;
pub(crate) mod nics;
pub(crate) mod pci;
pub mod pcie_aer;
pub(crate) mod poller;
pub(crate) mod processes;
pub(crate) mod round;

use crate::config::settings::{Settings, SharedSettings};
use crate::model::PciGpu;
use crate::service::stop::Stop;
use crate::service::versioned::{Changed, Versioned};
use crate::xid::store::{XidSnapshot, XidStore};
use round::PolledGpus;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a source that something beside the settings can turn on looks again while off
/// ([`Periodic::look_again_while_off`]).
pub const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// `look_again_while_off` for a source that a GPU turns on: GPUs are known from the first
/// published round, so every [`LOOK_AGAIN`] until then, and every `then` after (a GPU that
/// comes later, after a driver load, is seen within that).
pub fn look_again_after_the_first_round(polled: &Versioned<PolledGpus>, then: Duration) -> Option<Duration> {
    Some(if !polled.get().after_first_round {
        LOOK_AGAIN
    } else {
        then
    })
}

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
    /// While off (`every` is `None`): how soon to ask `every` again when something beside the
    /// settings can turn the source on; `None`, the default: at the next reload only, so an
    /// idle source never wakes.
    fn look_again_while_off(&self) -> Option<Duration> {
        None
    }
}

/// Runs `source` as a task until `stop`, keeping its value in `out`. Each read runs on the
/// runtime's blocking pool (a walk of a large /proc never holds up a scrape), one at a time:
/// a read that hangs (a stale network mount) stalls this source alone and piles nothing up.
/// Tasks rather than threads of their own: the pool's one thread serves every source, which
/// keeps the daemon's memory down (a thread costs its stack and a malloc arena).
pub fn spawn<P: Periodic>(source: P, out: Arc<Versioned<P::Value>>, settings: Arc<SharedSettings>, stop: Stop) {
    tokio::spawn(async move {
        let mut source = Some(source);
        let mut due: Option<Instant> = None;
        let mut read_with: Option<Arc<Settings>> = None;
        let mut reloads = settings.subscribe();
        while let Some(running) = source.take() {
            // Seen before the settings are read: a reload from here on wakes the wait below.
            reloads.borrow_and_update();
            let current = settings.current();
            let (running, wait) = look(running, &out, &current, &mut due, &mut read_with).await;
            let Some(running) = running else {
                log::error!("the {} source failed and stopped", P::NAME);
                return;
            };
            source = Some(running);
            tokio::select! {
                _ = sleep_or_forever(wait) => {}
                reloaded = reloads.changed() => if reloaded.is_err() { break },
                _ = stop.stopped() => break,
            }
        }
    });
}

/// One look at a periodic source: reads it when due (at once after a reload: the directory or
/// root may have moved), empties its value while off. The source back (`None` when its read
/// panicked) and how long to wait before the next look (`None`: until a reload).
async fn look<P: Periodic>(
    mut running: P,
    out: &Versioned<P::Value>,
    current: &Arc<Settings>,
    due: &mut Option<Instant>,
    read_with: &mut Option<Arc<Settings>>,
) -> (Option<P>, Option<Duration>) {
    let Some(period) = running.every(current) else {
        out.set_if_changed(P::Value::default());
        *read_with = None;
        *due = None;
        let now = Instant::now();
        let again = running
            .look_again_while_off()
            .map(|again| crate::service::cadence::next_on_the_beat(again, now).saturating_duration_since(now));
        return (Some(running), again);
    };
    if read_with.as_ref().is_none_or(|s| !Arc::ptr_eq(s, current)) {
        *due = None;
    }
    if due.is_none_or(|at| Instant::now() >= at) {
        let with = current.clone();
        let read = tokio::task::spawn_blocking(move || {
            let value = running.read(&with);
            (running, value)
        });
        let Ok((back, value)) = read.await else {
            return (None, None);
        };
        running = back;
        out.set_if_changed(value);
        *read_with = Some(current.clone());
        *due = Some(crate::service::cadence::next_on_the_beat(period, Instant::now()));
    }
    let now = Instant::now();
    (Some(running), due.map(|at| at.saturating_duration_since(now)))
}

/// Sleeps `wait`, or for ever with `None`.
async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// Reads a periodic source once, here and now: for `gpuwarden check`, which has no threads.
pub fn read_once<P: Periodic>(mut source: P, out: &Versioned<P::Value>, settings: &Settings) {
    if source.every(settings).is_some() {
        out.set(source.read(settings));
    }
}

/// A side input's holder as the publisher sees it: a version that moves when the value
/// changes, the value at one moment (no I/O, an `Arc` clone or a small copy), and a signal
/// to the refresher on each change.
pub trait Source: Send + Sync + 'static {
    type Value: Clone + Default + std::fmt::Debug;
    fn version(&self) -> u64;
    fn value(&self) -> Self::Value;
    fn signal_to(&self, changed: Arc<Changed>);
}

impl<T: Default + std::fmt::Debug + Send + Sync + 'static> Source for Versioned<T> {
    type Value = Arc<T>;
    fn version(&self) -> u64 {
        Versioned::version(self)
    }
    fn value(&self) -> Arc<T> {
        self.get()
    }
    fn signal_to(&self, changed: Arc<Changed>) {
        Versioned::signal_to(self, changed)
    }
}

impl Source for crate::lifecycle::Lifecycle {
    type Value = Arc<crate::lifecycle::ServiceState>;
    fn version(&self) -> u64 {
        crate::lifecycle::Lifecycle::version(self)
    }
    fn value(&self) -> Arc<crate::lifecycle::ServiceState> {
        self.get()
    }
    fn signal_to(&self, changed: Arc<Changed>) {
        crate::lifecycle::Lifecycle::signal_to(self, changed)
    }
}

impl Fresh for crate::lifecycle::Lifecycle {
    fn fresh(_: &Arc<XidStore>) -> Arc<crate::lifecycle::Lifecycle> {
        Arc::default()
    }
}

impl Source for XidStore {
    type Value = XidSnapshot;
    fn version(&self) -> u64 {
        self.changes()
    }
    fn value(&self) -> XidSnapshot {
        self.snapshot()
    }
    fn signal_to(&self, changed: Arc<Changed>) {
        XidStore::signal_to(self, changed)
    }
}

/// The registry of side inputs: one entry per source makes its holder in [`Sources`], its
/// version in [`Versions`], its value in [`Inputs`] and its change signal; a periodic one also
/// names how to make its reader (`periodic`), which [`Sources::spawn_periodic`] runs as a task
/// and [`Sources::read_periodic_once`] reads once for `check`.
macro_rules! sources {
    ($( $(#[$doc:meta])* $name:ident: $holder:ty $(= periodic($make:expr))? ),* $(,)?) => {
        /// Every side input's value, shared between its source and the publisher.
        #[derive(Clone)]
        pub struct Sources {
            $( $(#[$doc])* pub $name: Arc<$holder>, )*
            /// Signalled by every source when its value changes.
            pub changed: Arc<Changed>,
            /// The GPUs the poller polled last (it sets them after each round): what the
            /// sources that a GPU turns on look at. Not a snapshot input.
            pub polled: Arc<Versioned<PolledGpus>>,
        }

        /// Each source's version at one moment: equal versions, nothing new to publish.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct Versions {
            $( pub $name: u64, )*
        }

        /// Every side input's value at one moment, as the publisher puts it into a snapshot.
        #[derive(Debug, Clone, Default)]
        pub struct Inputs {
            $( $(#[$doc])* pub $name: <$holder as Source>::Value, )*
            /// What readers of the outside world skipped so far, by (input, reason).
            pub input_skipped: Vec<(&'static str, &'static str, u64)>,
            /// Versions read before the values: a change that lands in between is published
            /// again.
            pub versions: Versions,
        }

        impl Sources {
            /// Each source around its holder, every one signalling `changed`.
            fn around(xids: Arc<XidStore>) -> Sources {
                let sources = Sources {
                    $( $name: <$holder as Fresh>::fresh(&xids), )*
                    changed: Arc::default(),
                    polled: Arc::default(),
                };
                $( sources.$name.signal_to(sources.changed.clone()); )*
                sources
            }

            pub fn versions(&self) -> Versions {
                Versions {
                    $( $name: self.$name.version(), )*
                }
            }

            /// Takes every value; no I/O, no lock held beyond the copy of an `Arc`.
            pub fn read(&self) -> Inputs {
                let versions = self.versions();
                Inputs {
                    $( $name: self.$name.value(), )*
                    input_skipped: crate::input::skipped_totals()
                        .into_iter()
                        .map(|(input, reason, n)| (input.label(), reason.label(), n))
                        .collect(),
                    versions,
                }
            }

            /// Starts the periodic sources' tasks (the others are started by their owners);
            /// inside the runtime.
            pub fn spawn_periodic(&self, settings: &Arc<SharedSettings>, stop: &Stop) {
                $( $( spawn_named(($make)(&self.polled), self.$name.clone(), settings.clone(), stop); )? )*
            }

            /// Reads the periodic sources once, here and now (`gpuwarden check`).
            pub fn read_periodic_once(&self, settings: &Settings) {
                $( $( read_once(($make)(&self.polled), &self.$name, settings); )? )*
            }
        }
    };
}

/// A holder as a new [`Sources`] starts it: empty, but for the XID store it is given.
trait Fresh {
    fn fresh(xids: &Arc<XidStore>) -> Arc<Self>;
}

impl Fresh for XidStore {
    fn fresh(xids: &Arc<XidStore>) -> Arc<XidStore> {
        xids.clone()
    }
}

impl<T: Default> Fresh for Versioned<T> {
    fn fresh(_: &Arc<XidStore>) -> Arc<Versioned<T>> {
        Arc::default()
    }
}

fn spawn_named<P: Periodic>(source: P, out: Arc<Versioned<P::Value>>, settings: Arc<SharedSettings>, stop: &Stop) {
    spawn(source, out, settings, stop.handle(P::NAME));
}

sources! {
    /// XIDs from the kernel log and NVML events, counted once.
    xids: XidStore,
    /// The probe's latest report per GPU (`probe::schedule`).
    probes: Versioned<crate::model::probe::ProbeSnapshot>,
    /// Each event sink's delivery (`journal::sinks`).
    sinks: Versioned<crate::model::sink::SinkStates>,
    /// The kubelet's device assignments (`attribution::kubelet`).
    pods: crate::attribution::kubelet::PodState,
    /// Job ids per mapping file.
    jobs: Versioned<jobs::JobMap> = periodic(|_: &Arc<Versioned<PolledGpus>>| jobs::JobFiles::default()),
    /// The GPUs on the PCI bus.
    pci: Versioned<Vec<PciGpu>> = periodic(|_: &Arc<Versioned<PolledGpus>>| pci::PciCensus),
    /// Each GPU's PCIe AER totals, by PCI address.
    pcie_aer: Versioned<crate::model::PcieAerScan> = periodic(|polled: &Arc<Versioned<PolledGpus>>| pcie_aer::PcieAerCounts::new(polled.clone())),
    /// The node's InfiniBand and RoCE ports.
    nics: Versioned<crate::model::nic::NicScan> = periodic(|_: &Arc<Versioned<PolledGpus>>| nics::NicPorts::default()),
    /// AMD processes per PCI address, from /proc's DRM clients.
    drm_clients: Versioned<processes::DrmScan> = periodic(|polled: &Arc<Versioned<PolledGpus>>| processes::DrmClients::new(polled.clone())),
    /// Whether nvidia-fabricmanager runs (NVSwitch systems only).
    fabric_manager: Versioned<Option<crate::model::links::FabricManager>> = periodic(|polled: &Arc<Versioned<PolledGpus>>| fabric_manager::FabricManagerCheck::new(polled.clone())),
    /// The health journal's state (its writer sets it).
    journal: Versioned<Option<crate::model::JournalStatus>>,
    /// Each GPU's service state: clears, known boards and swaps, validations, the scheduler's
    /// reports. Its one writer is the owner (`lifecycle`); one value, read at once.
    service: crate::lifecycle::Lifecycle,
}

impl Sources {
    /// Empty sources around an XID store: what `check` and the tests start from.
    pub fn new(xids: Arc<XidStore>) -> Sources {
        Sources::around(xids)
    }
}
