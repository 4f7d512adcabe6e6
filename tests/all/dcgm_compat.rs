//! `compat.dcgm_exporter: true`: the queries of Grafana dashboard 12239 ("NVIDIA DCGM Exporter
//! Dashboard", grafana/dcgm-exporter-dashboard.json in NVIDIA/dcgm-exporter) run against a
//! live Prometheus scraping the demo, each returning one series per GPU with sane values.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

/// The dashboard's panel queries, with its variables `$Hostname` and `$gpu` as Grafana
/// substitutes them for "All", and what each should return: one series per GPU (8), or one
/// (the aggregations), or, for the profiling fields, one per GPU and per GPU instance of the
/// demo's GPU in MIG mode (7 + 3), and the range its values must lie in.
const PANELS: &[(&str, &str, usize, f64, f64)] = &[
    (
        "GPU Temperature",
        r#"max(DCGM_FI_DEV_GPU_TEMP{Hostname=~".*", gpu=~".*"}) by (Hostname, gpu, uuid)"#,
        8,
        20.0,
        100.0,
    ),
    (
        "GPU Avg. Temp",
        r#"avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~".*", gpu=~".*"})"#,
        1,
        20.0,
        100.0,
    ),
    (
        "GPU Power Usage",
        r#"max(DCGM_FI_DEV_POWER_USAGE{Hostname=~".*", gpu=~".*"}) by (Hostname, gpu, uuid)"#,
        8,
        50.0,
        1000.0,
    ),
    (
        "GPU Power Total",
        r#"sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~".*", gpu=~".*"}) by (gpu))"#,
        1,
        400.0,
        8000.0,
    ),
    (
        "GPU SM Clocks",
        r#"max(DCGM_FI_DEV_SM_CLOCK{Hostname=~".*", gpu=~".*"} * 1000000) by (Hostname, UUID, gpu)"#,
        8,
        1e8,
        3e9,
    ),
    (
        "GPU Utilization",
        r#"max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=~".*", gpu=~".*"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)"#,
        10,
        0.0,
        1.0,
    ),
    (
        "Tensor Core Utilization",
        r#"max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{Hostname=~".*", gpu=~".*"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)"#,
        10,
        0.0,
        1.0,
    ),
    (
        "GPU Framebuffer Mem Used",
        r#"max(DCGM_FI_DEV_FB_USED{Hostname=~".*", gpu=~".*"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)"#,
        10,
        0.0,
        144_000.0,
    ),
];

