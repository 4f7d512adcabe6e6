//! The journal's rows about the node's network ports (kind `nic`): each RDMA adapter as first
//! seen in this run and whenever its firmware or board changes, and each change of a port's
//! findings (raised, cleared) with its state, rate and error counters at that moment. A row's
//! GPU column holds `nic:<device>` (`nic:mlx5_0`) and the adapter's PCI address, so
//! `gpuwarden report --nic mlx5_0` and `gpuwarden events --gpu nic:mlx5_0` find them.

use crate::journal::event::{Event, GpuRef, Kind};
use crate::model::Snapshot;
use crate::model::health::RuleId;
use crate::model::nic::{NicDevice, NicScan};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The key an adapter's rows carry in the GPU column (the same as its clear's).
pub(crate) use crate::health::clear_nic::key;

/// What the journal last wrote of the ports, in this run.
#[derive(Debug, Default)]
pub(crate) struct NicRows {
    /// The scan last looked at: the same `Arc`, nothing of the adapters to compare.
    last_scan: Option<Arc<NicScan>>,
    /// By adapter: (firmware, board) as last written.
    adapters: BTreeMap<String, (Option<String>, Option<String>)>,
    /// By port (`mlx5_0/1`): the reasons of its findings as last written.
    findings: BTreeMap<String, BTreeSet<RuleId>>,
}

impl NicRows {
    /// The rows this snapshot calls for (none while nothing changed).
    pub(crate) fn look(&mut self, snapshot: &Snapshot, now: f64) -> Vec<Event> {
        let mut rows = Vec::new();
        if !self.last_scan.as_ref().is_some_and(|s| Arc::ptr_eq(s, &snapshot.nics)) {
            for device in &snapshot.nics.devices {
                let known = (device.fw_ver.clone(), device.board_id.clone());
                let before = self.adapters.insert(device.name.clone(), known.clone());
                if before.as_ref() != Some(&known) {
                    rows.push(adapter_row(device, before.as_ref(), now));
                }
            }
            self.last_scan = Some(snapshot.nics.clone());
        }
        let mut now_found: BTreeMap<String, BTreeSet<RuleId>> = BTreeMap::new();
        for f in snapshot.node_findings.iter().filter(|f| f.reason.is_network()) {
            if let (Some(subject), Some(rule)) = (&f.subject, f.reason.rule()) {
                now_found.entry(subject.clone()).or_default().insert(rule);
            }
        }
        let subjects: BTreeSet<String> = now_found.keys().chain(self.findings.keys()).cloned().collect();
        for subject in subjects {
            let before = self.findings.get(&subject).cloned().unwrap_or_default();
            let after = now_found.get(&subject).cloned().unwrap_or_default();
            if before != after {
                rows.push(finding_row(snapshot, &subject, &before, &after, now));
            }
        }
        self.findings = now_found;
        rows
    }
}

fn gpu_ref(device: &NicDevice) -> GpuRef {
    GpuRef {
        uuid: key(&device.name),
        serial: None,
        pci_bus_id: device.pci_bus_id.clone().unwrap_or_default(),
        index: None,
    }
}

fn adapter_row(device: &NicDevice, before: Option<&(Option<String>, Option<String>)>, now: f64) -> Event {
    let word = |w: &Option<String>| w.clone().unwrap_or_else(|| "unknown".into());
    let ports: Vec<String> = device
        .ports
        .iter()
        .map(|p| {
            format!(
                "port {} {} {}{}",
                p.port,
                p.link_layer,
                p.states(),
                p.rate_gbps.map(|r| format!(" at {r} Gb/s")).unwrap_or_default()
            )
        })
        .collect();
    let what = match before {
        None => "seen".to_string(),
        Some((fw, board)) => format!("changed from firmware {}, board {}", word(fw), word(board)),
    };
    Event::new(
        now,
        Kind::Nic,
        Some(gpu_ref(device)),
        format!(
            "{} {what}: {} firmware {}, board {}, at {}; {}",
            device.name,
            word(&device.hca_type),
            word(&device.fw_ver),
            word(&device.board_id),
            device.pci_bus_id.as_deref().unwrap_or("an unknown PCI address"),
            ports.join("; ")
        ),
        json!({
            "device": device.name,
            "hca_type": device.hca_type,
            "fw_ver": device.fw_ver,
            "board_id": device.board_id,
            "pci_bus_id": device.pci_bus_id,
            "near_gpus": device.near_gpus,
            "pcie": {"width": device.pcie.width, "max_width": device.pcie.max_width,
                     "speed_gts": device.pcie.speed_gts, "max_speed_gts": device.pcie.max_speed_gts},
        }),
    )
}

