//! Attribution families: which job (or, later, pod) uses each GPU, as info series to join on,
//! never as labels copied onto every family (that is what makes series churn).

use super::{Family, Kind, Read};
use crate::model::GpuProcess;

/// One per-process sample, labelled pid, process, container_id.
fn process_sample(s: &mut super::Samples, p: &GpuProcess, value: Option<f64>) {
    s.labelled_opt(
        &[
            &p.pid.to_string(),
            p.name.as_deref().unwrap_or(""),
            p.container_id.as_deref().unwrap_or(""),
        ],
        value,
    );
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_processes",
        kind: Kind::Gauge,
        unit: "",
        help: "Compute processes (CUDA contexts) on the GPU.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.processes.as_ref().map(|p| p.len() as f64))),
    },
    Family {
        name: "gpu_process_memory_used_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "Device memory a compute process uses, per process (processes.per_process; at most processes.max_per_gpu per GPU, the largest first); process and container_id empty where /proc does not say.",
        labels: &["pid", "process", "container_id"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for p in r.processes.iter().flatten().filter(|p| p.listed) {
                process_sample(s, p, p.used_memory_bytes.map(|b| b as f64));
            }
        }),
    },
    Family {
        name: "gpu_process_sm_utilization_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.slow_interval (10 s) in which a compute process's kernels ran on the SMs, per process (NVML's per-process samples; the driver lists only processes that did something, so the others read 0); same processes and labels as gpu_process_memory_used_bytes.",
        labels: &["pid", "process", "container_id"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for p in r.processes.iter().flatten().filter(|p| p.listed) {
                process_sample(s, p, p.sm_utilization_ratio);
            }
        }),
    },
    Family {
        name: "gpu_process_memory_utilization_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.slow_interval (10 s) in which a compute process read or wrote device memory, per process; as gpu_process_sm_utilization_ratio.",
        labels: &["pid", "process", "container_id"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for p in r.processes.iter().flatten().filter(|p| p.listed) {
                process_sample(s, p, p.memory_utilization_ratio);
            }
        }),
    },
    Family {
        name: "gpu_job_info",
        kind: Kind::Gauge,
        unit: "",
        help: "1 for each batch job running on the GPU, from the job mapping directory (hpc_jobs.mapping_dir); join on uuid.",
        // Not `job`: Prometheus' own target label would push it aside as `exported_job`.
        labels: &["hpc_job"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            for job in snapshot.jobs.get(&d.identity.uuid).into_iter().flatten() {
                s.labelled(&[job], 1.0);
            }
        }),
    },
    Family {
        name: "gpu_pod_info",
        kind: Kind::Gauge,
        unit: "",
        help: "1 for each container holding the GPU, from the kubelet's pod-resources API; gpu_instance is the MIG GPU instance it holds (empty for a whole GPU); join on uuid.",
        labels: &["namespace", "pod", "container", "gpu_instance"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            for h in snapshot.pods.get(&d.identity.uuid).into_iter().flatten() {
                let instance = h.gpu_instance.map(|i| i.to_string()).unwrap_or_default();
                s.labelled(&[&h.namespace, &h.pod, &h.container, &instance], 1.0);
            }
        }),
    },
    Family {
        name: "gpuwarden_kubelet_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the kubelet's pod-resources API answered its last call, 0 when not; absent where it is not asked.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| s.flag(snapshot.kubelet_up)),
    },
];
