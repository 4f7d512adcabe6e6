//! The vendor-neutral picture of a GPU that every backend produces and every renderer reads.
//!
//! A backend turns vendor calls into a [`DeviceReadings`]; the poller wraps it in a
//! [`DeviceSnapshot`] with the device's identity and the time of its last good poll; the
//! store keeps one [`Snapshot`] for the whole node and swaps it whole. A reading the device
//! does not support is `None` (or absent from a list), never a made-up zero, so renderers
//! leave it out.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `activity.rs` | What the GPU's performance monitors (NVIDIA GPM, Hopper and newer) say it did between two GPM samples (`poll.gpm_interval` apart): how busy its engines,... |
//! | `clock_events.rs` | Clock-event (throttle) reasons: NVML's bit mask, amdgpu's ASIC-independent throttler bits, and the label values the metrics use |
//! | `collective.rs` | The all-reduce across the node's GPUs as the daemon keeps it (docs/probe.md, "The GPUs together"): each run's GPUs, the path between them, what it measured... |
//! | `health.rs` | The health verdict of one GPU and the findings behind it |
//! | `label.rs` | Closed sets of label values: enums whose variants each carry the one string the wire uses for them (a metric's label value, a JSON key or value, a CLI word) |
//! | `links.rs` | The GPU's links to other GPUs: NVLink (per link: state, error counters, bytes moved) and, on NVSwitch systems, whether the GPU has joined the NVLink fabric |
//! | `mig.rs` | Multi-Instance GPU: whether a GPU is partitioned, and its GPU instances |
//! | `nic.rs` | The node's network ports as /metrics and the health rules see them: the InfiniBand and RoCE ports of its RDMA devices (`/sys/class/infiniband`, read by... |
//! | `probe.rs` | Probe results as the rest of the daemon sees them: the tests, their figures, and the latest report per GPU |
//! | `recent.rs` | "How many within the last N minutes": the times of counted events, oldest first, bounded, for dcgm-exporter's `*_COUNT` families (XIDs in the XID store,... |
//! | `remediation.rs` | What automatic remediation (`remediation.mode: auto`, docs/health.md "Remediation") did and holds: each GPU reset it ran, with its output, exit and... |
//! | `scheduler.rs` | What the scheduler's side says of this node: the Slurm health check reports its fleet drain guard's latest decision and the node as Slurm shows it (drained,... |
//! | `sensors.rs` | Which temperature sensor and which clock domain a reading is of: closed sets, each value the one string the wire uses (the `sensor` label of... |
//! | `sink.rs` | Each event sink's delivery as /metrics shows it (journal/sinks/mod.rs keeps it) |
//! | `xid.rs` | XID counts as the renderers and the health rules read them, by PCI bus id |
//! <!-- /files -->

pub(crate) mod activity;
pub(crate) mod clock_events;
pub(crate) mod collective;
pub mod health;
pub(crate) mod label;
pub(crate) mod links;
pub(crate) mod mig;
pub(crate) mod nic;
pub(crate) mod probe;
pub(crate) mod recent;
pub(crate) mod remediation;
pub mod scheduler;
pub(crate) mod sensors;
pub(crate) mod sink;
pub(crate) mod xid;

pub use sensors::{ClockDomain, Sensor};

use crate::model::clock_events::ClockReason;
use crate::model::label::{Label, label_enum};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::SystemTime;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
}

impl Vendor {
    pub fn label(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
        }
    }
}

/// What identifies a GPU and does not change while it is in the node.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceIdentity {
    pub index: u32,
    pub uuid: String,
    pub vendor: Vendor,
    pub name: String,
    /// Lower-case, four-digit domain: `0000:19:00.0`, the form sysfs and the kernel log use.
    pub pci_bus_id: String,
    pub driver_version: String,
    pub serial: Option<String>,
    /// Firmware and board versions, for the journal's inventory and an RMA report.
    pub inventory: Inventory,
}

/// Versions of a board's firmware and parts; each absent where the GPU or driver does not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Inventory {
    /// `nvmlDeviceGetVbiosVersion`; amdgpu's `vbios_version`.
    pub vbios: Option<String>,
    /// `nvmlDeviceGetBoardPartNumber`.
    pub board_part_number: Option<String>,
    /// `nvmlDeviceGetInforomImageVersion`.
    pub inforom_image: Option<String>,
}

