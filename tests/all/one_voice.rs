//! One voice, end to end: every text an operator reads about a finding (the finding, the next
//! step, the status page, the report, the drain reason and the alert) comes from one table
//! (docs/health.md's rule table, which a unit test holds equal to src/health/rules), and the
//! pager follows the verdict: the shipped rules in a real Prometheus, the shipped inhibits in
//! a real Alertmanager, over the real daemon and the real demo.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The rows of docs/health.md's rule tables: reason -> its "what to do" cell.
fn table_actions() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/health.md")).unwrap();
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let reason = cells.first()?.trim_start_matches("| `").trim_end_matches('`');
            Some((reason.to_string(), cells.get(3)?.to_string()))
        })
        .collect()
}

/// Each alert about a finding, the finding's reason.
const ALERT_FINDINGS: &[(&str, &[&str])] = &[
    ("GpuThermalViolation", &["thermal_slowdown"]),
    ("GpuTemperatureNearSlowdown", &["temperature_near_slowdown"]),
    ("GpuLost", &["gpu_lost"]),
    ("GpuMissing", &["gpu_missing"]),
    ("GpuPcieLinkDegraded", &["pcie_width_degraded"]),
    ("GpuNvlinkDown", &["nvlink_down"]),
    ("GpuFabricDegraded", &["fabric_not_ready"]),
    ("GpuPersistenceModeOff", &["persistence_off"]),
    ("GpuEccUncorrectable", &["ecc_uncorrectable"]),
    ("GpuRowRemapFailure", &["row_remap_failed"]),
    ("GpuRecoveryActionRequired", &["recovery_action"]),
    ("GpuFabricManagerDown", &["fabric_manager_down"]),
    ("NvswitchSxidFatal", &["nvswitch_sxid_fatal"]),
    ("NicPortDown", &["nic_port_down"]),
    ("GpuProbeFailed", &["probe_failed"]),
    ("GpuWrongResults", &["sdc_suspect", "hbm_pattern_errors"]),
];

/// The alert's words with YAML's folding undone, `{{ $labels.gpu }}` read as the table's `N`.
fn alert_descriptions() -> BTreeMap<String, String> {
    let rules: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/prometheus/gpuwarden.rules.yml"
        ))
        .unwrap(),
    )
    .unwrap();
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| {
            let description = r["annotations"]["description"].as_str()?;
            let words = description
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace("{{ $labels.gpu }}", "N");
            Some((r["alert"].as_str()?.to_string(), words))
        })
        .collect()
}

/// No second place words advice: each alert about a finding says what to do in its row's
/// words, and those GPU alerts whose finding has a step name the verdict's next step.
#[test]
fn each_finding_alert_says_what_to_do_in_its_rows_words() {
    let actions = table_actions();
    let alerts = alert_descriptions();
    for (alert, reasons) in ALERT_FINDINGS {
        let description = alerts.get(*alert).unwrap_or_else(|| panic!("no alert {alert}"));
        for reason in *reasons {
            let action = actions.get(*reason).unwrap_or_else(|| panic!("no row {reason}"));
            assert!(
                description.contains(&format!("What to do: {action}"))
                    || description.contains(&format!("What to do for a GPU off the bus: {action}")),
                "{alert} does not say {reason}'s action {action:?}:\n{description}"
            );
        }
    }
    for alert in [
        "GpuXidFatal",
        "GpuLost",
        "GpuWrongResults",
        "GpuProbeFailed",
        "GpuRecoveryActionRequired",
    ] {
        assert!(
            alerts[alert].contains("gpu_remediation_next_step")
                && alerts[alert].contains("Next step: {{ .Labels.step }}"),
            "{alert} names no next step: {}",
            alerts[alert]
        );
    }
}

