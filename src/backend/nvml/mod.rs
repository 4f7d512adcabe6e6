//! NVIDIA backend: NVML through nvml-wrapper, one [`NvmlDevicePoller`] per GPU.
//!
//! NVML calls are slow (about a millisecond each on an H200, 2.6 ms for energy) and can
//! block, so each poller runs on a thread of its own (see poller.rs) and makes as few calls
//! as it can: readings that cannot change while the GPU is in the node (temperature
//! thresholds, maximum link generation and width, supported clock-event reasons) are read
//! once, and memory temperature, row remapping and the clock-event time counters come from
//! one `nvmlDeviceGetFieldValues` call.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `calls.rs` | Sorting the results of NVML calls into values, unsupported readings and failures, and timing them |
//! | `events.rs` | The NVML XID source (the only NVML calls outside the pollers, so it lives with them): an event set registered for critical-XID and double-bit-ECC events on... |
//! | `fabric.rs` | NVLink fabric registration (`nvmlDeviceGetGpuFabricInfoV`): on NVSwitch systems each GPU registers with the fabric manager at boot, and until it has, its... |
//! | `fields.rs` | `nvmlDeviceGetFieldValues` with scope ids: one driver call answers many (field, scope) pairs, such as a counter of each NVLink |
//! | `gpm.rs` | GPM (GPU performance monitoring, Hopper and newer): SM, tensor, DRAM and pipe activity and PCIe/NVLink bandwidth, computed by the driver from two samples of... |
//! | `licence.rs` | The vGPU guest's licence (`nvmlDeviceGetGridLicensableFeatures_v4`): inside a VM on a vGPU, the guest driver must check a licence out from the licence... |
//! | `lifecycle.rs` | NVML's life in the daemon: loading and initialising the library with a doubling back-off while it is missing (no driver yet), the XID event thread, and... |
//! | `mig.rs` | MIG: whether the GPU is partitioned (read every `poll.topology_interval`: it changes only with a reset), and, while it is, each MIG device's UUID, GPU and... |
//! | `nvlink.rs` | NVLink: per link its state, its rate, its error counters and the bytes it moved, in one `nvmlDeviceGetFieldValues` call (scope = link) every... |
//! | `p2p.rs` | Peer-to-peer over NVLink between this GPU and each other one (`nvmlDeviceGetP2PStatus` with the NVLink capability): what DCGM's `dcgmGetNvLinkP2PStatus`... |
//! <!-- /files -->

pub(crate) mod calls;
pub(crate) mod events;
mod fabric;
mod fields;
mod gpm;
mod licence;
pub(crate) mod lifecycle;
mod mig;
mod nvlink;
mod p2p;

use crate::backend::{DevicePoller, PersistenceOutcome, PollReport};
use crate::config;
use crate::model::Threshold;
use crate::model::clock_events::{self, ClockReason};
use crate::model::{ClockDomain, Sensor};
use crate::model::{
    DeviceIdentity, DeviceReadings, EccCount, EccScope, EccType, GpuProcess, Inventory, RemappedRows, Vendor,
};
use crate::service::cadence::Every;
use calls::CallErrors;
use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper_sys::bindings::field_id::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const BACKEND: &str = "nvml";

/// A loaded and initialised NVML. Leaked on purpose: NVML handles (devices, event sets)
/// borrow it for as long as the daemon runs, and it is created once per successful
/// initialisation, not per poll.
pub(crate) struct NvmlBackend {
    nvml: &'static Nvml,
}

impl NvmlBackend {
    /// Loads the library named in the config and initialises it. Fails cleanly (no panic)
    /// when the library or the driver is missing.
    pub(crate) fn load(config: &config::Nvml) -> Result<NvmlBackend, NvmlError> {
        let nvml = Nvml::builder().lib_path(config.library_path.as_os_str()).init()?;
        Ok(NvmlBackend {
            nvml: Box::leak(Box::new(nvml)),
        })
    }

