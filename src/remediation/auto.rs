//! `remediation.mode: auto`: a thread that looks at every published snapshot and, for one GPU
//! at a time whose ladder step is a GPU reset, resets it when every guard holds (guards.rs):
//!
//! 1. asks the poller to let go of NVML (a reset needs every handle on the GPU closed, the
//!    daemon's own included) and waits until its threads ended and no `/dev/nvidia*` file is
//!    open in the daemon;
//! 2. turns persistence mode off when it was on, runs the reset, turns it back on
//!    (command.rs: each a child in its own process group, killed at `remediation.timeout`);
//! 3. lets NVML be initialised again;
//! 4. success: clears the GPU ("GPU reset by gpuwarden's automatic remediation") and starts its
//!    validation, so the probe decides its return to service; failure: the node needs a reboot.
//!
//! The thread sleeps until a publish shows something to act on (`needs_a_look`), a reload or
//! the stop: on a node with nothing to heal it costs nothing, whatever the mode.
//!
//! Any GPU whose step is a reboot (the driver asks, a lost GPU, the catalog, or a reset that
//! failed or did not hold) marks the node: the `reboot_required` node finding, the marker
//! file, `remediation.reboot_command` once. gpuwarden never reboots.

use super::{command, guards};
use crate::backend::LibraryHold;
use crate::config::settings::SharedSettings;
use crate::config::{Remediation, RemediationMode};
use crate::lifecycle::{RemediationChange, ValidationStart};
use crate::model::health::{Clear, Step, Validation, ValidationKind};
use crate::model::remediation::{Attempt, AttemptOutcome, RebootRequired, Refusal};
use crate::model::{DeviceSnapshot, Snapshot, Vendor};
use crate::service::stop::Stop;
use crate::snapshot::store::Store;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a reset waits for the poller to let go of NVML.
const RELEASE_WAIT: Duration = Duration::from_secs(30);
/// Who the journal and the clear name.
pub(crate) const BY: &str = "gpuwarden remediation";

/// What the executor reads and writes.
pub(crate) struct Executor {
    pub store: Arc<Store>,
    pub settings: Arc<SharedSettings>,
    /// The service state's owner, where remediation's progress goes: a reset done is its
    /// attempt, the GPU's clear and its validation, one transition.
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
    pub hold: LibraryHold,
    pub journal: Option<crate::journal::Journal>,
    /// Where the daemon's open files are listed (`/proc/self/fd`).
    pub fd_dir: std::path::PathBuf,
    /// Since when the node's verdict has been unhealthy without a break, kept by a hook on
    /// every publish.
    pub unhealthy_since: Arc<UnhealthySince>,
}

/// Since when (Unix seconds) the node's verdict has been unhealthy without a break; None while
/// it is not.
#[derive(Debug, Default)]
pub(crate) struct UnhealthySince(std::sync::Mutex<Option<f64>>);

