//! What the benchmarks share: the demo's snapshot as the daemon reads it, and a median.

use gpuwarden::config::Config;
use gpuwarden::model::Snapshot;
use std::time::Duration;

/// The demo's eight simulated H200s as the daemon reads them (through the simulated NVML
/// library cargo builds next to this benchmark, and the demo's kernel log), so every family
/// the demo serves is in the benchmark, new ones included.
pub fn demo_snapshot() -> Snapshot {
    let library = gpuwarden::cli::demo::library_candidates()
        .into_iter()
        .find(|p| p.exists())
        .expect("the simulated NVML library; run with cargo bench");
    let dir = std::env::temp_dir().join(format!("gpuwarden-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("scenario.yaml"), gpuwarden::cli::demo::SCENARIO).unwrap();
    std::fs::write(dir.join("kmsg"), gpuwarden::cli::demo::KERNEL_LOG).unwrap();
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("GPUWARDEN_SIM_NVML_SCENARIO", dir.join("scenario.yaml")) };
    let mut config = Config::default();
    config.nvml.library_path = library;
    config.amd.enabled = false;
    config.xid.kernel_log_path = dir.join("kmsg");
    let snapshot = (*gpuwarden::cli::check::poll_once(config)).clone();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(snapshot.devices.len(), 8, "the demo's GPUs");
    snapshot
}

pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}
