//! The CUDA probe end to end, over the simulated NVML and the simulated CUDA driver and
//! cuBLAS (tests/sim-cuda), which make each GPU measure the rates its scenario gives it:
//! `gpuwarden probe` exit codes, reports and errors, and the daemon's scheduled probes with
//! their skip rules, metrics, health and status page.

use crate::common;
use common::*;
use std::process::{Command, Output};
use std::time::Duration;

const H100: &str = "devices:
  - name: NVIDIA H100 80GB HBM3
    uuid: GPU-557e664c-0911-a952-bda7-8175faf6adad
    pci_bus_id: \"00000000:19:00.0\"
    temperature: 41
    power_mw: 650000
    clocks_mhz: {sm: 1755}
    clock_events: {active: 4, supported: 511}
    utilization: {gpu: 0, memory: 0}
    memory: {total: 85899345920, used: 536870912}
    gpm: {sm: 96, tensor: 93, dram: 17}
    cuda: {gemm_bf16_tflops: 690, fma_fp32_tflops: 65.7, hbm_copy_gbps: 3030, pcie_h2d_gbps: 55.1, pcie_d2h_gbps: 55.2}
";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// The tests' durations: short, as the simulated CUDA measures the same rate at any length.
const SHORT: &str = "gemm_bf16: 300ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms";

/// Runs `gpuwarden probe ARGS` over `scenario`, with the simulated CUDA in `cuda` (None:
/// no CUDA driver at all). The config gets `extra` appended.
fn probe(scenario: &str, cuda: Option<bool>, extra: &str, args: &[&str]) -> Run {
    probe_for(SHORT, scenario, cuda, extra, args)
}

/// `probe` with the tests' `durations` (a YAML flow map's inside) given.
fn probe_for(durations: &str, scenario: &str, cuda: Option<bool>, extra: &str, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scenario.yaml"), scenario).unwrap();
    let config = format!(
        "nvml:\n  library_path: {}\nprobe:\n  memory_cap_mib: 256\n  durations: {{{durations}}}\n{extra}",
        sim_library().display()
    );
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    let mut command = Command::new(BIN);
    command
        .arg("probe")
        .arg("--config")
        .arg(dir.path().join("config.yaml"))
        .args(args)
        .env("GPUWARDEN_SIM_NVML_SCENARIO", dir.path().join("scenario.yaml"));
    if let Some(cublas) = cuda {
        command.env("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), cublas));
    }
    let Output { status, stdout, stderr } = command.output().unwrap();
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn report(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr))
}

fn test_result<'a>(report: &'a serde_json::Value, test: &str) -> &'a serde_json::Value {
    report["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["test"] == test)
        .unwrap_or_else(|| panic!("no {test} in {report}"))
}

fn close(value: &serde_json::Value, expected: f64) -> bool {
    value.as_f64().is_some_and(|v| (v - expected).abs() <= expected * 0.01)
}