impl UnhealthySince {
    pub(crate) fn get(&self) -> Option<f64> {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The verdict as a publish shows it: the first unhealthy moment is kept, anything else
    /// breaks the run.
    fn saw(&self, unhealthy: bool, now: f64) {
        let mut since = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match (unhealthy, *since) {
            (false, _) => *since = None,
            (true, None) => *since = Some(now),
            (true, Some(_)) => {}
        }
    }
}

/// Keeps `unhealthy_since` at every publish: exact, where a look once a second could miss a
/// moment the verdict was not unhealthy (and the Slurm check resumed the node).
pub(crate) fn follow_verdict(store: &Store, unhealthy_since: Arc<UnhealthySince>) {
    store.on_publish(Box::new(move |snapshot| {
        let unhealthy = snapshot.worst_health() == Some(crate::model::health::HealthState::Unhealthy);
        unhealthy_since.saw(unhealthy, crate::model::unix_now());
    }));
}

/// The longest the thread sleeps with nothing to look at; a publish that needs a look, a
/// reload or the stop wakes it sooner.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// Starts the executor's thread. It looks only when a publish shows something to act on (a
/// GPU whose step is a reset or a reboot, a reboot mark, a reset held back), at a reload and
/// at the stop: a node with nothing to heal never wakes it, whatever the mode.
pub(crate) fn spawn(executor: Executor, stop: Stop) -> std::io::Result<()> {
    let wanted = Arc::new(std::sync::atomic::AtomicBool::new(true));
    executor.store.on_publish(Box::new({
        let settings = executor.settings.clone();
        let wanted = wanted.clone();
        move |snapshot| {
            if needs_a_look(snapshot) {
                wanted.store(true, std::sync::atomic::Ordering::SeqCst);
                settings.wake_waiters();
            }
        }
    }));
    std::thread::Builder::new().name("remediation".into()).spawn(move || {
        stop.on_stop({
            let settings = executor.settings.clone();
            move || settings.wake_waiters()
        });
        let mut reloads = executor.settings.reloads();
        while !stop.is_stopped() {
            executor.tick(&stop);
            wait_for_work(&executor.settings, &mut reloads, &wanted, &stop);
        }
    })?;
    Ok(())
}

/// Whether a published snapshot gives the executor something to look at.
fn needs_a_look(snapshot: &Snapshot) -> bool {
    let remediation = &snapshot.remediation;
    let auto = snapshot.health_limits.remediation.as_ref().is_some_and(|r| r.auto);
    if !auto {
        // Only to let go of what auto held back before a reload turned it off.
        return !remediation.held_back.is_empty();
    }
    remediation.reboot_required.is_some()
        || !remediation.held_back.is_empty()
        || snapshot
            .devices
            .iter()
            .any(|d| wants_reset(d) || step_is(d, Step::RebootRequired))
}

/// Sleeps until a publish that needs a look (`wanted`), a reload, the stop, or [`IDLE_WAIT`].
fn wait_for_work(settings: &SharedSettings, reloads: &mut u64, wanted: &std::sync::atomic::AtomicBool, stop: &Stop) {
    use std::sync::atomic::Ordering;
    let deadline = Instant::now() + IDLE_WAIT;
    // Other waiters' wake-ups (the probe scheduler's) return the wait early: look again.
    while !stop.is_stopped() && !wanted.swap(false, Ordering::SeqCst) && Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let now = settings.wait_for_reload(*reloads, left, || stop.is_stopped() || wanted.load(Ordering::SeqCst));
        if now != *reloads {
            *reloads = now;
            return;
        }
    }
}

