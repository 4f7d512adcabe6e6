//! The NVSwitch rule (docs/health.md, "Node findings"): a fatal SXID in the kernel log makes
//! the node unhealthy, with a finding per switch that names the GPUs on its fabric (those
//! that report an NVLink fabric; every NVIDIA GPU where none does). Held for the rest of
//! the daemon's run: the switch needs a reset, which a reboot gives.

use super::table::{Check, Rule, StepAdvice};
use crate::model::Snapshot;
use crate::model::Vendor;
use crate::model::health::RuleId;
use crate::model::health::Step;
use crate::model::health::{Finding, HealthState};

pub(crate) const SXID_FATAL: Rule = Rule {
    reason: RuleId::NvswitchSxidFatal,
    severity: HealthState::Unhealthy,
    worse_when: None,
    when: "the kernel log has a fatal NVSwitch error (`nvidia-nvswitchN: SXid (...): CODE, Fatal, ...`, `gpu_nvswitch_sxid_errors_total{severity=\"fatal\"}`, alert `NvswitchSxidFatal`); one finding per switch, for the rest of the daemon's run",
    action: "drain the node, then reboot it (or reset the GPUs and switches); `gpuwarden xid explain CODE` names the switch unit",
    ends: false,
    dcgm: None,
    step: StepAdvice::Take(Step::RebootRequired),
    source: "NVIDIA's NVSwitch error handling: a fatal SXid needs the switch reset, which a reboot gives",
    check: Check::Device(|_| None),
};

pub(crate) const FABRIC_MANAGER_DOWN: Rule = Rule {
    reason: RuleId::FabricManagerDown,
    severity: HealthState::Degraded,
    worse_when: Some("a GPU has not joined the fabric"),
    when: "on a node whose GPUs report an NVLink fabric and whose PCI bus shows the NVSwitches (an HGX board's host; a VM given some of its GPUs is served by the host's), nvidia-fabricmanager is not running (its pid file, `fabric_manager.pid_file`, must name a process of root's whose name and executable are `fabric_manager.process`; `gpu_fabric_manager_up`, alert `GpuFabricManagerDown`)",
    action: "start or check nvidia-fabricmanager (`systemctl status nvidia-fabricmanager`, its log)",
    ends: false,
    dcgm: None,
    step: StepAdvice::None,
    source: "NVIDIA's Fabric Manager user guide",
    check: Check::Device(|_| None),
};

/// The node's finding when nvidia-fabricmanager is checked and not running: unhealthy when a
/// GPU has not joined the fabric (nothing will bring it in), degraded when all have (running
/// jobs go on; a GPU reset or a new partition will not work).
pub(crate) fn fabric_manager_down(snapshot: &Snapshot) -> Option<Finding> {
    let manager = snapshot.fabric_manager.as_ref().filter(|m| !m.running)?;
    let waiting: Vec<String> = snapshot
        .devices
        .iter()
        .filter(|d| {
            d.readings
                .as_ref()
                .and_then(|r| r.fabric.as_ref())
                .is_some_and(|f| f.degraded())
        })
        .map(|d| d.identity.index.to_string())
        .collect();
    let (severity, effect) = if waiting.is_empty() {
        (
            HealthState::Degraded,
            "the GPUs joined the fabric before it stopped and run; a GPU reset or a new partition will not work"
                .to_string(),
        )
    } else {
        (
            HealthState::Unhealthy,
            format!(
                "GPU(s) {} have not joined the NVLink fabric and will not until it runs",
                waiting.join(", ")
            ),
        )
    };
    Some(Finding {
        reason: FABRIC_MANAGER_DOWN.reason.into(),
        severity,
        message: FABRIC_MANAGER_DOWN.message(
            &format!("nvidia-fabricmanager is not running ({}): {effect}", manager.detail).into(),
            None,
        ),
        subject: None,
    })
}