fn finding_row(
    snapshot: &Snapshot,
    subject: &str,
    before: &BTreeSet<RuleId>,
    after: &BTreeSet<RuleId>,
    now: f64,
) -> Event {
    let (device_name, port_number) = subject.split_once('/').unwrap_or((subject, ""));
    let found = snapshot
        .nics
        .ports()
        .find(|(d, p)| d.name == device_name && p.port.to_string() == port_number);
    let raised: Vec<RuleId> = after.difference(before).copied().collect();
    let cleared: Vec<&str> = before.difference(after).map(|r| r.label()).collect();
    let findings: Vec<serde_json::Value> = snapshot
        .node_findings
        .iter()
        .filter(|f| f.subject.as_deref() == Some(subject))
        .map(|f| json!({"reason": f.reason, "severity": f.severity.finding_label(), "message": f.message}))
        .collect();
    let mut summary = format!("{subject}:");
    if !raised.is_empty() {
        let messages: Vec<String> = snapshot
            .node_findings
            .iter()
            .filter(|f| f.subject.as_deref() == Some(subject) && f.reason.rule().is_some_and(|r| raised.contains(&r)))
            .map(|f| format!("{} ({})", f.reason, f.message))
            .collect();
        summary.push_str(&format!(" raised {}", messages.join("; ")));
    }
    if !cleared.is_empty() {
        summary.push_str(&format!(
            "{} cleared {}",
            if raised.is_empty() { "" } else { ";" },
            cleared.join(", ")
        ));
    }
    let (gpu, state) = match found {
        Some((device, port)) => (
            gpu_ref(device),
            json!({
                "state": port.states(),
                "rate_gbps": port.rate_gbps,
                "counters": port.counters.iter().map(|(n, v)| (n.to_string(), *v)).collect::<BTreeMap<_, _>>(),
                "flaps": port.trend.flaps,
            }),
        ),
        None => (
            GpuRef {
                uuid: key(device_name),
                ..Default::default()
            },
            json!(null),
        ),
    };
    Event::new(
        now,
        Kind::Nic,
        Some(gpu),
        summary,
        json!({
            "device": device_name,
            "port": port_number,
            "raised": raised,
            "cleared": cleared,
            "findings": findings,
            "port_state": state,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::{Finding, HealthState};
    use crate::model::nic::NicPort;

    fn snapshot(down: bool) -> Snapshot {
        let scan = NicScan {
            devices: vec![NicDevice {
                name: "mlx5_0".into(),
                fw_ver: Some("28.39.1002".into()),
                pci_bus_id: Some("0000:1a:00.0".into()),
                ports: vec![NicPort {
                    port: 1,
                    link_layer: "infiniband".into(),
                    state: Some(if down { (1, "DOWN".into()) } else { (4, "ACTIVE".into()) }),
                    counters: vec![(crate::model::nic::PortCounter::LinkDowned, 2)],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        Snapshot {
            nics: Arc::new(scan),
            node_findings: if down {
                vec![Finding {
                    reason: RuleId::NicPortDown.into(),
                    severity: HealthState::Unhealthy,
                    message: "mlx5_0 port 1: the port is DOWN/?".into(),
                    subject: Some("mlx5_0/1".into()),
                }]
            } else {
                Vec::new()
            },
            ..Default::default()
        }
    }

    #[test]
    fn an_adapter_once_and_each_change_of_a_ports_findings_once() {
        let mut rows = NicRows::default();
        let up = snapshot(false);
        let first = rows.look(&up, 1.0);
        assert_eq!(first.len(), 1);
        assert!(
            first[0].summary.starts_with("mlx5_0 seen: unknown firmware 28.39.1002"),
            "{}",
            first[0].summary
        );
        assert_eq!(first[0].gpu.as_ref().unwrap().uuid, "nic:mlx5_0");
        assert!(rows.look(&up, 2.0).is_empty(), "nothing changed");
        let down = snapshot(true);
        let raised = rows.look(&down, 3.0);
        assert_eq!(raised.len(), 1, "the same adapter is not written again: {raised:?}");
        assert!(
            raised[0].summary.starts_with("mlx5_0/1: raised nic_port_down"),
            "{}",
            raised[0].summary
        );
        assert_eq!(raised[0].details["port_state"]["counters"]["link_downed"], 2);
        assert!(rows.look(&down, 4.0).is_empty());
        let cleared = rows.look(&snapshot(false), 5.0);
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].summary, "mlx5_0/1: cleared nic_port_down");
    }
}
