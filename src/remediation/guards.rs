//! The guards an automatic GPU reset must pass, each a pure function of the snapshot (and
//! what the config and the pause file say), each saying what it saw when it holds the reset
//! back (docs/health.md, "Remediation"):
//!
//! 1. `scheduler`: the node is out of work as its scheduler shows it: Slurm's health check
//!    reported (within 10 minutes) the node drained with a `gpuwarden:` reason and no job on
//!    it, and the node's verdict has been unhealthy ever since (the check resumes a node only
//!    when it is not, so it is still drained); where no Slurm report comes, the kubelet
//!    answered and no pod holds the GPU.
//! 2. `processes`: NVML shows no process on the GPU. The daemon's own evidence: the Slurm
//!    report comes over the local socket from any root process, and is never enough alone.
//! 3. `reset_budget`: fewer than `remediation.max_resets_per_day` resets of this GPU in 24 h.
//! 4. `fleet_guard`: the fleet drain guard did not refuse a drain (too many nodes out), and
//!    `paused`: automatic remediation is not paused (config key or pause file).
//!
//! Before them all, `reboot_required`: a node marked for a reboot gets no more resets.

use crate::model::remediation::{Guard, Refusal};
use crate::model::scheduler::Drained;
use crate::model::{DeviceSnapshot, Snapshot};

/// What the guards read beside the snapshot.
pub(crate) struct Context<'a> {
    /// Unix seconds.
    pub now: f64,
    /// The boot's clock (seconds since boot), where it can be read: the budget's.
    pub boot: Option<f64>,
    pub max_resets_per_day: u32,
    /// Why automatic remediation is paused, when it is.
    pub paused: Option<&'a str>,
    /// Since when (Unix seconds) the node's verdict has been unhealthy without a break; None
    /// while it is not.
    pub unhealthy_since: Option<f64>,
}

fn refuse(guard: Guard, why: impl Into<String>) -> Result<(), Refusal> {
    Err(Refusal { guard, why: why.into() })
}

/// Every guard, in the order above: the first that holds the reset back.
pub(crate) fn check(snapshot: &Snapshot, device: &DeviceSnapshot, context: &Context) -> Result<(), Refusal> {
    reboot_first(snapshot)?;
    paused(context)?;
    fleet_guard(snapshot, context.now)?;
    scheduler(snapshot, device, context)?;
    processes(device)?;
    reset_budget(snapshot, device, context)
}

/// `reboot_required`: the node needs a reboot (a reset failed, or a GPU's step is a reboot);
/// a reset of another GPU would not spare it.
pub(crate) fn reboot_first(snapshot: &Snapshot) -> Result<(), Refusal> {
    match &snapshot.remediation.reboot_required {
        Some(mark) => refuse(
            Guard::RebootRequired,
            format!("the node needs a reboot first: {}", mark.why),
        ),
        None => Ok(()),
    }
}

/// `paused`: the config key or the pause file.
pub(crate) fn paused(context: &Context) -> Result<(), Refusal> {
    match context.paused {
        Some(why) => refuse(Guard::Paused, why),
        None => Ok(()),
    }
}

/// Guard 4: the fleet drain guard's latest decision (the Slurm health check's report).
pub(crate) fn fleet_guard(snapshot: &Snapshot, now: f64) -> Result<(), Refusal> {
    let report = snapshot.scheduler.as_ref();
    let refused = report.and_then(|r| r.drain_refused_at(now)) == Some(true);
    match report.and_then(|r| r.drain_guard_at(now)) {
        Some(g) if refused => refuse(
            Guard::FleetGuard,
            format!(
                "the fleet drain guard refused a drain: {} of {} nodes already drained by gpuwarden (max_drained {}); \
                 too many nodes out at once is more likely a fleet-wide event than broken GPUs",
                g.drained, g.nodes, g.max
            ),
        ),
        _ => Ok(()),
    }
}

