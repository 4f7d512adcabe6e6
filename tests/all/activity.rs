//! Inside the GPU and between GPUs, through the simulated NVML library: GPM activity, NVLink
//! per link, NVLink fabric registration, MIG devices and per-process utilisation. Each is
//! served where the GPU has it, absent (never 0) where it does not, and the findings follow.

use crate::common;

use common::*;

/// A device of the demo without the scenario key `key` (a one-line key, or a block).
fn without(device: &str, key: &str) -> String {
    let prefix = format!("    {key}:");
    let mut out = String::new();
    let mut skipping = false;
    for line in device.lines() {
        if line.starts_with(&prefix) {
            skipping = true;
            continue;
        }
        // A block's lines are indented deeper than its key.
        if skipping && line.starts_with("      ") {
            continue;
        }
        skipping = false;
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Sets NVLink `link` of a demo device down.
fn link_down(device: &str, link: usize) -> String {
    let mut n = 0;
    device
        .lines()
        .map(|line| {
            let mut line = line.to_string();
            if line.starts_with("      - { up: true") {
                if n == link {
                    line = line.replacen("up: true", "up: false", 1);
                }
                n += 1;
            }
            line + "\n"
        })
        .collect()
}

#[test]
fn gpm_activity_per_gpu_and_absent_where_the_gpu_has_none() {
    // GPU 0 has no GPM (an Ampere, say); GPU 2's driver refuses the FP64 metric alone.
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| without(dev, "gpm"));
    let scenario = edit_device(&scenario, 2, |dev| dev.replace("fp64: 0, fp32: 12", "fp32: 12"));
    let d = Daemon::start(&scenario);
    let m = d.scrape_until("GPM activity", |m| {
        m.value("gpu_sm_active_ratio", &[("gpu", "1")]).is_some()
    });
    let gpu1 = |name: &str, extra: &[(&str, &str)]| {
        let mut labels = vec![("gpu", "1")];
        labels.extend_from_slice(extra);
        m.value(name, &labels)
    };
    assert_eq!(gpu1("gpu_graphics_active_ratio", &[]), Some(0.99));
    assert_eq!(gpu1("gpu_sm_active_ratio", &[]), Some(0.96));
    assert_eq!(gpu1("gpu_sm_occupancy_ratio", &[]), Some(0.14));
    assert_eq!(gpu1("gpu_tensor_active_ratio", &[]), Some(0.93));
    assert_eq!(gpu1("gpu_dram_active_ratio", &[]), Some(0.17));
    assert_eq!(gpu1("gpu_pipe_active_ratio", &[("pipe", "hmma")]), Some(0.93));
    assert_eq!(gpu1("gpu_pipe_active_ratio", &[("pipe", "fp32")]), Some(0.04));
    // Bandwidths come in MiB/s from the driver and go out in bytes per second.
    assert_eq!(
        gpu1("gpu_pcie_bytes_per_second", &[("direction", "tx")]),
        Some(12.5 * 1048576.0)
    );
    assert_eq!(
        gpu1("gpu_nvlink_bytes_per_second", &[("direction", "rx")]),
        Some(60800.0 * 1048576.0)
    );
    assert!(
        m.find("gpu_sm_active_ratio", &[("gpu", "0")]).is_empty(),
        "a GPU without GPM has no activity series, not zeros"
    );
    assert_eq!(m.value("gpu_up", &[("gpu", "0")]), Some(1.0));
    assert_eq!(
        m.value("gpu_pipe_active_ratio", &[("gpu", "2"), ("pipe", "fp64")]),
        None
    );
    assert_eq!(
        m.value("gpu_pipe_active_ratio", &[("gpu", "2"), ("pipe", "fp32")]),
        Some(0.12),
        "one refused metric leaves the others"
    );
    // The activity follows the GPU.
    d.set_scenario(&edit_device(&scenario, 1, |dev| dev.replace("sm: 96,", "sm: 12,")));
    d.scrape_until("the new SM activity", |m| {
        m.value("gpu_sm_active_ratio", &[("gpu", "1")]) == Some(0.12)
    });
}

#[test]
fn one_poll_has_no_activity_to_report() {
    // `check` polls once: GPM needs two samples, so it reports none rather than a made-up 0.
    let out = gpuwarden_check_json(DEMO_SCENARIO);
    let device = &out["devices"][1]["readings"];
    assert!(device["activity"].is_null(), "{device}");
    assert_eq!(device["nvlinks"]["board_links"], 18, "NVLink is read at once");
}

fn gpuwarden_check_json(scenario: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let scenario_path = dir.path().join("scenario.yaml");
    std::fs::write(&scenario_path, scenario).unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, test_config(&sim_library(), "")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuwarden"))
        .args(["check", "--json", "--config"])
        .arg(&config)
        .env("GPUWARDEN_SIM_NVML_SCENARIO", &scenario_path)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn nvlink_per_gpu_by_default_per_link_when_asked_and_a_link_down_is_a_finding() {
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| without(dev, "nvlinks"));
    let d = Daemon::start(&scenario);
    let m = d.scrape_until("NVLink", |m| m.value("gpu_nvlink_links", &[("gpu", "5")]).is_some());
    assert_eq!(m.value("gpu_nvlink_links", &[("gpu", "5")]), Some(18.0));
    assert_eq!(m.value("gpu_nvlink_links_up", &[("gpu", "5")]), Some(18.0));
    let errors = |m: &Metrics, kind: &str| m.value("gpu_nvlink_errors_total", &[("gpu", "5"), ("type", kind)]);
    // Link 3 has them; the other 17 links count 0.
    assert_eq!(errors(&m, "crc_flit"), Some(1843.0));
    assert_eq!(errors(&m, "replay"), Some(212.0));
    assert_eq!(errors(&m, "recovery"), Some(3.0));
    assert_eq!(errors(&m, "crc_data"), None, "a counter no link has is absent");
    let tx_kib: u64 = (0..18u64).map(|l| 1_200_000_000 + l * 1_000_003).sum();
    assert_eq!(
        m.value("gpu_nvlink_bytes_total", &[("gpu", "5"), ("direction", "tx")]),
        Some((tx_kib * 1024) as f64),
        "KiB from the driver, bytes out, summed over the links"
    );
    assert!(
        !m.has_family("gpu_nvlink_up") && !m.has_family("gpu_nvlink_link_errors_total"),
        "per link is opt-in"
    );
    assert!(
        m.value("gpu_nvlink_links", &[("gpu", "0")]).is_none()
            && m.find("gpu_nvlink_errors_total", &[("gpu", "0")]).is_empty(),
        "a board without NVLink has no NVLink series"
    );
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "5"), ("reason", "nvlink_down")]),
        None
    );

    // Link 7 of GPU 2 goes down, and link 3 of GPU 5 counts more errors.
    let broken = edit_device(&scenario, 2, |dev| link_down(dev, 7));
    let broken = edit_device(&broken, 5, |dev| dev.replace("crc_flit: 1843", "crc_flit: 1900"));
    d.set_scenario(&broken);
    let m = d.scrape_until("link 7 down", |m| {
        m.value("gpu_nvlink_links_up", &[("gpu", "2")]) == Some(17.0)
    });
    assert_eq!(m.value("gpu_nvlink_links", &[("gpu", "2")]), Some(18.0));
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "2"), ("reason", "nvlink_down")]),
        Some(1.0)
    );
    assert_eq!(errors(&m, "crc_flit"), Some(1900.0));
    let check = gpuwarden_check_json(&broken);
    let findings = check["devices"][2].to_string();
    assert!(findings.contains("NVLink 7 down (17 of 18 up)"), "{findings}");
    drop(d);

    // Per link, when asked.
    let d = Daemon::start_with(&broken, &test_config(&sim_library(), "nvlink:\n  per_link: true\n"));
    let m = d.scrape_until("per-link series", |m| m.has_family("gpu_nvlink_up"));
    assert_eq!(m.find("gpu_nvlink_up", &[("gpu", "5")]).len(), 18);
    assert_eq!(m.value("gpu_nvlink_up", &[("gpu", "2"), ("link", "7")]), Some(0.0));
    assert_eq!(m.value("gpu_nvlink_up", &[("gpu", "2"), ("link", "6")]), Some(1.0));
    let link = |l: &str, kind: &str| {
        m.value(
            "gpu_nvlink_link_errors_total",
            &[("gpu", "5"), ("link", l), ("type", kind)],
        )
    };
    assert_eq!(link("3", "crc_flit"), Some(1900.0));
    assert_eq!(link("4", "crc_flit"), Some(0.0));
    assert_eq!(
        m.value(
            "gpu_nvlink_link_bytes_total",
            &[("gpu", "5"), ("link", "3"), ("direction", "tx")]
        ),
        Some((1_200_000_000u64 + 3 * 1_000_003) as f64 * 1024.0)
    );
}

