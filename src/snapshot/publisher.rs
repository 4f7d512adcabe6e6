//! Putting a whole snapshot together and publishing it.
//!
//! A snapshot has parts that change at different times: the poll round's devices and
//! counters (every `poll.interval`), and the side inputs (XID counts, probe results, pods,
//! jobs, the PCI census, DRM clients), each kept by its source (crate::sources). [`assemble`]
//! is the whole of putting them together: a pure function of the round, the sources' values
//! and a few options. Then the health stage judges the result in one call
//! (`HealthMemory::judge`: the round's history, the rules, the operator's rules, the debounce).
//! Neither does I/O, so the publisher's lock is never held across a read of the outside world.
//!
//! A poll round publishes ([`Publisher::publish_round`]); so does
//! [`Publisher::refresh_if_changed`], which the daemon calls a few times a second and which
//! publishes when any source's version moved, so an XID shows on /metrics well within a
//! second whatever the poll interval is.

use crate::attribution::jobs::{self, GpuKey};
use crate::attribution::kubelet::Assignment;
use crate::config::settings::SharedSettings;
use crate::health::memory::HealthMemory;
use crate::input::{Input, Reason, Skips};
use crate::model::health::Clears;
use crate::model::{DeviceSnapshot, PodHolder, Snapshot};
use crate::snapshot::store::Store;
use crate::sources::round::RoundPart;
use crate::sources::{Inputs, Sources, Versions};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What a snapshot takes from the settings and the host, beside the round and the sources.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    pub health_limits: crate::model::health::Limits,
    /// The node's host name (dcgm-exporter's `Hostname` label).
    pub hostname: String,
}

impl Options {
    pub(crate) fn from_config(config: &crate::config::Config, hostname: &str) -> Options {
        Options {
            health_limits: crate::model::health::Limits {
                critical_hold: config.xid.critical_hold,
                temperature_margin: config.health.temperature_margin_c,
                error_rates: config.health.error_rates,
                network: crate::model::nic::NetworkLimits {
                    expected_ports: config.network.expected_ports,
                    expected_rate: config.network.expected_rate_gbps,
                    flaps: config.network.flaps,
                    flap_window: config.network.flap_window,
                    symbol_errors_per_hour: config.network.symbol_errors_per_hour,
                    ignore: config.network.ignore.clone(),
                },
                validate_after_clear: config.health.validate_after_clear,
                probe_regression: crate::model::health::ProbeRegression {
                    pct: config.probe.regression_pct,
                    baseline_probes: config.probe.baseline_probes,
                },
                remediation: config
                    .remediation
                    .mode
                    .advises()
                    .then(|| crate::model::health::LadderLimits {
                        reset_command: config.remediation.reset_command.0.clone(),
                        max_resets_per_day: config.remediation.max_resets_per_day,
                        auto: config.remediation.mode == crate::config::RemediationMode::Auto,
                    }),
            },
            hostname: hostname.to_string(),
        }
    }
}

/// The snapshot of one round and the sources' values: no I/O and no locks (the health rules
/// read the clock for their windows). What could not be kept (more jobs on a GPU than it
/// carries) goes into `skips`.
pub(crate) fn assemble(
    round: &RoundPart,
    inputs: &Inputs,
    options: &Options,
    generation: u64,
    skips: &mut Skips,
) -> Snapshot {
    let mut devices = round.devices.clone();
    fill_processes_from_drm_clients(&mut devices, &inputs.drm_clients);
    Snapshot {
        generation,
        backends: round.backends.clone(),
        persistence_attempts: round.persistence_attempts.clone(),
        round_duration: round.round_duration.clone(),
        xid: inputs.xids.clone(),
        health_limits: options.health_limits.clone(),
        clears: inputs.service.clears.clone(),
        known_boards: inputs.service.known_boards.clone(),
        board_swaps: inputs.service.board_swaps.clone(),
        validations: inputs.service.validations.clone(),
        scheduler: (*inputs.service.scheduler).clone(),
        remediation: inputs.service.remediation.clone(),
        hostname: options.hostname.clone(),
        probe: inputs.probes.clone(),
        sinks: inputs.sinks.clone(),
        custom_rules: Default::default(),
        pci_gpus: (*inputs.pci).clone(),
        pcie_aer: inputs.pcie_aer.clone(),
        nics: inputs.nics.clone(),
        fabric_manager: (*inputs.fabric_manager).clone(),
        pods: pods_by_uuid(&inputs.pods.assignments, &devices),
        kubelet_up: inputs.pods.kubelet_up,
        jobs: jobs_by_uuid(&inputs.jobs, &devices, skips),
        node_findings: Vec::new(),
        input_skipped: inputs.input_skipped.clone(),
        journal: (*inputs.journal).clone(),
        devices,
    }
}

