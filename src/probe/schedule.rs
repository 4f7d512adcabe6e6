//! Scheduled probes in the daemon (off by default; `probe.schedule`).
//!
//! One thread looks at the latest snapshot every second and probes at most one GPU at a
//! time, each every `probe.interval`. A GPU is probed only when it is idle: up, utilization
//! at most `probe.max_utilization`, enough free memory (checked here, from the snapshot)
//! and no compute process (checked by the probe itself, right before it starts). Otherwise
//! the probe is skipped, counted by reason, and tried again after `RETRY_AFTER`.
//!
//! A GPU awaiting validation (`health.validate_after_clear`: cleared of an unhealthy finding,
//! or a new board in its slot) comes first, whether the schedule is on or not: it is probed
//! as soon as it is idle (looked at again every `VALIDATION_RETRY` while busy), and the first
//! report after its clear decides (`validation_outcome`).
//!
//! The probe runs as a child process (`gpuwarden probe --json`), never in the daemon: the
//! CUDA driver and cuBLAS add hundreds of MB that would stay mapped for good, and a probe
//! that hangs in the driver is killed after `probe.timeout` while the daemon goes on.

use super::{BusyReason, ProbeError, ProbeReport, ProbeSnapshot};
use crate::config::Probe;
pub use crate::config::settings::ChildSettings;
use crate::model::health::ValidationOutcome;
use crate::model::probe::{HbmSuspect, MemtestOutcome, SdcOutcome, SdcSuspect};
use crate::model::{DeviceSnapshot, Snapshot};
use crate::service::stop::Stop;
use crate::snapshot::store::Store;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A skipped GPU is looked at again after this long (or after `probe.interval`, if shorter).
const RETRY_AFTER: Duration = Duration::from_secs(600);
const TICK: Duration = Duration::from_secs(1);
/// A GPU awaiting validation that was busy is looked at again after this long.
const VALIDATION_RETRY: Duration = Duration::from_secs(5);
/// A validation probe that could not run at all (no CUDA driver) is tried again after this.
const VALIDATION_ERROR_RETRY: Duration = Duration::from_secs(60);
/// The longest the scheduler sleeps while the schedule is off; a reload or the stop wakes it
/// sooner.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// Shared between the scheduler thread and the publisher, which puts it into every snapshot;
/// its version moves on every change, so a new result is published at once.
pub type ProbeState = crate::service::versioned::Versioned<ProbeSnapshot>;

/// What one scheduled probe came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Report(Box<ProbeReport>),
    Skipped(BusyReason, String),
    Error(RunError, String),
}

pub use super::child::RunError;
pub use super::precheck;

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

/// When a pending validation (by uuid, and its `since`: a new clear starts afresh) may be
/// tried again.
pub type RetryAt = BTreeMap<String, (f64, Instant)>;

/// The GPU awaiting validation to probe now: NVIDIA (the probe is CUDA's), present, its
/// validation pending, and not waiting out a retry of that same validation.
pub fn next_validation<'a>(snapshot: &'a Snapshot, retry_at: &RetryAt, now: Instant) -> Option<&'a DeviceSnapshot> {
    snapshot.devices.iter().find(|d| {
        let Some(validation) = snapshot.validations.get(&d.identity.uuid).filter(|v| v.pending()) else {
            return false;
        };
        d.identity.vendor == crate::model::Vendor::Nvidia
            && retry_at
                .get(&d.identity.uuid)
                .is_none_or(|(since, at)| *since != validation.since || *at <= now)
    })
}

/// Whether a snapshot has a GPU whose validation the scheduler must see to.
fn validation_pending(snapshot: &Snapshot) -> bool {
    snapshot.validation_pending()
}

