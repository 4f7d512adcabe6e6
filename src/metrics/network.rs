//! The node's InfiniBand and RoCE ports (`nic_*`), and the node's own findings
//! (`gpu_node_health_reason`). Node series: they carry no gpu/uuid/vendor; each port's carry
//! `device` (`mlx5_0`), `port` and `link_layer` (`infiniband`, `ethernet`). Descriptive labels
//! (firmware, board, PCI address, the interface) live on `nic_info` only. A node without RDMA
//! hardware has none of them, and a counter the adapter does not keep adds no series.

use super::{Family, Kind, Read, Samples, one_if};
use crate::model::Snapshot;
use crate::model::nic::{NicDevice, NicPort};

/// One sample per port: `value` of each (device, port), with the port's labels first.
fn per_port(snapshot: &Snapshot, s: &mut Samples, mut value: impl FnMut(&NicDevice, &NicPort, &mut PortSamples)) {
    for (device, port) in snapshot.nics.ports() {
        let mut out = PortSamples {
            labels: [device.name.clone(), port.port.to_string(), port.link_layer.clone()],
            samples: s,
        };
        value(device, port, &mut out);
    }
}

/// A port's samples: its three labels, then the family's own.
struct PortSamples<'a, 'b> {
    labels: [String; 3],
    samples: &'a mut Samples<'b>,
}

impl PortSamples<'_, '_> {
    fn put(&mut self, extra: &[&str], value: Option<f64>) {
        let mut values: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        values.extend_from_slice(extra);
        self.samples.labelled_opt(&values, value);
    }
}

const PORT: &[&str] = &["device", "port", "link_layer"];

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "nic_info",
        kind: Kind::Gauge,
        unit: "",
        help: "1 per RDMA port (InfiniBand or RoCE), with its adapter's firmware, board id, HCA type and PCI address, the GPUs behind the same PCIe switch (near_gpus, PCI addresses joined by ','), and a RoCE port's network interface.",
        labels: &[
            "device",
            "port",
            "link_layer",
            "fw_ver",
            "board_id",
            "hca_type",
            "pci_bus_id",
            "near_gpus",
            "netdev",
        ],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |d, p, out| {
                let word = |w: &Option<String>| w.clone().unwrap_or_default();
                let netdev = p.netdev.as_ref().map(|n| n.name.clone()).unwrap_or_default();
                let extra = [
                    word(&d.fw_ver),
                    word(&d.board_id),
                    word(&d.hca_type),
                    word(&d.pci_bus_id),
                    d.near_gpus.join(","),
                    netdev,
                ];
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                out.put(&extra, Some(1.0));
            })
        }),
    },
    Family {
        name: "nic_port_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the port is ACTIVE and LinkUp, 0 when not (NicPortDown); absent where neither state is readable.",
        labels: PORT,
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_port(snapshot, s, |_, p, out| out.put(&[], p.up().map(one_if)))),
    },
    Family {
        name: "nic_port_state",
        kind: Kind::Gauge,
        unit: "",
        help: "The port's logical state as the IBTA numbers it: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.",
        labels: PORT,
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| {
                out.put(&[], p.state.as_ref().map(|(c, _)| f64::from(*c)))
            })
        }),
    },
    Family {
        name: "nic_port_phys_state",
        kind: Kind::Gauge,
        unit: "",
        help: "The port's physical state as the IBTA numbers it: 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest.",
        labels: PORT,
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| {
                out.put(&[], p.phys_state.as_ref().map(|(c, _)| f64::from(*c)))
            })
        }),
    },
    Family {
        name: "nic_port_speed_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "The port's negotiated rate in bytes per second (50e9 for 4X NDR, 400 Gb/s), as node_exporter's node_network_speed_bytes; below its siblings' means a lane down or the wrong cable (nic_rate_low).",
        labels: PORT,
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| {
                out.put(&[], p.rate_gbps.map(|g| g * 1e9 / 8.0))
            })
        }),
    },
    Family {
        name: "nic_port_errors",
        kind: Kind::Counter,
        unit: "",
        help: "The port's error counters as the adapter keeps them (counters/ and hw_counters/; docs/metrics.md says what each counts). They start again from 0 when the adapter resets.",
        labels: &["device", "port", "link_layer", "counter"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| {
                for (name, value) in &p.counters {
                    out.put(&[name.label()], Some(*value as f64));
                }
            })
        }),
    },
    Family {
        name: "nic_port_flaps",
        kind: Kind::Gauge,
        unit: "",
        help: "Times the port went down within network.flap_window (10 min), from its link_downed counter; network.flaps (3) of them is flapping (nic_port_flapping). Absent in a one-shot check, which has no history.",
        labels: PORT,
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| out.put(&[], p.trend.flaps.map(|n| n as f64)))
        }),
    },
    Family {
        name: "nic_netdev_up",
        kind: Kind::Gauge,
        unit: "",
        help: "A RoCE port's network interface: 1 when its operstate is up, 0 when not.",
        labels: &["device", "port", "link_layer", "netdev"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| {
                if let Some(n) = &p.netdev {
                    out.put(&[&n.name], n.operstate.as_ref().map(|o| one_if(o.is_up())));
                }
            })
        }),
    },
    Family {
        name: "nic_netdev_speed_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "A RoCE port's interface speed in bytes per second (as node_network_speed_bytes); absent while its link is down.",
        labels: &["device", "port", "link_layer", "netdev"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| {
                if let Some(n) = &p.netdev {
                    out.put(&[&n.name], n.speed_mbps.map(|m| m as f64 * 1e6 / 8.0));
                }
            })
        }),
    },
    Family {
        name: "nic_netdev_carrier_changes",
        kind: Kind::Counter,
        unit: "",
        help: "A RoCE port's interface: carrier changes since it was created (each down and up is two).",
        labels: &["device", "port", "link_layer", "netdev"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            per_port(snapshot, s, |_, p, out| {
                if let Some(n) = &p.netdev {
                    out.put(&[&n.name], n.carrier_changes.map(|c| c as f64));
                }
            })
        }),
    },
    Family {
        name: "nic_pcie_link_width_lanes",
        kind: Kind::Gauge,
        unit: "",
        help: "The RDMA adapter's own PCIe link width; below nic_pcie_link_width_max_lanes means it trained narrow (nic_pcie_narrowed).",
        labels: &["device"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for d in &snapshot.nics.devices {
                s.labelled_opt(&[&d.name], d.pcie.width.map(f64::from));
            }
        }),
    },
    Family {
        name: "nic_pcie_link_width_max_lanes",
        kind: Kind::Gauge,
        unit: "",
        help: "The widest PCIe link the RDMA adapter and its slot can train to.",
        labels: &["device"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for d in &snapshot.nics.devices {
                s.labelled_opt(&[&d.name], d.pcie.max_width.map(f64::from));
            }
        }),
    },
    Family {
        name: "nic_pcie_link_speed_transfers_per_second",
        kind: Kind::Gauge,
        unit: "transfers_per_second",
        help: "The RDMA adapter's PCIe link speed per lane (32e9 for PCIe 5.0), and (max) the fastest it supports.",
        labels: &["device", "limit"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for d in &snapshot.nics.devices {
                s.labelled_opt(&[&d.name, "current"], d.pcie.speed_gts.map(|g| g * 1e9));
                s.labelled_opt(&[&d.name, "max"], d.pcie.max_speed_gts.map(|g| g * 1e9));
            }
        }),
    },
    Family {
        name: "gpu_node_health_reason",
        kind: Kind::Gauge,
        unit: "",
        help: "1 for each of the node's own findings (not one GPU's): a GPU missing from the backends, a network port down, slow, flapping or erring; subject names the port (mlx5_0/1) or the PCI address, severity is degraded or unhealthy. See docs/health.md.",
        labels: &["reason", "subject", "severity"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for f in &snapshot.node_findings {
                s.labelled(
                    &[
                        f.reason.label(),
                        f.subject.as_deref().unwrap_or(""),
                        f.severity.finding_label(),
                    ],
                    1.0,
                );
            }
        }),
    },
];