/// The job mapping's files matched to GPUs: a number is an NVIDIA GPU's index (the layout
/// comes from dcgm-exporter; on a node with only AMD GPUs, theirs), a name a GPU's uuid. A GPU
/// with a file by index and one by uuid gets the jobs of both, each once, at most
/// [`jobs::MAX_JOBS_PER_GPU`] (the rest counted as skipped).
fn jobs_by_uuid(
    jobs: &BTreeMap<GpuKey, Vec<String>>,
    devices: &[DeviceSnapshot],
    skips: &mut Skips,
) -> BTreeMap<String, Vec<String>> {
    use crate::model::Vendor;
    let has_nvidia = devices.iter().any(|d| d.identity.vendor == Vendor::Nvidia);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, ids) in jobs {
        let Some(device) = devices.iter().find(|d| match key {
            GpuKey::Index(i) => d.identity.index == *i && (d.identity.vendor == Vendor::Nvidia || !has_nvidia),
            GpuKey::Uuid(uuid) => d.identity.uuid == *uuid,
        }) else {
            continue;
        };
        let merged = out.entry(device.identity.uuid.clone()).or_default();
        for id in ids {
            if merged.contains(id) {
                continue;
            }
            if merged.len() == jobs::MAX_JOBS_PER_GPU {
                skips.add(Reason::TooMany, format!("jobs of GPU {}", device.identity.uuid));
                continue;
            }
            merged.push(id.clone());
        }
    }
    out
}

/// GPUs whose driver gives no process list (AMD) get theirs from the DRM client walk, when
/// it could see every process.
fn fill_processes_from_drm_clients(devices: &mut [DeviceSnapshot], scan: &crate::sources::processes::DrmScan) {
    let Some(by_gpu) = scan else {
        return;
    };
    for device in devices.iter_mut() {
        if !crate::sources::processes::wants_drm_clients(device.identity.vendor) {
            continue;
        }
        let bus = &device.identity.pci_bus_id;
        if let Some(readings) = device.readings.as_mut().filter(|r| r.processes.is_none()) {
            // The round keeps its readings for a refresh: this GPU's are copied, then filled.
            Arc::make_mut(readings).processes = Some(by_gpu.get(bus).cloned().unwrap_or_default());
        }
    }
}

/// The kubelet's device ids matched to GPUs: a GPU UUID, a shared `UUID::N` (time slicing),
/// `nvidiaN` (NVIDIA's index), a PCI address (AMD's device plugin), or a MIG device UUID
/// (matched to its GPU and GPU instance through the MIG devices the poll read). An id that
/// matches nothing gives no series rather than a wrong GPU.
fn pods_by_uuid(assignments: &[Assignment], devices: &[DeviceSnapshot]) -> BTreeMap<String, Vec<PodHolder>> {
    use crate::model::Vendor;
    let mut out: BTreeMap<String, std::collections::BTreeSet<PodHolder>> = BTreeMap::new();
    for a in assignments {
        let id = a.device_id.split("::").next().unwrap_or("");
        let index = id.strip_prefix("nvidia").and_then(|n| n.parse::<u32>().ok());
        let bus = crate::input::pci::normalize_bus_id(id);
        let mig_instance = |d: &DeviceSnapshot| {
            let mig = d.readings.as_ref()?.mig.as_ref()?;
            mig.instances.iter().find(|i| i.uuid == id).map(|i| i.gpu_instance)
        };
        let Some((device, gpu_instance)) = devices.iter().find_map(|d| {
            let whole = d.identity.uuid == id
                || index.is_some_and(|i| d.identity.vendor == Vendor::Nvidia && d.identity.index == i)
                || bus.as_deref() == Some(d.identity.pci_bus_id.as_str());
            if whole {
                Some((d, None))
            } else {
                mig_instance(d).map(|gi| (d, Some(gi)))
            }
        }) else {
            continue;
        };
        let holder = PodHolder {
            namespace: a.namespace.clone(),
            pod: a.pod.clone(),
            container: a.container.clone(),
            gpu_instance,
        };
        // A set: a GPU with many holders once cost time quadratic in their number.
        out.entry(device.identity.uuid.clone()).or_default().insert(holder);
    }
    out.into_iter()
        .map(|(uuid, holders)| (uuid, holders.into_iter().collect()))
        .collect()
}

/// What was published last.
struct Published {
    round: Arc<RoundPart>,
    /// The sources' versions it was put together from.
    versions: Versions,
    /// The job map's version whose overflow was last counted: a map is counted once, not at
    /// every publish.
    jobs_counted: Option<u64>,
    /// The health stage's memory across rounds and snapshots: error rates, slowdowns,
    /// clock-event starts, debounce and hold.
    health: HealthMemory,
}

