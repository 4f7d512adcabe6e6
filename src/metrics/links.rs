//! NVLink and fabric families: links up against links the board has, errors and bytes per GPU
//! (and per link with `nvlink.per_link`), and NVSwitch fabric registration. Boards without
//! NVLink, and GPUs outside a fabric, have none of these series.

use super::{Family, Kind, Read, Samples};
use crate::model::DeviceSnapshot;
use crate::model::links::{FabricState, NvLink};

/// The links of a GPU whose last poll answered.
fn links_of(d: &DeviceSnapshot) -> impl Iterator<Item = &NvLink> {
    d.answered()
        .into_iter()
        .flat_map(|r| r.nvlinks.iter())
        .flat_map(|n| n.links.iter())
}

/// One sample per link and (kind, count) pair that `counts` picks from it.
fn per_link_counts(d: &DeviceSnapshot, s: &mut Samples, counts: fn(&NvLink) -> &[(&'static str, u64)]) {
    for l in links_of(d) {
        let link = l.link.to_string();
        for (kind, count) in counts(l) {
            s.labelled(&[&link, kind], *count as f64);
        }
    }
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_nvlink_links",
        kind: Kind::Gauge,
        unit: "",
        help: "NVLinks the board has, up or not.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.nvlinks.as_ref().map(|n| n.board_links as f64))),
    },
    Family {
        name: "gpu_nvlink_links_up",
        kind: Kind::Gauge,
        unit: "",
        help: "NVLinks that are up; below gpu_nvlink_links means a link is down.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.nvlinks.as_ref().map(|n| n.links_up() as f64))),
    },
    Family {
        name: "gpu_nvlink_speed_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes_per_second",
        help: "What the GPU's NVLinks that are up carry one way at their rate, summed (NVML's per-link speed, nvidia-smi nvlink -s); the bound the all-reduce across the node's GPUs is judged against (docs/probe.md). Absent where the driver does not say.",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| s.opt(r.nvlinks.as_ref().and_then(|n| n.speed_up()))),
    },
    Family {
        name: "gpu_nvlink_errors",
        kind: Kind::Counter,
        unit: "",
        help: "NVLink errors since the driver loaded, summed over the GPU's links, by type: crc_flit and crc_data (corrupted flow-control units and data), replay (retransmissions), recovery (link retraining); what nvidia-smi nvlink -e shows per link.",
        labels: &["type"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for (kind, count) in r.nvlinks.iter().flat_map(|n| n.errors_by_type()) {
                s.labelled(&[kind], count as f64);
            }
        }),
    },
    Family {
        name: "gpu_nvlink_bytes",
        kind: Kind::Counter,
        unit: "bytes",
        help: "User data moved over the GPU's NVLinks since the driver loaded, summed over its links, by direction (tx, rx).",
        labels: &["direction"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for (direction, bytes) in r.nvlinks.iter().flat_map(|n| n.bytes_by_direction()) {
                s.labelled(&[direction], bytes as f64);
            }
        }),
    },
    Family {
        name: "gpu_xgmi_errors",
        kind: Kind::Counter,
        unit: "",
        help: "AMD XGMI (GPU-to-GPU link) errors since the driver loaded, by type (corrected, uncorrected), from the xgmi_wafl RAS block; not in gpu_ecc_errors_total.",
        labels: &["type"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for e in &r.xgmi_errors {
                s.labelled(&[e.error_type.label()], e.count as f64);
            }
        }),
    },
    Family {
        name: "gpu_fabric_state",
        kind: Kind::Gauge,
        unit: "",
        help: "NVLink fabric registration with the fabric manager (NVSwitch systems), one-hot over state: not_started, in_progress, completed.",
        labels: &["state"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            if let Some(fabric) = &r.fabric {
                for &state in FabricState::ALL {
                    s.labelled(&[state.label()], super::one_if(fabric.state == state));
                }
            }
        }),
    },
    Family {
        name: "gpu_nvlink_p2p_ok",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the GPU can reach peer_gpu peer-to-peer over NVLink, 0 when NVML says it cannot (PCIe only, disabled, unsupported); read every poll.topology_interval.",
        labels: &["peer_gpu"],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            for (peer, status) in &r.nvlink_p2p {
                s.labelled(&[&peer.to_string()], super::one_if(*status == 0));
            }
        }),
    },
    Family {
        name: "gpu_fabric_registration_ok",
        kind: Kind::Gauge,
        unit: "",
        help: "Once registration completed: 1 when the fabric manager accepted the GPU, 0 when it failed (the reason is logged and on the status page).",
        labels: &[],
        dcgm: &[],
        read: Read::Readings(|r, s| {
            let done = r.fabric.as_ref().filter(|f| f.state == FabricState::Completed);
            s.flag(done.map(|f| f.error.is_none()))
        }),
    },
    Family {
        name: "gpu_fabric_manager_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when nvidia-fabricmanager runs (its pid file names a live process of root's named nv-fabricmanager, whose executable is named so), 0 when not; a node series, only on nodes whose GPUs report an NVLink fabric and whose PCI bus shows the NVSwitches (GpuFabricManagerDown).",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| s.flag(snapshot.fabric_manager.as_ref().map(|m| m.running))),
    },
];

/// Per-link families: served only with `nvlink.per_link` (eighteen links a GPU multiply the
/// series), chosen when the families are picked, not inside each read.
pub(crate) const PER_LINK_FAMILIES: &[Family] = &[
    Family {
        name: "gpu_nvlink_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the NVLink is up (active), 0 when down, per link (nvlink.per_link).",
        labels: &["link"],
        dcgm: &[],
        read: Read::Device(|_, d, s| {
            for l in links_of(d) {
                s.labelled_opt(&[&l.link.to_string()], l.up.map(super::one_if));
            }
        }),
    },
    Family {
        name: "gpu_nvlink_link_errors",
        kind: Kind::Counter,
        unit: "",
        help: "NVLink errors since the driver loaded, per link and type (nvlink.per_link).",
        labels: &["link", "type"],
        dcgm: &[],
        read: Read::Device(|_, d, s| per_link_counts(d, s, |l| &l.errors)),
    },
    Family {
        name: "gpu_nvlink_link_bytes",
        kind: Kind::Counter,
        unit: "bytes",
        help: "User data moved over the NVLink since the driver loaded, per link and direction (nvlink.per_link).",
        labels: &["link", "direction"],
        dcgm: &[],
        read: Read::Device(|_, d, s| per_link_counts(d, s, |l| &l.bytes)),
    },
];
