//! The idle node's scheduled validation (`probe.schedule: true` with `probe.mode: node`;
//! docs/probe.md, "Validating an idle node"). Every `probe.interval`, within `probe.window`
//! if one is set, on a node where no job, pod or compute process holds any GPU and nothing is
//! unhealthy, every NVIDIA GPU gets a validation of the `sweep` kind at once. While they are
//! pending the node's verdict is `validating` (`gpuwarden health` exits 3), which the Slurm
//! health check turns into a drain with the reason `gpuwarden: validating`; the scheduler
//! probes the GPUs one after the other (schedule.rs), a failure is `probe_failed` (unhealthy,
//! as any validation's), and once every one has passed the verdict is the node's again and
//! the check resumes it. A job that starts on the node meanwhile (it got there before the
//! drain) ends the sweep after at most the probe in flight: the node goes back to work and
//! the sweep is tried again later.

use crate::config::{Probe, ProbeMode};
use crate::lifecycle::{Command, Lifecycle};
use crate::model::health::{HealthState, ValidationKind};
use crate::model::{Snapshot, Vendor};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A sweep that could not start (the node was busy) or was ended by a job is tried again
/// after this long, or after `probe.interval` if that is shorter.
pub(crate) const RETRY_AFTER: Duration = Duration::from_secs(600);

/// The process ids of the probe's latest children: a poll round right after a probe may still
/// list the child on its GPU, and that is no job.
static OWN_PROBES: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Notes a probe child's process id (schedule.rs, when it starts one).
pub(crate) fn note_own_probe(pid: u32) {
    let mut own = OWN_PROBES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    own.push(pid);
    let excess = own.len().saturating_sub(8);
    own.drain(..excess);
}

fn own_probe(pid: u32) -> bool {
    OWN_PROBES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&pid)
}

/// What puts work on the node now, if anything: a batch job, a pod or a compute process
/// (other than the probe's own) on one of its GPUs.
pub(crate) fn work_on_node(snapshot: &Snapshot) -> Option<String> {
    for d in &snapshot.devices {
        let gpu = d.identity.index;
        if let Some(job) = snapshot.jobs.get(&d.identity.uuid).and_then(|jobs| jobs.first()) {
            return Some(format!("job {job} runs on GPU {gpu}"));
        }
        if let Some(pod) = snapshot.pods.get(&d.identity.uuid).and_then(|pods| pods.first()) {
            return Some(format!("pod {}/{} holds GPU {gpu}", pod.namespace, pod.pod));
        }
        let processes = d.readings.as_ref().and_then(|r| r.processes.as_ref());
        if let Some(p) = processes.and_then(|ps| ps.iter().find(|p| !own_probe(p.pid))) {
            return Some(format!("process {} runs on GPU {gpu}", p.pid));
        }
    }
    None
}

/// Why the node's scheduled validation cannot start now, if it cannot: work on the node, a GPU
/// busy or down, something unhealthy (it is drained for that already), or a validation running.
pub(crate) fn not_now(snapshot: &Snapshot, settings: &Probe) -> Option<String> {
    if let Some(work) = work_on_node(snapshot) {
        return Some(work);
    }
    if snapshot.validation_pending() {
        return Some("a validation is running".into());
    }
    if snapshot.worst_health() == Some(HealthState::Unhealthy) {
        return Some("the node is unhealthy".into());
    }
    let nvidia: Vec<_> = snapshot
        .devices
        .iter()
        .filter(|d| d.identity.vendor == Vendor::Nvidia)
        .collect();
    if nvidia.is_empty() {
        return Some("no NVIDIA GPU to probe".into());
    }
    nvidia
        .iter()
        .find_map(|d| super::precheck(d, settings).map(|(_, why)| format!("GPU {}: {why}", d.identity.index)))
}

/// When the node's scheduled validation may next start: `interval` after the last start
/// (the daemon's start before the first), or the retry after one that could not start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SweepClock {
    pub last_start: Instant,
    pub retry_at: Option<Instant>,
}