pub use clock_events::{ClockEvent, ClockEventStarts};

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pcie {
    pub generation: Option<u32>,
    pub generation_max: Option<u32>,
    pub width: Option<u32>,
    pub width_max: Option<u32>,
    pub replay_errors: Option<u64>,
}

impl Pcie {
    /// True when the link trained narrower than the device can go: a reseat or a riser
    /// problem, and a bandwidth loss. Generation is not compared, because idle GPUs lower
    /// their link speed on purpose to save power.
    pub fn width_degraded(&self) -> Option<bool> {
        Some(self.width? < self.width_max?)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EccType {
    Corrected,
    Uncorrected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EccScope {
    Volatile,
    Aggregate,
}

impl EccType {
    pub fn label(self) -> &'static str {
        match self {
            EccType::Corrected => "corrected",
            EccType::Uncorrected => "uncorrected",
        }
    }
}

impl EccScope {
    pub fn label(self) -> &'static str {
        match self {
            EccScope::Volatile => "volatile",
            EccScope::Aggregate => "aggregate",
        }
    }
}

/// What the driver says the GPU needs to recover (the NVIDIA driver's GPU recovery action,
/// field 230): after an XID that leaves the GPU unusable, the driver, not a table of XIDs,
/// knows whether a GPU reset is enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    None,
    GpuReset,
    NodeReboot,
    /// Stop the jobs that use peer-to-peer (NVLink) traffic, then it clears by itself.
    DrainP2p,
    /// Drain the GPU's jobs, then reset it.
    DrainAndReset,
}

impl RecoveryAction {
    /// Every action, in the driver's order: the series of `gpu_recovery_action`.
    pub const ALL: [RecoveryAction; 5] = [
        RecoveryAction::None,
        RecoveryAction::GpuReset,
        RecoveryAction::NodeReboot,
        RecoveryAction::DrainP2p,
        RecoveryAction::DrainAndReset,
    ];

    /// The driver's value; `None` for a value this build does not know (a newer driver's).
    pub fn from_code(value: u64) -> Option<RecoveryAction> {
        RecoveryAction::ALL.get(usize::try_from(value).ok()?).copied()
    }

