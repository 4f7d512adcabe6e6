//! The scenario file that drives the simulated NVML library.
//!
//! A test (or the demo) writes a YAML file and names it in the environment variable
//! `GPUWARDEN_SIM_NVML_SCENARIO`. The library re-reads the file whenever its size, inode or
//! modification time changes, so a test can rewrite it while the daemon runs: heat a GPU,
//! drop a PCIe link to x8, make a call fail or hang, or lose a GPU. Write the new file next
//! to the old one and rename it over, so the library never reads half a file.
//!
//! A reading left out of a device is *not supported* on that device: the call returns
//! `NVML_ERROR_NOT_SUPPORTED`, as the real driver does (fan speed on an H200, say).
//! The format is documented in docs/testing.md.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// `nvmlSystemGetDriverVersion`; drivers >= 580.82 use NVML 13's renumbered field ids.
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    /// `nvmlSystemGetNVMLVersion`.
    #[serde(default = "default_nvml_version")]
    pub nvml_version: String,
    /// `nvmlSystemGetCudaDriverVersion_v2` (13000: CUDA 13.0).
    #[serde(default = "default_cuda_version")]
    pub cuda_driver_version: i32,
    /// Make `nvmlInit_v2` fail with this error (e.g. `driver_not_loaded`), as on a node whose
    /// driver is not loaded or is being reloaded.
    #[serde(default)]
    pub init_error: Option<String>,
    /// Make `nvmlInit_v2` block for this many seconds, as a driver wedged mid-reload does.
    /// Rewriting the scenario without it ends the hang early.
    #[serde(default)]
    pub init_hang: Option<f64>,
    /// The driver went away (unloaded for an upgrade): every device call and event wait
    /// answers NVML_ERROR_UNINITIALIZED. Pair it with `init_error` while it is away.
    #[serde(default)]
    pub uninitialized: bool,
    /// The GPUs, in the driver's index order.
    #[serde(default)]
    pub devices: Vec<Device>,
}

