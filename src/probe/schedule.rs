//! Scheduled probes in the daemon (off by default; `probe.schedule`).
//!
//! One thread looks at the latest snapshot every second and probes at most one GPU at a
//! time, each every `probe.interval`. A GPU is probed only when it is idle: up, utilization
//! at most `probe.max_utilization`, enough free memory (checked here, from the snapshot)
//! and no compute process (checked by the probe itself, right before it starts). Otherwise
//! the probe is skipped, counted by reason, and tried again after `RETRY_AFTER`.
//!
//! The probe runs as a child process (`gpuwarden probe --json`), never in the daemon: the
//! CUDA driver and cuBLAS add hundreds of MB that would stay mapped for good, and a probe
//! that hangs in the driver is killed after `probe.timeout` while the daemon goes on.

use super::busy_reason;
use super::{ProbeError, ProbeReport, ProbeSnapshot};
use crate::config::Probe;
pub use crate::config::settings::ChildSettings;
use crate::model::{DeviceSnapshot, Snapshot};
use crate::service::stop::Stop;
use crate::snapshot::store::Store;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A skipped GPU is looked at again after this long (or after `probe.interval`, if shorter).
const RETRY_AFTER: Duration = Duration::from_secs(600);
const TICK: Duration = Duration::from_secs(1);
/// The longest the scheduler sleeps while the schedule is off; a reload or the stop wakes it
/// sooner.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// Shared between the scheduler thread and the publisher, which puts it into every snapshot;
/// its version moves on every change, so a new result is published at once.
pub type ProbeState = crate::snapshot::store::Versioned<ProbeSnapshot>;

/// What one scheduled probe came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Report(Box<ProbeReport>),
    Skipped(&'static str, String),
    Error(&'static str, String),
}

/// Why a GPU should not be probed now, from the snapshot alone (the child checks processes).
pub fn precheck(device: &DeviceSnapshot, settings: &Probe) -> Option<(&'static str, String)> {
    if !device.up {
        return Some(("gpu_down", "the GPU did not answer its last poll".into()));
    }
    let readings = device.readings.as_ref()?;
    let free_mib = readings
        .memory_total_bytes
        .zip(readings.memory_used_bytes)
        .map(|(total, used)| total.saturating_sub(used) >> 20);
    busy_reason(None, readings.utilization_ratio, free_mib, settings)
}

/// Which GPU to probe next: the one waiting longest among those due. `due` holds, per uuid,
/// when it may next be probed; a GPU not in it is due `interval` after `started`.
pub fn next_due<'a>(
    snapshot: &'a Snapshot,
    due: &BTreeMap<String, Instant>,
    started: Instant,
    interval: Duration,
    now: Instant,
) -> Option<&'a DeviceSnapshot> {
    snapshot
        .devices
        .iter()
        .map(|d| (d, due.get(&d.identity.uuid).copied().unwrap_or(started + interval)))
        .filter(|(_, at)| *at <= now)
        .min_by_key(|(_, at)| *at)
        .map(|(d, _)| d)
}