#[test]
fn fabric_registration_in_progress_or_refused_is_a_finding() {
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| without(dev, "fabric"));
    let scenario = edit_device(&scenario, 1, |dev| {
        dev.replace("fabric: { state: completed,", "fabric: { state: in_progress,")
    });
    let scenario = edit_device(&scenario, 6, |dev| {
        dev.replace(
            "fabric: { state: completed,",
            "fabric: { state: completed, error: unknown,",
        )
    });
    let d = Daemon::start(&scenario);
    let m = d.scrape_until("fabric states", |m| {
        m.value("gpu_fabric_state", &[("gpu", "1"), ("state", "in_progress")]) == Some(1.0)
    });
    assert_eq!(
        m.value("gpu_fabric_state", &[("gpu", "1"), ("state", "completed")]),
        Some(0.0)
    );
    assert_eq!(
        m.value("gpu_fabric_registration_ok", &[("gpu", "1")]),
        None,
        "not done yet"
    );
    assert_eq!(m.value("gpu_fabric_registration_ok", &[("gpu", "7")]), Some(1.0));
    assert_eq!(m.value("gpu_fabric_registration_ok", &[("gpu", "6")]), Some(0.0));
    assert!(
        m.find("gpu_fabric_state", &[("gpu", "0")]).is_empty(),
        "not on a fabric: no series"
    );
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "1"), ("reason", "fabric_not_ready")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("gpu_health", &[("gpu", "6"), ("state", "unhealthy")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "7"), ("reason", "fabric_not_ready")]),
        None
    );
}