/// What a probe outcome does to a pending validation that began at `since`: its end, or None
/// while it is still awaited (the GPU was busy, or the probe could not run at all).
pub fn validation_outcome(outcome: &Outcome, wrong: &Suspects, since: f64, now: f64) -> Option<ValidationOutcome> {
    match outcome {
        Outcome::Report(report) if report.started >= since => {
            let mut failed = report.shortfalls();
            // Wrong results and memory that reads back wrong never pass, however fast.
            failed.extend(wrong.words());
            Some(if failed.is_empty() {
                let detail = match report.passed() {
                    Some(true) => format!("passed the probe ({:.1} s)", report.wall_seconds),
                    _ => format!(
                        "ran every test without an error ({:.1} s; no expected figures for {})",
                        report.wall_seconds, report.name
                    ),
                };
                ValidationOutcome::Passed { at: now, detail }
            } else {
                ValidationOutcome::Failed {
                    at: now,
                    detail: format!("failed the probe: {}", failed.join(", ")),
                }
            })
        }
        Outcome::Error(RunError::Timeout, why) => Some(ValidationOutcome::Failed {
            at: now,
            detail: why.clone(),
        }),
        _ => None,
    }
}

/// What the scheduler's steps work with: the published snapshots, the probe results it keeps,
/// the owner of the service state it reports validations to, and its stop.
struct Handles<'a> {
    store: &'a Store,
    state: &'a ProbeState,
    lifecycle: &'a crate::lifecycle::Lifecycle,
    stop: &'a Stop,
}

/// Starts the scheduler thread. `settings` is read at every tick, so a reload takes effect
/// at once; `stop` ends the thread (a probe in flight is killed). `lifecycle`: where each
/// validation probe's outcome goes (the owner of the service state).
pub fn spawn(
    store: Arc<Store>,
    state: Arc<ProbeState>,
    lifecycle: Arc<crate::lifecycle::Lifecycle>,
    settings: Arc<crate::config::settings::SharedSettings>,
    stop: Stop,
) -> std::io::Result<()> {
    // A snapshot with a validation to see to wakes the scheduler from its wait for a reload:
    // whoever started it (a clear, the journal's board swap, the seed) need not know it.
    store.on_publish(Box::new({
        let settings = settings.clone();
        move |snapshot| {
            if validation_pending(snapshot) {
                settings.wake_waiters();
            }
        }
    }));
    std::thread::Builder::new()
        .name("probe-scheduler".into())
        .spawn(move || {
            let started = Instant::now();
            let mut due: BTreeMap<String, Instant> = BTreeMap::new();
            let mut validation_retry = RetryAt::new();
            let mut sweep_clock = super::sweep::SweepClock::new(started);
            let mut idle = true;
            // A stop wakes a wait for a reload too.
            stop.on_stop({
                let settings = settings.clone();
                move || settings.wake_waiters()
            });
            let mut reloads = settings.reloads();
            let handles = Handles {
                store: &store,
                state: &state,
                lifecycle: &lifecycle,
                stop: &stop,
            };
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
                let snapshot = store.latest();
                let now = Instant::now();
                if current.probe.mode == crate::config::ProbeMode::Node {
                    sweep_step(&snapshot, &current.probe, &mut sweep_clock, &lifecycle, now);
                }
                if let Some(device) = next_validation(&snapshot, &validation_retry, now) {
                    idle = false;
                    let since = snapshot.validations.get(&device.identity.uuid).map_or(0.0, |v| v.since);
                    let retry = validate(device, &current, &handles);
                    validation_retry.insert(device.identity.uuid.clone(), (since, Instant::now() + retry));
                    continue;
                }
                if enabled && current.probe.mode == crate::config::ProbeMode::Node {
                    // The node's sweeps instead of each GPU's own probes (sweep_step).
                    continue;
                }
                if !enabled {
                    // Off (the default): asleep until a reload turns it on, a validation
                    // comes, or the stop.
                    if !validation_pending(&snapshot) {
                        reloads = settings.wait_for_reload(reloads, IDLE_WAIT, || {
                            stop.is_stopped() || validation_pending(&store.latest())
                        });
                    }
                    continue;
                }
                idle = !probe_next_due(&snapshot, &mut due, started, &current, &handles);
            }
        })?;
    Ok(())
}