/// Starts the scheduler thread. `settings` is read at every tick, so a reload takes effect
/// at once; `stop` ends the thread (a probe in flight is killed).
pub fn spawn(
    store: Arc<Store>,
    state: Arc<ProbeState>,
    settings: Arc<crate::config::settings::SharedSettings>,
    stop: Stop,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("probe-scheduler".into())
        .spawn(move || {
            let started = Instant::now();
            let mut due: BTreeMap<String, Instant> = BTreeMap::new();
            let mut idle = true;
            // A stop wakes a wait for a reload too.
            stop.on_stop({
                let settings = settings.clone();
                move || settings.wake_waiters()
            });
            let mut reloads = settings.reloads();
            loop {
                // Straight on to the next GPU after one was dealt with; a tick's rest otherwise.
                if (idle && stop.sleep(TICK)) || stop.is_stopped() {
                    break;
                }
                idle = true;
                let current = settings.current().probe_child.clone();
                let enabled = current.probe.schedule;
                if state.get().schedule_enabled != enabled {
                    state.update(|s| s.schedule_enabled = enabled);
                }
                if !enabled {
                    // Off (the default): asleep until a reload turns it on, or the stop.
                    reloads = settings.wait_for_reload(reloads, IDLE_WAIT, || stop.is_stopped());
                    continue;
                }
                let snapshot = store.latest();
                let now = Instant::now();
                let interval = current.probe.interval;
                let Some(device) = next_due(&snapshot, &due, started, interval, now) else {
                    continue;
                };
                idle = false;
                let uuid = device.identity.uuid.clone();
                let outcome = match precheck(device, &current.probe) {
                    Some((reason, why)) => Outcome::Skipped(reason, why),
                    None => run_child(device.identity.index, &current, &stop),
                };
                let retry = interval.min(RETRY_AFTER);
                let next = match &outcome {
                    Outcome::Report(_) => Instant::now() + interval,
                    _ => Instant::now() + retry,
                };
                due.insert(uuid.clone(), next);
                record(&state, &uuid, device.identity.index, outcome);
            }
        })?;
    Ok(())
}

fn record(state: &ProbeState, uuid: &str, index: u32, outcome: Outcome) {
    match outcome {
        Outcome::Report(report) => {
            let result = match report.passed() {
                Some(true) => "pass",
                Some(false) => "fail",
                None => "no_verdict",
            };
            if result == "fail" {
                let failed: Vec<&str> = report
                    .tests
                    .iter()
                    .filter(|t| t.pass == Some(false))
                    .map(|t| t.test.name())
                    .collect();
                log::warn!(gpu_uuid = uuid; "GPU {index} failed the probe: {}", failed.join(", "));
            } else {
                log::info!(gpu_uuid = uuid; "GPU {index} probe: {result} ({:.1} s)", report.wall_seconds);
            }
            state.update(|s| {
                *s.runs.entry((uuid.to_string(), result)).or_default() += 1;
                s.reports.insert(uuid.to_string(), *report);
                s.last_error.remove(uuid);
            });
        }
        Outcome::Skipped(reason, why) => {
            log::debug!(gpu_uuid = uuid; "GPU {index} probe skipped: {why}");
            state.update(|s| *s.skipped.entry((uuid.to_string(), reason)).or_default() += 1);
        }
        Outcome::Error(result, why) => {
            log::warn!(gpu_uuid = uuid; "GPU {index} probe could not run: {why}");
            state.update(|s| {
                *s.runs.entry((uuid.to_string(), result)).or_default() += 1;
                s.last_error.insert(uuid.to_string(), why);
            });
        }
    }
}

/// What the child printed on stdout.
#[derive(Deserialize)]
#[serde(untagged)]
enum ChildOutput {
    Report(Box<ProbeReport>),
    Error { error: ProbeError },
}

/// Turns the child's exit and output into an outcome.
pub fn interpret(stdout: &str, status: Option<i32>) -> Outcome {
    match serde_json::from_str::<ChildOutput>(stdout.trim()) {
        Ok(ChildOutput::Report(report)) => Outcome::Report(report),
        Ok(ChildOutput::Error {
            error: ProbeError::Busy { reason, message },
        }) => Outcome::Skipped(skip_label(&reason), message),
        Ok(ChildOutput::Error { error }) => Outcome::Error("error", error.to_string()),
        Err(_) => Outcome::Error(
            "error",
            format!(
                "the probe process ended with {} and printed no report",
                status.map_or("a signal".to_string(), |c| format!("exit status {c}"))
            ),
        ),
    }
}

/// The fixed label set of `gpu_probe_skipped_total{reason}`.
fn skip_label(reason: &str) -> &'static str {
    match reason {
        "utilization" => "utilization",
        "memory" => "memory",
        "gpu_down" => "gpu_down",
        _ => "compute_processes",
    }
}

