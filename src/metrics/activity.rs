//! GPM activity families (Hopper and newer): how busy the GPU's engines, SMs, tensor cores
//! and memory were over the last `poll.gpm_interval` (30 s by default: GPM is computed that
//! often, not every poll), and the bytes per second over PCIe and NVLink. Absent until the
//! second GPM sample after start, and where the GPU has no GPM.

use super::{Family, Kind, Read, dcgm_compat, twin};
use crate::model::DeviceReadings;
use crate::model::activity::Activity;

fn activity(r: &DeviceReadings) -> Option<&Activity> {
    r.activity.as_ref()
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_graphics_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which the graphics or compute engine was active (GPM; dcgm's GR_ENGINE_ACTIVE).",
        labels: &[],
        dcgm: &[twin!(
            per_instance "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "Ratio of time the graphics engine is active.",
            |r| activity(r)?.graphics_active,
            |i| i.activity.as_ref()?.graphics_active
        )],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.graphics_active))),
    },
    Family {
        name: "gpu_sm_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which an SM had at least one warp assigned, averaged over all SMs (GPM; dcgm's SM_ACTIVE).",
        labels: &[],
        dcgm: &[twin!(
            per_instance "DCGM_FI_PROF_SM_ACTIVE",
            "The ratio of cycles an SM has at least 1 warp assigned.",
            |r| activity(r)?.sm_active,
            |i| i.activity.as_ref()?.sm_active
        )],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.sm_active))),
    },
    Family {
        name: "gpu_sm_occupancy_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Resident warps as a fraction of the most an SM can hold, averaged over the SMs and the last poll.gpm_interval (GPM; dcgm's SM_OCCUPANCY).",
        labels: &[],
        dcgm: &[twin!(
            per_instance "DCGM_FI_PROF_SM_OCCUPANCY",
            "The ratio of number of warps resident on an SM.",
            |r| activity(r)?.sm_occupancy,
            |i| i.activity.as_ref()?.sm_occupancy
        )],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.sm_occupancy))),
    },
    Family {
        name: "gpu_tensor_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which any tensor pipe was active (GPM; dcgm's PIPE_TENSOR_ACTIVE).",
        labels: &[],
        dcgm: &[twin!(
            per_instance "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "Ratio of cycles the tensor (HMMA) pipe is active.",
            |r| activity(r)?.tensor_active,
            |i| i.activity.as_ref()?.tensor_active
        )],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.tensor_active))),
    },
    Family {
        name: "gpu_dram_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Device memory bandwidth used over the last poll.gpm_interval, as a fraction of the peak (GPM; dcgm's DRAM_ACTIVE).",
        labels: &[],
        dcgm: &[twin!(
            per_instance "DCGM_FI_PROF_DRAM_ACTIVE",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
            |r| activity(r)?.dram_active,
            |i| i.activity.as_ref()?.dram_active
        )],
        read: Read::Readings(|r, s| s.opt(activity(r).and_then(|a| a.dram_active))),
    },
    Family {
        name: "gpu_pipe_active_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Fraction of the last poll.gpm_interval in which a pipe was active, by pipe: fp64, fp32, fp16, integer, and the tensor pipes hmma, imma, dfma (GPM).",
        labels: &["pipe"],
        dcgm: &[
            twin!(
                "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
                "Ratio of cycles the fp64 pipes are active.",
                |r| dcgm_compat::pipe(r, "fp64")
            ),
            twin!(
                "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
                "Ratio of cycles the fp32 pipes are active.",
                |r| dcgm_compat::pipe(r, "fp32")
            ),
            twin!(
                "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
                "Ratio of cycles the fp16 pipes are active.",
                |r| dcgm_compat::pipe(r, "fp16")
            ),
        ],
        read: Read::Readings(|r, s| s.each(activity(r).map(|a| a.pipes.as_slice()).unwrap_or_default())),
    },
    Family {
        name: "gpu_pcie_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "PCIe traffic over the last poll.gpm_interval, by direction (tx: from the GPU, rx: to it) (GPM).",
        labels: &["direction"],
        dcgm: &[
            twin!(counter "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "PCIe transmit throughput (in KB/s), from GPM's 30 s average (dcgm-exporter's NVML sample is 20 ms).", |r| Some(dcgm_compat::rate(&r.activity.as_ref()?.pcie_bytes_per_second, "tx")? / 1024.0)),
            twin!(counter "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "PCIe receive throughput (in KB/s), from GPM's 30 s average (dcgm-exporter's NVML sample is 20 ms).", |r| Some(dcgm_compat::rate(&r.activity.as_ref()?.pcie_bytes_per_second, "rx")? / 1024.0)),
            twin!(
                "DCGM_FI_PROF_PCIE_TX_BYTES",
                "The rate of data transmitted over the PCIe bus, including both protocol headers and data payloads, in bytes per second.",
                |r| dcgm_compat::rate(&r.activity.as_ref()?.pcie_bytes_per_second, "tx")
            ),
            twin!(
                "DCGM_FI_PROF_PCIE_RX_BYTES",
                "The rate of data received over the PCIe bus, including both protocol headers and data payloads, in bytes per second.",
                |r| dcgm_compat::rate(&r.activity.as_ref()?.pcie_bytes_per_second, "rx")
            ),
        ],
        read: Read::Readings(|r, s| {
            s.each(
                activity(r)
                    .map(|a| a.pcie_bytes_per_second.as_slice())
                    .unwrap_or_default(),
            )
        }),
    },
    Family {
        name: "gpu_nvlink_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "NVLink traffic over all links in the last poll.gpm_interval, by direction (tx, rx) (GPM).",
        labels: &["direction"],
        dcgm: &[
            twin!(counter "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "NVLink bandwidth over all links, transmitted and received (in MB/s), from GPM's 30 s average.", |r| {
                r.nvlinks.as_ref().filter(|l| l.board_links > 0)?;
                let nvlink = &r.activity.as_ref()?.nvlink_bytes_per_second;
                Some((dcgm_compat::rate(nvlink, "tx")? + dcgm_compat::rate(nvlink, "rx")?) / 1e6)
            }),
            twin!(
                "DCGM_FI_PROF_NVLINK_TX_BYTES",
                "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
                |r| dcgm_compat::rate(&r.activity.as_ref()?.nvlink_bytes_per_second, "tx")
            ),
            twin!(
                "DCGM_FI_PROF_NVLINK_RX_BYTES",
                "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
                |r| dcgm_compat::rate(&r.activity.as_ref()?.nvlink_bytes_per_second, "rx")
            ),
        ],
        read: Read::Readings(|r, s| {
            s.each(
                activity(r)
                    .map(|a| a.nvlink_bytes_per_second.as_slice())
                    .unwrap_or_default(),
            )
        }),
    },
];