impl SweepClock {
    pub(crate) fn new(started: Instant) -> SweepClock {
        SweepClock {
            last_start: started,
            retry_at: None,
        }
    }

    /// Due now: the interval has passed (read from the settings in force, so a reload counts
    /// at once), no retry is waited out, and the wall clock (Unix seconds) is in the window.
    pub(crate) fn due(&self, settings: &Probe, now: Instant, wall: f64) -> bool {
        settings.schedule
            && settings.mode == ProbeMode::Node
            && now >= self.last_start + settings.interval
            && self.retry_at.is_none_or(|at| now >= at)
            && settings.window.is_none_or(|w| w.contains(wall))
    }

    /// Not now: look again after the retry (or the interval, if shorter).
    pub(crate) fn retry(&mut self, settings: &Probe, now: Instant) {
        self.retry_at = Some(now + settings.interval.min(RETRY_AFTER));
    }
}

/// Starts the sweep: a pending validation of every NVIDIA GPU, from `wall` (Unix seconds).
pub(crate) fn start(snapshot: &Snapshot, lifecycle: &Lifecycle, wall: f64) -> usize {
    let gpus: Vec<String> = snapshot
        .devices
        .iter()
        .filter(|d| d.identity.vendor == Vendor::Nvidia)
        .map(|d| d.identity.uuid.clone())
        .collect();
    lifecycle.apply(Command::SweepStarted { gpus, at: wall })
}

/// Ends the sweep's pending validations as skipped, saying why; how many there were.
pub(crate) fn end(lifecycle: &Lifecycle, why: &str, wall: f64) -> usize {
    lifecycle.apply(Command::SweepEnded {
        why: why.to_string(),
        at: wall,
    })
}

