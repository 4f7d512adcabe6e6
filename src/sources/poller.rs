//! The poll loop: one OS thread per GPU (gpu_thread.rs), a coordinator that gives each round
//! a deadline.
//!
//! Every `poll.interval` each GPU's thread polls its GPU, at the time the rounds' timetable
//! ([`Grid`]) gives, and answers the coordinator, which waits until all have answered or
//! `poll.timeout` has passed since the round was due, then hands the round to the publisher.
//! The threads keep the time themselves so that a round wakes the coordinator once, for the
//! answers, not also to ask (the first round, a reload's round and `gpuwarden check` are
//! asked for). A GPU whose driver call hangs keeps only its own thread busy: it is reported
//! as not answering (`gpu_up` 0) and counted on again only once its thread comes back, while
//! the other GPUs are polled on time. Vendor libraries are only ever called from these
//! threads, never from the async runtime that serves HTTP.
//!
//! The coordinator knows backends only through the [`Backend`] trait: it asks each for new
//! device pollers before a round and tells it when all of its GPUs said the library is
//! gone. It reads the settings at every round, so a reload changes the interval and the
//! deadline at once, and makes the backends anew only when their own settings changed;
//! counters and histograms carry on either way.

use crate::backend::{self, Backend, BackendState, DevicePoller, XidEvents};
use crate::config::settings::{BackendSettings, LiveSwitches, SharedSettings};
use crate::model::{BackendStatus, DeviceIdentity, DeviceSnapshot, DurationHistogram, PersistenceAttempts};
use crate::service::logging::RateLimiter;
use crate::service::notify;
use crate::service::versioned::Versioned;
use crate::sources::gpu_thread::{self, PollResult, Request, Worker, plan_after};
use crate::sources::grid::{Grid, SharedGrid};
use crate::sources::library_hold::HoldFollower;
use crate::sources::round::{PolledGpus, RoundPart, RoundSink};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TrySendError, channel};
use std::time::{Duration, Instant};

/// What reaches the coordinator: a GPU thread's answer, or word from the daemon.
// Unboxed: an answer moves through once a round, and a box would cost an allocation each.
#[allow(clippy::large_enum_variant)]
enum Note {
    Answer(PollResult),
    Control(Control),
}

