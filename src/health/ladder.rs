//! The remediation ladder's next step for a GPU that needs one (`remediation.mode: advise`;
//! docs/health.md, "Remediation"): reboot the node, reset the GPU, or a person's service. A
//! GPU needs one when it is unhealthy, when its driver asks for a reset or a reboot (recovery
//! action), or when a row remap waits for a reset.
//! From the driver's own recovery action (NVML field 230) first, then the XID catalog's
//! resolution for the fatal XIDs seen, then the findings; a reset becomes a reboot when one
//! already failed in this boot or the day's resets did not hold (`escalate`). Pure: the GPU,
//! its findings, its XIDs and what was tried in, the step out.

use super::rules;
use crate::model::health::RuleId;
use crate::model::health::{Finding, HealthState, LadderLimits, NextStep, Step};
use crate::model::remediation::{AttemptOutcome, Remediations};
use crate::model::xid::{Severity, XidCount};
use crate::model::{DeviceSnapshot, RecoveryAction};

/// What the ladder reads beside the GPU: the config's words and what was tried.
pub struct Ladder<'a> {
    pub limits: &'a LadderLimits,
    pub tried: &'a Remediations,
    /// Unix seconds, and the boot's clock (the reset budget is counted on it within a boot).
    pub now: f64,
    pub boot: Option<f64>,
}

/// The next step for `device`, when it needs one.
pub fn next_step(
    device: &DeviceSnapshot,
    findings: &[Finding],
    xids: &[XidCount],
    ladder: &Ladder,
) -> Option<NextStep> {
    let step = first_step(device, findings, xids, ladder.limits)?;
    Some(escalate(step, &device.identity.uuid, ladder))
}

/// A reset that already failed in this boot, or resets that did not hold, make the step a
/// reboot: the same reset again would not help.
fn escalate(step: NextStep, uuid: &str, ladder: &Ladder) -> NextStep {
    if step.step != Step::GpuReset || ladder.tried.running.as_deref() == Some(uuid) {
        return step;
    }
    let reboot = |why: String| NextStep {
        step: Step::RebootRequired,
        why,
        command: None,
    };
    if let Some(last) = ladder.tried.last_reset_this_boot(uuid)
        && let AttemptOutcome::Failed { why } = &last.outcome
    {
        return reboot(format!(
            "the GPU reset at {} failed ({why}); before that: {}",
            crate::model::utc_seconds(last.started),
            step.why
        ));
    }
    let now = crate::model::remediation::Now {
        wall: ladder.now,
        boot: ladder.boot,
    };
    let resets = ladder.tried.resets_within_a_day(uuid, now);
    if resets as u32 >= ladder.limits.max_resets_per_day {
        return reboot(format!(
            "{resets} GPU reset(s) within 24 h did not hold (remediation.max_resets_per_day {}); now: {}",
            ladder.limits.max_resets_per_day, step.why
        ));
    }
    step
}

