//! NVIDIA backend: NVML through nvml-wrapper, one [`NvmlDevicePoller`] per GPU.
//!
//! NVML calls are slow (about a millisecond each on an H200, 2.6 ms for energy) and can
//! block, so each poller runs on a thread of its own (see poller.rs) and makes as few calls
//! as it can: readings that cannot change while the GPU is in the node (temperature
//! thresholds, maximum link generation and width, supported clock-event reasons) are read
//! once, and memory temperature, row remapping and the clock-event time counters come from
//! one `nvmlDeviceGetFieldValues` call.

pub mod calls;
pub mod events;
mod fabric;
mod fields;
mod gpm;
pub mod lifecycle;
mod mig;
mod nvlink;

use crate::backend::{DevicePoller, PersistenceOutcome, PollReport};
use crate::clock_events;
use crate::config;
use crate::model::{DeviceIdentity, DeviceReadings, EccCount, EccScope, EccType, GpuProcess, RemappedRows, Vendor};
use calls::CallErrors;
use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper_sys::bindings::field_id::*;
use std::time::{Duration, Instant};

pub const BACKEND: &str = "nvml";

/// A loaded and initialised NVML. Leaked on purpose: NVML handles (devices, event sets)
/// borrow it for as long as the daemon runs, and it is created once per successful
/// initialisation, not per poll.
pub struct NvmlBackend {
    nvml: &'static Nvml,
}

impl NvmlBackend {
    /// Loads the library named in the config and initialises it. Fails cleanly (no panic)
    /// when the library or the driver is missing.
    pub fn load(config: &config::Nvml) -> Result<NvmlBackend, NvmlError> {
        let nvml = Nvml::builder().lib_path(config.library_path.as_os_str()).init()?;
        Ok(NvmlBackend {
            nvml: Box::leak(Box::new(nvml)),
        })
    }