#[test]
fn dashboard_12239_works_unchanged_with_compat_on() {
    // A pod on GPU 1, so the pod labels dcgm-exporter adds are there too.
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(
        dir.path(),
        r#"{"pods": [{"namespace": "ml", "name": "trainer-0", "containers": [{"name": "main", "devices": [
            {"resource": "nvidia.com/gpu", "ids": ["GPU-5f2c7a1e-0000-4d6b-9a0c-000000000001"]}]}]}]}"#,
    );
    let config = test_config(
        &sim_library(),
        &format!(
            "compat:\n  dcgm_exporter: true\nkubernetes:\n  pod_resources_socket: {}\n  refresh: 1s\n",
            kubelet.socket.display()
        ),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("compat families with GPM and a pod", |m| {
        m.find("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &[]).len() == 10
            && m.find("DCGM_FI_DEV_GPU_TEMP", &[("pod", "trainer-0")]).len() == 1
    });
    // The labels and units dcgm-exporter uses, on GPU 1.
    let temp = m.find("DCGM_FI_DEV_GPU_TEMP", &[("gpu", "1")]);
    let labels = &temp[0].labels;
    for (k, v) in [
        ("UUID", "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000001"),
        ("device", "nvidia1"),
        ("modelName", "NVIDIA H200"),
        ("pci_bus_id", "00000000:3B:00.0"),
        ("DCGM_FI_DRIVER_VERSION", "580.159.04"),
        ("namespace", "ml"),
        ("pod", "trainer-0"),
        ("container", "main"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}: {labels:?}");
    }
    assert!(!labels["Hostname"].is_empty());
    assert_eq!(temp[0].value, 61.0);
    assert_eq!(m.value("DCGM_FI_DEV_SM_CLOCK", &[("gpu", "1")]), Some(1440.0), "MHz");
    assert_eq!(m.value("DCGM_FI_DEV_FB_USED", &[("gpu", "1")]), Some(122880.0), "MiB");
    assert_eq!(m.value("DCGM_FI_DEV_GPU_UTIL", &[("gpu", "1")]), Some(100.0), "%");
    assert_eq!(m.value("DCGM_FI_PROF_SM_ACTIVE", &[("gpu", "1")]), Some(0.96), "ratio");
    // GPU 3 is in MIG mode: its profiling fields are per GPU instance.
    assert_eq!(
        m.value(
            "DCGM_FI_PROF_SM_ACTIVE",
            &[("gpu", "3"), ("GPU_I_ID", "2"), ("GPU_I_PROFILE", "3g.71gb")]
        ),
        Some(0.72)
    );
    assert_eq!(m.find("DCGM_FI_PROF_SM_ACTIVE", &[("gpu", "3")]).len(), 3);
    assert_eq!(
        m.value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", &[("gpu", "1")]),
        Some(94_500_000_000.0),
        "mJ"
    );
    // gpuwarden's own families are still there, and no compat series for AMD or when off.
    assert!(
        m.value("gpu_temperature_celsius", &[("gpu", "1"), ("sensor", "gpu")])
            .is_some()
    );

    let prom = Prometheus::start(&d.addr);
    prom.wait_for_data();
    for (title, promql, series, low, high) in PANELS {
        let result = until_ok(
            &format!("{title}: {series} series of {promql}"),
            Duration::from_secs(20),
            || {
                let result = prom.query(promql);
                (result.len() == *series)
                    .then_some(result.clone())
                    .ok_or(format!("{result:?}"))
            },
        );
        for (metric, value) in &result {
            assert!(
                value.is_finite() && value >= low && value <= high,
                "{title}: {metric} = {value}, outside {low}..{high}"
            );
        }
    }
    // The dashboard's variables: label_values(DCGM_FI_DEV_FB_FREE, Hostname) and (..., gpu).
    let series = prom
        .get_json(&format!("/api/v1/series?match[]={}", url_encode("DCGM_FI_DEV_FB_FREE")))
        .unwrap();
    let rows = series["data"].as_array().unwrap();
    // Seven GPUs and the three GPU instances of GPU 3, in MIG mode.
    assert_eq!(rows.len(), 10);
    assert!(
        rows.iter()
            .all(|r| r["Hostname"].as_str().is_some_and(|h| !h.is_empty()))
    );
    let mut gpus: Vec<&str> = rows.iter().filter_map(|r| r["gpu"].as_str()).collect();
    gpus.sort();
    gpus.dedup();
    assert_eq!(gpus, ["0", "1", "2", "3", "4", "5", "6", "7"]);
}

#[test]
fn compat_is_off_by_default() {
    let d = Daemon::start(DEMO_SCENARIO);
    let m = d.scrape();
    assert!(
        !m.samples.iter().any(|s| s.name.starts_with("DCGM_")),
        "no dcgm-exporter names without compat.dcgm_exporter"
    );
}

/// The uncommented rows of one of dcgm-exporter's field lists: (field, type).
fn csv_rows(csv: &str) -> Vec<(String, String)> {
    csv.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut cells = l.split(',').map(str::trim);
            Some((cells.next()?.to_string(), cells.next()?.to_string()))
        })
        .collect()
}

/// dcgm-exporter's own fields (commented out in its 4.x lists) that gpuwarden serves.
const EXP_FIELDS: &[(&str, &str)] = &[
    ("DCGM_EXP_XID_ERRORS_COUNT", "gauge"),
    ("DCGM_EXP_CLOCK_EVENTS_TOTAL", "counter"),
    ("DCGM_EXP_CLOCK_EVENTS_COUNT", "gauge"),
    ("DCGM_EXP_XID_ERRORS_TOTAL", "counter"),
    ("DCGM_EXP_GPU_HEALTH_STATUS", "gauge"),
    ("DCGM_EXP_P2P_STATUS", "gauge"),
];

