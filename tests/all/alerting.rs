//! The shipped alert rules, Alertmanager config and scrape config, checked by the real tools,
//! and proven end to end: a real Prometheus scrapes the daemon over simulated GPUs with the
//! shipped rules loaded, and the alerts fire and clear as the GPUs change.

use crate::common;

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
    assert!(ok && out.contains("SUCCESS: 62 rules found"), "{out}");
    for tests in [
        concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/tests/alerts.test.yml"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/tests/energy.test.yml"),
    ] {
        let (ok, out) = run("promtool", &["test", "rules", tests]);
        assert!(ok && out.contains("SUCCESS"), "{tests}: {out}");
    }
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
        "GpuNvlinkDown",
        "GpuNvlinkErrors",
        "GpuFabricDegraded",
        "GpuThermalViolation",
        "GpuTemperatureNearSlowdown",
        "GpuXidFatal",
        "GpuXidCritical",
        "GpuLost",
        "GpuPcieLinkDegraded",
        "GpuMissing",
        "GpuAllocatedIdle",
        "GpuPersistenceModeOff",
        "GpuEccUncorrectable",
        "GpuRowRemapFailure",
        "GpuRecoveryActionRequired",
        "NicPortDown",
        "NicPortDegraded",
        "NvswitchSxidFatal",
        "GpuFabricManagerDown",
        "GpuProbeFailed",
        "GpuwardenDown",
        "GpuwardenPollStale",
        "GpuwardenXidSourceDown",
        "GpuwardenDrainGuardActive",
        "GpuwardenRemediationFailed",
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
    assert!(ok && out.contains("4 inhibit rules"), "{out}");
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
        // A label value ("gpu_lost") names no metric.
        if bytes[i] == '"' {
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                i += 1;
            }
            i += 1;
            continue;
        }
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
    assert_eq!(exprs.len(), 62);
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
    // And a GPU on the PCI bus that NVML does not show.
    let mut pci: Vec<(&str, Option<&str>)> = DEMO_ADDRESSES.iter().map(|a| (*a, Some("nvidia"))).collect();
    pci.push(("0000:ee:00.0", None));
    pci_fixture(dir.path(), &pci);
    // And an NVSwitch, so the fabric manager is looked for.
    nvswitch_fixture(dir.path(), "0000:05:00.0");
    // And an event sink (nothing listens there: it lags, and says so).
    // And a pod and a batch job on GPU 0.
    let kubelet = FakeKubelet::start(
        dir.path(),
        r#"{"pods": [{"namespace": "ml", "name": "p", "containers": [{"name": "c", "devices": [{"resource": "nvidia.com/gpu", "ids": ["nvidia0"]}]}]}]}"#,
    );
    std::fs::create_dir_all(dir.path().join("jobs")).unwrap();
    std::fs::write(dir.path().join("jobs/0"), "4242\n").unwrap();
    let config = format!(
        "{FAST_PROBES}remediation:\n  mode: auto\n  reboot_marker: {}/reboot-required\n  pause_file: {}/pause\n\
         amd:\n  sysfs_root: {}\nkubernetes:\n  pod_resources_socket: {}\n  refresh: 1s\nhpc_jobs:\n  mapping_dir: {}\n\
         fabric_manager:\n  pid_file: {}\nevents:\n  sinks:\n    - name: ops\n      webhook: {{url: \"http://127.0.0.1:9/in\", timeout: 1s}}\n\
         health:\n  custom_rules:\n    - {{name: hot, when: gpu.temperature_c > 80, advice: cool it}}\n",
        dir.path().display(),
        dir.path().display(),
        dir.path().display(),
        kubelet.socket.display(),
        dir.path().join("jobs").display(),
        // No fabric manager beside the simulated fabric: gpu_fabric_manager_up 0.
        dir.path().join("nv-fabricmanager.pid").display()
    );
    let d = Daemon::start_full(&scenario, &test_config(&sim_library(), &config), "", &env);
    d.log_kernel(
        "NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.\nNVRM: Xid (PCI:0000:3b:00): 94, pid=1, name=x, Contained\n\
         nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n",
    );
    // And the Slurm health check's drain guard, as its program reports it.
    let report = Command::new(BIN)
        .args([
            "health",
            "scheduler-report",
            "--guard",
            "refused",
            "--guard-drained",
            "2",
            "--guard-nodes",
            "3",
        ])
        .args(["--guard-max", "2", "--socket"])
        .arg(d.socket_path())
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let m = d.scrape_until("GPU 7 down and XIDs", |m| {
        m.value("gpu_up", &[("gpu", "7")]) == Some(0.0)
            && m.find("gpu_xid_errors_total", &[]).len() == 2
            && m.has_family("gpu_probe_pass")
            && m.has_family("gpu_pci_missing")
            && m.has_family("gpu_fabric_manager_up")
            && m.has_family("gpu_nvswitch_sxid_errors_total")
            && m.has_family("gpu_pod_info")
            && m.has_family("gpu_job_info")
            && m.has_family("gpuwarden_drain_guard_refused")
            && m.value("gpuwarden_remediation_failed", &[]) == Some(1.0)
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
    // GPU 6's driver asks for the reset its pending remap waits for: not on a quiet node.
    s = s.replace("recovery_action: 1", "recovery_action: 0");
    s
}

/// Validation probes only (no schedule), a second each on the simulated CUDA.
const VALIDATION_PROBES: &str = "probe:\n  schedule: false\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 20s\n  \
     durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";

#[test]
fn alerts_fire_in_a_live_prometheus_for_the_right_gpu_and_clear() {
    let quiet = all_idle(&with_cuda(&quiet_scenario()));
    let config = format!(
        "listen: 127.0.0.1:0\npoll:\n  interval: 100ms\n  timeout: 80ms\nnvml:\n  library_path: LIB\n  retry_initial: 200ms\n  retry_max: 1s\nxid:\n  kernel_log_path: \"@KMSG@\"\n\
         remediation:\n  mode: advise\n{VALIDATION_PROBES}"
    )
    .replace("LIB", &sim_library().display().to_string());
    let cuda = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda.path(), true).display().to_string())];
    let d = Daemon::start_full(&quiet, &config, "", &env);
    let prom = Prometheus::start(&d.addr);

    // A new Prometheus takes a few seconds before its first scrape: wait for data, not time.
    prom.wait_for_data();
    // Let the rules settle, then nothing may fire but
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

    // Each alert must fire within its `for` plus two scrape intervals (1s each): a GPU the
    // driver lost pages at once, on the verdict's gpu_lost.
    let expectations = [
        ("GpuThermalViolation", "0", 0),
        ("GpuXidFatal", "1", 0),
        ("GpuLost", "3", 0),
    ];
    let mut fired_at = std::collections::BTreeMap::new();
    let deadline = injected + Duration::from_secs(2 + 5);
    while fired_at.len() < expectations.len() && Instant::now() < deadline {
        let firing = prom.firing();
        for (alert, gpu, _) in expectations {
            if firing.contains(&(alert.to_string(), gpu.to_string())) {
                fired_at.entry(alert).or_insert_with(|| injected.elapsed());
            }
        }
        // Meant: when each fired, to a tenth of a second.
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

    // The page names the verdict's next step (remediation.mode advise): GPU 1's fatal XID
    // 79 is a reboot's, in the same words as `gpuwarden health`.
    let alerts = prom.get_json("/api/v1/alerts").unwrap();
    let xid_page = alerts["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["alertname"] == "GpuXidFatal")
        .cloned()
        .unwrap();
    let description = xid_page["annotations"]["description"].as_str().unwrap();
    assert!(description.contains("Next step: reboot_required"), "{description}");
    assert!(d.health(false).1.contains("next step: GPU 1 reboot_required"));

    // Cool GPU 0 and bring GPU 3 back: those alerts clear. The fatal XID stays on record
    // until the node reboots, and so does its page until a person clears the GPU.
    d.set_scenario(&quiet);
    let fatal_only = BTreeSet::from([("GpuXidFatal".to_string(), "1".to_string())]);
    eventually("the other alerts to clear", Duration::from_secs(20), || {
        (prom.firing() == fatal_only).then_some(())
    });
    holds_for(
        "the fatal XID's page held until the clear",
        Duration::from_secs(3),
        || {
            let firing = prom.firing();
            firing
                .contains(&("GpuXidFatal".to_string(), "1".to_string()))
                .then_some(())
                .ok_or(format!("{firing:?}"))
        },
    );

    // The repair, the clear and a passed validation: the page resolves within two
    // evaluations (250 ms each) of the scrape that shows the verdict let go, while the
    // counter stays on the dashboards.
    let (code, out, err) = d.clear("1", "reseated GPU 1, INC-7", &[]);
    assert_eq!(code, 0, "the clear was taken: {out}{err}");
    let validated = poll_until(Duration::from_secs(30), || {
        let m = d.scrape();
        (m.value("gpu_health", &[("gpu", "1"), ("state", "ok")]) == Some(1.0)).then_some(Instant::now())
    })
    .expect("GPU 1's validation passed");
    let resolved = poll_until(Duration::from_secs(10), || {
        (!prom.firing().iter().any(|(alert, _)| alert == "GpuXidFatal")).then_some(Instant::now())
    })
    .expect("GpuXidFatal resolved");
    assert!(
        resolved.saturating_duration_since(validated) <= Duration::from_millis(1000 + 2 * 250 + 500),
        "GpuXidFatal resolved {:?} after the validation passed",
        resolved.saturating_duration_since(validated)
    );
    assert_eq!(
        d.scrape().value("gpu_xid_errors_total", &[("gpu", "1"), ("xid", "79")]),
        Some(1.0),
        "the counter stays"
    );
    assert_eq!(prom.firing(), BTreeSet::new());
}

/// `check` every 100 ms until it answers, for at most `within`.
fn poll_until<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = check() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One series of a generated promtool case: its labels and its value at time t (seconds),
/// `None` where it has no sample.
type SeriesAt = (&'static str, fn(u64) -> Option<f64>);

/// A generated case: the series, and (seconds after the event at 300 s, firing?) checks.
/// `settle` is added to each check time: two evaluation or scrape intervals, whichever is
/// longer, for the first sample after the event to be scraped and evaluated.
struct IntervalCase {
    alert: &'static str,
    what: &'static str,
    series: &'static [SeriesAt],
    /// (seconds from the event, whether `settle` is added, expect firing)
    checks: &'static [(i64, bool, bool)],
}

const EVENT: u64 = 300;
const GPU: &str = r#"instance="gpu-node-01:9100",job="gpuwarden",gpu="0",uuid="GPU-0000-a",vendor="nvidia""#;

fn interval_cases() -> Vec<IntervalCase> {
    vec![
        IntervalCase {
            alert: "GpuThermalViolation",
            what: "a one-off thermal slowdown between two scrapes (counter +3 s, never active at a scrape)",
            series: &[
                (
                    "gpu_clock_event_seconds_total{GPU,reason=\"sw_thermal_slowdown\"}",
                    |t| Some(if t < EVENT { 10.0 } else { 13.0 }),
                ),
                ("gpu_clock_event_active{GPU,reason=\"sw_thermal_slowdown\"}", |_| {
                    Some(0.0)
                }),
            ],
            checks: &[
                (-60, false, false),
                (0, true, true),
                (120, true, true),
                (600, false, false),
            ],
        },
        IntervalCase {
            alert: "GpuThermalViolation",
            what: "a healthy, power-capped GPU (its power-cap counter grows, thermal ones do not)",
            series: &[
                (
                    "gpu_clock_event_seconds_total{GPU,reason=\"sw_thermal_slowdown\"}",
                    |_| Some(10.0),
                ),
                ("gpu_clock_event_seconds_total{GPU,reason=\"sw_power_cap\"}", |t| {
                    Some(t as f64)
                }),
                ("gpu_clock_event_active{GPU,reason=\"sw_thermal_slowdown\"}", |_| {
                    Some(0.0)
                }),
                ("gpu_clock_event_active{GPU,reason=\"sw_power_cap\"}", |_| Some(1.0)),
            ],
            checks: &[
                (-180, false, false),
                (0, true, false),
                (300, false, false),
                (880, false, false),
            ],
        },
        IntervalCase {
            alert: "GpuThermalViolation",
            what: "thermal time from before gpuwarden started (a new series holding 40 s, not growing)",
            series: &[
                (
                    "gpu_clock_event_seconds_total{GPU,reason=\"hw_thermal_slowdown\"}",
                    |t| (t >= EVENT).then_some(40.0),
                ),
                ("gpu_clock_event_active{GPU,reason=\"hw_thermal_slowdown\"}", |t| {
                    (t >= EVENT).then_some(0.0)
                }),
            ],
            checks: &[(0, true, false), (120, true, false), (600, false, false)],
        },
        IntervalCase {
            alert: "GpuThermalViolation",
            what: "a driver reload between two scrapes (the counter 40, then 2: reset, and 2 s of slowdown since)",
            series: &[
                (
                    "gpu_clock_event_seconds_total{GPU,reason=\"sw_thermal_slowdown\"}",
                    |t| Some(if t < EVENT { 40.0 } else { 2.0 }),
                ),
                ("gpu_clock_event_active{GPU,reason=\"sw_thermal_slowdown\"}", |_| {
                    Some(0.0)
                }),
            ],
            checks: &[
                (-60, false, false),
                (0, true, true),
                (120, true, true),
                (600, false, false),
            ],
        },
        IntervalCase {
            alert: "GpuXidCritical",
            what: "the code again after a reboot 10 minutes on (5, no series while the node reboots, then 1)",
            series: &[(
                "gpu_xid_errors_total{GPU,xid=\"94\",severity=\"critical\"}",
                |t| match t {
                    t if t < EVENT + 480 => Some(5.0),
                    t if t < EVENT + 600 => None,
                    _ => Some(1.0),
                },
            )],
            checks: &[(540, false, false), (600, true, true), (720, true, true)],
        },
        IntervalCase {
            alert: "GpuXidCritical",
            what: "the first critical XID (a new series with the value 1)",
            series: &[("gpu_xid_errors_total{GPU,xid=\"94\",severity=\"critical\"}", |t| {
                (t >= EVENT).then_some(1.0)
            })],
            checks: &[
                (-60, false, false),
                (0, true, true),
                (120, true, true),
                (720, false, false),
            ],
        },
        IntervalCase {
            alert: "GpuXidCritical",
            what: "an old critical XID that does not grow",
            series: &[("gpu_xid_errors_total{GPU,xid=\"94\",severity=\"critical\"}", |_| {
                Some(2.0)
            })],
            checks: &[(360, false, false), (600, false, false), (880, false, false)],
        },
        IntervalCase {
            alert: "GpuXidFatal",
            what: "the first fatal XID, while the verdict holds it",
            series: &[
                ("gpu_xid_errors_total{GPU,xid=\"79\",severity=\"fatal\"}", |t| {
                    (t >= EVENT).then_some(1.0)
                }),
                ("gpu_health_reason{GPU,reason=\"xid_fatal\"}", |t| {
                    (t >= EVENT).then_some(1.0)
                }),
            ],
            checks: &[(-60, false, false), (0, true, true), (880, false, true)],
        },
        IntervalCase {
            alert: "GpuLost",
            what: "a GPU whose polls do not answer from the event on (a minute of them)",
            series: &[("gpu_up{GPU}", |t| Some(if t < EVENT { 1.0 } else { 0.0 }))],
            checks: &[(-60, false, false), (60, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "GpuRecoveryActionRequired",
            what: "the driver asks for a GPU reset from the event on (no for: state until the reset)",
            series: &[
                ("gpu_recovery_action{GPU,action=\"none\"}", |t| {
                    Some(if t < EVENT { 1.0 } else { 0.0 })
                }),
                ("gpu_recovery_action{GPU,action=\"gpu_reset\"}", |t| {
                    Some(if t < EVENT { 0.0 } else { 1.0 })
                }),
            ],
            checks: &[(-60, false, false), (0, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "NvswitchSxidFatal",
            what: "the first fatal SXID of a switch",
            series: &[(
                "gpu_nvswitch_sxid_errors_total{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",switch=\"2\",pci_bus_id=\"0000:07:00.0\",sxid=\"20034\",severity=\"fatal\"}",
                |t| (t >= EVENT).then_some(1.0),
            )],
            checks: &[(-60, false, false), (0, true, true), (880, false, true)],
        },
        IntervalCase {
            alert: "GpuFabricManagerDown",
            what: "the fabric manager stops at the event (for: 2m)",
            series: &[(
                "gpu_fabric_manager_up{instance=\"gpu-node-01:9100\",job=\"gpuwarden\"}",
                |t| Some(if t < EVENT { 1.0 } else { 0.0 }),
            )],
            checks: &[(60, false, false), (120, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "NicPortDegraded",
            what: "a port flapping from the event on (for: 5m)",
            series: &[(
                "gpu_node_health_reason{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",reason=\"nic_port_flapping\",subject=\"mlx5_0/1\",severity=\"degraded\"}",
                |t| (t >= EVENT).then_some(1.0),
            )],
            checks: &[(240, false, false), (300, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "NicPortDown",
            what: "a network port down from the event on (for: 1m)",
            series: &[(
                "gpu_node_health_reason{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",reason=\"nic_port_down\",subject=\"mlx5_0/1\",severity=\"unhealthy\"}",
                |t| (t >= EVENT).then_some(1.0),
            )],
            checks: &[(-60, false, false), (60, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "GpuJobStraggler",
            what: "one GPU of a job of three runs its SM clock 20% below the others from the event on (for: 10m)",
            series: &[
                ("gpu_job_info{GPU,hpc_job=\"1\"}", |_| Some(1.0)),
                ("gpu_clock_hertz{GPU,clock=\"sm\"}", |t| {
                    Some(if t < EVENT { 1755e6 } else { 1400e6 })
                }),
                ("gpu_utilization_ratio{GPU}", |_| Some(1.0)),
                (
                    "gpu_job_info{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-1\",hpc_job=\"1\"}",
                    |_| Some(1.0),
                ),
                (
                    "gpu_clock_hertz{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-1\",clock=\"sm\"}",
                    |_| Some(1755e6),
                ),
                (
                    "gpu_utilization_ratio{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-1\"}",
                    |_| Some(1.0),
                ),
                (
                    "gpu_job_info{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"0\",uuid=\"peer-2\",hpc_job=\"1\"}",
                    |_| Some(1.0),
                ),
                (
                    "gpu_clock_hertz{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"0\",uuid=\"peer-2\",clock=\"sm\"}",
                    |_| Some(1740e6),
                ),
                (
                    "gpu_utilization_ratio{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"0\",uuid=\"peer-2\"}",
                    |_| Some(1.0),
                ),
            ],
            checks: &[(-60, false, false), (540, false, false), (600, true, true)],
        },
        IntervalCase {
            alert: "GpuJobStalled",
            what: "a job's GPU spins from the event on: busy, 90 W of 700, tensor and DRAM idle (for: 10m)",
            series: &[
                ("gpu_job_info{GPU,hpc_job=\"1\"}", |_| Some(1.0)),
                ("gpu_utilization_ratio{GPU}", |_| Some(1.0)),
                ("gpu_power_watts{GPU}", |t| Some(if t < EVENT { 650.0 } else { 90.0 })),
                ("gpu_power_limit_watts{GPU}", |_| Some(700.0)),
                ("gpu_tensor_active_ratio{GPU}", |t| {
                    Some(if t < EVENT { 0.9 } else { 0.0 })
                }),
                ("gpu_dram_active_ratio{GPU}", |t| {
                    Some(if t < EVENT { 0.3 } else { 0.001 })
                }),
            ],
            checks: &[(-60, false, false), (540, false, false), (600, true, true)],
        },
        IntervalCase {
            alert: "GpuProbeStraggler",
            what: "a probe 15% below the fleet's median of four GPUs of the model (no for)",
            series: &[
                ("gpu_info{GPU,name=\"H100\"}", |_| Some(1.0)),
                (
                    "gpu_probe_flops_per_second{GPU,test=\"gemm_bf16\",figure=\"sustained\"}",
                    |t| Some(if t < EVENT { 675e12 } else { 570e12 }),
                ),
                (
                    "gpu_info{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-1\",name=\"H100\"}",
                    |_| Some(1.0),
                ),
                (
                    "gpu_probe_flops_per_second{instance=\"gpu-node-01:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-1\",test=\"gemm_bf16\",figure=\"sustained\"}",
                    |_| Some(680e12),
                ),
                (
                    "gpu_info{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"0\",uuid=\"peer-2\",name=\"H100\"}",
                    |_| Some(1.0),
                ),
                (
                    "gpu_probe_flops_per_second{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"0\",uuid=\"peer-2\",test=\"gemm_bf16\",figure=\"sustained\"}",
                    |_| Some(670e12),
                ),
                (
                    "gpu_info{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-3\",name=\"H100\"}",
                    |_| Some(1.0),
                ),
                (
                    "gpu_probe_flops_per_second{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-3\",test=\"gemm_bf16\",figure=\"sustained\"}",
                    |_| Some(678e12),
                ),
            ],
            checks: &[(-60, false, false), (0, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "GpuwardenDrainGuardActive",
            what: "the Slurm check's drain guard refuses from the event on (no for)",
            series: &[
                (
                    "gpuwarden_drain_guard_refused{instance=\"gpu-node-01:9100\",job=\"gpuwarden\"}",
                    |t| Some(if t < EVENT { 0.0 } else { 1.0 }),
                ),
                (
                    "gpuwarden_drain_guard_drained_nodes{instance=\"gpu-node-01:9100\",job=\"gpuwarden\"}",
                    |_| Some(2.0),
                ),
                (
                    "gpuwarden_drain_guard_nodes{instance=\"gpu-node-01:9100\",job=\"gpuwarden\"}",
                    |_| Some(3.0),
                ),
            ],
            checks: &[(-60, false, false), (0, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "GpuwardenRemediationFailed",
            what: "automatic remediation failed from the event on (no for)",
            series: &[(
                "gpuwarden_remediation_failed{instance=\"gpu-node-01:9100\",job=\"gpuwarden\"}",
                |t| Some(if t < EVENT { 0.0 } else { 1.0 }),
            )],
            checks: &[(-60, false, false), (0, true, true), (600, false, true)],
        },
        IntervalCase {
            alert: "GpuXidFleetPattern",
            what: "Xid 79 on three nodes at the event (new series), none before",
            series: &[
                ("gpu_xid_errors_total{GPU,xid=\"79\",severity=\"fatal\"}", |t| {
                    (t >= EVENT).then_some(1.0)
                }),
                (
                    "gpu_xid_errors_total{instance=\"gpu-node-02:9100\",job=\"gpuwarden\",gpu=\"1\",uuid=\"peer-2\",vendor=\"nvidia\",xid=\"79\",severity=\"fatal\"}",
                    |t| (t >= EVENT).then_some(1.0),
                ),
                (
                    "gpu_xid_errors_total{instance=\"gpu-node-03:9100\",job=\"gpuwarden\",gpu=\"2\",uuid=\"peer-3\",vendor=\"nvidia\",xid=\"79\",severity=\"fatal\"}",
                    |t| (t >= EVENT).then_some(1.0),
                ),
            ],
            checks: &[(-60, false, false), (0, true, true), (720, false, false)],
        },
        IntervalCase {
            alert: "GpuwardenPollStale",
            what: "a healthy poll loop (each GPU polled a second before the scrape)",
            series: &[("gpu_last_poll_timestamp_seconds{GPU}", |t| Some(t as f64 - 1.0))],
            checks: &[
                (-180, false, false),
                (0, false, false),
                (600, false, false),
                (880, false, false),
            ],
        },
        IntervalCase {
            alert: "GpuwardenPollStale",
            what: "a poll loop that stops at the event (for: 1m)",
            series: &[("gpu_last_poll_timestamp_seconds{GPU}", |t| {
                Some(t.min(EVENT) as f64 - 1.0)
            })],
            checks: &[(-60, false, false), (120, true, true), (600, false, true)],
        },
    ]
}

/// The promtool test file for one evaluation interval, a test per (case, scrape interval).
fn interval_tests(rules: &std::path::Path, evaluation: u64, scrapes: &[u64]) -> String {
    let mut out = format!(
        "rule_files:\n- {}\nevaluation_interval: {evaluation}s\ntests:\n",
        rules.display()
    );
    for case in interval_cases() {
        for &scrape in scrapes {
            let settle = 2 * evaluation.max(scrape);
            out.push_str(&format!(
                "# {} at scrape {scrape}s: {}\n- interval: {scrape}s\n  input_series:\n",
                case.alert, case.what
            ));
            for (series, value) in case.series {
                let values: Vec<String> = (0..=1200 / scrape)
                    .map(|i| value(i * scrape).map_or("_".to_string(), |v| v.to_string()))
                    .collect();
                out.push_str(&format!(
                    "  - series: '{}'\n    values: '{}'\n",
                    series.replace("GPU", GPU),
                    values.join(" ")
                ));
            }
            out.push_str("  alert_rule_test:\n");
            for (offset, with_settle, firing) in case.checks {
                let at = EVENT as i64 + offset + if *with_settle { settle as i64 } else { 0 };
                // promtool evaluates on the evaluation grid: round up to it.
                let at = (at as u64).div_ceil(evaluation) * evaluation;
                out.push_str(&format!("  - eval_time: {at}s\n    alertname: {}\n", case.alert));
                if *firing {
                    let gpu = "instance: gpu-node-01:9100, gpu: '0', uuid: GPU-0000-a";
                    let labels = match case.alert {
                        "GpuwardenPollStale" => {
                            "instance: gpu-node-01:9100, job: gpuwarden, severity: critical".to_string()
                        }
                        "GpuXidCritical" => {
                            format!("{gpu}, job: gpuwarden, vendor: nvidia, xid: '94', severity: warning")
                        }
                        "GpuXidFatal" => {
                            format!("{gpu}, job: gpuwarden, vendor: nvidia, xid: '79', severity: critical")
                        }
                        "GpuLost" => format!("{gpu}, job: gpuwarden, vendor: nvidia, severity: critical"),
                        "GpuRecoveryActionRequired" => format!("{gpu}, action: gpu_reset, severity: critical"),
                        "GpuJobStraggler" | "GpuJobStalled" => {
                            format!("{gpu}, job: gpuwarden, vendor: nvidia, hpc_job: '1', severity: warning")
                        }
                        "GpuProbeStraggler" => format!(
                            "{gpu}, job: gpuwarden, vendor: nvidia, name: H100, test: gemm_bf16, figure: sustained, severity: warning"
                        ),
                        "GpuwardenDrainGuardActive" | "GpuwardenRemediationFailed" => {
                            "instance: gpu-node-01:9100, job: gpuwarden, severity: critical".to_string()
                        }
                        "GpuXidFleetPattern" => "xid: '79', severity: critical".to_string(),
                        "GpuFabricManagerDown" => "instance: gpu-node-01:9100, job: gpuwarden, severity: warning".to_string(),
                        "NvswitchSxidFatal" => {
                            "instance: gpu-node-01:9100, switch: '2', pci_bus_id: 0000:07:00.0, sxid: '20034', severity: critical"
                                .to_string()
                        }
                        "NicPortDegraded" => {
                            "instance: gpu-node-01:9100, reason: nic_port_flapping, subject: mlx5_0/1, severity: warning"
                                .to_string()
                        }
                        "NicPortDown" => {
                            "instance: gpu-node-01:9100, reason: nic_port_down, subject: mlx5_0/1, severity: critical"
                                .to_string()
                        }
                        _ => format!("{gpu}, severity: critical"),
                    };
                    out.push_str(&format!("    exp_alerts:\n    - exp_labels: {{{labels}}}\n"));
                } else {
                    out.push_str("    exp_alerts: []\n");
                }
            }
        }
    }
    out
}

/// A rules file with every `annotations:` block left out.
fn without_annotations(rules: &str) -> String {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut skipping: Option<usize> = None;
    for line in rules.lines() {
        if let Some(at) = skipping {
            if line.trim().is_empty() || indent(line) > at {
                continue;
            }
            skipping = None;
        }
        if line.trim() == "annotations:" {
            skipping = Some(indent(line));
            continue;
        }
        out.push(line);
    }
    out.join("\n")
}

/// The alerts fire for a one-off event and stay firing for several evaluations, and never
/// for a healthy GPU, at Prometheus' common evaluation intervals (15s, 30s, its default 1m)
/// and scrape intervals (15s to 60s). promtool checks labels exactly, so each case also
/// proves which series fired.
#[test]
fn alerts_hold_at_the_evaluation_and_scrape_intervals_people_run() {
    let dir = tempfile::tempdir().unwrap();
    // The shipped rules without their annotations: these cases are about timing, and
    // alerts.test.yml checks every annotation.
    let rules = dir.path().join("rules.yml");
    std::fs::write(&rules, without_annotations(&std::fs::read_to_string(RULES).unwrap())).unwrap();
    for evaluation in [15, 30, 60] {
        let file = dir.path().join(format!("intervals-{evaluation}s.test.yml"));
        std::fs::write(&file, interval_tests(&rules, evaluation, &[15, 30, 60])).unwrap();
        let (ok, out) = run("promtool", &["test", "rules", file.to_str().unwrap()]);
        assert!(
            ok && out.contains("SUCCESS"),
            "evaluation interval {evaluation}s:\n{out}\n{}",
            std::fs::read_to_string(&file).unwrap()
        );
    }
}

/// The alert names of the rules file, in order.
fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::to_string)
        .collect()
}

/// Every alert's `runbook_url` is a full URL (the convention of kube-prometheus and
/// dcgm-exporter's rules), to its own section of docs/alerts.md; `scripts/runbook-base.sh`
/// points them all at another base (an operator's wiki), keeping each anchor, and refuses a
/// base that is not a URL. The README lists exactly the alerts the file has.
#[test]
fn each_alert_links_its_runbook_by_full_url_and_the_readme_lists_every_alert() {
    let rules = std::fs::read_to_string(RULES).unwrap();
    let runbooks = repo_file("docs/alerts.md");
    let names = alert_names(&rules);
    assert!(names.len() >= 28, "{names:?}");
    let shipped = "https://github.com/gpuwarden/gpuwarden/blob/main/docs/alerts.md#";
    for name in &names {
        let block = rules.split(&format!("- alert: {name}\n")).nth(1).unwrap();
        let block = block.split("- alert: ").next().unwrap();
        let url = format!("{shipped}{}", name.to_lowercase());
        assert!(block.contains(&format!("runbook_url: \"{url}\"")), "{name}: {block}");
        assert!(
            runbooks.contains(&format!("\n## {name}\n")),
            "{name} has no section in docs/alerts.md"
        );
    }
    assert!(!rules.contains("runbook:"), "the old relative annotation");

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/runbook-base.sh");
    let out = Command::new("bash")
        .args([script, "https://wiki.example.com/gpu/runbooks#", RULES])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rewritten = String::from_utf8(out.stdout).unwrap();
    assert!(!rewritten.contains(shipped));
    assert_eq!(alert_names(&rewritten), names);
    for name in &names {
        let url = format!("https://wiki.example.com/gpu/runbooks#{}", name.to_lowercase());
        assert!(rewritten.contains(&format!("runbook_url: \"{url}\"")), "{name}");
    }
    for bad in [
        "ftp://wiki/",
        "https://wiki/a|b",
        "https://wiki/a&b",
        "wiki.example.com",
    ] {
        let out = Command::new("bash").args([script, bad, RULES]).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{bad}: {out:?}");
    }

    let readme = repo_file("README.md");
    let listed: Vec<String> = readme
        .split("<!-- alerts -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /alerts -->").next())
        .expect("the README's alert list between <!-- alerts --> and <!-- /alerts -->")
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.starts_with("Gpu") || w.starts_with("Nic") || w.starts_with("Nvswitch"))
        .map(str::to_string)
        .collect();
    assert_eq!(listed, names, "the README's alerts, in the rules file's order");
    assert!(
        readme.contains(&format!("gpuwarden.rules.yml`: {} alerts,", names.len())),
        "the README's count of alerts is not {}",
        names.len()
    );
}
