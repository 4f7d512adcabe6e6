//! The NVSwitch rule (docs/health.md, "Node findings"): a fatal SXID in the kernel log makes
//! the node unhealthy, with a finding per switch that names the GPUs on its fabric (those
//! that report an NVLink fabric; every NVIDIA GPU where none does). Held for the rest of
//! the daemon's run: the switch needs a reset, which a reboot gives.

use super::table::{Check, Rule};
use crate::model::Snapshot;
use crate::model::Vendor;
use crate::model::health::{Finding, HealthState};

pub const SXID_FATAL: Rule = Rule {
    reason: "nvswitch_sxid_fatal",
    severity: HealthState::Unhealthy,
    worse_when: None,
    when: "the kernel log has a fatal NVSwitch error (`nvidia-nvswitchN: SXid (...): CODE, Fatal, ...`, `gpu_nvswitch_sxid_errors_total{severity=\"fatal\"}`, alert `NvswitchSxidFatal`); one finding per switch, for the rest of the daemon's run",
    action: "drain the node; reset the GPUs and switches or reboot (`gpuwarden xid explain CODE`)",
    ends: false,
    dcgm: None,
    check: Check::Device(|_| None),
};

/// One finding per switch with a fatal SXID.
pub fn findings(snapshot: &Snapshot) -> Vec<Finding> {
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
                reason: SXID_FATAL.reason,
                severity: SXID_FATAL.severity,
                message: format!(
                    "fatal NVSwitch error on nvidia-nvswitch{} ({address}): {}; the NVLink traffic of GPU(s) {} \
                     goes through this fabric: drain the node, then reset the GPUs and switches or reboot",
                    codes[0].switch,
                    listed.join("; "),
                    if gpus.is_empty() {
                        "none seen".to_string()
                    } else {
                        gpus.join(", ")
                    }
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
