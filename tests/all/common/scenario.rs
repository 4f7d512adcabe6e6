//! The simulated vendor libraries the tests load, and edits of their scenario files.

use super::BIN;
use std::path::{Path, PathBuf};

/// The demo's eight H200s, the richest scenario we ship.
pub const DEMO_SCENARIO: &str = include_str!("../../../config/demo-scenario.yaml");

/// The simulated libnvidia-ml that cargo built as a dependency of the daemon.
pub fn sim_library() -> PathBuf {
    let dir = Path::new(BIN).parent().expect("binary has a directory");
    // Cargo builds it into deps/ as the daemon's dependency and copies it up a level only when
    // it builds the crate itself (`cargo test --workspace`): the newer of the two is current,
    // as the demo picks it.
    let file = gpuwarden::cli::demo::LIBRARY_FILE;
    gpuwarden::cli::demo::newest_first(vec![dir.join(file), dir.join("deps").join(file)])
        .into_iter()
        .find(|candidate| candidate.exists())
        .unwrap_or_else(|| panic!("{file} not found next to {BIN}; run the tests with cargo test"))
}

/// The simulated library built as an old driver (tests/sim-nvml-old): some symbols missing.
pub fn old_sim_library() -> PathBuf {
    sim_library().with_file_name("libgpuwarden_sim_nvml_old.so")
}

/// Edits one device of a scenario: `edit(yaml_of_device_i)`. The scenario files are ours, so
/// a line-based edit keyed on the device's uuid is enough.
pub fn edit_device(scenario: &str, index: usize, edit: impl Fn(&str) -> String) -> String {
    let marker = format!("-00000000000{index}\n");
    let start = scenario.find(&marker).expect("device in scenario");
    let start = scenario[..start].rfind("  - name:").expect("device start");
    let end = scenario[start + 4..]
        .find("  - name:")
        .map(|e| e + start + 4)
        .unwrap_or(scenario.len());
    format!(
        "{}{}{}",
        &scenario[..start],
        edit(&scenario[start..end]),
        &scenario[end..]
    )
}

/// Replaces `key: old` with `key: new` on the first line that starts with the key.
pub fn set_line(device_yaml: &str, key: &str, new_value: &str) -> String {
    let prefix = format!("    {key}:");
    let mut out = String::new();
    let mut done = false;
    for line in device_yaml.lines() {
        if !done && line.starts_with(&prefix) {
            out.push_str(&format!("{prefix} {new_value}\n"));
            done = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(done, "no {key} in device");
    out
}

/// A directory holding the simulated CUDA driver (and, with `cublas`, cuBLAS) under the
/// names the probe looks for; put it on LD_LIBRARY_PATH.
pub fn sim_cuda_dir(parent: &Path, cublas: bool) -> PathBuf {
    let library = sim_library().with_file_name("libgpuwarden_sim_cuda.so");
    assert!(
        library.exists(),
        "{} not built; run the tests with cargo test",
        library.display()
    );
    let dir = parent.join(if cublas { "cuda-with-cublas" } else { "cuda-only" });
    std::fs::create_dir_all(&dir).expect("create the sim CUDA directory");
    let mut names = vec!["libcuda.so", "libcuda.so.1"];
    if cublas {
        names.extend(["libcublas.so", "libcublas.so.13"]);
    }
    for name in names {
        let link = dir.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink(&library, &link).expect("symlink the sim CUDA library");
        }
    }
    dir
}

/// Gives every device of a scenario simulated CUDA rates (an H200's, healthy), in place of
/// any it had (the demo's scenario has the same).
pub fn with_cuda(scenario: &str) -> String {
    let rates = "    cuda: {gemm_bf16_tflops: 675, fma_fp32_tflops: 65, hbm_copy_gbps: 4300, pcie_h2d_gbps: 55, pcie_d2h_gbps: 55}\n";
    let mut out = String::new();
    let mut in_device = false;
    for line in scenario.lines().filter(|l| !l.starts_with("    cuda:")) {
        if line.starts_with("  - ") && in_device {
            out.push_str(rates);
        }
        if line.starts_with("  - ") {
            in_device = true;
        }
        out.push_str(line);
        out.push('\n');
    }
    if in_device {
        out.push_str(rates);
    }
    out
}

/// A probe section for test daemons: scheduled every second, short tests, small buffers.
pub const FAST_PROBES: &str = "probe:\n  schedule: true\n  interval: 1s\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 20s\n  durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";

/// A PCI tree under `root` (the daemon's `amd.sysfs_root`) holding NVIDIA GPUs at these
/// addresses, each with its bound driver (None: no driver took it).
pub fn pci_fixture(root: &Path, gpus: &[(&str, Option<&str>)]) {
    let devices = root.join("sys/bus/pci/devices");
    for (address, driver) in gpus {
        let dir = devices.join(address);
        std::fs::create_dir_all(&dir).expect("create a PCI device");
        std::fs::write(dir.join("vendor"), "0x10de\n").expect("write vendor");
        std::fs::write(dir.join("class"), "0x030200\n").expect("write class");
        if let Some(driver) = driver {
            let target = root.join("sys/bus/pci/drivers").join(driver);
            std::fs::create_dir_all(&target).expect("create a driver");
            std::os::unix::fs::symlink(&target, dir.join("driver")).expect("bind the driver");
        }
    }
}

/// An NVSwitch on the PCI bus of the sysfs tree under `root` (an HGX board's host, where
/// nvidia-fabricmanager must run).
pub fn nvswitch_fixture(root: &Path, address: &str) {
    let dir = root.join("sys/bus/pci/devices").join(address);
    std::fs::create_dir_all(&dir).expect("create a PCI device");
    std::fs::write(dir.join("vendor"), "0x10de\n").expect("write vendor");
    std::fs::write(dir.join("class"), "0x068000\n").expect("write class");
}

/// The demo's eight GPUs' PCI addresses, bound to nvidia.
pub const DEMO_ADDRESSES: [&str; 8] = [
    "0000:19:00.0",
    "0000:3b:00.0",
    "0000:4c:00.0",
    "0000:5d:00.0",
    "0000:9b:00.0",
    "0000:bb:00.0",
    "0000:cb:00.0",
    "0000:db:00.0",
];

/// Every GPU of the demo at 0% utilization and without compute processes (some of them run
/// work in the demo).
pub fn all_idle(scenario: &str) -> String {
    scenario
        .lines()
        .filter(|l| !l.trim_start().starts_with("processes: ["))
        .map(|l| match l.find("utilization: { gpu: ") {
            Some(i) => format!("{}utilization: {{ gpu: 0, memory: 0 }}", &l[..i]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}
