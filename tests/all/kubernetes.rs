//! The Kubernetes manifests as kustomize renders each overlay: the PrometheusRule carries
//! exactly the shipped rules, the config in each is valid and its port is the pod's, Service's
//! and ServiceMonitor's, every gpuwarden container runs this version's image, and
//! node-problem-detector reaches gpuwarden's socket with the binary the init container copies.
//! (scripts/ci/k8s-check.sh validates the same renderings against the Kubernetes API.)

use crate::common;

use serde_json::Value;

const OVERLAYS: [&str; 6] = [
    "plain",
    "dcgm-compat",
    "node-problem-detector",
    "prometheus-operator",
    "kube-prometheus-stack",
    "node-verdict",
];

/// One overlay of deploy/kubernetes/overlays as `kubectl apply -k` would send it.
fn render(overlay: &str) -> Vec<Value> {
    let dir = format!("{}/deploy/kubernetes/overlays/{overlay}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", &dir])
        .output()
        .unwrap_or_else(|e| panic!("kubectl (its kustomize renders the overlays) cannot run: {e}"));
    assert!(
        out.status.success(),
        "{overlay}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// A ConfigMap by the name it is generated with (kustomize appends a hash of its content).
fn config_map<'a>(docs: &'a [Value], name: &str) -> &'a Value {
    docs.iter()
        .find(|d| {
            d["kind"] == "ConfigMap"
                && d["metadata"]["name"]
                    .as_str()
                    .and_then(|n| n.strip_prefix(name))
                    .is_some_and(|hash| hash.starts_with('-'))
        })
        .unwrap_or_else(|| panic!("no ConfigMap {name}-<hash>"))
}

#[test]
fn the_prometheusrule_holds_exactly_the_shipped_rules() {
    let rules: Value = serde_saphyr::from_str(&std::fs::read_to_string(common::RULES).unwrap()).unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/components/prometheus-operator/prometheusrule.yaml"
    );
    let rule: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        rule["spec"]["groups"], rules["groups"],
        "deploy/kubernetes/components/prometheus-operator/prometheusrule.yaml is out of date: run scripts/gen/gen-k8s-rules.sh"
    );
}

/// The port the config in a rendering listens on.
fn listen_port(config: &str) -> u64 {
    config
        .lines()
        .find_map(|l| l.strip_prefix("listen: "))
        .and_then(|addr| addr.rsplit(':').next())
        .and_then(|port| port.trim().parse().ok())
        .unwrap_or_else(|| panic!("no listen: HOST:PORT in {config}"))
}

#[test]
fn each_overlay_s_config_is_valid_and_its_port_is_the_pod_s_and_the_service_s() {
    for overlay in OVERLAYS {
        let docs = render(overlay);
        let config = config_map(&docs, "gpuwarden-config")["data"]["config.yaml"]
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
        assert!(
            out.status.success(),
            "{overlay}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = listen_port(&config);
        // dcgm-exporter's port and names for a migration; gpuwarden's own elsewhere.
        if overlay == "dcgm-compat" {
            assert_eq!(port, 9400, "{overlay}");
            assert!(config.contains("dcgm_exporter: true"), "{config}");
        } else {
            assert_eq!(port, 9100, "{overlay}");
            assert!(!config.contains("dcgm_exporter"), "{overlay}: {config}");
        }

        let ds = kind(&docs, "DaemonSet");
        let pod = &ds["spec"]["template"];
        assert_eq!(
            ds["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
            "gpuwarden"
        );
        assert_eq!(pod["metadata"]["labels"]["app.kubernetes.io/name"], "gpuwarden");
        let container = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "gpuwarden")
            .expect("the gpuwarden container");
        assert_eq!(container["ports"][0]["containerPort"], port, "{overlay}");
        assert_eq!(container["ports"][0]["name"], "metrics");
        // The config file the container reads is the generated ConfigMap's.
        let config_volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "config")
            .expect("a config volume");
        assert_eq!(
            config_volume["configMap"]["name"],
            config_map(&docs, "gpuwarden-config")["metadata"]["name"]
        );
        assert_eq!(mount(container, "config")["mountPath"], "/etc/gpuwarden");
        assert_eq!(
            container["args"],
            serde_json::json!(["run", "--config", "/etc/gpuwarden/config.yaml"])
        );
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
            mount(container, "state")["readOnly"] != true,
            "the journal's directory is writable"
        );
        assert!(
            !config.contains("state:"),
            "state.path stays its default, in the hostPath"
        );
        // Only a user who asks gets runtimeClassName (the nvidia-runtime-class component).
        assert!(pod["spec"].get("runtimeClassName").is_none(), "{overlay}");

        let svc = kind(&docs, "Service");
        assert_eq!(svc["spec"]["selector"]["app.kubernetes.io/name"], "gpuwarden");
        assert_eq!(svc["spec"]["ports"][0]["port"], port, "{overlay}");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
        let operator = docs
            .iter()
            .filter(|d| {
                d["apiVersion"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("monitoring.coreos.com/"))
            })
            .count();
        if !["prometheus-operator", "kube-prometheus-stack"].contains(&overlay) {
            assert_eq!(
                operator, 0,
                "{overlay}: a cluster without the Prometheus Operator cannot apply these"
            );
            continue;
        }
        assert_eq!(operator, 2, "a ServiceMonitor and a PrometheusRule");
        let sm = kind(&docs, "ServiceMonitor");
        for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(
                &svc["metadata"]["labels"][k], v,
                "the ServiceMonitor must select the Service"
            );
        }
        assert_eq!(sm["spec"]["endpoints"][0]["port"], svc["spec"]["ports"][0]["name"]);
        assert_eq!(sm["metadata"]["namespace"], ds["metadata"]["namespace"]);
        assert_eq!(
            kind(&docs, "PrometheusRule")["metadata"]["namespace"],
            ds["metadata"]["namespace"]
        );
    }
}

