//! What the driver says of the GPU: persistence mode, the vGPU licence, its recovery action.

use super::*;

pub(super) fn persistence_off(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    (r.persistence_mode == Some(false)).then(|| {
        "persistence mode is off: the driver is torn down between jobs"
            .to_string()
            .into()
    })
}

pub(super) fn vgpu_unlicensed(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    (r.vgpu_licensed == Some(false)).then(|| {
        "the vGPU holds no licence: it runs degraded once the grace period ends"
            .to_string()
            .into()
    })
}

pub(super) fn recovery_action(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    use crate::model::RecoveryAction;
    let action = r.recovery_action.filter(|a| *a != RecoveryAction::None)?;
    let (what, severity) = match action {
        RecoveryAction::None => return None,
        RecoveryAction::GpuReset => ("a GPU reset: reset it once its jobs end", None),
        RecoveryAction::DrainAndReset => (
            "its jobs moved off, then a GPU reset; it keeps running what it runs until then",
            None,
        ),
        RecoveryAction::DrainP2p => (
            "its jobs that use peer-to-peer (NVLink) traffic moved off; the action clears by itself after",
            None,
        ),
        RecoveryAction::NodeReboot => (
            "a node reboot: a GPU reset will not do; drain the node and reboot it",
            Some(HealthState::Unhealthy),
        ),
    };
    Some(Hit::said(
        format!(
            "the driver says the GPU needs {what} (recovery action {})",
            action.label()
        ),
        severity,
    ))
}
