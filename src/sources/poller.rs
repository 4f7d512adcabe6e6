//! The poll loop: one OS thread per GPU, a coordinator that gives each round a deadline.
//!
//! Every `poll.interval` the coordinator asks each GPU's thread for a poll and waits until
//! all have answered or `poll.timeout` has passed, then hands the round to the publisher. A
//! GPU whose driver call hangs keeps only its own thread busy: it is reported as not
//! answering (`gpu_up` 0) and is not asked again until its thread comes back, while the
//! other GPUs are polled on time. Vendor libraries are only ever called from these threads,
//! never from the async runtime that serves HTTP.
//!
//! The coordinator knows backends only through the [`Backend`] trait: it asks each for new
//! device pollers before a round and tells it when all of its GPUs said the library is
//! gone. It reads the settings at every round, so a reload changes the interval and the
//! deadline at once, and makes the backends anew only when their own settings changed;
//! counters and histograms carry on either way.

use crate::backend::{self, Backend, BackendState, DevicePoller, PollReport, XidEvents};
use crate::config::settings::{BackendSettings, LiveSwitches, SharedSettings};
use crate::model::{
    BackendStatus, DeviceIdentity, DeviceReadings, DeviceSnapshot, DurationHistogram, PersistenceAttempts,
};
use crate::service::logging::RateLimiter;
use crate::service::mailbox::{Receiver, Sender, mailbox};
use crate::service::notify;
use crate::snapshot::publisher::{Publisher, RoundPart};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, TrySendError};
use std::time::{Duration, Instant, SystemTime};

/// What a GPU thread sends back: which worker (by id), for which round, and what it read.
struct PollResult {
    worker: usize,
    round: u64,
    report: PollReport,
    elapsed: Duration,
}

/// The coordinator's view of one GPU and its thread.
struct Worker {
    /// Unique for the coordinator's lifetime: a backend's workers are replaced after its
    /// library is initialised anew while other backends' stay, so positions are not stable.
    id: usize,
    /// Which of the coordinator's backends handed out this GPU's poller.
    backend: usize,
    /// The `backend` label its durations and errors are counted under.
    backend_name: &'static str,
    identity: DeviceIdentity,
    /// Sends a round number; the thread polls and answers on the results channel.
    requests: Option<Sender<u64>>,
    /// The round this GPU's thread is working on, if any.
    busy_with: Option<u64>,
    up: bool,
    lost: bool,
    last_good_poll: Option<SystemTime>,
    readings: Option<DeviceReadings>,
    /// Alive while its thread runs (a GPU reset waits for the library's threads to end).
    alive: std::sync::Weak<()>,
}

impl Worker {
    /// This round's answer: readings (up), or none (the driver says the GPU is lost). Logs
    /// the changes: lost, and answering again.
    fn take(&mut self, readings: Option<DeviceReadings>) {
        let (was_up, was_lost) = (self.up, self.lost);
        let answered_before = self.last_good_poll.is_some();
        self.up = readings.is_some();
        self.lost = readings.is_none();
        self.readings = readings;
        if self.up {
            self.last_good_poll = Some(SystemTime::now());
            if !was_up && (was_lost || answered_before) {
                crate::gpu_log!(
                    log::Level::Info,
                    self.identity,
                    "GPU {} ({}) answers again",
                    self.identity.index,
                    self.identity.uuid
                );
            }
        } else if !was_lost {
            crate::gpu_log!(
                log::Level::Error,
                self.identity,
                "GPU {} ({}, {}) is lost: the driver reports it fell off the bus",
                self.identity.index,
                self.identity.uuid,
                self.identity.pci_bus_id
            );
        }
    }
}

/// Adds one answer's durations, call times and errors to its backend's counters.
fn count_calls(status: &mut BackendStatus, result: &PollResult) {
    status.poll_duration.observe(result.elapsed.as_secs_f64());
    status.call_seconds += result.report.call_seconds;
    if result.report.call_times.is_empty() {
        *status.call_seconds_by_call.entry("all").or_insert(0.0) += result.report.call_seconds;
    }
    for (call, seconds) in &result.report.call_times {
        *status.call_seconds_by_call.entry(call).or_insert(0.0) += seconds;
    }
    for (call, _) in &result.report.errors {
        *status.errors.entry(call).or_insert(0) += 1;
    }
}

