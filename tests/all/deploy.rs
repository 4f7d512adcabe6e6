//! The shipped unit file and Prometheus config, checked by the tools that consume them.

use crate::common;

use std::process::Command;

#[test]
fn systemd_unit_verifies_cleanly() {
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/gpuwarden.service")).unwrap();
    // Point ExecStart at the binary under test: verify checks that it exists and runs.
    let unit = unit.replace("/usr/bin/gpuwarden", common::BIN);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpuwarden.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze is needed for this test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on unknown keys and only warns: an empty stderr is the real check.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify:\n{stderr}"
    );
}

#[test]
fn example_prometheus_config_is_valid() {
    let out = Command::new("promtool")
        .args([
            "check",
            "config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/prometheus.yml"),
        ])
        .output()
        .expect("promtool is needed for this test: apt-get install prometheus");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
