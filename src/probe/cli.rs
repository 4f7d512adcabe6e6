//! `gpuwarden probe`: find the GPU through NVML, check that it is idle, open it in CUDA,
//! run the tests while sampling, and compare with the expected values. The daemon's
//! scheduled probes run exactly this, in a child process.

use super::busy_reason;
use super::cuda::{self, CudaGpu, Sizes};
use super::sampler::Sampler;
use super::{ProbeError, ProbeReport, Test, TestResult, expected};
use crate::backend::nvml::{NvmlBackend, NvmlDevicePoller};
use crate::config::Config;
use crate::service::exit::{CliError, CliResult, Exit};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Instant, SystemTime};

pub struct Options {
    pub gpu: u32,
    /// `None`: the config's `probe.tests`.
    pub tests: Option<Vec<Test>>,
    /// Probe even when the GPU is in use.
    pub force: bool,
}

/// Parses `--tests gemm_bf16,hbm_copy`.
pub fn parse_tests(list: &str) -> Result<Vec<Test>, ProbeError> {
    let mut tests = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let test = Test::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = Test::ALL.iter().map(|t| t.name()).collect();
            ProbeError::Settings(format!("unknown test {name:?}; the tests are {}", known.join(", ")))
        })?;
        if !tests.contains(&test) {
            tests.push(test);
        }
    }
    if tests.is_empty() {
        return Err(ProbeError::Settings("--tests is empty; name at least one test".into()));
    }
    Ok(tests)
}

pub fn run(config: &Config, options: &Options) -> Result<ProbeReport, ProbeError> {
    let started = SystemTime::now();
    let clock = Instant::now();
    let settings = &config.probe;
    let mut poller = open_gpu(config, options.gpu)?;
    let identity = poller.identity().clone();
    let readings = poller.poll().readings;
    if !options.force {
        check_idle(&poller, readings.as_ref(), options.gpu, settings)?;
    }
    if !cuda::driver_present() {
        return Err(ProbeError::NoDriver(
            "the CUDA driver library (libcuda.so.1) is not installed; the probe needs it (it comes with the NVIDIA driver)"
                .into(),
        ));
    }
    let cublas = cuda::cublas_present(&settings.cublas_library)?;
    let tests = options.tests.clone().unwrap_or_else(|| settings.tests.clone());
    let expectation = expected::resolve(&settings.expected, &identity.name);
    // cudarc panics when a driver lacks a function it was asked for (a driver older than
    // CUDA 11.4); that must be an error message, not a crash.
    let measured = catch_unwind(AssertUnwindSafe(|| {
        let gpu = CudaGpu::open(&identity, cublas)?;
        let sampler = Sampler::start(poller, settings.sample_interval);
        Ok(tests
            .into_iter()
            .map(|test| measure(&gpu, &sampler, test, settings, expectation.as_ref()))
            .collect())
    }))
    .map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown failure".into());
        ProbeError::Cuda(format!(
            "the CUDA driver or cuBLAS is missing something the probe needs: {message}"
        ))
    })??;
    Ok(ProbeReport {
        gpu: identity.index,
        uuid: identity.uuid,
        name: identity.name,
        started: crate::model::unix_seconds(started),
        wall_seconds: clock.elapsed().as_secs_f64(),
        expectation: expectation.map(|e| e.source),
        pass_fraction: settings.pass_fraction,
        tests: measured,
    })
}

/// The GPU's NVML poller (for the samples under load), or why there is none.
pub(super) fn open_gpu(config: &Config, gpu: u32) -> Result<NvmlDevicePoller, ProbeError> {
    config
        .refuse_unasked_simulation(None)
        .map_err(|e| ProbeError::NoDriver(e.message))?;
    let backend = NvmlBackend::load(&config.nvml).map_err(|e| {
        ProbeError::NoDriver(format!(
            "cannot load NVML ({}): {e}; the probe needs the NVIDIA driver",
            config.nvml.library_path.display()
        ))
    })?;
    let mut pollers = backend
        .device_pollers(&crate::backend::nvml::PollOptions {
            enable_persistence: false,
            slow_interval: config.poll.slow_interval,
            topology_interval: config.poll.topology_interval,
            // GPM over each sampling interval, so the report has the activity of each test.
            gpm_interval: config.probe.sample_interval,
            live: Default::default(),
        })
        .map_err(|e| ProbeError::NoDriver(format!("NVML cannot list the GPUs: {e}")))?;
    let count = pollers.len();
    if gpu as usize >= count {
        return Err(ProbeError::NoSuchGpu(format!(
            "there is no GPU {gpu}; this node has {count} (numbered from 0, as in `gpuwarden check`)"
        )));
    }
    Ok(pollers.swap_remove(gpu as usize))
}

