//! The Grafana dashboards: every query runs against a live Prometheus (scraping the daemon
//! over simulated GPUs, with the shipped rules loaded) and returns data; the data source is
//! a variable everywhere. dashboards/generate.py --check (in .ci/run) holds the JSON to
//! grafana-foundation-sdk's schema-typed builders.

use crate::common;

use common::*;
use std::time::Duration;

const DASHBOARDS: [&str; 2] = ["gpuwarden-fleet.json", "gpuwarden-gpu.json"];

fn dashboard(name: &str) -> serde_json::Value {
    let path = format!("{}/dashboards/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// (panel title, expr) of every query of every panel.
fn queries(d: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in d["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                panel["title"].as_str().unwrap_or("").to_string(),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

#[test]
fn the_data_source_is_a_variable_everywhere() {
    for name in DASHBOARDS {
        let d = dashboard(name);
        let vars = d["templating"]["list"].as_array().unwrap();
        assert!(
            vars.iter()
                .any(|v| v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus"),
            "{name}"
        );
        for panel in d["panels"].as_array().unwrap().iter().filter(|p| p["type"] != "row") {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{name}: {}",
                panel["title"]
            );
            for target in panel["targets"].as_array().unwrap() {
                assert_eq!(
                    target["datasource"]["uid"], "${datasource}",
                    "{name}: {}",
                    panel["title"]
                );
            }
        }
        for var in vars.iter().filter(|v| v["type"] == "query") {
            assert_eq!(
                var["datasource"]["uid"], "${datasource}",
                "{name}: variable {}",
                var["name"]
            );
        }
    }
}

/// The demo's network ports (one slow: a finding) and an NVSwitch under `dir`, with no fabric
/// manager running, as config sections.
/// Automatic remediation on (its panels' families are served only then), its files under
/// `dir`, the fake reset: the demo's GPU 6 waits for a reset its guards hold back.
fn remediation(dir: &std::path::Path) -> String {
    format!(
        "remediation:\n  mode: auto\n  reset_command: \"{}\"\n  persistence_off_command: \"\"\n  \
         persistence_on_command: \"\"\n  reboot_marker: {d}/reboot-required\n  pause_file: {d}/pause\n",
        fake_reset_command(),
        d = dir.display()
    )
}

fn network_ports(dir: &std::path::Path) -> String {
    let sys = dir.join("sysfs");
    gpuwarden::cli::demo_fabric::write_tree(&sys).unwrap();
    nvswitch_fixture(&sys, "0000:05:00.0");
    format!(
        "amd:\n  sysfs_root: {}\nnetwork:\n  interval: 1s\n  counters_interval: 1s\nfabric_manager:\n  pid_file: {}\n",
        sys.display(),
        dir.join("nv-fabricmanager.pid").display()
    )
}

#[test]
fn every_panel_and_variable_query_returns_data_from_a_live_prometheus() {
    // Pods from a fake kubelet and a batch job from a job directory, for the workload panels;
    // the pod on GPU 6 holds back the reset its pending remap wants (the remediation panels).
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(
        dir.path(),
        r#"{"pods": [{"namespace": "ml", "name": "trainer-0", "containers": [{"name": "main", "devices": [
            {"resource": "nvidia.com/gpu", "ids": ["GPU-5f2c7a1e-0000-4d6b-9a0c-000000000001", "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000002",
                                                  "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000006"]}]}]}]}"#,
    );
    let jobs = dir.path().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::write(jobs.join("2"), "48213\n").unwrap();
    // The demo's GPU 7 spins in a stalled job.
    std::fs::write(jobs.join("7"), "48217\n").unwrap();
    let attribution = format!(
        "kubernetes:\n  pod_resources_socket: {}\n  refresh: 1s\nhpc_jobs:\n  mapping_dir: {}\n{}{}",
        kubelet.socket.display(),
        jobs.display(),
        network_ports(dir.path()),
        remediation(dir.path())
    );
    let config = test_config(&sim_library(), &attribution)
        .replace("interval: 200ms\n  timeout: 150ms", "interval: 100ms\n  timeout: 80ms");
    let config = format!("{config}{FAST_PROBES}");
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let d = Daemon::start_full(&with_cuda(DEMO_SCENARIO), &config, "", &env);
    d.log_kernel(include_str!("../../config/demo-kernel-log.txt"));
    let prom = Prometheus::start(&d.addr);
    prom.wait_for_data();
    // Enough samples for rate() over a 1m window and for the recording rules.
    std::thread::sleep(Duration::from_secs(3));

    let mut checked = 0;
    for name in DASHBOARDS {
        let dash = dashboard(name);
        for (title, expr) in queries(&dash) {
            // What Grafana substitutes: every node, GPU 2 (hot, with an XID), its rate window.
            let promql = expr
                .replace("$instance", ".*")
                .replace("$job", ".*")
                .replace("$namespace", ".*")
                .replace("$pod", ".*")
                // The five-minute energy rate over five seconds, as the rules' own copy runs it
                // here (common/prometheus.rs): a new Prometheus has no five minutes of samples.
                .replace("offset 5m, 0) / 300", "offset 5s, 0) / 5")
                .replace("$gpu", "2")
                .replace("$__rate_interval", "1m")
                .replace("$__range", "5m");
            // Up to a minute: the probe panels wait for the scheduled probes' first results,
            // which a loaded machine (the suite runs tests side by side) delays; the wait ends
            // as soon as the data is there.
            eventually(
                &format!("{name}: panel {title:?}: data for {promql}"),
                Duration::from_secs(60),
                || prom.query_has_data(&promql).then_some(()),
            );
            checked += 1;
        }
        // Variables: label_values(metric, label) must list something.
        for var in dash["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["type"] == "query")
        {
            let query = var["query"].as_str().unwrap();
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap();
            let (series, label) = inner.rsplit_once(", ").unwrap();
            let series = series.replace("$instance", ".*").replace("$namespace", ".*");
            let path = format!("/api/v1/series?match[]={}", url_encode(&series));
            let v = prom.get_json(&path).unwrap();
            let values: Vec<&str> = v["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s[label].as_str())
                .collect();
            assert!(!values.is_empty(), "{name}: variable {} lists nothing", var["name"]);
        }
    }
    assert!(checked >= 25, "only {checked} queries checked");
}

#[test]
fn every_metric_the_dashboards_use_is_served_by_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(dir.path(), true).display().to_string())];
    let config = test_config(
        &sim_library(),
        &format!("{FAST_PROBES}{}{}", network_ports(dir.path()), remediation(dir.path())),
    );
    let d = Daemon::start_full(&with_cuda(DEMO_SCENARIO), &config, "", &env);
    d.log_kernel(include_str!("../../config/demo-kernel-log.txt"));
    // The ports' flaps are known from the health memory's second look (within 10 s).
    let m = d.scrape_until_within("XIDs, a probe and the network ports", Duration::from_secs(30), |m| {
        m.find("gpu_xid_errors_total", &[]).len() == 4
            && m.has_family("gpu_probe_pass")
            && m.has_family("nic_port_flaps")
            && m.has_family("gpu_fabric_manager_up")
            && m.has_family("gpu_nvswitch_sxid_errors_total")
    });
    let served: std::collections::HashSet<&str> = m.samples.iter().map(|s| s.name.as_str()).collect();
    for name in DASHBOARDS {
        for (title, expr) in queries(&dashboard(name)) {
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
                // Served only where a kubelet answers, or a job directory has a job: the
                // live-Prometheus test above has both.
                if word == "gpu_pod_info" || word == "gpu_job_info" {
                    continue;
                }
                // A regular expression's stem (`reason=~"nic_.*"`) is no metric.
                let is_metric = word.starts_with("gpu_") || word.starts_with("gpuwarden_") || word.starts_with("nic_");
                if is_metric && !word.ends_with('_') {
                    assert!(
                        served.contains(word),
                        "{name}: panel {title:?} uses {word}, which the daemon does not serve"
                    );
                }
            }
        }
    }
}