    /// The library itself, for the XID event thread, which needs it for the daemon's lifetime.
    pub(crate) fn nvml(&self) -> &'static Nvml {
        self.nvml
    }

    pub(crate) fn driver_version(&self) -> Result<String, NvmlError> {
        self.nvml.sys_driver_version()
    }

    /// One poller per GPU the driver enumerates. A GPU whose identity cannot be read (it
    /// fell off the bus before we started) still gets a poller, so it shows as down rather
    /// than vanishing.
    pub(crate) fn device_pollers(&self, options: &PollOptions) -> Result<Vec<NvmlDevicePoller>, NvmlError> {
        let driver_version = self.driver_version().unwrap_or_default();
        let count = self.nvml.device_count()?;
        let mut pollers = Vec::with_capacity(count as usize);
        for index in 0..count {
            let device = self.nvml.device_by_index(index)?;
            let identity = read_identity(&device, index, &driver_version);
            // The other GPUs, for the NVLink peer-to-peer status of each pair. One that
            // cannot be opened now is left out, as it is from the rest of the node.
            let peers = (0..count)
                .filter(|peer| *peer != index)
                .filter_map(|peer| Some((peer, self.nvml.device_by_index(peer).ok()?)))
                .collect();
            pollers.push(NvmlDevicePoller {
                device,
                peers,
                identity,
                enable_persistence: options.enable_persistence,
                static_readings: None,
                persistence_denied: Default::default(),
                tiers: Tiers {
                    slow: Every::new(options.slow_interval),
                    costly: Every::new(options.slow_interval * COSTLY_SLOW_INTERVALS),
                    // The first GPM values a second after start, then every interval.
                    gpm: Every::new(options.gpm_interval).first_after(gpm::FIRST_INTERVAL),
                    topology: Every::new(options.topology_interval),
                },
                carried: DeviceReadings::default(),
                gpm: gpm::GpmSampler::default(),
                mig_mode: None,
                mig_devices: Vec::new(),
                mig_activity: Default::default(),
                live: options.live.clone(),
                process_samples: None,
                last_sample_micros: None,
            });
        }
        Ok(pollers)
    }
}

fn read_identity(device: &Device<'static>, index: u32, driver_version: &str) -> DeviceIdentity {
    DeviceIdentity {
        index,
        uuid: device.uuid().unwrap_or_else(|_| format!("unknown-gpu-{index}")),
        vendor: Vendor::Nvidia,
        name: device.name().unwrap_or_default(),
        pci_bus_id: device
            .pci_info()
            .map(|p| crate::input::pci::normalize_bus_id(&p.bus_id).unwrap_or_else(|| p.bus_id.to_ascii_lowercase()))
            .unwrap_or_default(),
        driver_version: driver_version.to_string(),
        serial: device.serial().ok(),
        // Read once, like the rest of the identity: they change only with a firmware update,
        // which takes a GPU reset (and a new poller).
        inventory: Inventory {
            vbios: device.vbios_version().ok(),
            board_part_number: device.board_part_number().ok(),
            inforom_image: device.info_rom_image_version().ok(),
        },
    }
}

/// The costly tier's interval in slow intervals: 30 s at the default 10 s. Energy every 10 s
/// was a fifth of the daemon's CPU on an H200 (docs/performance.md).
const COSTLY_SLOW_INTERVALS: u32 = 3;

/// How each GPU's poller works, from the settings.
#[derive(Debug, Clone)]
pub(crate) struct PollOptions {
    pub enable_persistence: bool,
    /// How often the slow tier is read (see [`Tiers`]).
    pub slow_interval: Duration,
    /// How often the NVLink counters are read (see nvlink.rs).
    pub topology_interval: Duration,
    /// How often GPM activity is computed (see gpm.rs).
    pub gpm_interval: Duration,
    /// Switches read at every poll: per-process utilisation samples (only wanted with
    /// per-process series on).
    pub live: crate::config::settings::LiveSwitches,
}

/// Readings that do not change while the GPU is in the node, read once.
#[derive(Debug, Clone, Default)]
struct StaticReadings {
    thresholds: Vec<(Threshold, f64)>,
    pcie_generation_max: Option<u32>,
    pcie_width_max: Option<u32>,
    /// The highest clock per domain, in hertz.
    clocks_max_hertz: Vec<(ClockDomain, f64)>,
    supported_clock_events: Option<u64>,
    /// Fans the board has; fanless boards (H100/H200 SXM) have none, and asking for fan 0
    /// there is an invalid argument, not "not supported".
    fan_count: u32,
    /// NVLinks the board has; 0 for none.
    nvlink_count: u32,
}

