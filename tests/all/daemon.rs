//! End to end: the real binary over the simulated NVML library, scraped over real HTTP.

use crate::common;

use common::*;
use std::collections::HashSet;
use std::io::Read;
use std::time::Duration;

fn gpu(i: &str) -> (&'static str, &str) {
    ("gpu", i)
}

/// (family, GPU index, labels beyond gpu, value).
type Expected<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], f64);

#[test]
fn eight_gpus_report_the_scenario_values() {
    let d = Daemon::start(DEMO_SCENARIO);
    let m = d.scrape();

    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "nvml")]), Some(1.0));
    assert_eq!(m.find("gpu_up", &[]).len(), 8);
    assert!(m.find("gpu_up", &[]).iter().all(|s| s.value == 1.0));
    let info = m.find("gpu_info", &[gpu("3")]);
    assert_eq!(info.len(), 1);
    assert_eq!(info[0].labels["name"], "NVIDIA H200");
    assert_eq!(info[0].labels["pci_bus_id"], "0000:5d:00.0");
    assert_eq!(info[0].labels["driver_version"], "580.159.04");
    assert_eq!(info[0].labels["serial"], "1653024000003");
    assert_eq!(info[0].labels["uuid"], "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000003");
    assert_eq!(info[0].labels["vendor"], "nvidia");

    // (family, GPU, extra labels, value): what the demo scenario says each GPU shows.
    let gib = 1024.0 * 1024.0 * 1024.0;
    let expected: &[Expected] = &[
        // Thermals.
        ("gpu_temperature_celsius", "2", &[("sensor", "gpu")], 88.0),
        ("gpu_temperature_celsius", "2", &[("sensor", "memory")], 94.0),
        (
            "gpu_temperature_threshold_celsius",
            "0",
            &[("threshold", "slowdown")],
            89.0,
        ),
        (
            "gpu_temperature_threshold_celsius",
            "0",
            &[("threshold", "shutdown")],
            95.0,
        ),
        (
            "gpu_temperature_threshold_celsius",
            "0",
            &[("threshold", "gpu_max")],
            87.0,
        ),
        (
            "gpu_temperature_threshold_celsius",
            "0",
            &[("threshold", "memory_max")],
            95.0,
        ),
        // Clock events: active bits as set...
        ("gpu_clock_event_active", "2", &[("reason", "hw_thermal_slowdown")], 1.0),
        ("gpu_clock_event_active", "2", &[("reason", "sw_thermal_slowdown")], 1.0),
        ("gpu_clock_event_active", "2", &[("reason", "sw_power_cap")], 0.0),
        ("gpu_clock_event_active", "1", &[("reason", "sw_power_cap")], 1.0),
        ("gpu_clock_event_active", "0", &[("reason", "gpu_idle")], 1.0),
        // ...and the driver's counters, nanoseconds turned into seconds.
        (
            "gpu_clock_event_seconds_total",
            "1",
            &[("reason", "sw_power_cap")],
            21.0,
        ),
        (
            "gpu_clock_event_seconds_total",
            "2",
            &[("reason", "hw_thermal_slowdown")],
            95.0,
        ),
        ("gpu_clock_event_seconds_total", "7", &[("reason", "sync_boost")], 40.0),
        // Power, energy, clocks, utilisation, memory.
        ("gpu_power_watts", "1", &[], 690.0),
        ("gpu_power_limit_watts", "1", &[], 700.0),
        ("gpu_energy_joules_total", "0", &[], 91_000_000.0),
        ("gpu_clock_hertz", "1", &[("clock", "sm")], 1_440_000_000.0),
        ("gpu_clock_hertz", "1", &[("clock", "memory")], 3_201_000_000.0),
        ("gpu_clock_max_hertz", "1", &[("clock", "sm")], 1_980_000_000.0),
        ("gpu_clock_max_hertz", "1", &[("clock", "memory")], 3_201_000_000.0),
        ("gpu_utilization_ratio", "1", &[], 1.0),
        ("gpu_memory_copy_utilization_ratio", "1", &[], 0.5),
        ("gpu_decoder_utilization_ratio", "1", &[], 0.35),
        ("gpu_memory_used_bytes", "1", &[], 120.0 * gib),
        ("gpu_memory_total_bytes", "1", &[], 150_754_820_096.0),
        // PCIe: GPU 3 trained at x8 of x16.
        ("gpu_pcie_link_width_lanes", "3", &[], 8.0),
        ("gpu_pcie_link_width_max_lanes", "3", &[], 16.0),
        ("gpu_pcie_link_width_degraded", "3", &[], 1.0),
        ("gpu_pcie_link_width_degraded", "0", &[], 0.0),
        ("gpu_pcie_link_generation", "3", &[], 5.0),
        ("gpu_pcie_link_generation_max", "3", &[], 5.0),
        ("gpu_pcie_replay_errors_total", "3", &[], 3.0),
        // ECC and row remapping.
        ("gpu_ecc_mode", "5", &[], 1.0),
        (
            "gpu_ecc_errors_total",
            "5",
            &[("type", "corrected"), ("scope", "volatile")],
            12.0,
        ),
        (
            "gpu_ecc_errors_total",
            "5",
            &[("type", "uncorrected"), ("scope", "volatile")],
            1.0,
        ),
        (
            "gpu_ecc_errors_total",
            "5",
            &[("type", "corrected"), ("scope", "aggregate")],
            52.0,
        ),
        ("gpu_row_remap_pending", "6", &[], 1.0),
        ("gpu_row_remap_pending", "0", &[], 0.0),
        ("gpu_remapped_rows", "6", &[("cause", "correctable")], 2.0),
        ("gpu_row_remap_failed", "6", &[], 0.0),
        ("gpu_performance_state", "0", &[], 0.0),
        // Health: one-hot, with the reasons.
        ("gpu_health", "0", &[("state", "ok")], 1.0),
        ("gpu_health", "3", &[("state", "degraded")], 1.0),
        ("gpu_health", "3", &[("state", "ok")], 0.0),
        ("gpu_health_reason", "3", &[("reason", "pcie_width_degraded")], 1.0),
        ("gpu_health_reason", "2", &[("reason", "thermal_slowdown")], 1.0),
        ("gpu_health_reason", "5", &[("reason", "ecc_uncorrectable")], 1.0),
        ("gpu_health_reason", "6", &[("reason", "row_remap_pending")], 1.0),
    ];
    for (family, index, labels, value) in expected {
        let mut all = vec![gpu(index)];
        all.extend_from_slice(labels);
        assert_eq!(m.value(family, &all), Some(*value), "{family}{all:?}");
    }
    // One clock-event series per supported reason (mask 511: all nine).
    assert_eq!(m.find("gpu_clock_event_active", &[gpu("2")]).len(), 9);
    // Not supported means absent, never a made-up 0: the scenario has no fan. Encoder and
    // decoder are reported by every GPU, as a real H200 reports them (0 % when idle).
    assert!(!m.has_family("gpu_fan_speed_ratio"));
    assert_eq!(m.find("gpu_encoder_utilization_ratio", &[]).len(), 8);
    assert_eq!(m.value("gpu_encoder_utilization_ratio", &[gpu("1")]), Some(0.0));
    assert_eq!(m.find("gpu_decoder_utilization_ratio", &[]).len(), 8);

    // Persistence mode was off on GPU 4: the daemon turned it on and counted it.
    assert_eq!(m.value("gpu_persistence_mode", &[gpu("4")]), Some(1.0));
    assert_eq!(
        m.value(
            "gpuwarden_persistence_enable_attempts_total",
            &[gpu("4"), ("result", "enabled")]
        ),
        Some(1.0)
    );
    assert!(
        d.log_text().contains("persistence mode was off on GPU 4"),
        "{}",
        d.log_text()
    );
    assert_eq!(m.value("gpu_performance_state", &[gpu("0")]), Some(0.0));

    // Self metrics.
    let build = m.find("gpuwarden_build_info", &[]);
    assert_eq!(build.len(), 1);
    assert_eq!(build[0].labels["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        m.value("gpuwarden_poll_duration_seconds_count", &[("backend", "nvml")])
            .unwrap_or(0.0)
            >= 8.0
    );
    // Time inside NVML calls is part of the polls' time, never more.
    let by_call = m.find("gpuwarden_vendor_call_seconds_total", &[("backend", "nvml")]);
    assert!(
        by_call.iter().any(|s| s.labels["call"] == "nvmlDeviceGetTemperature"),
        "call time by call name: {by_call:?}"
    );
    let in_calls: f64 = by_call.iter().map(|s| s.value).sum();
    let in_polls = m
        .value("gpuwarden_poll_duration_seconds_sum", &[("backend", "nvml")])
        .unwrap();
    assert!(
        in_calls > 0.0 && in_calls <= in_polls,
        "calls {in_calls} s, polls {in_polls} s"
    );
    let last = m
        .value("gpu_last_poll_timestamp_seconds", &[gpu("0")])
        .expect("last poll time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - last).abs() < 5.0, "last poll {last} vs now {now}");
    assert!(
        !d.log_text().contains("DISABLED"),
        "persistence mode must never be turned off"
    );
}

#[test]
fn a_changed_scenario_shows_in_the_next_scrapes() {
    let d = Daemon::start(DEMO_SCENARIO);
    let hot = edit_device(DEMO_SCENARIO, 0, |dev| {
        let dev = set_line(dev, "temperature", "91");
        set_line(&dev, "clock_events", "{ active: 64, supported: 511 }")
    });
    let narrow = edit_device(&hot, 1, |dev| {
        set_line(
            dev,
            "pcie",
            "{ generation: 4, generation_max: 5, width: 4, width_max: 16, replay_counter: 17 }",
        )
    });
    d.set_scenario(&narrow);
    // Each GPU's thread polls on its own at the round's time: a rewrite that falls between
    // two GPUs' polls shows on one a round before the other.
    let m = d.scrape_until("GPU 0 at 91 C and GPU 1 at x4", |m| {
        m.value("gpu_temperature_celsius", &[gpu("0"), ("sensor", "gpu")]) == Some(91.0)
            && m.value("gpu_pcie_link_width_lanes", &[gpu("1")]) == Some(4.0)
    });
    assert_eq!(
        m.value("gpu_clock_event_active", &[gpu("0"), ("reason", "hw_thermal_slowdown")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("gpu_clock_event_active", &[gpu("0"), ("reason", "gpu_idle")]),
        Some(0.0)
    );
    assert_eq!(m.value("gpu_health", &[gpu("0"), ("state", "degraded")]), Some(1.0));
    assert_eq!(m.value("gpu_pcie_link_width_lanes", &[gpu("1")]), Some(4.0));
    assert_eq!(m.value("gpu_pcie_link_width_degraded", &[gpu("1")]), Some(1.0));
    assert_eq!(m.value("gpu_pcie_link_generation", &[gpu("1")]), Some(4.0));
    assert_eq!(m.value("gpu_pcie_replay_errors_total", &[gpu("1")]), Some(17.0));

    // And back.
    d.set_scenario(DEMO_SCENARIO);
    let m = d.scrape_until("GPU 0 cool", |m| {
        m.value("gpu_temperature_celsius", &[gpu("0"), ("sensor", "gpu")]) == Some(34.0)
    });
    assert_eq!(
        m.value("gpu_clock_event_active", &[gpu("0"), ("reason", "hw_thermal_slowdown")]),
        Some(0.0)
    );
    assert_eq!(m.value("gpu_health", &[gpu("0"), ("state", "ok")]), Some(1.0));
}

#[test]
fn a_lost_gpu_is_down_and_unhealthy_while_the_others_keep_reporting() {
    let d = Daemon::start(DEMO_SCENARIO);
    let lost = edit_device(DEMO_SCENARIO, 7, |dev| format!("{dev}    lost: true\n"));
    d.set_scenario(&lost);
    let m = d.scrape_until("GPU 7 down", |m| m.value("gpu_up", &[gpu("7")]) == Some(0.0));
    assert_eq!(m.value("gpu_health", &[gpu("7"), ("state", "unhealthy")]), Some(1.0));
    assert_eq!(
        m.value("gpu_health_reason", &[gpu("7"), ("reason", "gpu_lost")]),
        Some(1.0)
    );
    // Its identity stays, its readings go (no frozen values), the others are untouched.
    assert_eq!(m.find("gpu_info", &[gpu("7")]).len(), 1);
    assert_eq!(m.value("gpu_temperature_celsius", &[gpu("7"), ("sensor", "gpu")]), None);
    for i in 0..7 {
        assert_eq!(m.value("gpu_up", &[gpu(&i.to_string())]), Some(1.0), "GPU {i}");
    }
    assert!(
        m.value(
            "gpuwarden_collector_errors_total",
            &[("backend", "nvml"), ("call", "nvmlDeviceGetTemperature")]
        )
        .unwrap_or(0.0)
            >= 1.0
    );
    assert!(
        d.log_text().contains("GPU 7") && d.log_text().contains("is lost"),
        "{}",
        d.log_text()
    );

    // Back on the bus (after a reset): up again.
    d.set_scenario(DEMO_SCENARIO);
    d.scrape_until("GPU 7 up again", |m| m.value("gpu_up", &[gpu("7")]) == Some(1.0));
}

#[test]
fn a_hung_call_stalls_only_its_own_gpu() {
    let d = Daemon::start(DEMO_SCENARIO);
    let hung = edit_device(DEMO_SCENARIO, 1, |dev| {
        format!("{dev}    hang: {{ nvmlDeviceGetPowerUsage: 60 }}\n")
    });
    d.set_scenario(&hung);
    let m = d.scrape_until("GPU 1 not answering", |m| m.value("gpu_up", &[gpu("1")]) == Some(0.0));
    assert_eq!(
        m.value("gpu_health_reason", &[gpu("1"), ("reason", "not_responding")]),
        Some(1.0)
    );
    let stalled_at = m
        .value("gpu_last_poll_timestamp_seconds", &[gpu("1")])
        .expect("had a good poll before");

    // The other GPUs keep being polled: their last-poll times move on while GPU 1's stands still.
    let before = m.value("gpu_last_poll_timestamp_seconds", &[gpu("0")]).unwrap();
    let m = d.scrape_until("GPU 0 polled again", |m| {
        m.value("gpu_last_poll_timestamp_seconds", &[gpu("0")])
            .is_some_and(|t| t > before + 0.3)
    });
    for i in [0, 2, 3, 4, 5, 6, 7] {
        assert_eq!(m.value("gpu_up", &[gpu(&i.to_string())]), Some(1.0), "GPU {i}");
    }
    assert_eq!(
        m.value("gpu_last_poll_timestamp_seconds", &[gpu("1")]),
        Some(stalled_at)
    );
    assert!(d.log_text().contains("did not answer within"), "{}", d.log_text());
    // Scrapes answer at normal speed throughout: nothing on the request path waits on NVML.
    for _ in 0..20 {
        let started = std::time::Instant::now();
        assert_eq!(d.get("/metrics", &[]).status, 200);
        assert!(
            started.elapsed() < std::time::Duration::from_millis(250),
            "scrape took {:?}",
            started.elapsed()
        );
    }

    // The hang ends: GPU 1 answers again.
    d.set_scenario(DEMO_SCENARIO);
    d.scrape_until("GPU 1 up again", |m| m.value("gpu_up", &[gpu("1")]) == Some(1.0));
}

#[test]
fn without_nvml_the_daemon_still_serves_its_own_metrics() {
    let config = test_config(std::path::Path::new("/nonexistent/libnvidia-ml.so.1"), "");
    let d = Daemon::start_with("devices: []\n", &config);
    let m = d.scrape();
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "nvml")]), Some(0.0));
    assert_eq!(m.find("gpuwarden_build_info", &[]).len(), 1);
    assert!(!m.samples.iter().any(|s| s.name.starts_with("gpu_")), "{}", m.text);
    assert_eq!(d.get("/healthz", &[]).status, 200);
    let log = d.log_text();
    assert!(log.contains("NVML is not available"), "{log}");
    assert!(
        log.contains("nvml.enabled: false"),
        "the log says how to silence it: {log}"
    );
    // Logged once, not once per retry.
    std::thread::sleep(std::time::Duration::from_millis(900));
    assert_eq!(
        d.log_text().matches("NVML is not available").count(),
        1,
        "{}",
        d.log_text()
    );
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn nvml_that_fails_to_initialise_is_retried_until_it_works() {
    // As during a driver reload: nvmlInit fails, later succeeds.
    let d = Daemon::start("init_error: driver_not_loaded\ndevices: []\n");
    assert_eq!(
        d.scrape().value("gpuwarden_backend_up", &[("backend", "nvml")]),
        Some(0.0)
    );
    d.set_scenario(DEMO_SCENARIO);
    let m = d.scrape_until("NVML up", |m| {
        m.value("gpuwarden_backend_up", &[("backend", "nvml")]) == Some(1.0)
    });
    assert_eq!(m.find("gpu_up", &[]).len(), 8);
}

