//! The verdict on a real API server (issue "Kubernetes for real"): etcd and kube-apiserver
//! v1.37 built from their Go modules (common/kube.rs), RBAC and the admission policy as
//! deploy/kubernetes/overlays/node-verdict renders them, gpuwarden with a token bound to a pod
//! on its node, as the DaemonSet's is. No kubelet: the tests make the Nodes, the pods the
//! tokens are bound to and the DRA driver's ResourceSlices.

use crate::common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the API's view may take to follow the verdict: a poll, a pass and a retry.
const FOLLOWS: Duration = Duration::from_secs(15);

/// The demo's GPU UUIDs, in order.
fn demo_uuids() -> Vec<String> {
    DEMO_SCENARIO
        .lines()
        .filter_map(|l| l.trim().strip_prefix("uuid: "))
        .map(|u| u.trim().to_string())
        .collect()
}

/// The control plane with gpuwarden's RBAC and admission policy from the rendered overlay,
/// and `nodes` registered.
fn cluster(nodes: &[&str]) -> ControlPlane {
    cluster_with(nodes, &[])
}

fn cluster_with(nodes: &[&str], apiserver: &[&str]) -> ControlPlane {
    let plane = ControlPlane::start_with(apiserver);
    let (code, rendered, err) = plane.kubectl(
        &["kustomize", &repo_path("deploy/kubernetes/overlays/node-verdict")],
        None,
    );
    assert_eq!(code, 0, "{err}");
    plane.apply(&rendered);
    for node in nodes {
        plane.add_node(node);
    }
    plane
}

fn repo_path(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path).display().to_string()
}

/// A token of gpuwarden's service account bound to a pod on `node`, as the kubelet mounts it
/// in the DaemonSet's pod: the node's name rides in it (the admission policy reads it).
fn node_token(plane: &ControlPlane, node: &str) -> PathBuf {
    let pod = format!("gpuwarden-{node}");
    plane.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\n  namespace: gpuwarden\nspec:\n  nodeName: {node}\n  \
         serviceAccountName: gpuwarden\n  containers:\n    - name: gpuwarden\n      image: registry.invalid/gpuwarden:0.1.0\n"
    ));
    plane.token_file(
        "gpuwarden",
        "gpuwarden",
        &["--bound-object-kind", "Pod", "--bound-object-name", &pod],
    )
}

/// The DRA driver's ResourceSlice for `node`: one device per demo GPU, its `uuid` attribute.
fn resource_slice(plane: &ControlPlane, node: &str) {
    let devices: String = demo_uuids()
        .iter()
        .enumerate()
        .map(|(i, uuid)| format!("    - name: gpu-{i}\n      attributes:\n        uuid: {{string: {uuid}}}\n        index: {{int: {i}}}\n"))
        .collect();
    plane.apply(&format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: {node}-gpu.nvidia.com\nspec:\n  \
         nodeName: {node}\n  driver: gpu.nvidia.com\n  pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{devices}"
    ));
}

/// The `kubernetes:` section for a daemon on `node`.
fn kube_config(plane: &ControlPlane, node: &str, token: &Path, extra: &str) -> String {
    format!(
        "kubernetes:\n  api:\n    server: {}\n    ca_file: {}\n    token_file: {}\n    timeout: 2s\n  node:\n    enabled: true\n    \
         name: {node}\n    max_tainted: 2\n    fleet_selector: nvidia.com/gpu.present=true\n  devices:\n    taint_rules: true\n{extra}",
        plane.server(),
        plane.ca().display(),
        token.display()
    )
}

/// Probes that take a second on the simulated CUDA, and none but validations.
const PROBES: &str = "probe:\n  schedule: false\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 20s\n  \
    durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";

fn start_daemon(plane: &ControlPlane, node: &str, cuda: &Path) -> Daemon {
    let token = node_token(plane, node);
    let config = test_config(
        &sim_library(),
        &format!("{PROBES}{}", kube_config(plane, node, &token, "")),
    );
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda, true).display().to_string())];
    let d = Daemon::start_full(&all_idle(&with_cuda(DEMO_SCENARIO)), &config, "", &env);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    d
}

