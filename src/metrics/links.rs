//! NVLink and fabric families: each link's state, errors and bytes, links up against links
//! the board has, and NVSwitch fabric registration. Boards without NVLink, and GPUs outside a
//! fabric, have none of these series.

use super::{Family, Kind, Read};
use crate::model::links::FABRIC_STATES;

pub const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_nvlink_links",
        kind: Kind::Gauge,
        unit: "",
        help: "NVLinks the board has, up or not.",
        labels: &[],
        read: Read::Readings(|r, s| s.opt(r.nvlinks.as_ref().map(|n| n.board_links as f64))),
    },
    Family {
        name: "gpu_nvlink_links_up",
        kind: Kind::Gauge,
        unit: "",
        help: "NVLinks that are up; below gpu_nvlink_links means a link is down.",
        labels: &[],
        read: Read::Readings(|r, s| s.opt(r.nvlinks.as_ref().map(|n| n.links_up() as f64))),
    },
    Family {
        name: "gpu_nvlink_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the NVLink is up (active), 0 when down, per link.",
        labels: &["link"],
        read: Read::Readings(|r, s| {
            for l in r.nvlinks.iter().flat_map(|n| &n.links) {
                s.labelled_opt(&[&l.link.to_string()], l.up.map(|up| if up { 1.0 } else { 0.0 }));
            }
        }),
    },
    Family {
        name: "gpu_nvlink_errors",
        kind: Kind::Counter,
        unit: "",
        help: "NVLink errors since the driver loaded, per link and type: crc_flit and crc_data (corrupted flow-control units and data), replay (retransmissions), recovery (link retraining); what nvidia-smi nvlink -e shows.",
        labels: &["link", "type"],
        read: Read::Readings(|r, s| {
            for l in r.nvlinks.iter().flat_map(|n| &n.links) {
                let link = l.link.to_string();
                for (kind, count) in &l.errors {
                    s.labelled(&[&link, kind], *count as f64);
                }
            }
        }),
    },
    Family {
        name: "gpu_nvlink_bytes",
        kind: Kind::Counter,
        unit: "bytes",
        help: "User data moved over the NVLink since the driver loaded, per link and direction (tx, rx).",
        labels: &["link", "direction"],
        read: Read::Readings(|r, s| {
            for l in r.nvlinks.iter().flat_map(|n| &n.links) {
                let link = l.link.to_string();
                for (direction, bytes) in &l.bytes {
                    s.labelled(&[&link, direction], *bytes as f64);
                }
            }
        }),
    },
    Family {
        name: "gpu_fabric_state",
        kind: Kind::Gauge,
        unit: "",
        help: "NVLink fabric registration with the fabric manager (NVSwitch systems), one-hot over state: not_started, in_progress, completed.",
        labels: &["state"],
        read: Read::Readings(|r, s| {
            if let Some(fabric) = &r.fabric {
                for state in FABRIC_STATES {
                    s.labelled(&[state], if fabric.state == state { 1.0 } else { 0.0 });
                }
            }
        }),
    },
    Family {
        name: "gpu_fabric_registration_ok",
        kind: Kind::Gauge,
        unit: "",
        help: "Once registration completed: 1 when the fabric manager accepted the GPU, 0 when it failed (the reason is logged and on the status page).",
        labels: &[],
        read: Read::Readings(|r, s| {
            let done = r.fabric.as_ref().filter(|f| f.state == "completed");
            s.flag(done.map(|f| f.error.is_none()))
        }),
    },
];