#[test]
fn a_healthy_gpu_passes_and_the_report_has_what_it_measured() {
    // GPM's activity needs two samples a window apart under load: a GEMM of 300 ms held one
    // sample on a loaded machine (every 100 ms by default). A second of GEMM sampled every
    // 50 ms gives about 20, and the means below are never made up from fewer than two.
    let durations = SHORT.replace("gemm_bf16: 300ms", "gemm_bf16: 1s");
    let run = probe_for(&durations, H100, Some(true), "  sample_interval: 50ms\n", &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = report(&run);
    assert_eq!(r["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(r["uuid"], "GPU-557e664c-0911-a952-bda7-8175faf6adad");
    assert_eq!(r["expectation"], "shipped: H100 80GB HBM3");
    let gemm = test_result(&r, "gemm_bf16");
    assert!(
        close(&gemm["sustained"], 690e12) && close(&gemm["burst"], 690e12),
        "{gemm}"
    );
    assert_eq!(gemm["expected"], 670e12);
    assert_eq!(gemm["pass"], true);
    // memory_cap_mib 256 shrinks the GEMM and the buffers; the report says so.
    assert_eq!(gemm["params"]["n"], 4096);
    assert_eq!(test_result(&r, "hbm_copy")["params"]["bytes"], 64 << 20);
    for (test, rate) in [
        ("fma_fp32", 65.7e12),
        ("hbm_copy", 3030e9),
        ("pcie_h2d", 55.1e9),
        ("pcie_d2h", 55.2e9),
    ] {
        let t = test_result(&r, test);
        assert!(close(&t["sustained"], rate), "{t}");
        assert_eq!(t["pass"], true, "{t}");
    }
    // The NVML samples taken while it ran.
    let under = &gemm["under_load"];
    assert!(under["samples"].as_u64().unwrap() >= 2, "{under}");
    assert_eq!(under["peak_temperature_celsius"], 41.0);
    assert_eq!(under["mean_sm_clock_hertz"], 1755e6);
    assert_eq!(under["mean_power_watts"], 650.0);
    // GPM activity while it ran (the simulated GPU reports the same in every interval).
    for (key, expected) in [
        ("mean_sm_active_ratio", 0.96),
        ("mean_tensor_active_ratio", 0.93),
        ("mean_dram_active_ratio", 0.17),
    ] {
        assert!(close(&under[key], expected), "{key}: {under}");
    }
    assert!(
        under["clock_event_seconds"]["sw_power_cap"].as_f64().unwrap() > 0.0,
        "{under}"
    );
}

#[test]
fn a_slow_gpu_fails_the_test_it_is_slow_at_and_exits_1() {
    let slow = H100.replace("hbm_copy_gbps: 3030", "hbm_copy_gbps: 1500");
    let run = probe(&slow, Some(true), "", &[]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    let hbm = run.stdout.lines().find(|l| l.starts_with("hbm_copy")).unwrap();
    assert!(
        hbm.contains("1500.0 GB/s") && hbm.contains("3000.0 GB/s") && hbm.contains("FAIL"),
        "{hbm}"
    );
    let gemm = run.stdout.lines().find(|l| l.starts_with("gemm_bf16")).unwrap();
    assert!(gemm.contains("pass"), "{gemm}");
    assert!(run.stdout.trim_end().ends_with(": FAIL"), "{}", run.stdout);
}

#[test]
fn the_config_overrides_the_expected_values() {
    let slow = H100.replace("hbm_copy_gbps: 3030", "hbm_copy_gbps: 1500");
    let extra = "  pass_fraction: 0.95\n  expected:\n    - match: H100\n      hbm_copy_gbps: 1550\n";
    let run = probe(&slow, Some(true), extra, &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = report(&run);
    assert_eq!(r["expectation"], "config: H100 over shipped: H100 80GB HBM3");
    assert_eq!(r["pass_fraction"], 0.95);
    assert_eq!(test_result(&r, "hbm_copy")["expected"], 1550e9);
    assert_eq!(test_result(&r, "gemm_bf16")["expected"], 670e12);
}

#[test]
fn a_model_without_expected_values_gets_figures_but_no_verdict() {
    let rtx = H100.replace("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090");
    // The throughput tests only: the correctness canary has a verdict on any model.
    let run = probe(
        &rtx,
        Some(true),
        "",
        &["--tests", "gemm_bf16,fma_fp32,hbm_copy,pcie_h2d,pcie_d2h"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("expected values: none for this model"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.trim_end().ends_with("no verdict"), "{}", run.stdout);
}

#[test]
fn tests_can_be_chosen_and_a_wrong_name_is_refused() {
    let run = probe(H100, Some(true), "", &["--json", "--tests", "hbm_copy,gemm_bf16"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = report(&run);
    let names: Vec<&str> = r["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hbm_copy", "gemm_bf16"]);
    let run = probe(H100, Some(true), "", &["--tests", "gemm_fp8"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("unknown test \"gemm_fp8\""), "{}", run.stderr);
}

#[test]
fn without_cublas_the_gemm_is_skipped_and_the_rest_runs() {
    let run = probe(H100, Some(false), "", &["--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let r = report(&run);
    let gemm = test_result(&r, "gemm_bf16");
    assert!(gemm["skipped"].as_str().unwrap().contains("cuBLAS"), "{gemm}");
    assert!(
        gemm["pass"].is_null(),
        "a missing library is not the GPU's fault: {gemm}"
    );
    assert_eq!(test_result(&r, "hbm_copy")["pass"], true);
}

#[test]
fn a_gpu_whose_kernels_fail_fails_the_probe() {
    let faulty = H100.replace("pcie_d2h_gbps: 55.2}", "pcie_d2h_gbps: 55.2, launch_fails: true}");
    let run = probe(&faulty, Some(true), "", &["--json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = report(&run);
    let fma = test_result(&r, "fma_fp32");
    assert!(
        fma["skipped"]
            .as_str()
            .unwrap()
            .starts_with("failed: launching fma_fp32"),
        "{fma}"
    );
    assert_eq!(fma["pass"], false);
}

#[test]
fn a_busy_gpu_is_refused_unless_forced() {
    let busy = H100.replace("    utilization:", "    compute_processes: 2\n    utilization:");
    let run = probe(&busy, Some(true), "", &[]);
    assert_eq!(run.code, 3);
    assert!(
        run.stderr
            .contains("GPU 0 is not idle: 2 compute process(es) are running on it; run with --force"),
        "{}",
        run.stderr
    );
    let run = probe(&busy, Some(true), "", &["--force"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let hot = H100.replace("utilization: {gpu: 0", "utilization: {gpu: 80");
    let run = probe(&hot, Some(true), "", &["--json"]);
    assert_eq!(run.code, 3);
    let error: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(error["error"]["kind"], "busy");
    assert_eq!(error["error"]["message"]["reason"], "utilization");
}

#[test]
fn no_cuda_driver_no_nvml_and_no_such_gpu_are_clear_errors() {
    let run = probe(H100, None, "", &["--json"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("libcuda.so.1) is not installed"), "{}", run.stderr);
    assert_eq!(report(&run)["error"]["kind"], "no_driver");
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);

    let run = probe(H100, Some(true), "", &["--gpu", "3"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("there is no GPU 3; this node has 1"),
        "{}",
        run.stderr
    );

    // A GPU NVML lists and CUDA does not (MIG, CUDA_VISIBLE_DEVICES).
    let hidden = H100.replace("    cuda: {", "    not_cuda: {").replace("not_cuda: {gemm_bf16_tflops: 690, fma_fp32_tflops: 65.7, hbm_copy_gbps: 3030, pcie_h2d_gbps: 55.1, pcie_d2h_gbps: 55.2}\n", "");
    let hidden = hidden
        .lines()
        .filter(|l| !l.contains("not_cuda"))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    let run = probe(&hidden, Some(true), "", &[]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("CUDA does not see GPU-557e664c"), "{}", run.stderr);

    let out = Command::new(BIN)
        .args(["probe", "--config", "/dev/null"])
        .env("GPUWARDEN_SIM_NVML_SCENARIO", "/nonexistent")
        .output()
        .unwrap();
    // /dev/null is an empty config: defaults, the real libnvidia-ml.so.1, absent here.
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot load NVML (libnvidia-ml.so.1)"), "{stderr}");
}

/// The daemon's scheduled probes: GPU 0 idle and healthy, GPU 1 runs a job, GPU 2 is at 90%
/// utilization, GPU 3 is slow at HBM copies, GPU 4's CUDA context hangs (probe.timeout).
#[test]
fn scheduled_probes_run_on_idle_gpus_only_and_show_in_metrics_health_and_status_page() {
    let idle = all_idle(&with_cuda(DEMO_SCENARIO));
    let scenario = idle;
    let scenario = edit_device(&scenario, 1, |d| format!("{d}    compute_processes: 1\n"));
    let scenario = edit_device(&scenario, 2, |d| {
        d.replace("utilization: { gpu: 0", "utilization: { gpu: 90")
    });
    let scenario = edit_device(&scenario, 3, |d| {
        d.replace("hbm_copy_gbps: 4300", "hbm_copy_gbps: 2000")
    });
    // (Not a hung NVML process query any more: the daemon's own poll asks for the processes
    // now, so that would take the GPU down, not the probe.)
    let scenario = edit_device(&scenario, 4, |d| {
        d.replace("pcie_d2h_gbps: 55}", "pcie_d2h_gbps: 55, context_hang_seconds: 30}")
    });
    let probes = FAST_PROBES
        .replace("max_utilization: 1.0", "max_utilization: 0.5")
        .replace("timeout: 20s", "timeout: 8s");
    let config = test_config(&sim_library(), &probes);
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let d = Daemon::start_full(&scenario, &config, "", &env);
    // Probes one after the other, GPU 4's killed after its 8 s timeout (its context hangs for
    // 30 s). The timeout is no tighter: under three times the load of the 2-core machine's
    // cores (four test threads and stress-ng), a healthy probe child took over 3 s and every
    // GPU read `timeout` (2026-12-06). The wait is a deadline, not a sleep.
    let m = d.scrape_until_within("probes of GPUs 0-4", std::time::Duration::from_secs(90), |m| {
        m.value("gpu_probe_pass", &[("gpu", "0"), ("test", "gemm_bf16")])
            .is_some()
            && m.value("gpu_probe_pass", &[("gpu", "3"), ("test", "hbm_copy")])
                .is_some()
            && m.value("gpu_probe_runs_total", &[("gpu", "4"), ("result", "timeout")])
                .is_some()
            && m.value("gpu_probe_skipped_total", &[("gpu", "1")]).is_some()
            && m.value("gpu_probe_skipped_total", &[("gpu", "2")]).is_some()
    });
    // GPU 0: every figure, the expected value, the ratio and the under-load readings.
    let gpu0 = |name: &str, test: &str| m.value(name, &[("gpu", "0"), ("test", test)]);
    assert_eq!(gpu0("gpu_probe_pass", "hbm_copy"), Some(1.0));
    let sustained = m.value(
        "gpu_probe_flops_per_second",
        &[("gpu", "0"), ("test", "gemm_bf16"), ("figure", "sustained")],
    );
    assert!(sustained.is_some_and(|v| (v - 675e12).abs() < 7e12), "{sustained:?}");
    let hbm = m.value(
        "gpu_probe_bytes_per_second",
        &[("gpu", "0"), ("test", "hbm_copy"), ("figure", "burst")],
    );
    assert!(hbm.is_some_and(|v| (v - 4300e9).abs() < 43e9), "{hbm:?}");
    assert!(gpu0("gpu_probe_expected_flops_per_second", "gemm_bf16").is_some());
    assert!(gpu0("gpu_probe_ratio", "gemm_bf16").is_some_and(|r| r > 1.0));
    assert!(gpu0("gpu_probe_peak_temperature_celsius", "gemm_bf16").is_some());
    assert!(gpu0("gpu_probe_duration_seconds", "gemm_bf16").is_some());
    assert!(
        m.value("gpu_probe_last_run_timestamp_seconds", &[("gpu", "0")])
            .is_some()
    );
    assert!(
        m.value("gpu_probe_runs_total", &[("gpu", "0"), ("result", "pass")])
            .unwrap()
            >= 1.0
    );
    // GPU 1 and 2 were busy: skipped, counted by reason, never probed.
    assert!(
        m.value(
            "gpu_probe_skipped_total",
            &[("gpu", "1"), ("reason", "compute_processes")]
        )
        .is_some()
    );
    assert!(
        m.value("gpu_probe_skipped_total", &[("gpu", "2"), ("reason", "utilization")])
            .is_some()
    );
    assert!(
        m.value("gpu_probe_pass", &[("gpu", "1"), ("test", "gemm_bf16")])
            .is_none()
    );
    // GPU 3 failed the copy and is degraded for it.
    assert_eq!(
        m.value("gpu_probe_pass", &[("gpu", "3"), ("test", "hbm_copy")]),
        Some(0.0)
    );
    assert_eq!(
        m.value("gpu_probe_pass", &[("gpu", "3"), ("test", "gemm_bf16")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "3"), ("reason", "probe_failed")]),
        Some(1.0)
    );
    assert_eq!(m.value("gpu_health", &[("gpu", "3"), ("state", "degraded")]), Some(1.0));
    assert!(
        d.log_text().contains("GPU 3 failed the probe: hbm_copy"),
        "{}",
        d.log_text()
    );
    // The status page says what happened to each.
    let page = d.get("/", &[]).page_text();
    assert!(page.contains("pass <small>"), "{page}");
    assert!(
        page.contains("FAIL</span>") && page.contains("hbm_copy 2000.0 GB/s of 4000.0 GB/s"),
        "{page}"
    );
    assert!(
        page.contains("could not run: the probe did not finish within probe.timeout"),
        "{page}"
    );
    // The daemon itself served throughout and stops cleanly, killing no one's work.
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn a_node_without_cuda_keeps_serving_and_counts_the_errors() {
    let config = test_config(&sim_library(), FAST_PROBES);
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("a failed probe run", |m| {
        m.value("gpu_probe_runs_total", &[("gpu", "0"), ("result", "error")])
            .is_some()
    });
    assert_eq!(m.value("gpu_up", &[("gpu", "0")]), Some(1.0));
    assert!(!m.has_family("gpu_probe_pass"));
    let page = d.get("/", &[]).page_text();
    assert!(
        page.contains("could not run: the CUDA driver library (libcuda.so.1) is not installed"),
        "{page}"
    );
    assert!(d.log_text().contains("probe could not run"), "{}", d.log_text());
    assert_eq!(d.stop(), Some(0));
}

/// Probe baselines (issue "Validate, don't only watch", item 2): two H100s probed in turn,
/// GPU 0 slowing by 10% over five probes (2% each). `probe_regressed` comes once it is more
/// than `probe.regression_pct` (7%) below its own baseline and its neighbour, not before;
/// GPU 1 stays clear. The report shows the history against the baseline, the status page
/// charts it, and a restart takes the baseline back from the journal.
#[test]
fn a_gpu_slowing_by_ten_percent_over_five_probes_is_regressed_against_its_baseline_and_its_neighbour() {
    let second = H100
        .trim_start_matches("devices:\n")
        .replace(
            "GPU-557e664c-0911-a952-bda7-8175faf6adad",
            "GPU-557e664c-0911-a952-bda7-8175faf6adae",
        )
        .replace("00000000:19:00.0", "00000000:3b:00.0");
    let node = |gemm0: f64| {
        format!(
            "{}{second}",
            H100.replace("gemm_bf16_tflops: 690", &format!("gemm_bf16_tflops: {gemm0}"))
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let config = test_config(&sim_library(), FAST_PROBES);
    let d = Daemon::start_full(&node(690.0), &config, "", &env);
    let runs = |m: &Metrics| {
        m.value("gpu_probe_runs_total", &[("gpu", "0"), ("result", "pass")])
            .unwrap_or(0.0)
    };
    d.scrape_until_within("four steady probes of GPU 0", Duration::from_secs(60), |m| {
        runs(m) >= 4.0
    });
    let regressed =
        |m: &Metrics, gpu: &str| m.value("gpu_health_reason", &[("gpu", gpu), ("reason", "probe_regressed")]);
    let sustained = |m: &Metrics| {
        m.value(
            "gpu_probe_flops_per_second",
            &[("gpu", "0"), ("test", "gemm_bf16"), ("figure", "sustained")],
        )
    };
    for (step, expect) in [(0.98, false), (0.96, false), (0.94, false), (0.92, true), (0.90, true)] {
        let rate = 690.0 * step;
        d.set_scenario(&node(rate));
        let m = d.scrape_until_within(&format!("a probe at {rate} TFLOP/s"), Duration::from_secs(30), |m| {
            sustained(m).is_some_and(|v| (v / 1e12 - rate).abs() < rate * 0.005)
        });
        assert_eq!(regressed(&m, "0").is_some(), expect, "at {step}: {:?}", sustained(&m));
        assert_eq!(regressed(&m, "1"), None, "the steady neighbour");
    }
    let finding = health_finding(&d, "0", "probe_regressed").expect("the finding");
    assert_eq!(finding["severity"], "degraded");
    let message = finding["message"].as_str().unwrap();
    assert!(message.contains("gemm_bf16 sustained 621."), "the figure: {message}");
    // The baseline is the median of its earlier probes, some of them already slower.
    assert!(
        message.contains("% below its own baseline 6"),
        "its own reference: {message}"
    );
    assert!(
        message.contains("10.0% below the node's median for its model 690.0 TFLOP/s (1 other GPUs)"),
        "the node's: {message}"
    );

    // The report: each probe against the baseline of those before it (once the journal has
    // written the last one: it writes at most once a second).
    let report = eventually("the last probe in the report", Duration::from_secs(10), || {
        let text = report_markdown(&d.state_path(), "0");
        text.contains("621.0 TFLOP/s").then_some(text)
    });
    assert!(report.contains("## Probe history"), "{report}");
    assert!(
        report.contains("| gemm_bf16 sustained (burst), vs own baseline |"),
        "{report}"
    );
    // Against its own baseline, the median of the probes before it: how many ran at full
    // speed before the slowing began depends on the machine's pace, so 8 to 10 % below.
    let below: f64 = report
        .lines()
        .find(|l| l.contains("| 621.0 TFLOP/s (621.0 TFLOP/s), "))
        .and_then(|l| l.split("| 621.0 TFLOP/s (621.0 TFLOP/s), ").nth(1))
        .and_then(|rest| rest.split('%').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 621.0 row with its distance below the baseline: {report}"));
    assert!((8.0..=10.0).contains(&below), "{below}% below: {report}");
    // The status page charts it.
    let page = d.get("/", &[]).page_text();
    assert!(page.contains("baseline 690.0 TFLOP/s"), "{page}");

    // A restart: the baseline comes back from the journal, so the next probe is judged
    // against the GPU's own history at once (not "none yet").
    let d = d.restart(false, None);
    d.scrape_until_within("a probe after the restart", Duration::from_secs(30), |m| runs(m) >= 1.0);
    let message = eventually("the finding after the restart", Duration::from_secs(10), || {
        health_finding(&d, "0", "probe_regressed").and_then(|f| f["message"].as_str().map(str::to_string))
    });
    assert!(message.contains("% below its own baseline 6"), "{message}");
}

/// The finding `reason` of GPU `gpu` in the daemon's verdict (`/api/v1/health`).
fn health_finding(d: &Daemon, gpu: &str, reason: &str) -> Option<serde_json::Value> {
    let verdict: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).ok()?;
    verdict["gpus"]
        .as_array()?
        .iter()
        .find(|g| g["index"].as_u64().map(|i| i.to_string()).as_deref() == Some(gpu))?["findings"]
        .as_array()?
        .iter()
        .find(|f| f["reason"] == reason)
        .cloned()
}

/// A daemon stopped while a validation probe runs (a restart, an upgrade) does not fail the
/// validation (issue #51: a stop is not a hung probe): the probe is killed, the validation
/// stays pending, and after the restart the GPU is still `validating`, not `probe_failed`
/// until a person clears it again.
#[test]
fn a_stop_during_a_validation_probe_leaves_it_pending() {
    let probes = "probe:\n  schedule: false\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 60s\n  \
         durations: {gemm_bf16: 20s, fma_fp32: 20s, hbm_copy: 20s, pcie_h2d: 20s, pcie_d2h: 20s}\n\
         health:\n  xid_severity: {94: fatal}\n";
    let cuda = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda.path(), true).display().to_string())];
    let scenario = all_idle(&with_cuda(DEMO_SCENARIO));
    let mut d = Daemon::start_full(&scenario, &test_config(&sim_library(), probes), "", &env);
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=x, Contained: SM (0x1)\n");
    d.scrape_until("GPU 0 unhealthy", |m| {
        m.value("gpu_health", &[("gpu", "0"), ("state", "unhealthy")]) == Some(1.0)
    });
    let (_, out, err) = d.clear("0", "replaced the board, INC-9", &[]);
    assert!(out.contains("validating"), "{out}{err}");
    d.wait_for_log("GPU 0 validation: probing it", 1, Duration::from_secs(30));
    // Meant: the stop comes half a second into the validation's probe.
    std::thread::sleep(Duration::from_millis(500));
    d.signal(15);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    let log = d.log_text();
    assert!(!log.contains("failed its validation"), "{log}");
    let d = d.restart(false, None);
    d.scrape_until("the first poll after the restart", |m| {
        m.value("gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    let (code, text) = d.health(false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("GPU 0 validating"), "{text}");
    assert!(!text.contains("probe_failed"), "{text}");
}
