//! Findings a person should act on, and the health verdict they add up to.
//!
//! [`evaluate`] runs the rules once per snapshot, when it is put together, and stores each
//! GPU's verdict in it; `gpuwarden check` prints the findings, /metrics exports the verdict
//! as `gpu_health` and each finding as `gpu_health_reason`, the status page and systemd's
//! STATUS line count them. docs/health.md lists the rules.

use crate::clock_events::{HW_POWER_REASONS, THERMAL_REASONS};

/// A hardware power slowdown keeps the GPU degraded this long after it was last seen, so
/// one that comes and goes between scrapes is not missed, and frequent ones stay visible.
const HW_SLOWDOWN_WINDOW: Duration = Duration::from_secs(600);
pub use crate::model::health::{DeviceHealth, Finding, HealthState};
use crate::model::xid::{Severity, XidCount};
use crate::model::{DeviceSnapshot, EccScope, EccType, Snapshot};
use crate::xid::catalog;
use std::time::{Duration, SystemTime};

/// Everything about one device that a person should act on. `xids` are the device's XID
/// counts; a critical one counts for `critical_hold` after it was last seen.
pub fn findings(device: &DeviceSnapshot, xids: &[XidCount], critical_hold: Duration) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut add = |reason, severity, message: String| {
        out.push(Finding {
            reason,
            severity,
            message,
        })
    };

    // XIDs first: they explain the rest (a GPU that fell off the bus is also not answering).
    let describe = |x: &XidCount| {
        let when = humantime::format_rfc3339_seconds(x.last_seen);
        match catalog::lookup(x.xid) {
            Some(e) => format!(
                "Xid {} ({}) x{}, last at {when}: {}",
                x.xid,
                e.name,
                x.count,
                e.action()
            ),
            None => format!("Xid {} x{}, last at {when}", x.xid, x.count),
        }
    };
    let fatal: Vec<String> = xids
        .iter()
        .filter(|x| x.severity == Severity::Fatal)
        .map(describe)
        .collect();
    if !fatal.is_empty() {
        add(
            "xid_fatal",
            HealthState::Unhealthy,
            format!("fatal XID since boot: {}", fatal.join("; ")),
        );
    }
    let now = SystemTime::now();
    let critical: Vec<String> = xids
        .iter()
        .filter(|x| x.severity == Severity::Critical)
        .filter(|x| {
            now.duration_since(x.last_seen)
                .map(|age| age <= critical_hold)
                .unwrap_or(true)
        })
        .map(describe)
        .collect();
    if !critical.is_empty() {
        add(
            "xid_critical",
            HealthState::Degraded,
            format!("critical XID: {}", critical.join("; ")),
        );
    }

    if device.lost {
        add(
            "gpu_lost",
            HealthState::Unhealthy,
            "the GPU is lost (fallen off the bus): drain the node and reset or reseat the GPU".into(),
        );
        return out;
    }
    let Some(r) = device.readings.as_ref().filter(|_| device.up) else {
        add(
            "not_responding",
            HealthState::Degraded,
            "the GPU did not answer within poll.timeout: the driver may be hung; check dmesg for Xid errors".into(),
        );
        return out;
    };

    let thermal: Vec<&str> = THERMAL_REASONS
        .iter()
        .copied()
        .filter(|reason| r.clock_event_active(reason))
        .collect();
    if !thermal.is_empty() {
        let temperature = r.die_temperature().map(|t| format!(" at {t:.0} C")).unwrap_or_default();
        add(
            "thermal_slowdown",
            HealthState::Degraded,
            format!(
                "clocks are slowed for temperature ({}){temperature}: check airflow, fans and inlet temperature",
                thermal.join(", ")
            ),
        );
    }
    if let Some(seen) = device.hw_slowdown_seen.filter(|at| at.elapsed() <= HW_SLOWDOWN_WINDOW) {
        let now: Vec<&str> = HW_POWER_REASONS
            .iter()
            .copied()
            .filter(|reason| r.clock_event_active(reason))
            .collect();
        let when = if now.is_empty() {
            format!("{} s ago", seen.elapsed().as_secs())
        } else {
            format!("now ({})", now.join(", "))
        };
        add(
            "hw_slowdown",
            HealthState::Degraded,
            format!(
                "the hardware pulled the clocks down for power {when} (slowdown signal or power brake): \
                 check the power supplies and the GPU's power cables"
            ),
        );
    }
    if r.pcie.width_degraded() == Some(true) {
        add(
            "pcie_width_degraded",
            HealthState::Degraded,
            format!(
                "PCIe link runs at x{} of x{}: reseat the GPU or check the riser and slot",
                r.pcie.width.unwrap_or(0),
                r.pcie.width_max.unwrap_or(0)
            ),
        );
    }
    if r.persistence_mode == Some(false) {
        add(
            "persistence_off",
            HealthState::Degraded,
            "persistence mode is off: the driver is torn down between jobs; enable it (nvidia-smi -pm 1 or nvidia-persistenced)".into(),
        );
    }
    if let Some(n) = r.ecc_count(EccType::Uncorrected, EccScope::Volatile).filter(|n| *n > 0) {
        add(
            "ecc_uncorrectable",
            HealthState::Degraded,
            format!(
                "{n} uncorrectable ECC error{} since the driver loaded: drain the node and reset the GPU",
                if n == 1 { "" } else { "s" }
            ),
        );
    }
    if r.remapped_rows.pending == Some(true) {
        add(
            "row_remap_pending",
            HealthState::Degraded,
            "a memory row remap is pending: reset the GPU (or reboot) when it is idle to apply it".into(),
        );
    }
    if r.remapped_rows.failed == Some(true) {
        add(
            "row_remap_failed",
            HealthState::Unhealthy,
            "a memory row remap failed: the GPU has run out of spare rows; take it out of service and RMA it".into(),
        );
    }
    if let Some(links) = &r.nvlinks {
        let down: Vec<String> = links.links_down().map(|l| l.link.to_string()).collect();
        if !down.is_empty() {
            add(
                "nvlink_down",
                HealthState::Degraded,
                format!(
                    "NVLink {} down ({} of {} up): traffic to the other GPUs slows or falls back to PCIe; \
                     check nvidia-smi nvlink -s and the kernel log, then reset the GPU or reseat the baseboard",
                    down.join(", "),
                    links.links_up(),
                    links.board_links
                ),
            );
        }
    }
    if let Some(fabric) = r.fabric.as_ref().filter(|f| f.degraded()) {
        let (severity, message) = match &fabric.error {
            Some(error) => (
                HealthState::Unhealthy,
                format!(
                    "the NVLink fabric refused the GPU ({error}): its NVLinks carry nothing; check nvidia-fabricmanager's log, then reset the GPU"
                ),
            ),
            None => (
                HealthState::Degraded,
                format!(
                    "the GPU has not joined the NVLink fabric (state {}): is nvidia-fabricmanager running? Jobs across GPUs fail or fall back to PCIe until it has",
                    fabric.state
                ),
            ),
        };
        add("fabric_not_ready", severity, message);
    }
    out
}