/// The manifests name the image scripts/image.sh builds (`gpuwarden:VERSION`), in every
/// container that runs gpuwarden, the init container included, under a registry that says it
/// is a placeholder (`registry.invalid`: a pull fails naming it, not an unqualified name some
/// registry might answer); the README's first Kubernetes line sets the real one.
#[test]
fn every_gpuwarden_container_runs_this_version_s_image() {
    let image = format!("registry.invalid/gpuwarden:{}", env!("CARGO_PKG_VERSION"));
    let readme = common::repo_file("README.md");
    let kubernetes = &readme[readme.find("**Kubernetes**").unwrap()..];
    let first = kubernetes
        .lines()
        .skip_while(|l| !l.starts_with("```sh"))
        .nth(1)
        .unwrap_or("");
    assert!(
        first.contains("kustomize edit set image gpuwarden="),
        "the README's first Kubernetes line names the image: {first}"
    );
    let script = common::repo_file("scripts/image.sh");
    assert!(
        script.contains("oci-archive:$out:gpuwarden:$version\""),
        "scripts/image.sh names the image gpuwarden:VERSION in its archive"
    );
    for overlay in OVERLAYS {
        let docs = render(overlay);
        let pod = &kind(&docs, "DaemonSet")["spec"]["template"]["spec"];
        let containers: Vec<&Value> = ["initContainers", "containers"]
            .iter()
            .filter_map(|list| pod[list].as_array())
            .flatten()
            .filter(|c| c["name"] != "node-problem-detector")
            .collect();
        assert!(!containers.is_empty());
        for container in containers {
            assert_eq!(container["image"], image.as_str(), "{overlay}: {}", container["name"]);
        }
    }
}

fn npd_config() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/components/node-problem-detector/gpuwarden-npd.json"
    );
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
    let docs = render("node-problem-detector");
    let npd = npd_config();
    // The ConfigMap carries the shipped plugin config, unchanged, and NPD's volume is it.
    let map = config_map(&docs, "gpuwarden-npd");
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
    let config = config_map(&docs, "gpuwarden-config")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    assert!(config.contains(&format!("socket: {socket}")), "{config}");
    // The rule's binary is where the init container put gpuwarden's.
    let init = &pod["initContainers"][0];
    let bin_dir = mount(detector, "gpuwarden-bin")["mountPath"].as_str().unwrap();
    assert_eq!(mount(init, "gpuwarden-bin")["mountPath"], bin_dir);
    assert_eq!(rule["path"], format!("{bin_dir}/gpuwarden"));
    // gpuwarden's image has no cp: the binary copies itself.
    assert_eq!(init["args"], serde_json::json!(["copy-binary", bin_dir]));
    assert_eq!(init["image"], gpuwarden["image"]);
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
    let npd_volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "npd-config")
        .expect("NPD's config volume");
    assert_eq!(npd_volume["configMap"]["name"], map["metadata"]["name"]);
    // NPD sets the node condition through the API server: the token and the RBAC for it.
    assert_eq!(pod["serviceAccountName"], "gpuwarden");
    assert_eq!(pod["automountServiceAccountToken"], true);
    let binding = kind(&docs, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["name"], "gpuwarden");
    assert_eq!(
        binding["subjects"][0]["namespace"],
        kind(&docs, "DaemonSet")["metadata"]["namespace"]
    );
    let role = kind(&docs, "ClusterRole");
    assert!(
        role["rules"].as_array().unwrap().iter().any(
            |r| r["resources"] == serde_json::json!(["nodes/status"]) && r["verbs"] == serde_json::json!(["patch"])
        )
    );
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
        // Meant: its exit timed to 20 ms, against NPD's time-out.
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
    let (code, message) = until_ok("NPD's check to say NonOK", std::time::Duration::from_secs(10), || {
        let (code, message, _) = run_like_npd(&npd, &d.socket_path());
        (code != 0).then(|| (code, message.clone())).ok_or(message)
    });
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

