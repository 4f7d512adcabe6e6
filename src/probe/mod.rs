//! The CUDA probe: a short workload that proves a GPU still delivers its throughput.
//!
//! `gpuwarden probe` runs it now; the daemon runs it on a schedule (off by default) in a
//! child process, so the CUDA driver is never loaded into the daemon itself and a probe that
//! hangs or crashes costs the daemon nothing. Each test runs for a few seconds in windows
//! timed with CUDA events (`windows`), while NVML is sampled (`sampler`); the figures are
//! compared with the expected values for the GPU model (`expected`).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `child.rs` | The probe's child process: `gpuwarden probe --json --settings-from-stdin ...`, started by the daemon with the settings it runs with, one piece of GPU work... |
//! | `cli.rs` | `gpuwarden probe`: find the GPU through NVML, check that it is idle, open it in CUDA, run the tests while sampling, and compare with the expected values |
//! | `cli_collective.rs` | `gpuwarden probe --collective`: every NVIDIA GPU of the node, idle, in one all-reduce through NCCL (probe::collective), its sums checked and its bus bandwidth |
//! | `collective.rs` | The GPUs together (docs/probe.md, "The GPUs together"): an all-reduce across every GPU given, through NCCL in one process (`ncclCommInitAll`), each GPU on... |
//! | `cuda.rs` | The probe's GPU side, on cudarc with the driver loaded at run time: the binary builds and starts where there is no CUDA at all, and `driver_present` says so... |
//! | `cuda_memtest.rs` | The HBM pattern test's GPU side (`memtest`): one region of a share of the free memory, the passes of probe::memtest run over it until the time budget is... |
//! | `cuda_sdc.rs` | The correctness canary's GPU side (`sdc`): the exact GEMMs in bf16, fp16 and fp32, the FMA chains, and the agreement GEMM run again and again with its... |
//! | `expected.rs` | What each GPU model should measure, and pass/fail against it |
//! | `memtest.rs` | The HBM pattern test's plan (docs/probe.md, "HBM patterns"): the passes in the order they run, each a fill and a check (or a read-and-invert sweep) of the... |
//! | `nccl.rs` | NCCL, loaded at run time like cuBLAS (docs/probe.md, "The GPUs together"): the library comes from the node (or the nvidia-nccl wheels a user installed),... |
//! | `report.rs` | The probe report as a person reads it: one line per test with burst, sustained, expected, the verdict and what the GPU did under load |
//! | `sampler.rs` | Samples the GPU through NVML while the probe runs, so the report can say what happened under load: peak temperature, mean SM clock and power, and how long... |
//! | `schedule.rs` | Scheduled probes in the daemon (off by default; `probe.schedule`) |
//! | `sdc.rs` | The correctness canary's host side (docs/probe.md, "Silent data corruption"): the inputs whose exact results the host knows, those results, the sizes from... |
//! | `sdc_rejudge.rs` | When a key's reference digest is replaced (a majority of the node's GPUs now agrees on another digest), every verdict judged against the old one is judged... |
//! | `sweep.rs` | The idle node's scheduled validation (`probe.schedule: true` with `probe.mode: node`; docs/probe.md, "Validating an idle node") |
//! | `together.rs` | The daemon's all-reduce across the node's GPUs (docs/probe.md, "The GPUs together") |
//! | `windows.rs` | Turning timed windows of work into the two figures a probe reports: the burst (what a cool GPU does for a moment) and the sustained rate (what it keeps up... |
//! <!-- /files -->

pub(crate) mod child;
pub mod cli;
pub mod cli_collective;
pub(crate) mod collective;
pub(crate) mod cuda;
mod cuda_memtest;
mod cuda_sdc;
pub(crate) mod expected;
pub(crate) mod memtest;
pub(crate) mod nccl;
pub(crate) mod report;
pub(crate) mod sampler;
pub mod schedule;
pub(crate) mod sdc;
pub(crate) mod sdc_rejudge;
pub(crate) mod sweep;
pub(crate) mod together;
pub(crate) mod windows;

pub use crate::model::probe::{ProbeReport, ProbeSnapshot, Test, TestResult, UnderLoad, Unit};
use serde::{Deserialize, Serialize};

