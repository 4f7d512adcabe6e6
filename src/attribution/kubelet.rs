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

use crate::config::Kubernetes;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// `v1.ListPodResourcesRequest`: empty.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `v1.ListPodResourcesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `v1.PodResources`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `v1.ContainerResources` (devices only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// `v1.ContainerDevices` (without topology).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

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

/// Shared between the kubelet task and the publisher.
#[derive(Default)]
pub struct PodState {
    current: Mutex<Arc<PodSnapshot>>,
    changes: AtomicU64,
}

impl PodState {
    pub fn snapshot(&self) -> Arc<PodSnapshot> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// A number that changes whenever the snapshot does.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    fn set(&self, next: PodSnapshot) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if **current != next {
            *current = Arc::new(next);
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether a resource name is one of `patterns` (`nvidia.com/mig-*`: a prefix).
fn is_gpu_resource(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == p,
    })
}

/// Asks the kubelet once, within `deadline`.
pub async fn list(socket: &Path, deadline: Duration) -> Result<ListPodResourcesResponse, String> {
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
            .map_err(|e| format!("cannot connect: {e}"))?;
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.map_err(|e| format!("not ready: {e}"))?;
        let path = axum::http::uri::PathAndQuery::from_static("/v1.PodResourcesLister/List");
        let codec = tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
        grpc.unary(tonic::Request::new(ListPodResourcesRequest {}), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| format!("List failed: {}: {}", status.code(), status.message()))
    };
    match tokio::time::timeout(deadline, call).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {deadline:?}")),
    }
}

/// The GPU devices of an answer, one per (container, device id).
pub fn assignments(response: &ListPodResourcesResponse, resources: &[String]) -> Vec<Assignment> {
    let mut out: Vec<Assignment> = response
        .pod_resources
        .iter()
        .flat_map(|pod| {
            pod.containers.iter().flat_map(move |container| {
                container
                    .devices
                    .iter()
                    .filter(|d| is_gpu_resource(&d.resource_name, resources))
                    .flat_map(move |d| {
                        d.device_ids.iter().map(move |id| Assignment {
                            namespace: pod.namespace.clone(),
                            pod: pod.name.clone(),
                            container: container.name.clone(),
                            device_id: id.clone(),
                        })
                    })
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Asks the kubelet every `refresh` until the runtime stops; `settings` gives the socket,
/// the refresh and the resource names at each turn, so a reload applies.
pub async fn follow(state: Arc<PodState>, settings: Arc<crate::settings::SharedSettings>) {
    let mut last_error: Option<String> = None;
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
                    if last_error.take().is_some() {
                        log::info!("the kubelet at {} answers again", socket.display());
                    }
                    PodSnapshot {
                        kubelet_up: Some(true),
                        assignments: assignments(&response, &config.resources),
                    }
                }
                Err(e) => {
                    if last_error.is_none() {
                        log::warn!(
                            "the kubelet's pod-resources API at {} does not answer ({e}): no pod attribution \
                             until it does",
                            socket.display()
                        );
                    }
                    last_error = Some(e);
                    PodSnapshot {
                        kubelet_up: Some(false),
                        assignments: Vec::new(),
                    }
                }
            }
        };
        state.set(snapshot);
        tokio::time::sleep(config.refresh).await;
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
                name: "trainer-0".into(),
                namespace: "ml".into(),
                containers: vec![ContainerResources {
                    name: "main".into(),
                    devices: vec![
                        ContainerDevices {
                            resource_name: "nvidia.com/gpu".into(),
                            device_ids: vec!["GPU-a".into(), "GPU-b::3".into()],
                        },
                        ContainerDevices {
                            resource_name: "nvidia.com/mig-1g.10gb".into(),
                            device_ids: vec!["MIG-c".into()],
                        },
                        ContainerDevices {
                            resource_name: "example.com/nic".into(),
                            device_ids: vec!["eth9".into()],
                        },
                    ],
                }],
            }],
        };
        let resources: Vec<String> = ["nvidia.com/gpu", "nvidia.com/mig-*", "amd.com/gpu"]
            .map(String::from)
            .to_vec();
        let ids: Vec<String> = assignments(&response, &resources)
            .into_iter()
            .map(|a| a.device_id)
            .collect();
        assert_eq!(ids, ["GPU-a", "GPU-b::3", "MIG-c"]);
    }
}