fn node(plane: &ControlPlane, name: &str) -> Value {
    plane.get("node", name).unwrap_or_else(|| panic!("node {name}"))
}

fn condition(node: &Value) -> Option<Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "GpuUnhealthy")
        .cloned()
}

fn our_taint(node: &Value) -> Option<Value> {
    node["spec"]["taints"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == "gpuwarden/unhealthy")
        .cloned()
}

/// gpuwarden's Events on `node`: (reason, message), oldest first.
fn events(plane: &ControlPlane, node: &str) -> Vec<(String, String, String)> {
    let list = plane.raw("/api/v1/namespaces/default/events");
    let mut out: Vec<(String, String, String, String)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == node && e["source"]["component"] == "gpuwarden")
        .map(|e| {
            (
                e["metadata"]["creationTimestamp"].as_str().unwrap_or("").to_string(),
                e["metadata"]["name"].as_str().unwrap_or("").to_string(),
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    // The name ends in the row's time and id: the journal's order.
    out.sort_by_key(|(_, name, _, _)| {
        let mut parts = name.rsplit('.');
        let id: u64 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let at = parts.next().and_then(|p| u64::from_str_radix(p, 16).ok()).unwrap_or(0);
        (at, id)
    });
    out.into_iter()
        .map(|(_, name, reason, message)| (name, reason, message))
        .collect()
}

/// The DeviceTaintRules of the GPU with `uuid`.
fn device_rules(plane: &ControlPlane, uuid: &str) -> Vec<Value> {
    plane.raw("/apis/resource.k8s.io/v1/devicetaintrules")["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["metadata"]["annotations"]["gpuwarden/gpu"] == uuid)
        .cloned()
        .collect()
}

/// A fatal XID on GPU 0: the condition, the node's taint, GPU 0's DeviceTaintRule and a
/// warning Event appear within a poll and a retry; an admin's taint and cordon stay as they
/// are. The clear: the taint and the rule stay while the validation runs (NoSchedule on the
/// device), and go only once its probe passed; the condition turns False.
#[test]
fn a_fault_taints_the_node_and_its_device_and_only_a_passed_validation_lifts_them() {
    let plane = cluster(&["gpu-node-1"]);
    resource_slice(&plane, "gpu-node-1");
    let (code, _, err) = plane.kubectl(&["taint", "node", "gpu-node-1", "maintenance=rack4:NoSchedule"], None);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = plane.kubectl(&["cordon", "gpu-node-1"], None);
    assert_eq!(code, 0, "{err}");
    let cuda = tempfile::tempdir().unwrap();
    let d = start_daemon(&plane, "gpu-node-1", cuda.path());

    let healthy = eventually("the condition False", FOLLOWS, || {
        condition(&node(&plane, "gpu-node-1")).filter(|c| c["status"] == "False")
    });
    assert_eq!(healthy["reason"], "GpusHealthy");
    assert_eq!(our_taint(&node(&plane, "gpu-node-1")), None);

    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    let faulty = eventually("the taint", FOLLOWS, || {
        let n = node(&plane, "gpu-node-1");
        our_taint(&n).map(|t| (n, t))
    });
    let (n, taint) = faulty;
    assert_eq!(
        (taint["value"].as_str(), taint["effect"].as_str()),
        (Some("xid_fatal"), Some("NoSchedule"))
    );
    let c = condition(&n).unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("GpuUnhealthy"))
    );
    assert!(
        c["message"].as_str().unwrap().starts_with("unhealthy: GPU 0 xid_fatal"),
        "{c}"
    );
    let taints = n["spec"]["taints"].to_string();
    assert!(
        taints.contains("maintenance") && taints.contains("rack4"),
        "the admin's taint stays: {taints}"
    );
    assert_eq!(n["spec"]["unschedulable"], true, "the admin's cordon stays");
    let gpu0 = demo_uuids()[0].clone();
    let rules = eventually("GPU 0's device taint rule", FOLLOWS, || {
        Some(device_rules(&plane, &gpu0)).filter(|r| !r.is_empty())
    });
    assert_eq!(rules.len(), 1, "{rules:?}");
    let spec = &rules[0]["spec"];
    assert_eq!(
        spec["deviceSelector"],
        serde_json::json!({"driver": "gpu.nvidia.com", "pool": "gpu-node-1", "device": "gpu-0"})
    );
    assert_eq!(
        (spec["taint"]["key"].as_str(), spec["taint"]["effect"].as_str()),
        (Some("gpuwarden/unhealthy"), Some("NoExecute"))
    );
    let warned = eventually("the Event", FOLLOWS, || {
        events(&plane, "gpu-node-1")
            .into_iter()
            .find(|(_, reason, _)| reason == "GpuUnhealthy")
    });
    assert!(
        warned.2.contains("xid_fatal") && warned.2.contains(&demo_uuids()[0]),
        "{warned:?}"
    );

    // The clear: the validation's probe runs on the idle GPU; until it passed, nothing lifts.
    let (code, out, _) = d.clear("0", "replaced the HBM board, INC-1", &[]);
    assert_eq!(code, 0, "{out}");
    let mut saw_validating_rule = false;
    let lifted_at = eventually("the taint lifted", Duration::from_secs(40), || {
        let n = node(&plane, "gpu-node-1");
        let rules = device_rules(&plane, &gpu0);
        saw_validating_rule |= rules.iter().any(|r| r["spec"]["taint"]["effect"] == "NoSchedule");
        if our_taint(&n).is_none() {
            // At the moment it is gone the journal holds the passed validation.
            let validations = events_json(&d.state_path(), &["--kind", "validation", "--gpu", "0"]).to_string();
            assert!(
                validations.contains("\"passed\""),
                "lifted before the validation passed: {validations}"
            );
            return Some(n);
        }
        None
    });
    let c = condition(&lifted_at).unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("GpusHealthy"))
    );
    assert!(
        lifted_at["spec"]["taints"].to_string().contains("rack4"),
        "the admin's taint stays"
    );
    assert_eq!(lifted_at["spec"]["unschedulable"], true, "the admin's cordon stays");
    eventually("GPU 0's device rule gone", FOLLOWS, || {
        Some(()).filter(|_| device_rules(&plane, &gpu0).is_empty())
    });
    // The demo's degraded GPUs keep theirs, a notice (effect None) a scheduler can read.
    let degraded = device_rules(&plane, &demo_uuids()[2]);
    assert_eq!(degraded.len(), 1);
    assert_eq!(degraded[0]["spec"]["taint"]["effect"], "None");
    assert!(
        saw_validating_rule || d.log_text().contains("validated"),
        "{}",
        d.log_text()
    );
    let reasons: Vec<String> = eventually("the repair's Events", FOLLOWS, || {
        let reasons: Vec<String> = events(&plane, "gpu-node-1").into_iter().map(|(_, r, _)| r).collect();
        reasons.contains(&"GpuHealthy".to_string()).then_some(reasons)
    });
    let at = |r: &str| {
        reasons
            .iter()
            .position(|x| x == r)
            .unwrap_or_else(|| panic!("{r} in {reasons:?}"))
    };
    assert!(
        at("GpuUnhealthy") < at("GpuCleared") && at("GpuCleared") < at("GpuValidationPassed"),
        "{reasons:?}"
    );
    assert!(at("GpuValidationPassed") <= at("GpuHealthy") + 1, "{reasons:?}");
}

