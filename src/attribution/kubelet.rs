//! Which pod holds each GPU, from the kubelet's pod-resources API: gRPC
//! `v1.PodResourcesLister/List` over the unix socket
//! /var/lib/kubelet/pod-resources/kubelet.sock (kubernetes'
//! staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto).
//!
//! The messages are written out with prost's derive (only the fields read here; prost skips
//! the others), so no protoc is needed to build. A task of the async runtime asks every
//! `kubernetes.refresh` with a deadline, never on the scrape path; what it learnt is kept in
//! [`PodState`], and the publisher puts it into the next snapshot. A kubelet that is missing,
//! slow, restarting or answering garbage costs nothing but its own series: the assignments go
//! (no stale attribution), `gpuwarden_kubelet_up` says 0, and each change of state is one log
//! line.

use super::AttributionError;
use crate::config::Kubernetes;
use crate::input::{Input, Reason, Skips};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// `v1.ListPodResourcesRequest`: empty.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListPodResourcesRequest {}

/// `v1.ListPodResourcesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

// Names are declared as bytes, not strings: prost refuses a whole answer when one string
// is not UTF-8, and one odd pod name must not drop every pod. They are decoded lossily.

/// `v1.PodResources`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PodResources {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub namespace: Vec<u8>,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `v1.ContainerResources` (devices only).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ContainerResources {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// `v1.ContainerDevices` (without topology).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ContainerDevices {
    #[prost(bytes = "vec", tag = "1")]
    pub resource_name: Vec<u8>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub device_ids: Vec<Vec<u8>>,
}

/// The largest answer taken (tonic's default is 4 MiB). A node's pods make tens of
/// kilobytes; a larger answer is refused with a message rather than decoded.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// Most containers kept per device id (a whole GPU, a MIG device): time slicing and MPS
/// share a GPU among a handful of pods; the rest are counted as skipped, not served, so a
/// kubelet listing thousands cannot make thousands of series per GPU.
pub(crate) const MAX_HOLDERS_PER_DEVICE: usize = 64;
/// Longest name kept (Kubernetes allows 253 bytes for a pod name).
const MAX_NAME: usize = 253;

/// One device a container holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Assignment {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// As the device plugin names it: a GPU UUID, a shared `UUID::N`, `nvidiaN`, a MIG
    /// device UUID, or (AMD's plugin) a PCI address.
    pub device_id: String,
}

/// What the kubelet said last.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSnapshot {
    /// None: not looked for (no socket, and none configured); else whether it answered.
    pub kubelet_up: Option<bool>,
    pub assignments: Vec<Assignment>,
}

/// Shared between the kubelet task and the publisher: replaced only when the answer changed.
pub(crate) type PodState = crate::service::versioned::Versioned<PodSnapshot>;

/// Whether a resource name is one of `patterns` (`nvidia.com/mig-*`: a prefix).
fn is_gpu_resource(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == p,
    })
}

/// Asks the kubelet once, within `deadline`.
pub(crate) async fn list(socket: &Path, deadline: Duration) -> Result<ListPodResourcesResponse, AttributionError> {
    let socket = socket.to_path_buf();
    let call = async move {
        // The URI is not used: the connector dials the socket.
        let endpoint = tonic::transport::Endpoint::from_static("http://kubelet.invalid").connect_timeout(deadline);
        let channel = endpoint
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let socket = socket.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(&socket).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .map_err(AttributionError::KubeletConnect)?;
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_ANSWER_BYTES);
        grpc.ready().await.map_err(AttributionError::KubeletNotReady)?;
        let path = axum::http::uri::PathAndQuery::from_static("/v1.PodResourcesLister/List");
        let codec = tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
        grpc.unary(tonic::Request::new(ListPodResourcesRequest {}), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| AttributionError::KubeletList(Box::new(status)))
    };
    match tokio::time::timeout(deadline, call).await {
        Ok(result) => result,
        Err(_) => Err(AttributionError::KubeletTimeout(deadline)),
    }
}