/// The tiers of one GPU's readings, by what they cost the driver (docs/performance.md has the
/// per-call costs measured on an H200): every poll (temperatures, power, clocks, utilisation,
/// memory, PCIe generation: 1 to 50 us each); every `poll.slow_interval`, 10 s (ECC 0.17 ms,
/// the replay counter 0.15 ms, the remap and clock-event counter fields 0.16 ms, persistence
/// mode 0.1 ms, the vGPU licence 0.17 ms, MIG devices, the compute processes 0.09 ms, the PCIe
/// link width 0.08 ms); every three slow intervals, 30 s, the calls above a millisecond (the
/// energy counter 2.6-4.1 ms, dcgm-exporter's collection interval for the same counter;
/// per-process utilisation samples 1.7 ms, then a mean over those 30 s); every
/// `poll.gpm_interval`, 30 s (GPM activity); every `poll.topology_interval`, 2 min (NVLink
/// states and counters, 15-40 ms for 18 links; fabric registration and MIG mode, 0.2-0.6 ms
/// each; NVLink peer-to-peer status, 0.006 ms per other GPU). A tier writes its own fields of
/// the readings in place; between its reads they carry over from the last poll (at most one
/// interval old; counters lose nothing).
#[derive(Debug, Clone)]
struct Tiers {
    slow: Every,
    costly: Every,
    gpm: Every,
    topology: Every,
}

impl Tiers {
    /// Read every tier at the next poll (the first one, and after a lost GPU comes back).
    fn reset(&mut self) {
        self.slow.reset();
        self.costly.reset();
        self.gpm.reset();
        self.topology.reset();
    }
}

pub(crate) struct NvmlDevicePoller {
    device: Device<'static>,
    /// The node's other GPUs by NVML index (NVLink peer-to-peer status, topology tier).
    peers: Vec<(u32, Device<'static>)>,
    identity: DeviceIdentity,
    enable_persistence: bool,
    /// Shared with each poll rather than copied into it.
    static_readings: Option<Arc<StaticReadings>>,
    /// Turning persistence mode on was refused: warned once, as the refusal lasts.
    persistence_denied: crate::service::logging::Outage,
    tiers: Tiers,
    /// The last poll's readings: the slower tiers' fields carry over from here.
    carried: DeviceReadings,
    gpm: gpm::GpmSampler,
    /// MIG mode (topology tier), MIG devices (slow tier) and each GPU instance's GPM activity
    /// (GPM tier), put together into `mig` at every poll.
    mig_mode: Option<mig::MigMode>,
    mig_devices: Vec<crate::model::mig::MigDevice>,
    mig_activity: std::collections::BTreeMap<u32, crate::model::activity::Activity>,
    live: crate::config::settings::LiveSwitches,
    /// Per-process utilisation from the last slow read, by pid: (SM, memory), for each
    /// process running at that read (one the driver left out was idle: 0). `None` when not
    /// read (per-process series off, or the driver does not sample processes).
    process_samples: Option<std::collections::BTreeMap<u32, (f64, f64)>>,
    /// Wall time of the last sample read in microseconds: samples are asked for from then on.
    last_sample_micros: Option<u64>,
}

/// The slow fields read with one `nvmlDeviceGetFieldValues` call, in the order of `FIELDS`.
/// (Memory temperature has a call of its own, every poll: it costs about 1 us.)
const FIELDS: [u32; 10] = [
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
    NVML_FI_DEV_REMAPPED_COR,
    NVML_FI_DEV_REMAPPED_UNC,
    NVML_FI_DEV_REMAPPED_PENDING,
    NVML_FI_DEV_REMAPPED_FAILURE,
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST,
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
];

/// The clock-event counters among `FIELDS` (nanoseconds), and the reason each counts.
/// These are what `nvidia-smi -q -d PERFORMANCE` lists as "Clocks Event Reasons Counters".
const COUNTER_FIELDS: [(u32, ClockReason); 5] = [
    (NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, ClockReason::SwPowerCap),
    (NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, ClockReason::SyncBoost),
    (
        NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
        ClockReason::SwThermalSlowdown,
    ),
    (
        NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
        ClockReason::HwThermalSlowdown,
    ),
    (
        NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
        ClockReason::HwPowerBrakeSlowdown,
    ),
];

/// The sm, memory and graphics clocks `read` answers (MHz), in hertz; a domain the GPU does
/// not report is left out. `call`: the NVML call, for its time and errors.
fn clocks_hertz(
    calls: &mut CallErrors,
    call: &'static str,
    read: impl Fn(Clock) -> Result<u32, nvml_wrapper::error::NvmlError>,
) -> Vec<(ClockDomain, f64)> {
    [
        (Clock::SM, ClockDomain::Sm),
        (Clock::Memory, ClockDomain::Memory),
        (Clock::Graphics, ClockDomain::Graphics),
    ]
    .into_iter()
    .filter_map(|(clock, name)| Some((name, calls.read(call, || read(clock))? as f64 * 1e6)))
    .collect()
}

fn sample_as_f64(value: &SampleValue) -> f64 {
    match *value {
        SampleValue::F64(v) => v,
        SampleValue::U32(v) => v as f64,
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
    }
}

impl DevicePoller for NvmlDevicePoller {
    fn identity(&self) -> &DeviceIdentity {
        &self.identity
    }
    fn backend_name(&self) -> &'static str {
        BACKEND
    }
    fn poll(&mut self) -> PollReport {
        NvmlDevicePoller::poll(self)
    }
}