#[test]
fn mig_mode_and_devices_where_the_gpu_has_them() {
    // GPU 0: MIG off now, on after the next reset; GPU 1: no MIG at all.
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| {
        dev.replace("mig: { enabled: false }", "mig: { enabled: false, pending: true }")
    });
    let scenario = edit_device(&scenario, 1, |dev| without(dev, "mig"));
    let d = Daemon::start(&scenario);
    let m = d.scrape_until("MIG", |m| m.value("gpu_mig_mode", &[("gpu", "3")]).is_some());
    assert_eq!(m.value("gpu_mig_mode", &[("gpu", "3")]), Some(1.0));
    let mut instances: Vec<(String, String, String)> = m
        .find("gpu_mig_instance_info", &[("gpu", "3")])
        .iter()
        .map(|s| {
            (
                s.labels["gpu_instance"].clone(),
                s.labels["profile"].clone(),
                s.labels["mig_uuid"].clone(),
            )
        })
        .collect();
    instances.sort();
    assert_eq!(
        instances,
        [
            ("2", "3g.71gb", "MIG-8c1e5a3f-0000-5d2e-8b7a-000000000301"),
            ("3", "2g.35gb", "MIG-8c1e5a3f-0000-5d2e-8b7a-000000000302"),
            ("9", "1g.18gb", "MIG-8c1e5a3f-0000-5d2e-8b7a-000000000303"),
        ]
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    );
    assert_eq!(
        m.value(
            "gpu_mig_memory_used_bytes",
            &[("gpu", "3"), ("gpu_instance", "2"), ("compute_instance", "0")]
        ),
        Some(32212254720.0)
    );
    assert_eq!(
        m.value(
            "gpu_mig_memory_total_bytes",
            &[("gpu", "3"), ("gpu_instance", "9"), ("compute_instance", "0")]
        ),
        Some(18790481920.0)
    );
    // GPM per GPU instance.
    let m = d.scrape_until("GPM per MIG instance", |m| {
        m.value("gpu_mig_sm_active_ratio", &[("gpu", "3"), ("gpu_instance", "2")])
            .is_some()
    });
    let gi = |family: &str, instance: &str| m.value(family, &[("gpu", "3"), ("gpu_instance", instance)]);
    assert_eq!(gi("gpu_mig_sm_active_ratio", "2"), Some(0.72));
    assert_eq!(gi("gpu_mig_tensor_active_ratio", "2"), Some(0.41));
    assert_eq!(gi("gpu_mig_dram_active_ratio", "3"), Some(0.14));
    assert_eq!(gi("gpu_mig_graphics_active_ratio", "9"), Some(0.0));
    assert!(m.find("gpu_mig_sm_active_ratio", &[("gpu", "0")]).is_empty());
    assert_eq!(m.value("gpu_mig_mode", &[("gpu", "0")]), Some(0.0));
    assert_eq!(m.value("gpu_mig_mode_pending", &[("gpu", "0")]), Some(1.0));
    assert!(m.find("gpu_mig_instance_info", &[("gpu", "0")]).is_empty());
    assert_eq!(m.value("gpu_mig_mode", &[("gpu", "1")]), None, "no MIG: no series");
}