impl Executor {
    /// One look: let a cleared reboot go, mark a needed one, then reset the first GPU every
    /// guard lets through and record why the others wait.
    fn tick(&self, stop: &Stop) {
        let settings = self.settings.current();
        let config = &settings.config.remediation;
        let snapshot = self.store.latest();
        if config.mode != RemediationMode::Auto {
            self.change(RemediationChange::HeldBack(BTreeMap::new()));
            return;
        }
        // Act only on a snapshot that shows what this thread did last: a reset, its clear.
        let current = self.lifecycle.get();
        if !Arc::ptr_eq(&snapshot.remediation, &current.remediation) || !Arc::ptr_eq(&snapshot.clears, &current.clears)
        {
            return;
        }
        let now = crate::model::unix_now();
        self.let_a_cleared_reboot_go(&snapshot, config);
        if let Some((device, why)) = needs_reboot(&snapshot) {
            self.require_reboot(device, why, config, stop, None);
            return;
        }
        let paused = pause_reason(config);
        let context = guards::Context {
            now,
            boot: crate::service::clock::boot_seconds(),
            max_resets_per_day: config.max_resets_per_day,
            paused: paused.as_deref(),
            unhealthy_since: self.unhealthy_since.get(),
        };
        let mut held_back: BTreeMap<String, Refusal> = BTreeMap::new();
        let mut go = None;
        for device in snapshot.devices.iter().filter(|d| wants_reset(d)) {
            match guards::check(&snapshot, device, &context) {
                Ok(()) if go.is_none() => go = Some(device),
                Ok(()) => {}
                Err(refusal) => {
                    held_back.insert(device.identity.uuid.clone(), refusal);
                }
            }
        }
        self.note_held_back(held_back);
        let Some(device) = go else {
            return;
        };
        // Not while a probe runs (its child holds the GPUs): the guards are looked at again
        // once it is over. No probe starts while the reset runs.
        let _work = match crate::probe::GPU_WORK.try_lock() {
            Ok(work) => work,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        self.reset(device, config, &settings.config.health, stop);
    }

    /// Keeps why each GPU waits, logging a new reason once.
    fn note_held_back(&self, held_back: BTreeMap<String, Refusal>) {
        let before = self.lifecycle.get();
        for (uuid, refusal) in &held_back {
            if before.remediation.held_back.get(uuid) != Some(refusal) {
                log::info!(gpu_uuid = uuid; "automatic GPU reset held back by guard {}: {}", refusal.guard, refusal.why);
            }
        }
        self.change(RemediationChange::HeldBack(held_back));
    }

    /// Runs the reset of `device` and what follows it.
    fn reset(&self, device: &DeviceSnapshot, config: &Remediation, health: &crate::config::Health, stop: &Stop) {
        let uuid = device.identity.uuid.clone();
        let index = device.identity.index;
        let why = device
            .health
            .next_step
            .as_ref()
            .map(|s| s.why.clone())
            .unwrap_or_default();
        log::warn!(gpu_uuid = uuid; "GPU {index} ({}): automatic remediation resets it: {why}", device.identity.pci_bus_id);
        self.change(RemediationChange::ResetStarted { uuid: uuid.clone() });
        let clock = Instant::now();
        let mut attempt = Attempt {
            uuid: uuid.clone(),
            index,
            pci_bus_id: device.identity.pci_bus_id.clone(),
            step: Step::GpuReset,
            why,
            started: crate::model::unix_now(),
            duration_seconds: 0.0,
            outcome: AttemptOutcome::Interrupted {
                why: crate::model::remediation::NO_OUTCOME.to_string(),
            },
            output: String::new(),
            this_boot: true,
            started_boot: crate::service::clock::boot_seconds(),
        };
        let mut output = String::new();
        let ended = self.reset_steps(device, &attempt, config, stop, &mut output);
        attempt.duration_seconds = clock.elapsed().as_secs_f64();
        attempt.output = crate::model::remediation::bounded_output(&output);
        attempt.outcome = match &ended {
            Ended::Done => AttemptOutcome::Succeeded,
            Ended::Failed(why) => AttemptOutcome::Failed { why: why.clone() },
            Ended::Interrupted(why) => AttemptOutcome::Interrupted { why: why.clone() },
            Ended::NotStarted(why) => {
                // Nothing ran: no attempt, no mark; the GPU keeps its findings for the next run.
                log::warn!(gpu_uuid = uuid; "GPU {index}: not reset: {why}");
                self.change(RemediationChange::ResetNotStarted);
                return;
            }
        };
        match &ended {
            Ended::Done => {
                log::warn!(gpu_uuid = uuid; "GPU {index}: reset done in {:.1} s; it returns to service once its probe passes", attempt.duration_seconds);
                let returned = self.return_to_service(device, health.validate_after_clear);
                self.change(RemediationChange::ResetEnded {
                    uuid,
                    attempt: Box::new(attempt),
                    returned: Some(returned),
                });
                return;
            }
            // The reboot mark, the failed attempt and the end of the reset go into the state in
            // one update: no snapshot shows the GPU let go before the mark (the `remediating`
            // finding holds it unhealthy until then), nor the mark without the failed reset.
            Ended::Failed(why) => {
                log::error!(gpu_uuid = uuid; "GPU {index}: the GPU reset failed: {why}; the node needs a reboot");
                let why = format!("the GPU reset of GPU {index} failed: {why}");
                self.require_reboot(device, why, config, stop, Some((uuid, Box::new(attempt))));
                return;
            }
            Ended::Interrupted(why) => log::warn!(
                gpu_uuid = uuid;
                "GPU {index}: the reset was interrupted ({why}); not a failed reset: the GPU keeps its findings, \
                 the next run looks at it again, and the attempt counts against remediation.max_resets_per_day"
            ),
            Ended::NotStarted(_) => {}
        }
        self.change(RemediationChange::ResetEnded {
            uuid,
            attempt: Box::new(attempt),
            returned: None,
        });
    }

    /// Tells the service state's owner of a step.
    fn change(&self, change: RemediationChange) {
        self.lifecycle.apply(crate::lifecycle::Command::Remediation(change));
    }

    /// Records that the reset of `attempt`'s GPU starts, and waits until the journal has it:
    /// a daemon stopped or killed during the reset finds it at its next start (an attempt with
    /// no outcome counts against the day's budget), so a restart loop cannot reset without end.
    fn record_start(&self, device: &DeviceSnapshot, attempt: &Attempt) {
        let Some(journal) = &self.journal else {
            return;
        };
        let row = crate::journal::event::Event::new(
            attempt.started,
            crate::journal::event::Kind::Remediation,
            Some(crate::journal::event::GpuRef::of(&device.identity)),
            format!("{} started: {}", attempt.step, attempt.why),
            serde_json::json!({"attempt_started": attempt}),
        );
        if !journal.record_and_wait(row, JOURNAL_WAIT) {
            log::warn!(
                "the journal did not confirm the reset's start within {JOURNAL_WAIT:?}; resetting anyway (the \
                 daemon's own count still holds remediation.max_resets_per_day until it restarts)"
            );
        }
    }

    /// Lets go of NVML, runs the commands, takes NVML back: how it ended.
    fn reset_steps(
        &self,
        device: &DeviceSnapshot,
        attempt: &Attempt,
        config: &Remediation,
        stop: &Stop,
        output: &mut String,
    ) -> Ended {
        self.hold.request();
        let ended = self.with_nvml_let_go(device, attempt, config, stop, output);
        self.hold.lift();
        ended
    }

    fn with_nvml_let_go(
        &self,
        device: &DeviceSnapshot,
        attempt: &Attempt,
        config: &Remediation,
        stop: &Stop,
        output: &mut String,
    ) -> Ended {
        let waited = Instant::now();
        while !self.hold.released() {
            if stop.is_stopped() {
                return Ended::NotStarted("the daemon stops; NVML was not let go of yet".into());
            }
            if waited.elapsed() > RELEASE_WAIT {
                return Ended::Failed(format!(
                    "the daemon could not let go of NVML within {RELEASE_WAIT:?} (a poll thread hangs in the driver?); not reset"
                ));
            }
            stop.sleep(Duration::from_millis(50));
        }
        let open = nvidia_files_open(&self.fd_dir);
        if !open.is_empty() {
            return Ended::Failed(format!(
                "the daemon still holds {} open after letting go of NVML; not reset",
                open.join(", ")
            ));
        }
        self.record_start(device, attempt);
        if stop.is_stopped() {
            return Ended::NotStarted("the daemon stops; no command ran".into());
        }
        let bus = &device.identity.pci_bus_id;
        let persistence_was_on = device.readings.as_ref().and_then(|r| r.persistence_mode) == Some(true);
        let mut steps = Steps { output, stop };
        if persistence_was_on && let Some(off) = &config.persistence_off_command {
            let ran = steps.run(off.for_gpu(bus), config.timeout, false);
            if let Some(why) = ran.failed {
                // Whatever the off command came to, persistence goes back on.
                steps.restore_persistence(config, bus, &device.identity.uuid);
                return match stop.is_stopped() {
                    true => Ended::Interrupted(format!(
                        "the daemon stopped while persistence mode was turned off ({why})"
                    )),
                    false => Ended::Failed(format!("turning persistence mode off failed ({why}); not reset")),
                };
            }
        }
        let reset = steps.run(config.reset_command.for_gpu(bus), config.timeout, false);
        if persistence_was_on {
            steps.restore_persistence(config, bus, &device.identity.uuid);
        }
        match reset.failed {
            None => Ended::Done,
            Some(why) if stop.is_stopped() => Ended::Interrupted(why),
            Some(why) => Ended::Failed(why),
        }
    }

    /// A clear of the reset GPU, and its validation: the probe decides its return. Journals the
    /// clear and gives both back, for the owner to apply with the reset's end.
    fn return_to_service(&self, device: &DeviceSnapshot, validate: bool) -> (Clear, ValidationStart) {
        let at = crate::model::unix_now();
        let reason = "GPU reset by gpuwarden's automatic remediation".to_string();
        let validation = (validate && device.identity.vendor == Vendor::Nvidia).then(|| Validation {
            since: at,
            why: format!("{reason} (remediation.mode auto)"),
            outcome: None,
            kind: ValidationKind::Repair,
        });
        // On record before the owner applies it: a daemon killed in between finds the clear.
        if let Some(journal) = &self.journal {
            let row = crate::journal::event::Event::new(
                at,
                crate::journal::event::Kind::Clear,
                Some(crate::journal::event::GpuRef::of(&device.identity)),
                format!("cleared by {BY}: {reason}"),
                serde_json::json!({"reason": reason, "by": BY, "validation": validation.is_some()}),
            );
            if !journal.record_and_wait(row, JOURNAL_WAIT) {
                log::warn!("the journal did not confirm the reset's clear within {JOURNAL_WAIT:?}; clearing anyway");
            }
        }
        let clear = Clear {
            at,
            reason,
            by: BY.to_string(),
        };
        (
            clear,
            validation.map_or(ValidationStart::Nothing, ValidationStart::Start),
        )
    }

    /// Marks the node as needing a reboot (once): the state (node finding, metrics, journal),
    /// the marker file, the configured command. `also` changes the state in the same update
    /// as the mark, whether or not the node was marked already.
    fn require_reboot(
        &self,
        device: &DeviceSnapshot,
        why: String,
        config: &Remediation,
        stop: &Stop,
        ended: Option<(String, Box<Attempt>)>,
    ) {
        if self.lifecycle.get().remediation.reboot_required.is_some() {
            self.change(RemediationChange::RebootRequired { mark: None, ended });
            return;
        }
        let mark = RebootRequired {
            since: crate::model::unix_now(),
            uuid: device.identity.uuid.clone(),
            index: device.identity.index,
            why: why.clone(),
        };
        log::error!(gpu_uuid = mark.uuid; "the node needs a reboot: {why}; gpuwarden does not reboot it");
        // On record before the marker file: a daemon stopped right after finds the mark in
        // the journal at its next start and keeps the marker in step with it (daemon.rs).
        if let Some(journal) = &self.journal {
            let gpu = crate::journal::event::GpuRef::of(&device.identity);
            let row = crate::journal::writer::remediation_rows::reboot_row(&mark, gpu);
            if !journal.record_and_wait(row, JOURNAL_WAIT) {
                log::warn!("the journal did not confirm the reboot mark within {JOURNAL_WAIT:?}");
            }
        }
        if !config.reboot_marker.as_os_str().is_empty()
            && let Err(e) = super::marker::write(&config.reboot_marker, &why)
        {
            log::warn!("cannot write the reboot marker {}: {e}", config.reboot_marker.display());
        }
        self.change(RemediationChange::RebootRequired {
            mark: Some(mark),
            ended,
        });
        if let Some(reboot) = &config.reboot_command {
            let ran = command::run(&reboot.for_gpu(&device.identity.pci_bus_id), config.timeout, stop);
            match ran.failed {
                None => log::info!("remediation.reboot_command ran: {}", ran.output.trim()),
                Some(f) => log::warn!("remediation.reboot_command failed ({f}): {}", ran.output.trim()),
            }
        }
    }

    /// An operator's clear of the GPU that needed the reboot lets the mark go.
    fn let_a_cleared_reboot_go(&self, snapshot: &Snapshot, config: &Remediation) {
        let Some(mark) = &snapshot.remediation.reboot_required else {
            return;
        };
        if snapshot.clears.get(&mark.uuid).is_some_and(|c| c.at > mark.since) {
            log::info!("GPU {} was cleared: the node's reboot mark goes", mark.index);
            if !config.reboot_marker.as_os_str().is_empty()
                && let Err(e) = super::marker::remove_ours(&config.reboot_marker)
                && config.reboot_marker.exists()
            {
                log::info!("the reboot marker {}: {e}", config.reboot_marker.display());
            }
            self.change(RemediationChange::RebootLetGo);
        }
    }
}

/// How a reset's steps ended.
enum Ended {
    Done,
    /// The reset (or a step it needs) failed: the node needs a reboot.
    Failed(String),
    /// The daemon stopped while a command ran (it was killed): not a failure.
    Interrupted(String),
    /// The daemon stopped before any command ran.
    NotStarted(String),
}

/// The commands of one reset and what they printed.
struct Steps<'a> {
    output: &'a mut String,
    stop: &'a Stop,
}