/// The idle node's scheduled validation (sweep.rs): ends a sweep that work came to, starts
/// one that is due on an idle node, or puts it off.
fn sweep_step(
    snapshot: &Snapshot,
    settings: &Probe,
    clock: &mut super::sweep::SweepClock,
    lifecycle: &crate::lifecycle::Lifecycle,
    now: Instant,
) {
    use super::sweep;
    let wall = crate::model::unix_now();
    if sweep::running(snapshot) {
        if let Some(work) = sweep::work_on_node(snapshot) {
            let ended = sweep::end(lifecycle, &work, wall);
            log::info!(
                "the node's scheduled validation ended with {ended} GPU(s) to go: {work}; the node goes back to work"
            );
            clock.retry(settings, now);
        }
        return;
    }
    if !clock.due(settings, now, wall) {
        return;
    }
    match sweep::not_now(snapshot, settings) {
        Some(why) => {
            log::debug!("the node's scheduled validation waits: {why}");
            clock.retry(settings, now);
        }
        None => {
            let gpus = sweep::start(snapshot, lifecycle, wall);
            log::info!("the node's scheduled validation starts: {gpus} GPU(s), one after the other; new work waits");
            clock.last_start = now;
            clock.retry_at = None;
        }
    }
}

/// The scheduled probe of the GPU due next, if one is; whether there was one.
fn probe_next_due(
    snapshot: &Snapshot,
    due: &mut BTreeMap<String, Instant>,
    started: Instant,
    current: &ChildSettings,
    handles: &Handles,
) -> bool {
    let Handles {
        state, lifecycle, stop, ..
    } = *handles;
    let interval = current.probe.interval;
    let Some(device) = next_due(snapshot, due, started, interval, Instant::now()) else {
        return false;
    };
    let uuid = device.identity.uuid.clone();
    let outcome = match precheck(device, &current.probe) {
        Some((reason, why)) => Outcome::Skipped(reason, why),
        None => run_child(device.identity.index, current, stop),
    };
    let next = match &outcome {
        Outcome::Report(_) => Instant::now() + interval,
        _ => Instant::now() + interval.min(RETRY_AFTER),
    };
    due.insert(uuid.clone(), next);
    let suspects = Suspects {
        sdc: judge_sdc(state, lifecycle, &uuid, device.identity.index, &outcome),
        hbm: judge_memtest(&uuid, device.identity.index, &outcome),
    };
    record(state, &uuid, device.identity.index, outcome, suspects);
    true
}

/// Probes a GPU awaiting validation, sends its outcome to `lifecycle`, and says when
/// to look at it again if it is still pending.
fn validate(device: &DeviceSnapshot, settings: &ChildSettings, handles: &Handles) -> Duration {
    let Handles {
        store,
        state,
        lifecycle,
        stop,
    } = *handles;
    let uuid = device.identity.uuid.clone();
    let index = device.identity.index;
    // The validation as it is now, not as the snapshot saw it: the sweep may have ended it
    // as skipped since (then it is not probed, nor said to be).
    let Some(since) = lifecycle
        .get()
        .validations
        .get(&uuid)
        .filter(|v| v.pending())
        .map(|v| v.since)
    else {
        return VALIDATION_RETRY;
    };
    let outcome = match precheck(device, &settings.probe) {
        Some((reason, why)) => Outcome::Skipped(reason, why),
        None => {
            log::info!(gpu_uuid = uuid; "GPU {index} validation: probing it before it returns to service");
            run_child(index, settings, stop)
        }
    };
    let retry = match &outcome {
        Outcome::Skipped(..) => VALIDATION_RETRY,
        _ => VALIDATION_ERROR_RETRY,
    };
    let suspects = Suspects {
        sdc: judge_sdc(state, lifecycle, &uuid, index, &outcome),
        hbm: judge_memtest(&uuid, index, &outcome),
    };
    let end = validation_outcome(&outcome, &suspects, since, crate::model::unix_now());
    record(state, &uuid, index, outcome, suspects);
    // The node's last validation to pass runs the all-reduce across its GPUs before it ends,
    // so the node is not ready before that verdict is in.
    let end = match end {
        Some(ValidationOutcome::Passed { at, detail }) => {
            let together = super::together::after_validation(store, settings, state, stop);
            if stop.is_stopped() {
                // The all-reduce was cut short: the validation stays pending and runs again
                // after the restart, as one whose probe the stop cut short does.
                return VALIDATION_ERROR_RETRY;
            }
            let detail = match together {
                Some(note) => format!("{detail}; {note}"),
                None => detail,
            };
            Some(ValidationOutcome::Passed { at, detail })
        }
        other => other,
    };
    if let Some(end) = end {
        match &end {
            ValidationOutcome::Failed { detail, .. } => {
                log::warn!(gpu_uuid = uuid; "GPU {index} failed its validation and stays out of service: {detail}")
            }
            other => log::info!(gpu_uuid = uuid; "GPU {index} validated: {}", other.detail()),
        }
        // Only the validation this probe was for: a clear in between started another.
        lifecycle.apply(crate::lifecycle::Command::ValidationEnded {
            uuid: uuid.clone(),
            since,
            outcome: end,
        });
    }
    retry
}