#[test]
fn per_process_utilisation_with_per_process_series() {
    // GPU 1's one process samples 97 % SM; GPU 3 has two; GPU 5's driver keeps no samples.
    let scenario = edit_device(DEMO_SCENARIO, 5, |dev| {
        dev.replace(", sm_percent: 58, memory_percent: 30", "")
    });
    let scenario = edit_device(&scenario, 3, |dev| {
        dev.replace("sm_percent: 20, memory_percent: 9", "sm_percent: 0, memory_percent: 0")
    });
    let config = test_config(&sim_library(), "processes:\n  per_process: true\n");
    let d = Daemon::start_with(&scenario, &config);
    let m = d.scrape_until("per-process utilisation", |m| {
        m.value("gpu_process_sm_utilization_ratio", &[("gpu", "1")]).is_some()
    });
    assert_eq!(
        m.value("gpu_process_sm_utilization_ratio", &[("gpu", "1"), ("pid", "4211")]),
        Some(0.97)
    );
    assert_eq!(
        m.value("gpu_process_memory_utilization_ratio", &[("gpu", "1"), ("pid", "4211")]),
        Some(0.48)
    );
    assert_eq!(
        m.value("gpu_process_sm_utilization_ratio", &[("gpu", "3"), ("pid", "5511")]),
        Some(0.4)
    );
    assert_eq!(
        m.value("gpu_process_sm_utilization_ratio", &[("gpu", "3"), ("pid", "5512")]),
        Some(0.0),
        "a process the driver has no sample for was idle"
    );
    assert!(
        m.find("gpu_process_sm_utilization_ratio", &[("gpu", "5")]).is_empty(),
        "no per-process samples from the driver: no series"
    );
    assert_eq!(
        m.value("gpu_process_memory_used_bytes", &[("gpu", "5"), ("pid", "5120")]),
        Some(64424509440.0)
    );
}