/// Puts snapshots together and publishes them into the store.
pub(crate) struct Publisher {
    store: Arc<Store>,
    sources: Sources,
    settings: Arc<SharedSettings>,
    /// Held while a snapshot is put together (no I/O inside), so a round and a refresh never
    /// interleave.
    published: Mutex<Published>,
    /// The node's host name, read once.
    hostname: String,
}

impl Publisher {
    pub(crate) fn new(store: Arc<Store>, sources: Sources, settings: Arc<SharedSettings>) -> Publisher {
        let hostname = crate::input::hostname();
        Publisher {
            store,
            sources,
            settings,
            published: Mutex::new(Published {
                round: Arc::new(RoundPart::default()),
                versions: Versions::default(),
                jobs_counted: None,
                health: HealthMemory::default(),
            }),
            hostname,
        }
    }

    pub(crate) fn sources(&self) -> &Sources {
        &self.sources
    }

    /// Where the poller hands its rounds (it holds no publisher): each is published, and the
    /// verdict's counts after it are the answer.
    pub(crate) fn round_sink(self: &Arc<Self>) -> crate::sources::round::RoundSink {
        let publisher = self.clone();
        Box::new(move |round| {
            publisher.publish_round(round);
            let snapshot = publisher.store.latest();
            (!snapshot.devices.is_empty()).then(|| snapshot.health_counts())
        })
    }

    /// Publishes a poll round's part with the sources' latest values.
    pub(crate) fn publish_round(&self, round: RoundPart) {
        self.sources
            .xids
            .set_gpus(round.devices.iter().map(|d| d.identity.pci_bus_id.as_str()));
        let clears_version = self.sources.service.version();
        let clears = self.sources.service.get().clears.clone();
        let mut published = self.published.lock().unwrap_or_else(PoisonError::into_inner);
        published.round = Arc::new(round);
        // The snapshot carries the clears its health was judged with: an operator's clear
        // that lands mid-round waits for the next round, and its answer knows which it saw.
        let snapshot = self.assemble(&mut published, Some((clears_version, clears)));
        self.store.publish(snapshot);
    }

    /// Publishes again when a source's version moved since the last snapshot; true when it
    /// did. Cheap when nothing changed (a few atomic loads).
    pub(crate) fn refresh_if_changed(&self) -> bool {
        let mut published = self.published.lock().unwrap_or_else(PoisonError::into_inner);
        if self.sources.versions() == published.versions {
            return false;
        }
        let snapshot = self.assemble(&mut published, None);
        self.store.replace(snapshot);
        true
    }

    /// `round_clears`: the clears (and their version) the round's health was noted with, used
    /// for the whole snapshot; `None` reads the latest.
    fn assemble(&self, published: &mut Published, round_clears: Option<(u64, Arc<Clears>)>) -> Snapshot {
        let round_clears_given = round_clears.is_some();
        let mut inputs = self.sources.read();
        if let Some((version, clears)) = round_clears
            && !Arc::ptr_eq(&clears, &inputs.service.clears)
        {
            // A clear newer than the round's is left to the refresher (the service state's
            // version moved): this snapshot has the round's clears and the state's version
            // then, so the refresher publishes the newer clear after it. A validation the
            // newer clear started may show first; it only holds the GPU out longer.
            inputs.versions.service = version;
            inputs.service = Arc::new(crate::lifecycle::ServiceState {
                clears,
                ..(*inputs.service).clone()
            });
        }
        let settings = self.settings.current();
        let config = &settings.config;
        let options = Options::from_config(config, &self.hostname);
        let mut skips = Skips::new(Input::JobMapping);
        let generation = self.store.latest().generation + 1;
        let mut snapshot = assemble(&published.round, &inputs, &options, generation, &mut skips);
        // The health stage, once: a round's history, the rules, the operator's, the debounce.
        published.health.judge(
            &mut snapshot,
            &crate::health::memory::Judging {
                config,
                new_round: round_clears_given,
                nics_version: inputs.versions.nics,
                now: std::time::Instant::now(),
            },
        );
        let jobs_version = inputs.versions.jobs;
        if published.jobs_counted == Some(jobs_version) {
            // This job map's overflow is counted already.
            skips.forget();
        }
        published.jobs_counted = Some(jobs_version);
        published.versions = inputs.versions;
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceReadings, GpuProcess, PciGpu, Vendor};

    fn gpu(index: u32, vendor: Vendor, bus: &str) -> DeviceSnapshot {
        DeviceSnapshot::for_test(index, vendor, bus, DeviceReadings::default())
    }

    fn round() -> RoundPart {
        RoundPart {
            devices: vec![
                gpu(0, Vendor::Nvidia, "0000:19:00.0"),
                gpu(1, Vendor::Nvidia, "0000:3b:00.0"),
                gpu(0, Vendor::Amd, "0000:c1:00.0"),
            ],
            ..Default::default()
        }
    }