    pub fn label(self) -> &'static str {
        match self {
            RecoveryAction::None => "none",
            RecoveryAction::GpuReset => "gpu_reset",
            RecoveryAction::NodeReboot => "node_reboot",
            RecoveryAction::DrainP2p => "drain_p2p",
            RecoveryAction::DrainAndReset => "drain_and_reset",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EccCount {
    #[serde(rename = "type")]
    pub error_type: EccType,
    pub scope: EccScope,
    pub count: u64,
}

impl EccCount {
    /// Corrected and uncorrected counts since the driver loaded: what the AMD backends have
    /// (RAS counters summed over the blocks).
    pub fn volatile_pair(corrected: u64, uncorrected: u64) -> Vec<EccCount> {
        [(EccType::Corrected, corrected), (EccType::Uncorrected, uncorrected)]
            .into_iter()
            .map(|(error_type, count)| EccCount {
                error_type,
                scope: EccScope::Volatile,
                count,
            })
            .collect()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RemappedRows {
    pub correctable: Option<u64>,
    pub uncorrectable: Option<u64>,
    pub pending: Option<bool>,
    pub failed: Option<bool>,
}

/// Everything one poll read from one device. Lists hold only what the device answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceReadings {
    /// (sensor, celsius): gpu, memory (NVIDIA); edge, junction, hbm (AMD).
    #[serde(serialize_with = "pairs_as_map")]
    pub temperatures: Vec<(Sensor, f64)>,
    /// (threshold, celsius): slowdown, shutdown, gpu_max, memory_max.
    #[serde(serialize_with = "pairs_as_map")]
    pub temperature_thresholds: Vec<(Threshold, f64)>,
    pub clock_events: Vec<ClockEvent>,
    /// (reason, seconds): the driver's own cumulative time in each reason.
    #[serde(serialize_with = "pairs_as_map")]
    pub clock_event_seconds: Vec<(ClockReason, f64)>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub energy_joules: Option<f64>,
    /// (clock, hertz): sm, memory, graphics.
    #[serde(serialize_with = "pairs_as_map")]
    pub clocks_hertz: Vec<(ClockDomain, f64)>,
    /// The highest clock each domain (sm, memory, graphics) can run at, as the board reports
    /// it; a domain the GPU does not report is left out.
    pub clocks_max_hertz: Vec<(ClockDomain, f64)>,
    pub utilization_ratio: Option<f64>,
    /// Fraction of time the memory controller was busy reading or writing.
    pub memory_copy_utilization_ratio: Option<f64>,
    /// Fraction of the last sample period the video encoder (NVENC) was busy, where the
    /// driver reports it.
    pub encoder_utilization_ratio: Option<f64>,
    /// Fraction of the last sample period the video decoder (NVDEC) was busy.
    pub decoder_utilization_ratio: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// Free device memory, as the driver counts it (total minus used minus reserved).
    pub memory_free_bytes: Option<u64>,
    /// Device memory the driver keeps for itself (NVML v2 memory info).
    pub memory_reserved_bytes: Option<u64>,
    pub pcie: Pcie,
    pub ecc_enabled: Option<bool>,
    pub ecc_errors: Vec<EccCount>,
    /// AMD XGMI (GPU-to-GPU link) errors, corrected and uncorrected, since the driver loaded;
    /// empty where the GPU has no XGMI RAS block.
    pub xgmi_errors: Vec<EccCount>,
    pub remapped_rows: RemappedRows,
    pub persistence_mode: Option<bool>,
    /// In a vGPU guest, whether it holds its licence (an unlicensed vGPU runs degraded once
    /// the grace period ends); `None` where the GPU needs none (bare metal, passthrough).
    pub vgpu_licensed: Option<bool>,
    /// What the driver says the GPU needs to recover (slow tier); `None` where the driver
    /// does not report it (before R550) or answers a value this build does not know.
    pub recovery_action: Option<RecoveryAction>,
    /// The compute processes on the GPU (a CUDA context each); `None` where the driver does
    /// not say.
    pub processes: Option<Vec<GpuProcess>>,
    /// 0 (P0, fastest) to 15 (P15, slowest).
    pub performance_state: Option<u32>,
    pub fan_speed_ratio: Option<f64>,
    /// GPM activity over the last `poll.gpm_interval` (Hopper and newer); `None` until the
    /// second GPM sample and where unsupported.
    pub activity: Option<activity::Activity>,
    /// NVLinks; `None` where the board has none. Shared, not copied: read in the topology
    /// tier and carried over by every poll between (18 links of two counter lists each on an
    /// H100 SXM).
    pub nvlinks: Option<std::sync::Arc<links::NvLinks>>,
    /// NVLink fabric registration (NVSwitch systems); `None` where not applicable.
    pub fabric: Option<links::Fabric>,
    /// Peer-to-peer over NVLink to each other GPU: (peer's index, NVML's `nvmlGpuP2PStatus_t`,
    /// 0 for OK). Empty on a node of one GPU and where the driver does not say.
    pub nvlink_p2p: Vec<(u32, u32)>,
    /// MIG mode and instances; `None` where the GPU has no MIG.
    pub mig: Option<mig::Mig>,
}

impl DeviceReadings {
    pub fn temperature(&self, sensor: Sensor) -> Option<f64> {
        lookup(&self.temperatures, sensor)
    }
    /// The die temperature the slowdown threshold is about: `gpu` on NVIDIA, `junction`
    /// (the hotspot) on AMD.
    pub fn die_temperature(&self) -> Option<f64> {
        self.temperature(Sensor::Gpu)
            .or_else(|| self.temperature(Sensor::Junction))
    }
    pub fn threshold(&self, threshold: Threshold) -> Option<f64> {
        lookup(&self.temperature_thresholds, threshold)
    }
    pub fn clock(&self, clock: ClockDomain) -> Option<f64> {
        lookup(&self.clocks_hertz, clock)
    }
    pub fn clock_event_active(&self, reason: ClockReason) -> bool {
        self.clock_events.iter().any(|e| e.reason == reason && e.active)
    }
    pub fn ecc_count(&self, error_type: EccType, scope: EccScope) -> Option<u64> {
        self.ecc_errors
            .iter()
            .find(|e| e.error_type == error_type && e.scope == scope)
            .map(|e| e.count)
    }
}

/// One compute process on a GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// Device memory it uses; `None` where the driver does not say (some vGPU and MIG setups).
    pub used_memory_bytes: Option<u64>,
    /// Its name (/proc/PID/comm) and container id (from /proc/PID/cgroup), filled in by the
    /// publisher only when per-process series are on.
    pub name: Option<String>,
    pub container_id: Option<String>,
    /// Fractions of the interval since the previous poll in which its kernels ran on the SMs
    /// and it read or wrote device memory (NVML's per-process samples, read only when
    /// per-process series are on); `None` where the driver does not sample processes.
    pub sm_utilization_ratio: Option<f64>,
    pub memory_utilization_ratio: Option<f64>,
    /// The MIG GPU instance it runs in, on a GPU in MIG mode.
    pub gpu_instance: Option<u32>,
    /// Whether it gets series of its own (per-process series on, and within
    /// `processes.max_per_gpu`, the largest users of memory first).
    pub listed: bool,
}

/// Writes (name, value) pairs as a JSON object, which is what a reader of `check --json` wants.
pub(crate) fn pairs_as_map<S: serde::Serializer, K: Label, V: Serialize>(
    pairs: &[(K, V)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        map.serialize_entry(k.label(), v)?;
    }
    map.end()
}

fn lookup<K: PartialEq + Copy>(pairs: &[(K, f64)], key: K) -> Option<f64> {
    pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

label_enum! {
    /// A temperature threshold the GPU reports: the `threshold` label of
    /// `gpu_temperature_threshold_celsius`.
    pub enum Threshold {
        /// The die temperature at which the GPU slows itself down (AMD: junction critical).
        Slowdown => "slowdown",
        /// The temperature at which it shuts down (AMD: junction emergency).
        Shutdown => "shutdown",
        /// The highest die temperature it may run at.
        GpuMax => "gpu_max",
        /// The highest memory (HBM) temperature (AMD: memory critical).
        MemoryMax => "memory_max",
    }
}

/// One device as the latest poll left it.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceSnapshot {
    /// Shared, not copied: it is the same every round, and each round's snapshot (and a
    /// refresh of it) names every GPU.
    pub identity: std::sync::Arc<DeviceIdentity>,
    /// True when the latest poll reached the device within its deadline.
    pub up: bool,
    /// True when the driver said the GPU is lost (fallen off the bus), as opposed to a poll
    /// that merely did not finish within its deadline.
    pub lost: bool,
    #[serde(serialize_with = "serialize_time")]
    pub last_good_poll: Option<SystemTime>,
    /// The readings of the latest poll; `None` when the device did not answer in time, so a
    /// dashboard shows a gap rather than a frozen value.
    /// Shared, not copied, between the round that read them, the snapshot and a refresh that
    /// puts the snapshot together again from the same round.
    pub readings: Option<std::sync::Arc<DeviceReadings>>,
    /// What the health stage remembers of this GPU across rounds (`health::memory`), written
    /// into each round's snapshot; the poll loop leaves it empty.
    #[serde(skip)]
    pub history: health::GpuHistory,
    /// The verdict over everything the snapshot knows about this GPU (readings, XIDs, the
    /// last probe), computed once when the snapshot is put together.
    #[serde(skip)]
    pub health: health::DeviceHealth,
}

#[cfg(test)]
impl DeviceSnapshot {
    /// A GPU for unit tests, answering with `readings`: uuid `GPU-N` (`AMD-N` for AMD).
    pub(crate) fn for_test(index: u32, vendor: Vendor, pci_bus_id: &str, readings: DeviceReadings) -> DeviceSnapshot {
        DeviceSnapshot {
            identity: std::sync::Arc::new(DeviceIdentity {
                index,
                uuid: match vendor {
                    Vendor::Amd => format!("AMD-{index}"),
                    _ => format!("GPU-{index}"),
                },
                vendor,
                name: "test".into(),
                pci_bus_id: pci_bus_id.into(),
                driver_version: "1".into(),
                serial: None,
                inventory: Default::default(),
            }),
            up: true,
            lost: false,
            last_good_poll: None,
            readings: Some(std::sync::Arc::new(readings)),
            history: Default::default(),
            health: Default::default(),
        }
    }
}

impl DeviceSnapshot {
    /// A GPU that only carries findings, for the debounce of `gpuwarden rules test`'s
    /// scenarios (whose readings are the test's, not a device's).
    pub fn stand_in(index: u32) -> DeviceSnapshot {
        DeviceSnapshot {
            identity: std::sync::Arc::new(DeviceIdentity {
                index,
                uuid: format!("GPU-{index}"),
                vendor: Vendor::Nvidia,
                name: "rules test".into(),
                pci_bus_id: String::new(),
                driver_version: String::new(),
                serial: None,
                inventory: Default::default(),
            }),
            up: true,
            lost: false,
            last_good_poll: None,
            readings: None,
            history: Default::default(),
            health: Default::default(),
        }
    }

    /// The readings of a GPU that answered its latest poll; `None` for one that did not (the
    /// one place that says readings count only with `up`).
    pub fn answered(&self) -> Option<&DeviceReadings> {
        counted(&self.readings, self.up)
    }

    /// [`Self::answered`]'s readings beside the history the health stage writes from them.
    pub fn answered_with_history(&mut self) -> Option<(&DeviceReadings, &mut health::GpuHistory)> {
        let readings = counted(&self.readings, self.up)?;
        Some((readings, &mut self.history))
    }
}

/// A poll's readings count only when the GPU answered it.
fn counted(readings: &Option<std::sync::Arc<DeviceReadings>>, up: bool) -> Option<&DeviceReadings> {
    readings.as_deref().filter(|_| up)
}

/// A time as Unix seconds in JSON.
pub fn serialize_system_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(unix_seconds(*t))
}

fn serialize_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_some(&unix_seconds(*t)),
        None => s.serialize_none(),
    }
}