/// The correctness canary's verdict on a probe's report, against the other GPUs' latest and
/// the remembered digest (probe::sdc::judge); keeps the key's reference as it should be now.
fn judge_sdc(
    state: &ProbeState,
    lifecycle: &crate::lifecycle::Lifecycle,
    uuid: &str,
    index: u32,
    outcome: &Outcome,
) -> Option<SdcSuspect> {
    let Outcome::Report(report) = outcome else {
        return None;
    };
    let canary = SdcOutcome::of(report)?;
    let snapshot = state.get();
    let others: Vec<(String, u32, SdcOutcome)> = snapshot
        .reports
        .iter()
        .filter_map(|(other, r)| Some((other.clone(), r.gpu, SdcOutcome::of(r)?.clone())))
        .collect();
    let now = crate::model::unix_now();
    let old = snapshot.sdc_references.get(&canary.key);
    let judgement = super::sdc::judge(uuid, canary, &others, old, now);
    if let Some(undecided) = &judgement.undecided {
        log::warn!(gpu_uuid = uuid; "GPU {index}'s canary is not judged yet: {undecided}");
    }
    if let Some(reference) = judgement.reference {
        let again = old.is_none_or(|o| o.digest != reference.digest).then(|| {
            super::sdc_rejudge::rejudge(&canary.key, &reference, old, &others, &snapshot.sdc_suspects, uuid, now)
        });
        state.update(|s| {
            s.sdc_references.insert(canary.key.clone(), reference);
            for (other, suspect) in again.iter().flat_map(|a| a.suspected.iter()) {
                s.sdc_suspects.insert(other.clone(), suspect.clone());
            }
            for (other, lift) in again.iter().flat_map(|a| a.lifted.iter()) {
                s.sdc_suspects.remove(other);
                s.sdc_lifts.insert(other.clone(), lift.clone());
            }
        });
        if let Some(again) = again {
            revalidate_lifted(lifecycle, &again.lifted);
        }
    }
    if judgement.faults.is_empty() {
        return None;
    }
    log::error!(gpu_uuid = uuid; "GPU {index} gave wrong results (silent data corruption suspected): {}", judgement.faults.join("; "));
    Some(SdcSuspect {
        at: report.started,
        gpu: index,
        faults: judgement.faults,
        key: canary.key.clone(),
        digest: canary.digest.clone(),
    })
}

/// A GPU whose validation failed on a suspicion that was lifted since is validated again
/// (the owner's `Revalidate`): nothing else held it out.
fn revalidate_lifted(lifecycle: &crate::lifecycle::Lifecycle, lifted: &[(String, crate::model::probe::SdcLift)]) {
    if !lifted.is_empty() {
        lifecycle.apply(crate::lifecycle::Command::Revalidate(lifted.to_vec()));
    }
}

/// A probe's wrong results and memory errors, as judged.
#[derive(Debug, Default)]
pub struct Suspects {
    pub sdc: Option<SdcSuspect>,
    pub hbm: Option<HbmSuspect>,
}

impl Suspects {
    /// Each, as a validation's failure names it.
    fn words(&self) -> Vec<String> {
        let sdc = self.sdc.iter().map(|s| format!("sdc ({})", s.faults.join("; ")));
        let hbm = self.hbm.iter().map(|s| format!("memtest ({})", s.faults.join("; ")));
        sdc.chain(hbm).collect()
    }
}

