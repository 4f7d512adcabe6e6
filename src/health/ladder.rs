//! The remediation ladder's next step for a GPU that needs one (`remediation.mode: advise`;
//! docs/health.md, "Remediation"): reboot the node, reset the GPU, or a person's service. A
//! GPU needs one when it is unhealthy, when its driver asks for a reset or a reboot (recovery
//! action), or when a row remap waits for a reset.
//! From the driver's own recovery action (NVML field 230) first, then the XID catalog's
//! resolution for the fatal XIDs seen, then the findings. Pure: the GPU, its findings and its
//! XIDs in, the step out.

use crate::model::health::{Finding, HealthState, NextStep};
use crate::model::xid::{Severity, XidCount};
use crate::model::{DeviceSnapshot, RecoveryAction};

/// The next step for `device`, when it needs one; `reset_command` has `{pci_bus_id}` for the
/// GPU's address.
pub fn next_step(
    device: &DeviceSnapshot,
    findings: &[Finding],
    xids: &[XidCount],
    reset_command: &str,
) -> Option<NextStep> {
    let unhealthy: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == HealthState::Unhealthy)
        .collect();
    let action = device.readings.as_ref().and_then(|r| r.recovery_action);
    let driver_asks = matches!(
        action,
        Some(RecoveryAction::GpuReset | RecoveryAction::DrainAndReset | RecoveryAction::NodeReboot)
    );
    let remap_pending = findings.iter().any(|f| f.reason == "row_remap_pending");
    if unhealthy.is_empty() && !driver_asks && !remap_pending {
        return None;
    }
    if !unhealthy.is_empty() && unhealthy.iter().all(|f| f.reason == "validating") {
        // A repaired GPU waiting for its probe: that is its step already.
        return None;
    }
    let reset = reset_command.replace("{pci_bus_id}", &device.identity.pci_bus_id);
    from_evidence(action, &unhealthy, xids, remap_pending, reset)
}

