//! The shipped alert rules, Alertmanager config and scrape config, checked by the real tools,
//! and proven end to end: a real Prometheus scrapes the daemon over simulated GPUs with the
//! shipped rules loaded, and the alerts fire and clear as the GPUs change.

mod common;

use common::*;
use std::collections::{BTreeSet, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

fn run(tool: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("{tool} is needed for this test ({e}): apt-get install prometheus prometheus-alertmanager")
    });
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn promtool_checks_and_unit_tests_the_rules() {
    let (ok, out) = run("promtool", &["check", "rules", RULES]);
    assert!(ok && out.contains("SUCCESS: 17 rules found"), "{out}");
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/tests/alerts.test.yml");
    let (ok, out) = run("promtool", &["test", "rules", tests]);
    assert!(ok && out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_alert_the_design_names_is_shipped_and_unit_tested() {
    let rules = std::fs::read_to_string(RULES).unwrap();
    let tests = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/prometheus/tests/alerts.test.yml"
    ))
    .unwrap();
    let runbooks = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/alerts.md")).unwrap();
    for alert in [
        "GpuThermalViolation",
        "GpuTemperatureNearSlowdown",
        "GpuXidFatal",
        "GpuXidCritical",
        "GpuLost",
        "GpuPcieLinkDegraded",
        "GpuPersistenceModeOff",
        "GpuEccUncorrectable",
        "GpuRowRemapFailure",
        "GpuProbeFailed",
        "GpuwardenDown",
        "GpuwardenPollStale",
    ] {
        assert!(
            rules.contains(&format!("- alert: {alert}\n")),
            "{alert} is not in the rules"
        );
        // Each alert has a case where it fires (exp_alerts with labels) and one where it does not.
        let cases = tests.matches(&format!("alertname: {alert}\n")).count();
        assert!(cases >= 2, "{alert} has {cases} test case(s)");
        assert!(
            runbooks.contains(&format!("## {alert}")),
            "{alert} has no runbook in docs/alerts.md"
        );
    }
}

#[test]
fn the_example_prometheus_and_alertmanager_configs_are_valid() {
    let (ok, out) = run(
        "promtool",
        &[
            "check",
            "config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/prometheus.yml"),
        ],
    );
    assert!(ok, "{out}");
    let am = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/alertmanager/alertmanager.yml");
    let (ok, out) = run("amtool", &["check-config", am]);
    assert!(ok && out.contains("2 inhibit rules"), "{out}");
    let route = |labels: &[&str]| {
        let out = Command::new("amtool")
            .args(["config", "routes", "test", "--config.file", am])
            .args(labels)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // The receiver is on stdout; amtool's notes go to stderr.
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(route(&["alertname=GpuLost", "severity=critical"]), "gpu-pager");
    assert_eq!(
        route(&["alertname=GpuPcieLinkDegraded", "severity=warning"]),
        "gpu-tickets"
    );
}