impl NvmlDevicePoller {
    pub(crate) fn identity(&self) -> &DeviceIdentity {
        &self.identity
    }

    /// Processes holding a CUDA context on this GPU; the probe runs only where there are none.
    pub(crate) fn compute_processes(&self) -> Result<u32, NvmlError> {
        self.device.running_compute_processes_count()
    }

    /// Reads what is due: the every-poll tier, and each slower tier whose interval has
    /// passed. Never panics; failed calls are listed in the report.
    pub(crate) fn poll(&mut self) -> PollReport {
        let mut calls = CallErrors::default();
        // The first call tells us whether the GPU is there at all; a lost GPU answers every
        // call with GpuLost, and there is no point making twenty more.
        let gpu_temperature = calls.read("nvmlDeviceGetTemperature", || {
            self.device.temperature(TemperatureSensor::Gpu)
        });
        if calls.lost || calls.library_gone {
            self.tiers.reset();
            return calls.into_lost_report();
        }
        let statics = self.statics(&mut calls);
        let now = Instant::now();
        let mut r = std::mem::take(&mut self.carried);
        r.temperatures = gpu_temperature.map(|t| (Sensor::Gpu, t as f64)).into_iter().collect();
        self.read_every_poll(&mut r, &statics, &mut calls);
        if self.tiers.topology.take(now) {
            self.read_topology(&mut r, &statics, &mut calls);
        }
        let mut persistence = None;
        if self.tiers.slow.take(now) {
            persistence = self.read_slow(&mut r, &mut calls);
        }
        if self.tiers.costly.take(now) {
            self.read_costly(&mut r, &mut calls);
        }
        if self.tiers.gpm.take(now) {
            self.read_gpm(&mut r, &mut calls);
        }
        r.mig = self.mig();
        self.attach_process_samples(&mut r);
        if calls.lost {
            self.tiers.reset();
            return calls.into_lost_report();
        }
        self.carried = r.clone();
        PollReport {
            readings: Some(r),
            library_gone: calls.library_gone,
            call_seconds: calls.call_time.as_secs_f64(),
            call_times: calls.call_times,
            errors: calls.errors,
            persistence,
        }
    }

    /// The readings that cannot change while the GPU is in the node, read at the first poll.
    fn statics(&mut self, calls: &mut CallErrors) -> Arc<StaticReadings> {
        if let Some(s) = &self.static_readings {
            return s.clone();
        }
        let s = Arc::new(self.read_static(calls));
        self.static_readings = Some(s.clone());
        s
    }

