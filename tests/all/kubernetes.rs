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