    /// The library itself, for the XID event thread, which needs it for the daemon's lifetime.
    pub fn nvml(&self) -> &'static Nvml {
        self.nvml
    }

    pub fn driver_version(&self) -> Result<String, NvmlError> {
        self.nvml.sys_driver_version()
    }

    /// One poller per GPU the driver enumerates. A GPU whose identity cannot be read (it
    /// fell off the bus before we started) still gets a poller, so it shows as down rather
    /// than vanishing.
    /// `slow_interval`: how often the readings in [`SlowReadings`] are read (see there).
    pub fn device_pollers(&self, options: &PollOptions) -> Result<Vec<NvmlDevicePoller>, NvmlError> {
        let driver_version = self.driver_version().unwrap_or_default();
        let count = self.nvml.device_count()?;
        let mut pollers = Vec::with_capacity(count as usize);
        for index in 0..count {
            let device = self.nvml.device_by_index(index)?;
            let identity = read_identity(&device, index, &driver_version);
            pollers.push(NvmlDevicePoller {
                device,
                identity,
                enable_persistence: options.enable_persistence,
                static_readings: None,
                warned_persistence_denied: false,
                slow_interval: options.slow_interval,
                slow: None,
                topology_interval: options.topology_interval,
                topology: None,
                gpm_interval: options.gpm_interval,
                activity: None,
                mig_activity: Default::default(),
                gpm: gpm::GpmSampler::default(),
                live: options.live.clone(),
                last_poll_micros: None,
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
            .map(|p| crate::pci::normalize_bus_id(&p.bus_id).unwrap_or_else(|| p.bus_id.to_ascii_lowercase()))
            .unwrap_or_default(),
        driver_version: driver_version.to_string(),
        serial: device.serial().ok(),
    }
}

/// How each GPU's poller works, from the settings.
#[derive(Debug, Clone)]
pub struct PollOptions {
    pub enable_persistence: bool,
    /// How often the readings in [`SlowReadings`] are read (see there).
    pub slow_interval: Duration,
    /// How often the NVLink counters are read (see nvlink.rs).
    pub topology_interval: Duration,
    /// How often GPM activity is computed (see gpm.rs).
    pub gpm_interval: Duration,
    /// Switches read at every poll: per-process utilisation samples (only wanted with
    /// per-process series on).
    pub live: crate::settings::LiveSwitches,
}

/// Readings that do not change while the GPU is in the node, read once.
#[derive(Debug, Clone, Default)]
struct StaticReadings {
    thresholds: Vec<(&'static str, f64)>,
    pcie_generation_max: Option<u32>,
    pcie_width_max: Option<u32>,
    supported_clock_events: Option<u64>,
    /// Fans the board has; fanless boards (H100/H200 SXM) have none, and asking for fan 0
    /// there is an invalid argument, not "not supported".
    fan_count: u32,
    /// NVLinks the board has; 0 for none.
    nvlink_count: u32,
}

/// Readings that change slowly or cost the driver real time, read every `poll.slow_interval`
/// (10 s) instead of every poll. Measured on an H200 (docs/performance.md): the energy counter
/// costs 4.1 ms of CPU per call, the ECC mode 0.17 ms, the replay counter 0.15 ms, the
/// remap and clock-event counter fields 0.16 ms; the readings polled every second cost about
/// 1 us each. Between two slow reads the last values are served: they are at most one slow
/// interval old, and counters (energy, ECC, replays, clock-event time) lose nothing.
#[derive(Debug, Clone, Default)]
struct SlowReadings {
    energy_joules: Option<f64>,
    ecc_enabled: Option<bool>,
    ecc_errors: Vec<EccCount>,
    remapped_rows: RemappedRows,
    replay_errors: Option<u64>,
    clock_event_seconds: Vec<(&'static str, f64)>,
    /// MIG devices, read only while MIG mode is on.
    mig_devices: Vec<crate::model::mig::MigDevice>,
    /// Persistence mode: checked (and turned on where configured) every slow interval; it
    /// cost 0.1 ms per poll on an H200.
    persistence_mode: Option<bool>,
}

/// What changes only with a reboot, a reset or an administrator, or costs the driver most:
/// read every `poll.topology_interval`. Measured on an H200 (docs/performance.md): NVLink
/// states and counters cost 15 to 40 ms for 18 links, fabric info and MIG mode 0.2-0.6 ms each.
#[derive(Debug, Clone)]
struct Topology {
    read_at: Instant,
    nvlinks: Option<crate::model::links::NvLinks>,
    fabric: Option<crate::model::links::Fabric>,
    mig_mode: Option<mig::MigMode>,
}

pub struct NvmlDevicePoller {
    device: Device<'static>,
    identity: DeviceIdentity,
    enable_persistence: bool,
    static_readings: Option<StaticReadings>,
    warned_persistence_denied: bool,
    slow_interval: Duration,
    /// The last slow read and when it was taken.
    slow: Option<(Instant, SlowReadings)>,
    gpm: gpm::GpmSampler,
    gpm_interval: Duration,
    /// The last GPM activity and when it was computed.
    activity: Option<(Instant, Option<crate::model::activity::Activity>)>,
    /// The last GPM activity of each MIG GPU instance, by its id.
    mig_activity: std::collections::BTreeMap<u32, crate::model::activity::Activity>,
    topology_interval: Duration,
    topology: Option<Topology>,
    live: crate::settings::LiveSwitches,
    /// Wall time of the previous poll in microseconds: per-process samples are asked for
    /// from then on.
    last_poll_micros: Option<u64>,
}

/// The slow fields read with one `nvmlDeviceGetFieldValues` call, in the order of `FIELDS`.
/// (Memory temperature has a call of its own, every poll: it costs about 1 us.)
const FIELDS: [u32; 9] = [
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
const COUNTER_FIELDS: [(u32, &str); 5] = [
    (NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, "sw_power_cap"),
    (NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, "sync_boost"),
    (NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, "sw_thermal_slowdown"),
    (NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, "hw_thermal_slowdown"),
    (
        NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN,
        "hw_power_brake_slowdown",
    ),
];

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
    pub fn identity(&self) -> &DeviceIdentity {
        &self.identity
    }

    /// Processes holding a CUDA context on this GPU; the probe runs only where there are none.
    pub fn compute_processes(&self) -> Result<u32, NvmlError> {
        self.device.running_compute_processes_count()
    }

    /// Reads every supported value once. Never panics; failed calls are listed in the report.
    pub fn poll(&mut self) -> PollReport {
        let mut calls = CallErrors::default();
        let mut r = DeviceReadings::default();

        // The first call tells us whether the GPU is there at all; a lost GPU answers every
        // call with GpuLost, and there is no point making twenty more.
        if let Some(t) = calls.read("nvmlDeviceGetTemperature", || {
            self.device.temperature(TemperatureSensor::Gpu)
        }) {
            r.temperatures.push(("gpu", t as f64));
        }
        if calls.lost || calls.library_gone {
            return calls.into_lost_report();
        }

        let statics = match &self.static_readings {
            Some(s) => s.clone(),
            None => {
                let s = self.read_static(&mut calls);
                self.static_readings = Some(s.clone());
                s
            }
        };
        r.temperature_thresholds = statics.thresholds.clone();

        if let Some(samples) = calls.read("nvmlDeviceGetFieldValues:memory_temperature", || {
            self.device.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)])
        }) && let Some(Ok(sample)) = samples.first()
            && let Ok(value) = &sample.value
        {
            r.temperatures.push(("memory", sample_as_f64(value)));
        }

        if let Some(active) = calls.read("nvmlDeviceGetCurrentClocksEventReasons", || self.current_clock_events()) {
            let supported = statics.supported_clock_events.unwrap_or(u64::MAX);
            r.clock_events = clock_events::decode_nvidia(active, supported);
        }

        r.power_watts = calls
            .read("nvmlDeviceGetPowerUsage", || self.device.power_usage())
            .map(|mw| mw as f64 / 1000.0);
        r.power_limit_watts = calls
            .read("nvmlDeviceGetEnforcedPowerLimit", || self.device.enforced_power_limit())
            .map(|mw| mw as f64 / 1000.0);

        for (clock, name) in [
            (Clock::SM, "sm"),
            (Clock::Memory, "memory"),
            (Clock::Graphics, "graphics"),
        ] {
            if let Some(mhz) = calls.read("nvmlDeviceGetClockInfo", || self.device.clock_info(clock)) {
                r.clocks_hertz.push((name, mhz as f64 * 1e6));
            }
        }

        if let Some(u) = calls.read("nvmlDeviceGetUtilizationRates", || self.device.utilization_rates()) {
            r.utilization_ratio = Some(u.gpu as f64 / 100.0);
            r.memory_copy_utilization_ratio = Some(u.memory as f64 / 100.0);
        }
        r.encoder_utilization_ratio = calls
            .read("nvmlDeviceGetEncoderUtilization", || self.device.encoder_utilization())
            .map(|u| u.utilization as f64 / 100.0);
        r.decoder_utilization_ratio = calls
            .read("nvmlDeviceGetDecoderUtilization", || self.device.decoder_utilization())
            .map(|u| u.utilization as f64 / 100.0);
        if let Some(m) = calls.read("nvmlDeviceGetMemoryInfo_v2", || self.device.memory_info()) {
            r.memory_used_bytes = Some(m.used);
            r.memory_total_bytes = Some(m.total);
            r.memory_free_bytes = Some(m.free);
            r.memory_reserved_bytes = Some(m.reserved);
        }

        r.pcie.generation = calls.read("nvmlDeviceGetCurrPcieLinkGeneration", || {
            self.device.current_pcie_link_gen()
        });
        r.pcie.width = calls.read("nvmlDeviceGetCurrPcieLinkWidth", || {
            self.device.current_pcie_link_width()
        });
        r.pcie.generation_max = statics.pcie_generation_max;
        r.pcie.width_max = statics.pcie_width_max;

        let due = self
            .slow
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= self.slow_interval);
        let topology_due = self
            .topology
            .as_ref()
            .is_none_or(|t| t.read_at.elapsed() >= self.topology_interval);
        if topology_due {
            self.topology = Some(Topology {
                read_at: Instant::now(),
                // A failed read leaves the counters out until the next one (not stale
                // values), and is not retried every poll: it costs the driver real time.
                nvlinks: nvlink::read(&self.device, statics.nvlink_count, &mut calls),
                fabric: fabric::read(&self.device, &mut calls),
                mig_mode: mig::mode(&self.device, &mut calls),
            });
        }
        let mig_mode = self.topology.as_ref().and_then(|t| t.mig_mode);
        let mut persistence = None;
        if due {
            let mut slow = self.read_slow(&mut calls);
            slow.mig_devices = match mig_mode {
                Some(mode) if mode.enabled => mig::devices(&self.device, &mut calls),
                _ => Vec::new(),
            };
            persistence = self.read_and_keep_persistence(&mut calls, &mut slow.persistence_mode);
            self.slow = Some((Instant::now(), slow));
        }
        let gpm_due = self
            .activity
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= self.gpm_interval);
        if gpm_due {
            self.activity = Some((Instant::now(), self.gpm.read(&self.device, &mut calls)));
            let mut instances: Vec<u32> = self
                .slow
                .as_ref()
                .map(|(_, s)| s.mig_devices.iter().map(|d| d.gpu_instance).collect())
                .unwrap_or_default();
            instances.sort_unstable();
            instances.dedup();
            self.mig_activity = self.gpm.read_mig(&self.device, &instances, &mut calls);
        }
        r.activity = self.activity.as_ref().and_then(|(_, a)| a.clone());
        let topology = self.topology.as_ref();
        r.nvlinks = topology.and_then(|t| t.nvlinks.clone());
        r.fabric = topology.and_then(|t| t.fabric.clone());
        if let Some((_, slow)) = &self.slow {
            r.energy_joules = slow.energy_joules;
            r.ecc_enabled = slow.ecc_enabled;
            r.ecc_errors = slow.ecc_errors.clone();
            r.remapped_rows = slow.remapped_rows.clone();
            r.pcie.replay_errors = slow.replay_errors;
            r.clock_event_seconds = slow.clock_event_seconds.clone();
            r.persistence_mode = slow.persistence_mode;
            r.mig = mig_mode.map(|mode| crate::model::mig::Mig {
                enabled: mode.enabled,
                pending: mode.pending,
                instances: slow
                    .mig_devices
                    .iter()
                    .map(|d| crate::model::mig::MigDevice {
                        activity: self.mig_activity.get(&d.gpu_instance).cloned(),
                        ..d.clone()
                    })
                    .collect(),
            });
        }

        r.processes = self.read_processes(&mut calls);
        self.last_poll_micros = Some(now_micros());

        r.performance_state = calls
            .read("nvmlDeviceGetPerformanceState", || self.device.performance_state())
            .map(|p| p.as_c());
        if statics.fan_count > 0 {
            r.fan_speed_ratio = calls
                .read("nvmlDeviceGetFanSpeed_v2", || self.device.fan_speed(0))
                .map(|p| p as f64 / 100.0);
        }

        if calls.lost {
            return calls.into_lost_report();
        }
        PollReport {
            readings: Some(r),
            library_gone: calls.library_gone,
            call_seconds: calls.call_time.as_secs_f64(),
            call_times: calls.call_times,
            errors: calls.errors,
            persistence,
        }
    }

    fn read_static(&self, calls: &mut CallErrors) -> StaticReadings {
        let mut s = StaticReadings::default();
        for (threshold, name) in [
            (TemperatureThreshold::Slowdown, "slowdown"),
            (TemperatureThreshold::Shutdown, "shutdown"),
            (TemperatureThreshold::GpuMax, "gpu_max"),
            (TemperatureThreshold::MemoryMax, "memory_max"),
        ] {
            if let Some(t) = calls.read("nvmlDeviceGetTemperatureThreshold", || {
                self.device.temperature_threshold(threshold)
            }) {
                s.thresholds.push((name, t as f64));
            }
        }
        s.pcie_generation_max = calls.read("nvmlDeviceGetMaxPcieLinkGeneration", || self.device.max_pcie_link_gen());
        s.pcie_width_max = calls.read("nvmlDeviceGetMaxPcieLinkWidth", || self.device.max_pcie_link_width());
        s.fan_count = calls
            .read("nvmlDeviceGetNumFans", || self.device.num_fans())
            .unwrap_or(0);
        s.supported_clock_events = calls.read("nvmlDeviceGetSupportedClocksEventReasons", || {
            self.supported_clock_events()
        });
        s.nvlink_count = nvlink::board_links(&self.device, calls);
        s
    }

    /// The compute processes, with their utilisation since the previous poll when asked for.
    fn read_processes(&self, calls: &mut CallErrors) -> Option<Vec<GpuProcess>> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let processes = calls.read("nvmlDeviceGetComputeRunningProcesses_v3", || {
            self.device.running_compute_processes()
        })?;
        let mut processes: Vec<GpuProcess> = processes
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
        if self.live.process_utilization() && !processes.is_empty() {
            let since = self.last_poll_micros;
            let samples = calls.read("nvmlDeviceGetProcessUtilization", || {
                match self.device.process_utilization_stats(since) {
                    // No process had a sample since then: all idle.
                    Err(NvmlError::NotFound) => Ok(Vec::new()),
                    other => other,
                }
            });
            if let Some(samples) = samples {
                for p in &mut processes {
                    let mine: Vec<_> = samples.iter().filter(|s| s.pid == p.pid).collect();
                    // The driver lists only processes with a non-zero sample in the window, so
                    // a process it leaves out was idle.
                    let mean = |f: fn(&nvml_wrapper::struct_wrappers::device::ProcessUtilizationSample) -> u32| {
                        if mine.is_empty() {
                            0.0
                        } else {
                            mine.iter().map(|s| f(s) as f64).sum::<f64>() / mine.len() as f64 / 100.0
                        }
                    };
                    p.sm_utilization_ratio = Some(mean(|s| s.sm_util).clamp(0.0, 1.0));
                    p.memory_utilization_ratio = Some(mean(|s| s.mem_util).clamp(0.0, 1.0));
                }
            }
        }
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

    fn read_slow(&self, calls: &mut CallErrors) -> SlowReadings {
        let mut r = DeviceReadings::default();
        self.read_field_values(calls, &mut r);
        self.read_ecc(calls, &mut r);
        SlowReadings {
            energy_joules: calls
                .read("nvmlDeviceGetTotalEnergyConsumption", || {
                    self.device.total_energy_consumption()
                })
                .map(|mj| mj as f64 / 1000.0),
            ecc_enabled: r.ecc_enabled,
            ecc_errors: r.ecc_errors,
            remapped_rows: r.remapped_rows,
            replay_errors: calls
                .read("nvmlDeviceGetPcieReplayCounter", || self.device.pcie_replay_counter())
                .map(u64::from),
            clock_event_seconds: r.clock_event_seconds,
            mig_devices: Vec::new(),
            persistence_mode: None,
        }
    }

    fn read_field_values(&self, calls: &mut CallErrors, r: &mut DeviceReadings) {
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
        let on = calls.read("nvmlDeviceGetPersistenceMode", || self.device.is_in_persistent_mode())?;
        *mode = Some(on);
        if on || !self.enable_persistence {
            return None;
        }
        let id = &self.identity;
        let outcome = match self.device.set_persistent(true) {
            Ok(()) => {
                log::info!(
                    gpu_uuid = id.uuid.as_str(), pci_bus_id = id.pci_bus_id.as_str();
                    "persistence mode was off on GPU {} ({}, {}); turned it on",
                    id.index,
                    id.uuid,
                    id.pci_bus_id
                );
                *mode = Some(true);
                PersistenceOutcome::Enabled
            }
            Err(NvmlError::NoPermission) => {
                if !self.warned_persistence_denied {
                    log::warn!(
                        gpu_uuid = id.uuid.as_str(), pci_bus_id = id.pci_bus_id.as_str();
                        "persistence mode is off on GPU {} ({}) and turning it on was not permitted: \
                         run gpuwarden as root, or set persistence.enable: false and use nvidia-persistenced",
                        id.index,
                        id.uuid
                    );
                    self.warned_persistence_denied = true;
                }
                PersistenceOutcome::NotPermitted
            }
            Err(e) => {
                log::warn!(
                    gpu_uuid = id.uuid.as_str(), pci_bus_id = id.pci_bus_id.as_str();
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
