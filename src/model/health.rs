//! The health verdict of one GPU and the findings behind it. The rules live in
//! src/health.rs; the verdict is computed once per snapshot and carried in it, so /metrics,
//! the status page, `check` and systemd's STATUS line all show the same thing.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    #[default]
    Ok,
    Degraded,
    Unhealthy,
}

impl HealthState {
    pub const ALL: [HealthState; 3] = [HealthState::Ok, HealthState::Degraded, HealthState::Unhealthy];

    pub fn label(self) -> &'static str {
        match self {
            HealthState::Ok => "ok",
            HealthState::Degraded => "degraded",
            HealthState::Unhealthy => "unhealthy",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable machine name, used as the `reason` label of `gpu_health_reason`.
    pub reason: &'static str,
    pub severity: HealthState,
    /// What was seen and what to do, for a person.
    pub message: String,
}

/// One GPU's verdict and its findings, as computed for the snapshot that carries it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceHealth {
    pub state: HealthState,
    pub findings: Vec<Finding>,
}

/// The per-GPU rules' reasons, in the rules' order (health::rules::RULES; a test there holds
/// the two equal): the keys `health.rules` of the config accepts.
pub const RULE_REASONS: [&str; 15] = [
    "xid_fatal",
    "xid_critical",
    "gpu_lost",
    "not_responding",
    "thermal_slowdown",
    "temperature_near_slowdown",
    "hw_slowdown",
    "pcie_width_degraded",
    "persistence_off",
    "ecc_uncorrectable",
    "row_remap_pending",
    "row_remap_failed",
    "nvlink_down",
    "fabric_not_ready",
    "probe_failed",
];