/// `copy-binary`, the init container's step: the binary at DIR/gpuwarden, executable, the same
/// program; a directory it cannot write gets a line naming it and exit 1.
#[test]
fn copy_binary_puts_a_working_gpuwarden_in_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["copy-binary"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let copied = dir.path().join("gpuwarden");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        copied.display().to_string()
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&copied).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(std::fs::read(&copied).unwrap(), std::fs::read(common::BIN).unwrap());
    let version = std::process::Command::new(&copied).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("gpuwarden {}", env!("CARGO_PKG_VERSION"))
    );
    // Nothing else is left in the directory (no partial file).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    let missing = dir.path().join("no-such-directory");
    let out = std::process::Command::new(common::BIN)
        .args(["copy-binary"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
}

/// kube-prometheus-stack's Prometheus selects by `release: <its Helm release>`: the overlay
/// for it labels the ServiceMonitor and the PrometheusRule, and nothing else.
#[test]
fn the_kube_prometheus_stack_overlay_labels_what_its_selectors_look_for() {
    let docs = render("kube-prometheus-stack");
    for k in ["ServiceMonitor", "PrometheusRule"] {
        assert_eq!(
            kind(&docs, k)["metadata"]["labels"]["release"],
            "kube-prometheus-stack",
            "{k}"
        );
    }
    assert_eq!(kind(&docs, "DaemonSet")["metadata"]["labels"]["release"], Value::Null);
    let plain_operator = render("prometheus-operator");
    assert_eq!(
        kind(&plain_operator, "ServiceMonitor")["metadata"]["labels"]["release"],
        Value::Null
    );
}

/// The node-verdict overlay: the pod gets a token and its node's name, tolerates its own
/// taint (a restarted pod must come back to a tainted node to lift it), the config turns the
/// writes on, and the role holds the verbs docs/health.md lists and no more.
#[test]
fn the_node_verdict_overlay_gives_the_pod_what_it_needs_and_no_more() {
    let docs = render("node-verdict");
    let pod = &kind(&docs, "DaemonSet")["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], true);
    let tolerations = pod["tolerations"].to_string();
    assert!(
        tolerations.contains("gpuwarden/unhealthy") && tolerations.contains("nvidia.com/gpu"),
        "{tolerations}"
    );
    let env = pod["containers"][0]["env"].to_string();
    assert!(env.contains("NODE_NAME") && env.contains("spec.nodeName"), "{env}");
    let config = config_map(&docs, "gpuwarden-config")["data"]["config.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        config.contains("enabled: true") && config.contains("taint_rules: true"),
        "{config}"
    );
    let role = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "gpuwarden-node-verdict")
        .unwrap();
    let rules: Vec<String> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["resources"], r["verbs"]))
        .collect();
    assert_eq!(
        rules,
        [
            r#"["nodes"] ["get","list","patch"]"#,
            r#"["nodes/status"] ["patch"]"#,
            r#"["resourceslices"] ["list"]"#,
            r#"["devicetaintrules"] ["list","create","update","delete"]"#,
        ]
    );
    assert!(docs.iter().any(|d| d["kind"] == "ValidatingAdmissionPolicy"));
    let events = docs.iter().find(|d| d["kind"] == "Role").unwrap();
    assert_eq!(events["metadata"]["namespace"], "default");
    assert_eq!(events["rules"][0]["verbs"].to_string(), r#"["create"]"#);
}

/// The GPU Operator's values shipped beside the manifests turn off what gpuwarden replaces:
/// its dcgm-exporter (no doubled DCGM_FI_* series) and the device plugin's XID health check
/// (one judge of an XID), and nothing else.
#[test]
fn the_gpu_operator_values_switch_off_what_gpuwarden_replaces() {
    let text = common::repo_file("deploy/kubernetes/gpu-operator-values.yaml");
    let values: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(values["dcgmExporter"]["enabled"], false);
    assert_eq!(
        values["devicePlugin"]["env"],
        serde_json::json!([{"name": "DP_DISABLE_HEALTHCHECKS", "value": "all"}])
    );
    assert_eq!(values.as_object().unwrap().len(), 2, "{values}");
    let readme = common::repo_file("deploy/kubernetes/README.md");
    assert!(readme.contains("DP_DISABLE_HEALTHCHECKS=all") && readme.contains("gpu-operator-values.yaml"));
}