/// One piece of GPU work of the daemon's at a time: a probe child and an automatic GPU reset
/// (remediation/auto.rs) never overlap. A reset refuses while any process holds the GPUs'
/// device files (the probe's CUDA context and NVML sampler do), and a probe across a reset
/// would measure nothing.
pub static GPU_WORK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Why a probe could not run at all. Each says what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum ProbeError {
    /// No NVIDIA driver library (libcuda) or no NVML: nothing to probe on this machine.
    NoDriver(String),
    /// No GPU with that index.
    NoSuchGpu(String),
    /// The GPU is in use; a probe would disturb the work and measure nonsense.
    Busy { reason: BusyReason, message: String },
    /// CUDA failed while probing.
    Cuda(String),
    /// The probe's settings are not valid: its command line (`--tests`), or what the daemon
    /// hands its probe child.
    Settings(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::NoDriver(m) | ProbeError::NoSuchGpu(m) | ProbeError::Cuda(m) | ProbeError::Settings(m) => {
                f.write_str(m)
            }
            ProbeError::Busy { message, .. } => f.write_str(message),
        }
    }
}

impl ProbeError {
    /// Exit status of `gpuwarden probe`: 2 could not run, 3 skipped because busy.
    pub fn exit_code(&self) -> crate::service::exit::Exit {
        use crate::service::exit::Exit;
        match self {
            ProbeError::Busy { .. } => Exit::BUSY,
            _ => Exit::UNKNOWN,
        }
    }
}

/// Why a GPU should not be probed now, from the snapshot alone (the child checks processes).
pub fn precheck(
    device: &crate::model::DeviceSnapshot,
    settings: &crate::config::Probe,
) -> Option<(BusyReason, String)> {
    if !device.up {
        return Some((BusyReason::GpuDown, "the GPU did not answer its last poll".into()));
    }
    let readings = device.readings.as_ref()?;
    let free_mib = readings
        .memory_total_bytes
        .zip(readings.memory_used_bytes)
        .map(|(total, used)| total.saturating_sub(used) >> 20);
    busy_reason(None, readings.utilization_ratio, free_mib, settings)
}

/// Why a GPU is not probed now: the `reason` label of `gpu_probe_skipped_total`, and what a
/// probe child says in its busy error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BusyReason {
    /// The GPU did not answer its last poll.
    GpuDown,
    ComputeProcesses,
    Utilization,
    Memory,
}

impl BusyReason {
    /// The label value, the same word as its JSON.
    pub fn label(self) -> &'static str {
        match self {
            BusyReason::GpuDown => "gpu_down",
            BusyReason::ComputeProcesses => "compute_processes",
            BusyReason::Utilization => "utilization",
            BusyReason::Memory => "memory",
        }
    }
}

/// CUDA's own context and cuBLAS workspace come on top of the probe's buffers.
const CONTEXT_OVERHEAD_MIB: u64 = 768;

/// Why this GPU should not be probed now, from one poll and its process count.
pub fn busy_reason(
    compute_processes: Option<u32>,
    utilization: Option<f64>,
    memory_free_mib: Option<u64>,
    config: &crate::config::Probe,
) -> Option<(BusyReason, String)> {
    if let Some(n) = compute_processes.filter(|n| *n > 0) {
        return Some((
            BusyReason::ComputeProcesses,
            format!("{n} compute process(es) are running on it"),
        ));
    }
    if let Some(u) = utilization.filter(|u| *u > config.max_utilization) {
        return Some((
            BusyReason::Utilization,
            format!(
                "its utilization is {:.0}% (probe.max_utilization is {:.0}%)",
                u * 100.0,
                config.max_utilization * 100.0
            ),
        ));
    }
    let needed = config.memory_cap_mib + CONTEXT_OVERHEAD_MIB;
    if let Some(free) = memory_free_mib.filter(|free| *free < needed) {
        return Some((
            BusyReason::Memory,
            format!(
                "only {free} MiB of its memory is free and the probe needs {needed} MiB (probe.memory_cap_mib + CUDA's own)"
            ),
        ));
    }
    None
}