/// One finding per switch with a fatal SXID.
pub(crate) fn findings(snapshot: &Snapshot) -> Vec<Finding> {
    let mut by_switch: std::collections::BTreeMap<&str, Vec<&crate::model::xid::SxidCount>> = Default::default();
    for x in snapshot.xid.sxids.iter().filter(|x| x.fatal) {
        by_switch.entry(x.pci_bus_id.as_str()).or_default().push(x);
    }
    if by_switch.is_empty() {
        return Vec::new();
    }
    let nvidia = snapshot.devices.iter().filter(|d| d.identity.vendor == Vendor::Nvidia);
    let on_fabric: Vec<String> = nvidia
        .clone()
        .filter(|d| d.readings.as_ref().is_some_and(|r| r.fabric.is_some()))
        .map(|d| d.identity.index.to_string())
        .collect();
    let gpus = if on_fabric.is_empty() {
        nvidia.map(|d| d.identity.index.to_string()).collect()
    } else {
        on_fabric
    };
    by_switch
        .into_iter()
        .map(|(address, codes)| {
            let listed: Vec<String> = codes
                .iter()
                .map(|x| {
                    let unit = crate::xid::sxid::block(x.sxid).map_or(String::new(), |b| format!(" ({})", b.unit));
                    let text = if x.message.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", x.message)
                    };
                    format!("SXid {}{unit} x{}{text}", x.sxid, x.count)
                })
                .collect();
            Finding {
                reason: SXID_FATAL.reason.into(),
                severity: SXID_FATAL.severity,
                message: SXID_FATAL.message(
                    &format!(
                        "fatal NVSwitch error on nvidia-nvswitch{} ({address}): {}; the NVLink traffic of GPU(s) {} \
                         goes through this fabric",
                        codes[0].switch,
                        listed.join("; "),
                        if gpus.is_empty() {
                            "none seen".to_string()
                        } else {
                            gpus.join(", ")
                        }
                    )
                    .into(),
                    None,
                ),
                subject: Some(format!("nvswitch{}", codes[0].switch)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::xid::SxidCount;

    #[test]
    fn a_stopped_fabric_manager_is_degraded_and_unhealthy_while_a_gpu_waits_for_it() {
        use crate::model::links::{Fabric, FabricManager, FabricState};
        let gpu = |i: u32, state: FabricState| {
            let readings = crate::model::DeviceReadings {
                fabric: Some(Fabric {
                    state,
                    error: None,
                    clique_id: 0,
                }),
                ..Default::default()
            };
            crate::model::DeviceSnapshot::for_test(i, Vendor::Nvidia, &format!("0000:1{i}:00.0"), readings)
        };
        let mut snapshot = Snapshot {
            devices: vec![gpu(0, FabricState::Completed), gpu(1, FabricState::Completed)],
            ..Default::default()
        };
        assert!(fabric_manager_down(&snapshot).is_none(), "not checked");
        snapshot.fabric_manager = Some(FabricManager {
            running: true,
            pid: Some(1),
            detail: "pid 1 (nv-fabricmanager)".into(),
        });
        assert!(fabric_manager_down(&snapshot).is_none());
        snapshot.fabric_manager = Some(FabricManager {
            running: false,
            pid: None,
            detail: "no pid file at /run/x.pid".into(),
        });
        let f = fabric_manager_down(&snapshot).unwrap();
        assert_eq!(f.severity, HealthState::Degraded);
        assert!(
            f.message
                .starts_with("nvidia-fabricmanager is not running (no pid file at /run/x.pid)")
        );
        snapshot.devices[1] = gpu(1, FabricState::InProgress);
        let f = fabric_manager_down(&snapshot).unwrap();
        assert_eq!(f.severity, HealthState::Unhealthy);
        assert!(f.message.contains("GPU(s) 1 have not joined"), "{}", f.message);
    }

    fn sxid(switch: u32, code: u32, fatal: bool) -> SxidCount {
        SxidCount {
            switch,
            pci_bus_id: format!("0000:0{}:00.0", switch + 5),
            sxid: code,
            fatal,
            count: 1,
            last_seen: std::time::SystemTime::now(),
            message: "Link 30 LTSSM Fault Up".into(),
        }
    }

    #[test]
    fn a_fatal_sxid_is_one_unhealthy_finding_per_switch_naming_the_gpus_and_a_non_fatal_none() {
        let mut snapshot = Snapshot::default();
        for i in 0..2 {
            snapshot.devices.push(crate::model::DeviceSnapshot::for_test(
                i,
                Vendor::Nvidia,
                &format!("0000:1{i}:00.0"),
                Default::default(),
            ));
        }
        snapshot.xid.sxids = vec![sxid(0, 12028, false)];
        assert!(findings(&snapshot).is_empty());
        snapshot.xid.sxids = vec![sxid(0, 12028, false), sxid(1, 20034, true), sxid(1, 24007, true)];
        let found = findings(&snapshot);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].subject.as_deref(), Some("nvswitch1"));
        assert_eq!(found[0].severity, HealthState::Unhealthy);
        assert!(
            found[0]
                .message
                .contains("SXid 20034 (DLPL) x1: Link 30 LTSSM Fault Up; SXid 24007"),
            "{}",
            found[0].message
        );
        assert!(found[0].message.contains("GPU(s) 0, 1"), "{}", found[0].message);
    }
}