/// The step itself, from the strongest evidence: the driver's recovery action, a lost GPU, the
/// catalog's resolution of a fatal XID, the fabric, a pending remap, else a person's service.
fn from_evidence(
    action: Option<RecoveryAction>,
    unhealthy: &[&Finding],
    xids: &[XidCount],
    remap_pending: bool,
    reset_command: String,
) -> Option<NextStep> {
    let reset = || Some(reset_command.clone());
    let step = |step: &str, why: String, command: Option<String>| {
        Some(NextStep {
            step: step.to_string(),
            why,
            command,
        })
    };
    match action {
        Some(RecoveryAction::NodeReboot) => {
            return step(
                "reboot_required",
                "the driver asks for a node reboot (recovery action)".into(),
                None,
            );
        }
        Some(RecoveryAction::GpuReset | RecoveryAction::DrainAndReset) => {
            return step(
                "gpu_reset",
                "the driver asks for a GPU reset (recovery action)".into(),
                reset(),
            );
        }
        _ => {}
    }
    if unhealthy.iter().any(|f| f.reason == "gpu_lost") {
        return step("reboot_required", "the GPU is lost (fallen off the bus)".into(), None);
    }
    let fatal: Vec<(u32, &str)> = xids
        .iter()
        .filter(|x| x.severity == Severity::Fatal)
        .filter_map(|x| crate::xid::catalog::lookup(x.xid).map(|e| (x.xid, e.nvidia_action)))
        .collect();
    if let Some((code, bucket)) = fatal.iter().find(|(_, b)| matches!(*b, "RESTART_BM" | "RESTART_VM")) {
        return step(
            "reboot_required",
            format!("Xid {code}: NVIDIA's catalog says {bucket}"),
            None,
        );
    }
    if let Some((code, bucket)) = fatal.first() {
        return step(
            "gpu_reset",
            format!("Xid {code}: NVIDIA's catalog says {bucket}"),
            reset(),
        );
    }
    if unhealthy.iter().any(|f| f.reason == "fabric_not_ready") {
        return step("gpu_reset", "the GPU has not joined the NVLink fabric".into(), reset());
    }
    if remap_pending {
        return step("gpu_reset", "a memory row remap waits for a GPU reset".into(), reset());
    }
    let first = unhealthy.first()?;
    step(
        "service",
        format!(
            "{}: no reset or reboot clears it; a person must look (repair, replace)",
            first.reason
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceReadings, Vendor};
    use std::time::SystemTime;

    fn gpu(action: Option<RecoveryAction>) -> DeviceSnapshot {
        DeviceSnapshot::for_test(
            0,
            Vendor::Nvidia,
            "0000:19:00.0",
            DeviceReadings {
                recovery_action: action,
                ..Default::default()
            },
        )
    }

    fn finding(reason: &'static str, severity: HealthState) -> Finding {
        Finding {
            reason,
            severity,
            message: String::new(),
            subject: None,
        }
    }

    fn xid(code: u32) -> XidCount {
        XidCount {
            xid: code,
            severity: crate::xid::catalog::severity(code),
            count: 1,
            last_seen: SystemTime::now(),
            recent: 1,
        }
    }

    const RESET: &str = "nvidia-smi --gpu-reset -i {pci_bus_id}";

    #[test]
    fn the_drivers_recovery_action_comes_first_then_the_catalog_then_the_finding() {
        let unhealthy = [finding("xid_fatal", HealthState::Unhealthy)];
        let reboot = next_step(&gpu(Some(RecoveryAction::NodeReboot)), &unhealthy, &[xid(48)], RESET).unwrap();
        assert_eq!(reboot.step, "reboot_required", "the driver's word beats the catalog's");
        let reset = next_step(&gpu(Some(RecoveryAction::GpuReset)), &unhealthy, &[xid(79)], RESET).unwrap();
        assert_eq!(reset.step, "gpu_reset");
        assert_eq!(reset.command.as_deref(), Some("nvidia-smi --gpu-reset -i 0000:19:00.0"));
        // No recovery action: Xid 79 (RESTART_BM) asks for a reboot, Xid 48 for a reset.
        assert_eq!(
            next_step(&gpu(None), &unhealthy, &[xid(79)], RESET).unwrap().step,
            "reboot_required"
        );
        let dbe = next_step(&gpu(None), &unhealthy, &[xid(48)], RESET).unwrap();
        assert_eq!(dbe.step, "gpu_reset");
        assert!(dbe.why.starts_with("Xid 48: NVIDIA's catalog says"), "{}", dbe.why);
        let lost = [finding("gpu_lost", HealthState::Unhealthy)];
        assert_eq!(
            next_step(&gpu(None), &lost, &[], RESET).unwrap().step,
            "reboot_required"
        );
        let remap = [finding("row_remap_failed", HealthState::Unhealthy)];
        let service = next_step(&gpu(None), &remap, &[], RESET).unwrap();
        assert_eq!((service.step.as_str(), service.command), ("service", None));
    }

    #[test]
    fn a_degraded_gpu_gets_one_only_when_its_driver_asks_or_a_remap_waits() {
        let degraded = [finding("thermal_slowdown", HealthState::Degraded)];
        assert_eq!(
            next_step(&gpu(None), &degraded, &[], RESET),
            None,
            "a hot GPU needs cooling, not a reset"
        );
        let asked = next_step(&gpu(Some(RecoveryAction::GpuReset)), &degraded, &[], RESET).unwrap();
        assert_eq!(asked.step, "gpu_reset");
        assert_eq!(
            next_step(&gpu(Some(RecoveryAction::DrainP2p)), &degraded, &[], RESET),
            None
        );
        let remap = [finding("row_remap_pending", HealthState::Degraded)];
        let pending = next_step(&gpu(None), &remap, &[], RESET).unwrap();
        assert_eq!(pending.why, "a memory row remap waits for a GPU reset");
        let validating = [finding("validating", HealthState::Unhealthy)];
        assert_eq!(
            next_step(&gpu(None), &validating, &[xid(48)], RESET),
            None,
            "its probe is its step"
        );
    }
}