#[cfg(test)]
mod tests {
    use crate::metrics::{Selection, exposition::render_openmetrics};
    use crate::model::Snapshot;
    use std::sync::Arc;

    fn rendered(root: &std::path::Path) -> String {
        let places = crate::input::infiniband::gpu_places(root);
        let mut snapshot = Snapshot {
            nics: Arc::new(crate::input::infiniband::read_nics(root, &places)),
            ..Default::default()
        };
        crate::health::evaluate(&mut snapshot);
        render_openmetrics(Arc::new(snapshot), Selection::default())
    }

    #[test]
    fn a_roce_node_shows_its_ports_interfaces_and_counters_and_nothing_it_lacks() {
        let (_dir, root) = crate::input::infiniband::fixture("roce-cx7");
        let text = rendered(&root);
        let port = r#"device="mlx5_0",port="1",link_layer="ethernet""#;
        for line in [
            format!("nic_port_up{{{port}}} 1"),
            format!("nic_port_state{{{port}}} 4"),
            format!("nic_port_phys_state{{{port}}} 5"),
            format!("nic_port_speed_bytes{{{port}}} 25000000000.0"),
            format!(r#"nic_port_errors_total{{{port},counter="roce_slow_restart"}} 0"#),
            format!(r#"nic_netdev_up{{{port},netdev="ens1f0np0"}} 1"#),
            format!(r#"nic_netdev_speed_bytes{{{port},netdev="ens1f0np0"}} 25000000000.0"#),
            format!(r#"nic_netdev_carrier_changes_total{{{port},netdev="ens1f0np0"}} 2"#),
            r#"nic_pcie_link_width_lanes{device="mlx5_0"} 16"#.to_string(),
            r#"nic_pcie_link_speed_transfers_per_second{device="mlx5_0",limit="max"} 32000000000.0"#.to_string(),
        ] {
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
        assert!(text.contains(r#"fw_ver="28.39.1002",board_id="MT_0000000834",hca_type="MT4129",pci_bus_id="0000:a1:00.0",near_gpus="",netdev="ens1f0np0"} 1"#));
        // No flaps before a second read; healthy ports make no node finding.
        assert!(!text.contains("nic_port_flaps{"));
        assert!(!text.contains("gpu_node_health_reason{"));
    }

    #[test]
    fn a_down_port_is_a_node_finding_with_its_subject() {
        let (_dir, root) = crate::input::infiniband::fixture("ndr-ib");
        let port = std::fs::canonicalize(root.join("sys/class/infiniband/mlx5_2"))
            .unwrap()
            .join("ports/1");
        std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
        std::fs::write(port.join("phys_state"), "2: Polling\n").unwrap();
        let text = rendered(&root);
        assert!(text.contains(r#"nic_port_up{device="mlx5_2",port="1",link_layer="infiniband"} 0"#));
        assert!(text.contains(r#"near_gpus="0000:3b:00.0""#), "{text}");
        assert!(
            text.contains(
                r#"gpu_node_health_reason{reason="nic_port_down",subject="mlx5_2/1",severity="unhealthy"} 1"#
            )
        );
    }

    #[test]
    fn a_node_without_rdma_hardware_has_no_nic_series() {
        let root = tempfile::tempdir().unwrap();
        assert!(!rendered(root.path()).contains("nic_"));
    }
}