/// The wall clock now, in Unix seconds: the one clock the journal, remediation and the rules
/// stamp with (a budget within a boot counts on the boot's clock, service::clock).
pub fn unix_now() -> f64 {
    unix_seconds(SystemTime::now())
}

pub fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// How a person names the GPU at PCI address `bus`: "GPU 3", or "GPU at 0000:19:00.0" when no
/// GPU of `devices` is there (a port's neighbour the driver does not show).
pub fn gpu_at(devices: &[DeviceSnapshot], bus: &str) -> String {
    match devices.iter().find(|d| d.identity.pci_bus_id == bus) {
        Some(d) => format!("GPU {}", d.identity.index),
        None => format!("GPU at {bus}"),
    }
}

/// Unix seconds as `2026-11-24T10:00:00Z`.
pub fn utc_seconds(at: f64) -> String {
    humantime::format_rfc3339_seconds(from_unix_seconds(at)).to_string()
}

/// Unix seconds as a time; a negative, NaN or out-of-range value is the epoch.
pub fn from_unix_seconds(seconds: f64) -> SystemTime {
    std::time::Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|d| SystemTime::UNIX_EPOCH.checked_add(d))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A cumulative histogram of poll durations (seconds), Prometheus style.
#[derive(Debug, Clone, PartialEq)]
pub struct DurationHistogram {
    pub bounds: &'static [f64],
    /// One count per bound, not yet cumulative.
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl DurationHistogram {
    /// NVML calls take around a millisecond each and a poll makes a few dozen.
    pub const BOUNDS: &'static [f64] = &[
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];

