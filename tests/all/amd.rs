//! AMD GPUs through the amdgpu sysfs backend, over the fixture tree
//! tests/fixtures/amdgpu-sysfs (made by scripts/gen/gen-amd-fixtures.py): four amdgpu cards with
//! gpu_metrics in the v1.3, v1.5 and v1.4 layouts and one revision gpuwarden does not read,
//! next to the simulated NVML's NVIDIA GPUs in the same daemon.

use crate::common;
use common::*;
use std::path::Path;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/amdgpu-sysfs");

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn amd(gpu: &str) -> [(&str, &str); 2] {
    [("gpu", gpu), ("vendor", "amd")]
}

fn with<'a>(base: [(&'a str, &'a str); 2], extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut labels = base.to_vec();
    labels.extend_from_slice(extra);
    labels
}

fn start(root: &Path) -> Daemon {
    let config = test_config(&sim_library(), &format!("amd:\n  sysfs_root: {}\n", root.display()));
    Daemon::start_with(DEMO_SCENARIO, &config)
}

#[test]
fn amd_and_nvidia_gpus_are_served_side_by_side_with_the_same_families() {
    let d = start(Path::new(FIXTURE));
    let m = d.scrape_until("AMD GPUs polled", |m| {
        m.value("gpu_up", &amd("3")) == Some(1.0) && m.value("gpu_up", &[("gpu", "7"), ("vendor", "nvidia")]).is_some()
    });
    assert_eq!(
        m.value("gpuwarden_backend_up", &[("backend", "amdgpu_sysfs")]),
        Some(1.0)
    );
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "nvml")]), Some(1.0));
    // Four amdgpu cards; the i915 card, the connector and the render node are not GPUs.
    assert_eq!(m.find("gpu_info", &[("vendor", "amd")]).len(), 4);
    assert_eq!(m.find("gpu_info", &[("vendor", "nvidia")]).len(), 8);
    let v = |name: &str, gpu: &str, extra: &[(&str, &str)]| m.value(name, &with(amd(gpu), extra));

    // The fan: from hwmon's pwm1 of pwm1_max where the board has one, absent where not.
    assert_eq!(m.value("gpu_fan_speed_ratio", &amd("3")), Some(0.4));
    assert_eq!(
        m.value("gpu_fan_speed_ratio", &amd("0")),
        None,
        "no pwm1: no fan series"
    );

    // card0: an MI210, every reading from its files, gpu_metrics v1.3.
    let info = m.find("gpu_info", &amd("0"));
    let labels = &info[0].labels;
    for (k, want) in [
        ("name", "AMD Instinct MI210"),
        ("uuid", "AMD-9c1a2b3c4d5e6f70"),
        ("pci_bus_id", "0000:c1:00.0"),
        ("driver_version", "6.10.5"),
        ("serial", "692251001234"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(want), "{k}: {labels:?}");
    }
    assert_eq!(v("gpu_temperature_celsius", "0", &[("sensor", "edge")]), Some(45.0));
    assert_eq!(v("gpu_temperature_celsius", "0", &[("sensor", "junction")]), Some(52.0));
    assert_eq!(v("gpu_temperature_celsius", "0", &[("sensor", "hbm")]), Some(48.0));
    assert_eq!(
        v("gpu_temperature_threshold_celsius", "0", &[("threshold", "slowdown")]),
        Some(105.0)
    );
    assert_eq!(
        v("gpu_temperature_threshold_celsius", "0", &[("threshold", "shutdown")]),
        Some(110.0)
    );
    assert_eq!(
        v("gpu_temperature_threshold_celsius", "0", &[("threshold", "memory_max")]),
        Some(95.0)
    );
    assert_eq!(v("gpu_power_watts", "0", &[]), Some(212.0));
    assert_eq!(v("gpu_power_limit_watts", "0", &[]), Some(300.0));
    assert_eq!(v("gpu_energy_joules_total", "0", &[]), Some(123456.0));
    assert_eq!(v("gpu_clock_hertz", "0", &[("clock", "sm")]), Some(1.7e9));
    assert_eq!(v("gpu_clock_hertz", "0", &[("clock", "memory")]), Some(1.6e9));
    assert_eq!(v("gpu_utilization_ratio", "0", &[]), Some(0.87));
    assert_eq!(v("gpu_memory_copy_utilization_ratio", "0", &[]), Some(0.35));
    assert_eq!(v("gpu_memory_used_bytes", "0", &[]), Some(17179869184.0));
    assert_eq!(v("gpu_memory_total_bytes", "0", &[]), Some(68702699520.0));
    assert_eq!(v("gpu_pcie_link_generation", "0", &[]), Some(4.0));
    assert_eq!(v("gpu_pcie_link_generation_max", "0", &[]), Some(4.0));
    assert_eq!(v("gpu_pcie_link_width_lanes", "0", &[]), Some(16.0));
    assert_eq!(v("gpu_pcie_link_width_degraded", "0", &[]), Some(0.0));
    assert_eq!(v("gpu_pcie_replay_errors_total", "0", &[]), Some(3.0));
    // RAS: umc 5 corrected, gfx 1 uncorrected + 2 corrected; the XGMI block's 9 corrected
    // link errors apart, not in the ECC sums.
    assert_eq!(v("gpu_xgmi_errors_total", "0", &[("type", "corrected")]), Some(9.0));
    assert_eq!(v("gpu_xgmi_errors_total", "0", &[("type", "uncorrected")]), Some(0.0));
    assert_eq!(
        v("gpu_xgmi_errors_total", "2", &[("type", "corrected")]),
        None,
        "no XGMI block: absent"
    );
    assert_eq!(
        v(
            "gpu_ecc_errors_total",
            "0",
            &[("type", "corrected"), ("scope", "volatile")]
        ),
        Some(7.0)
    );
    assert_eq!(
        v(
            "gpu_ecc_errors_total",
            "0",
            &[("type", "uncorrected"), ("scope", "volatile")]
        ),
        Some(1.0)
    );
    // Throttler bits PPT0 and hotspot temperature: the shared reason names.
    assert_eq!(
        v("gpu_clock_event_active", "0", &[("reason", "sw_power_cap")]),
        Some(1.0)
    );
    assert_eq!(
        v("gpu_clock_event_active", "0", &[("reason", "sw_thermal_slowdown")]),
        Some(1.0)
    );
    assert_eq!(
        v("gpu_clock_event_active", "0", &[("reason", "current_limit")]),
        Some(0.0)
    );
    assert_eq!(m.find("gpu_clock_event_active", &amd("0")).len(), 8);
    // The same health rules as NVIDIA: thermal slowdown and an uncorrectable error.
    assert_eq!(
        v("gpu_health_reason", "0", &[("reason", "thermal_slowdown")]),
        Some(1.0)
    );
    assert_eq!(
        v("gpu_health_reason", "0", &[("reason", "ecc_uncorrectable")]),
        Some(1.0)
    );

    // card1: an MI300X (name from its PCI id), gpu_metrics v1.5, link at Gen4 x8 of Gen5 x16.
    let info = m.find("gpu_info", &amd("1"));
    assert_eq!(
        info[0].labels.get("name").map(String::as_str),
        Some("AMD Instinct MI300X")
    );
    assert_eq!(v("gpu_temperature_celsius", "1", &[("sensor", "edge")]), None);
    assert_eq!(v("gpu_temperature_celsius", "1", &[("sensor", "junction")]), Some(61.0));
    assert_eq!(v("gpu_power_watts", "1", &[]), Some(550.0));
    assert_eq!(v("gpu_energy_joules_total", "1", &[]), Some(5e6));
    assert_eq!(v("gpu_clock_hertz", "1", &[("clock", "sm")]), Some(2.1e9));
    assert_eq!(v("gpu_clock_hertz", "1", &[("clock", "memory")]), Some(1.3e9));
    assert_eq!(v("gpu_pcie_link_generation", "1", &[]), Some(4.0));
    assert_eq!(v("gpu_pcie_link_generation_max", "1", &[]), Some(5.0));
    assert_eq!(v("gpu_pcie_link_width_degraded", "1", &[]), Some(1.0));
    assert_eq!(v("gpu_pcie_replay_errors_total", "1", &[]), Some(7.0));
    assert_eq!(
        v("gpu_health_reason", "1", &[("reason", "pcie_width_degraded")]),
        Some(1.0)
    );
    // v1.5's throttle status is ASIC-dependent: not decoded, so no reasons rather than wrong ones.
    assert!(m.find("gpu_clock_event_active", &amd("1")).is_empty());

    // card2: gpu_metrics v1.4 and no hwmon: temperatures and power from the table.
    let info = m.find("gpu_info", &amd("2"));
    assert_eq!(
        info[0].labels.get("name").map(String::as_str),
        Some("AMD Instinct MI300X OAM")
    );
    assert_eq!(v("gpu_temperature_celsius", "2", &[("sensor", "junction")]), Some(58.0));
    assert_eq!(v("gpu_temperature_celsius", "2", &[("sensor", "hbm")]), Some(50.0));
    assert_eq!(v("gpu_power_watts", "2", &[]), Some(480.0));
    assert_eq!(v("gpu_power_limit_watts", "2", &[]), None);
    assert_eq!(v("gpu_energy_joules_total", "2", &[]), Some(4e6));
    assert_eq!(v("gpu_clock_hertz", "2", &[("clock", "sm")]), Some(2.05e9));
    assert_eq!(v("gpu_pcie_link_generation", "2", &[]), Some(5.0));

    // card3: a gpu_metrics revision gpuwarden does not read: the file readings stay, the
    // table's are left out, and one log line says why, however many polls there are.
    assert_eq!(v("gpu_temperature_celsius", "3", &[("sensor", "edge")]), Some(40.0));
    assert_eq!(v("gpu_power_watts", "3", &[]), Some(90.0));
    assert_eq!(v("gpu_energy_joules_total", "3", &[]), None);
    // Meant: however many polls come in 0.8 s, one line.
    std::thread::sleep(std::time::Duration::from_millis(800));
    let log = d.log_text();
    assert_eq!(
        log.matches("revision v1.9 is not one gpuwarden reads").count(),
        1,
        "{log}"
    );
    assert!(!m.has_family("gpuwarden_collector_errors_total"), "{}", m.text);
    // The NVIDIA GPUs are untouched.
    assert_eq!(
        m.value(
            "gpu_temperature_celsius",
            &[("gpu", "0"), ("vendor", "nvidia"), ("sensor", "gpu")]
        ),
        Some(34.0)
    );
}