/// A port that keeps flapping stays a finding through its down phases, so NicPortDegraded's
/// pending time is not restarted at each one and it fires (its `for` shortened to 8 s from 5
/// minutes; the flaps are a second down, a second up, ten of them).
#[test]
fn a_port_flapping_ten_times_fires_nic_port_degraded() {
    let sys = tempfile::tempdir().unwrap();
    gpuwarden::cli::demo_fabric::write_tree(sys.path()).unwrap();
    let extra = format!(
        "amd:\n  sysfs_root: {}\nnetwork:\n  interval: 1s\n  counters_interval: 1s\n",
        sys.path().display()
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &test_config(&sim_library(), &extra));
    let prom = Prometheus::start_with(
        &d.addr,
        |rules| shorter_for(&rules, "NicPortDegraded", "5m", "8s"),
        None,
    );
    prom.wait_for_data();
    let port = std::fs::canonicalize(sys.path().join("sys/class/infiniband/mlx5_1"))
        .unwrap()
        .join("ports/1");
    let put = |file: &str, value: &str| {
        let tmp = port.join(format!("{file}.tmp"));
        std::fs::write(&tmp, format!("{value}\n")).unwrap();
        std::fs::rename(tmp, port.join(file)).unwrap();
    };
    let flapping = || {
        prom.firing_alerts().iter().any(|a| {
            a["labels"]["alertname"] == "NicPortDegraded"
                && a["labels"]["reason"] == "nic_port_flapping"
                && a["labels"]["subject"] == "mlx5_1/1"
        })
    };
    let mut fired = false;
    // Meant: the port goes down and up every 2.4 s, each state held over a poll.
    for downs in 1..=10 {
        put("state", "1: DOWN");
        put("phys_state", "2: Polling");
        put("counters/link_downed", &downs.to_string());
        std::thread::sleep(Duration::from_millis(1200));
        put("state", "4: ACTIVE");
        put("phys_state", "5: LinkUp");
        std::thread::sleep(Duration::from_millis(1200));
        fired |= flapping();
    }
    if !fired {
        eventually("NicPortDegraded for the flapping port", Duration::from_secs(12), || {
            flapping().then_some(())
        });
    }
}

/// `rules` with `alert`'s `for: from` made `for: to`.
fn shorter_for(rules: &str, alert: &str, from: &str, to: &str) -> String {
    let start = rules.find(&format!("- alert: {alert}\n")).unwrap();
    let end = start + rules[start..].find(&format!("for: {from}")).unwrap();
    format!("{}for: {to}{}", &rules[..end], &rules[end + 5 + from.len()..])
}

