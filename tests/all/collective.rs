//! `gpuwarden probe --collective` over the simulated NVML, CUDA and NCCL (tests/sim-cuda
//! exports NCCL's calls too; `nccl_busbw_gbps` and `nccl_fails` in a GPU's `cuda:` set what
//! the all-reduce does): its bus bandwidth, a failing all-reduce, no NCCL, one GPU.

use crate::common::*;
use std::process::Command;
use std::time::Duration;

fn gpu(uuid_end: &str, bus: &str, extra: &str) -> String {
    format!(
        "  - name: NVIDIA H100 80GB HBM3
    uuid: GPU-557e664c-0911-a952-bda7-8175faf6ad{uuid_end}
    pci_bus_id: \"00000000:{bus}:00.0\"
    utilization: {{gpu: 0, memory: 0}}
    memory: {{total: 85899345920, used: 536870912}}
    cuda: {{gemm_bf16_tflops: 690, fma_fp32_tflops: 65.7, hbm_copy_gbps: 3030, pcie_h2d_gbps: 55.1, pcie_d2h_gbps: 55.2{extra}}}
"
    )
}

/// `gpuwarden probe --collective [--json]` over `scenario`; NCCL on the library path when `nccl`.
fn collective(scenario: &str, nccl: bool, json: bool) -> (Option<i32>, String, String) {
    collective_with(scenario, nccl, if json { &["--json"] } else { &[] })
}

fn collective_with(scenario: &str, nccl: bool, args: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scenario.yaml"), scenario).unwrap();
    std::fs::write(
        dir.path().join("config.yaml"),
        format!("nvml:\n  library_path: {}\n", sim_library().display()),
    )
    .unwrap();
    let libraries = sim_cuda_dir(dir.path(), true);
    if nccl {
        let library = sim_library().with_file_name("libgpuwarden_sim_cuda.so");
        std::os::unix::fs::symlink(library, libraries.join("libnccl.so.2")).unwrap();
    }
    let mut command = Command::new(BIN);
    command
        .args(["probe", "--collective", "--config"])
        .arg(dir.path().join("config.yaml"))
        .env("GPUWARDEN_SIM_NVML_SCENARIO", dir.path().join("scenario.yaml"))
        .env("LD_LIBRARY_PATH", &libraries)
        .args(args);
    let out = command.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_all_reduce_across_the_gpus_gives_its_bus_bandwidth() {
    let node = format!(
        "devices:\n{}{}{}",
        gpu("ad", "19", ""),
        gpu("ae", "3b", ", nccl_busbw_gbps: 300"),
        gpu("af", "4c", "")
    );
    let (code, out, err) = collective(&node, true, true);
    assert_eq!(code, Some(0), "{out}{err}");
    let outcome: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(outcome["gpus"], 3);
    assert_eq!(outcome["nccl"], "2.27.3");
    assert_eq!(outcome["bytes"], 256u64 << 20);
    // The slowest path's bus bandwidth, as NCCL's tests count it.
    let busbw = outcome["bus_bandwidth"].as_f64().unwrap();
    assert!((busbw - 300e9).abs() < 300e9 * 0.01, "{outcome}");
    let (code, text, _) = collective(&node, true, false);
    assert_eq!(code, Some(0));
    assert!(
        text.contains("all-reduce across 3 GPUs (NCCL 2.27.3, 256 MiB each): bus bandwidth 300.0 GB/s"),
        "{text}"
    );
}

#[test]
fn a_failing_all_reduce_no_nccl_and_one_gpu_are_clear_errors() {
    let failing = format!(
        "devices:\n{}{}",
        gpu("ad", "19", ", nccl_fails: true"),
        gpu("ae", "3b", "")
    );
    let (code, _, err) = collective(&failing, true, false);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ncclAllReduce: simulated NCCL error"), "{err}");
    let two = format!("devices:\n{}{}", gpu("ad", "19", ""), gpu("ae", "3b", ""));
    let (code, _, err) = collective(&two, false, false);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("NCCL is not installed") && err.contains("probe.nccl_library"),
        "{err}"
    );
    let one = format!("devices:\n{}", gpu("ad", "19", ""));
    let (code, _, err) = collective(&one, true, false);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs two or more GPUs; this node has 1"), "{err}");
}

