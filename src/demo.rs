//! `--demo`: the real daemon over the simulated NVML library and a shipped scenario of
//! eight GPUs, so that someone without a GPU sees real output.
//!
//! The simulated library (tests/sim-nvml) is built by `cargo build --workspace` next to the
//! gpuwarden binary; the Debian package installs it under /usr/lib/gpuwarden.

use std::path::PathBuf;

/// Eight H200s with something to look at: clock events, one x8 link, ECC errors, a pending
/// row remap, one GPU whose persistence mode is off.
pub const SCENARIO: &str = include_str!("../config/demo-scenario.yaml");

pub const LIBRARY_FILE: &str = "libgpuwarden_sim_nvml.so";

/// Where the simulated library is looked for, in order.
pub fn library_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
    {
        candidates.push(dir.join(LIBRARY_FILE));
        // Where `cargo test` puts it (it is a dev-dependency of the daemon).
        candidates.push(dir.join("deps").join(LIBRARY_FILE));
    }
    candidates.push(PathBuf::from("/usr/lib/gpuwarden").join(LIBRARY_FILE));
    candidates
}

/// Writes the demo scenario to a temporary file and returns the simulated library's path.
/// Must run before any thread starts: it sets the environment variable the library reads.
pub fn prepare() -> Result<PathBuf, String> {
    let library = library_candidates().into_iter().find(|p| p.exists()).ok_or_else(|| {
        format!(
            "the demo needs the simulated NVML library ({LIBRARY_FILE}) next to the gpuwarden binary; \
             build it with `cargo build --release --workspace` (looked in: {})",
            library_candidates()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let scenario = std::env::temp_dir().join(format!("gpuwarden-demo-{}.yaml", std::process::id()));
    std::fs::write(&scenario, SCENARIO)
        .map_err(|e| format!("cannot write the demo scenario to {}: {e}", scenario.display()))?;
    // SAFETY: called from main before the runtime or any other thread exists.
    unsafe { std::env::set_var("GPUWARDEN_SIM_NVML_SCENARIO", &scenario) };
    Ok(library)
}