/// Adds one answer's durations, call times and errors to its backend's counters.
fn count_calls(status: &mut BackendStatus, result: &PollResult) {
    status.poll_duration.observe(result.elapsed.as_secs_f64());
    status.call_seconds += result.report.call_seconds;
    if result.report.call_times.is_empty() {
        status.call_seconds_by_call.add("all", result.report.call_seconds);
    }
    for (call, seconds) in &result.report.call_times {
        status.call_seconds_by_call.add(call, *seconds);
    }
    for (call, _) in &result.report.errors {
        status.errors.add(call, 1);
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

/// Runs poll rounds and hands each on (to the publisher, as the daemon and `check` wire it; the
/// poller holds none). Used by the daemon's poll thread and, for a single round, by
/// `gpuwarden check`.
pub(crate) struct Coordinator {
    settings: Arc<SharedSettings>,
    /// Where each round goes; it answers the verdict's counts after it.
    hand_over: RoundSink,
    /// The GPUs each round polled, for the side sources a GPU turns on.
    polled: Arc<Versioned<PolledGpus>>,
    /// The verdict's counts after the last round handed on.
    counts: Option<crate::model::HealthCounts>,
    /// Where backends send XID events: the daemon listens for them, a one-shot `check` not.
    xid_events: Option<XidEvents>,
    /// What the current backends were made from; None before the first round.
    made_from: Option<BackendSettings>,
    /// Switches the pollers read at every poll, set from the settings at every round.
    live: LiveSwitches,
    backends: Vec<Box<dyn Backend>>,
    workers: Vec<Worker>,
    results_tx: Sender<Note>,
    results_rx: Receiver<Note>,
    /// Word from the daemon that came while a round was asked for: handled after it.
    pending: VecDeque<Control>,
    /// When the GPU threads poll on their own; unset until the poll loop starts.
    grid: SharedGrid,
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
    /// A GPU reset's request to let go of the GPU libraries (remediation/auto.rs), followed.
    hold: HoldFollower,
}

impl Coordinator {
    pub(crate) fn new(
        settings: Arc<SharedSettings>,
        hand_over: RoundSink,
        polled: Arc<Versioned<PolledGpus>>,
        xid_events: Option<XidEvents>,
    ) -> Coordinator {
        let (results_tx, results_rx) = channel();
        Coordinator {
            settings,
            hand_over,
            polled,
            counts: None,
            xid_events,
            made_from: None,
            live: LiveSwitches::default(),
            backends: Vec::new(),
            workers: Vec::new(),
            results_tx,
            results_rx,
            pending: VecDeque::new(),
            grid: SharedGrid::default(),
            round: 0,
            answers: Vec::new(),
            backend_status: BTreeMap::new(),
            persistence_attempts: Arc::default(),
            round_duration: DurationHistogram::new(),
            log_limiter: RateLimiter::new(Duration::from_secs(300)),
            next_worker_id: 0,
            last_status: String::new(),
            last_counts: None,
            hold: HoldFollower::default(),
        }
    }

    /// Lets go of the GPU libraries whenever `hold` asks (a GPU reset; remediation/auto.rs).
    pub(crate) fn with_hold(mut self, hold: crate::backend::LibraryHold) -> Coordinator {
        self.hold = HoldFollower::new(hold);
        self
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
        self.hold.new_backends();
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
    pub(crate) fn report_status(&mut self) {
        let counts = self.counts;
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

    fn spawn_worker(&mut self, poller: Box<dyn DevicePoller>, backend: usize) -> Worker {
        let identity = Arc::new(poller.identity().clone());
        let backend_name = poller.backend_name();
        let id = self.next_worker_id;
        self.next_worker_id += 1;
        let results = self.results_tx.clone();
        let (requests, alive) = gpu_thread::spawn(id, &identity, poller, self.grid.clone(), move |answer| {
            results.send(Note::Answer(answer)).is_ok()
        });
        Worker {
            id,
            backend,
            backend_name,
            identity,
            requests,
            busy_with: None,
            answered: 0,
            up: false,
            lost: false,
            last_good_poll: None,
            readings: None,
            alive,
        }
    }

    /// One round asked for (`gpuwarden check`): ask every idle GPU, wait for answers until
    /// the deadline, publish.
    pub(crate) fn run_round(&mut self) {
        self.prepare();
        self.asked_round(self.round + 1, u64::MAX);
    }

    /// The poll loop's first round, or a reload's: the GPU threads are asked to poll at once,
    /// and the timetable starts again from now.
    fn round_now(&mut self) {
        // The timetable's rounds that a thread may owe now (the one waited for, the next) are
        // left behind: their answers count as late.
        let waited = self.round;
        let round = waited + 2;
        self.prepare();
        self.asked_round(round, waited);
        // The timetable starts an interval after this round, as the next round always did.
        let interval = self.settings.current().config.poll.interval;
        let now = Instant::now();
        self.grid.set(Grid {
            first: round + 1,
            origin: now.checked_add(interval).unwrap_or(now),
            interval,
        });
        for worker in &self.workers {
            if let Some(requests) = &worker.requests {
                // Full: a request waits already, and the thread reads the timetable after it.
                let _ = requests.try_send(Request::Timetable);
            }
        }
        self.expect_next();
    }

    /// Makes the backends and GPU threads ready for a round: settings, a GPU reset's hold, new GPUs.
    fn prepare(&mut self) {
        self.apply_backend_settings();
        self.hold.follow(&mut self.backends, &mut self.workers);
        self.discover();
    }

    /// A round asked for (after [`Self::prepare`]): every GPU thread not stuck in a call owing
    /// an answer from before round `late_before` is asked to poll now; waits for the answers
    /// until the deadline.
    fn asked_round(&mut self, round: u64, late_before: u64) {
        let timeout = self.settings.current().config.poll.timeout;
        self.round = round;
        let started = Instant::now();
        let deadline = started + timeout;

        self.answers.iter_mut().for_each(|a| *a = Answers::default());
        // Answers that came in after an earlier round's deadline free their thread.
        while let Ok(note) = self.results_rx.try_recv() {
            self.take_note(note, round);
        }

        for worker in &mut self.workers {
            if worker.busy_with.is_some_and(|owed| owed < late_before) {
                continue;
            }
            if let Some(requests) = &worker.requests {
                match requests.try_send(Request::Poll(round)) {
                    Ok(()) => worker.busy_with = Some(round),
                    Err(TrySendError::Full(_)) => {}
                    Err(TrySendError::Disconnected(_)) => worker.requests = None,
                }
            }
        }
        while self.owed(round) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.results_rx.recv_timeout(left) {
                Ok(note) => self.take_note(note, round),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        self.finish_round(round, started, timeout);
    }

    /// An answer is taken in; word from the daemon waits until the asked round is over.
    fn take_note(&mut self, note: Note, round: u64) {
        match note {
            Note::Answer(result) => self.accept(result, round),
            Note::Control(control) => self.pending.push_back(control),
        }
    }

    /// One round on the timetable: the GPU threads poll on their own when it is due; waits
    /// for their answers until all came or the deadline passed, publishes, and makes ready
    /// for the next. Word from the daemon that cuts the wait short (a reload, the stop) is
    /// given back; `None` when the round was published.
    fn timetabled_round(&mut self) -> Option<Control> {
        if let Some(control) = self.pending.pop_front() {
            return Some(control);
        }
        let timeout = self.settings.current().config.poll.timeout;
        let now = Instant::now();
        let Some((round, due)) = self
            .grid
            .get()
            .and_then(|g| g.next_after(self.round, now.checked_sub(timeout).unwrap_or(now)))
        else {
            // No timetable (or one past what the clock holds): ask, as at the start.
            return Some(Control::Reload);
        };
        self.round = round;
        self.answers.iter_mut().for_each(|a| *a = Answers::default());
        let deadline = due.checked_add(timeout).unwrap_or(due);
        loop {
            // Until every answer owed for this round came (or, with none owed, until the round
            // is due, when it is published), at most until the deadline.
            let until = if self.owed(round) { deadline } else { due };
            match self
                .results_rx
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(Note::Answer(result)) => self.accept(result, round),
                Ok(Note::Control(Control::StatusOverwritten)) => self.last_status.clear(),
                Ok(Note::Control(control)) => return Some(control),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        self.finish_round(round, due, timeout);
        self.prepare();
        self.expect_next();
        None
    }

    /// A GPU thread that has not said which round it polls next (a new one) is taken to poll
    /// the timetable's next round: that is the answer the coordinator waits for.
    fn expect_next(&mut self) {
        let Some((next, _)) = plan_after(&self.grid, self.round) else {
            return;
        };
        for worker in &mut self.workers {
            if worker.requests.is_some() && worker.busy_with.is_none() {
                worker.busy_with = Some(next);
            }
        }
    }

    /// The end of a round: whoever did not answer it is down; the round is published.
    fn finish_round(&mut self, round: u64, started: Instant, timeout: Duration) {
        // Whoever has not answered this round is not up; their old readings are dropped.
        for worker in &mut self.workers {
            if worker.answered != round {
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

    /// Takes in one GPU's answer; only an answer for the current round counts as up. The
    /// thread then owes the round it said it polls next.
    fn accept(&mut self, result: PollResult, current_round: u64) {
        let Some(worker) = self.workers.iter_mut().find(|w| w.id == result.worker) else {
            return;
        };
        // Asked again since (a reload), the thread still owes the round it was asked for.
        if worker.busy_with.is_none_or(|owed| owed == result.round) {
            worker.busy_with = result.next.filter(|_| worker.requests.is_some());
        }
        // A backend that started reading through a second source (ROCm SMI) gets its entry now.
        let status = self.backend_status.entry(worker.backend_name).or_default();
        count_calls(status, &result);
        log_call_errors(&mut self.log_limiter, &worker.identity, &result.report.errors);
        if let Some(outcome) = result.report.persistence {
            *Arc::make_mut(&mut self.persistence_attempts)
                .entry((worker.identity.uuid.clone(), outcome))
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
        worker.answered = current_round;
        worker.take(result.report.readings);
    }

    /// Whether a GPU thread still owes an answer for `round`.
    fn owed(&self, round: u64) -> bool {
        self.workers.iter().any(|w| w.busy_with == Some(round))
    }

    fn publish(&mut self) {
        let states: Vec<BackendState> = self.backends.iter().flat_map(|b| b.status()).collect();
        // A backend label no backend reports any more (ROCm SMI not tried) goes.
        self.backend_status
            .retain(|name, _| states.iter().any(|state| state.name == *name));
        for state in states {
            let status = self.backend_status.entry(state.name).or_default();
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
                history: Default::default(),
                health: Default::default(),
            })
            .collect();
        let processes = &self.settings.current().config.processes;
        if processes.per_process {
            crate::attribution::processes::describe(&mut devices, processes);
        }
        let polled = PolledGpus::of(&devices);
        self.counts = (self.hand_over)(RoundPart {
            backends: Arc::new(self.backend_status.clone()),
            devices,
            persistence_attempts: self.persistence_attempts.clone(),
            round_duration: self.round_duration.clone(),
        });
        // After the hand-over, as the store's first snapshot was: the sources that a GPU
        // turns on look every second until then.
        self.polled.set_if_changed(polled);
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
pub(crate) struct PollLoop {
    control: Sender<Note>,
}

impl PollLoop {
    /// Runs the first round before returning, so the first scrape already has data.
    pub(crate) fn start(mut coordinator: Coordinator, stop: crate::service::stop::Stop) -> std::io::Result<PollLoop> {
        coordinator.round_now();
        coordinator.report_status();
        let watchdog = notify::watchdog_interval();
        // Word reaches the loop where it waits for the GPU threads' answers.
        let control = coordinator.results_tx.clone();
        let wake = control.clone();
        stop.on_stop(move || {
            let _ = wake.send(Note::Control(Control::Stop));
        });
        std::thread::Builder::new()
            .name("poll-coordinator".into())
            .spawn(move || {
                let mut last_ping = Instant::now();
                if watchdog.is_some() {
                    notify::watchdog();
                }
                // A round on the timetable, at once after a reload, or the stop.
                loop {
                    match coordinator.timetabled_round() {
                        None => {}
                        Some(Control::Reload) => coordinator.round_now(),
                        Some(Control::StatusOverwritten) => {
                            coordinator.last_status.clear();
                            continue;
                        }
                        Some(Control::Stop) => break,
                    }
                    coordinator.report_status();
                    // The watchdog is fed from here, so a poll loop that stops turning (a hung
                    // NVML initialisation, a deadlock) stops the pings and systemd restarts us.
                    if let Some(every) = watchdog
                        && last_ping.elapsed() >= every
                    {
                        notify::watchdog();
                        last_ping = Instant::now();
                    }
                }
                drop(coordinator);
                drop(stop);
            })?;
        Ok(PollLoop { control })
    }

    /// The settings were replaced: the loop applies them and polls at once (a round that
    /// is running finishes first). Never waits.
    pub(crate) fn reload(&self) {
        let _ = self.control.send(Note::Control(Control::Reload));
    }

    /// systemd's STATUS= was just written by someone else: the next round sends the health
    /// summary again.
    pub(crate) fn status_overwritten(&self) {
        let _ = self.control.send(Note::Control(Control::StatusOverwritten));
    }
}