    pub fn new() -> Self {
        DurationHistogram {
            bounds: Self::BOUNDS,
            counts: vec![0; Self::BOUNDS.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, seconds: f64) {
        if let Some(slot) = self.bounds.iter().position(|b| seconds <= *b) {
            self.counts[slot] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// (upper bound, count in that bucket alone) pairs, ending with +Inf: what
    /// prometheus-client's encoder wants (it accumulates them itself).
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        let finite: u64 = self.counts.iter().sum();
        let mut out: Vec<(f64, u64)> = self.bounds.iter().copied().zip(self.counts.iter().copied()).collect();
        out.push((f64::INFINITY, self.count - finite));
        out
    }
}

impl Default for DurationHistogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The node's health in numbers: GPUs, how many are unhealthy or degraded, GPUs missing from
/// the PCI bus, network ports with findings. Shown as systemd's STATUS= line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthCounts {
    pub gpus: usize,
    pub unhealthy: usize,
    pub degraded: usize,
    pub missing: usize,
    pub ports_with_findings: usize,
}

impl std::fmt::Display for HealthCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} GPU(s): {} unhealthy, {} degraded",
            self.gpus, self.unhealthy, self.degraded
        )?;
        if self.missing > 0 {
            write!(f, ", {} missing", self.missing)?;
        }
        if self.ports_with_findings > 0 {
            write!(f, ", {} network port(s) with findings", self.ports_with_findings)?;
        }
        Ok(())
    }
}