/// The step from the evidence alone, before what was tried.
fn first_step(
    device: &DeviceSnapshot,
    findings: &[Finding],
    xids: &[XidCount],
    limits: &LadderLimits,
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
    let remap_pending = rules::ROW_REMAP_PENDING.found_in(findings.iter());
    if unhealthy.is_empty() && !driver_asks && !remap_pending {
        return None;
    }
    if !unhealthy.is_empty()
        && unhealthy
            .iter()
            .all(|f| matches!(f.reason.rule(), Some(RuleId::Validating | RuleId::Remediating)))
    {
        // A GPU being reset, or repaired and waiting for its probe: that is its step already.
        return None;
    }
    let words: Vec<String> = limits
        .reset_command
        .iter()
        .map(|w| w.replace("{pci_bus_id}", &device.identity.pci_bus_id))
        .collect();
    let reset = shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "));
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
    let step = |step: Step, why: String, command: Option<String>| Some(NextStep { step, why, command });
    match action {
        Some(RecoveryAction::NodeReboot) => {
            return step(
                Step::RebootRequired,
                "the driver asks for a node reboot (recovery action)".into(),
                None,
            );
        }
        Some(RecoveryAction::GpuReset | RecoveryAction::DrainAndReset) => {
            return step(
                Step::GpuReset,
                "the driver asks for a GPU reset (recovery action)".into(),
                reset(),
            );
        }
        _ => {}
    }
    if rules::GPU_LOST.found_in(unhealthy.iter().copied()) {
        return step(
            Step::RebootRequired,
            "the GPU is lost (fallen off the bus)".into(),
            None,
        );
    }
    let fatal: Vec<(u32, &str)> = xids
        .iter()
        .filter(|x| x.severity == Severity::Fatal)
        .filter_map(|x| crate::xid::catalog::lookup(x.xid).map(|e| (x.xid, e.nvidia_action)))
        .collect();
    if let Some((code, bucket)) = fatal.iter().find(|(_, b)| matches!(*b, "RESTART_BM" | "RESTART_VM")) {
        return step(
            Step::RebootRequired,
            format!("Xid {code}: NVIDIA's catalog says {bucket}"),
            None,
        );
    }
    if let Some((code, bucket)) = fatal.first() {
        return step(
            Step::GpuReset,
            format!("Xid {code}: NVIDIA's catalog says {bucket}"),
            reset(),
        );
    }
    if rules::FABRIC_NOT_READY.found_in(unhealthy.iter().copied()) {
        return step(
            Step::GpuReset,
            "the GPU has not joined the NVLink fabric".into(),
            reset(),
        );
    }
    if remap_pending {
        return step(
            Step::GpuReset,
            "a memory row remap waits for a GPU reset".into(),
            reset(),
        );
    }
    let first = unhealthy.first()?;
    step(
        Step::Service,
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
            reason: crate::model::health::RuleId::from_label(reason).unwrap().into(),
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

    fn limits() -> LadderLimits {
        LadderLimits {
            reset_command: ["nvidia-smi", "--gpu-reset", "-i", "{pci_bus_id}"]
                .map(String::from)
                .to_vec(),
            max_resets_per_day: 2,
            auto: false,
        }
    }

    fn step(device: &DeviceSnapshot, findings: &[Finding], xids: &[XidCount]) -> Option<NextStep> {
        tried_step(device, findings, xids, &Remediations::default())
    }

    fn tried_step(
        device: &DeviceSnapshot,
        findings: &[Finding],
        xids: &[XidCount],
        tried: &Remediations,
    ) -> Option<NextStep> {
        let limits = limits();
        next_step(
            device,
            findings,
            xids,
            &Ladder {
                limits: &limits,
                tried,
                now: 10_000.0,
                boot: None,
            },
        )
    }

    #[test]
    fn the_drivers_recovery_action_comes_first_then_the_catalog_then_the_finding() {
        let unhealthy = [finding("xid_fatal", HealthState::Unhealthy)];
        let reboot = step(&gpu(Some(RecoveryAction::NodeReboot)), &unhealthy, &[xid(48)]).unwrap();
        assert_eq!(
            reboot.step.label(),
            "reboot_required",
            "the driver's word beats the catalog's"
        );
        let reset = step(&gpu(Some(RecoveryAction::GpuReset)), &unhealthy, &[xid(79)]).unwrap();
        assert_eq!(reset.step.label(), "gpu_reset");
        assert_eq!(reset.command.as_deref(), Some("nvidia-smi --gpu-reset -i 0000:19:00.0"));
        // No recovery action: Xid 79 (RESTART_BM) asks for a reboot, Xid 48 for a reset.
        assert_eq!(
            step(&gpu(None), &unhealthy, &[xid(79)]).unwrap().step,
            Step::RebootRequired
        );
        let dbe = step(&gpu(None), &unhealthy, &[xid(48)]).unwrap();
        assert_eq!(dbe.step.label(), "gpu_reset");
        assert!(dbe.why.starts_with("Xid 48: NVIDIA's catalog says"), "{}", dbe.why);
        let lost = [finding("gpu_lost", HealthState::Unhealthy)];
        assert_eq!(step(&gpu(None), &lost, &[]).unwrap().step.label(), "reboot_required");
        let remap = [finding("row_remap_failed", HealthState::Unhealthy)];
        let service = step(&gpu(None), &remap, &[]).unwrap();
        assert_eq!((service.step.label(), service.command), ("service", None));
    }

    #[test]
    fn a_degraded_gpu_gets_one_only_when_its_driver_asks_or_a_remap_waits() {
        let degraded = [finding("thermal_slowdown", HealthState::Degraded)];
        assert_eq!(
            step(&gpu(None), &degraded, &[]),
            None,
            "a hot GPU needs cooling, not a reset"
        );
        let asked = step(&gpu(Some(RecoveryAction::GpuReset)), &degraded, &[]).unwrap();
        assert_eq!(asked.step.label(), "gpu_reset");
        assert_eq!(step(&gpu(Some(RecoveryAction::DrainP2p)), &degraded, &[]), None);
        let remap = [finding("row_remap_pending", HealthState::Degraded)];
        let pending = step(&gpu(None), &remap, &[]).unwrap();
        assert_eq!(pending.why, "a memory row remap waits for a GPU reset");
        let validating = [finding("validating", HealthState::Unhealthy)];
        assert_eq!(step(&gpu(None), &validating, &[xid(48)]), None, "its probe is its step");
    }

    fn reset_at(started: f64, outcome: AttemptOutcome) -> crate::model::remediation::Attempt {
        crate::model::remediation::Attempt::for_test(&gpu(None).identity.uuid, started, outcome, true)
    }

    #[test]
    fn a_failed_reset_or_the_days_budget_spent_makes_it_a_reboot() {
        let unhealthy = [finding("xid_fatal", HealthState::Unhealthy)];
        let mut tried = Remediations::default();
        tried.keep(reset_at(9_000.0, AttemptOutcome::Succeeded));
        let once = tried_step(&gpu(None), &unhealthy, &[xid(48)], &tried).unwrap();
        assert_eq!(
            once.step.label(),
            "gpu_reset",
            "one reset of two a day: another may hold"
        );
        tried.keep(reset_at(9_500.0, AttemptOutcome::Succeeded));
        let spent = tried_step(&gpu(None), &unhealthy, &[xid(48)], &tried).unwrap();
        assert_eq!(spent.step.label(), "reboot_required");
        assert!(
            spent.why.starts_with("2 GPU reset(s) within 24 h did not hold"),
            "{}",
            spent.why
        );
        let mut failed = Remediations::default();
        failed.keep(reset_at(
            9_000.0,
            AttemptOutcome::Failed {
                why: "exit status 1".into(),
            },
        ));
        let after_failure = tried_step(&gpu(None), &unhealthy, &[xid(48)], &failed).unwrap();
        assert_eq!(after_failure.step.label(), "reboot_required");
        assert!(
            after_failure.why.contains("failed (exit status 1)"),
            "{}",
            after_failure.why
        );
        let mut earlier_boot = failed.clone();
        earlier_boot.attempts[0].this_boot = false;
        assert_eq!(
            tried_step(&gpu(None), &unhealthy, &[xid(48)], &earlier_boot)
                .unwrap()
                .step,
            Step::GpuReset,
            "a reboot since the failed reset: the reset may be tried again"
        );
        let service = [finding("row_remap_failed", HealthState::Unhealthy)];
        assert_eq!(
            tried_step(&gpu(None), &service, &[], &failed).unwrap().step,
            Step::Service,
            "only a reset escalates"
        );
    }
}