#[test]
fn unsupported_readings_are_left_out() {
    let minimal = "devices:\n  - name: Tesla T4\n    uuid: GPU-minimal\n    pci_bus_id: \"00000000:3B:00.0\"\n    temperature: 50\n";
    let d = Daemon::start(minimal);
    let m = d.scrape();
    assert_eq!(m.value("gpu_temperature_celsius", &[("sensor", "gpu")]), Some(50.0));
    for family in [
        "gpu_power_watts",
        "gpu_temperature_threshold_celsius",
        "gpu_clock_event_active",
        "gpu_clock_event_seconds_total",
        "gpu_ecc_errors_total",
        "gpu_pcie_link_width_lanes",
        "gpu_pcie_link_width_degraded",
        "gpu_persistence_mode",
        "gpu_fan_speed_ratio",
        "gpu_remapped_rows",
        "gpu_encoder_utilization_ratio",
        "gpu_decoder_utilization_ratio",
        "gpu_clock_max_hertz",
        // Licensing unsupported, as on bare metal: no licence to hold, not "unlicensed".
        "gpu_vgpu_licensed",
        // A driver that does not report a recovery action: no series, not "none".
        "gpu_recovery_action",
    ] {
        assert!(!m.has_family(family), "{family} should be absent:\n{}", m.text);
    }
    // Not supported is not an error.
    assert!(!m.has_family("gpuwarden_collector_errors_total"), "{}", m.text);
    assert_eq!(m.value("gpu_info", &[("serial", "")]), Some(1.0));
}