/// The daemon's view of one backend (a vendor library).
#[derive(Debug, Clone, Default)]
pub struct BackendStatus {
    pub up: bool,
    /// Why it is down, in words, for the status page.
    pub note: Option<&'static str>,
    /// Its vendor is not on this node (see `backend::BackendState::absent`): not shown as down.
    pub absent: bool,
    pub poll_duration: DurationHistogram,
    /// Time spent inside vendor calls, summed over all polls: what the polls' own time
    /// (`poll_duration`) cannot go below. The difference is gpuwarden's own work.
    pub call_seconds: f64,
    /// `call_seconds` by call name (NVML); backends that do not time calls one by one put
    /// their whole time under "all".
    pub call_seconds_by_call: ByCall<f64>,
    /// Failed calls by call name; NotSupported is not a failure.
    pub errors: ByCall<u64>,
}

/// Totals by call name, in name order. A sorted list rather than a map: the backends' status
/// is copied into every round's snapshot, and a list is one allocation where a map's nodes
/// are one each.
#[derive(Debug, Clone, PartialEq)]
pub struct ByCall<T>(Vec<(&'static str, T)>);

impl<T> Default for ByCall<T> {
    fn default() -> Self {
        ByCall(Vec::new())
    }
}

impl<T: Copy + std::ops::AddAssign> ByCall<T> {
    /// Adds `amount` to `call`'s total (a new call starts at `amount`).
    pub fn add(&mut self, call: &'static str, amount: T) {
        match self.0.binary_search_by(|(name, _)| name.cmp(&call)) {
            Ok(at) => self.0[at].1 += amount,
            Err(at) => self.0.insert(at, (call, amount)),
        }
    }

    /// Each call and its total, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, T)> + '_ {
        self.0.iter().copied()
    }
}

/// A GPU on the PCI bus, as sysfs lists it: whatever the driver made of it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct PciGpu {
    /// `nvidia` or `amd`, as the `vendor` label writes it.
    pub vendor: &'static str,
    pub pci_bus_id: String,
    /// The bound driver (`nvidia`, `amdgpu`), or None when no driver took it.
    pub driver: Option<String>,
}

/// A GPU's PCIe Advanced Error Reporting totals since boot, as the kernel counts them
/// (sysfs `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`); each `None` where it
/// shows none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PcieAer {
    pub correctable: Option<u64>,
    pub nonfatal: Option<u64>,
    pub fatal: Option<u64>,
}

/// AER totals by PCI address (`0000:3b:00.0`), of the GPUs that have any.
pub type PcieAerScan = BTreeMap<String, PcieAer>;

/// A container holding a GPU, or one MIG device of it, as the kubelet says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodHolder {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// The MIG GPU instance it holds; `None` for a whole GPU (or a time-sliced share of one).
    pub gpu_instance: Option<u32>,
}

/// What an attempt to turn persistence mode on came to; counted by result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PersistenceOutcome {
    Enabled,
    NotPermitted,
    Failed,
}

impl PersistenceOutcome {
    pub fn label(self) -> &'static str {
        match self {
            PersistenceOutcome::Enabled => "enabled",
            PersistenceOutcome::NotPermitted => "not_permitted",
            PersistenceOutcome::Failed => "failed",
        }
    }
}

/// Persistence-mode enable attempts by device uuid and result.
pub type PersistenceAttempts = BTreeMap<(String, PersistenceOutcome), u64>;