/// dcgm-exporter's own fields with a series per event kind seen: none before the first.
const EVENT_FIELDS: &[&str] = &[
    "DCGM_EXP_XID_ERRORS_TOTAL",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_CLOCK_EVENTS_TOTAL",
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
];

/// dcgm-exporter's rates that gpuwarden takes from GPM: there a second after start.
const GPM_RATES: &[&str] = &[
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
];

/// The fields docs/metrics.md says have no equivalent (its "No equivalent" paragraph).
fn documented_as_missing() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let at = doc
        .find("No equivalent")
        .expect("docs/metrics.md has a \"No equivalent\" paragraph");
    doc[at..].split("\n\n").next().unwrap_or_default().to_string()
}

#[test]
fn every_row_of_dcgm_exporters_field_lists_is_served_from_the_first_scrape() {
    let mut rows = csv_rows(include_str!("../fixtures/dcgm-exporter/default-counters.csv"));
    rows.extend(csv_rows(include_str!(
        "../fixtures/dcgm-exporter/dcp-metrics-included.csv"
    )));
    rows.extend(EXP_FIELDS.iter().map(|(n, t)| (n.to_string(), t.to_string())));
    rows.sort();
    rows.dedup();
    assert!(rows.len() > 25, "{rows:?}");
    // The default GPM interval (30 s), so the first values come from the short first interval.
    let config = test_config(&sim_library(), "compat:\n  dcgm_exporter: true\n")
        .replace("gpm_interval: 200ms", "gpm_interval: 30s");
    let start = Instant::now();
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let first = d.get("/metrics", &[("Accept", "text/plain")]).text();
    let missing = documented_as_missing();
    // The GPM (profiling) fields need two samples: a second after start, not 30 s.
    let within = Duration::from_secs(5);
    let later = loop {
        let text = d.get("/metrics", &[("Accept", "text/plain")]).text();
        if Metrics::parse(&text).find("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &[]).len() == 10 || start.elapsed() > within {
            break text;
        }
        // Meant: how long GPM took, to a tenth of a second (asserted below).
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        start.elapsed() <= within + Duration::from_secs(1),
        "GPM took {:?}",
        start.elapsed()
    );
    let (first_m, later_m) = (Metrics::parse(&first), Metrics::parse(&later));
    for (field, kind) in &rows {
        if kind == "label" {
            // A label on every other series, as dcgm-exporter adds it.
            let temp = first_m.find("DCGM_FI_DEV_GPU_TEMP", &[]);
            assert!(temp.iter().all(|s| s.labels.contains_key(field)), "{field} label");
            continue;
        }
        if missing.contains(&format!("`{field}`")) {
            assert!(
                !later_m.has_family(field),
                "{field} is documented as missing but served"
            );
            continue;
        }
        // The profiling fields, and the rates gpuwarden takes from GPM too.
        let profiling = field.starts_with("DCGM_FI_PROF_") || GPM_RATES.contains(&field.as_str());
        let (m, text) = if profiling {
            (&later_m, &later)
        } else {
            (&first_m, &first)
        };
        if EVENT_FIELDS.contains(&field.as_str()) || field == "DCGM_FI_DEV_VGPU_LICENSE_STATUS" {
            // Per XID code or clock event seen: none yet; a vGPU licence only in a vGPU guest,
            // which the demo's GPUs are not (each checked below).
            assert!(!m.has_family(field), "{field}");
            continue;
        }
        assert!(
            text.contains(&format!("# TYPE {field} {kind}\n")),
            "{field}: not served as a {kind} in the text format (docs/metrics.md names no reason)"
        );
        let series = m.find(field, &[]);
        let gpus: std::collections::BTreeSet<&str> = series
            .iter()
            .filter_map(|s| s.labels.get("gpu").map(String::as_str))
            .collect();
        match field.as_str() {
            // Per watch: six for each GPU.
            "DCGM_EXP_GPU_HEALTH_STATUS" => assert_eq!(series.len(), 8 * 6, "{field}"),
            // Per pair: each GPU towards the seven others, all over NVLink on the demo's H200s.
            "DCGM_EXP_P2P_STATUS" => {
                assert_eq!(series.len(), 8 * 7, "{field}");
                assert!(
                    series.iter().all(|s| s.value == 0.0 && s.labels["link_status"] == "OK"),
                    "{series:?}"
                );
            }
            // GPU 3 is in MIG mode: its three GPU instances instead of it, as dcgm-exporter does.
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
            | "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
            | "DCGM_FI_PROF_DRAM_ACTIVE"
            | "DCGM_FI_DEV_FB_USED"
            | "DCGM_FI_DEV_FB_FREE" => {
                assert_eq!(series.len(), 10, "{field}");
                assert_eq!(
                    series.iter().filter(|s| !s.labels["GPU_I_ID"].is_empty()).count(),
                    3,
                    "{field}"
                );
            }
            _ => {
                assert_eq!(series.len(), 8, "{field}: one series per GPU");
                assert_eq!(gpus.len(), 8, "{field}");
            }
        }
    }
    // GPU 3's GPU instances: their own memory, which adds up to no more than the GPU's.
    let instances_used: f64 = first_m
        .find("DCGM_FI_DEV_FB_USED", &[("gpu", "3")])
        .iter()
        .map(|s| s.value)
        .sum();
    let instances_total: f64 = ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"]
        .iter()
        .flat_map(|f| first_m.find(f, &[("gpu", "3")]))
        .map(|s| s.value)
        .sum();
    let gpu_total = first_m.value("gpu_memory_total_bytes", &[("gpu", "3")]);
    assert!(instances_used > 0.0, "{instances_used}");
    assert!(
        gpu_total.is_some_and(|t| instances_total > 0.0 && instances_total <= t / 1048576.0),
        "{instances_total} {gpu_total:?}"
    );
    // NVML's clock-event mask: GPU 0 idle (bit 0x1) at start.
    for field in ["DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] {
        assert_eq!(first_m.value(field, &[("gpu", "0")]), Some(1.0), "{field}");
        assert_eq!(first_m.find(field, &[]).len(), 8, "{field}");
    }
    // No XID yet: 0, "No Error", for every GPU (alert rules written as `== 0` work).
    for s in first_m.find("DCGM_FI_DEV_XID_ERRORS", &[]) {
        assert_eq!(
            (s.value, s.labels["err_code"].as_str(), s.labels["err_msg"].as_str()),
            (0.0, "0", "No Error")
        );
    }
    // After one: its code and name, and the per-code total.
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 31, pid=1, name=x, MMU Fault\n");
    let m = d.scrape_until("Xid 31", |m| {
        m.value("DCGM_FI_DEV_XID_ERRORS", &[("gpu", "0")]) == Some(31.0)
    });
    let xid = m.find("DCGM_FI_DEV_XID_ERRORS", &[("gpu", "0")]);
    assert_eq!(xid[0].labels["err_code"], "31");
    assert!(!xid[0].labels["err_msg"].is_empty());
    assert_eq!(
        m.value("DCGM_EXP_XID_ERRORS_TOTAL", &[("gpu", "0"), ("xid", "31")]),
        Some(1.0)
    );
    let text = d.get("/metrics", &[("Accept", "text/plain")]).text();
    assert!(text.contains("# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter\n"), "{text}");
    assert!(text.contains("# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge\n"), "{text}");
    assert_eq!(
        m.value(
            "DCGM_EXP_XID_ERRORS_COUNT",
            &[("gpu", "0"), ("xid", "31"), ("window_size_in_ms", "300000")]
        ),
        Some(1.0)
    );
    // GPU 0's power cap comes on (it was idle only): one clock event, in the total and the window.
    d.set_scenario(&edit_device(DEMO_SCENARIO, 0, |dev| {
        dev.replace("clock_events: { active: 1,", "clock_events: { active: 5,")
    }));
    let m = d.scrape_until("the power cap counted", |m| {
        m.value(
            "DCGM_EXP_CLOCK_EVENTS_TOTAL",
            &[("gpu", "0"), ("clock_event", "power_cap")],
        ) == Some(1.0)
    });
    assert_eq!(
        m.value(
            "DCGM_EXP_CLOCK_EVENTS_COUNT",
            &[
                ("gpu", "0"),
                ("clock_event", "power_cap"),
                ("window_size_in_ms", "300000")
            ]
        ),
        Some(1.0)
    );
    assert!(
        m.find("DCGM_EXP_CLOCK_EVENTS_TOTAL", &[("clock_event", "gpu_idle")])
            .is_empty(),
        "active at start: not a start seen"
    );
    assert_eq!(m.value("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", &[("gpu", "0")]), Some(5.0));
    let text = d.get("/metrics", &[("Accept", "text/plain")]).text();
    assert!(text.contains("# TYPE DCGM_EXP_CLOCK_EVENTS_TOTAL counter\n"), "{text}");
    // A degraded GPU's watch: GPU 3's PCIe link at x8 is a warning with DCGM's code.
    assert_eq!(
        m.value(
            "DCGM_EXP_GPU_HEALTH_STATUS",
            &[
                ("gpu", "3"),
                ("health_watch", "PCIE"),
                ("health_error_code", "DCGM_FR_PCIE_WIDTH")
            ]
        ),
        Some(10.0)
    );
    // GPU 6's NVLink peer-to-peer disabled by a registry key: NVML's 4, towards every peer.
    d.set_scenario(&edit_device(DEMO_SCENARIO, 6, |dev| {
        format!("{dev}    p2p_nvlink_status: 4\n")
    }));
    let m = d.scrape_until("GPU 6's P2P disabled", |m| {
        m.value(
            "DCGM_EXP_P2P_STATUS",
            &[("gpu", "6"), ("peer_gpu", "0"), ("link_status", "DisabledByRegKey")],
        ) == Some(4.0)
    });
    assert_eq!(
        m.value("gpu_nvlink_p2p_ok", &[("gpu", "6"), ("peer_gpu", "0")]),
        Some(0.0)
    );
    assert_eq!(
        m.value("gpu_nvlink_p2p_ok", &[("gpu", "0"), ("peer_gpu", "6")]),
        Some(1.0)
    );
    assert_eq!(m.find("gpu_nvlink_p2p_ok", &[("gpu", "6")]).len(), 7);
    // GPU 1 turns out to be a vGPU guest without its licence, then gets it: 0, then 1.
    for (licensed, value) in [(false, 0.0), (true, 1.0)] {
        d.set_scenario(&edit_device(DEMO_SCENARIO, 1, |dev| {
            dev.replace(
                "    persistence_mode: true\n",
                &format!("    persistence_mode: true\n    vgpu_licensed: {licensed}\n"),
            )
        }));
        let m = d.scrape_until("the vGPU licence", |m| {
            m.value("DCGM_FI_DEV_VGPU_LICENSE_STATUS", &[("gpu", "1")]) == Some(value)
        });
        assert_eq!(m.value("gpu_vgpu_licensed", &[("gpu", "1")]), Some(value));
        // Unlicensed, the GPU is degraded with a finding that says why.
        let finding = m.value("gpu_health_reason", &[("gpu", "1"), ("reason", "vgpu_unlicensed")]);
        assert_eq!(finding, (!licensed).then_some(1.0), "{licensed}");
        assert_eq!(
            m.find("DCGM_FI_DEV_VGPU_LICENSE_STATUS", &[]).len(),
            1,
            "only GPU 1 needs one"
        );
    }
}
