//! dcgm-exporter's names for the same readings (`compat.dcgm_exporter: true`, off by default):
//! `DCGM_FI_*` families with dcgm-exporter's labels and units, beside gpuwarden's own, so
//! Grafana dashboard 12239 and alert rules written for dcgm-exporter work unchanged.
//! docs/metrics.md has the mapping, and what has no equivalent.
//!
//! dcgm-exporter declares some of these as counters but names them without `_total`; they
//! are served as gauges here so the names are exactly its names (`rate()` works on either).
//! NVIDIA GPUs only; one series per GPU, except the profiling (GPM) fields of a GPU in MIG
//! mode, which have one series per GPU instance with `GPU_I_ID` and `GPU_I_PROFILE` set, as
//! dcgm-exporter serves them.

use super::{Family, Kind, Read, Samples};
use crate::model::activity::Activity;
use crate::model::{DeviceReadings, DeviceSnapshot, EccScope, EccType, Snapshot, Vendor};

/// dcgm-exporter's labels, in order.
const LABELS: &[&str] = &[
    "gpu",
    "UUID",
    "device",
    "modelName",
    "Hostname",
    "pci_bus_id",
    "DCGM_FI_DRIVER_VERSION",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "namespace",
    "pod",
    "container",
];

type Value = fn(&DeviceReadings, &Snapshot, &DeviceSnapshot) -> Option<f64>;

/// The NVIDIA GPUs that answered their last poll, with their readings.
fn answering(snapshot: &Snapshot) -> impl Iterator<Item = (&DeviceSnapshot, &DeviceReadings)> {
    snapshot
        .devices
        .iter()
        .filter(|d| d.identity.vendor == Vendor::Nvidia)
        .filter_map(|d| Some((d, d.answered()?)))
}

/// A sample with dcgm-exporter's labels: the GPU's, the GPU instance's where `instance` is
/// set (id, profile), and the first pod holding the GPU or that instance, where the kubelet
/// says (dcgm-exporter labels with one pod too).
fn sample(snapshot: &Snapshot, s: &mut Samples, d: &DeviceSnapshot, instance: Option<(u32, &str)>, v: f64) {
    let id = &d.identity;
    let pod = snapshot
        .pods
        .get(&id.uuid)
        .and_then(|p| p.iter().find(|h| h.gpu_instance == instance.map(|(gi, _)| gi)));
    s.labelled(
        &[
            &id.index.to_string(),
            &id.uuid,
            &format!("nvidia{}", id.index),
            &id.name,
            &snapshot.hostname,
            &nvml_bus_id(&id.pci_bus_id),
            &id.driver_version,
            &instance.map(|(gi, _)| gi.to_string()).unwrap_or_default(),
            instance.map(|(_, profile)| profile).unwrap_or(""),
            pod.map(|p| p.namespace.as_str()).unwrap_or(""),
            pod.map(|p| p.pod.as_str()).unwrap_or(""),
            pod.map(|p| p.container.as_str()).unwrap_or(""),
        ],
        v,
    );
}

/// One sample per NVIDIA GPU that answered.
fn per_gpu(snapshot: &Snapshot, s: &mut Samples, value: Value) {
    for (d, r) in answering(snapshot) {
        if let Some(v) = value(r, snapshot, d) {
            sample(snapshot, s, d, None, v);
        }
    }
}

/// A profiling (GPM) field: one sample per GPU, or per GPU instance of a GPU in MIG mode.
fn per_gpu_or_instance(snapshot: &Snapshot, s: &mut Samples, value: fn(&Activity) -> Option<f64>) {
    for (d, r) in answering(snapshot) {
        match r.mig.as_ref().filter(|m| m.enabled) {
            Some(mig) => {
                for i in mig.gpu_instances() {
                    if let Some(v) = i.activity.as_ref().and_then(value) {
                        sample(snapshot, s, d, Some((i.gpu_instance, &i.profile)), v);
                    }
                }
            }
            None => {
                if let Some(v) = r.activity.as_ref().and_then(value) {
                    sample(snapshot, s, d, None, v);
                }
            }
        }
    }
}

/// `0000:19:00.0` -> `00000000:19:00.0`, NVML's form, which dcgm-exporter shows.
fn nvml_bus_id(bus: &str) -> String {
    match bus.split_once(':') {
        Some((domain, rest)) if domain.len() == 4 => format!("0000{}:{}", domain, rest).to_ascii_uppercase(),
        _ => bus.to_ascii_uppercase(),
    }
}

const MIB: f64 = 1024.0 * 1024.0;

macro_rules! dcgm_prof {
    ($name:literal, $help:literal, $value:expr) => {
        Family {
            name: $name,
            kind: Kind::Gauge,
            unit: "",
            help: $help,
            labels: LABELS,
            read: Read::Node(|snapshot, s| per_gpu_or_instance(snapshot, s, $value)),
        }
    };
}

macro_rules! dcgm {
    ($name:literal, $help:literal, $value:expr) => {
        Family {
            name: $name,
            kind: Kind::Gauge,
            unit: "",
            help: $help,
            labels: LABELS,
            read: Read::Node(|snapshot, s| per_gpu(snapshot, s, $value)),
        }
    };
}