fn default_driver_version() -> String {
    "580.159.04".into()
}
fn default_nvml_version() -> String {
    "13.580.159.04".into()
}
fn default_cuda_version() -> i32 {
    13000
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// `nvmlDeviceGetName` (`NVIDIA H200`).
    pub name: String,
    /// `nvmlDeviceGetUUID` (`GPU-...`).
    pub uuid: String,
    /// NVML's form: `00000000:19:00.0`.
    pub pci_bus_id: String,
    /// `nvmlDeviceGetSerial`; absent: NOT_SUPPORTED (boards without one).
    pub serial: Option<String>,
    /// `nvmlDeviceGetVbiosVersion` (`96.00.AF.00.01`); absent: NOT_SUPPORTED.
    pub vbios: Option<String>,
    /// `nvmlDeviceGetBoardPartNumber` (`692-2G520-0280-000`); absent: NOT_SUPPORTED.
    pub board_part_number: Option<String>,
    /// `nvmlDeviceGetInforomImageVersion` (`G520.0280.00.05`); absent: NOT_SUPPORTED.
    pub inforom_image: Option<String>,
    /// Every call on this device returns `NVML_ERROR_GPU_IS_LOST`.
    #[serde(default)]
    pub lost: bool,
    /// Call name (e.g. `nvmlDeviceGetPowerUsage`) -> error name (`not_supported`, `unknown`,
    /// `gpu_is_lost`, `no_permission`, `timeout`, ...).
    #[serde(default)]
    pub fail: BTreeMap<String, String>,
    /// Call name -> seconds the call blocks before it answers, like a wedged driver call.
    #[serde(default)]
    pub hang: BTreeMap<String, f64>,

    /// Die temperature, C (`nvmlDeviceGetTemperature`).
    pub temperature: Option<u32>,
    /// HBM temperature, C (field `NVML_FI_DEV_MEMORY_TEMP`).
    pub memory_temperature: Option<u32>,
    /// Temperature thresholds, C (`nvmlDeviceGetTemperatureThreshold`).
    #[serde(default)]
    pub thresholds: Thresholds,
    /// Power draw, milliwatts (`nvmlDeviceGetPowerUsage`).
    pub power_mw: Option<u32>,
    /// Enforced power limit, milliwatts (`nvmlDeviceGetEnforcedPowerLimit`).
    pub power_limit_mw: Option<u32>,
    /// Energy since the driver loaded, millijoules (`nvmlDeviceGetTotalEnergyConsumption`).
    pub energy_mj: Option<u64>,
    /// Current clocks, MHz (`nvmlDeviceGetClockInfo`).
    #[serde(default)]
    pub clocks_mhz: Clocks,
    /// The highest clocks, MHz (`nvmlDeviceGetMaxClockInfo`); a domain left out: NOT_SUPPORTED.
    #[serde(default)]
    pub clocks_max_mhz: Clocks,
    /// GPU and memory-copy busy percentages (`nvmlDeviceGetUtilizationRates`).
    pub utilization: Option<Utilization>,
    /// Video encoder and decoder busy percentages; absent: the board has none (NOT_SUPPORTED).
    pub encoder_percent: Option<u32>,
    /// Video decoder busy percentage; absent: the board has no NVDEC (NOT_SUPPORTED).
    pub decoder_percent: Option<u32>,
    /// Device memory, bytes (`nvmlDeviceGetMemoryInfo_v2`; free is total - used - reserved).
    pub memory: Option<Memory>,
    /// The PCIe link: current and maximum generation and width, and the replay counter.
    #[serde(default)]
    pub pcie: Pcie,
    /// Clock-event (throttle) reasons as NVML's bit masks, active and supported.
    pub clock_events: Option<ClockEvents>,
    /// Cumulative time in each clock-event reason, in nanoseconds, as the driver's field
    /// values report it. Keys: sw_power_cap, sync_boost, sw_thermal_slowdown,
    /// hw_thermal_slowdown, hw_power_brake_slowdown.
    #[serde(default)]
    pub clock_event_ns: BTreeMap<String, u64>,
    /// ECC mode and error counts; absent: the GPU has no ECC (NOT_SUPPORTED).
    pub ecc: Option<Ecc>,
    /// Row remapping (fields `NVML_FI_DEV_REMAPPED_*`); absent: NOT_SUPPORTED.
    pub remapped_rows: Option<RemappedRows>,
    /// `nvmlDeviceGetPersistenceMode`; a successful set holds until the scenario file changes.
    pub persistence_mode: Option<bool>,
    /// When false, `nvmlDeviceSetPersistenceMode` answers `NVML_ERROR_NO_PERMISSION`.
    #[serde(default = "yes")]
    pub persistence_settable: bool,
    /// A vGPU guest's licence: true licensed, false not; absent: the GPU needs none (bare
    /// metal, passthrough), as a real H200 answers.
    pub vgpu_licensed: Option<bool>,
    /// The driver's recovery action (field `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`): 0 none,
    /// 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset; absent: NOT_SUPPORTED
    /// (a driver before R550).
    pub recovery_action: Option<u32>,
    /// What the simulated CUDA driver (tests/sim-cuda) makes this GPU measure in the probe;
    /// without it, CUDA does not see the GPU.
    #[serde(default)]
    #[allow(dead_code)] // read by tests/sim-cuda, which compiles this file too
    pub cuda: Option<Cuda>,
    /// Processes with a CUDA context on the device (what the probe's idle check counts).
    #[serde(default)]
    pub compute_processes: u32,
    /// The compute processes, when a test needs their pids and memory; without it there are
    /// `compute_processes` of them, pids 1000, 1001, ... with 1 GiB each.
    pub processes: Option<Vec<Process>>,
    /// The P-state number (`nvmlDeviceGetPerformanceState`).
    pub performance_state: Option<u32>,
    /// Fan 0's speed, percent; absent: a fanless board (no fans; fan 0 is INVALID_ARGUMENT, as on an H200).
    pub fan_speed_percent: Option<u32>,
    /// The XIDs this GPU has raised so far, oldest first. A registered event set delivers
    /// each entry once (`nvmlEventSetWait_v2`); append to raise a new one.
    #[serde(default)]
    pub xid_events: Vec<u64>,
    /// When false, `nvmlDeviceRegisterEvents` answers NOT_SUPPORTED for this GPU.
    #[serde(default = "yes")]
    pub events_supported: bool,
    /// GPM activity (Hopper and newer); absent: the GPU has no GPM.
    pub gpm: Option<Gpm>,
    /// NVLinks the board has (NVML_FI_DEV_NVLINK_LINK_COUNT is their number).
    #[serde(default)]
    pub nvlinks: Vec<NvLink>,
    /// Each NVLink's rate when up, MB/s one way (NVML_FI_DEV_NVLINK_GET_SPEED; an H200's
    /// are 26562); absent: the driver does not say.
    pub nvlink_speed_mbps: Option<u64>,
    /// NVLink fabric registration; absent: not on a fabric (state NOT_SUPPORTED).
    pub fabric: Option<Fabric>,
    /// NVML's NVLink peer-to-peer status towards every other GPU (`nvmlGpuP2PStatus_t`, 4:
    /// disabled by a registry key); absent: OK where both GPUs have NVLinks, else 5 (not
    /// supported).
    pub p2p_nvlink_status: Option<u32>,
    /// MIG; absent: the GPU has no MIG (nvmlDeviceGetMigMode answers NOT_SUPPORTED).
    pub mig: Option<Mig>,
}

