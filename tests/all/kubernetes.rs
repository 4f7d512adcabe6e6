//! The Kubernetes manifests: the PrometheusRule carries exactly the shipped rules, the
//! embedded config is valid, and ports, labels and selectors line up.

use crate::common;

use serde_json::Value;

fn manifests() -> Vec<Value> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/gpuwarden.yaml")).unwrap();
    serde_saphyr::from_multiple(&text).unwrap()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn the_prometheusrule_holds_exactly_the_shipped_rules() {
    let rules: Value = serde_saphyr::from_str(&std::fs::read_to_string(common::RULES).unwrap()).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/prometheusrule.yaml");
    let rule: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        rule["spec"]["groups"], rules["groups"],
        "deploy/kubernetes/prometheusrule.yaml is out of date: run scripts/gen/gen-k8s-rules.sh"
    );
}

#[test]
fn the_embedded_config_is_valid_and_matches_the_ports() {
    let docs = manifests();
    let config = kind(&docs, "ConfigMap")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, &config).unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["config", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(config.contains("listen: 0.0.0.0:9400"));

    let ds = kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"];
    assert_eq!(ds["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]);
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["ports"][0]["containerPort"], 9400);
    assert_eq!(container["ports"][0]["name"], "metrics");
    let caps = &container["securityContext"]["capabilities"];
    assert_eq!(caps["drop"], serde_json::json!(["ALL"]));
    assert_eq!(caps["add"], serde_json::json!(["SYS_ADMIN", "SYSLOG"]));
    assert_eq!(container["securityContext"]["privileged"], false);
    assert!(
        pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["hostPath"]["path"] == "/dev/kmsg"),
        "the XID reader needs /dev/kmsg"
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    // The journal lives on the node, where the config's state.path (the default) points.
    let state = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "state")
        .expect("a state volume");
    assert_eq!(state["hostPath"]["path"], "/var/lib/gpuwarden");
    assert!(
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "state" && m["mountPath"] == "/var/lib/gpuwarden" && m["readOnly"] != true),
        "the state volume is mounted writable at state.path's directory"
    );
    assert!(!config.contains("state:") || config.contains("/var/lib/gpuwarden/"));

    let svc = kind(&docs, "Service");
    assert_eq!(svc["spec"]["selector"], pod["metadata"]["labels"]);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    let sm = kind(&docs, "ServiceMonitor");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor must select the Service"
        );
    }
    assert_eq!(sm["spec"]["endpoints"][0]["port"], svc["spec"]["ports"][0]["name"]);
}

fn npd_config() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/npd-gpuwarden.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A Go duration as NPD's configs write them ("30s", "5s").
fn go_seconds(text: &Value) -> u64 {
    text.as_str()
        .and_then(|t| t.strip_suffix('s'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"))
}

fn mount<'a>(container: &'a Value, volume: &str) -> &'a Value {
    container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume)
        .unwrap_or_else(|| panic!("{} does not mount {volume}", container["name"]))
}

#[test]
fn node_problem_detector_in_the_pod_reaches_gpuwarden_s_socket_with_its_binary() {
    let docs = manifests();
    let npd = npd_config();
    // The ConfigMap carries the shipped plugin config, unchanged.
    let map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "gpuwarden-npd")
        .expect("the NPD ConfigMap");
    let embedded: Value = serde_json::from_str(map["data"]["gpuwarden-npd.json"].as_str().unwrap()).unwrap();
    assert_eq!(embedded, npd);
    let rule = &npd["rules"][0];
    assert_eq!(npd["plugin"], "custom");
    assert_eq!(rule["condition"], "GpuUnhealthy");
    assert_eq!(npd["conditions"][0]["type"], "GpuUnhealthy");
    assert!(go_seconds(&rule["timeout"]) <= go_seconds(&npd["pluginConfig"]["invoke_interval"]));
    let args: Vec<&str> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args[0], "health");
    let socket = args[args.iter().position(|a| *a == "--socket").unwrap() + 1];

    let pod = &kind(&docs, "DaemonSet")["spec"]["template"]["spec"];
    let container = |name: &str| {
        pod["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} container"))
    };
    let (gpuwarden, detector) = (container("gpuwarden"), container("node-problem-detector"));
    // Both mount the socket's directory from one volume; the config's socket is in it.
    let socket_dir = std::path::Path::new(socket).parent().unwrap().to_str().unwrap();
    assert_eq!(mount(gpuwarden, "run")["mountPath"], socket_dir);
    assert_eq!(mount(detector, "run")["mountPath"], socket_dir);
    let config = kind(&docs, "ConfigMap")["data"]["config.yaml"].as_str().unwrap();
    assert!(config.contains(&format!("socket: {socket}")), "{config}");
    // The rule's binary is where the init container put gpuwarden's.
    let init = &pod["initContainers"][0];
    let bin_dir = mount(detector, "gpuwarden-bin")["mountPath"].as_str().unwrap();
    assert_eq!(mount(init, "gpuwarden-bin")["mountPath"], bin_dir);
    assert_eq!(rule["path"], format!("{bin_dir}/gpuwarden"));
    assert!(
        init["command"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == format!("{bin_dir}/gpuwarden").as_str())
    );
    // NPD loads the plugin config it is given, and runs as root (the socket is 0600).
    let command: Vec<&str> = detector["command"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let config_dir = mount(detector, "npd-config")["mountPath"].as_str().unwrap();
    assert!(command.contains(&format!("--config.custom-plugin-monitor={config_dir}/gpuwarden-npd.json").as_str()));
    assert_eq!(detector["securityContext"]["runAsUser"], 0);
    assert_eq!(pod["serviceAccountName"], "gpuwarden");
}

/// Runs the plugin's rule as NPD does: its path and args (the binary and socket of the test
/// daemon in place of the pod's), killed at the rule's timeout, stdout cut to
/// `max_output_length`. NPD's protocol: exit 0 OK, 1 NonOK, anything else Unknown.
fn run_like_npd(npd: &Value, socket: &std::path::Path) -> (i32, String, std::time::Duration) {
    let rule = &npd["rules"][0];
    let args: Vec<String> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .map(|a| {
            if a.ends_with(".sock") {
                socket.display().to_string()
            } else {
                a.to_string()
            }
        })
        .collect();
    let timeout = std::time::Duration::from_secs(go_seconds(&rule["timeout"]));
    let started = std::time::Instant::now();
    let mut child = std::process::Command::new(common::BIN)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        assert!(started.elapsed() < timeout, "NPD would have killed it at {timeout:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    let max = npd["pluginConfig"]["max_output_length"].as_u64().unwrap() as usize;
    let message: String = out.trim().chars().take(max).collect();
    (code, message, started.elapsed())
}

#[test]
fn the_npd_plugin_answers_ok_problem_and_unknown_within_its_timeout_and_length() {
    use common::*;
    let npd = npd_config();
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let (code, message, _) = run_like_npd(&npd, &d.socket_path());
    assert_eq!(code, 0, "OK: {message}");
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (code, message) = loop {
        let (code, message, _) = run_like_npd(&npd, &d.socket_path());
        if code != 0 || std::time::Instant::now() > deadline {
            break (code, message);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(code, 1, "NonOK: {message}");
    // The condition's message as NPD cuts it still names the GPU and the finding.
    assert!(message.starts_with("unhealthy: GPU 0 xid_fatal"), "{message}");
    let socket = d.socket_path();
    drop(d);
    let (code, message, took) = run_like_npd(&npd, &socket);
    assert_eq!(code, 2, "Unknown without a daemon: {message}");
    assert!(message.starts_with("unknown:"), "{message}");
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
}
