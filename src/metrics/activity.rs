//! GPM activity families (Hopper and newer): how busy the GPU's engines, SMs, tensor cores
//! and memory were over the last `poll.gpm_interval` (30 s by default: GPM is computed that
//! often, not every poll), and the bytes per second over PCIe and NVLink. Absent until the
//! second GPM sample after start, and where the GPU has no GPM.

use super::{Family, Kind, Read};
use crate::model::DeviceReadings;
use crate::model::activity::Activity;

fn activity(r: &DeviceReadings) -> Option<&Activity> {
    r.activity.as_ref()
}

pub const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_graphics_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which the graphics or compute engine was active (GPM; dcgm's GR_ENGINE_ACTIVE).",
        labels: &[],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.graphics_active))),
    },
    Family {
        name: "gpu_sm_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which an SM had at least one warp assigned, averaged over all SMs (GPM; dcgm's SM_ACTIVE).",
        labels: &[],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.sm_active))),
    },
    Family {
        name: "gpu_sm_occupancy_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Resident warps as a fraction of the most an SM can hold, averaged over the SMs and the last poll.gpm_interval (GPM; dcgm's SM_OCCUPANCY).",
        labels: &[],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.sm_occupancy))),
    },
    Family {
        name: "gpu_tensor_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which any tensor pipe was active (GPM; dcgm's PIPE_TENSOR_ACTIVE).",
        labels: &[],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.tensor_active))),
    },
    Family {
        name: "gpu_dram_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Device memory bandwidth used over the last poll.gpm_interval, as a fraction of the peak (GPM; dcgm's DRAM_ACTIVE).",
        labels: &[],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.dram_active))),
    },
    Family {
        name: "gpu_pipe_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which a pipe was active, by pipe: fp64, fp32, fp16, integer, and the tensor pipes hmma, imma, dfma (GPM).",
        labels: &["pipe"],
        read: Read::Readings(|r, s| {
            for (pipe, ratio) in activity(r).map(|a| a.pipes.as_slice()).unwrap_or_default() {
                s.labelled(&[pipe], *ratio);
            }
        }),
    },
    Family {
        name: "gpu_pcie_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "PCIe traffic over the last poll.gpm_interval, by direction (tx: from the GPU, rx: to it) (GPM).",
        labels: &["direction"],
        read: Read::Readings(|r, s| {
            for (direction, rate) in activity(r)
                .map(|a| a.pcie_bytes_per_second.as_slice())
                .unwrap_or_default()
            {
                s.labelled(&[direction], *rate);
            }
        }),
    },
    Family {
        name: "gpu_nvlink_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "NVLink traffic over all links in the last poll.gpm_interval, by direction (tx, rx) (GPM).",
        labels: &["direction"],
        read: Read::Readings(|r, s| {
            for (direction, rate) in activity(r)
                .map(|a| a.nvlink_bytes_per_second.as_slice())
                .unwrap_or_default()
            {
                s.labelled(&[direction], *rate);
            }
        }),
    },
];