/// The whole node at one moment. Swapped whole; never edited in place.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases with every snapshot; renderers cache their output by it.
    pub generation: u64,
    pub backends: std::sync::Arc<BTreeMap<&'static str, BackendStatus>>,
    pub devices: Vec<DeviceSnapshot>,
    pub persistence_attempts: std::sync::Arc<PersistenceAttempts>,
    /// Wall time of whole poll rounds (all GPUs, polled in parallel).
    pub round_duration: DurationHistogram,
    /// XID counts by PCI bus id, and the state of their sources.
    pub xid: xid::XidSnapshot,
    /// The thresholds the health rules were applied with.
    pub health_limits: health::Limits,
    /// The operators' clears after a repair, by GPU UUID.
    pub clears: std::sync::Arc<health::Clears>,
    /// The boards the journal knew at start: a new board at a known address is validated
    /// before the journal has recorded the swap.
    pub known_boards: std::sync::Arc<health::KnownBoards>,
    /// Boards replaced within the last day, by the new board's UUID.
    pub board_swaps: std::sync::Arc<health::BoardSwaps>,
    /// Each GPU's latest validation (a probe before return to service), by UUID.
    pub validations: std::sync::Arc<health::Validations>,
    /// The Slurm health check's latest report (its fleet drain guard); None before one came.
    pub scheduler: Option<scheduler::SchedulerReport>,
    /// What automatic remediation did and holds (`remediation.mode: auto`).
    pub remediation: std::sync::Arc<remediation::Remediations>,
    /// Scheduled probe results and counters (empty outside the daemon).
    pub probe: std::sync::Arc<probe::ProbeSnapshot>,
    /// Each event sink's delivery (`events.sinks`; empty without one).
    pub sinks: std::sync::Arc<sink::SinkStates>,
    /// Each of the operator's rules (`health.custom_rules`): running or disabled, its cost.
    pub custom_rules: std::sync::Arc<Vec<health::CustomRuleStatus>>,
    /// NVIDIA and AMD GPUs on the PCI bus (sysfs), to compare with the enumerated ones.
    pub pci_gpus: Vec<PciGpu>,
    /// Each GPU's PCIe AER totals since boot, by PCI address (`sources::pcie_aer`).
    pub pcie_aer: std::sync::Arc<PcieAerScan>,
    /// Whether nvidia-fabricmanager runs; None where it is not checked (no GPU reports an
    /// NVLink fabric, or `fabric_manager.check` is off).
    pub fabric_manager: Option<links::FabricManager>,
    /// The node's InfiniBand and RoCE ports, with what the health memory knows of each.
    pub nics: std::sync::Arc<nic::NicScan>,
    /// Pods and containers holding each GPU (or one of its MIG devices), by GPU uuid.
    pub pods: BTreeMap<String, Vec<PodHolder>>,
    /// Whether the kubelet answered its last List; None where it is not asked.
    pub kubelet_up: Option<bool>,
    /// Batch job ids per GPU uuid, from the job mapping directory (empty when off).
    pub jobs: BTreeMap<String, Vec<String>>,
    /// The node's host name, read when the daemon starts (the status page's title,
    /// dcgm-exporter's `Hostname` label).
    pub hostname: String,
    /// Findings about the node rather than one GPU (a GPU on the bus no backend shows),
    /// computed with the devices' health.
    pub node_findings: Vec<health::Finding>,
    /// What was skipped reading inputs from outside since start, as (input, reason, count)
    /// (`gpuwarden_input_skipped_total`; see input.rs).
    pub input_skipped: Vec<(&'static str, &'static str, u64)>,
    /// The health journal's state; None where it is off (`state.path: ""`) or not started.
    pub journal: Option<JournalStatus>,
}

/// The health journal's state, for its self metrics and the status page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JournalStatus {
    /// The last write (or the opening) succeeded.
    pub up: bool,
    /// Opens and transactions that failed (locked, read-only, full disk, corrupt).
    pub write_errors: u64,
    /// Rows not written because the queue or the backlog was full.
    pub dropped: u64,
    /// Rows written since start.
    pub rows_written: u64,
    /// The database's size in bytes (pages in use).
    pub bytes: u64,
}

impl Snapshot {
    /// "8 GPU(s): 0 unhealthy, 1 degraded", for systemd's STATUS= line.
    pub fn health_summary(&self) -> String {
        self.health_counts().to_string()
    }

    /// What [`Snapshot::health_summary`] says, as numbers: compared every round without
    /// writing the line (systemd's STATUS= is sent when it changes).
    pub fn health_counts(&self) -> HealthCounts {
        let count = |s: health::HealthState| self.devices.iter().filter(|d| d.health.state == s).count();
        // Ports with findings: a port's findings come one after another.
        let mut ports = 0;
        let mut last_port = None;
        for finding in self.node_findings.iter().filter(|f| f.reason.is_network()) {
            let port = finding.subject.as_deref().unwrap_or("node");
            if last_port != Some(port) {
                ports += 1;
                last_port = Some(port);
            }
        }
        HealthCounts {
            gpus: self.devices.len(),
            unhealthy: count(health::HealthState::Unhealthy),
            degraded: count(health::HealthState::Degraded),
            missing: self
                .node_findings
                .iter()
                .filter(|f| f.reason == health::RuleId::GpuMissing)
                .count(),
            ports_with_findings: ports,
        }
    }