/// A name from the kubelet, decoded lossily, without control characters, at most
/// [`MAX_NAME`] bytes; `None` (and a skip) for one that is longer.
fn name(bytes: &[u8], skips: &mut Skips) -> Option<String> {
    if bytes.len() > MAX_NAME {
        skips.add(Reason::InvalidValue, format!("a name of {} bytes", bytes.len()));
        return None;
    }
    Some(crate::input::printable(&String::from_utf8_lossy(bytes)))
}

/// The GPU devices of an answer, one per (container, device id), at most
/// [`MAX_HOLDERS_PER_DEVICE`] per device (by the id without a time-slicing `::N`).
pub(crate) fn assignments(
    response: &ListPodResourcesResponse,
    resources: &[String],
    skips: &mut Skips,
) -> Vec<Assignment> {
    let mut out: Vec<Assignment> = Vec::new();
    for pod in &response.pod_resources {
        let (Some(namespace), Some(pod_name)) = (name(&pod.namespace, skips), name(&pod.name, skips)) else {
            continue;
        };
        for container in &pod.containers {
            let Some(container_name) = name(&container.name, skips) else {
                continue;
            };
            for devices in &container.devices {
                if !is_gpu_resource(&String::from_utf8_lossy(&devices.resource_name), resources) {
                    continue;
                }
                for id in &devices.device_ids {
                    let Some(device_id) = name(id, skips) else { continue };
                    out.push(Assignment {
                        namespace: namespace.clone(),
                        pod: pod_name.clone(),
                        container: container_name.clone(),
                        device_id,
                    });
                }
            }
        }
    }
    out.sort();
    out.dedup();
    // Per device (sorted by namespace first: the same holders are kept from one answer to the next).
    let mut per_device: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    out.retain(|a| {
        let base = a.device_id.split("::").next().unwrap_or("").to_string();
        let held = per_device.entry(base).or_default();
        *held += 1;
        if *held > MAX_HOLDERS_PER_DEVICE {
            skips.add(
                Reason::TooMany,
                format!("holders of {} (more than {MAX_HOLDERS_PER_DEVICE})", a.device_id),
            );
            return false;
        }
        true
    });
    out
}

/// Asks the kubelet every `refresh` until `stop`; `settings` gives the socket, the refresh
/// and the resource names at each turn, so a reload applies.
pub(crate) async fn follow(
    state: Arc<PodState>,
    settings: Arc<crate::config::settings::SharedSettings>,
    stop: crate::service::stop::Stop,
) {
    let mut outage = crate::service::logging::Outage::default();
    loop {
        let config: Kubernetes = settings.current().config.kubernetes.clone();
        let socket: PathBuf = config.pod_resources_socket.clone();
        let snapshot = if socket.as_os_str().is_empty() || (config.socket_is_default() && !socket.exists()) {
            // Not on a Kubernetes node (or turned off): nothing to say.
            PodSnapshot::default()
        } else {
            // A refresh shorter than the deadline must not pile calls up.
            let deadline = KUBELET_DEADLINE.min(config.refresh);
            match list(&socket, deadline).await {
                Ok(response) => {
                    outage.recovered(format!("the kubelet at {} answers again", socket.display()));
                    PodSnapshot {
                        kubelet_up: Some(true),
                        assignments: assignments(&response, &config.resources, &mut Skips::new(Input::Kubelet)),
                    }
                }
                Err(e) => {
                    outage.failed(format!(
                        "the kubelet's pod-resources API at {} does not answer ({e}): no pod attribution \
                         until it does",
                        socket.display()
                    ));
                    PodSnapshot {
                        kubelet_up: Some(false),
                        assignments: Vec::new(),
                    }
                }
            }
        };
        state.set_if_changed(snapshot);
        tokio::select! {
            // On the runtime's beat, with the periodic sources.
            _ = tokio::time::sleep_until(
                crate::service::cadence::next_on_the_beat(config.refresh, std::time::Instant::now()).into()
            ) => {}
            _ = stop.stopped() => return,
        }
    }
}