pub const FAMILIES: &[Family] = &[
    dcgm!("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", |r, _, _| r
        .clock("sm")
        .map(|hz| hz / 1e6)),
    dcgm!(
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        |r, _, _| r.clock("memory").map(|hz| hz / 1e6)
    ),
    dcgm!("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |r, _, _| r
        .temperature("gpu")),
    dcgm!("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", |r, _, _| r
        .temperature("memory")),
    dcgm!("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |r, _, _| r.power_watts),
    dcgm!(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "Enforced power limit (in W).",
        |r, _, _| r.power_limit_watts
    ),
    dcgm!(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ); a counter, served as a gauge.",
        |r, _, _| r.energy_joules.map(|j| (j * 1000.0).round())
    ),
    dcgm!(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries; a counter, served as a gauge.",
        |r, _, _| r.pcie.replay_errors.map(|n| n as f64)
    ),
    dcgm!("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |r, _, _| r
        .utilization_ratio
        .map(|u| u * 100.0)),
    dcgm!("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", |r, _, _| r
        .memory_copy_utilization_ratio
        .map(|u| u * 100.0)),
    dcgm!("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", |r, _, _| r
        .encoder_utilization_ratio
        .map(|u| u * 100.0)),
    dcgm!("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", |r, _, _| r
        .decoder_utilization_ratio
        .map(|u| u * 100.0)),
    dcgm!(
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        |_, snapshot, d| {
            snapshot
                .xid
                .for_bus(&d.identity.pci_bus_id)
                .iter()
                .max_by_key(|x| x.last_seen)
                .map(|x| x.xid as f64)
        }
    ),
    dcgm!("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", |r, _, _| r
        .memory_free_bytes
        .map(|b| b as f64 / MIB)),
    dcgm!("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", |r, _, _| r
        .memory_used_bytes
        .map(|b| b as f64 / MIB)),
    dcgm!(
        "DCGM_FI_DEV_FB_RESERVED",
        "Framebuffer memory reserved (in MiB).",
        |r, _, _| r.memory_reserved_bytes.map(|b| b as f64 / MIB)
    ),
    dcgm!(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        |r, _, _| r.ecc_count(EccType::Corrected, EccScope::Volatile).map(|n| n as f64)
    ),
    dcgm!(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        |r, _, _| r.ecc_count(EccType::Uncorrected, EccScope::Volatile).map(|n| n as f64)
    ),
    dcgm!(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "Total number of single-bit persistent ECC errors.",
        |r, _, _| r.ecc_count(EccType::Corrected, EccScope::Aggregate).map(|n| n as f64)
    ),
    dcgm!(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "Total number of double-bit persistent ECC errors.",
        |r, _, _| r.ecc_count(EccType::Uncorrected, EccScope::Aggregate).map(|n| n as f64)
    ),
    dcgm!(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors.",
        |r, _, _| r.remapped_rows.correctable.map(|n| n as f64)
    ),
    dcgm!(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors.",
        |r, _, _| r.remapped_rows.uncorrectable.map(|n| n as f64)
    ),
    dcgm!(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed.",
        |r, _, _| r.remapped_rows.failed.map(|f| f as u8 as f64)
    ),
    dcgm_prof!(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        |a| a.graphics_active
    ),
    dcgm_prof!(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        |a| a.sm_active
    ),
    dcgm_prof!(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        |a| a.sm_occupancy
    ),
    dcgm_prof!(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        |a| a.tensor_active
    ),
    dcgm_prof!(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        |a| a.dram_active
    ),
    dcgm!(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "Ratio of cycles the fp64 pipes are active.",
        |r, _, _| pipe(r, "fp64")
    ),
    dcgm!(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "Ratio of cycles the fp32 pipes are active.",
        |r, _, _| pipe(r, "fp32")
    ),
    dcgm!(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "Ratio of cycles the fp16 pipes are active.",
        |r, _, _| pipe(r, "fp16")
    ),
    dcgm!(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus, including both protocol headers and data payloads, in bytes per second.",
        |r, _, _| rate(&r.activity.as_ref()?.pcie_bytes_per_second, "tx")
    ),
    dcgm!(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus, including both protocol headers and data payloads, in bytes per second.",
        |r, _, _| rate(&r.activity.as_ref()?.pcie_bytes_per_second, "rx")
    ),
    dcgm!(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
        |r, _, _| rate(&r.activity.as_ref()?.nvlink_bytes_per_second, "tx")
    ),
    dcgm!(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
        |r, _, _| rate(&r.activity.as_ref()?.nvlink_bytes_per_second, "rx")
    ),
];

fn pipe(r: &DeviceReadings, name: &str) -> Option<f64> {
    r.activity
        .as_ref()?
        .pipes
        .iter()
        .find(|(p, _)| *p == name)
        .map(|(_, v)| *v)
}

fn rate(pairs: &[(&'static str, f64)], direction: &str) -> Option<f64> {
    pairs.iter().find(|(d, _)| *d == direction).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bus_ids_in_nvml_form() {
        assert_eq!(super::nvml_bus_id("0000:3b:00.0"), "00000000:3B:00.0");
    }
}