    /// The every-poll tier: each field written whatever the call answers (a call that stops
    /// answering leaves its field empty, never the last value).
    fn read_every_poll(&self, r: &mut DeviceReadings, statics: &StaticReadings, calls: &mut CallErrors) {
        // Carried over from the last poll, and static: copied only at the first.
        if r.temperature_thresholds != statics.thresholds {
            r.temperature_thresholds = statics.thresholds.clone();
        }
        if let Some(samples) = calls.read("nvmlDeviceGetFieldValues:memory_temperature", || {
            self.device.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)])
        }) && let Some(Ok(sample)) = samples.first()
            && let Ok(value) = &sample.value
        {
            r.temperatures.push((Sensor::Memory, sample_as_f64(value)));
        }
        let supported = statics.supported_clock_events.unwrap_or(u64::MAX);
        r.clock_events = calls
            .read("nvmlDeviceGetCurrentClocksEventReasons", || self.current_clock_events())
            .map(|active| clock_events::decode_nvidia(active, supported))
            .unwrap_or_default();
        r.power_watts = calls
            .read("nvmlDeviceGetPowerUsage", || self.device.power_usage())
            .map(|mw| mw as f64 / 1000.0);
        r.power_limit_watts = calls
            .read("nvmlDeviceGetEnforcedPowerLimit", || self.device.enforced_power_limit())
            .map(|mw| mw as f64 / 1000.0);
        r.clocks_hertz = clocks_hertz(calls, "nvmlDeviceGetClockInfo", |clock| self.device.clock_info(clock));
        let rates = calls.read("nvmlDeviceGetUtilizationRates", || self.device.utilization_rates());
        r.utilization_ratio = rates.as_ref().map(|u| u.gpu as f64 / 100.0);
        r.memory_copy_utilization_ratio = rates.as_ref().map(|u| u.memory as f64 / 100.0);
        r.encoder_utilization_ratio = calls
            .read("nvmlDeviceGetEncoderUtilization", || self.device.encoder_utilization())
            .map(|u| u.utilization as f64 / 100.0);
        r.decoder_utilization_ratio = calls
            .read("nvmlDeviceGetDecoderUtilization", || self.device.decoder_utilization())
            .map(|u| u.utilization as f64 / 100.0);
        let memory = calls.read("nvmlDeviceGetMemoryInfo_v2", || self.device.memory_info());
        r.memory_used_bytes = memory.as_ref().map(|m| m.used);
        r.memory_total_bytes = memory.as_ref().map(|m| m.total);
        r.memory_free_bytes = memory.as_ref().map(|m| m.free);
        r.memory_reserved_bytes = memory.as_ref().map(|m| m.reserved);
        r.pcie.generation = calls.read("nvmlDeviceGetCurrPcieLinkGeneration", || {
            self.device.current_pcie_link_gen()
        });
        r.pcie.generation_max = statics.pcie_generation_max;
        r.pcie.width_max = statics.pcie_width_max;
        if r.clocks_max_hertz != statics.clocks_max_hertz {
            r.clocks_max_hertz = statics.clocks_max_hertz.clone();
        }
        r.performance_state = calls
            .read("nvmlDeviceGetPerformanceState", || self.device.performance_state())
            .map(|p| p.as_c());
        r.fan_speed_ratio = (statics.fan_count > 0)
            .then(|| calls.read("nvmlDeviceGetFanSpeed_v2", || self.device.fan_speed(0)))
            .flatten()
            .map(|p| p as f64 / 100.0);
    }

    /// The topology tier. A failed read leaves its fields out until the next one (not stale
    /// values), and is not retried every poll: it costs the driver real time.
    fn read_topology(&mut self, r: &mut DeviceReadings, statics: &StaticReadings, calls: &mut CallErrors) {
        r.nvlinks = nvlink::read(&self.device, statics.nvlink_count, calls).map(Arc::new);
        r.fabric = fabric::read(&self.device, calls);
        r.nvlink_p2p = p2p::read(&self.device, &self.peers, calls);
        self.mig_mode = mig::mode(&self.device, calls);
    }

    /// The GPM tier: a sample computed against the previous one, for the GPU and each of its
    /// MIG GPU instances.
    fn read_gpm(&mut self, r: &mut DeviceReadings, calls: &mut CallErrors) {
        r.activity = self.gpm.read(&self.device, calls);
        let mut instances: Vec<u32> = self.mig_devices.iter().map(|d| d.gpu_instance).collect();
        instances.sort_unstable();
        instances.dedup();
        self.mig_activity = self.gpm.read_mig(&self.device, &instances, calls);
    }

    /// MIG mode with its devices and their activity, from the three tiers that read them.
    fn mig(&self) -> Option<crate::model::mig::Mig> {
        let mode = self.mig_mode?;
        Some(crate::model::mig::Mig {
            enabled: mode.enabled,
            pending: mode.pending,
            instances: self
                .mig_devices
                .iter()
                .map(|d| crate::model::mig::MigDevice {
                    activity: self.mig_activity.get(&d.gpu_instance).cloned(),
                    ..d.clone()
                })
                .collect(),
        })
    }

    fn read_static(&self, calls: &mut CallErrors) -> StaticReadings {
        let mut s = StaticReadings::default();
        for (threshold, name) in [
            (TemperatureThreshold::Slowdown, Threshold::Slowdown),
            (TemperatureThreshold::Shutdown, Threshold::Shutdown),
            (TemperatureThreshold::GpuMax, Threshold::GpuMax),
            (TemperatureThreshold::MemoryMax, Threshold::MemoryMax),
        ] {
            if let Some(t) = calls.read("nvmlDeviceGetTemperatureThreshold", || {
                self.device.temperature_threshold(threshold)
            }) {
                s.thresholds.push((name, t as f64));
            }
        }
        s.pcie_generation_max = calls.read("nvmlDeviceGetMaxPcieLinkGeneration", || self.device.max_pcie_link_gen());
        s.pcie_width_max = calls.read("nvmlDeviceGetMaxPcieLinkWidth", || self.device.max_pcie_link_width());
        s.clocks_max_hertz = clocks_hertz(calls, "nvmlDeviceGetMaxClockInfo", |clock| {
            self.device.max_clock_info(clock)
        });
        s.fan_count = calls
            .read("nvmlDeviceGetNumFans", || self.device.num_fans())
            .unwrap_or(0);
        s.supported_clock_events = calls.read("nvmlDeviceGetSupportedClocksEventReasons", || {
            self.supported_clock_events()
        });
        s.nvlink_count = nvlink::board_links(&self.device, calls);
        s
    }

    /// The compute processes (their utilisation comes from the slow tier).
    fn read_processes(&self, calls: &mut CallErrors) -> Option<Vec<GpuProcess>> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let processes = calls.read("nvmlDeviceGetComputeRunningProcesses_v3", || {
            self.device.running_compute_processes()
        })?;
        let processes: Vec<GpuProcess> = processes
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                },
                gpu_instance: p.gpu_instance_id,
                ..GpuProcess::default()
            })
            .collect();
        Some(processes)
    }

    /// `nvmlDeviceGetCurrentClocksEventReasons` is the current name (NVML 12.2+); older drivers
    /// only have the "throttle reasons" one that nvml-wrapper wraps.
    fn current_clock_events(&self) -> Result<u64, NvmlError> {
        let lib = self.device.nvml().lib();
        match lib.nvmlDeviceGetCurrentClocksEventReasons.as_ref() {
            Ok(sym) => {
                let mut mask = 0u64;
                // SAFETY: a valid device handle and a pointer to a u64, as nvml.h declares.
                let code = unsafe { sym(self.device.handle(), &mut mask) };
                nvml_wrapper::error::nvml_try(code).map(|_| mask)
            }
            Err(_) => self.device.current_throttle_reasons().map(|r| r.bits()),
        }
    }

    fn supported_clock_events(&self) -> Result<u64, NvmlError> {
        let lib = self.device.nvml().lib();
        match lib.nvmlDeviceGetSupportedClocksEventReasons.as_ref() {
            Ok(sym) => {
                let mut mask = 0u64;
                // SAFETY: as above.
                let code = unsafe { sym(self.device.handle(), &mut mask) };
                nvml_wrapper::error::nvml_try(code).map(|_| mask)
            }
            Err(_) => self.device.supported_throttle_reasons().map(|r| r.bits()),
        }
    }

    /// The slow tier; returns what happened to persistence mode, when it was off.
    fn read_slow(&mut self, r: &mut DeviceReadings, calls: &mut CallErrors) -> Option<PersistenceOutcome> {
        // 0.08 ms per call on an H200 under load, against 3 us for the generation: a link
        // that trains narrower stays so until a reset, so ten seconds to see it is enough.
        r.pcie.width = calls.read("nvmlDeviceGetCurrPcieLinkWidth", || {
            self.device.current_pcie_link_width()
        });
        // 0.09 ms per call with a process running.
        r.processes = self.read_processes(calls);
        self.read_field_values(calls, r);
        self.read_ecc(calls, r);
        r.pcie.replay_errors = calls
            .read("nvmlDeviceGetPcieReplayCounter", || self.device.pcie_replay_counter())
            .map(u64::from);
        self.mig_devices = match self.mig_mode {
            Some(mode) if mode.enabled => mig::devices(&self.device, calls),
            _ => Vec::new(),
        };
        // 0.17 ms per call on an H200 (which needs no licence); a vGPU guest's licence can
        // lapse at any time, and DCGM looks every 20 s.
        r.vgpu_licensed = licence::read(&self.device, calls);
        self.read_and_keep_persistence(calls, &mut r.persistence_mode)
    }

    /// The calls above a millisecond each, every [`COSTLY_SLOW_INTERVALS`] slow intervals.
    /// Both are counters or means over the interval, so reading them less often loses nothing.
    fn read_costly(&mut self, r: &mut DeviceReadings, calls: &mut CallErrors) {
        r.energy_joules = calls
            .read("nvmlDeviceGetTotalEnergyConsumption", || {
                self.device.total_energy_consumption()
            })
            .map(|mj| mj as f64 / 1000.0);
        let running: Vec<u32> = r.processes.iter().flatten().map(|p| p.pid).collect();
        self.process_samples = (self.live.process_utilization() && !running.is_empty())
            .then(|| self.read_process_samples(calls, &running))
            .flatten();
        self.last_sample_micros = Some(now_micros());
    }

    /// Each process's mean SM and memory utilisation over the samples since the last read:
    /// 1.7 ms per call on an H200, so once per costly tier (30 s), which also makes the mean one
    /// over that interval. The driver lists only processes with a non-zero sample in the
    /// window, so a process it leaves out was idle.
    fn read_process_samples(
        &self,
        calls: &mut CallErrors,
        running: &[u32],
    ) -> Option<std::collections::BTreeMap<u32, (f64, f64)>> {
        let since = self.last_sample_micros;
        let samples = calls.read("nvmlDeviceGetProcessUtilization", || {
            match self.device.process_utilization_stats(since) {
                // No process had a sample since then: all idle.
                Err(NvmlError::NotFound) => Ok(Vec::new()),
                other => other,
            }
        })?;
        let mut sums: std::collections::BTreeMap<u32, (f64, f64, u32)> = Default::default();
        for sample in &samples {
            let entry = sums.entry(sample.pid).or_default();
            entry.0 += sample.sm_util as f64;
            entry.1 += sample.mem_util as f64;
            entry.2 += 1;
        }
        let mean = |sum: f64, n: u32| (sum / n as f64 / 100.0).clamp(0.0, 1.0);
        Some(
            running
                .iter()
                .map(|pid| match sums.get(pid) {
                    Some((sm, mem, n)) => (*pid, (mean(*sm, *n), mean(*mem, *n))),
                    None => (*pid, (0.0, 0.0)),
                })
                .collect(),
        )
    }

    /// Puts the last utilisation samples on this poll's processes (per-process series on).
    fn attach_process_samples(&self, r: &mut DeviceReadings) {
        let (Some(samples), Some(processes)) = (&self.process_samples, r.processes.as_mut()) else {
            return;
        };
        if !self.live.process_utilization() {
            return;
        }
        // A process that started after the last read has no value until the next one.
        for p in processes {
            if let Some((sm, memory)) = samples.get(&p.pid) {
                p.sm_utilization_ratio = Some(*sm);
                p.memory_utilization_ratio = Some(*memory);
            }
        }
    }

    fn read_field_values(&self, calls: &mut CallErrors, r: &mut DeviceReadings) {
        r.remapped_rows = RemappedRows::default();
        r.clock_event_seconds = Vec::new();
        r.recovery_action = None;
        let ids: Vec<FieldId> = FIELDS.iter().map(|id| FieldId(*id)).collect();
        let Some(samples) = calls.read("nvmlDeviceGetFieldValues:slow_fields", || {
            self.device.field_values_for(&ids)
        }) else {
            return;
        };
        // Each sample answers for itself: an unsupported field is an Err in its slot.
        let value = |field: u32| -> Option<f64> {
            let position = FIELDS.iter().position(|f| *f == field)?;
            let sample = samples.get(position)?.as_ref().ok()?;
            sample.value.as_ref().ok().map(sample_as_f64)
        };
        r.recovery_action =
            value(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION).and_then(|v| crate::model::RecoveryAction::from_code(v as u64));
        r.remapped_rows = RemappedRows {
            correctable: value(NVML_FI_DEV_REMAPPED_COR).map(|v| v as u64),
            uncorrectable: value(NVML_FI_DEV_REMAPPED_UNC).map(|v| v as u64),
            pending: value(NVML_FI_DEV_REMAPPED_PENDING).map(|v| v != 0.0),
            failed: value(NVML_FI_DEV_REMAPPED_FAILURE).map(|v| v != 0.0),
        };
        for (field, reason) in COUNTER_FIELDS {
            if let Some(ns) = value(field) {
                r.clock_event_seconds.push((reason, ns / 1e9));
            }
        }
    }

    fn read_ecc(&self, calls: &mut CallErrors, r: &mut DeviceReadings) {
        r.ecc_enabled = None;
        r.ecc_errors = Vec::new();
        let Some(mode) = calls.read("nvmlDeviceGetEccMode", || self.device.is_ecc_enabled()) else {
            return;
        };
        r.ecc_enabled = Some(mode.currently_enabled);
        if !mode.currently_enabled {
            return;
        }
        for (error, error_type) in [
            (MemoryError::Corrected, EccType::Corrected),
            (MemoryError::Uncorrected, EccType::Uncorrected),
        ] {
            for (counter, scope) in [
                (EccCounter::Volatile, EccScope::Volatile),
                (EccCounter::Aggregate, EccScope::Aggregate),
            ] {
                if let Some(count) = calls.read("nvmlDeviceGetTotalEccErrors", || {
                    self.device.total_ecc_errors(error, counter)
                }) {
                    r.ecc_errors.push(EccCount {
                        error_type,
                        scope,
                        count,
                    });
                }
            }
        }
    }

    /// Reads persistence mode into `mode` and, when configured, turns it on where it is off.
    /// Never off.
    fn read_and_keep_persistence(
        &mut self,
        calls: &mut CallErrors,
        mode: &mut Option<bool>,
    ) -> Option<PersistenceOutcome> {
        *mode = None;
        let on = calls.read("nvmlDeviceGetPersistenceMode", || self.device.is_in_persistent_mode())?;
        *mode = Some(on);
        if on || !self.enable_persistence {
            return None;
        }
        let id = &self.identity;
        let outcome = match self.device.set_persistent(true) {
            Ok(()) => {
                crate::gpu_log!(
                    log::Level::Info,
                    id,
                    "persistence mode was off on GPU {} ({}, {}); turned it on",
                    id.index,
                    id.uuid,
                    id.pci_bus_id
                );
                *mode = Some(true);
                PersistenceOutcome::Enabled
            }
            Err(NvmlError::NoPermission) => {
                if self.persistence_denied.begins() {
                    crate::gpu_log!(
                        log::Level::Warn,
                        id,
                        "persistence mode is off on GPU {} ({}) and turning it on was not permitted: \
                         run gpuwarden as root, or set persistence.enable: false and use nvidia-persistenced",
                        id.index,
                        id.uuid
                    );
                }
                PersistenceOutcome::NotPermitted
            }
            Err(e) => {
                crate::gpu_log!(
                    log::Level::Warn,
                    id,
                    "turning persistence mode on for GPU {} ({}) failed: {e}",
                    id.index,
                    id.uuid
                );
                PersistenceOutcome::Failed
            }
        };
        Some(outcome)
    }
}

fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_fields_are_all_polled() {
        for (field, _) in COUNTER_FIELDS {
            assert!(FIELDS.contains(&field));
        }
    }
}
