//! `gpuwarden probe --collective` over the simulated NVML, CUDA and NCCL (tests/sim-cuda
//! exports NCCL's calls too; `nccl_busbw_gbps` and `nccl_fails` in a GPU's `cuda:` set what
//! the all-reduce does): its bus bandwidth, a failing all-reduce, no NCCL, one GPU.

use crate::common::*;
use std::process::Command;

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
        .env("LD_LIBRARY_PATH", &libraries);
    if json {
        command.arg("--json");
    }
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
