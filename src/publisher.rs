//! Putting a whole snapshot together and publishing it.
//!
//! A snapshot has parts that change at different times: the poll round's devices and
//! counters (every `poll.interval`), the XID counts (whenever the kernel log or NVML reports
//! one) and the probe results (after a probe). The publisher keeps the latest of each, puts
//! them together, computes every GPU's health verdict once for the result, and publishes it.
//! A poll round publishes; so does [`Publisher::refresh_if_changed`], which the daemon calls
//! a few times a second, so an XID shows on /metrics well within a second whatever the poll
//! interval is.

use crate::attribution::jobs::{self, GpuKey};
use crate::attribution::kubelet::{Assignment, PodState};
use crate::health;
use crate::input::{Input, Reason, Skips};
use crate::model::{BackendStatus, DeviceSnapshot, DurationHistogram, PersistenceAttempts, PodHolder, Snapshot};
use crate::probe::schedule::ProbeState;
use crate::settings::SharedSettings;
use crate::store::Store;
use crate::xid::store::XidStore;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What one poll round contributes to a snapshot.
#[derive(Debug, Clone, Default)]
pub struct RoundPart {
    pub backends: BTreeMap<&'static str, BackendStatus>,
    pub devices: Vec<DeviceSnapshot>,
    pub persistence_attempts: PersistenceAttempts,
    pub round_duration: DurationHistogram,
}

/// How often the PCI bus is looked at for GPUs no backend shows: it changes at boot and at
/// hot-plug, and each look reads a few hundred small files under /sys.
const PCI_CENSUS_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// How often the job mapping directory is read: a job starts or ends in seconds, and a
/// stale attribution for a few seconds is harmless.
const JOBS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A walk of /proc for DRM clients and when it was taken; `None` inside when the walk could
/// not see every process.
type DrmClientScan = (
    std::time::Instant,
    Option<BTreeMap<String, Vec<crate::model::GpuProcess>>>,
);

struct Latest {
    round: Arc<RoundPart>,
    pod_changes: u64,
    /// The last read of the job mapping directory, matched to GPUs (by uuid), and when it
    /// was taken.
    jobs: Option<(std::time::Instant, BTreeMap<String, Vec<String>>)>,
    /// Whether the job mapping directory could not be read last time (its warning is given).
    jobs_outage: crate::input::Outage,
    /// Per GPU uuid: the last hardware power slowdown counter total, and when a hardware
    /// power slowdown was last seen (active, or its counter grew).
    hw_slowdown: std::collections::HashMap<String, (Option<f64>, Option<std::time::Instant>)>,
    /// The last PCI census and when it was taken.
    pci: Option<(std::time::Instant, Vec<crate::model::PciGpu>)>,
    /// The last walk of /proc for DRM clients (GPUs whose driver lists no processes), by
    /// PCI bus id, and when it was taken.
    /// `None` inside: the walk could not see every process.
    drm_clients: Option<DrmClientScan>,
    /// Whether that walk failed last time (its warning is given).
    drm_outage: crate::input::Outage,
    /// The XID store's and the probe state's change counters as last published.
    xid_changes: u64,
    probe_changes: u64,
}

/// Notes, per GPU, when a hardware power slowdown was last seen: active in this round's
/// readings, or its driver counters grew since the last round that had them.
fn track_hw_slowdown(
    seen: &mut std::collections::HashMap<String, (Option<f64>, Option<std::time::Instant>)>,
    devices: &mut [DeviceSnapshot],
) {
    use crate::clock_events::HW_POWER_REASONS;
    for device in devices {
        let entry = seen.entry(device.identity.uuid.clone()).or_default();
        if let Some(r) = device.readings.as_ref().filter(|_| device.up) {
            let active = HW_POWER_REASONS.iter().any(|reason| r.clock_event_active(reason));
            let counters: Vec<f64> = r
                .clock_event_seconds
                .iter()
                .filter(|(reason, _)| HW_POWER_REASONS.contains(reason))
                .map(|(_, s)| *s)
                .collect();
            let total = (!counters.is_empty()).then(|| counters.iter().sum::<f64>());
            let grew = entry.0.zip(total).is_some_and(|(before, now)| now > before);
            if active || grew {
                entry.1 = Some(std::time::Instant::now());
            }
            if total.is_some() {
                entry.0 = total;
            }
        }
        device.hw_slowdown_seen = entry.1;
    }
}