#[test]
fn an_old_driver_without_gpm_fabric_or_mig_serves_the_rest() {
    let d = Daemon::start_with(DEMO_SCENARIO, &test_config(&old_sim_library(), ""));
    let m = d.scrape_until("two rounds", |m| {
        m.value("gpuwarden_poll_round_duration_seconds_count", &[])
            .unwrap_or(0.0)
            >= 2.0
    });
    for family in [
        "gpu_sm_active_ratio",
        "gpu_fabric_state",
        "gpu_mig_mode",
        "gpu_nvlink_links",
    ] {
        assert!(!m.has_family(family), "{family} from a driver without it");
    }
    assert_eq!(m.value("gpu_up", &[("gpu", "1")]), Some(1.0));
    assert!(
        m.value("gpu_temperature_celsius", &[("gpu", "1"), ("sensor", "gpu")])
            .is_some()
    );
}

#[test]
fn framebuffer_free_and_reserved_as_the_driver_counts_them() {
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| {
        dev.replace(
            "memory: { total: 150754820096, used: 0 }",
            "memory: { total: 150754820096, used: 0, reserved: 601882624 }",
        )
    });
    let d = Daemon::start(&scenario);
    let m = d.scrape_until("memory", |m| {
        m.value("gpu_memory_free_bytes", &[("gpu", "1")]).is_some()
    });
    assert_eq!(m.value("gpu_memory_reserved_bytes", &[("gpu", "0")]), Some(601882624.0));
    assert_eq!(
        m.value("gpu_memory_free_bytes", &[("gpu", "0")]),
        Some((150754820096u64 - 601882624) as f64)
    );
    assert_eq!(
        m.value("gpu_memory_free_bytes", &[("gpu", "1")]),
        Some((150754820096u64 - 128849018880) as f64)
    );
}

/// The driver's recovery action (NVML field 230), read in the slow tier: one-hot per GPU,
/// absent where the driver does not say, and the `recovery_action` rule over it: a reset
/// needed degrades, a reboot needed makes the GPU unhealthy; both end when the driver says
/// none again (after the reset).
#[test]
fn the_drivers_recovery_action_is_served_and_judged() {
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| {
        dev.replace("recovery_action: 0", "recovery_action: 2")
    });
    let scenario = edit_device(&scenario, 2, |dev| dev.replace("    recovery_action: 0\n", ""));
    let d = Daemon::start(&scenario);
    let m = d.scrape_until("GPU 0 needs a reboot", |m| {
        m.value("gpu_recovery_action", &[("gpu", "0"), ("action", "node_reboot")]) == Some(1.0)
    });
    for action in ["none", "gpu_reset", "drain_p2p", "drain_and_reset"] {
        assert_eq!(
            m.value("gpu_recovery_action", &[("gpu", "0"), ("action", action)]),
            Some(0.0),
            "{action}"
        );
    }
    assert_eq!(
        m.value("gpu_health", &[("gpu", "0"), ("state", "unhealthy")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "0"), ("reason", "recovery_action")]),
        Some(1.0)
    );
    // The demo's GPU 6 waits for a reset to apply its pending row remap: the driver asks for it.
    assert_eq!(
        m.value("gpu_recovery_action", &[("gpu", "6"), ("action", "gpu_reset")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "6"), ("reason", "recovery_action")]),
        Some(1.0)
    );
    assert_eq!(m.value("gpu_health", &[("gpu", "6"), ("state", "degraded")]), Some(1.0));
    assert_eq!(
        m.value("gpu_recovery_action", &[("gpu", "1"), ("action", "none")]),
        Some(1.0)
    );
    assert!(
        m.find("gpu_recovery_action", &[("gpu", "2")]).is_empty(),
        "a driver that does not say: no series, not a fake none"
    );
    // The GPU was reset: the driver says none again, and the finding ends.
    d.set_scenario(&edit_device(&scenario, 0, |dev| {
        dev.replace("recovery_action: 2", "recovery_action: 0")
    }));
    let m = d.scrape_until("GPU 0 needs nothing", |m| {
        m.value("gpu_recovery_action", &[("gpu", "0"), ("action", "none")]) == Some(1.0)
    });
    assert_eq!(
        m.value("gpu_health_reason", &[("gpu", "0"), ("reason", "recovery_action")]),
        None
    );
}