/// One line per failing call, GPU and error, rate-limited.
fn log_call_errors(limiter: &mut RateLimiter, identity: &DeviceIdentity, errors: &[(&'static str, String)]) {
    for (call, error) in errors {
        let key = format!("{}/{call}/{error}", identity.uuid);
        if let Some(held_back) = limiter.allow(&key) {
            let repeats = crate::service::logging::held_back_suffix(held_back);
            crate::gpu_log!(
                log::Level::Warn,
                identity,
                "GPU {} ({}): {call} failed: {error}{repeats}",
                identity.index,
                identity.uuid
            );
        }
    }
}

/// This round's answers per backend: how many, and how many said the library is gone.
#[derive(Default, Clone, Copy)]
struct Answers {
    answered: usize,
    library_gone: usize,
}

/// Runs poll rounds and hands them to the publisher. Used by the daemon's poll thread and,
/// for a single round, by `gpuwarden check`.
pub struct Coordinator {
    settings: Arc<SharedSettings>,
    publisher: Arc<Publisher>,
    /// Where backends send XID events: the daemon listens for them, a one-shot `check` not.
    xid_events: Option<XidEvents>,
    /// What the current backends were made from; None before the first round.
    made_from: Option<BackendSettings>,
    /// Switches the pollers read at every poll, set from the settings at every round.
    live: LiveSwitches,
    backends: Vec<Box<dyn Backend>>,
    workers: Vec<Worker>,
    results_tx: Sender<PollResult>,
    results_rx: Receiver<PollResult>,
    round: u64,
    answers: Vec<Answers>,
    /// Counters by backend label; they outlive the backends (a reload makes new ones).
    backend_status: BTreeMap<&'static str, BackendStatus>,
    /// Shared with the rounds' snapshots; copied only when an attempt is counted (rare).
    persistence_attempts: Arc<PersistenceAttempts>,
    round_duration: DurationHistogram,
    log_limiter: RateLimiter,
    next_worker_id: usize,
    last_status: String,
    /// The numbers `last_status` says, when it says them.
    last_counts: Option<crate::model::HealthCounts>,
    /// A GPU reset's request to let go of the GPU libraries (remediation/auto.rs).
    hold: crate::backend::LibraryHold,
    /// The backends (slots) let go of for the hold in force.
    holding: Option<Vec<usize>>,
}

impl Coordinator {
    pub fn new(settings: Arc<SharedSettings>, publisher: Arc<Publisher>, xid_events: Option<XidEvents>) -> Coordinator {
        let (results_tx, results_rx) = mailbox(usize::MAX);
        Coordinator {
            settings,
            publisher,
            xid_events,
            made_from: None,
            live: LiveSwitches::default(),
            backends: Vec::new(),
            workers: Vec::new(),
            results_tx,
            results_rx,
            round: 0,
            answers: Vec::new(),
            backend_status: BTreeMap::new(),
            persistence_attempts: Arc::default(),
            round_duration: DurationHistogram::new(),
            log_limiter: RateLimiter::new(Duration::from_secs(300)),
            next_worker_id: 0,
            last_status: String::new(),
            last_counts: None,
            hold: Default::default(),
            holding: None,
        }
    }

    /// Lets go of the GPU libraries whenever `hold` asks (a GPU reset; remediation/auto.rs).
    pub fn with_hold(mut self, hold: crate::backend::LibraryHold) -> Coordinator {
        self.hold = hold;
        self
    }

    /// Follows the GPU reset's hold: lets go of the backends that hold GPU handles (their GPUs
    /// read as down meanwhile), says when every thread using them ended and the library was
    /// shut down, and initialises them again once the hold is lifted.
    fn follow_hold(&mut self) {
        if !self.hold.requested() {
            for slot in self.holding.take().unwrap_or_default() {
                self.backends[slot].resume();
            }
            return;
        }
        if self.holding.is_none() {
            let slots: Vec<usize> = (0..self.backends.len()).filter(|s| self.backends[*s].hold()).collect();
            for worker in self.workers.iter_mut().filter(|w| slots.contains(&w.backend)) {
                // Dropping the request channel ends the thread after its current poll.
                worker.requests = None;
                worker.busy_with = None;
                worker.up = false;
                worker.readings = None;
            }
            self.holding = Some(slots);
        }
        let slots = self.holding.clone().unwrap_or_default();
        let threads_ended = self
            .workers
            .iter()
            .filter(|w| slots.contains(&w.backend))
            .all(|w| w.alive.strong_count() == 0);
        if !self.hold.released() && threads_ended && slots.iter().all(|s| self.backends[*s].shut_down_held()) {
            self.hold.set_released();
        }
    }

    /// Makes the backends from the settings at the first round, and again when a reload
    /// changed what they are made from. The old GPU threads end after their current poll
    /// (a hung one stays hung, harmlessly); the counters stay.
    fn apply_backend_settings(&mut self) {
        let settings = self.settings.current();
        // The switches apply at once, to the pollers there are: no new backends for them.
        self.live.apply(&settings.config);
        // Compared in place: this runs every round, and the settings change only at a reload.
        if self.made_from.as_ref() == Some(&settings.backends) {
            return;
        }
        let wanted = settings.backends.clone();
        if self.made_from.is_some() {
            log::info!("reload: the GPU backends' settings changed; enumerating the GPUs again");
        }
        self.workers.clear();
        // New backends: a GPU reset's hold in force lets go of them at once.
        self.holding = None;
        self.backends = backend::from_settings(&wanted, &self.live, self.xid_events.as_ref());
        self.answers = vec![Answers::default(); self.backends.len()];
        let names: Vec<&'static str> = self
            .backends
            .iter()
            .flat_map(|b| b.status())
            .map(|state| state.name)
            .collect();
        self.backend_status.retain(|name, _| names.contains(name));
        for name in names {
            self.backend_status.entry(name).or_default();
        }
        self.made_from = Some(wanted);
    }

    /// Asks every backend for new GPUs; a backend's new pollers replace its old ones.
    fn discover(&mut self) {
        for slot in 0..self.backends.len() {
            let Some(pollers) = self.backends[slot].discover() else {
                continue;
            };
            self.workers.retain(|w| w.backend != slot);
            for poller in pollers {
                let worker = self.spawn_worker(poller, slot);
                self.workers.push(worker);
            }
        }
    }

    /// A one-line summary for systemd's STATUS=, sent when it changes.
    pub fn report_status(&mut self) {
        let snapshot = self.publisher.store().latest();
        let counts = (!snapshot.devices.is_empty()).then(|| snapshot.health_counts());
        // Most rounds change nothing: the line is written only when the numbers moved (or
        // someone else overwrote STATUS=, which empties `last_status`).
        if counts.is_some() && counts == self.last_counts && !self.last_status.is_empty() {
            return;
        }
        self.last_counts = counts;
        let status = if let Some(counts) = counts {
            counts.to_string()
        } else {
            self.backends
                .iter()
                .find_map(|b| b.waiting_for())
                .unwrap_or_else(|| match self.backends.is_empty() {
                    true => "every GPU backend is disabled in the config".to_string(),
                    false => "no GPU found: serving gpuwarden's own metrics".to_string(),
                })
        };
        if status != self.last_status {
            notify::status(&status);
            self.last_status = status;
        }
    }

    fn spawn_worker(&mut self, mut poller: Box<dyn DevicePoller>, backend: usize) -> Worker {
        let identity = poller.identity().clone();
        let backend_name = poller.backend_name();
        let id = self.next_worker_id;
        self.next_worker_id += 1;
        // One request in flight at most: a busy (hung) thread is simply not asked again.
        let (requests_tx, requests_rx) = mailbox::<u64>(1);
        let results = self.results_tx.clone();
        let running = Arc::new(());
        let alive = Arc::downgrade(&running);
        let spawned = std::thread::Builder::new()
            .name(format!("poll-gpu{}", identity.index))
            .spawn(move || {
                let _running = running;
                while let Some(round) = requests_rx.recv() {
                    let started = Instant::now();
                    let report = poller.poll();
                    let result = PollResult {
                        worker: id,
                        round,
                        report,
                        elapsed: started.elapsed(),
                    };
                    if results.send(result).is_err() {
                        break;
                    }
                }
            });
        let requests = match spawned {
            Ok(_) => Some(requests_tx),
            Err(e) => {
                log::error!("cannot start the poll thread for GPU {}: {e}", identity.index);
                None
            }
        };
        Worker {
            id,
            backend,
            backend_name,
            identity,
            requests,
            busy_with: None,
            up: false,
            lost: false,
            last_good_poll: None,
            readings: None,
            alive,
        }
    }

    /// One round: ask every idle GPU, wait for answers until the deadline, publish.
    pub fn run_round(&mut self) {
        self.apply_backend_settings();
        self.follow_hold();
        self.discover();
        let timeout = self.settings.current().config.poll.timeout;
        self.round += 1;
        let round = self.round;
        let started = Instant::now();
        let deadline = started + timeout;

        self.answers.iter_mut().for_each(|a| *a = Answers::default());
        // Answers that came in after an earlier round's deadline free their thread.
        while let Some(late) = self.results_rx.try_recv() {
            self.accept(late, round);
        }

        let mut outstanding = 0;
        for worker in &mut self.workers {
            if worker.busy_with.is_some() {
                continue;
            }
            if let Some(requests) = &worker.requests {
                match requests.try_send(round) {
                    Ok(()) => {
                        worker.busy_with = Some(round);
                        outstanding += 1;
                    }
                    Err(TrySendError::Full(_)) => {}
                    Err(TrySendError::Disconnected(_)) => worker.requests = None,
                }
            }
        }
        while outstanding > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.results_rx.recv_timeout(left) {
                Ok(result) => {
                    if result.round == round {
                        outstanding -= 1;
                    }
                    self.accept(result, round);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }

        // Whoever has not answered this round is not up; their old readings are dropped.
        for worker in &mut self.workers {
            if worker.busy_with.is_some() || worker.requests.is_none() {
                // Rate-limited per GPU: a GPU that keeps missing a tight deadline flaps.
                if worker.up
                    && let Some(held_back) = self
                        .log_limiter
                        .allow(&format!("{}/not-answering", worker.identity.uuid))
                {
                    let repeats = crate::service::logging::held_back_suffix(held_back);
                    crate::gpu_log!(
                        log::Level::Warn,
                        worker.identity,
                        "GPU {} ({}) did not answer within {:?}; reporting it down until it does{repeats}",
                        worker.identity.index,
                        worker.identity.uuid,
                        timeout
                    );
                }
                worker.up = false;
                worker.readings = None;
            }
        }
        if !self.workers.is_empty() {
            self.round_duration.observe(started.elapsed().as_secs_f64());
        }
        self.start_over_where_the_library_is_gone();
        self.publish();
    }

    /// Every GPU of a backend said its library is gone (the driver was unloaded, and may be
    /// coming back, as in a driver upgrade): stop its GPU threads, keep its GPUs listed as
    /// down (so their alerts fire and their XID counts stay), and let the backend initialise
    /// again.
    fn start_over_where_the_library_is_gone(&mut self) {
        for (slot, answers) in self.answers.clone().into_iter().enumerate() {
            if answers.answered == 0 || answers.library_gone < answers.answered {
                continue;
            }
            self.backends[slot].library_gone();
            for worker in self.workers.iter_mut().filter(|w| w.backend == slot) {
                // Dropping the request channel ends the thread after its current poll.
                worker.requests = None;
                worker.busy_with = None;
                worker.up = false;
                worker.readings = None;
            }
        }
    }

    /// Takes in one GPU's answer; only an answer for the current round counts as up.
    fn accept(&mut self, result: PollResult, current_round: u64) {
        let Some(worker) = self.workers.iter_mut().find(|w| w.id == result.worker) else {
            return;
        };
        worker.busy_with = None;
        // A backend that started reading through a second source (ROCm SMI) gets its entry now.
        let status = self.backend_status.entry(worker.backend_name).or_default();
        count_calls(status, &result);
        log_call_errors(&mut self.log_limiter, &worker.identity, &result.report.errors);
        if let Some(outcome) = result.report.persistence {
            *Arc::make_mut(&mut self.persistence_attempts)
                .entry((worker.identity.uuid.clone(), outcome.label()))
                .or_insert(0) += 1;
        }
        if result.round != current_round {
            return;
        }
        if let Some(answers) = self.answers.get_mut(worker.backend) {
            answers.answered += 1;
            if result.report.library_gone {
                answers.library_gone += 1;
            }
        }
        if result.report.library_gone {
            // Not this GPU's fault: the driver went away. Handled for the whole backend at
            // the end of the round.
            worker.up = false;
            worker.readings = None;
            return;
        }
        worker.take(result.report.readings);
    }

    fn publish(&mut self) {
        let states: BTreeMap<&'static str, BackendState> = self
            .backends
            .iter()
            .flat_map(|b| b.status())
            .map(|state| (state.name, state))
            .collect();
        // A backend label no backend reports any more (ROCm SMI not tried) goes.
        self.backend_status.retain(|name, _| states.contains_key(name));
        for (name, state) in states {
            let status = self.backend_status.entry(name).or_default();
            status.up = state.up;
            status.note = state.note;
            status.absent = state.absent;
        }
        // The round's readings move into the snapshot: every round sets them anew (an answer,
        // or none), so a deep copy per GPU a second is not needed.
        let mut devices: Vec<DeviceSnapshot> = self
            .workers
            .iter_mut()
            .map(|w| DeviceSnapshot {
                identity: w.identity.clone(),
                up: w.up,
                lost: w.lost,
                last_good_poll: w.last_good_poll,
                readings: w.readings.take().map(Arc::new),
                hw_slowdown_seen: None,
                error_growth: Default::default(),
                clock_event_starts: Vec::new(),
                health: Default::default(),
            })
            .collect();
        let processes = &self.settings.current().config.processes;
        if processes.per_process {
            crate::attribution::processes::describe(&mut devices, processes);
        }
        self.publisher.publish_round(RoundPart {
            backends: Arc::new(self.backend_status.clone()),
            devices,
            persistence_attempts: self.persistence_attempts.clone(),
            round_duration: self.round_duration.clone(),
        });
    }
}

/// What the daemon tells the running poll loop.
enum Control {
    /// The settings were replaced: apply them and poll now.
    Reload,
    /// Someone else wrote systemd's STATUS= (the READY message): send the health summary
    /// again after the next round, even if it did not change.
    StatusOverwritten,
    /// The daemon's stop signal fired.
    Stop,
}

/// The running poll loop; dropping the handle does not stop it, the daemon's stop signal
/// does (the loop's thread drops its handle when it ends).
pub struct PollLoop {
    control: Sender<Control>,
}

impl PollLoop {
    /// Runs the first round before returning, so the first scrape already has data.
    pub fn start(mut coordinator: Coordinator, stop: crate::service::stop::Stop) -> std::io::Result<PollLoop> {
        coordinator.run_round();
        coordinator.report_status();
        let watchdog = notify::watchdog_interval();
        let (control_tx, control_rx) = mailbox::<Control>(usize::MAX);
        // The loop waits on its channel, so the stop reaches it there.
        let wake = control_tx.clone();
        stop.on_stop(move || {
            let _ = wake.send(Control::Stop);
        });
        std::thread::Builder::new()
            .name("poll-coordinator".into())
            .spawn(move || {
                let first = coordinator.settings.current().config.poll.interval;
                let mut next = Instant::now().checked_add(first).unwrap_or_else(Instant::now);
                let mut last_ping = Instant::now();
                if watchdog.is_some() {
                    notify::watchdog();
                }
                // Wake at the next round, at once after a reload, or to stop.
                loop {
                    match control_rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                        Err(RecvTimeoutError::Timeout) | Ok(Control::Reload) => {}
                        Ok(Control::StatusOverwritten) => {
                            coordinator.last_status.clear();
                            continue;
                        }
                        Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                    coordinator.run_round();
                    coordinator.report_status();
                    // The watchdog is fed from here, so a poll loop that stops turning (a hung
                    // NVML initialisation, a deadlock) stops the pings and systemd restarts us.
                    if let Some(every) = watchdog
                        && last_ping.elapsed() >= every
                    {
                        notify::watchdog();
                        last_ping = Instant::now();
                    }
                    // Keep to the interval's grid; after a long round or a reload, start
                    // again from now.
                    let interval = coordinator.settings.current().config.poll.interval;
                    next = next.checked_add(interval).unwrap_or(next);
                    if next < Instant::now() || next > Instant::now() + interval {
                        next = Instant::now().checked_add(interval).unwrap_or(next);
                    }
                }
                drop(coordinator);
                drop(stop);
            })?;
        Ok(PollLoop { control: control_tx })
    }

    /// The settings were replaced: the loop applies them and polls at once (a round that
    /// is running finishes first). Never waits.
    pub fn reload(&self) {
        let _ = self.control.send(Control::Reload);
    }

    /// systemd's STATUS= was just written by someone else: the next round sends the health
    /// summary again.
    pub fn status_overwritten(&self) {
        let _ = self.control.send(Control::StatusOverwritten);
    }
}