/// Whether the snapshot shows a sweep under way.
pub(crate) fn running(snapshot: &Snapshot) -> bool {
    snapshot.devices.iter().any(|d| {
        snapshot
            .validations
            .get(&d.identity.uuid)
            .is_some_and(|v| v.kind == ValidationKind::Sweep && v.pending())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TimeWindow;
    use crate::model::{DeviceReadings, DeviceSnapshot, GpuProcess};
    use std::sync::Arc;

    fn idle_node() -> Snapshot {
        let gpu = |i: u32| {
            DeviceSnapshot::for_test(
                i,
                Vendor::Nvidia,
                &format!("0000:{:02x}:00.0", 0x19 + i),
                DeviceReadings {
                    utilization_ratio: Some(0.0),
                    memory_used_bytes: Some(1 << 30),
                    memory_total_bytes: Some(80 << 30),
                    processes: Some(vec![]),
                    ..Default::default()
                },
            )
        };
        Snapshot {
            devices: vec![gpu(0), gpu(1)],
            generation: 1,
            ..Default::default()
        }
    }

    fn node_mode() -> Probe {
        Probe {
            schedule: true,
            mode: ProbeMode::Node,
            interval: Duration::from_secs(3600),
            ..Probe::default()
        }
    }

    #[test]
    fn an_idle_healthy_node_may_start_and_work_of_any_kind_stops_it() {
        let settings = node_mode();
        let node = idle_node();
        assert_eq!(not_now(&node, &settings), None);
        let mut with_job = idle_node();
        with_job.jobs.insert("GPU-1".into(), vec!["4242".into()]);
        assert_eq!(not_now(&with_job, &settings).as_deref(), Some("job 4242 runs on GPU 1"));
        let mut with_process = idle_node();
        let process = GpuProcess {
            pid: 999_001,
            ..Default::default()
        };
        std::sync::Arc::make_mut(with_process.devices[0].readings.as_mut().unwrap()).processes = Some(vec![process]);
        assert!(not_now(&with_process, &settings).unwrap().contains("process 999001"));
        // The probe's own child, still listed by the round after it, is not work.
        note_own_probe(999_001);
        assert_eq!(work_on_node(&with_process), None);
        let mut busy = idle_node();
        std::sync::Arc::make_mut(busy.devices[1].readings.as_mut().unwrap()).utilization_ratio = Some(0.6);
        assert!(not_now(&busy, &settings).unwrap().starts_with("GPU 1: its utilization"));
        let mut unhealthy = idle_node();
        unhealthy.devices[0].health.state = HealthState::Unhealthy;
        assert_eq!(not_now(&unhealthy, &settings).as_deref(), Some("the node is unhealthy"));
    }

    #[test]
    fn the_clock_counts_the_interval_the_retry_and_the_window() {
        let mut settings = node_mode();
        let t0 = Instant::now();
        let mut clock = SweepClock::new(t0);
        let hour = Duration::from_secs(3600);
        // 2026-11-26T03:00:00Z
        let three_am = 1_795_662_000.0;
        assert!(!clock.due(&settings, t0, three_am), "not before the interval");
        assert!(clock.due(&settings, t0 + hour, three_am));
        clock.retry(&settings, t0 + hour);
        assert!(!clock.due(&settings, t0 + hour + Duration::from_secs(60), three_am));
        assert!(clock.due(&settings, t0 + hour + RETRY_AFTER, three_am));
        settings.window = TimeWindow::parse("02:00-06:00");
        assert!(clock.due(&settings, t0 + 2 * hour, three_am));
        assert!(
            !clock.due(&settings, t0 + 2 * hour, three_am + 4.0 * 3600.0),
            "07:00 is outside"
        );
        settings.window = TimeWindow::parse("22:00-04:00");
        assert!(
            clock.due(&settings, t0 + 2 * hour, three_am),
            "the window wraps midnight"
        );
        settings.mode = ProbeMode::Gpu;
        assert!(
            !clock.due(&settings, t0 + 2 * hour, three_am),
            "per-GPU mode has no sweeps"
        );
    }

    #[test]
    fn a_sweep_validates_every_nvidia_gpu_and_ending_it_skips_the_pending_ones() {
        let node = idle_node();
        let lifecycle = Lifecycle::default();
        assert_eq!(start(&node, &lifecycle, 100.0), 2);
        let mut snapshot = idle_node();
        snapshot.validations = lifecycle.get().validations.clone();
        assert!(running(&snapshot));
        assert_eq!(
            not_now(&snapshot, &node_mode()).as_deref(),
            Some("a validation is running")
        );
        // A validation kept for a board that has left the node holds nothing up.
        let mut gone = Snapshot {
            generation: 1,
            ..idle_node()
        };
        gone.devices.clear();
        gone.validations = lifecycle.get().validations.clone();
        assert!(!running(&gone) && !gone.validation_pending());
        let passed = Command::ValidationEnded {
            uuid: "GPU-0".into(),
            since: 100.0,
            outcome: crate::model::health::ValidationOutcome::Passed {
                at: 110.0,
                detail: "passed".into(),
            },
        };
        assert_eq!(lifecycle.apply(passed), 1);
        assert_eq!(end(&lifecycle, "job 7 runs on GPU 1", 120.0), 1);
        assert_eq!(end(&lifecycle, "job 7 runs on GPU 1", 121.0), 0, "nothing left to end");
        let all = lifecycle.get().validations.clone();
        assert_eq!(all["GPU-0"].state(), "passed", "what passed stays passed");
        assert_eq!(all["GPU-1"].state(), "skipped");
        snapshot.validations = Arc::new((*all).clone());
        assert!(!running(&snapshot));
    }

    #[test]
    fn windows_are_read_and_refused_as_written() {
        assert_eq!(TimeWindow::parse("02:00-06:00").unwrap().to_string(), "02:00-06:00");
        for bad in [
            "2:00-06:00",
            "02:00-02:00",
            "25:00-06:00",
            "02:00",
            "02:60-03:00",
            "noon-dusk",
        ] {
            assert_eq!(TimeWindow::parse(bad), None, "{bad}");
        }
    }
}