#[test]
fn drivers_before_580_82_use_the_old_field_ids() {
    let old = DEMO_SCENARIO.replace("driver_version: \"580.159.04\"", "driver_version: \"575.57.08\"");
    let d = Daemon::start(&old);
    let m = d.scrape();
    assert_eq!(
        m.value(
            "gpu_clock_event_seconds_total",
            &[gpu("2"), ("reason", "hw_thermal_slowdown")]
        ),
        Some(95.0)
    );
    assert_eq!(
        m.value(
            "gpu_clock_event_seconds_total",
            &[gpu("2"), ("reason", "sw_thermal_slowdown")]
        ),
        Some(12.0)
    );
}

#[test]
fn persistence_mode_that_may_not_be_set_shows_as_off_with_one_warning() {
    let denied = edit_device(DEMO_SCENARIO, 4, |dev| {
        format!("{dev}    persistence_settable: false\n")
    });
    let d = Daemon::start(&denied);
    let m = d.scrape_until("several attempts", |m| {
        m.value(
            "gpuwarden_persistence_enable_attempts_total",
            &[gpu("4"), ("result", "not_permitted")],
        )
        .unwrap_or(0.0)
            >= 3.0
    });
    assert_eq!(m.value("gpu_persistence_mode", &[gpu("4")]), Some(0.0));
    assert_eq!(
        m.value("gpu_health_reason", &[gpu("4"), ("reason", "persistence_off")]),
        Some(1.0)
    );
    assert_eq!(d.log_text().matches("not permitted").count(), 1, "{}", d.log_text());
}