#[test]
fn an_amd_gpu_that_leaves_the_bus_is_reported_down_and_the_rest_go_on() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(Path::new(FIXTURE), dir.path());
    let d = start(dir.path());
    d.scrape_until("card2 up", |m| m.value("gpu_up", &amd("2")) == Some(1.0));
    std::fs::remove_dir_all(dir.path().join("sys/class/drm/card2")).unwrap();
    let m = d.scrape_until("card2 down", |m| m.value("gpu_up", &amd("2")) == Some(0.0));
    assert_eq!(
        m.value("gpu_health_reason", &with(amd("2"), &[("reason", "gpu_lost")])),
        Some(1.0)
    );
    assert_eq!(m.value("gpu_up", &amd("1")), Some(1.0));
    // Readings change as the files do.
    std::fs::write(dir.path().join("sys/class/drm/card0/device/gpu_busy_percent"), "12\n").unwrap();
    d.scrape_until("new utilization", |m| {
        m.value("gpu_utilization_ratio", &amd("0")) == Some(0.12)
    });
    assert!(
        d.log_text()
            .contains("GPU 2 (AMD-5a4b3c2d1e0f9a8b, 0000:1f:00.0) is lost"),
        "{}",
        d.log_text()
    );
}

#[test]
fn without_the_amdgpu_driver_the_backend_is_absent_and_can_be_turned_off() {
    // No /sys/class/drm and no amdgpu module: no AMD GPU on this node. That is no backend
    // that is down: no gpuwarden_backend_up series and no notice on the status page (an
    // NVIDIA-only node used to open with one). ROCm SMI is not even tried.
    let empty = tempfile::tempdir().unwrap();
    let d = start(empty.path());
    let m = d.scrape_until("first scrape", |m| m.has_family("gpu_up"));
    assert_eq!(
        m.value("gpuwarden_backend_up", &[("backend", "amdgpu_sysfs")]),
        None,
        "{}",
        m.text
    );
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "rocm_smi")]), None);
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "nvml")]), Some(1.0));
    let page = d.get("/", &[]).page_text();
    assert!(!page.contains("amdgpu"), "{page}");
    assert!(!page.contains("not available"), "{page}");
    assert!(m.find("gpu_info", &[("vendor", "amd")]).is_empty());
    assert!(!d.log_text().contains("WARN"), "{}", d.log_text());
    drop(d);
    let config = test_config(&sim_library(), "amd:\n  enabled: false\n");
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("first scrape", |m| m.has_family("gpu_up"));
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "amdgpu_sysfs")]), None);
}

