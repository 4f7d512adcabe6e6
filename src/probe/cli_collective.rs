//! `gpuwarden probe --collective`: every NVIDIA GPU of the node, idle, in one all-reduce
//! through NCCL (probe::collective), its sums checked and its bus bandwidth. Exit 1 when a
//! sum came out wrong; where NCCL is not installed it says so and exits 2; a node of one GPU
//! has nothing to all-reduce with.

use super::cuda;
use super::nccl::Nccl;
use super::{ProbeError, collective};
use crate::config::Config;
use crate::model::probe::{CollectiveOutcome, Unit};
use crate::service::exit::{CliError, CliResult, Exit};
use cudarc::driver;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// `--gpus 0,2`: the indexes, each once.
pub fn parse_gpus(text: &str) -> Result<Vec<u32>, ProbeError> {
    let mut gpus = Vec::new();
    for word in text.split(',').map(str::trim) {
        let gpu: u32 = word.parse().map_err(|_| {
            ProbeError::Settings(format!(
                "{word:?} is not a GPU index; write indexes as `gpuwarden check` shows them, 0,1,2"
            ))
        })?;
        if gpus.contains(&gpu) {
            return Err(ProbeError::Settings(format!(
                "GPU {gpu} is named twice; NCCL takes each GPU once"
            )));
        }
        gpus.push(gpu);
    }
    Ok(gpus)
}

/// The all-reduce across every NVIDIA GPU of the node, or across `chosen` (one allowed).
pub fn run(config: &Config, force: bool, chosen: Option<&[u32]>) -> Result<CollectiveOutcome, ProbeError> {
    let mut uuids = Vec::new();
    let mut found = Vec::new();
    for gpu in 0.. {
        let mut poller = match super::cli::open_gpu(config, gpu) {
            Ok(poller) => poller,
            Err(ProbeError::NoSuchGpu(_)) => break,
            Err(e) => return Err(e),
        };
        if chosen.is_some_and(|c| !c.contains(&gpu)) {
            continue;
        }
        if !force {
            let readings = poller.poll().readings;
            super::cli::check_idle(&poller, readings.as_ref(), gpu, &config.probe)?;
        }
        found.push(gpu);
        uuids.push(poller.identity().uuid.clone());
    }
    if let Some(missing) = chosen.and_then(|c| c.iter().find(|g| !found.contains(g))) {
        return Err(ProbeError::NoSuchGpu(format!(
            "there is no GPU {missing}; `gpuwarden check` lists the GPUs"
        )));
    }
    if uuids.len() < 2 && chosen.is_none() {
        return Err(ProbeError::Settings(format!(
            "the all-reduce needs two or more GPUs; this node has {}",
            uuids.len()
        )));
    }
    if !cuda::driver_present() {
        return Err(ProbeError::NoDriver(
            "the CUDA driver library (libcuda.so.1) is not installed; the probe needs it".into(),
        ));
    }
    let nccl = Nccl::load(&config.probe.nccl_library)?;
    catch_unwind(AssertUnwindSafe(|| {
        let ordinals = cuda_ordinals(&uuids)?;
        collective::all_reduce(&nccl, &ordinals, config.probe.collective.duration)
    }))
    .map_err(|_| ProbeError::Cuda("the CUDA driver is missing something the all-reduce needs".into()))?
}

/// The CUDA ordinals of the GPUs NVML calls `uuids`, in that order (CUDA numbers devices its
/// own way).
fn cuda_ordinals(uuids: &[String]) -> Result<Vec<usize>, ProbeError> {
    let failed = |what: &'static str| move |e: driver::DriverError| ProbeError::Cuda(format!("{what}: {e:?}"));
    driver::result::init().map_err(failed("cuInit"))?;
    let count = driver::CudaContext::device_count().map_err(failed("cuDeviceGetCount"))?;
    let mut by_uuid = Vec::new();
    for i in 0..count {
        let dev = driver::result::device::get(i).map_err(failed("cuDeviceGet"))?;
        let id = driver::result::device::get_uuid(dev).map_err(failed("cuDeviceGetUuid"))?;
        by_uuid.push((cuda::format_uuid(&id.bytes.map(|b| b as u8)), i as usize));
    }
    uuids
        .iter()
        .map(|uuid| {
            by_uuid
                .iter()
                .find(|(u, _)| u.eq_ignore_ascii_case(uuid))
                .map(|(_, i)| *i)
                .ok_or_else(|| ProbeError::NoSuchGpu(format!("CUDA does not see {uuid}")))
        })
        .collect()
}

/// Runs it and prints the outcome (or the error); returns the exit status.
pub fn main(config: &Config, force: bool, chosen: Option<&[u32]>, json: bool) -> CliResult {
    let outcome = run(config, force, chosen).map_err(|e| {
        if json {
            println!("{}", serde_json::json!({ "error": e }));
        }
        CliError::new(e.exit_code(), format!("gpuwarden probe --collective: {e}"))
    })?;
    let exit = match outcome.wrong_sum {
        Some(_) => Exit::FAILURE,
        None => Exit::SUCCESS,
    };
    if json {
        let text = serde_json::to_string_pretty(&outcome)
            .map_err(|e| CliError::new(Exit::UNKNOWN, format!("gpuwarden probe: cannot write JSON: {e}")))?;
        println!("{text}");
    } else if outcome.gpus == 1 {
        println!(
            "all-reduce on one GPU (NCCL {}): it ran, and every sum came back {}; one GPU has no bus to measure",
            outcome.nccl,
            if outcome.wrong_sum.is_some() { "wrong" } else { "right" }
        );
    } else {
        let bytes = Unit::BytesPerSecond;
        println!(
            "all-reduce across {} GPUs (NCCL {}, {} MiB each): bus bandwidth {} sustained{}",
            outcome.gpus,
            outcome.nccl,
            outcome.bytes >> 20,
            bytes.human(outcome.bus_bandwidth),
            outcome
                .burst
                .map_or(String::new(), |b| format!(", {} burst", bytes.human(b)))
        );
        if let Some(wrong) = &outcome.wrong_sum {
            println!("FAILED: wrong sums: {wrong}");
        }
    }
    Ok(exit)
}
