//! MIG families: the mode, and each MIG device (GPU instance and compute instance) with its
//! profile and memory. GPUs without MIG have none of these series.

use super::{Family, Kind, Read, Samples};
use crate::model::DeviceReadings;
use crate::model::activity::Activity;
use crate::model::mig::MigDevice;

/// One sample per MIG device, labelled with its GPU and compute instance.
fn per_device(r: &DeviceReadings, s: &mut Samples, value: fn(&MigDevice) -> Option<f64>) {
    for i in r.mig.iter().flat_map(|m| &m.instances) {
        let compute = i.compute_instance.map(|c| c.to_string()).unwrap_or_default();
        s.labelled_opt(&[&i.gpu_instance.to_string(), &compute], value(i));
    }
}

/// One sample per GPU instance (its compute instances share the reading) with GPM activity.
fn per_instance(r: &DeviceReadings, s: &mut Samples, value: fn(&Activity) -> Option<f64>) {
    for i in r.mig.iter().flat_map(|m| m.gpu_instances()) {
        s.labelled_opt(&[&i.gpu_instance.to_string()], i.activity.as_ref().and_then(value));
    }
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_mig_mode",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when MIG mode is on, 0 when off, on GPUs that have MIG.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.flag(r.mig.as_ref().map(|m| m.enabled))),
    },
    Family {
        name: "gpu_mig_mode_pending",
        kind: Kind::Gauge,
        unit: "",
        help: "The MIG mode the GPU takes at its next reset; differs from gpu_mig_mode while a change waits for the reset.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.flag(r.mig.as_ref().map(|m| m.pending))),
    },
    Family {
        name: "gpu_mig_instance_info",
        kind: Kind::Gauge,
        unit: "",
        help: "1 per MIG device: its GPU instance, compute instance, profile (1g.18gb, ...) and MIG UUID (what the kubelet and CUDA_VISIBLE_DEVICES name).",
        labels: &["gpu_instance", "compute_instance", "profile", "mig_uuid"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for i in r.mig.iter().flat_map(|m| &m.instances) {
                let compute = i.compute_instance.map(|c| c.to_string()).unwrap_or_default();
                s.labelled(&[&i.gpu_instance.to_string(), &compute, &i.profile, &i.uuid], 1.0);
            }
        }),
    },
    Family {
        name: "gpu_mig_memory_used_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "Device memory in use in a MIG device (read every poll.slow_interval).",
        labels: &["gpu_instance", "compute_instance"],
        dcgm: &[],
        read: Read::Readings(|r, s| per_device(r, s, |i| i.memory_used_bytes.map(|b| b as f64))),
    },
    Family {
        name: "gpu_mig_memory_total_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "Device memory of a MIG device.",
        labels: &["gpu_instance", "compute_instance"],
        dcgm: &[],
        read: Read::Readings(|r, s| per_device(r, s, |i| i.memory_total_bytes.map(|b| b as f64))),
    },
    Family {
        name: "gpu_mig_graphics_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Per MIG GPU instance: fraction of the last poll.gpm_interval its graphics or compute engine was active (GPM).",
        labels: &["gpu_instance"],
        dcgm: &[],
        read: Read::Readings(|r, s| per_instance(r, s, |a| a.graphics_active)),
    },
    Family {
        name: "gpu_mig_sm_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Per MIG GPU instance: fraction of time its SMs had a warp assigned (GPM).",
        labels: &["gpu_instance"],
        dcgm: &[],
        read: Read::Readings(|r, s| per_instance(r, s, |a| a.sm_active)),
    },
    Family {
        name: "gpu_mig_tensor_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Per MIG GPU instance: fraction of time a tensor pipe was active (GPM).",
        labels: &["gpu_instance"],
        dcgm: &[],
        read: Read::Readings(|r, s| per_instance(r, s, |a| a.tensor_active)),
    },
    Family {
        name: "gpu_mig_dram_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Per MIG GPU instance: device memory bandwidth used, as a fraction of the instance's peak (GPM).",
        labels: &["gpu_instance"],
        dcgm: &[],
        read: Read::Readings(|r, s| per_instance(r, s, |a| a.dram_active)),
    },
];
