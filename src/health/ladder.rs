//! The remediation ladder's next step for a GPU that needs one (`remediation.mode: advise`;
//! docs/health.md, "Remediation"): reboot the node, reset the GPU, or a person's service. A
//! GPU needs one when it is unhealthy, when its driver asks for a reset or a reboot (recovery
//! action), or when a row remap waits for a reset.
//! From the driver's own recovery action (NVML field 230) first, then the XID catalog's
//! resolution for the fatal XIDs seen, then the findings; a reset becomes a reboot when one
//! already failed in this boot or the day's resets did not hold (`escalate`). Pure: the GPU,
//! its findings, its XIDs and what was tried in, the step out.

use super::rules;
use super::table::StepAdvice;
use crate::model::health::RuleId;
use crate::model::health::{Finding, HealthState, LadderLimits, NextStep, Step};
use crate::model::remediation::{AttemptOutcome, Remediations};
use crate::model::xid::{Severity, XidCount};
use crate::model::{DeviceSnapshot, RecoveryAction};

/// What the ladder reads beside the GPU: the config's words and what was tried.
pub(crate) struct Ladder<'a> {
    pub limits: &'a LadderLimits,
    pub tried: &'a Remediations,
    /// Unix seconds, and the boot's clock (the reset budget is counted on it within a boot).
    pub now: f64,
    pub boot: Option<f64>,
}

/// The next step for `device`, when it needs one.
pub(crate) fn next_step(
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
    from_evidence(action, device.identity.index, &unhealthy, xids, remap_pending, reset)
}

/// The step itself: the driver's recovery action first (its word on its own GPU), else the
/// strongest step the table gives the unhealthy findings (health/table.rs `StepAdvice`: a
/// person's service over a reboot over a reset, since the weaker one would not mend the
/// stronger fault), else a pending remap's reset; an unhealthy finding with no step of its
/// own (an operator's rule) is a person's to look at.
fn from_evidence(
    action: Option<RecoveryAction>,
    gpu: u32,
    unhealthy: &[&Finding],
    xids: &[XidCount],
    remap_pending: bool,
    reset_command: String,
) -> Option<NextStep> {
    let driver = match action {
        Some(RecoveryAction::NodeReboot) => Some((
            Step::RebootRequired,
            "the driver asks for a node reboot (recovery action)".to_string(),
        )),
        Some(RecoveryAction::GpuReset | RecoveryAction::DrainAndReset) => Some((
            Step::GpuReset,
            "the driver asks for a GPU reset (recovery action)".to_string(),
        )),
        _ => None,
    };
    let table = || {
        let mut best: Option<(Step, String)> = None;
        for (step, why) in unhealthy.iter().flat_map(|f| steps_of(f, gpu, xids)) {
            if best.as_ref().is_none_or(|(b, _)| step > *b) {
                best = Some((step, why));
            }
        }
        best
    };
    let remap = || remap_pending.then(|| (Step::GpuReset, why(&rules::ROW_REMAP_PENDING, gpu)));
    let person = || {
        unhealthy.first().map(|first| {
            (
                Step::Service,
                format!(
                    "{}: no reset or reboot clears it; a person must look (repair, replace)",
                    first.reason
                ),
            )
        })
    };
    let (step, why) = driver.or_else(table).or_else(remap).or_else(person)?;
    let command = (step == Step::GpuReset).then_some(reset_command);
    Some(NextStep { step, why, command })
}

/// The steps the table gives one finding, each with why: its row's, or for a fatal XID each
/// code's from NVIDIA's catalog.
fn steps_of(finding: &Finding, gpu: u32, xids: &[XidCount]) -> Vec<(Step, String)> {
    let Some(rule) = finding.reason.rule().and_then(rules::named) else {
        return Vec::new();
    };
    match rule.step {
        StepAdvice::Take(step) => vec![(step, why(rule, gpu))],
        StepAdvice::FromXid => xids
            .iter()
            .filter(|x| x.severity == Severity::Fatal)
            .filter_map(|x| {
                let entry = crate::xid::catalog::lookup(x.xid)?;
                // A code the operator's policy made fatal whose bucket names no reset or
                // reboot (xid.severity) gets the least step that clears a fatal XID: a reset.
                let step = entry.step().unwrap_or(Step::GpuReset);
                Some((step, format!("Xid {} ({}): {}", x.xid, entry.name, entry.action())))
            })
            .collect(),
        StepAdvice::FromDriver | StepAdvice::None => Vec::new(),
    }
}

/// Why a row's step: its reason and action, and the document that says so.
fn why(rule: &rules::Rule, gpu: u32) -> String {
    format!("{}: {} ({})", rule.reason, rule.action_for(Some(gpu)), rule.source)
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
        assert!(
            dbe.why
                .starts_with("Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE): reset the GPU"),
            "{}",
            dbe.why
        );
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
        assert!(
            pending.why.starts_with("row_remap_pending: reset the GPU (or reboot)"),
            "{}",
            pending.why
        );
        let validating = [finding("validating", HealthState::Unhealthy)];
        assert_eq!(step(&gpu(None), &validating, &[xid(48)]), None, "its probe is its step");
    }

    /// Memory that reads back wrong and arithmetic that computes wrong are a person's: a
    /// reset does not mend them (the table's source says why), and no weaker step from
    /// another finding of the same GPU wins over that.
    #[test]
    fn wrong_memory_or_results_go_to_service_not_a_reset() {
        for reason in ["hbm_pattern_errors", "sdc_suspect"] {
            let found = [finding(reason, HealthState::Unhealthy)];
            let next = step(&gpu(None), &found, &[]).unwrap();
            assert_eq!((next.step, next.command.as_deref()), (Step::Service, None), "{reason}");
            assert!(
                next.why.starts_with(&format!("{reason}: take it out of service")),
                "{}",
                next.why
            );
            assert!(next.why.contains("--gpu 0 --markdown"), "its own index: {}", next.why);
            let with_remap = [
                finding(reason, HealthState::Unhealthy),
                finding("row_remap_pending", HealthState::Degraded),
                finding("xid_fatal", HealthState::Unhealthy),
            ];
            assert_eq!(step(&gpu(None), &with_remap, &[xid(48)]).unwrap().step, Step::Service);
        }
        // The driver's own word on its GPU still comes first.
        let asked = step(
            &gpu(Some(RecoveryAction::GpuReset)),
            &[finding("hbm_pattern_errors", HealthState::Unhealthy)],
            &[],
        );
        assert_eq!(asked.unwrap().step, Step::GpuReset);
    }

    /// Xid 79 and a lost GPU are one fault: one step, in one wording.
    #[test]
    fn xid_79_and_a_lost_gpu_say_the_same() {
        let by_xid = step(&gpu(None), &[finding("xid_fatal", HealthState::Unhealthy)], &[xid(79)]).unwrap();
        let by_loss = step(&gpu(None), &[finding("gpu_lost", HealthState::Unhealthy)], &[]).unwrap();
        assert_eq!(by_xid.step, Step::RebootRequired);
        assert_eq!(by_loss.step, Step::RebootRequired);
        let words = crate::model::health::OFF_THE_BUS_ACTION;
        assert!(by_xid.why.contains(words), "{}", by_xid.why);
        assert!(by_loss.why.contains(words), "{}", by_loss.why);
        assert!(crate::xid::catalog::lookup(79).unwrap().action().contains(words));
        assert_eq!(rules::GPU_LOST.action, words);
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