const ROCM_SCENARIO: &str = "devices:
  - pci_bus_id: \"0000:c1:00.0\"
    name: AMD Instinct MI210 (rsmi)
    unique_id: 0x9c1a2b3c4d5e6f70
    serial: \"692251009999\"
    temperature: {edge: 46000, junction: 53500, memory: 49000}
    critical: {junction: 104000, memory: 94000}
    emergency: {junction: 109000}
    power_uw: 250000000
    power_cap_uw: 300000000
    energy: [8000000, 15.3]
    busy_percent: 91
    memory_busy_percent: 40
    vram_used: 21474836480
    vram_total: 68702699520
    pcie_replays: 4
    ecc: {umc: [6, 0], gfx: [2, 2]}
  - pci_bus_id: \"0000:0c:00.0\"
    temperature: {junction: 62000}
    power_uw: 560000000
    fail: {rsmi_dev_busy_percent_get: 8}
";

fn start_with_rocm(root: &Path, library: &Path, scenario: Option<&str>) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(
        &sim_library(),
        &format!(
            "amd:\n  sysfs_root: {}\n  rocm_smi:\n    library_path: {}\n",
            root.display(),
            library.display()
        ),
    );
    let mut env = Vec::new();
    if let Some(s) = scenario {
        let path = dir.path().join("rocm.yaml");
        std::fs::write(&path, s).unwrap();
        env.push(("GPUWARDEN_SIM_ROCM_SMI_SCENARIO", path.display().to_string()));
        // The scenario file must outlive the daemon.
        std::mem::forget(dir);
    }
    Daemon::start_full(DEMO_SCENARIO, &config, "", &env)
}