    /// Put together and judged, as the publisher does it.
    fn assemble_plain(round: &RoundPart, inputs: &Inputs) -> Snapshot {
        let options = Options {
            hostname: "node-1".into(),
            ..Default::default()
        };
        let mut snapshot = assemble(round, inputs, &options, 7, &mut Skips::new(Input::JobMapping));
        let config = crate::config::Config::default();
        HealthMemory::default().judge(
            &mut snapshot,
            &crate::health::memory::Judging {
                config: &config,
                new_round: true,
                nics_version: 0,
                now: std::time::Instant::now(),
            },
        );
        snapshot
    }

    #[test]
    fn a_snapshot_is_the_round_and_the_sources_put_together_without_a_daemon() {
        let round = round();
        let mut jobs = crate::sources::jobs::JobMap::new();
        // By NVIDIA index (dcgm-exporter's layout) and by UUID: GPU 1 gets both, once each.
        jobs.insert(GpuKey::Index(1), vec!["100".into(), "101".into()]);
        jobs.insert(GpuKey::Uuid("GPU-1".into()), vec!["101".into(), "102".into()]);
        jobs.insert(GpuKey::Uuid("GPU-unknown".into()), vec!["999".into()]);
        let pods = crate::attribution::kubelet::PodSnapshot {
            kubelet_up: Some(true),
            assignments: vec![
                Assignment {
                    namespace: "ml".into(),
                    pod: "trainer".into(),
                    container: "main".into(),
                    device_id: "nvidia0".into(),
                },
                Assignment {
                    namespace: "ml".into(),
                    pod: "amd-job".into(),
                    container: "main".into(),
                    device_id: "0000:c1:00.0".into(),
                },
            ],
        };
        let process = GpuProcess {
            pid: 42,
            used_memory_bytes: Some(1 << 30),
            ..Default::default()
        };
        let inputs = Inputs {
            jobs: Arc::new(jobs),
            pods: Arc::new(pods),
            pci: Arc::new(vec![PciGpu {
                vendor: "nvidia",
                pci_bus_id: "0000:5d:00.0".into(),
                driver: Some("nvidia".into()),
            }]),
            drm_clients: Arc::new(Some(BTreeMap::from([("0000:c1:00.0".to_string(), vec![process])]))),
            ..Default::default()
        };
        let snapshot = assemble_plain(&round, &inputs);

        assert_eq!(snapshot.generation, 7);
        assert_eq!(snapshot.hostname, "node-1");
        assert_eq!(
            snapshot.jobs.get("GPU-1"),
            Some(&vec!["100".to_string(), "101".into(), "102".into()])
        );
        assert_eq!(snapshot.jobs.len(), 1, "a file for no GPU of the node gives nothing");
        let pods_of = |uuid: &str| snapshot.pods.get(uuid).map(|p| p[0].pod.clone());
        assert_eq!(pods_of("GPU-0").as_deref(), Some("trainer"));
        assert_eq!(snapshot.kubelet_up, Some(true));
        // The AMD GPU takes its processes from the DRM clients; the NVIDIA ones keep theirs
        // (none read here), never a made-up empty list.
        let processes = |i: usize| snapshot.devices[i].readings.as_ref().and_then(|r| r.processes.clone());
        assert_eq!(processes(2).map(|p| p.len()), Some(1));
        assert_eq!(processes(0), None);
        // A GPU on the bus that no backend shows is a node finding.
        assert!(
            snapshot
                .node_findings
                .iter()
                .any(|f| f.message.contains("0000:5d:00.0")),
            "{:?}",
            snapshot.node_findings
        );
        assert_eq!(pods_of("AMD-0").as_deref(), Some("amd-job"));
    }

    #[test]
    fn a_failed_drm_walk_leaves_the_amd_gpu_without_a_process_list() {
        let snapshot = assemble_plain(&round(), &Inputs::default());
        assert!(snapshot.devices[2].readings.as_ref().unwrap().processes.is_none());
    }

    #[test]
    fn more_jobs_than_a_gpu_carries_are_cut_and_reported_as_skipped() {
        let mut jobs = crate::sources::jobs::JobMap::new();
        let ids = |from: usize| (from..from + jobs::MAX_JOBS_PER_GPU).map(|n| n.to_string()).collect();
        jobs.insert(GpuKey::Index(0), ids(0));
        jobs.insert(GpuKey::Uuid("GPU-0".into()), ids(1000));
        let inputs = Inputs {
            jobs: Arc::new(jobs),
            ..Default::default()
        };
        let mut skips = Skips::new(Input::JobMapping);
        let snapshot = assemble(&round(), &inputs, &Options::default(), 1, &mut skips);
        assert_eq!(snapshot.jobs["GPU-0"].len(), jobs::MAX_JOBS_PER_GPU);
        assert!(!skips.is_empty());
        skips.forget();
    }
}