/// The HBM pattern test's memory errors in a probe's report, if it found any.
fn judge_memtest(uuid: &str, index: u32, outcome: &Outcome) -> Option<HbmSuspect> {
    let Outcome::Report(report) = outcome else {
        return None;
    };
    let test = MemtestOutcome::of(report).filter(|m| m.errors > 0)?;
    let faults = test.faults();
    log::error!(gpu_uuid = uuid; "GPU {index}'s memory read back wrong in the pattern test: {}", faults.join("; "));
    Some(HbmSuspect {
        at: report.started,
        gpu: index,
        faults,
        bytes: test.bytes,
        errors: test.errors,
        bad: test.bad.clone(),
    })
}

fn record(state: &ProbeState, uuid: &str, index: u32, outcome: Outcome, suspects: Suspects) {
    // Wrong results or memory that reads back wrong fail the run, whatever the figures say.
    let wrong = suspects.sdc.is_some() || suspects.hbm.is_some();
    let suspects_words = suspects.words();
    if wrong {
        state.update(|s| {
            if let Some(sdc) = suspects.sdc {
                s.sdc_suspects.insert(uuid.to_string(), sdc);
            }
            if let Some(hbm) = suspects.hbm {
                s.hbm_suspects.insert(uuid.to_string(), hbm);
            }
        });
    }
    match outcome {
        Outcome::Report(report) => {
            let result = match report.passed() {
                _ if wrong => "fail",
                Some(true) => "pass",
                Some(false) => "fail",
                None => "no_verdict",
            };
            if wrong {
                log::warn!(gpu_uuid = uuid; "GPU {index} failed the probe: {}", suspects_words.join(", "));
            } else if report.passed() == Some(false) {
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
                s.keep(uuid, *report);
                s.last_error.remove(uuid);
            });
        }
        Outcome::Skipped(reason, why) => {
            log::debug!(gpu_uuid = uuid; "GPU {index} probe skipped: {why}");
            state.update(|s| *s.skipped.entry((uuid.to_string(), reason.label())).or_default() += 1);
        }
        Outcome::Error(result, why) => {
            log::warn!(gpu_uuid = uuid; "GPU {index} probe could not run: {why}");
            state.update(|s| {
                *s.runs.entry((uuid.to_string(), result.label())).or_default() += 1;
                let attempts = s.last_error.get(uuid).map_or(0, |e| e.attempts) + 1;
                let note = crate::model::probe::ProbeErrorNote {
                    at: crate::model::unix_now(),
                    why,
                    attempts,
                };
                s.last_error.insert(uuid.to_string(), note);
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
        }) => Outcome::Skipped(reason, message),
        Ok(ChildOutput::Error { error }) => Outcome::Error(RunError::Error, error.to_string()),
        Err(_) => Outcome::Error(
            RunError::Error,
            format!(
                "the probe process ended with {} and printed no report",
                status.map_or("a signal".to_string(), |c| format!("exit status {c}"))
            ),
        ),
    }
}