/// A GPU whose sums come back wrong fails the checked all-reduce (exit 1, the GPU named);
/// `--gpus` picks GPUs, one alone shows that NCCL runs and sums right, and a wrong list is
/// refused.
#[test]
fn wrong_sums_fail_and_gpus_can_be_picked() {
    let node = format!(
        "devices:\n{}{}{}",
        gpu("ad", "19", ""),
        gpu("ae", "3b", ", nccl_wrong_sum: true"),
        gpu("af", "4c", "")
    );
    let (code, out, err) = collective(&node, true, false);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("FAILED: wrong sums: CUDA device 1 received 1 wrong sum(s) of 1048576: the first at element 0, 6.0000005 where 6 was sent"),
        "{out}"
    );
    let (code, out, err) = collective_with(&node, true, &["--gpus", "0,2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("all-reduce across 2 GPUs"), "{out}");
    let (code, out, err) = collective_with(&node, true, &["--gpus", "2"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("all-reduce on one GPU (NCCL 2.27.3): it ran, and every sum came back right"),
        "{out}"
    );
    let (code, _, err) = collective_with(&node, true, &["--gpus", "0,0"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("GPU 0 is named twice"), "{err}");
    let (code, _, err) = collective_with(&node, true, &["--gpus", "7"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("there is no GPU 7"), "{err}");
}

// ---- The daemon: the all-reduce after the node's last validation ---------------------------

/// One H100 with 18 NVLinks at 26.562 GB/s (478 GB/s one way), as a daemon's scenario has it.
fn linked_gpu(uuid_end: &str, bus: &str, extra: &str) -> String {
    let links = vec!["{up: true}"; 18].join(", ");
    format!(
        "{}    nvlink_speed_mbps: 26562\n    nvlinks: [{links}]\n",
        gpu(uuid_end, bus, extra).replace("    utilization:", "    temperature: 41\n    utilization:")
    )
}

/// A daemon validating its idle node every 2 s (`probe.mode: node`) over the simulated CUDA,
/// with NCCL on the library path when `nccl`.
fn sweeping_daemon(scenario: &str, nccl: bool, extra: &str) -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let libraries = sim_cuda_dir(dir.path(), true);
    if nccl {
        let library = sim_library().with_file_name("libgpuwarden_sim_cuda.so");
        std::os::unix::fs::symlink(library, libraries.join("libnccl.so.2")).unwrap();
    }
    let env = [("LD_LIBRARY_PATH", libraries.display().to_string())];
    let probes = format!(
        "probe:\n  schedule: true\n  mode: node\n  interval: 2s\n  memory_cap_mib: 256\n  max_utilization: 0.5\n  \
         timeout: 20s\n  tests: [gemm_bf16, hbm_copy]\n  durations: {{gemm_bf16: 200ms, hbm_copy: 200ms}}\n{extra}"
    );
    let d = Daemon::start_full(scenario, &test_config(&sim_library(), &probes), "", &env);
    (d, dir)
}

/// The node's finding of `reason`, its message.
fn node_finding(d: &Daemon, reason: &str) -> Option<String> {
    let verdict: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).ok()?;
    verdict["node_findings"]
        .as_array()?
        .iter()
        .find(|f| f["reason"] == reason)
        .and_then(|f| f["message"].as_str().map(str::to_string))
}

fn runs(m: &Metrics, result: &str) -> f64 {
    m.value("gpuwarden_collective_runs_total", &[("result", result)])
        .unwrap_or(0.0)
}

/// The idle node's sweep ends with the all-reduce: its bus bandwidth against the NVLinks'
/// bound, the journal's row, the validation's note and the report's section. A path that
/// carries less than half its bound is `collective_slow` (degraded), named with its GPUs.
#[test]
fn the_idle_sweep_ends_with_the_all_reduce_and_a_slow_path_is_degraded() {
    let node = |busbw: &str| {
        format!(
            "devices:\n{}{}",
            linked_gpu("ad", "19", ""),
            linked_gpu("ae", "3b", busbw)
        )
    };
    let (d, _dir) = sweeping_daemon(&node(""), true, "");
    let m = d.scrape_until_within("an all-reduce passed", Duration::from_secs(60), |m| {
        runs(m, "passed") >= 1.0
    });
    let busbw = m
        .value("gpuwarden_collective_bus_bandwidth_bytes_per_second", &[])
        .unwrap();
    assert!((busbw - 360e9).abs() < 360e9 * 0.02, "{busbw}");
    let bound = m.value("gpuwarden_collective_bound_bytes_per_second", &[]).unwrap();
    assert!((bound - 18.0 * 26.562e9).abs() < 1e6, "{bound}");
    assert_eq!(
        m.value("gpu_nvlink_speed_bytes_per_second", &[("gpu", "1")]),
        Some(18.0 * 26.562e9)
    );
    assert_eq!(node_finding(&d, "collective_slow"), None);
    let state = d.state_path();
    let row = eventually("the collective row", Duration::from_secs(10), || {
        events_json(&state, &["--kind", "collective"])
            .as_array()?
            .first()
            .cloned()
    });
    assert_eq!(row["details"]["run"]["verdict"], "passed", "{row}");
    assert_eq!(
        row["details"]["run"]["path"], "NVLink, 18 links x 26.6 GB/s per GPU",
        "{row}"
    );
    let validation = eventually("a sweep validation that ran it", Duration::from_secs(10), || {
        let rows = events_json(&state, &["--kind", "validation"]);
        rows.as_array()?
            .iter()
            .find(|r| {
                r["summary"]
                    .as_str()
                    .is_some_and(|s| s.contains("the all-reduce across GPUs 0, 1"))
            })
            .cloned()
    });
    assert!(
        validation["summary"]
            .as_str()
            .unwrap()
            .contains("passed: bus bandwidth 360.0 GB/s (NCCL 2.27.3)"),
        "{validation}"
    );
    let report = report_markdown(&state, "1");
    let section = report_section(&report, "The GPUs together (all-reduce)").unwrap_or_else(|| panic!("{report}"));
    assert!(section.contains("all-reduce across GPUs 0, 1 over NVLink"), "{section}");

    // GPU 1's links carry 150 GB/s now: 31% of the bound.
    d.set_scenario(&node(", nccl_busbw_gbps: 150"));
    let slow = eventually("collective_slow", Duration::from_secs(60), || {
        node_finding(&d, "collective_slow")
    });
    assert!(
        slow.starts_with("the all-reduce across GPUs 0, 1 over NVLink, 18 links x 26.6 GB/s per GPU was slow at "),
        "{slow}"
    );
    assert!(
        slow.contains("150.0 GB/s is 31% of what the path carries one way (478.1 GB/s"),
        "{slow}"
    );
    let (code, text) = d.health(false);
    assert!(text.contains("collective_slow"), "{code} {text}");
}

/// A GPU whose sums come out wrong fails the all-reduce: `collective_failed` holds the node
/// (unhealthy, kept across a restart) until a GPU of it is cleared; the validation that
/// follows runs the all-reduce again, and a right one lets the node back.
#[test]
fn a_wrong_sum_fails_the_node_until_a_clear_and_a_right_all_reduce() {
    let node = |wrong: bool| {
        format!(
            "devices:\n{}{}",
            linked_gpu("ad", "19", ""),
            linked_gpu("ae", "3b", if wrong { ", nccl_wrong_sum: true" } else { "" })
        )
    };
    let (d, _dir) = sweeping_daemon(&node(true), true, "");
    let failed = eventually("collective_failed", Duration::from_secs(60), || {
        node_finding(&d, "collective_failed")
    });
    assert!(
        failed.contains("over NVLink, 18 links x 26.6 GB/s per GPU failed at "),
        "{failed}"
    );
    assert!(
        failed.contains(
            "the all-reduce gave wrong sums: CUDA device 1 received 1 wrong sum(s) of 1048576: the first at element 0"
        ),
        "{failed}"
    );
    let (code, _) = d.health(false);
    assert_eq!(code, 1, "unhealthy");
    assert_eq!(runs(&d.scrape(), "failed"), 1.0);

    // Repaired; the finding stays across a restart until a person clears a GPU of it.
    d.set_scenario(&node(false));
    let d = d.restart(false, None);
    assert!(
        node_finding(&d, "collective_failed").is_some(),
        "kept across the restart"
    );
    holds_for("no sweep on an unhealthy node", Duration::from_secs(5), || {
        match runs(&d.scrape(), "passed") {
            0.0 => Ok(()),
            n => Err(format!("{n} passed")),
        }
    });
    let (_, out, err) = d.clear("1", "reseated the NVLink bridge", &[]);
    assert!(out.contains("cleared"), "{out}{err}");
    d.scrape_until_within("a right all-reduce after the clear", Duration::from_secs(60), |m| {
        runs(m, "passed") >= 1.0
    });
    assert_eq!(node_finding(&d, "collective_failed"), None);
    // The journal keeps both runs, the failed one and the right one after the clear.
    let state = d.state_path();
    eventually("both rows", Duration::from_secs(10), || {
        let rows = events_json(&state, &["--kind", "collective"]);
        let verdicts: Vec<String> = rows
            .as_array()?
            .iter()
            .filter_map(|r| r["details"]["run"]["verdict"].as_str().map(String::from))
            .collect();
        (verdicts.iter().any(|v| v == "failed") && verdicts.iter().any(|v| v == "passed")).then_some(())
    });
}

/// An all-reduce that hangs is killed after `probe.timeout` and fails; a node without NCCL
/// skips it and says so once.
#[test]
fn a_hung_all_reduce_fails_and_a_node_without_nccl_says_so_once() {
    let hung = format!(
        "devices:\n{}{}",
        linked_gpu("ad", "19", ", nccl_hangs: true"),
        linked_gpu("ae", "3b", "")
    );
    let (d, _dir) = sweeping_daemon(&hung, true, "");
    let failed = eventually("the hang failed", Duration::from_secs(90), || {
        node_finding(&d, "collective_failed")
    });
    assert!(
        failed.contains("it hung: the probe did not finish within probe.timeout"),
        "{failed}"
    );
    drop(d);

    let plain = format!("devices:\n{}{}", linked_gpu("ad", "19", ""), linked_gpu("ae", "3b", ""));
    let (d, _dir) = sweeping_daemon(&plain, false, "");
    d.scrape_until_within("two sweeps skipped it", Duration::from_secs(60), |m| {
        runs(m, "skipped") >= 2.0
    });
    let log = d.log_text();
    assert_eq!(
        log.matches("the all-reduce across the node's GPUs does not run: NCCL is not installed")
            .count(),
        1,
        "{log}"
    );
    assert_eq!(node_finding(&d, "collective_failed"), None);
    // Not held: ready between sweeps (exit 3 while a sweep's validation runs, which a loaded
    // machine can catch; held, it would answer 1 every time).
    eventually("a node without NCCL not held for it", Duration::from_secs(30), || {
        let (code, out) = d.health(false);
        assert_ne!(code, 1, "held: {out}");
        (code == 0).then_some(())
    });
}

/// A stop while the all-reduce runs (here it hangs) ends no validation: the one it followed
/// stays pending (not passed, not in the log, not in the journal), as one whose own probe a
/// stop cut short does, and the next start runs it again.
#[test]
fn a_stop_during_the_all_reduce_leaves_its_validation_pending() {
    let hung = format!(
        "devices:\n{}{}",
        linked_gpu("ad", "19", ""),
        linked_gpu("ae", "3b", ", nccl_hangs: true")
    );
    let (d, _dir) = sweeping_daemon(&hung, true, "");
    d.wait_for_log(
        "the all-reduce across the node's 2 NVIDIA GPUs starts",
        1,
        Duration::from_secs(60),
    );
    d.signal(libc::SIGTERM);
    d.wait_for_log("stopped in", 1, Duration::from_secs(10));
    let log = d.log_text();
    assert!(
        !log.contains("GPU 1 validated"),
        "the stop cut the all-reduce short:\n{log}"
    );
    assert!(log.contains("GPU 0 validated"), "GPU 0's came before it:\n{log}");
    let rows = events_json(&d.state_path(), &["--kind", "validation", "--gpu", "1"]);
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["details"]["state"] != "passed"),
        "{rows}"
    );
}