    /// The worst state of any GPU or node finding; None with neither (a node with no GPU
    /// anywhere has no verdict).
    /// Whether a GPU on the node now awaits its validation probe (a validation kept for a board
    /// that has left the node awaits nothing).
    pub fn validation_pending(&self) -> bool {
        self.devices.iter().any(|d| {
            self.validations
                .get(&d.identity.uuid)
                .is_some_and(health::Validation::pending)
        })
    }

    /// How many times gpuwarden turned persistence mode on for the GPU `uuid` since it
    /// started. Looked up without a copy of the uuid: the journal asks for every GPU every
    /// round.
    pub fn persistence_enabled(&self, uuid: &str) -> u64 {
        self.persistence_attempts
            .iter()
            .find(|((gpu, outcome), _)| gpu == uuid && *outcome == PersistenceOutcome::Enabled)
            .map_or(0, |(_, n)| *n)
    }

    pub fn worst_health(&self) -> Option<health::HealthState> {
        self.devices
            .iter()
            .map(|d| d.health.state)
            .chain(self.node_findings.iter().map(|f| f.severity))
            .max()
    }

    /// GPUs on the PCI bus that no backend enumerated: fell off at boot, or the driver did
    /// not bind.
    pub fn missing_gpus(&self) -> impl Iterator<Item = &PciGpu> {
        self.pci_gpus
            .iter()
            .filter(|g| !self.devices.iter().any(|d| d.identity.pci_bus_id == g.pci_bus_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use health::{Finding, HealthState};

    fn node_finding(reason: &'static str, subject: Option<&str>) -> Finding {
        Finding {
            reason: crate::model::health::RuleId::from_label(reason).unwrap().into(),
            severity: HealthState::Degraded,
            message: String::new(),
            subject: subject.map(str::to_string),
        }
    }

    #[test]
    fn totals_by_call_add_up_per_call_and_list_in_name_order() {
        let mut totals = ByCall::default();
        totals.add("nvmlDeviceGetTemperature", 2u64);
        totals.add("nvmlDeviceGetClockInfo", 1);
        totals.add("nvmlDeviceGetTemperature", 3);
        totals.add("all", 7);
        assert_eq!(
            totals.iter().collect::<Vec<_>>(),
            [
                ("all", 7),
                ("nvmlDeviceGetClockInfo", 1),
                ("nvmlDeviceGetTemperature", 5)
            ]
        );
        let total = |call: &str| totals.iter().find(|(name, _)| *name == call).map(|(_, n)| n);
        assert_eq!(total("nvmlDeviceGetTemperature"), Some(5));
        assert_eq!(total("nvmlDeviceGetPowerUsage"), None);
    }

    #[test]
    fn the_status_line_counts_gpus_by_verdict_missing_gpus_and_ports_once_each() {
        let mut snapshot = Snapshot::default();
        for (i, state) in [
            HealthState::Ok,
            HealthState::Unhealthy,
            HealthState::Degraded,
            HealthState::Degraded,
        ]
        .into_iter()
        .enumerate()
        {
            let mut gpu = DeviceSnapshot::for_test(i as u32, Vendor::Nvidia, "0000:01:00.0", Default::default());
            gpu.health.state = state;
            snapshot.devices.push(gpu);
        }
        assert_eq!(snapshot.health_summary(), "4 GPU(s): 1 unhealthy, 2 degraded");
        snapshot.node_findings = vec![
            node_finding("gpu_missing", Some("0000:41:00.0")),
            // Two findings of one port are one port.
            node_finding("nic_port_down", Some("mlx5_0/1")),
            node_finding("nic_rate_low", Some("mlx5_0/1")),
            node_finding("nic_port_down", Some("mlx5_1/1")),
        ];
        assert_eq!(
            snapshot.health_summary(),
            "4 GPU(s): 1 unhealthy, 2 degraded, 1 missing, 2 network port(s) with findings"
        );
        let before = snapshot.health_counts();
        snapshot.devices[1].health.state = HealthState::Ok;
        assert_ne!(
            snapshot.health_counts(),
            before,
            "a verdict that moved changes the numbers"
        );
    }
}