/// Guard 1: the scheduler shows the node (Slurm) or the GPU (Kubernetes) out of work.
pub(crate) fn scheduler(snapshot: &Snapshot, device: &DeviceSnapshot, context: &Context) -> Result<(), Refusal> {
    let now = context.now;
    if let Some(node) = snapshot.scheduler.as_ref().and_then(|r| r.node_at(now)) {
        let reported = snapshot.scheduler.as_ref().and_then(|r| r.node_reported_at(now));
        let still_drained = reported
            .zip(context.unhealthy_since)
            .is_some_and(|(reported, since)| reported >= since);
        return match (node.drained, node.jobs) {
            (Drained::Gpuwarden, Some(0)) if still_drained => Ok(()),
            (Drained::Gpuwarden, Some(0)) => refuse(
                Guard::Scheduler,
                "the node's verdict was not unhealthy all along since Slurm's last report: the health check may \
                 have resumed it since; waiting for its next run",
            ),
            (Drained::Gpuwarden, Some(n)) => {
                refuse(Guard::Scheduler, format!("Slurm shows {n} job(s) still on the node"))
            }
            (Drained::Gpuwarden, None) => refuse(
                Guard::Scheduler,
                "the Slurm health check could not ask squeue for the node's jobs",
            ),
            (Drained::Other, _) => refuse(
                Guard::Scheduler,
                "Slurm shows the node drained by someone else: an admin's drain is theirs to act on",
            ),
            (Drained::None, _) => refuse(
                Guard::Scheduler,
                "Slurm shows the node in service: a job may land on it",
            ),
        };
    }
    match snapshot.kubelet_up {
        Some(true) => match snapshot.pods.get(&device.identity.uuid) {
            Some(pods) if !pods.is_empty() => refuse(
                Guard::Scheduler,
                format!(
                    "the kubelet shows pod {}/{} holding the GPU",
                    pods[0].namespace, pods[0].pod
                ),
            ),
            _ => Ok(()),
        },
        Some(false) => refuse(
            Guard::Scheduler,
            "the kubelet does not answer: cannot tell whether a pod holds the GPU",
        ),
        None => refuse(
            Guard::Scheduler,
            "no scheduler says the node is out of work: the Slurm health check has not reported within 10 minutes \
             and the kubelet is not asked",
        ),
    }
}

/// Guard 2: NVML's own list of the GPU's processes is known and empty.
pub(crate) fn processes(device: &DeviceSnapshot) -> Result<(), Refusal> {
    if !device.up {
        return refuse(
            Guard::Processes,
            "the GPU did not answer its last poll: its processes are unknown",
        );
    }
    match device.readings.as_ref().and_then(|r| r.processes.as_ref()) {
        None => refuse(
            Guard::Processes,
            "NVML does not list the GPU's processes: cannot tell that none runs",
        ),
        Some(list) if !list.is_empty() => refuse(
            Guard::Processes,
            format!(
                "{} process(es) run on the GPU (pid {})",
                list.len(),
                list.iter().map(|p| p.pid.to_string()).collect::<Vec<_>>().join(", ")
            ),
        ),
        Some(_) => Ok(()),
    }
}