/// Refuses a GPU that is in use: a probe would disturb the work and measure nonsense.
pub(super) fn check_idle(
    poller: &NvmlDevicePoller,
    readings: Option<&crate::model::DeviceReadings>,
    gpu: u32,
    settings: &crate::config::Probe,
) -> Result<(), ProbeError> {
    let processes = poller.compute_processes().map_err(|e| ProbeError::Busy {
        reason: super::BusyReason::ComputeProcesses,
        message: format!("cannot tell whether GPU {gpu} is in use: {e}"),
    })?;
    let utilization = readings.and_then(|r| r.utilization_ratio);
    let free = readings.and_then(|r| Some(r.memory_total_bytes?.saturating_sub(r.memory_used_bytes?) >> 20));
    match busy_reason(Some(processes), utilization, free, settings) {
        Some((reason, why)) => Err(ProbeError::Busy {
            reason,
            message: format!("GPU {gpu} is not idle: {why}; run with --force to probe it anyway"),
        }),
        None => Ok(()),
    }
}

/// One test, sampled under load and judged against the expected value.
fn measure(
    gpu: &CudaGpu,
    sampler: &Sampler,
    test: Test,
    settings: &crate::config::Probe,
    expectation: Option<&expected::Resolved>,
) -> TestResult {
    sampler.begin(test);
    let sizes = Sizes {
        memtest_share: settings.memtest_share,
        memtest_max_bytes: settings.memtest_max_mib << 20,
        ..Sizes::for_cap(settings.memory_cap_mib)
    };
    let m = gpu.run(test, &settings.durations, sizes, &|| sampler.load_started());
    let under_load = sampler.end();
    let expected_value = expectation.and_then(|e| e.value(test));
    let sustained = m.rates.map(|r| r.sustained);
    TestResult {
        test,
        params: m.params,
        duration_seconds: settings.durations.of(test).as_secs_f64(),
        burst: m.rates.map(|r| r.burst),
        sustained,
        expected: expected_value,
        pass: match (sustained, expected_value) {
            // The canary is judged by its results, whatever its rate.
            _ if m.sdc.is_some() => m.sdc.as_ref().map(|o| o.clean()),
            _ if m.memtest.is_some() => m.memtest.as_ref().map(|o| o.errors == 0),
            (Some(s), Some(e)) => Some(expected::verdict(s, e, settings.pass_fraction)),
            _ if m.failed => Some(false),
            _ => None,
        },
        skipped: m.skipped,
        under_load,
        sdc: m.sdc,
        memtest: m.memtest,
    }
}

/// Runs the probe and prints the report (or the error); returns the exit status.
pub fn main(config: &Config, options: &Options, json: bool) -> CliResult {
    match run(config, options) {
        Ok(report) => {
            if json {
                let text = serde_json::to_string_pretty(&report).map_err(|e| {
                    CliError::new(
                        Exit::UNKNOWN,
                        format!("gpuwarden probe: cannot write the report as JSON: {e}"),
                    )
                })?;
                println!("{text}");
            } else {
                print!("{}", super::report::render(&report));
            }
            Ok(if report.passed() == Some(false) {
                Exit::FOUND
            } else {
                Exit::SUCCESS
            })
        }
        Err(e) => {
            if json {
                // The daemon reads this from its child: what went wrong, as data.
                let body = serde_json::json!({ "error": e });
                println!("{body}");
            }
            Err(CliError::new(e.exit_code(), format!("gpuwarden probe: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_lists_parse_and_say_what_is_wrong() {
        assert_eq!(
            parse_tests("gemm_bf16, hbm_copy").unwrap(),
            vec![Test::GemmBf16, Test::HbmCopy]
        );
        assert_eq!(parse_tests("pcie_h2d,pcie_h2d").unwrap(), vec![Test::PcieH2d]);
        let e = parse_tests("gemm_fp8").unwrap_err().to_string();
        assert!(e.contains("gemm_fp8") && e.contains("gemm_bf16, fma_fp32"), "{e}");
        assert!(parse_tests(" , ").is_err());
    }

    #[test]
    fn busy_rules() {
        let config = crate::config::Probe::default(); // 5% utilization, 4096 MiB cap
        assert_eq!(busy_reason(Some(0), Some(0.0), Some(80_000), &config), None);
        assert_eq!(busy_reason(None, None, None, &config), None);
        let (reason, why) = busy_reason(Some(2), Some(0.0), Some(80_000), &config).unwrap();
        assert_eq!(reason, super::super::BusyReason::ComputeProcesses);
        assert!(why.contains("2 compute process"), "{why}");
        let (reason, why) = busy_reason(Some(0), Some(0.06), Some(80_000), &config).unwrap();
        assert_eq!(reason, super::super::BusyReason::Utilization);
        assert!(why.contains("utilization is 6%"), "{why}");
        assert_eq!(busy_reason(Some(0), Some(0.05), Some(80_000), &config), None);
        let (reason, why) = busy_reason(Some(0), Some(0.0), Some(4000), &config).unwrap();
        assert_eq!(reason, super::super::BusyReason::Memory);
        assert!(why.contains("4864 MiB"), "{why}");
    }
}