/// The longest the persistence-on command may take while the daemon stops: it starts at the
/// stop, and the daemon waits for it (`ask_for_grace`), well inside the unit's 10 s
/// TimeoutStopSec.
const RESTORE_WAIT: Duration = Duration::from_secs(5);
/// The longest the executor waits for the journal to confirm a row.
const JOURNAL_WAIT: Duration = Duration::from_secs(5);

impl Steps<'_> {
    /// Runs one command, its output kept; `unstoppable`: the daemon's stop does not kill it.
    fn run(&mut self, words: Vec<String>, timeout: Duration, unstoppable: bool) -> command::Ran {
        // A handle of a stop signal of its own, which nothing fires.
        let never = unstoppable.then(|| crate::service::stop::Shutdown::new().handle("remediation-restore"));
        let stop = never.as_ref().unwrap_or(self.stop);
        let ran = command::run(&words, timeout, stop);
        let step = format!(
            "$ {}\n{}{}\n",
            shlex::try_join(words.iter().map(String::as_str)).unwrap_or_default(),
            ran.output,
            ran.failed.as_deref().map(|f| format!("[{f}]")).unwrap_or_default()
        );
        self.output.push_str(&crate::model::remediation::bounded_to(
            &step,
            crate::model::remediation::STEP_OUTPUT,
        ));
        ran
    }

    /// Turns persistence mode back on, whatever came before: a stop does not cut it short
    /// (a GPU left with persistence off loses its state at the next idle moment), and while
    /// the daemon stops it gets [`RESTORE_WAIT`] at most.
    fn restore_persistence(&mut self, config: &Remediation, bus: &str, uuid: &str) {
        let Some(on) = &config.persistence_on_command else {
            return;
        };
        let timeout = match self.stop.is_stopped() {
            true => config.timeout.min(RESTORE_WAIT),
            false => config.timeout,
        };
        // The daemon's stop waits for it (its own time-out is shorter): the command is a
        // child that dies with the daemon.
        self.stop.ask_for_grace(timeout.min(RESTORE_WAIT));
        if let Some(why) = self.run(on.for_gpu(bus), timeout, true).failed {
            log::warn!(gpu_uuid = uuid; "turning persistence mode back on failed: {why}");
        }
    }
}