fn rocm_library(old: bool) -> std::path::PathBuf {
    let name = if old {
        "libgpuwarden_sim_rocm_smi_old.so"
    } else {
        "libgpuwarden_sim_rocm_smi.so"
    };
    sim_library().with_file_name(name)
}

#[test]
fn rocm_smi_reads_what_it_offers_and_sysfs_fills_in_the_rest() {
    let d = start_with_rocm(Path::new(FIXTURE), &rocm_library(false), Some(ROCM_SCENARIO));
    let m = d.scrape_until("AMD GPUs polled", |m| m.value("gpu_up", &amd("3")) == Some(1.0));
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "rocm_smi")]), Some(1.0));
    assert!(
        d.log_text().contains("ROCm SMI 6.2.0 ready: 2 AMD GPU(s)"),
        "{}",
        d.log_text()
    );
    // ROCm SMI sees two GPUs (numbered by it); the sysfs backend keeps the two it does not see.
    assert_eq!(m.find("gpu_info", &[("vendor", "amd")]).len(), 4);
    let v = |name: &str, gpu: &str, extra: &[(&str, &str)]| m.value(name, &with(amd(gpu), extra));
    let info = m.find("gpu_info", &amd("0"));
    assert_eq!(
        info[0].labels.get("uuid").map(String::as_str),
        Some("AMD-9c1a2b3c4d5e6f70")
    );
    assert_eq!(info[0].labels.get("serial").map(String::as_str), Some("692251009999"));
    // The product name from sysfs is better than ROCm SMI's marketing string.
    assert_eq!(
        info[0].labels.get("name").map(String::as_str),
        Some("AMD Instinct MI210")
    );
    // ROCm SMI's values where it has them.
    assert_eq!(v("gpu_temperature_celsius", "0", &[("sensor", "junction")]), Some(53.5));
    assert_eq!(
        v("gpu_temperature_threshold_celsius", "0", &[("threshold", "slowdown")]),
        Some(104.0)
    );
    assert_eq!(v("gpu_power_watts", "0", &[]), Some(250.0));
    assert_eq!(
        v("gpu_energy_joules_total", "0", &[]),
        Some(8000000.0 * f64::from(15.3f32) / 1e6)
    );
    assert_eq!(v("gpu_utilization_ratio", "0", &[]), Some(0.91));
    assert_eq!(v("gpu_memory_copy_utilization_ratio", "0", &[]), Some(0.4));
    assert_eq!(v("gpu_memory_used_bytes", "0", &[]), Some(21474836480.0));
    assert_eq!(v("gpu_pcie_replay_errors_total", "0", &[]), Some(4.0));
    assert_eq!(
        v(
            "gpu_ecc_errors_total",
            "0",
            &[("type", "corrected"), ("scope", "volatile")]
        ),
        Some(8.0)
    );
    assert_eq!(
        v(
            "gpu_ecc_errors_total",
            "0",
            &[("type", "uncorrected"), ("scope", "volatile")]
        ),
        Some(2.0)
    );
    // The sysfs twin's for the rest: clocks, throttle reasons, link.
    assert_eq!(v("gpu_clock_hertz", "0", &[("clock", "sm")]), Some(1.7e9));
    assert_eq!(
        v("gpu_clock_event_active", "0", &[("reason", "sw_power_cap")]),
        Some(1.0)
    );
    assert_eq!(v("gpu_pcie_link_width_lanes", "0", &[]), Some(16.0));
    // GPU 1: a failing call is counted and its reading falls back to the twin's file.
    assert_eq!(v("gpu_power_watts", "1", &[]), Some(560.0));
    assert_eq!(v("gpu_utilization_ratio", "1", &[]), Some(0.99));
    assert!(
        m.value(
            "gpuwarden_collector_errors_total",
            &[("backend", "rocm_smi"), ("call", "rsmi_dev_busy_percent_get")]
        )
        .is_some_and(|n| n >= 1.0),
        "{}",
        m.text
    );
}