#[test]
fn persistence_enable_false_leaves_it_alone() {
    let config = test_config(&sim_library(), "persistence:\n  enable: false\n");
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    d.scrape_until("the first poll", |m| {
        m.value("gpu_persistence_mode", &[gpu("4")]).is_some()
    });
    // Left off across rounds, not only the first.
    holds_for(
        "persistence left off",
        std::time::Duration::from_millis(500),
        || match d.scrape().value("gpu_persistence_mode", &[gpu("4")]) {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let m = d.scrape();
    assert!(
        !m.has_family("gpuwarden_persistence_enable_attempts_total"),
        "{}",
        m.text
    );
}

#[test]
fn metrics_negotiate_openmetrics_text_and_gzip() {
    let d = Daemon::start(DEMO_SCENARIO);
    let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let om = d.get("/metrics", &[("Accept", prometheus_accept)]);
    assert_eq!(om.status, 200);
    assert_eq!(
        om.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(om.text().ends_with("# EOF\n"));
    assert!(om.text().contains("# TYPE gpu_energy_joules counter\n"));

    let text = d.get("/metrics", &[]);
    assert_eq!(
        text.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(!text.text().contains("# EOF"));
    assert!(text.text().contains("# TYPE gpu_energy_joules_total counter\n"));

    let gz = d.get("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    let mut decoded = String::new();
    flate2::read::GzDecoder::new(&gz.body[..])
        .read_to_string(&mut decoded)
        .expect("valid gzip");
    // Same snapshot or the next one: compare the families, not the timestamps.
    let names = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("# TYPE"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&decoded), names(&text.text()));
    assert!(gz.body.len() * 4 < decoded.len(), "gzip should shrink the text a lot");
}

fn assert_no_duplicate_series(text: &str) {
    let mut seen = HashSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.rsplit_once(' ').map(|(s, _)| s).unwrap_or(line);
        assert!(seen.insert(series.to_string()), "series appears twice: {series}");
    }
}

#[test]
fn no_series_appears_twice_in_a_scrape() {
    let d = Daemon::start(DEMO_SCENARIO);
    assert_no_duplicate_series(&d.get("/metrics", &[]).text());
    assert_no_duplicate_series(&d.get("/metrics", &[("Accept", "application/openmetrics-text")]).text());
}

#[test]
fn promtool_finds_nothing_to_complain_about() {
    let d = Daemon::start(DEMO_SCENARIO);
    // Make every family appear: a lost GPU and an error counter too.
    let lost = edit_device(DEMO_SCENARIO, 7, |dev| format!("{dev}    lost: true\n"));
    d.set_scenario(&lost);
    d.scrape_until("GPU 7 down", |m| m.value("gpu_up", &[gpu("7")]) == Some(0.0));
    let body = d.get("/metrics", &[]).body;

    let (ok, report) = promtool_check_metrics(&body);
    assert!(ok, "promtool check metrics failed:\n{report}");
    assert!(report.trim().is_empty(), "promtool check metrics reported:\n{report}");
}

#[test]
fn healthz_and_index_answer() {
    let d = Daemon::start(DEMO_SCENARIO);
    let h = d.get("/healthz", &[]);
    assert_eq!((h.status, h.text().as_str()), (200, "ok\n"));
    let index = d.get("/", &[]);
    assert_eq!(index.status, 200);
    assert!(index.text().contains("href=\"/metrics\""));
    assert_eq!(d.get("/nope", &[]).status, 404);
}

#[test]
fn sigterm_stops_the_daemon_cleanly() {
    let d = Daemon::start(DEMO_SCENARIO);
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn a_board_with_a_fan_reports_its_speed() {
    let with_fan = "devices:\n  - name: NVIDIA L40S\n    uuid: GPU-fan\n    pci_bus_id: \"00000000:3B:00.0\"\n    temperature: 50\n    fan_speed_percent: 40\n";
    let m = Daemon::start(with_fan).scrape();
    assert_eq!(m.value("gpu_fan_speed_ratio", &[("uuid", "GPU-fan")]), Some(0.4));
    assert!(!m.has_family("gpuwarden_collector_errors_total"), "{}", m.text);
}

#[test]
fn every_family_served_is_documented_in_docs_metrics_md() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    // The demo with a fan, a lost GPU, a vGPU licence and an error counter shows every family
    // there is.
    // With scheduled probes over the simulated CUDA driver; GPU 1 runs a job, so its probes
    // are skipped.
    let scenario = edit_device(&with_cuda(DEMO_SCENARIO), 7, |dev| format!("{dev}    lost: true\n"));
    let scenario = edit_device(&scenario, 0, |dev| format!("{dev}    fan_speed_percent: 30\n"));
    let scenario = edit_device(&scenario, 1, |dev| format!("{dev}    compute_processes: 1\n"));
    let scenario = edit_device(&scenario, 2, |dev| format!("{dev}    vgpu_licensed: true\n"));
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let d = Daemon::start_full(&scenario, &test_config(&sim_library(), FAST_PROBES), "", &env);
    // And XIDs, one on a bus no GPU has.
    d.log_kernel(include_str!("../../config/demo-kernel-log.txt"));
    d.log_kernel("NVRM: Xid (PCI:0000:f1:00): 79, pid=1, name=x, GPU has fallen off the bus.\n");
    let m = d.scrape_until("GPU 7 down and XIDs counted", |m| {
        m.value("gpu_up", &[gpu("7")]) == Some(0.0)
            && m.has_family("gpuwarden_xid_unattributed_total")
            && m.has_family("gpu_probe_clock_event_seconds")
            && m.has_family("gpu_probe_skipped_total")
    });
    let families: HashSet<String> = m
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect();
    assert!(families.len() >= 55, "expected every family, got {families:?}");
    for family in families {
        assert!(
            docs.contains(&format!("`{family}`")),
            "{family} is not documented in docs/metrics.md"
        );
    }
}

#[test]
fn an_nvml_with_missing_symbols_gives_partial_metrics_and_no_panic() {
    let old = old_sim_library();
    assert!(old.exists(), "{}", old.display());
    let d = Daemon::start_with(DEMO_SCENARIO, &test_config(&old, ""));
    let m = d.scrape();
    assert_eq!(m.value("gpuwarden_backend_up", &[("backend", "nvml")]), Some(1.0));
    // What the old driver has is there...
    assert_eq!(
        m.value("gpu_temperature_celsius", &[gpu("2"), ("sensor", "gpu")]),
        Some(88.0)
    );
    assert_eq!(m.value("gpu_power_watts", &[gpu("1")]), Some(690.0));
    assert_eq!(m.value("gpu_pcie_link_width_lanes", &[gpu("3")]), Some(8.0));
    // ...clock events through the older "throttle reasons" symbol...
    assert_eq!(
        m.value("gpu_clock_event_active", &[gpu("2"), ("reason", "hw_thermal_slowdown")]),
        Some(1.0)
    );
    // ...and what it lacks is absent, not zero, and not counted as an error.
    for family in [
        "gpu_energy_joules_total",
        "gpu_memory_used_bytes",
        "gpu_clock_event_seconds_total",
        "gpu_remapped_rows",
    ] {
        assert!(!m.has_family(family), "{family} should be absent");
    }
    assert!(
        m.value("gpu_temperature_celsius", &[gpu("2"), ("sensor", "memory")])
            .is_none()
    );
    assert!(!m.has_family("gpuwarden_collector_errors_total"), "{}", m.text);
    // No event wait in this NVML: the XID event source says it is down, once, quietly.
    let m = d.scrape_until("event source down", |m| {
        m.value("gpuwarden_xid_source_up", &[("source", "nvml_events")]) == Some(0.0)
    });
    assert_eq!(
        m.value("gpuwarden_xid_source_up", &[("source", "kernel_log")]),
        Some(1.0)
    );
    assert!(
        !d.log_text().contains(" WARN ") && !d.log_text().contains(" ERROR "),
        "{}",
        d.log_text()
    );
    holds_for(
        "still polling, still alive",
        std::time::Duration::from_millis(500),
        || match d.scrape().find("gpu_up", &[]).len() {
            8 => Ok(()),
            n => Err(format!("{n} GPUs up")),
        },
    );
    assert_eq!(d.stop(), Some(0));
}

#[test]
fn a_driver_reload_while_running_reinitialises_nvml_and_keeps_the_counts() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("NVML event source up", |m| {
        m.value("gpuwarden_xid_source_up", &[("source", "nvml_events")]) == Some(1.0)
    });
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, Graphics Exception\n");
    d.scrape_until("Xid 13", |m| {
        m.value("gpu_xid_errors_total", &[gpu("0"), ("xid", "13")]) == Some(1.0)
    });

    // The driver is unloaded (an upgrade): every call says "uninitialized", init fails.
    let gone = format!("uninitialized: true\ninit_error: driver_not_loaded\n{DEMO_SCENARIO}");
    d.set_scenario(&gone);
    let m = d.scrape_until("NVML down, GPUs listed as down", |m| {
        m.value("gpuwarden_backend_up", &[("backend", "nvml")]) == Some(0.0)
            && m.find("gpu_up", &[]).len() == 8
            && m.find("gpu_up", &[]).iter().all(|s| s.value == 0.0)
    });
    assert_eq!(
        m.value("gpu_xid_errors_total", &[gpu("0"), ("xid", "13")]),
        Some(1.0),
        "counts survive"
    );
    assert!(
        d.log_text().contains("NVML stopped answering on every GPU"),
        "{}",
        d.log_text()
    );
    assert_eq!(d.log_text().matches("NVML stopped answering").count(), 1, "said once");

    // The new driver is loaded: NVML comes back, the GPUs answer, the event set is new.
    d.set_scenario(DEMO_SCENARIO);
    let m = d.scrape_until("NVML back", |m| {
        m.value("gpuwarden_backend_up", &[("backend", "nvml")]) == Some(1.0)
            && m.find("gpu_up", &[]).iter().filter(|s| s.value == 1.0).count() == 8
    });
    assert_eq!(m.value("gpu_xid_errors_total", &[gpu("0"), ("xid", "13")]), Some(1.0));
    assert_eq!(d.log_text().matches("NVML ready").count(), 2, "{}", d.log_text());
    let again = edit_device(DEMO_SCENARIO, 2, |dev| format!("{dev}    xid_events: [48]\n"));
    // The re-registered event set delivers events raised after it registered.
    std::thread::sleep(std::time::Duration::from_millis(300));
    d.set_scenario(&again);
    d.scrape_until("Xid 48 through the new event set", |m| {
        m.value("gpu_xid_errors_total", &[gpu("2"), ("xid", "48")]) == Some(1.0)
    });
}

/// Costly, slowly changing readings (ECC, remaps, replays, clock-event time, PCIe width,
/// processes) are read every `poll.slow_interval`, the energy counter every three of them;
/// temperatures and the rest every `poll.interval`.
#[test]
fn slow_readings_follow_the_slow_interval_and_fast_ones_every_poll() {
    // Energy every 3 s.
    let config = test_config(&sim_library(), "").replace("slow_interval: 200ms", "slow_interval: 1s");
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    d.scrape_until("first poll", |m| {
        m.value("gpu_energy_joules_total", &[gpu("0")]) == Some(91000000.0)
    });
    // Let a slow read happen, then change both kinds of reading at once.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| {
        set_line(&set_line(dev, "energy_mj", "92000000000"), "temperature", "61")
    });
    let changed = std::time::Instant::now();
    d.set_scenario(&scenario);
    let m = d.scrape_until("new temperature", |m| {
        m.value("gpu_temperature_celsius", &[gpu("0"), ("sensor", "gpu")]) == Some(61.0)
    });
    if changed.elapsed() < std::time::Duration::from_millis(2000) {
        // The temperature came with a fast poll; the energy waits for the next slow read.
        assert_eq!(
            m.value("gpu_energy_joules_total", &[gpu("0")]),
            Some(91000000.0),
            "{}",
            m.text
        );
    }
    d.scrape_until_within("energy refreshed", std::time::Duration::from_secs(8), |m| {
        m.value("gpu_energy_joules_total", &[gpu("0")]) == Some(92000000.0)
    });
    assert!(
        changed.elapsed() >= std::time::Duration::from_millis(1500),
        "energy came too soon for a 3 s slow interval"
    );
}