fn run_child(gpu: u32, settings: &ChildSettings, stop: &Stop) -> Outcome {
    match super::child::run_process(&["--gpu", &gpu.to_string()], settings, stop) {
        Ok((stdout, status)) => interpret(&stdout, status),
        Err((error, why)) => Outcome::Error(error, why),
    }
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
    use crate::model::health::Validation;
    use crate::model::{DeviceIdentity, DeviceReadings, Vendor};

    fn device(index: u32, up: bool, utilization: f64, used_mib: u64) -> DeviceSnapshot {
        DeviceSnapshot {
            identity: std::sync::Arc::new(DeviceIdentity {
                index,
                uuid: format!("GPU-{index}"),
                vendor: Vendor::Nvidia,
                name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: format!("0000:{index:02x}:00.0"),
                driver_version: "580".into(),
                serial: None,
                inventory: Default::default(),
            }),
            up,
            lost: false,
            history: Default::default(),
            health: Default::default(),
            last_good_poll: None,
            readings: Some(std::sync::Arc::new(DeviceReadings {
                utilization_ratio: Some(utilization),
                memory_used_bytes: Some(used_mib << 20),
                memory_total_bytes: Some(81_559 << 20),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn precheck_skips_busy_down_and_full_gpus() {
        let settings = Probe::default();
        assert_eq!(precheck(&device(0, true, 0.0, 500), &settings), None);
        assert_eq!(
            precheck(&device(0, false, 0.0, 500), &settings).unwrap().0,
            BusyReason::GpuDown
        );
        assert_eq!(
            precheck(&device(0, true, 0.5, 500), &settings).unwrap().0,
            BusyReason::Utilization
        );
        assert_eq!(
            precheck(&device(0, true, 0.0, 78_000), &settings).unwrap().0,
            BusyReason::Memory
        );
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

    fn report_at(started: f64, pass: Option<bool>) -> ProbeReport {
        let test = crate::model::probe::Test::HbmCopy;
        ProbeReport::for_test("GPU-0", started, test, (2100e9, 2000e9), pass.map(|_| 4000e9), pass)
    }

    #[test]
    fn the_first_probe_after_the_clear_decides_a_validation_and_a_hung_one_fails_it() {
        let decide = |outcome: Outcome| validation_outcome(&outcome, &Suspects::default(), 100.0, 200.0);
        let passed = decide(Outcome::Report(Box::new(report_at(150.0, Some(true)))));
        assert_eq!(passed.as_ref().map(|o| o.label()), Some("passed"));
        let failed = decide(Outcome::Report(Box::new(report_at(150.0, Some(false))))).unwrap();
        assert_eq!(failed.label(), "failed");
        assert_eq!(
            failed.detail(),
            "failed the probe: hbm_copy 2000.0 GB/s, 50% of the expected 4000.0 GB/s",
            "names the test and the figure"
        );
        // No expected figures for the model, no CUDA error: it works.
        let no_verdict = decide(Outcome::Report(Box::new(report_at(150.0, None)))).unwrap();
        assert_eq!(no_verdict.label(), "passed");
        assert!(
            no_verdict.detail().contains("without an error"),
            "{}",
            no_verdict.detail()
        );
        // A report from before the clear says nothing of the repair.
        assert_eq!(decide(Outcome::Report(Box::new(report_at(50.0, Some(true))))), None);
        assert_eq!(
            decide(Outcome::Error(RunError::Timeout, "killed".into()))
                .unwrap()
                .label(),
            "failed"
        );
        assert_eq!(
            decide(Outcome::Error(RunError::Error, "no libcuda".into())),
            None,
            "still awaited"
        );
        assert_eq!(
            decide(Outcome::Skipped(BusyReason::ComputeProcesses, "busy".into())),
            None
        );
    }

    #[test]
    fn gpus_awaiting_validation_come_first_nvidia_only_and_not_while_waiting_to_retry() {
        let mut snapshot = Snapshot {
            devices: vec![device(0, true, 0.0, 0), device(1, true, 0.0, 0)],
            ..Default::default()
        };
        let now = Instant::now();
        assert!(next_validation(&snapshot, &RetryAt::new(), now).is_none());
        let pending = Validation {
            since: 1.0,
            why: "x".into(),
            outcome: None,
            kind: Default::default(),
        };
        let mut done = pending.clone();
        done.outcome = Some(ValidationOutcome::Passed {
            at: 2.0,
            detail: "ok".into(),
        });
        snapshot.validations = Arc::new([("GPU-0".to_string(), done), ("GPU-1".to_string(), pending)].into());
        assert_eq!(
            next_validation(&snapshot, &RetryAt::new(), now).unwrap().identity.index,
            1
        );
        let mut retry: RetryAt = [("GPU-1".to_string(), (1.0, now + VALIDATION_RETRY))].into();
        assert!(next_validation(&snapshot, &retry, now).is_none());
        assert!(next_validation(&snapshot, &retry, now + VALIDATION_RETRY).is_some());
        // A new clear (another `since`) is not held back by the last one's retry.
        retry.insert("GPU-1".to_string(), (0.5, now + VALIDATION_ERROR_RETRY));
        assert!(next_validation(&snapshot, &retry, now).is_some());
        std::sync::Arc::make_mut(&mut snapshot.devices[1].identity).vendor = crate::model::Vendor::Amd;
        assert!(
            next_validation(&snapshot, &RetryAt::new(), now).is_none(),
            "no CUDA probe for AMD"
        );
    }

    #[test]
    fn child_output_is_interpreted() {
        let busy =
            r#"{"error":{"kind":"busy","message":{"reason":"compute_processes","message":"GPU 0 is not idle"}}}"#;
        assert_eq!(
            interpret(busy, Some(3)),
            Outcome::Skipped(BusyReason::ComputeProcesses, "GPU 0 is not idle".into())
        );
        let no_driver = r#"{"error":{"kind":"no_driver","message":"libcuda.so.1 is not installed"}}"#;
        assert_eq!(
            interpret(no_driver, Some(2)),
            Outcome::Error(RunError::Error, "libcuda.so.1 is not installed".into())
        );
        match interpret("", None) {
            Outcome::Error(RunError::Error, why) => assert!(why.contains("a signal"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_busy_error_round_trips_through_json() {
        let error = ProbeError::Busy {
            reason: BusyReason::Utilization,
            message: "GPU 3 is not idle".into(),
        };
        let text = serde_json::json!({ "error": error }).to_string();
        assert_eq!(
            interpret(&text, Some(3)),
            Outcome::Skipped(BusyReason::Utilization, "GPU 3 is not idle".into())
        );
    }

    #[test]
    fn records_count_runs_and_keep_the_latest_report() {
        let state = ProbeState::default();
        record(
            &state,
            "GPU-0",
            0,
            Outcome::Skipped(BusyReason::Utilization, "busy".into()),
            Suspects::default(),
        );
        record(
            &state,
            "GPU-0",
            0,
            Outcome::Skipped(BusyReason::Utilization, "busy".into()),
            Suspects::default(),
        );
        record(
            &state,
            "GPU-0",
            0,
            Outcome::Error(RunError::Timeout, "killed".into()),
            Suspects::default(),
        );
        let s = state.get();
        assert_eq!(s.skipped[&("GPU-0".to_string(), "utilization")], 2);
        assert_eq!(s.runs[&("GPU-0".to_string(), "timeout")], 1);
        assert_eq!(s.last_error["GPU-0"].why, "killed");
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
        record(
            &state,
            "GPU-0",
            0,
            Outcome::Report(Box::new(report)),
            Suspects::default(),
        );
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

    /// The sweep ended a validation as skipped after the snapshot that chose the GPU was
    /// taken: the validation as it is now decides, so the GPU is not probed (no skip or run
    /// is counted for it) and the skipped outcome stays; a pending one is looked at.
    #[test]
    fn a_validation_the_sweep_ended_is_not_probed() {
        let settings = ChildSettings {
            nvml: Nvml::default(),
            probe: Probe::default(),
        };
        let busy = device(0, true, 0.5, 500);
        let pending = Validation {
            since: 100.0,
            why: "idle sweep".into(),
            outcome: None,
            kind: crate::model::health::ValidationKind::Sweep,
        };
        let ended = Validation {
            outcome: Some(ValidationOutcome::Skipped {
                at: 120.0,
                detail: "job 7 runs on GPU 1".into(),
            }),
            ..pending.clone()
        };
        let stop = crate::service::stop::Shutdown::new().handle("test");
        let state = ProbeState::default();
        let store = Store::new();
        let lifecycle = crate::lifecycle::Lifecycle::default();
        let with = |v: &Validation| {
            crate::lifecycle::Command::Seed(crate::lifecycle::ServiceState {
                validations: Arc::new([("GPU-0".to_string(), v.clone())].into()),
                ..Default::default()
            })
        };
        lifecycle.apply(with(&ended));
        let handles = Handles {
            store: &store,
            state: &state,
            lifecycle: &lifecycle,
            stop: &stop,
        };
        assert_eq!(validate(&busy, &settings, &handles), VALIDATION_RETRY);
        assert!(state.get().skipped.is_empty() && state.get().runs.is_empty());
        assert_eq!(lifecycle.get().validations["GPU-0"], ended);
        // Pending: looked at (the GPU is busy, so the look is a skip, counted).
        lifecycle.apply(with(&pending));
        validate(&busy, &settings, &handles);
        assert_eq!(state.get().skipped[&("GPU-0".to_string(), "utilization")], 1);
    }
}