#[test]
fn an_older_rocm_without_some_functions_gives_fewer_readings_and_no_crash() {
    let d = start_with_rocm(Path::new(FIXTURE), &rocm_library(true), Some(ROCM_SCENARIO));
    let m = d.scrape_until("AMD GPUs polled", |m| m.value("gpu_up", &amd("1")) == Some(1.0));
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "rocm_smi")]), Some(1.0));
    let log = d.log_text();
    assert!(
        log.contains("lacks rsmi_dev_energy_count_get, rsmi_dev_memory_busy_percent_get"),
        "{log}"
    );
    // Energy and memory activity from the sysfs twin instead.
    assert_eq!(m.value("gpu_energy_joules_total", &amd("0")), Some(123456.0));
    assert_eq!(m.value("gpu_memory_copy_utilization_ratio", &amd("0")), Some(0.35));
    assert_eq!(m.value("gpu_power_watts", &amd("0")), Some(250.0));
}

#[test]
fn rocm_smi_that_cannot_initialise_leaves_the_gpus_to_sysfs() {
    let d = start_with_rocm(
        Path::new(FIXTURE),
        &rocm_library(false),
        Some("init_error: 8\ndevices: []\n"),
    );
    let m = d.scrape_until("AMD GPUs polled", |m| m.value("gpu_up", &amd("3")) == Some(1.0));
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "rocm_smi")]), Some(0.0));
    assert_eq!(
        m.value("gpuwarden_backend_up", &[("backend", "amdgpu_sysfs")]),
        Some(1.0)
    );
    assert_eq!(m.find("gpu_info", &[("vendor", "amd")]).len(), 4);
    assert!(
        d.log_text()
            .contains("rsmi_init failed: RSMI_STATUS_INIT_ERROR: simulated (8)"),
        "{}",
        d.log_text()
    );
}

/// Debian's librocm-smi64-1 (.ci/run installs it): the real library loads, finds no AMD
/// driver on this machine (the sysfs fixture says there are AMD GPUs, so it is tried), and
/// the daemon serves on with the backend down and sysfs reading the GPUs.
#[test]
fn the_real_rocm_smi_library_loads_and_fails_cleanly_without_an_amd_gpu() {
    let real = [
        "/usr/lib/librocm_smi64.so.1",
        "/usr/lib/x86_64-linux-gnu/librocm_smi64.so.1",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists())
    .expect("librocm_smi64.so.1 is not installed: apt-get install librocm-smi64-1 (.ci/run does)");
    let d = start_with_rocm(Path::new(FIXTURE), real, None);
    let m = d.scrape_until("first scrape", |m| m.has_family("gpuwarden_backend_up"));
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "rocm_smi")]), Some(0.0));
    assert_eq!(m.value("gpu_up", &[("gpu", "0"), ("vendor", "nvidia")]), Some(1.0));
    let log = d.log_text();
    assert!(log.contains("ROCm SMI not used (rsmi_init failed"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    // Still serving a while later.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(d.scrape().has_family("gpu_up"));
}

/// The gpu_metrics fuzz corpus (fuzz/corpus/gpu_metrics), replayed on stable Rust: no input
/// makes the parser panic, and the fixture tables among them parse.
#[test]
fn the_gpu_metrics_fuzz_corpus_parses_without_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/gpu_metrics");
    let inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    assert!(inputs.len() >= 10, "{} inputs", inputs.len());
    let parsed = inputs
        .iter()
        .filter(|bytes| gpuwarden::backend::amd::gpu_metrics::parse(bytes).is_ok())
        .count();
    assert!(parsed >= 3, "the v1.3, v1.4 and v1.5 seeds parse; {parsed} did");
}