/// A GPU on the PCI bus that NVML does not enumerate is reported (gpu_pci_missing, a node
/// finding in `check` and on the status page); one passed through to a VM is not.
#[test]
fn a_gpu_on_the_bus_that_nvml_does_not_show_is_missing() {
    let root = tempfile::tempdir().unwrap();
    let mut gpus: Vec<(&str, Option<&str>)> = DEMO_ADDRESSES.iter().map(|a| (*a, Some("nvidia"))).collect();
    gpus.push(("0000:ee:00.0", None));
    gpus.push(("0000:ef:00.0", Some("vfio-pci")));
    pci_fixture(root.path(), &gpus);
    let config = test_config(
        &sim_library(),
        &format!("amd:\n  sysfs_root: {}\n", root.path().display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("the PCI census", |m| m.has_family("gpu_pci_devices"));
    assert_eq!(m.value("gpu_pci_devices", &[("vendor", "nvidia")]), Some(9.0));
    let missing = m.find("gpu_pci_missing", &[]);
    assert_eq!(missing.len(), 1, "{}", m.text);
    assert_eq!(missing[0].labels["pci_bus_id"], "0000:ee:00.0");
    assert_eq!(missing[0].labels["driver"], "");
    let page = d.get("/", &[]).page_text();
    assert!(
        page.contains("0000:ee:00.0 is on the PCI bus but no backend shows it"),
        "{page}"
    );

    let scenario = d.dir.path().join("scenario.yaml");
    let config_file = d.config_path();
    let out = std::process::Command::new(BIN)
        .args(["check", "--config"])
        .arg(&config_file)
        .env("GPUWARDEN_SIM_NVML_SCENARIO", &scenario)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("node: unhealthy: nvidia GPU 0000:ee:00.0"), "{stdout}");
}

/// Each GPU's PCIe AER totals come from sysfs: the demo's tree has 37 correctable errors on
/// GPU 2's link and none elsewhere; a GPU whose kernel shows no AER files (GPU 7 here, as in
/// a virtual machine) has no series rather than zeros.
#[test]
fn each_gpus_pcie_aer_totals_come_from_sysfs() {
    let root = tempfile::tempdir().unwrap();
    gpuwarden::cli::demo_fabric::write_tree(root.path()).unwrap();
    let gpu7 = std::fs::canonicalize(root.path().join("sys/bus/pci/devices/0000:db:00.0")).unwrap();
    for file in ["aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal"] {
        std::fs::remove_file(gpu7.join(file)).unwrap();
    }
    let config = test_config(
        &sim_library(),
        &format!("amd:\n  sysfs_root: {}\n", root.path().display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("the AER totals", |m| m.has_family("gpu_pcie_aer_errors_total"));
    let aer = |gpu: &str, severity: &str| m.value("gpu_pcie_aer_errors_total", &[("gpu", gpu), ("severity", severity)]);
    assert_eq!(aer("2", "correctable"), Some(37.0), "{}", m.text);
    assert_eq!(aer("2", "nonfatal"), Some(0.0));
    assert_eq!(aer("2", "fatal"), Some(0.0));
    assert_eq!(aer("0", "correctable"), Some(0.0));
    assert!(
        m.find("gpu_pcie_aer_errors_total", &[("gpu", "7")]).is_empty(),
        "{}",
        m.text
    );
    assert_eq!(m.find("gpu_pcie_aer_errors_total", &[]).len(), 7 * 3);
}

/// A hardware power slowdown (power brake, slowdown signal) that comes and goes between
/// scrapes still degrades the GPU: its driver counter grew.
#[test]
fn a_hardware_power_slowdown_between_scrapes_is_a_finding() {
    let d = Daemon::start(DEMO_SCENARIO);
    let reason = |m: &Metrics| m.value("gpu_health_reason", &[("gpu", "0"), ("reason", "hw_slowdown")]);
    let m = d.scrape_until("a few rounds", |m| {
        m.value("gpuwarden_poll_round_duration_seconds_count", &[])
            .unwrap_or(0.0)
            >= 3.0
    });
    assert_eq!(reason(&m), None, "a healthy GPU has no such finding");
    let braked = edit_device(DEMO_SCENARIO, 0, |dev| {
        dev.replace("hw_power_brake_slowdown: 0 }", "hw_power_brake_slowdown: 2000000000 }")
    });
    d.set_scenario(&braked);
    let m = d.scrape_until("the power brake seen", |m| reason(m) == Some(1.0));
    assert_eq!(m.value("gpu_health", &[("gpu", "0"), ("state", "degraded")]), Some(1.0));
    // Never active at a scrape: it was the counter.
    assert_eq!(
        m.value(
            "gpu_clock_event_active",
            &[("gpu", "0"), ("reason", "hw_power_brake_slowdown")]
        ),
        Some(0.0)
    );
}

/// Compute processes: the count always, per-process series (with the process's name and
/// container from /proc) only when asked for, the largest users of memory first.
#[test]
fn compute_processes_are_counted_and_listed_when_asked() {
    let processes = "    processes:\n      - {pid: 4101, used_memory: 1073741824}\n      - {pid: 4102, used_memory: 8589934592}\n      - {pid: 4103}\n";
    let scenario = edit_device(DEMO_SCENARIO, 0, |dev| format!("{dev}{processes}"));
    // Off by default: the count only.
    let d = Daemon::start(&scenario);
    let m = d.scrape();
    assert_eq!(m.value("gpu_processes", &[("gpu", "0")]), Some(3.0));
    assert_eq!(m.value("gpu_processes", &[("gpu", "4")]), Some(0.0));
    assert!(!m.has_family("gpu_process_memory_used_bytes"));
    drop(d);

    let proc_root = tempfile::tempdir().unwrap();
    let container = "ab12".repeat(16);
    for (pid, comm, cgroup) in [
        (
            4101,
            "python3",
            format!("0::/kubepods.slice/cri-containerd-{container}.scope"),
        ),
        (4102, "vllm", "0::/user.slice/user-1000.slice".to_string()),
    ] {
        let dir = proc_root.path().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
        std::fs::write(dir.join("cgroup"), format!("{cgroup}\n")).unwrap();
    }
    let config = test_config(
        &sim_library(),
        &format!(
            "processes:\n  per_process: true\n  max_per_gpu: 2\n  proc_root: {}\n",
            proc_root.path().display()
        ),
    );
    let d = Daemon::start_with(&scenario, &config);
    let m = d.scrape();
    let listed = m.find("gpu_process_memory_used_bytes", &[("gpu", "0")]);
    assert_eq!(listed.len(), 2, "{}", m.text);
    assert_eq!(
        m.value(
            "gpu_process_memory_used_bytes",
            &[("pid", "4102"), ("process", "vllm"), ("container_id", "")]
        ),
        Some(8589934592.0)
    );
    assert_eq!(
        m.value(
            "gpu_process_memory_used_bytes",
            &[
                ("pid", "4101"),
                ("process", "python3"),
                ("container_id", container.as_str())
            ]
        ),
        Some(1073741824.0)
    );
    // 4103 has no memory figure and is third: no series of its own; it is in the count.
    assert!(m.find("gpu_process_memory_used_bytes", &[("pid", "4103")]).is_empty());
    assert_eq!(m.value("gpu_processes", &[("gpu", "0")]), Some(3.0));
}

/// The NVIDIA driver down (no NVML library) while its GPUs are on the PCI bus: the node is
/// unhealthy, in `check` and in the daemon's verdict from its first answer on (it used to say
/// "ok: 0 GPU(s)"). A node with no GPU anywhere has nothing to judge and stays ok.
#[test]
fn nvidia_gpus_on_the_bus_that_no_driver_reads_make_the_node_unhealthy() {
    for (gpus, check_exit, health_exit) in [(&DEMO_ADDRESSES[..2], 1, 1), (&[][..], 2, 0)] {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("sys/bus/pci/devices")).unwrap();
        let bound: Vec<(&str, Option<&str>)> = gpus.iter().map(|a| (*a, Some("nvidia"))).collect();
        pci_fixture(root.path(), &bound);
        let config = test_config(
            std::path::Path::new("/nonexistent/libnvidia-ml.so.1"),
            &format!("amd:\n  sysfs_root: {}\n", root.path().display()),
        );
        let d = Daemon::start_with(DEMO_SCENARIO, &config);
        let out = std::process::Command::new(BIN)
            .args(["health", "--socket"])
            .arg(d.socket_path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(health_exit),
            "{gpus:?}: {stdout}\n{}",
            d.log_text()
        );
        if health_exit == 1 {
            assert!(stdout.starts_with("unhealthy: node gpu_missing"), "{stdout}");
        }
        let out = std::process::Command::new(BIN)
            .args(["check", "--config"])
            .arg(d.config_path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(check_exit), "{gpus:?}: {stdout}");
        if check_exit == 1 {
            assert!(stdout.contains("node: unhealthy: nvidia GPU 0000:19:00.0"), "{stdout}");
        }
    }
}

/// Voluntary context switches by thread name (threads of one name summed): how often each
/// slept and was woken.
fn wake_ups(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let switches: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        *out.entry(name.trim().to_string()).or_default() += switches;
    }
    out
}

/// An idle daemon's threads sleep until there is work: the probe scheduler with the schedule
/// off until a reload, the periodic sources that are off until a reload, the memory trimmer
/// until a burst of connections, the reader of a kernel-log file until the file changes, the
/// journal's writer until there is something to write.
/// Counted as the threads' wake-ups over a few seconds.
#[test]
fn an_idle_daemon_wakes_only_for_work() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("the first round", |m| m.value("gpu_up", &[("gpu", "0")]).is_some());
    // Meant: start-up's one-off work (the first journal batch, the inventory) ends first.
    std::thread::sleep(Duration::from_secs(2));
    let before = wake_ups(d.child.id());
    let window = Duration::from_secs(5);
    std::thread::sleep(window);
    let after = wake_ups(d.child.id());
    let per_second = |name: &str| {
        (after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0)) as f64 / window.as_secs_f64()
    };
    eprintln!(
        "wake-ups per second: {:?}",
        after.keys().map(|k| (k, per_second(k))).collect::<Vec<_>>()
    );
    assert!(
        per_second("probe-scheduler") <= 0.2,
        "{}",
        per_second("probe-scheduler")
    );
    // The journal looks at each snapshot from the publishing thread and its task wakes only
    // to write; what is left is the 30 s looks of the PCI census and the DRM clients.
    assert!(
        per_second("tokio-rt-worker") <= 1.0,
        "{}",
        per_second("tokio-rt-worker")
    );
}