/// The fleet-wide cap (`max_tainted: 2`) with three real daemons on three nodes: the first two
/// faults taint their nodes; the third node keeps working untainted while its condition says
/// unhealthy and its daemon serves `gpuwarden_drain_guard_refused 1` (GpuwardenDrainGuardActive);
/// once the first node is repaired and validated its taint goes, and the third takes the place.
#[test]
fn the_cap_keeps_the_third_node_untainted_until_another_is_repaired() {
    let nodes = ["gpu-node-1", "gpu-node-2", "gpu-node-3"];
    let plane = cluster(&nodes);
    let cuda = tempfile::tempdir().unwrap();
    let daemons: Vec<Daemon> = nodes.iter().map(|n| start_daemon(&plane, n, cuda.path())).collect();
    let fault = "NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n";
    for (d, n) in daemons.iter().zip(nodes).take(2) {
        d.log_kernel(fault);
        eventually(&format!("{n} tainted"), FOLLOWS, || our_taint(&node(&plane, n)));
    }
    daemons[2].log_kernel(fault);
    let refused = daemons[2].scrape_until("the cap's refusal", |m| {
        m.value("gpuwarden_drain_guard_refused", &[]) == Some(1.0)
    });
    assert_eq!(refused.value("gpuwarden_drain_guard_drained_nodes", &[]), Some(2.0));
    assert_eq!(refused.value("gpuwarden_drain_guard_nodes", &[]), Some(3.0));
    let third = node(&plane, "gpu-node-3");
    assert_eq!(our_taint(&third), None, "the cap holds");
    assert_eq!(
        condition(&third).unwrap()["status"],
        "True",
        "the condition still says so"
    );
    assert!(
        daemons[2].log_text().contains("taint guard: 2 of 3 nodes already tainted by gpuwarden (kubernetes.node.max_tainted 2); not tainting node \"gpu-node-3\""),
        "{}",
        daemons[2].log_text()
    );
    // A hold, meant: two more passes (one a second) must not taint it either.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(our_taint(&node(&plane, "gpu-node-3")), None, "and keeps holding");

    let (code, out, _) = daemons[0].clear("0", "replaced, INC-9", &[]);
    assert_eq!(code, 0, "{out}");
    eventually("gpu-node-1's taint lifted", Duration::from_secs(40), || {
        Some(()).filter(|_| our_taint(&node(&plane, "gpu-node-1")).is_none())
    });
    // The third looks again within its recount (15 s) and takes the place.
    eventually("gpu-node-3 tainted", Duration::from_secs(30), || {
        our_taint(&node(&plane, "gpu-node-3"))
    });
    daemons[2].scrape_until("the refusal let go", |m| {
        m.value("gpuwarden_drain_guard_refused", &[]) == Some(0.0)
    });
    let tainted = nodes.iter().filter(|n| our_taint(&node(&plane, n)).is_some()).count();
    assert_eq!(tainted, 2, "never more than the cap");
}