/// How long one List call may take: the kubelet answers in milliseconds when it is well.
const KUBELET_DEADLINE: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_gpu_resources_become_assignments() {
        let response = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: b"trainer-0".to_vec(),
                namespace: b"ml".to_vec(),
                containers: vec![ContainerResources {
                    name: b"main".to_vec(),
                    devices: vec![
                        ContainerDevices {
                            resource_name: b"nvidia.com/gpu".to_vec(),
                            device_ids: vec![b"GPU-a".to_vec(), b"GPU-b::3".to_vec()],
                        },
                        ContainerDevices {
                            resource_name: b"nvidia.com/mig-1g.10gb".to_vec(),
                            device_ids: vec![b"MIG-c".to_vec()],
                        },
                        ContainerDevices {
                            resource_name: b"example.com/nic".to_vec(),
                            device_ids: vec![b"eth9".to_vec()],
                        },
                    ],
                }],
            }],
        };
        let resources: Vec<String> = ["nvidia.com/gpu", "nvidia.com/mig-*", "amd.com/gpu"]
            .map(String::from)
            .to_vec();
        let ids: Vec<String> = assignments(&response, &resources, &mut Skips::new(Input::Kubelet))
            .into_iter()
            .map(|a| a.device_id)
            .collect();
        assert_eq!(ids, ["GPU-a", "GPU-b::3", "MIG-c"]);
    }

    /// 10,000 pods on one GPU: at most MAX_HOLDERS_PER_DEVICE kept, the rest counted; a name
    /// that is not UTF-8 is kept lossily and costs no other pod.
    #[test]
    fn many_holders_are_cut_and_odd_names_kept() {
        let pod = |i: usize, name: Vec<u8>| PodResources {
            name,
            namespace: format!("ns{}", i % 3).into_bytes(),
            containers: vec![ContainerResources {
                name: b"c".to_vec(),
                devices: vec![ContainerDevices {
                    resource_name: b"nvidia.com/gpu".to_vec(),
                    device_ids: vec![format!("GPU-a::{i}").into_bytes(), b"GPU-b".to_vec()],
                }],
            }],
        };
        let mut pods: Vec<PodResources> = (0..10_000).map(|i| pod(i, format!("p{i}").into_bytes())).collect();
        pods.push(pod(10_001, b"bad\xff\nname".to_vec()));
        let response = ListPodResourcesResponse { pod_resources: pods };
        let mut skips = Skips::new(Input::Kubelet);
        let started = std::time::Instant::now();
        let found = assignments(&response, &["nvidia.com/gpu".to_string()], &mut skips);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let on = |id: &str| {
            found
                .iter()
                .filter(|a| a.device_id.split("::").next() == Some(id))
                .count()
        };
        assert_eq!(
            (on("GPU-a"), on("GPU-b")),
            (MAX_HOLDERS_PER_DEVICE, MAX_HOLDERS_PER_DEVICE)
        );
        assert_eq!(
            skips.count(Reason::TooMany),
            2 * (10_001 - MAX_HOLDERS_PER_DEVICE as u64)
        );
        // Decoding the same answer from the wire with the odd name in it works too.
        use prost::Message;
        let odd = ListPodResourcesResponse {
            pod_resources: vec![pod(10_001, b"bad\xff\nname".to_vec()), pod(1, b"p1".to_vec())],
        };
        let decoded = ListPodResourcesResponse::decode(odd.encode_to_vec().as_slice()).unwrap();
        let all = assignments(
            &decoded,
            &["nvidia.com/gpu".to_string()],
            &mut Skips::new(Input::Kubelet),
        );
        assert!(
            all.iter().any(|a| a.pod == "bad\u{fffd}\u{fffd}name"),
            "lossy, control characters replaced"
        );
        assert!(all.iter().any(|a| a.pod == "p1"), "the other pod is kept");
    }
}