/// Whether the ladder's step for `device` is a GPU reset (NVIDIA GPUs; nothing else resets
/// this way).
fn wants_reset(device: &DeviceSnapshot) -> bool {
    device.identity.vendor == Vendor::Nvidia && step_is(device, Step::GpuReset)
}

/// Whether the ladder's next step for `device` is `step`.
fn step_is(device: &DeviceSnapshot, step: Step) -> bool {
    device.health.next_step.as_ref().is_some_and(|s| s.step == step)
}

/// The first GPU whose ladder step is a reboot, and why.
fn needs_reboot(snapshot: &Snapshot) -> Option<(&DeviceSnapshot, String)> {
    if snapshot.remediation.reboot_required.is_some() {
        return None;
    }
    snapshot.devices.iter().find_map(|d| {
        let step = d.health.next_step.as_ref().filter(|s| s.step == Step::RebootRequired)?;
        Some((d, format!("GPU {}: {}", d.identity.index, step.why)))
    })
}

/// Why automatic remediation is paused now: the config key, or the pause file (looked at,
/// never read or followed: its presence is the signal). A pause file that cannot be looked
/// for (a directory gpuwarden may not search) pauses too: acting is what needs proof.
fn pause_reason(config: &Remediation) -> Option<String> {
    if config.paused {
        return Some("remediation.paused is true".to_string());
    }
    let file = &config.pause_file;
    if file.as_os_str().is_empty() {
        return None;
    }
    match std::fs::symlink_metadata(file) {
        Ok(_) => Some(format!("the pause file {} exists", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(format!(
            "cannot tell whether the pause file {} exists ({e}); paused until it can be looked for",
            file.display()
        )),
    }
}

/// The NVIDIA device files (`/dev/nvidia*`) open in the process whose descriptors `fd_dir`
/// lists: none may be left when the reset runs. Bounded: a process has few descriptors.
pub(crate) fn nvidia_files_open(fd_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(fd_dir) else {
        return Vec::new();
    };
    let mut open: Vec<String> = entries
        .filter_map(Result::ok)
        .take(100_000)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| target.starts_with("/dev/nvidia"))
        .collect();
    open.sort();
    open.dedup();
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::RuleId;

    #[test]
    fn open_nvidia_device_files_are_found_by_their_links() {
        let dir = std::env::temp_dir().join(format!("gpuwarden-fds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("/dev/nvidia0", dir.join("9")).unwrap();
        std::os::unix::fs::symlink("/dev/nvidia0", dir.join("10")).unwrap();
        std::os::unix::fs::symlink("/dev/nvidiactl", dir.join("11")).unwrap();
        std::os::unix::fs::symlink("/dev/null", dir.join("0")).unwrap();
        std::os::unix::fs::symlink("socket:[1234]", dir.join("3")).unwrap();
        assert_eq!(nvidia_files_open(&dir), ["/dev/nvidia0", "/dev/nvidiactl"]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            nvidia_files_open(&dir).is_empty(),
            "no such directory: nothing known open"
        );
    }

    #[test]
    fn the_verdict_is_followed_at_every_publish_and_any_break_restarts_it() {
        use crate::model::health::{Finding, HealthState};
        let store = Store::new();
        let since = Arc::new(UnhealthySince::default());
        follow_verdict(&store, since.clone());
        let snapshot = |severity: HealthState| Snapshot {
            node_findings: vec![Finding {
                reason: RuleId::RebootRequired.into(),
                severity,
                message: String::new(),
                subject: None,
            }],
            ..Default::default()
        };
        store.publish(snapshot(HealthState::Unhealthy));
        let first = since.get().expect("unhealthy: since when");
        store.publish(snapshot(HealthState::Unhealthy));
        assert_eq!(since.get(), Some(first), "still the first moment");
        store.publish(snapshot(HealthState::Degraded));
        assert_eq!(since.get(), None, "a moment not unhealthy breaks it");
        std::thread::sleep(Duration::from_millis(5));
        store.publish(snapshot(HealthState::Unhealthy));
        assert!(since.get().unwrap() > first);
    }

    /// A step that prints 100 MB keeps its share of the output, not the whole of it: the
    /// later steps' output is kept too (issue #51, item 11).
    #[test]
    fn each_step_keeps_a_share_of_the_output() {
        let shutdown = crate::service::stop::Shutdown::new();
        let stop = shutdown.handle("test");
        let mut output = String::new();
        let mut steps = Steps {
            output: &mut output,
            stop: &stop,
        };
        let words = |script: &str| vec!["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
        let timeout = Duration::from_secs(20);
        steps.run(words("head -c 100000000 /dev/zero | tr '\\0' x"), timeout, false);
        steps.run(words("echo the reset said this"), timeout, false);
        steps.run(words("echo persistence back on"), timeout, true);
        let kept = crate::model::remediation::bounded_output(&output);
        assert!(kept.contains("the reset said this"), "{kept}");
        assert!(kept.contains("persistence back on"), "{kept}");
        assert!(kept.contains("bytes cut]"), "the flood is cut, and says so");
        assert!(kept.len() <= crate::model::remediation::MAX_OUTPUT);
    }

    #[test]
    fn the_pause_is_the_key_or_the_files_presence() {
        let mut config = Remediation::default();
        let file = std::env::temp_dir().join(format!("gpuwarden-pause-{}", std::process::id()));
        config.pause_file = file.clone();
        assert_eq!(pause_reason(&config), None);
        std::fs::write(&file, "").unwrap();
        assert!(pause_reason(&config).unwrap().contains("pause file"));
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/nonexistent", &file).unwrap();
        assert!(
            pause_reason(&config).is_some(),
            "a dangling link is present too: pausing is the safe side"
        );
        std::fs::remove_file(&file).unwrap();
        config.paused = true;
        assert_eq!(pause_reason(&config).as_deref(), Some("remediation.paused is true"));
    }

    /// A stop while the reset waits for the poller to let go of NVML (here it never does) is
    /// not a failed reset: no command runs, no reboot mark or marker file, no attempt counted
    /// against the day's budget, and the GPU is no longer `running` (issue #51, item 3).
    #[test]
    fn a_stop_during_the_nvml_release_wait_runs_nothing_and_marks_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("reset-ran");
        let marker = dir.path().join("reboot-required");
        let config = Remediation {
            reset_command: crate::config::CommandLine::of(&["touch", ran.to_str().unwrap()]),
            persistence_off_command: None,
            persistence_on_command: None,
            reboot_marker: marker.clone(),
            ..Remediation::default()
        };
        let executor = Executor {
            store: Arc::new(Store::new()),
            settings: Arc::new(SharedSettings::new(crate::config::settings::Settings::serving_nothing(
                crate::config::Config::default(),
            ))),
            lifecycle: Arc::default(),
            hold: LibraryHold::default(),
            journal: None,
            fd_dir: dir.path().join("no-fds"),
            unhealthy_since: Arc::default(),
        };
        let device = DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", Default::default());
        let shutdown = crate::service::stop::Shutdown::new();
        let stop = shutdown.handle("test");
        let started = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                shutdown.stop();
            });
            executor.reset(&device, &config, &crate::config::Health::default(), &stop);
        });
        assert!(
            started.elapsed() < RELEASE_WAIT,
            "ended by the stop, not the wait's limit"
        );
        assert!(!ran.exists(), "no command ran");
        assert!(!marker.exists(), "no marker file");
        let state = executor.lifecycle.get().remediation.clone();
        assert_eq!(state.running, None);
        assert!(state.reboot_required.is_none());
        assert!(state.attempts.is_empty(), "{:?}", state.attempts);
        assert!(
            !executor.hold.requested(),
            "the hold is lifted: the poller takes NVML back"
        );
    }
}
