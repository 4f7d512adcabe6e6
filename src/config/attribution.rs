//! Who uses each GPU: `kubernetes` (the kubelet's pod-resources socket), `processes` (per
//! process series) and `hpc_jobs` (the job mapping directory). Reloadable: each source reads
//! the running settings at its next period.

use super::*;

/// Pod attribution from the kubelet's pod-resources API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Kubernetes {
    /// The kubelet's pod-resources socket; the default path is used when it exists (so a node
    /// outside Kubernetes says nothing), a path set here is always asked; "" turns it off.
    pub pod_resources_socket: PathBuf,
    /// How often the kubelet is asked.
    #[serde(deserialize_with = "kubernetes_refresh")]
    pub refresh: Duration,
    /// Resource names that are GPUs; `prefix*` matches by prefix.
    pub resources: Vec<String>,
    /// How to reach the API server (config/kubernetes.rs).
    pub api: KubeApi,
    /// The verdict on the node's own Node object: its condition, Events and taint.
    pub node: KubeNode,
    /// The verdict on each GPU's DRA device: a `DeviceTaintRule`.
    pub devices: KubeDevices,
}

/// Where the kubelet serves its pod-resources API.
pub const KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

impl Default for Kubernetes {
    fn default() -> Self {
        Kubernetes {
            pod_resources_socket: PathBuf::from(KUBELET_SOCKET),
            refresh: Duration::from_secs(15),
            resources: ["nvidia.com/gpu", "nvidia.com/mig-*", "amd.com/gpu"]
                .map(String::from)
                .to_vec(),
            api: KubeApi::default(),
            node: KubeNode::default(),
            devices: KubeDevices::default(),
        }
    }
}

impl Kubernetes {
    /// True when the socket is the default one (asked only where it exists).
    pub fn socket_is_default(&self) -> bool {
        self.pod_resources_socket == Path::new(KUBELET_SOCKET)
    }
}

/// The compute processes on each GPU.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Processes {
    /// Series per process (pid, name, container id) beside the count; off by default: pids
    /// come and go, and each is a series.
    pub per_process: bool,
    /// At most this many processes per GPU get series of their own, the largest users of
    /// device memory first.
    pub max_per_gpu: u32,
    /// Where /proc is: a container that mounts the host's /proc elsewhere sets it.
    pub proc_root: PathBuf,
}

impl Default for Processes {
    fn default() -> Self {
        Processes {
            per_process: false,
            max_per_gpu: 16,
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// Batch jobs per GPU from a job mapping directory (dcgm-exporter's layout).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HpcJobs {
    /// One file per GPU (its index or UUID), one job id per line; empty: off.
    pub mapping_dir: PathBuf,
}