/// What `nvmlGpmMetricsGet` computes between any two samples: percentages, and MiB/s for
/// the bandwidths. A field left out answers NOT_SUPPORTED for that metric alone.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpm {
    /// Graphics engine activity.
    pub graphics: Option<f64>,
    /// SM activity.
    pub sm: Option<f64>,
    /// SM occupancy.
    pub sm_occupancy: Option<f64>,
    /// Tensor pipe activity (any precision).
    pub tensor: Option<f64>,
    /// DRAM bandwidth used.
    pub dram: Option<f64>,
    /// FP64 pipe activity.
    pub fp64: Option<f64>,
    /// FP32 pipe activity.
    pub fp32: Option<f64>,
    /// FP16 pipe activity.
    pub fp16: Option<f64>,
    /// Integer pipe activity.
    pub integer: Option<f64>,
    /// Tensor pipe activity, half-precision MMA.
    pub hmma: Option<f64>,
    /// Tensor pipe activity, integer MMA.
    pub imma: Option<f64>,
    /// Tensor pipe activity, double-precision FMA.
    pub dfma: Option<f64>,
    /// PCIe bytes sent, MiB/s.
    pub pcie_tx_mib: Option<f64>,
    /// PCIe bytes received, MiB/s.
    pub pcie_rx_mib: Option<f64>,
    /// NVLink bytes sent, all links, MiB/s.
    pub nvlink_tx_mib: Option<f64>,
    /// NVLink bytes received, all links, MiB/s.
    pub nvlink_rx_mib: Option<f64>,
}

/// One NVLink: its state and counters. A counter left out is not supported on the link.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvLink {
    /// Whether the link is active (`nvmlDeviceGetNvLinkState`).
    #[serde(default = "yes")]
    pub up: bool,
    /// Flit CRC errors.
    pub crc_flit: Option<u64>,
    /// Data CRC errors.
    pub crc_data: Option<u64>,
    /// Replays.
    pub replay: Option<u64>,
    /// Recoveries.
    pub recovery: Option<u64>,
    /// User data moved, in KiB (the driver's unit).
    pub tx_kib: Option<u64>,
    /// User data received, KiB.
    pub rx_kib: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    /// not_started, in_progress, completed.
    pub state: String,
    /// The registration's result once completed: an error name as in `fail` (absent: success).
    pub error: Option<String>,
    /// The fabric clique the GPU joined.
    #[serde(default)]
    pub clique_id: u32,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mig {
    /// MIG mode now.
    pub enabled: bool,
    /// The mode after the next reset; defaults to `enabled`.
    pub pending: Option<bool>,
    /// The MIG devices, while enabled.
    #[serde(default)]
    pub devices: Vec<MigDevice>,
}