/// The notifications a real Alertmanager with the shipped config sent (firing ones), by
/// alert name.
fn notified(webhook: &Receiver) -> Vec<String> {
    webhook
        .all()
        .iter()
        .map(Received::json)
        .filter(|n| n["status"] == "firing")
        .flat_map(|n| {
            n["alerts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|a| a["labels"]["alertname"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

/// One page per fault through the shipped Alertmanager config: a GPU off the bus (its Xid 79
/// and the loss) pages once, as GpuLost; a hot GPU once, as GpuThermalViolation, not also as
/// near its slowdown temperature.
#[test]
fn each_fault_pages_once_through_the_shipped_alertmanager() {
    let quiet = all_idle(DEMO_SCENARIO)
        .replace("active: 96, supported: 511", "active: 0, supported: 511")
        .replace("temperature: 88\n", "temperature: 55\n")
        .replace("width: 8, width_max: 16", "width: 16, width_max: 16")
        .replace("uncorrected: 1 }", "uncorrected: 0 }")
        .replace("recovery_action: 1", "recovery_action: 0");
    let d = Daemon::start_with(
        &quiet,
        &test_config(&sim_library(), "health:\n  temperature_margin_c: 5\n"),
    );
    let webhook = Receiver::start(0, Answer::Take);
    let am = Alertmanager::start(&format!("http://127.0.0.1:{}", webhook.port), |config| {
        config
            .replace("group_wait: 30s", "group_wait: 3s")
            .replace("group_wait: 10s", "group_wait: 3s")
    });
    let prom = Prometheus::start_with(
        &d.addr,
        |rules| shorter_for(&rules, "GpuTemperatureNearSlowdown", "5m", "1s"),
        Some(&am.addr),
    );
    prom.wait_for_data();
    holds_for("a quiet node pages no one", Duration::from_secs(5), || {
        let pages = notified(&webhook);
        pages.is_empty().then_some(()).ok_or(format!("{pages:?}"))
    });

    // GPU 1 falls off the bus: the driver loses it and logs Xid 79.
    let lost = edit_device(&quiet, 1, |dev| format!("{dev}    lost: true\n"));
    d.set_scenario(&lost);
    d.log_kernel("NVRM: Xid (PCI:0000:3b:00): 79, pid=2311, name=python3, GPU has fallen off the bus.\n");
    eventually("the lost GPU's alerts firing", Duration::from_secs(20), || {
        let firing = prom.firing();
        (firing.contains(&("GpuXidFatal".into(), "1".into())) && firing.contains(&("GpuLost".into(), "1".into())))
            .then_some(())
    });
    eventually("the page for the lost GPU", Duration::from_secs(20), || {
        (!notified(&webhook).is_empty()).then_some(())
    });
    // Past Alertmanager's 3 s group wait: still one page (the fatal XID's is inhibited).
    holds_for("one page for the GPU off the bus", Duration::from_secs(5), || {
        let pages = notified(&webhook);
        (pages == ["GpuLost"]).then_some(()).ok_or(format!("{pages:?}"))
    });

    // GPU 0 runs hot: slowed for heat, and over its slowdown temperature.
    let hot = edit_device(&lost, 0, |dev| {
        dev.replace("temperature: 34\n", "temperature: 91\n")
            .replace("active: 1, supported: 511", "active: 97, supported: 511")
    });
    d.set_scenario(&hot);
    eventually("the hot GPU's alerts firing", Duration::from_secs(20), || {
        prom.firing()
            .contains(&("GpuThermalViolation".into(), "0".into()))
            .then_some(())
    });
    eventually("the page for the hot GPU", Duration::from_secs(20), || {
        (notified(&webhook).len() >= 2).then_some(())
    });
    holds_for("one page for the hot GPU", Duration::from_secs(5), || {
        let pages = notified(&webhook);
        (pages == ["GpuLost", "GpuThermalViolation"])
            .then_some(())
            .ok_or(format!("{pages:?}: {:?}", prom.firing()))
    });
}

/// A `gpuwarden ...` command line against the demo of `tmp`.
fn gpuwarden(args: &[&str], tmp: &Path) -> (Option<i32>, String) {
    let out = Command::new(BIN).args(args).env("TMPDIR", tmp).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// As the status page writes text: HTML-escaped.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// Every finding the demo can produce, the scenario's own and each fault of `demo inject`,
/// at once on the real demo: for each GPU, `health`, the drain reason, the status page, the
/// report and every firing alert about it name the same next step (or none).
#[test]
fn every_demo_finding_names_one_next_step_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = Daemon::spawn_command_with_env(&["run", "--demo", "--listen", "127.0.0.1:0"], &[("TMPDIR", tmp.path())]);
    let prom = Prometheus::start_with(
        &demo.addr,
        |rules| {
            // Every `for` a second: this test reads what the alerts say, not when.
            let mut out = String::new();
            for line in rules.lines() {
                match line.trim_start().strip_prefix("for: ") {
                    Some(_) => out.push_str(&format!("{}for: 1s", &line[..line.len() - line.trim_start().len()])),
                    None => out.push_str(line),
                }
                out.push('\n');
            }
            out
        },
        None,
    );
    for fault in [
        &["--gpu", "0", "--slow-probe"][..],
        &["--gpu", "0", "--xid", "48"],
        &["--gpu", "4", "--wrong-results"],
        &["--gpu", "4", "--xid", "48"],
        &["--gpu", "6", "--bad-hbm"],
        &["--gpu", "6", "--xid", "48"],
        &["--gpu", "5", "--xid", "79"],
        &["--gpu", "7", "--lost"],
        &["--gpu", "3", "--hot"],
        &["--port-down", "mlx5_2"],
    ] {
        let mut args = vec!["demo", "inject"];
        args.extend(fault);
        let (code, out) = gpuwarden(&args, tmp.path());
        assert_eq!(code, Some(0), "{args:?}: {out}");
    }
    let health = |tmp: &Path| -> serde_json::Value {
        let (_, out) = gpuwarden(&["health", "--demo", "--json"], tmp);
        serde_json::from_str(&out).unwrap_or_default()
    };
    let gpu_of = |v: &serde_json::Value, index: u64| {
        v["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["index"] == index)
            .cloned()
            .unwrap()
    };
    eventually("the faults in the verdict", Duration::from_secs(60), || {
        let v = health(tmp.path());
        let text = v.to_string();
        (["\"xid_fatal\"", "gpu_lost", "thermal_slowdown"]
            .iter()
            .all(|r| text.contains(r))
            && gpu_of(&v, 0)["findings"].to_string().contains("xid_fatal")
            && gpu_of(&v, 4)["findings"].to_string().contains("xid_fatal"))
        .then_some(())
    });
    // Taken: exit 0; GPU 6's pending remap (and its driver's ask) still hold: exit 1, said.
    for (gpu, exit) in [("0", 0), ("4", 0), ("6", 1)] {
        let (code, out) = gpuwarden(
            &["health", "--demo", "clear", "--gpu", gpu, "--reason", "reseated"],
            tmp.path(),
        );
        assert_eq!(code, Some(exit), "the clear of GPU {gpu}: {out}");
        assert!(out.contains("validating: GPU"), "{out}");
    }
    let verdict = eventually(
        "the validations and the port in the verdict",
        Duration::from_secs(60),
        || {
            let v = health(tmp.path());
            let text = v.to_string();
            ["probe_failed", "sdc_suspect", "hbm_pattern_errors", "nic_port_down"]
                .iter()
                .all(|r| text.contains(r))
                .then_some(v)
        },
    );
    prom.wait_for_scrape_and_rules();
    // Meant: the rules' `for: 1s` (above) passes, so what the settled verdict raised fires.
    std::thread::sleep(Duration::from_millis(1500));
    let verdict = {
        let again = health(tmp.path());
        if again["gpus"] == verdict["gpus"] {
            again
        } else {
            health(tmp.path())
        }
    };
    let (_, first_line) = gpuwarden(&["health", "--demo"], tmp.path());
    let first_line = first_line.lines().next().unwrap_or("").to_string();
    let page = demo.get("/", &[]).page_text();
    let alerts = prom.firing_alerts();
    let mut steps_seen = std::collections::BTreeSet::new();
    for g in verdict["gpus"].as_array().unwrap() {
        let index = g["index"].as_u64().unwrap().to_string();
        let step = g["next_step"]["step"].as_str();
        if let Some(step) = step {
            steps_seen.insert(step.to_string());
            let why = g["next_step"]["why"].as_str().unwrap();
            assert!(
                page.contains(&escaped(why)),
                "the page lacks GPU {index}'s next step {why:?}"
            );
            let (_, report) = gpuwarden(&["report", "--demo", "--gpu", &index], tmp.path());
            assert!(
                report.contains(&format!("next step advised: {step}")),
                "GPU {index}'s report lacks {step}:\n{report}"
            );
            if g["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["severity"] == "unhealthy")
            {
                assert!(
                    first_line.contains(&format!("(next: {step})")),
                    "the drain reason lacks GPU {index}'s {step}: {first_line}"
                );
            }
        }
        let about: Vec<&serde_json::Value> = alerts.iter().filter(|a| a["labels"]["gpu"] == index.as_str()).collect();
        for alert in &about {
            let description = alert["annotations"]["description"].as_str().unwrap_or("");
            let named = description
                .split("Next step: ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next());
            // An alert that names a step names the verdict's; one about the fleet (a straggler)
            // or a symptom may name none.
            if named.is_some() {
                assert_eq!(
                    named, step,
                    "{} for GPU {index} names another next step than health: {description}",
                    alert["labels"]["alertname"]
                );
            }
        }
        if let Some(step) = step {
            assert!(
                about.iter().any(|a| a["annotations"]["description"]
                    .as_str()
                    .unwrap_or("")
                    .contains(&format!("Next step: {step}"))),
                "no firing alert for GPU {index} names its next step {step}: {about:#?}"
            );
        }
    }
    // The demo's faults cover every step: a reset, a reboot, a person's service.
    assert_eq!(
        steps_seen.into_iter().collect::<Vec<_>>(),
        ["gpu_reset", "reboot_required", "service"]
    );
}