/// The job mapping's files matched to GPUs: a number is an NVIDIA GPU's index (the layout
/// comes from dcgm-exporter; on a node with only AMD GPUs, theirs), a name a GPU's uuid. A GPU
/// with a file by index and one by uuid gets the jobs of both, each once, at most
/// [`jobs::MAX_JOBS_PER_GPU`] (the rest counted as skipped).
fn jobs_by_uuid(jobs: &BTreeMap<GpuKey, Vec<String>>, devices: &[DeviceSnapshot]) -> BTreeMap<String, Vec<String>> {
    use crate::model::Vendor;
    let has_nvidia = devices.iter().any(|d| d.identity.vendor == Vendor::Nvidia);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut skips = Skips::new(Input::JobMapping);
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

/// Marks the processes that get series of their own (the largest users of device memory
/// first, at most `max_per_gpu` per GPU) and reads their names and containers.
fn describe_processes(devices: &mut [DeviceSnapshot], settings: &crate::config::Processes) {
    use crate::attribution::processes;
    let mut skips = Skips::new(Input::Proc);
    for readings in devices.iter_mut().filter_map(|d| d.readings.as_mut()) {
        let Some(list) = readings.processes.as_mut() else {
            continue;
        };
        list.sort_by(|a, b| b.used_memory_bytes.cmp(&a.used_memory_bytes).then(a.pid.cmp(&b.pid)));
        for process in list.iter_mut().take(settings.max_per_gpu as usize) {
            process.listed = true;
            process.name = processes::name(&settings.proc_root, process.pid, &mut skips);
            process.container_id = processes::container_id(&settings.proc_root, process.pid, &mut skips);
        }
    }
}

/// GPUs whose driver gives no process list (AMD) get theirs from the DRM client statistics
/// in /proc, walked at most every `drm_clients::SCAN_EVERY` and only while such GPUs exist.
fn fill_processes_from_drm_clients(
    cache: &mut Option<DrmClientScan>,
    outage: &mut crate::input::Outage,
    devices: &mut [DeviceSnapshot],
    proc_root: &std::path::Path,
) {
    use crate::attribution::drm_clients;
    let wanting = |d: &DeviceSnapshot| d.readings.as_ref().is_some_and(|r| r.processes.is_none());
    if !devices.iter().any(wanting) {
        *cache = None;
        return;
    }
    if cache
        .as_ref()
        .is_none_or(|(at, _)| at.elapsed() >= drm_clients::SCAN_EVERY)
    {
        let scanned = drm_clients::scan(proc_root, &mut Skips::new(Input::Proc));
        match &scanned {
            Ok(_) => outage.recovered(format!(
                "the process list of GPUs whose driver keeps none (AMD) can be read from {} again",
                proc_root.display()
            )),
            Err(why) => outage.failed(format!(
                "no process list for GPUs whose driver keeps none (AMD): {why}; it needs root with \
                 CAP_SYS_PTRACE (docs/metrics.md)"
            )),
        }
        *cache = Some((std::time::Instant::now(), scanned.ok()));
    }
    let Some((_, Some(by_gpu))) = cache.as_ref() else {
        return;
    };
    for device in devices.iter_mut() {
        let bus = device.identity.pci_bus_id.clone();
        if let Some(readings) = device.readings.as_mut().filter(|r| r.processes.is_none()) {
            readings.processes = Some(by_gpu.get(&bus).cloned().unwrap_or_default());
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
        let bus = crate::pci::normalize_bus_id(id);
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

pub struct Publisher {
    store: Arc<Store>,
    xids: Arc<XidStore>,
    /// Scheduled probe results; None outside the daemon.
    probes: Option<Arc<ProbeState>>,
    settings: Arc<SharedSettings>,
    /// Held while a snapshot is put together, so a round and a refresh never interleave.
    latest: Mutex<Latest>,
    /// What the kubelet said; None outside the daemon.
    pods: Option<Arc<PodState>>,
    /// The node's host name, read once (dcgm-exporter's `Hostname` label).
    hostname: String,
}

impl Publisher {
    pub fn new(
        store: Arc<Store>,
        xids: Arc<XidStore>,
        probes: Option<Arc<ProbeState>>,
        settings: Arc<SharedSettings>,
    ) -> Publisher {
        Publisher {
            store,
            xids,
            probes,
            settings,
            latest: Mutex::new(Latest {
                round: Arc::new(RoundPart::default()),
                pod_changes: 0,
                hw_slowdown: Default::default(),
                jobs: None,
                jobs_outage: Default::default(),
                pci: None,
                drm_clients: None,
                drm_outage: Default::default(),
                xid_changes: 0,
                probe_changes: 0,
            }),
            pods: None,
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
        }
    }

    /// Takes pod attribution from the kubelet task's state.
    pub fn with_pods(mut self, pods: Arc<PodState>) -> Publisher {
        self.pods = Some(pods);
        self
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Publishes a poll round's part with the latest XIDs and probe results.
    pub fn publish_round(&self, round: RoundPart) {
        self.xids
            .set_gpus(round.devices.iter().map(|d| d.identity.pci_bus_id.as_str()));
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let mut round = round;
        track_hw_slowdown(&mut latest.hw_slowdown, &mut round.devices);
        let processes = &self.settings.current().config.processes;
        // Two fields of the guarded value at once.
        let parts = &mut *latest;
        fill_processes_from_drm_clients(
            &mut parts.drm_clients,
            &mut parts.drm_outage,
            &mut round.devices,
            &processes.proc_root,
        );
        if processes.per_process {
            describe_processes(&mut round.devices, processes);
        }
        latest.round = Arc::new(round);
        let settings = self.settings.current();
        let mapping_dir = &settings.config.hpc_jobs.mapping_dir;
        if mapping_dir.as_os_str().is_empty() {
            latest.jobs = None;
        } else if latest.jobs.as_ref().is_none_or(|(at, _)| at.elapsed() >= JOBS_EVERY) {
            // Matched to this round's GPUs once per read: GPUs come and go far less often.
            let jobs = jobs::read_logged(mapping_dir, &mut latest.jobs_outage);
            let by_uuid = jobs_by_uuid(&jobs, &latest.round.devices);
            latest.jobs = Some((std::time::Instant::now(), by_uuid));
        }
        if !settings.config.pci_census {
            latest.pci = None;
        } else if latest
            .pci
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= PCI_CENSUS_EVERY)
        {
            // `/` on a host, a fixture tree in tests.
            let root = &settings.sys_root;
            latest.pci = Some((std::time::Instant::now(), crate::pci::gpus_on_the_bus(root)));
        }
        let snapshot = self.assemble(&mut latest);
        self.store.publish(snapshot);
    }

    /// Publishes again when XIDs or probe results changed since the last snapshot; true when
    /// it did. Cheap when nothing changed (two atomic loads).
    pub fn refresh_if_changed(&self) -> bool {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let probe_changes = self.probes.as_ref().map_or(0, |p| p.changes());
        let pod_changes = self.pods.as_ref().map_or(0, |p| p.changes());
        if self.xids.changes() == latest.xid_changes
            && probe_changes == latest.probe_changes
            && pod_changes == latest.pod_changes
        {
            return false;
        }
        let snapshot = self.assemble(&mut latest);
        self.store.replace(snapshot);
        true
    }

    fn assemble(&self, latest: &mut Latest) -> Snapshot {
        // Read the counters before the data: a change that lands in between is published
        // now and once more at the next refresh, never lost.
        latest.xid_changes = self.xids.changes();
        latest.probe_changes = self.probes.as_ref().map_or(0, |p| p.changes());
        latest.pod_changes = self.pods.as_ref().map_or(0, |p| p.changes());
        let pods = self.pods.as_ref().map(|p| p.snapshot()).unwrap_or_default();
        let round = &latest.round;
        let mut snapshot = Snapshot {
            generation: self.store.latest().generation + 1,
            backends: round.backends.clone(),
            devices: round.devices.clone(),
            persistence_attempts: round.persistence_attempts.clone(),
            round_duration: round.round_duration.clone(),
            xid: self.xids.snapshot(),
            xid_critical_hold: self.settings.current().config.xid.critical_hold,
            nvlink_per_link: self.settings.current().config.nvlink.per_link,
            dcgm_compat: self.settings.current().config.compat.dcgm_exporter,
            hostname: self.hostname.clone(),
            probe: self.probes.as_ref().map(|p| p.snapshot()).unwrap_or_default(),
            pci_gpus: latest.pci.as_ref().map(|(_, gpus)| gpus.clone()).unwrap_or_default(),
            pods: pods_by_uuid(&pods.assignments, &round.devices),
            kubelet_up: pods.kubelet_up,
            jobs: latest.jobs.as_ref().map(|(_, jobs)| jobs.clone()).unwrap_or_default(),
            node_findings: Vec::new(),
            input_skipped: crate::input::skipped_totals()
                .into_iter()
                .map(|(input, reason, n)| (input.label(), reason.label(), n))
                .collect(),
        };
        health::evaluate(&mut snapshot);
        snapshot
    }
}