fn run_child(gpu: u32, settings: &ChildSettings, stop: &Stop) -> Outcome {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Outcome::Error("error", format!("cannot find gpuwarden's own executable: {e}")),
    };
    let input = match serde_json::to_vec(settings) {
        Ok(v) => v,
        Err(e) => return Outcome::Error("error", format!("cannot pass the settings on: {e}")),
    };
    let mut command = Command::new(exe);
    command
        .args(["probe", "--json", "--settings-from-stdin", "--gpu", &gpu.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe. A probe must not outlive the daemon (a stop
    // outside systemd, which would otherwise kill the whole cgroup).
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = command.spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Outcome::Error("error", format!("cannot start the probe process: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        // The child reads all of stdin before it starts; a failed write shows up as its error.
        let _ = stdin.write_all(&input);
    }
    // The report is a few kB: it fits the pipe, so waiting before reading cannot deadlock.
    let deadline = Instant::now() + settings.probe.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline || stop.is_stopped() => {
                let _ = child.kill();
                let _ = child.wait();
                return Outcome::Error(
                    "timeout",
                    format!(
                        "the probe did not finish within probe.timeout ({:?}); killed it",
                        settings.probe.timeout
                    ),
                );
            }
            Ok(None) => {
                stop.sleep(Duration::from_millis(100));
            }
            Err(e) => return Outcome::Error("error", format!("waiting for the probe process: {e}")),
        }
    };
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    interpret(&stdout, status.code())
}

/// The child's side of `ChildSettings`: `gpuwarden probe --settings-from-stdin`.
pub fn settings_from_stdin() -> Result<ChildSettings, super::ProbeError> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| super::ProbeError::Settings(format!("cannot read the probe settings from stdin: {e}")))?;
    serde_json::from_str(&text)
        .map_err(|e| super::ProbeError::Settings(format!("the probe settings on stdin are not valid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Nvml;
    use crate::model::{DeviceIdentity, DeviceReadings, Vendor};

    fn device(index: u32, up: bool, utilization: f64, used_mib: u64) -> DeviceSnapshot {
        DeviceSnapshot {
            identity: DeviceIdentity {
                index,
                uuid: format!("GPU-{index}"),
                vendor: Vendor::Nvidia,
                name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: format!("0000:{index:02x}:00.0"),
                driver_version: "580".into(),
                serial: None,
                inventory: Default::default(),
            },
            up,
            lost: false,
            hw_slowdown_seen: None,
            error_growth: Default::default(),
            clock_event_starts: Vec::new(),
            health: Default::default(),
            last_good_poll: None,
            readings: Some(DeviceReadings {
                utilization_ratio: Some(utilization),
                memory_used_bytes: Some(used_mib << 20),
                memory_total_bytes: Some(81_559 << 20),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn precheck_skips_busy_down_and_full_gpus() {
        let settings = Probe::default();
        assert_eq!(precheck(&device(0, true, 0.0, 500), &settings), None);
        assert_eq!(precheck(&device(0, false, 0.0, 500), &settings).unwrap().0, "gpu_down");
        assert_eq!(
            precheck(&device(0, true, 0.5, 500), &settings).unwrap().0,
            "utilization"
        );
        assert_eq!(precheck(&device(0, true, 0.0, 78_000), &settings).unwrap().0, "memory");
    }

    #[test]
    fn one_gpu_at_a_time_the_longest_waiting_first() {
        let snapshot = Snapshot {
            devices: vec![
                device(0, true, 0.0, 0),
                device(1, true, 0.0, 0),
                device(2, true, 0.0, 0),
            ],
            ..Default::default()
        };
        let start = Instant::now();
        let hour = Duration::from_secs(3600);
        let mut due = BTreeMap::new();
        // Nothing is due before one interval has passed since start.
        assert!(next_due(&snapshot, &due, start, hour, start + Duration::from_secs(10)).is_none());
        // Then the first GPU in order.
        let later = start + hour;
        assert_eq!(next_due(&snapshot, &due, start, hour, later).unwrap().identity.index, 0);
        // GPU 0 probed (next in an hour), GPU 1 skipped (retry sooner): GPU 2 is next.
        due.insert("GPU-0".to_string(), later + hour);
        due.insert("GPU-1".to_string(), later + RETRY_AFTER);
        assert_eq!(next_due(&snapshot, &due, start, hour, later).unwrap().identity.index, 2);
        due.insert("GPU-2".to_string(), later + hour);
        assert!(next_due(&snapshot, &due, start, hour, later).is_none());
        // The retry of GPU 1 comes before the next round of the others.
        let retry = later + RETRY_AFTER;
        assert_eq!(next_due(&snapshot, &due, start, hour, retry).unwrap().identity.index, 1);
    }

    #[test]
    fn child_output_is_interpreted() {
        let busy =
            r#"{"error":{"kind":"busy","message":{"reason":"compute_processes","message":"GPU 0 is not idle"}}}"#;
        assert_eq!(
            interpret(busy, Some(3)),
            Outcome::Skipped("compute_processes", "GPU 0 is not idle".into())
        );
        let no_driver = r#"{"error":{"kind":"no_driver","message":"libcuda.so.1 is not installed"}}"#;
        assert_eq!(
            interpret(no_driver, Some(2)),
            Outcome::Error("error", "libcuda.so.1 is not installed".into())
        );
        match interpret("", None) {
            Outcome::Error("error", why) => assert!(why.contains("a signal"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_busy_error_round_trips_through_json() {
        let error = ProbeError::Busy {
            reason: "utilization".into(),
            message: "GPU 3 is not idle".into(),
        };
        let text = serde_json::json!({ "error": error }).to_string();
        assert_eq!(
            interpret(&text, Some(3)),
            Outcome::Skipped("utilization", "GPU 3 is not idle".into())
        );
    }

    #[test]
    fn records_count_runs_and_keep_the_latest_report() {
        let state = ProbeState::default();
        record(&state, "GPU-0", 0, Outcome::Skipped("utilization", "busy".into()));
        record(&state, "GPU-0", 0, Outcome::Skipped("utilization", "busy".into()));
        record(&state, "GPU-0", 0, Outcome::Error("timeout", "killed".into()));
        let s = state.get();
        assert_eq!(s.skipped[&("GPU-0".to_string(), "utilization")], 2);
        assert_eq!(s.runs[&("GPU-0".to_string(), "timeout")], 1);
        assert_eq!(s.last_error["GPU-0"], "killed");
        let report = ProbeReport {
            gpu: 0,
            uuid: "GPU-0".into(),
            name: "x".into(),
            started: 1.0,
            wall_seconds: 15.0,
            expectation: None,
            pass_fraction: 0.9,
            tests: vec![],
        };
        record(&state, "GPU-0", 0, Outcome::Report(Box::new(report)));
        let s = state.get();
        assert_eq!(s.runs[&("GPU-0".to_string(), "no_verdict")], 1);
        assert!(s.reports.contains_key("GPU-0"));
        assert!(!s.last_error.contains_key("GPU-0"), "a report clears the last error");
    }

    #[test]
    fn settings_round_trip_through_json() {
        let mut settings = ChildSettings {
            nvml: Nvml::default(),
            probe: Probe::default(),
        };
        settings.probe.durations.gemm_bf16 = Duration::from_millis(1500);
        settings.probe.expected = crate::probe::expected::shipped();
        let text = serde_json::to_string(&settings).unwrap();
        let back: ChildSettings = serde_json::from_str(&text).unwrap();
        assert_eq!(back.probe, settings.probe);
        assert_eq!(back.nvml, settings.nvml);
    }
}
