//! The verdict on each GPU's DRA device (docs/health.md, "Kubernetes"): where the cluster runs
//! a DRA driver, a `DeviceTaintRule` (resource.k8s.io/v1, Kubernetes 1.37) for each GPU that
//! is not ok, matched through the node's ResourceSlices by the device's `uuid` attribute (the
//! NVIDIA DRA driver's): `NoExecute` for an unhealthy GPU, whose next step takes it out of
//! service (pods using it are evicted, the node's other GPUs keep theirs); `NoSchedule` while
//! it only waits for its validation (after a clear or a reset); `None`, a notice a scheduler
//! can read, for a degraded one. A rule goes when its GPU is ok again, after the clear and the
//! passed validation. Only rules gpuwarden made for this node (by label and annotation) are
//! touched. A cluster without the API (older, or DRA off) is skipped with one notice.

use super::client::{ApiError, Client, escape};
use super::node::{TAINT_KEY, label_value};
use crate::health::verdict::{GpuVerdict, NodeVerdict};
use crate::model::health::HealthState;
use hyper::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const RULES: &str = "/apis/resource.k8s.io/v1/devicetaintrules";
const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";
/// The label that marks gpuwarden's rules, and the annotation that names their node.
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const NODE_KEY: &str = "gpuwarden/node";
const GPU_KEY: &str = "gpuwarden/gpu";

/// The taint a GPU's device should carry: (effect, value).
pub(crate) fn wanted(gpu: &GpuVerdict) -> Option<(&'static str, String)> {
    let reasons: Vec<&str> = gpu.findings.iter().map(|f| f.reason.as_str()).collect();
    match gpu.state {
        HealthState::Ok => None,
        HealthState::Degraded => Some(("None", first(&reasons))),
        HealthState::Unhealthy if !reasons.is_empty() && reasons.iter().all(|r| *r == "validating") => {
            Some(("NoSchedule", "validating".into()))
        }
        HealthState::Unhealthy => {
            let out: Vec<&str> = reasons.iter().copied().filter(|r| *r != "validating").collect();
            Some(("NoExecute", first(&out)))
        }
    }
}

/// The first reason as a label value (the Node's taint makes its value the same way).
fn first(reasons: &[&str]) -> String {
    label_value(reasons.first().copied().unwrap_or("unhealthy"))
}

/// A device as a ResourceSlice lists it: driver, pool, name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Device {
    pub driver: String,
    pub pool: String,
    pub name: String,
}

#[derive(Deserialize)]
struct SliceList {
    #[serde(default)]
    items: Vec<Slice>,
}

#[derive(Deserialize)]
struct Slice {
    #[serde(default)]
    spec: SliceSpec,
}

#[derive(Default, Deserialize)]
struct SliceSpec {
    #[serde(default)]
    driver: String,
    #[serde(default)]
    pool: Pool,
    #[serde(default)]
    devices: Vec<SliceDevice>,
}