/// Metric names a PromQL text refers to (ours, plus `up`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_alphabetic()
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || "_:$.".contains(bytes[i - 1])))
        {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_' || bytes[i] == ':') {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            if (word.starts_with("gpu_") || word.starts_with("gpuwarden_")) && !word.contains(':') {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn every_metric_the_rules_use_is_served_by_the_daemon() {
    let rules: serde_json::Value = serde_saphyr::from_str(&std::fs::read_to_string(RULES).unwrap()).unwrap();
    let exprs: Vec<String> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| {
            g["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["expr"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(exprs.len(), 17);
    let used = metric_names(&exprs.join("\n"));
    assert!(
        used.contains("gpu_clock_event_seconds_total") && used.contains("gpu_up"),
        "{used:?}"
    );

    // The demo with a lost GPU, XIDs of every severity, a failed remap and scheduled probes
    // (over the simulated CUDA driver) shows every family.
    let scenario = edit_device(&with_cuda(DEMO_SCENARIO), 7, |dev| format!("{dev}    lost: true\n"));
    let scenario = edit_device(&scenario, 6, |dev| dev.replace("failed: false", "failed: true"));
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let d = Daemon::start_full(&scenario, &test_config(&sim_library(), FAST_PROBES), "", &env);
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.\nNVRM: Xid (PCI:0000:3b:00): 94, pid=1, name=x, Contained\n");
    let m = d.scrape_until("GPU 7 down and XIDs", |m| {
        m.value("gpu_up", &[("gpu", "7")]) == Some(0.0)
            && m.find("gpu_xid_errors_total", &[]).len() == 2
            && m.has_family("gpu_probe_pass")
    });
    let served: HashSet<&str> = m.samples.iter().map(|s| s.name.as_str()).collect();
    for name in &used {
        assert!(
            served.contains(name.as_str()),
            "the rules use {name}, which the daemon does not serve"
        );
    }
}

/// The demo with every GPU healthy as far as the alerts go: no thermal reason active, no
/// ECC or remap trouble, persistence on, full PCIe width.
fn quiet_scenario() -> String {
    let mut s = DEMO_SCENARIO.to_string();
    s = s.replace("active: 96, supported: 511", "active: 0, supported: 511"); // GPU 2's thermal bits
    s = s.replace("temperature: 88\n", "temperature: 55\n"); // and its 88 C, 1 C under slowdown
    s = s.replace("width: 8, width_max: 16", "width: 16, width_max: 16");
    s = s.replace("uncorrected: 1 }", "uncorrected: 0 }");
    s
}

#[test]
fn alerts_fire_in_a_live_prometheus_for_the_right_gpu_and_clear() {
    let quiet = quiet_scenario();
    let config = "listen: 127.0.0.1:0\npoll:\n  interval: 100ms\n  timeout: 80ms\nnvml:\n  library_path: LIB\n  retry_initial: 200ms\n  retry_max: 1s\nxid:\n  kernel_log_path: \"@KMSG@\"\n"
        .replace("LIB", &sim_library().display().to_string());
    let d = Daemon::start_with(&quiet, &config);
    let prom = Prometheus::start(&d.addr);

    // A new Prometheus takes a few seconds before its first scrape: wait for data, not time.
    prom.wait_for_data();
    // Let the thermal counters' 1m window and the rules settle, then nothing may fire but
    // the always-on alerts of the demo's pending row remap (none) and GPU 4's persistence
    // (turned on by the daemon).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(prom.firing(), BTreeSet::new(), "alerts firing on a quiet node");

    // Heat GPU 0, give GPU 1 a fatal XID, lose GPU 3: all at once.
    let hot = edit_device(&quiet, 0, |dev| {
        set_line(
            &set_line(dev, "temperature", "90"),
            "clock_events",
            "{ active: 64, supported: 511 }",
        )
    });
    let broken = edit_device(&hot, 3, |dev| format!("{dev}    lost: true\n"));
    let injected = Instant::now();
    d.set_scenario(&broken);
    d.log_kernel("NVRM: Xid (PCI:0000:3b:00): 79, pid=2311, name=python3, GPU has fallen off the bus.\n");

    // Each alert must fire within its `for` plus two scrape intervals (1s each).
    let expectations = [
        ("GpuThermalViolation", "0", 30),
        ("GpuXidFatal", "1", 0),
        ("GpuLost", "3", 60),
    ];
    let mut fired_at = std::collections::BTreeMap::new();
    let deadline = injected + Duration::from_secs(60 + 2 + 5);
    while fired_at.len() < expectations.len() && Instant::now() < deadline {
        let firing = prom.firing();
        for (alert, gpu, _) in expectations {
            if firing.contains(&(alert.to_string(), gpu.to_string())) {
                fired_at.entry(alert).or_insert_with(|| injected.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (alert, gpu, for_seconds) in expectations {
        let took = fired_at
            .get(alert)
            .unwrap_or_else(|| panic!("{alert} never fired for GPU {gpu}; firing: {:?}", prom.firing()));
        let limit = Duration::from_secs(for_seconds + 2);
        assert!(
            *took <= limit,
            "{alert} fired after {took:?}, more than its for plus two scrapes ({limit:?})"
        );
        assert!(
            *took >= Duration::from_secs(for_seconds),
            "{alert} fired after {took:?}, before its for"
        );
    }
    // Each for its own GPU only (an alert on a lost GPU's symptoms would be inhibited in
    // Alertmanager; Prometheus itself must not raise them at all here).
    let firing = prom.firing();
    let expected: BTreeSet<(String, String)> = expectations
        .iter()
        .map(|(a, g, _)| (a.to_string(), g.to_string()))
        .collect();
    assert_eq!(firing, expected);

    // Cool GPU 0 and bring GPU 3 back: those alerts clear. The fatal XID stays on record
    // until the node reboots, so its alert keeps firing.
    d.set_scenario(&quiet);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let firing = prom.firing();
        if firing == BTreeSet::from([("GpuXidFatal".to_string(), "1".to_string())]) {
            break;
        }
        assert!(Instant::now() < deadline, "alerts did not clear: {firing:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