/// Computes every GPU's verdict for this snapshot, from its readings, its XIDs (matched by
/// PCI bus id, with the snapshot's critical-XID hold) and its last probe.
pub fn evaluate(snapshot: &mut Snapshot) {
    let verdicts: Vec<DeviceHealth> = snapshot
        .devices
        .iter()
        .map(|device| {
            let findings = device_findings(snapshot, device);
            DeviceHealth {
                state: state(&findings),
                findings,
            }
        })
        .collect();
    for (device, health) in snapshot.devices.iter_mut().zip(verdicts) {
        device.health = health;
    }
    snapshot.node_findings = snapshot
        .missing_gpus()
        .map(|gpu| Finding {
            reason: "gpu_missing",
            severity: HealthState::Unhealthy,
            message: format!(
                "{} GPU {} is on the PCI bus but no backend shows it ({}): it fell off the bus at boot or \
                 the driver did not bind; check dmesg, then reseat or replace it",
                gpu.vendor,
                gpu.pci_bus_id,
                match &gpu.driver {
                    Some(driver) => format!("bound to {driver}"),
                    None => "no driver bound".to_string(),
                }
            ),
        })
        .collect();
}

/// "8 GPU(s): 0 unhealthy, 1 degraded", for systemd's STATUS= line.
pub fn summary(snapshot: &Snapshot) -> String {
    let count = |s: HealthState| snapshot.devices.iter().filter(|d| d.health.state == s).count();
    let missing = snapshot
        .node_findings
        .iter()
        .filter(|f| f.reason == "gpu_missing")
        .count();
    format!(
        "{} GPU(s): {} unhealthy, {} degraded{}",
        snapshot.devices.len(),
        count(HealthState::Unhealthy),
        count(HealthState::Degraded),
        if missing > 0 {
            format!(", {missing} missing")
        } else {
            String::new()
        }
    )
}

fn device_findings(snapshot: &Snapshot, device: &DeviceSnapshot) -> Vec<Finding> {
    let mut out = findings(
        device,
        snapshot.xid.for_bus(&device.identity.pci_bus_id),
        snapshot.xid_critical_hold,
    );
    if let Some(report) = snapshot.probe.reports.get(&device.identity.uuid) {
        out.extend(probe_finding(report));
    }
    out
}

/// A GPU that failed its last probe is degraded: it works, but slower than its model should.
/// It stays so until a later probe passes.
pub fn probe_finding(report: &crate::model::probe::ProbeReport) -> Option<Finding> {
    let failed: Vec<String> = report
        .tests
        .iter()
        .filter(|t| t.pass == Some(false))
        .map(|t| match (t.sustained, t.expected) {
            (Some(s), Some(e)) if e > 0.0 => format!("{} at {:.0}% of expected", t.test.name(), s / e * 100.0),
            _ => t.test.name().to_string(),
        })
        .collect();
    if failed.is_empty() {
        return None;
    }
    Some(Finding {
        reason: "probe_failed",
        severity: HealthState::Degraded,
        message: format!(
            "failed the probe: {}; look at its clock-event reasons, temperature and PCIe width under load (`gpuwarden probe --gpu {}`)",
            failed.join(", "),
            report.gpu
        ),
    })
}

/// The worst severity among the findings, `Ok` when there are none.
pub fn state(findings: &[Finding]) -> HealthState {
    findings.iter().map(|f| f.severity).max().unwrap_or(HealthState::Ok)
}