#[derive(Default, Deserialize)]
struct Pool {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct SliceDevice {
    #[serde(default)]
    name: String,
    #[serde(default)]
    attributes: BTreeMap<String, Value>,
}

/// The node's devices by the UUID their `uuid` attribute (in any driver's domain) gives.
fn devices_by_uuid(slices: SliceList) -> BTreeMap<String, Device> {
    let mut out = BTreeMap::new();
    for slice in slices.items {
        for device in slice.spec.devices {
            let uuid = device
                .attributes
                .iter()
                .find(|(k, _)| *k == "uuid" || k.ends_with("/uuid"))
                .and_then(|(_, v)| v.get("string").and_then(Value::as_str));
            if let Some(uuid) = uuid {
                out.insert(
                    uuid.to_ascii_lowercase(),
                    Device {
                        driver: slice.spec.driver.clone(),
                        pool: slice.spec.pool.name.clone(),
                        name: device.name.clone(),
                    },
                );
            }
        }
    }
    out
}

/// The rule's name: `gpuwarden-NODE-UUID` in the API's alphabet, or a digest where that is
/// over 253 characters.
pub(crate) fn rule_name(node: &str, uuid: &str) -> String {
    let clean = |s: &str| -> String {
        s.to_ascii_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    let name = format!("gpuwarden-{}-{}", clean(node), clean(uuid));
    let name = name.trim_end_matches(['-', '.']).to_string();
    if name.len() <= 253 {
        return name;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{node}/{uuid}").as_bytes());
    format!("gpuwarden-{}", hex(&digest.as_ref()[..16]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The rule for a GPU's device.
pub(crate) fn rule(node: &str, uuid: &str, device: &Device, effect: &str, value: &str) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(node, uuid),
            "labels": {MANAGED_BY: "gpuwarden"},
            "annotations": {NODE_KEY: node, GPU_KEY: uuid},
        },
        "spec": {
            "deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.name},
            "taint": {"key": TAINT_KEY, "value": value, "effect": effect},
        },
    })
}

#[derive(Deserialize)]
struct RuleList {
    #[serde(default)]
    items: Vec<Value>,
}

/// What a pass over the devices did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Applied {
    /// GPUs not ok whose device no ResourceSlice of the node lists (no DRA driver for it).
    pub unmatched: Vec<String>,
}

/// Why the rules cannot be written here at all.
pub(crate) fn unsupported(error: &ApiError) -> bool {
    matches!(error.status(), Some(StatusCode::NOT_FOUND))
}

/// Makes the node's rules what `verdict` wants: creates, updates and deletes only its own.
pub(crate) async fn apply(client: &Client, node: &str, verdict: &NodeVerdict) -> Result<Applied, ApiError> {
    let wanted: Vec<(&GpuVerdict, &'static str, String)> = verdict
        .gpus
        .iter()
        .filter_map(|g| wanted(g).map(|(effect, value)| (g, effect, value)))
        .collect();
    let listed: RuleList = client
        .get(&format!(
            "{RULES}?labelSelector={}",
            escape(&format!("{MANAGED_BY}=gpuwarden"))
        ))
        .await?;
    let mut ours: BTreeMap<String, Value> = listed
        .items
        .into_iter()
        .filter(|r| r["metadata"]["annotations"][NODE_KEY].as_str() == Some(node))
        .filter_map(|r| Some((r["metadata"]["name"].as_str()?.to_string(), r)))
        .collect();
    let mut applied = Applied::default();
    if !wanted.is_empty() {
        let slices: SliceList = client
            .get(&format!(
                "{SLICES}?fieldSelector={}",
                escape(&format!("spec.nodeName={node}"))
            ))
            .await?;
        let devices = devices_by_uuid(slices);
        for (gpu, effect, value) in wanted {
            let Some(device) = devices.get(&gpu.uuid.to_ascii_lowercase()) else {
                applied.unmatched.push(gpu.uuid.clone());
                continue;
            };
            let mut want = rule(node, &gpu.uuid, device, effect, &value);
            let name = rule_name(node, &gpu.uuid);
            match ours.remove(&name) {
                Some(have)
                    if have["spec"]["deviceSelector"] == want["spec"]["deviceSelector"]
                        && same_taint(&have["spec"]["taint"], &want["spec"]["taint"]) => {}
                Some(have) => {
                    want["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"].clone();
                    client
                        .write(
                            Method::PUT,
                            &format!("{RULES}/{}", escape(&name)),
                            "application/json",
                            &want,
                        )
                        .await?;
                }
                None => client.write(Method::POST, RULES, "application/json", &want).await?,
            }
        }
    }
    for name in ours.keys() {
        match client.delete(&format!("{RULES}/{}", escape(name))).await {
            Err(e) if e.status() == Some(StatusCode::NOT_FOUND) => {}
            other => other?,
        }
    }
    Ok(applied)
}

fn same_taint(have: &Value, want: &Value) -> bool {
    ["key", "value", "effect"].iter().all(|k| have[*k] == want[*k])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::verdict::{FindingView, Level};

    fn gpu(state: HealthState, reasons: &[&str]) -> GpuVerdict {
        GpuVerdict {
            index: 0,
            uuid: "GPU-5F2C".into(),
            pci_bus_id: "0000:19:00.0".into(),
            name: "H100".into(),
            serial: None,
            state,
            findings: reasons
                .iter()
                .map(|r| FindingView {
                    reason: r.to_string(),
                    severity: Level::Unhealthy,
                    message: String::new(),
                    subject: None,
                })
                .collect(),
            next_step: None,
            held_back: None,
        }
    }

    #[test]
    fn the_effect_follows_what_the_gpu_needs() {
        assert_eq!(wanted(&gpu(HealthState::Ok, &[])), None);
        assert_eq!(
            wanted(&gpu(HealthState::Degraded, &["thermal_slowdown"])),
            Some(("None", "thermal_slowdown".into()))
        );
        assert_eq!(
            wanted(&gpu(HealthState::Unhealthy, &["validating"])),
            Some(("NoSchedule", "validating".into()))
        );
        assert_eq!(
            wanted(&gpu(HealthState::Unhealthy, &["validating", "xid_fatal"])),
            Some(("NoExecute", "xid_fatal".into()))
        );
        assert_eq!(
            wanted(&gpu(HealthState::Unhealthy, &["gpu_lost"])),
            Some(("NoExecute", "gpu_lost".into()))
        );
    }

    #[test]
    fn a_device_is_found_by_its_uuid_attribute_in_any_domain() {
        let slices: SliceList = serde_json::from_value(json!({"items": [
            {"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "node-1"}, "devices": [
                {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-5f2c"}, "index": {"int": 0}}},
                {"name": "gpu-1", "attributes": {"gpu.nvidia.com/uuid": {"string": "GPU-aaaa"}}},
                {"name": "nic-0", "attributes": {"uuid": {"int": 7}}},
            ]}},
            {"spec": {}},
        ]}))
        .unwrap();
        let found = devices_by_uuid(slices);
        assert_eq!(found.len(), 2);
        assert_eq!(
            found["gpu-5f2c"],
            Device {
                driver: "gpu.nvidia.com".into(),
                pool: "node-1".into(),
                name: "gpu-0".into()
            }
        );
        assert_eq!(found["gpu-aaaa"].name, "gpu-1");
    }

    #[test]
    fn a_rule_name_is_one_the_api_takes() {
        assert_eq!(
            rule_name("node-1.rack4", "GPU-5f2c_7A"),
            "gpuwarden-node-1.rack4-gpu-5f2c-7a"
        );
        let long = rule_name(&"n".repeat(250), "GPU-1");
        assert!(long.len() <= 253 && long.starts_with("gpuwarden-"), "{long}");
    }
}