#[test]
fn a_node_with_only_amd_gpus_needs_no_nvidia_library() {
    let config = format!(
        "listen: 127.0.0.1:0\npoll:\n  interval: 200ms\n  timeout: 150ms\nnvml:\n  enabled: false\nxid:\n  read_kernel_log: false\namd:\n  sysfs_root: {FIXTURE}\n"
    );
    let d = Daemon::start_with("devices: []\n", &config);
    let m = d.scrape_until("AMD GPUs", |m| m.value("gpu_up", &amd("0")) == Some(1.0));
    assert_eq!(m.find("gpu_info", &[]).len(), 4);
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "nvml")]), None);
    assert_eq!(m.value("gpu_power_watts", &amd("0")), Some(212.0));
    // `check` sees them too.
    let out = std::process::Command::new(BIN)
        .args(["check", "--config"])
        .arg(d.config_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("AMD Instinct MI210") && text.contains("PCIe link runs at x8 of x16"),
        "{text}"
    );
}

/// AMD GPUs get their processes from the DRM client statistics in /proc/PID/fdinfo (amdgpu
/// has no compute-process list like NVML's): a fixture /proc with two processes on card0
/// (one of them with two fds on one client), one on card2, and a non-DRM file.
#[test]
fn amd_processes_come_from_drm_client_statistics() {
    use std::os::unix::fs::symlink;
    let proc_root = tempfile::tempdir().unwrap();
    let client = |id: u32, pdev: &str, vram_kib: u64| {
        format!(
            "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-client-id:\t{id}\ndrm-pdev:\t{pdev}\n\
             drm-memory-vram:\t{vram_kib} KiB\ndrm-memory-gtt:\t4 KiB\n"
        )
    };
    for (pid, fd, target, fdinfo, comm) in [
        (
            5001,
            4,
            "/dev/dri/renderD128",
            client(10, "0000:c1:00.0", 4 << 20),
            "python3",
        ),
        (
            5001,
            5,
            "/dev/dri/renderD128",
            client(10, "0000:c1:00.0", 4 << 20),
            "python3",
        ),
        (
            5002,
            4,
            "/dev/dri/renderD128",
            client(11, "0000:c1:00.0", 1 << 20),
            "rccl-test",
        ),
        (
            5003,
            4,
            "/dev/dri/renderD130",
            client(12, "0000:1f:00.0", 2 << 20),
            "vllm",
        ),
        (5004, 3, "/tmp/log", client(13, "0000:c1:00.0", 8 << 20), "cat"),
    ] {
        let dir = proc_root.path().join(pid.to_string());
        std::fs::create_dir_all(dir.join("fd")).unwrap();
        std::fs::create_dir_all(dir.join("fdinfo")).unwrap();
        symlink(target, dir.join("fd").join(fd.to_string())).unwrap();
        std::fs::write(dir.join("fdinfo").join(fd.to_string()), fdinfo).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
    }
    let config = test_config(
        &sim_library(),
        &format!(
            "amd:\n  sysfs_root: {}\nprocesses:\n  per_process: true\n  proc_root: {}\n",
            FIXTURE,
            proc_root.path().display()
        ),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("AMD processes", |m| m.value("gpu_processes", &amd("0")).is_some());
    assert_eq!(m.value("gpu_processes", &amd("0")), Some(2.0));
    assert_eq!(m.value("gpu_processes", &amd("2")), Some(1.0));
    assert_eq!(m.value("gpu_processes", &amd("3")), Some(0.0), "an AMD GPU nobody uses");
    assert_eq!(
        m.value(
            "gpu_process_memory_used_bytes",
            &with(amd("0"), &[("pid", "5001"), ("process", "python3")])
        ),
        Some((4u64 << 30) as f64),
        "one client seen through two fds counts once"
    );
    assert_eq!(
        m.value(
            "gpu_process_memory_used_bytes",
            &with(amd("2"), &[("pid", "5003"), ("process", "vllm")])
        ),
        Some((2u64 << 30) as f64)
    );
    // NVIDIA GPUs keep NVML's list (the demo's GPU 1 runs one process).
    assert_eq!(
        m.value("gpu_processes", &[("gpu", "1"), ("vendor", "nvidia")]),
        Some(1.0)
    );
}