/// One MIG device (a compute instance in a GPU instance).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDevice {
    /// `MIG-...`: what the kubelet names it.
    pub uuid: String,
    /// The GPU instance id.
    pub gpu_instance: u32,
    /// The compute instance id.
    #[serde(default)]
    pub compute_instance: u32,
    /// `1g.18gb`: the device's name is the parent's name + " MIG " + this.
    pub profile: String,
    /// Its memory, bytes; absent: NOT_SUPPORTED.
    pub memory: Option<Memory>,
    /// What `nvmlGpmMigSampleGet` samples of its GPU instance; absent: NOT_SUPPORTED.
    pub gpm: Option<Gpm>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// Clocks slow down above this.
    pub slowdown: Option<u32>,
    /// The GPU shuts down above this.
    pub shutdown: Option<u32>,
    /// The highest operating temperature.
    pub gpu_max: Option<u32>,
    /// The highest memory temperature.
    pub memory_max: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clocks {
    /// SM clock.
    pub sm: Option<u32>,
    /// Memory clock.
    pub memory: Option<u32>,
    /// Graphics clock.
    pub graphics: Option<u32>,
    /// Video clock.
    pub video: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Utilization {
    /// Percent of the last sample period a kernel ran.
    pub gpu: u32,
    /// Percent of the last sample period memory was read or written.
    pub memory: u32,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Total bytes.
    pub total: u64,
    /// Used bytes.
    pub used: u64,
    /// Bytes the driver reserves.
    #[serde(default)]
    pub reserved: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pcie {
    /// Current link generation.
    pub generation: Option<u32>,
    /// Maximum link generation.
    pub generation_max: Option<u32>,
    /// Current link width, lanes.
    pub width: Option<u32>,
    /// Maximum link width, lanes.
    pub width_max: Option<u32>,
    /// `nvmlDeviceGetPcieReplayCounter`.
    pub replay_counter: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockEvents {
    /// Bit mask of active reasons (NVML's nvmlClocksEventReason bits).
    pub active: u64,
    /// Bit mask of the reasons the GPU can report.
    pub supported: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ecc {
    /// ECC mode (current and pending).
    pub enabled: bool,
    /// Counts since the driver loaded.
    #[serde(default)]
    pub volatile: EccCounts,
    /// Counts over the GPU's life.
    #[serde(default)]
    pub aggregate: EccCounts,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EccCounts {
    /// Corrected (single-bit) errors.
    #[serde(default)]
    pub corrected: u64,
    /// Uncorrected (double-bit) errors.
    #[serde(default)]
    pub uncorrected: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRows {
    /// Rows remapped for correctable errors.
    #[serde(default)]
    pub correctable: u32,
    /// Rows remapped for uncorrectable errors.
    #[serde(default)]
    pub uncorrectable: u32,
    /// A remap waits for a GPU reset.
    #[serde(default)]
    pub pending: bool,
    /// A remap failed (no spare rows left).
    #[serde(default)]
    pub failed: bool,
}

/// Throughput of one simulated GPU, in the units people quote. The simulated driver turns
/// each operation into GPU time at these rates, so the probe measures exactly them.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // read by tests/sim-cuda
pub struct Cuda {
    /// bf16 GEMM rate, TFLOP/s.
    pub gemm_bf16_tflops: f64,
    /// fp32 FMA rate, TFLOP/s.
    pub fma_fp32_tflops: f64,
    /// Device-to-device copy rate (read + write), GB/s.
    pub hbm_copy_gbps: f64,
    /// Pinned host-to-device copy rate, GB/s.
    pub pcie_h2d_gbps: f64,
    /// Pinned device-to-host copy rate, GB/s.
    pub pcie_d2h_gbps: f64,
    /// Every kernel launch fails with CUDA_ERROR_LAUNCH_FAILED, as on a GPU that faults.
    #[serde(default)]
    pub launch_fails: bool,
    /// Making the GPU's context blocks this many seconds, as a wedged driver does.
    #[serde(default)]
    pub context_hang_seconds: f64,
    /// The SM count CUDA reports (default 2: the probe's correctness canary sizes its
    /// GEMMs from it, and the simulated CUDA does their arithmetic for real, on the CPU).
    #[serde(default)]
    pub sms: Option<u32>,
    /// Silent data corruption: every GEMM result's element at this index comes out with its
    /// lowest bit flipped, as a faulty multiplier would give it.
    #[serde(default)]
    pub sdc_wrong_element: Option<u64>,
    /// A bad HBM cell: [word, bit, value]: that bit of that word of the probe's pattern test
    /// region always reads as `value`.
    #[serde(default)]
    pub hbm_stuck_bit: Option<[u64; 3]>,
    /// The simulated NCCL's all-reduce bus bandwidth, GB/s, when this GPU is rank 0 (default
    /// 360, about eight H100s or H200s over NVLink).
    #[serde(default)]
    pub nccl_busbw_gbps: Option<f64>,
    /// Every NCCL all-reduce fails, as on a node whose NVLink path is broken.
    #[serde(default)]
    pub nccl_fails: bool,
    /// This GPU's all-reduce results come out with the first element's lowest bit flipped
    /// (the all-reduce computes real sums on buffers of up to 8 MiB).
    #[serde(default)]
    pub nccl_wrong_sum: bool,
    /// Every all-reduce hangs, as NCCL does on a link that stopped carrying traffic.
    #[serde(default)]
    pub nccl_hangs: bool,
}

impl Scenario {
    pub fn parse(text: &str) -> Result<Scenario, String> {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    /// A GPU reset, as a fake reset command records it (one PCI address per line of the file
    /// `<scenario>.resets`; tests/fixtures/fake-gpu-reset.sh): what a real reset clears is
    /// cleared on those GPUs, a pending row remap is applied, the driver asks for nothing
    /// and the XID events not yet delivered are gone.
    #[allow(dead_code)] // the simulated CUDA driver compiles this file too
    pub fn apply_resets(&mut self, resets: &str) {
        let bus = |address: &str| {
            let address = address.trim().to_ascii_lowercase();
            address
                .split_once(':')
                .map(|(_, rest)| rest.to_string())
                .unwrap_or(address)
        };
        let reset: Vec<String> = resets.lines().filter(|l| !l.trim().is_empty()).map(bus).collect();
        for device in self.devices.iter_mut().filter(|d| reset.contains(&bus(&d.pci_bus_id))) {
            if let Some(action) = device.recovery_action.as_mut() {
                *action = 0;
            }
            if let Some(rows) = device.remapped_rows.as_mut() {
                rows.pending = false;
            }
            device.xid_events.clear();
        }
    }

    /// Whether the driver numbers fields the NVML 13 update 1 way (driver >= 580.82), which
    /// moved the clock-event counters from 251..253 to 269..271.
    pub fn uses_v13u1_field_ids(&self) -> bool {
        let mut parts = self.driver_version.split('.');
        let major: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        major > 580 || (major == 580 && minor >= 82)
    }
}

/// One compute process of `processes`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    /// Its pid.
    pub pid: u32,
    /// Bytes of device memory; absent: the driver does not say (NVML_VALUE_NOT_AVAILABLE).
    pub used_memory: Option<u64>,
    /// Its SM and memory busy percentages in `nvmlDeviceGetProcessUtilization`; a process
    /// without them has no sample (idle). When no process of the GPU has them, the call
    /// answers NOT_SUPPORTED.
    pub sm_percent: Option<u32>,
    /// Its memory busy percentage, as `sm_percent`.
    pub memory_percent: Option<u32>,
    /// The MIG GPU instance it runs in.
    pub gpu_instance: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/testing.md's scenario example: the YAML block under "## Scenario format".
    fn documented_example() -> String {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/testing.md")).unwrap();
        let section = &doc[doc.find("## Scenario format").unwrap()..];
        let start = section.find("```yaml\n").unwrap() + "```yaml\n".len();
        section[start..start + section[start..].find("```").unwrap()].to_string()
    }

    /// The scenario's keys (every `pub name:` field of this file's structs) that have no doc
    /// comment above them (attributes between are fine).
    fn undocumented_keys(source: &str) -> Vec<String> {
        let source = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let lines: Vec<&str> = source.lines().map(str::trim).collect();
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some((name, _)) = line.strip_prefix("pub ").and_then(|l| l.split_once(':')) else {
                continue;
            };
            if name.contains(' ') || name.contains('(') {
                continue;
            }
            let above = lines[..i].iter().rev().find(|l| !l.starts_with("#["));
            if !above.is_some_and(|l| l.starts_with("///")) {
                out.push(name.to_string());
            }
        }
        out
    }

    /// The scenario keys are listed in one place, this file, each with what the simulated
    /// call answers; adding a key does not touch docs/testing.md, whose example must still
    /// parse (no key the library does not know).
    #[test]
    fn every_scenario_key_is_documented_here_and_the_docs_example_parses() {
        let missing = undocumented_keys(include_str!("scenario.rs"));
        assert!(missing.is_empty(), "scenario keys without a doc comment: {missing:?}");
        let example = documented_example();
        let parsed: Result<Scenario, _> = serde_saphyr::from_str(&example);
        assert!(
            parsed.is_ok(),
            "docs/testing.md's scenario example does not parse: {parsed:?}"
        );
    }

    #[test]
    fn a_key_without_a_doc_comment_is_found() {
        let source =
            "pub struct A {\n    /// Documented.\n    #[serde(default)]\n    pub a: u32,\n    pub b: u32,\n}\n";
        assert_eq!(undocumented_keys(source), vec!["b".to_string()]);
    }
}
