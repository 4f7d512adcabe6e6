//! Pod attribution from a fake kubelet (tests/fake_kubelet.py: grpcio on a unix socket, the
//! real wire protocol): whole GPUs, shared `UUID::N` ids, `nvidiaN` ids, MIG ids, non-GPU
//! resources, an empty list, a slow answer, garbage, a kubelet that goes away and comes back.

use crate::common;

use common::*;

const UUID0: &str = "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000000";
const UUID1: &str = "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000001";
/// GPU 3 of the demo is in MIG mode; this is its GPU instance 3 (2g.35gb).
const MIG_GI3: &str = "MIG-8c1e5a3f-0000-5d2e-8b7a-000000000302";

fn pods(m: &Metrics) -> Vec<(String, String, String, String)> {
    let mut out: Vec<_> = m
        .find("gpu_pod_info", &[])
        .iter()
        .map(|s| {
            let gpu = match s.labels["gpu_instance"].as_str() {
                "" => s.labels["gpu"].clone(),
                gi => format!("{}/gi{gi}", s.labels["gpu"]),
            };
            (
                gpu,
                s.labels["namespace"].clone(),
                s.labels["pod"].clone(),
                s.labels["container"].clone(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The demo's GPUs, with the daemon asking `kubelet` for pods every second.
fn daemon_asking(kubelet: &FakeKubelet) -> Daemon {
    let config = test_config(
        &sim_library(),
        &format!(
            "kubernetes:\n  pod_resources_socket: {}\n  refresh: 1s\n",
            kubelet.socket.display()
        ),
    );
    Daemon::start_with(DEMO_SCENARIO, &config)
}

fn owned(rows: &[(&str, &str, &str, &str)]) -> Vec<(String, String, String, String)> {
    rows.iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect()
}

#[test]
fn a_fake_kubelet_gives_gpu_pod_info_and_its_faults_leave_no_stale_pods() {
    let dir = tempfile::tempdir().unwrap();
    let answer = format!(
        r#"{{"pods": [
          {{"namespace": "ml", "name": "trainer-0", "containers": [
            {{"name": "main", "devices": [{{"resource": "nvidia.com/gpu", "ids": ["{UUID0}"]}},
                                           {{"resource": "example.com/nic", "ids": ["eth9"]}}]}}]}},
          {{"namespace": "serve", "name": "vllm-a", "containers": [
            {{"name": "engine", "devices": [{{"resource": "nvidia.com/gpu", "ids": ["{UUID1}::0"]}}]}}]}},
          {{"namespace": "serve", "name": "vllm-b", "containers": [
            {{"name": "engine", "devices": [{{"resource": "nvidia.com/gpu", "ids": ["{UUID1}::1"]}}]}}]}},
          {{"namespace": "batch", "name": "job-7", "containers": [
            {{"name": "worker", "devices": [{{"resource": "nvidia.com/gpu", "ids": ["nvidia7"]}}]}}]}},
          {{"namespace": "mig", "name": "small", "containers": [
            {{"name": "c", "devices": [{{"resource": "nvidia.com/mig-2g.35gb", "ids": ["{MIG_GI3}"]}}]}}]}},
          {{"namespace": "mig", "name": "gone", "containers": [
            {{"name": "c", "devices": [{{"resource": "nvidia.com/mig-1g.18gb", "ids": ["MIG-00000000-dead-beef-0000-000000000000"]}}]}}]}},
          {{"namespace": "web", "name": "nginx", "containers": [{{"name": "nginx", "devices": []}}]}}
        ]}}"#
    );
    let kubelet = FakeKubelet::start(dir.path(), &answer);
    let d = daemon_asking(&kubelet);
    let m = d.scrape_until("the pods", |m| m.find("gpu_pod_info", &[]).len() == 5);
    assert_eq!(
        pods(&m),
        owned(&[
            ("0", "ml", "trainer-0", "main"),
            ("1", "serve", "vllm-a", "engine"),
            ("1", "serve", "vllm-b", "engine"),
            ("3/gi3", "mig", "small", "c"),
            ("7", "batch", "job-7", "worker"),
        ]),
        "the NIC, the pod without devices and a MIG device no GPU has give nothing"
    );
    assert_eq!(m.value("gpuwarden_kubelet_up", &[]), Some(1.0));
    assert!(d.get("/", &[]).page_text().contains("ml/trainer-0"));

    // Every fault: the pods go (no stale attribution), the daemon serves on, and the kubelet
    // says 0; each change of state is logged once.
    for (what, fault) in [
        ("a slow answer", r#"{"pods": [], "delay": 8}"#),
        ("garbage", r#"{"garbage": true}"#),
    ] {
        kubelet.answer(&answer);
        d.scrape_until("the pods back", |m| m.find("gpu_pod_info", &[]).len() == 5);
        kubelet.answer(fault);
        let m = d.scrape_until(what, |m| m.value("gpuwarden_kubelet_up", &[]) == Some(0.0));
        assert!(!m.has_family("gpu_pod_info"), "{what}: stale pods");
        assert_eq!(m.find("gpu_up", &[]).len(), 8);
    }
    // An empty list: up, no pods.
    kubelet.answer(r#"{"pods": []}"#);
    let m = d.scrape_until("an empty list", |m| m.value("gpuwarden_kubelet_up", &[]) == Some(1.0));
    assert!(!m.has_family("gpu_pod_info"));

    // A kubelet restart: the socket goes away and comes back.
    let socket = kubelet.socket.clone();
    drop(kubelet);
    let _ = std::fs::remove_file(&socket);
    d.scrape_until("the kubelet gone", |m| {
        m.value("gpuwarden_kubelet_up", &[]) == Some(0.0)
    });
    let kubelet = FakeKubelet::start(dir.path(), &answer);
    d.scrape_until("the kubelet back", |m| m.find("gpu_pod_info", &[]).len() == 5);
    drop(kubelet);
    let log = d.log_text();
    assert!(
        log.contains("does not answer") && log.contains("answers again"),
        "{log}"
    );
}

/// A kubelet listing 10,000 pods that all hold all eight GPUs: at most 64 holders per GPU are
/// served and the rest counted (before: 80,000 series and a 12 MB /metrics); an answer over
/// tonic's default 4 MiB is taken; a pod name that is not UTF-8 is kept lossily and drops no
/// other pod (before: every pod went and `gpuwarden_kubelet_up` said 0).
#[test]
fn a_huge_or_odd_kubelet_answer_is_bounded_and_loses_no_pod() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..8)
        .map(|i| format!("\"GPU-5f2c7a1e-0000-4d6b-9a0c-00000000000{i}\""))
        .collect();
    // About 10,000 x (8 ids of 46 bytes + a 210-byte name) = 6 MB on the wire.
    let huge = format!(
        r#"{{"generate": {{"pods": 10000, "ids": [{}], "pad": 200}}}}"#,
        ids.join(", ")
    );
    let kubelet = FakeKubelet::start(dir.path(), &huge);
    let d = daemon_asking(&kubelet);
    let m = d.scrape_until_within("the capped pods", std::time::Duration::from_secs(30), |m| {
        m.find("gpu_pod_info", &[]).len() == 8 * 64
    });
    assert_eq!(m.value("gpuwarden_kubelet_up", &[]), Some(1.0));
    let cut = m
        .value(
            "gpuwarden_input_skipped_total",
            &[("input", "kubelet"), ("reason", "too_many")],
        )
        .unwrap_or(0.0);
    assert!(cut >= 8.0 * (10_000.0 - 64.0), "{cut}");
    for gpu in 0..8 {
        assert_eq!(m.find("gpu_pod_info", &[("gpu", &gpu.to_string())]).len(), 64);
    }
    // Memory: before, about 180 MB (release build) stayed after such an answer. Bounded now:
    // 75 MB at the peak and 69 MB after, in a debug build on the 2-core dev machine.
    let peak = rss_kib(d.child.id());
    kubelet.answer(r#"{"pods": []}"#);
    d.scrape_until("the pods gone", |m| !m.has_family("gpu_pod_info"));
    // Meant: three seconds for the allocator to give the answer's memory back.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let after = rss_kib(d.child.id());
    println!("RSS with 10,000 pods {peak} KiB, after they went {after} KiB");
    assert!(
        after < 120 * 1024,
        "RSS stayed at {after} KiB after the pods went (with them: {peak} KiB)"
    );

    // One name that is not UTF-8 beside a plain one: both shown.
    kubelet.answer(&format!(
        r#"{{"pods": [
          {{"namespace": "ml", "name": "hex:6261ff64", "containers": [
            {{"name": "main", "devices": [{{"resource": "nvidia.com/gpu", "ids": ["{UUID0}"]}}]}}]}},
          {{"namespace": "ml", "name": "good", "containers": [
            {{"name": "main", "devices": [{{"resource": "nvidia.com/gpu", "ids": ["{UUID1}"]}}]}}]}}
        ]}}"#
    ));
    let m = d.scrape_until("both pods", |m| m.find("gpu_pod_info", &[]).len() == 2);
    assert_eq!(pods(&m)[0].2, "ba\u{fffd}d");
    assert_eq!(pods(&m)[1].2, "good");
    assert_eq!(m.value("gpuwarden_kubelet_up", &[]), Some(1.0));
}

/// On Kubernetes the scheduler guard of an automatic reset is the kubelet's word: a GPU that a
/// pod holds is not reset (held back as `scheduler`, naming the pod); once the pod has gone
/// and the kubelet says so, the reset runs.
#[test]
fn an_automatic_reset_waits_for_the_pod_holding_the_gpu_to_go() {
    let dir = tempfile::tempdir().unwrap();
    let kubelet = FakeKubelet::start(
        dir.path(),
        r#"{"pods": [{"namespace": "ml", "name": "trainer-0", "containers": [{"name": "main", "devices": [{"resource": "nvidia.com/gpu", "ids": ["nvidia0"]}]}]}]}"#,
    );
    let config = format!(
        "kubernetes:\n  pod_resources_socket: {}\n  refresh: 1s\n{}",
        kubelet.socket.display(),
        auto_remediation(dir.path(), &fake_reset_command())
    );
    // GPU 6's pending remap would want a reset of its own: not here.
    let idle = edit_device(&all_idle(DEMO_SCENARIO), 6, |dev| {
        dev.replace("pending: true", "pending: false")
            .replace("recovery_action: 1", "recovery_action: 0")
    });
    let d = Daemon::start_with(&idle, &test_config(&sim_library(), &config));
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=x, Contained: SM (0x1)\n");
    d.scrape_until("held back by the pod", |m| {
        m.value("gpu_remediation_held_back", &[("gpu", "0"), ("guard", "scheduler")]) == Some(1.0)
    });
    let (_, text) = d.health(false);
    assert!(
        text.contains("the kubelet shows pod ml/trainer-0 holding the GPU"),
        "{text}"
    );
    holds_for("no reset under the pod", std::time::Duration::from_secs(2), || match d
        .scrape()
        .value("gpu_remediation_resets", &[("gpu", "0"), ("outcome", "succeeded")])
    {
        Some(0.0) => Ok(()),
        other => Err(format!("resets {other:?}")),
    });
    kubelet.answer(r#"{"pods": []}"#);
    d.scrape_until("the reset once the pod is gone", |m| {
        m.value("gpu_remediation_resets", &[("gpu", "0"), ("outcome", "succeeded")]) == Some(1.0)
    });
}