/// Guard 3: this GPU's resets within 24 h.
pub(crate) fn reset_budget(snapshot: &Snapshot, device: &DeviceSnapshot, context: &Context) -> Result<(), Refusal> {
    let resets = snapshot.remediation.resets_within_a_day(
        &device.identity.uuid,
        crate::model::remediation::Now {
            wall: context.now,
            boot: context.boot,
        },
    );
    if resets as u32 >= context.max_resets_per_day {
        return refuse(
            Guard::ResetBudget,
            format!(
                "{resets} reset(s) of this GPU within 24 h (remediation.max_resets_per_day {})",
                context.max_resets_per_day
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::remediation::{Attempt, AttemptOutcome, Remediations};
    use crate::model::scheduler::{DrainGuard, NodeState, SchedulerReport};
    use crate::model::{DeviceReadings, GpuProcess, PodHolder, Vendor};
    use std::sync::Arc;

    const NOW: f64 = 1_000_000.0;

    fn gpu(processes: Option<Vec<GpuProcess>>) -> DeviceSnapshot {
        DeviceSnapshot::for_test(
            0,
            Vendor::Nvidia,
            "0000:19:00.0",
            DeviceReadings {
                processes,
                ..Default::default()
            },
        )
    }

    fn slurm(drained: Drained, jobs: Option<u32>, at: f64) -> Snapshot {
        Snapshot {
            scheduler: Some(SchedulerReport {
                drain_guard: None,
                node: Some((at, NodeState { drained, jobs })),
            }),
            ..Default::default()
        }
    }

    fn context(paused: Option<&str>) -> Context<'_> {
        Context {
            now: NOW,
            boot: None,
            max_resets_per_day: 1,
            paused,
            unhealthy_since: Some(NOW - 60.0),
        }
    }

    fn guard_of(result: Result<(), Refusal>) -> String {
        result.err().map(|r| r.guard.to_string()).unwrap_or_default()
    }

    #[test]
    fn scheduler_holds_only_for_a_fresh_drain_by_gpuwarden_with_no_job() {
        let device = gpu(Some(vec![]));
        let c = context(None);
        assert_eq!(
            scheduler(&slurm(Drained::Gpuwarden, Some(0), NOW - 30.0), &device, &c),
            Ok(())
        );
        // A report from before the verdict last turned unhealthy (or while it is not): the
        // check may have resumed the node since.
        let turned_unhealthy_later = Context {
            unhealthy_since: Some(NOW - 10.0),
            ..context(None)
        };
        let stale = scheduler(
            &slurm(Drained::Gpuwarden, Some(0), NOW - 30.0),
            &device,
            &turned_unhealthy_later,
        );
        assert!(stale.unwrap_err().why.contains("may have resumed it"));
        let not_unhealthy = Context {
            unhealthy_since: None,
            ..context(None)
        };
        assert_eq!(
            guard_of(scheduler(
                &slurm(Drained::Gpuwarden, Some(0), NOW),
                &device,
                &not_unhealthy
            )),
            "scheduler"
        );
        for (snapshot, words) in [
            (slurm(Drained::Gpuwarden, Some(2), NOW), "2 job(s)"),
            (slurm(Drained::Gpuwarden, None, NOW), "could not ask squeue"),
            (slurm(Drained::Other, Some(0), NOW), "someone else"),
            (slurm(Drained::None, Some(0), NOW), "in service"),
            (
                slurm(Drained::Gpuwarden, Some(0), NOW - 700.0),
                "has not reported within 10 minutes",
            ),
        ] {
            let why = scheduler(&snapshot, &device, &c).unwrap_err().why;
            assert!(why.contains(words), "{why}");
        }
    }

    #[test]
    fn on_kubernetes_no_pod_may_hold_the_gpu() {
        let device = gpu(Some(vec![]));
        let mut snapshot = Snapshot {
            kubelet_up: Some(true),
            ..Default::default()
        };
        let c = context(None);
        assert_eq!(scheduler(&snapshot, &device, &c), Ok(()));
        snapshot.pods.insert(
            device.identity.uuid.clone(),
            vec![PodHolder {
                namespace: "ml".into(),
                pod: "train-0".into(),
                container: "main".into(),
                gpu_instance: None,
            }],
        );
        assert!(
            scheduler(&snapshot, &device, &c)
                .unwrap_err()
                .why
                .contains("ml/train-0")
        );
        snapshot.kubelet_up = Some(false);
        assert!(
            scheduler(&snapshot, &device, &c)
                .unwrap_err()
                .why
                .contains("does not answer")
        );
    }

    #[test]
    fn processes_must_be_known_and_none() {
        assert_eq!(processes(&gpu(Some(vec![]))), Ok(()));
        let busy = gpu(Some(vec![GpuProcess {
            pid: 4242,
            ..Default::default()
        }]));
        assert!(processes(&busy).unwrap_err().why.contains("pid 4242"));
        assert_eq!(guard_of(processes(&gpu(None))), "processes", "unknown is not none");
        let mut down = gpu(Some(vec![]));
        down.up = false;
        assert_eq!(guard_of(processes(&down)), "processes");
    }

    #[test]
    fn the_budget_counts_this_gpus_resets_of_the_last_day() {
        let device = gpu(Some(vec![]));
        let mut tried = Remediations::default();
        let mut snapshot = Snapshot::default();
        assert_eq!(reset_budget(&snapshot, &device, &context(None)), Ok(()));
        tried.keep(Attempt::for_test(
            &device.identity.uuid,
            NOW - 3600.0,
            AttemptOutcome::Succeeded,
            true,
        ));
        snapshot.remediation = Arc::new(tried.clone());
        assert_eq!(
            guard_of(reset_budget(&snapshot, &device, &context(None))),
            "reset_budget"
        );
        tried.attempts[0].started = NOW - 25.0 * 3600.0;
        snapshot.remediation = Arc::new(tried);
        assert_eq!(reset_budget(&snapshot, &device, &context(None)), Ok(()), "a day later");
    }

    #[test]
    fn the_fleet_guard_and_the_pause_hold_every_reset() {
        let mut snapshot = slurm(Drained::Gpuwarden, Some(0), NOW - 20.0);
        let device = gpu(Some(vec![]));
        assert_eq!(check(&snapshot, &device, &context(None)), Ok(()), "every guard holds");
        let paused_by = "remediation.paused is true";
        assert_eq!(guard_of(check(&snapshot, &device, &context(Some(paused_by)))), "paused");
        if let Some(report) = snapshot.scheduler.as_mut() {
            report.drain_guard = Some((
                NOW - 10.0,
                DrainGuard {
                    refused: true,
                    drained: 2,
                    nodes: 3,
                    max: "2".into(),
                },
            ));
        }
        let refused = fleet_guard(&snapshot, NOW).unwrap_err();
        assert!(refused.why.contains("2 of 3 nodes"), "{}", refused.why);
        assert_eq!(fleet_guard(&snapshot, NOW + 700.0), Ok(()), "an old refusal lapses");
        if let Some((_, guard)) = snapshot.scheduler.as_mut().and_then(|r| r.drain_guard.as_mut()) {
            guard.refused = false;
        }
        assert_eq!(fleet_guard(&snapshot, NOW), Ok(()));
        assert_eq!(check(&snapshot, &device, &context(None)), Ok(()));
        snapshot.remediation = Arc::new(Remediations {
            reboot_required: Some(crate::model::remediation::RebootRequired {
                since: NOW - 5.0,
                uuid: "GPU-other".into(),
                index: 3,
                why: "the GPU reset of GPU 3 failed: exit status 1".into(),
            }),
            ..Default::default()
        });
        let first = check(&snapshot, &device, &context(None)).unwrap_err();
        assert_eq!(first.guard, Guard::RebootRequired);
        assert!(first.why.contains("GPU 3 failed"), "{}", first.why);
    }
}