/// The API server stopped in the middle of a fault and its clear, then back: the poll, the
/// scrape and the verdict go on meanwhile; then the node's objects catch up and every row's
/// Event comes, once, in order. A restart of the daemon after that posts none twice.
#[test]
fn an_api_server_outage_loses_nothing_and_a_restart_doubles_nothing() {
    let mut plane = cluster(&["gpu-node-1"]);
    let cuda = tempfile::tempdir().unwrap();
    let d = start_daemon(&plane, "gpu-node-1", cuda.path());
    eventually("the condition", FOLLOWS, || condition(&node(&plane, "gpu-node-1")));
    plane.stop_apiserver();

    let down = Instant::now();
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    let (code, out) = wait_for_health(&d, 1);
    assert!(out.contains("xid_fatal"), "{out}");
    let asked = Instant::now();
    let (code_again, _) = d.health(false);
    assert_eq!((code, code_again), (1, 1));
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "the verdict does not wait on the API server"
    );
    // The failures count, and the journal's rows written meanwhile show as the lag while the
    // thread backs off (the writer commits within a second of the fault).
    d.scrape_until("the failures and the lag counted", |m| {
        let sink = [("sink", "kubernetes:events")];
        m.value("gpuwarden_sink_failed_total", &sink).is_some_and(|f| f >= 1.0)
            && m.value("gpuwarden_sink_lag_rows", &sink).is_some_and(|l| l >= 1.0)
    });
    let (code, out, _) = d.clear("0", "replaced, INC-10", &[]);
    assert_eq!(code, 0, "{out}");
    wait_for_health(&d, 0);
    d.scrape_until("polls go on", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    assert!(down.elapsed() < Duration::from_secs(60));

    plane.start_apiserver();
    // The verdict is healthy again: the condition says so, and no taint was ever left.
    eventually("the condition caught up", Duration::from_secs(45), || {
        condition(&node(&plane, "gpu-node-1")).filter(|c| c["status"] == "False" && c["reason"] == "GpusHealthy")
    });
    let rows = events_json(&d.state_path(), &[]);
    let wanted: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| ["health", "clear", "validation"].contains(&r["kind"].as_str().unwrap_or("")))
        .filter(|r| r["gpu"]["uuid"] == demo_uuids()[0].as_str() || r["gpu_uuid"] == demo_uuids()[0].as_str())
        .map(|r| r["summary"].as_str().unwrap_or("").to_string())
        .collect();
    let posted = eventually("every row's Event", Duration::from_secs(45), || {
        let posted = events(&plane, "gpu-node-1");
        let gpu0: Vec<_> = posted
            .iter()
            .filter(|(_, _, m)| m.contains(&demo_uuids()[0]))
            .cloned()
            .collect();
        (gpu0.len() >= wanted.len().max(4)).then_some(gpu0)
    });
    let reasons: Vec<&str> = posted.iter().map(|(_, r, _)| r.as_str()).collect();
    let at = |r: &str| {
        reasons
            .iter()
            .position(|x| *x == r)
            .unwrap_or_else(|| panic!("{r} in {reasons:?}"))
    };
    assert!(
        at("GpuUnhealthy") < at("GpuCleared") && at("GpuCleared") < at("GpuValidationPassed"),
        "{reasons:?}"
    );
    let names: std::collections::BTreeSet<_> = posted.iter().map(|(n, _, _)| n.clone()).collect();
    assert_eq!(names.len(), posted.len(), "none twice");
    let before = events(&plane, "gpu-node-1").len();

    // A kill before the cursor could move would post again under the same names: refused as
    // AlreadyExists, none doubled.
    let d = d.restart(true, None);
    d.scrape_until("the first poll after the restart", |m| {
        m.value("gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    // A hold, meant: the restarted daemon has three passes to post anything twice.
    std::thread::sleep(Duration::from_secs(3));
    let after = events(&plane, "gpu-node-1");
    let doubled = after.len()
        - after
            .iter()
            .map(|(n, _, _)| n)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
    assert_eq!(doubled, 0);
    assert!(after.len() >= before, "{} then {}", before, after.len());
}

fn wait_for_health(d: &Daemon, code: i32) -> (i32, String) {
    until_ok(&format!("`health` to exit {code}"), Duration::from_secs(40), || {
        let (got, out) = d.health(false);
        (got == code)
            .then(|| (got, out.clone()))
            .ok_or(format!("exit {got}: {out}"))
    })
}

/// Least privilege, tried: a service account without gpuwarden's role gets a clear error in
/// the log and the metrics, and the daemon serves its verdict as before; gpuwarden's own
/// token, bound to a pod on gpu-node-1, cannot taint gpu-node-2, cordon its own node or remove
/// an admin's taint (the admission policy says why), and can put its own taint on its node.
#[test]
fn rbac_and_the_admission_policy_keep_gpuwarden_to_its_own_node_and_taint() {
    let plane = cluster(&["gpu-node-1", "gpu-node-2"]);
    plane.apply("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: nobody\n  namespace: gpuwarden\n");
    let nobody = plane.token_file("gpuwarden", "nobody", &[]);
    let config = test_config(&sim_library(), &kube_config(&plane, "gpu-node-1", &nobody, ""));
    let d = Daemon::start_with(&all_idle(DEMO_SCENARIO), &config);
    d.wait_for_log("the API server answered 403 Forbidden", 1, Duration::from_secs(20));
    let log = d.log_text();
    assert!(
        log.contains("kubernetes: node \"gpu-node-1\": GET /api/v1/nodes/gpu-node-1: the API server answered 403 Forbidden: nodes \"gpu-node-1\" is forbidden: User \"system:serviceaccount:gpuwarden:nobody\" cannot get resource \"nodes\""),
        "{log}"
    );
    let m = d.scrape_until("the failure counted", |m| {
        m.value("gpuwarden_sink_failed_total", &[("sink", "kubernetes:events")])
            .is_some_and(|f| f >= 1.0)
    });
    assert_eq!(m.value("gpu_up", &[("gpu", "0")]), Some(1.0));
    assert_eq!(d.health(false).0, 0, "the verdict as before");
    drop(d);

    let token = std::fs::read_to_string(node_token(&plane, "gpu-node-1")).unwrap();
    let (code, _, err) = plane.kubectl(&["taint", "node", "gpu-node-1", "maintenance=rack4:NoSchedule"], None);
    assert_eq!(code, 0, "{err}");
    let own = |args: &[&str]| plane.kubectl_with_token(&token, args);
    let (code, _, err) = own(&[
        "taint",
        "node",
        "gpu-node-2",
        "gpuwarden/unhealthy=xid_fatal:NoSchedule",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("gpuwarden may change only the node its pod runs on"),
        "{err}"
    );
    // (kubectl 1.32's cordon exits 0 when its patch is refused: the node tells.)
    let (_, _, err) = own(&["cordon", "gpu-node-1"]);
    assert!(err.contains("no other taint, no cordon"), "{err}");
    assert_eq!(
        node(&plane, "gpu-node-1")["spec"]["unschedulable"],
        Value::Null,
        "not cordoned"
    );
    let (code, _, err) = own(&["taint", "node", "gpu-node-1", "maintenance-"]);
    assert_ne!(code, 0);
    assert!(err.contains("no other taint, no cordon"), "{err}");
    let (code, _, err) = own(&[
        "taint",
        "node",
        "gpu-node-1",
        "gpuwarden/unhealthy=xid_fatal:NoSchedule",
    ]);
    assert_eq!(code, 0, "its own taint on its own node: {err}");
    let (code, _, err) = own(&["delete", "node", "gpu-node-1"]);
    assert_ne!(code, 0);
    assert!(err.contains("forbidden"), "{err}");
    let unbound = std::fs::read_to_string(plane.token_file("gpuwarden", "gpuwarden", &[])).unwrap();
    let (code, _, err) = plane.kubectl_with_token(&unbound, &["taint", "node", "gpu-node-1", "gpuwarden/unhealthy-"]);
    assert_ne!(code, 0, "a token bound to no pod names no node");
    assert!(
        err.contains("gpuwarden may change only the node its pod runs on"),
        "{err}"
    );
}

/// The node-problem-detector sidecar's way, with the real binary (v1.36.0) standalone against
/// the API server: the shipped plugin config, run every second here, sets GpuUnhealthy from
/// `gpuwarden health` on the fault and back on the clear and its validation.
#[test]
fn node_problem_detector_sets_its_condition_from_gpuwarden_health() {
    let plane = cluster(&["gpu-node-4"]);
    let (code, rendered, err) = plane.kubectl(
        &[
            "kustomize",
            &repo_path("deploy/kubernetes/overlays/node-problem-detector"),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    plane.apply(&rendered);
    let cuda = tempfile::tempdir().unwrap();
    let config = test_config(&sim_library(), PROBES);
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda.path(), true).display().to_string())];
    let d = Daemon::start_full(&all_idle(&with_cuda(DEMO_SCENARIO)), &config, "", &env);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));

    let dir = plane.dir.path();
    let plugin = repo_file("deploy/kubernetes/components/node-problem-detector/gpuwarden-npd.json")
        .replace("\"30s\"", "\"1s\"")
        .replace("/opt/gpuwarden/bin/gpuwarden", BIN)
        .replace("/run/gpuwarden/gpuwarden.sock", &d.socket_path().display().to_string());
    std::fs::write(dir.join("gpuwarden-npd.json"), plugin).unwrap();
    // The sidecar's token is the pod's, bound to it and so to its node.
    let token = std::fs::read_to_string(node_token(&plane, "gpu-node-4")).unwrap();
    std::fs::write(
        dir.join("npd-kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: t, cluster: {{server: \"{}\", certificate-authority: {}}}}}]\n\
             users: [{{name: npd, user: {{token: {}}}}}]\ncontexts: [{{name: t, context: {{cluster: t, user: npd}}}}]\ncurrent-context: t\n",
            plane.server(),
            plane.ca().display(),
            token.trim()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("npd.log")).unwrap();
    let mut npd = std::process::Command::new(kube_bin().join("node-problem-detector"))
        .args([
            "--hostname-override",
            "gpu-node-4",
            "--port",
            "0",
            "--prometheus-port",
            "0",
        ])
        .arg(format!(
            "--config.custom-plugin-monitor={}",
            dir.join("gpuwarden-npd.json").display()
        ))
        .arg(format!(
            "--apiserver-override={}?inClusterConfig=false&auth={}",
            plane.server(),
            dir.join("npd-kubeconfig").display()
        ))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let npd_log = || std::fs::read_to_string(dir.join("npd.log")).unwrap_or_default();
    let healthy = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        eventually("NPD's condition", Duration::from_secs(30), || {
            condition(&node(&plane, "gpu-node-4")).filter(|c| c["status"] == "False")
        })
    }));
    let healthy = healthy.unwrap_or_else(|_| panic!("{}", npd_log()));
    assert_eq!(healthy["reason"], "GpusHealthy");
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    let sick = eventually("NPD's condition True", Duration::from_secs(30), || {
        condition(&node(&plane, "gpu-node-4")).filter(|c| c["status"] == "True")
    });
    assert_eq!(sick["reason"], "GpuUnhealthy");
    assert!(
        sick["message"]
            .as_str()
            .unwrap()
            .starts_with("unhealthy: GPU 0 xid_fatal"),
        "{sick}"
    );
    let (code, out, _) = d.clear("0", "replaced, INC-11", &[]);
    assert_eq!(code, 0, "{out}");
    eventually("NPD's condition False again", Duration::from_secs(40), || {
        condition(&node(&plane, "gpu-node-4")).filter(|c| c["status"] == "False")
    });
    let _ = npd.kill();
    let _ = npd.wait();
}

/// A cluster whose API server serves no DeviceTaintRules (as before 1.37; the resource off): the
/// devices are skipped with one notice, and the node's condition and taint work as before.
#[test]
fn a_cluster_without_device_taint_rules_is_skipped_with_one_notice() {
    let plane = cluster_with(
        &["gpu-node-1"],
        &["--runtime-config=resource.k8s.io/v1/devicetaintrules=false"],
    );
    let cuda = tempfile::tempdir().unwrap();
    let d = start_daemon(&plane, "gpu-node-1", cuda.path());
    d.wait_for_log("has no resource.k8s.io/v1 DeviceTaintRules", 1, Duration::from_secs(20));
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    eventually("the taint", FOLLOWS, || our_taint(&node(&plane, "gpu-node-1")));
    // A hold, meant: two more passes must not say it again or count a failure for it.
    std::thread::sleep(Duration::from_secs(2));
    let log = d.log_text();
    assert_eq!(
        log.matches("has no resource.k8s.io/v1 DeviceTaintRules").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("device taint rules:"), "no failure for it: {log}");
}