/// The fleet view is narrowed by what its variables pick: every panel by the node
/// (`$instance`), except the billing tables, whose jobs span nodes; the workload panels by the
/// batch job (`$job`) and the namespace and pod (`$namespace`, `$pod`). Its overview opens with
/// utilisation, framebuffer memory and power, as dcgm-exporter's dashboard does.
#[test]
fn the_fleet_view_honours_its_variables_and_opens_with_an_overview() {
    let dash = dashboard("gpuwarden-fleet.json");
    let variables: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for name in ["instance", "job", "namespace", "pod"] {
        assert!(variables.contains(&name), "no ${name} variable: {variables:?}");
    }
    for (title, expr) in queries(&dash) {
        if title.starts_with("Energy (kWh) and GPU-hours") {
            assert!(expr.contains("$job") || expr.contains("$namespace"), "{title}: {expr}");
            continue;
        }
        assert!(
            expr.contains("instance=~\"$instance\""),
            "{title} ignores the node: {expr}"
        );
        if title.contains("by pod") {
            assert!(
                expr.contains("$pod") || expr.contains("$job"),
                "{title} ignores the pod and job: {expr}"
            );
        }
    }
    let titles: Vec<String> = queries(&dash).into_iter().map(|(t, _)| t).collect();
    for wanted in ["GPU utilisation (average)", "Framebuffer memory used", "Power drawn"] {
        assert!(titles.iter().any(|t| t == wanted), "no {wanted:?} panel: {titles:?}");
    }
}
