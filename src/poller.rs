//! The poll loop: one OS thread per GPU, a coordinator that gives each round a deadline.
//!
//! Every `poll.interval` the coordinator asks each GPU's thread for a poll and waits until
//! all have answered or `poll.timeout` has passed, then publishes one whole snapshot. A GPU
//! whose driver call hangs keeps only its own thread busy: it is reported as not answering
//! (`gpu_up` 0) and is not asked again until its thread comes back, while the other GPUs
//! are polled on time. Vendor libraries are only ever called from these threads, never from
//! the async runtime that serves HTTP.
//!
//! When NVML cannot be loaded or initialised (no driver, a driver being reloaded) the
//! coordinator tries again with a doubling back-off, and the daemon serves its own metrics
//! with `gpuwarden_backend_up{backend="nvml"} 0` meanwhile.

use crate::backend::amd::{rocm_smi, sysfs};
use crate::backend::nvml::{self, NvmlBackend};
use crate::backend::{DevicePoller, PollReport};
use crate::config::Config;
use crate::health::{self, HealthState};
use crate::logging::RateLimiter;
use crate::model::{
    BackendStatus, DeviceIdentity, DeviceReadings, DeviceSnapshot, DurationHistogram, PersistenceAttempts, Snapshot,
};
use crate::notify;
use crate::probe::schedule::ProbeState;
use crate::store::Store;
use crate::xid::nvml_events;
use crate::xid::store::XidStore;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

/// What a GPU thread sends back: which worker (by id), for which round, and what it read.
struct PollResult {
    device: usize,
    round: u64,
    report: PollReport,
    elapsed: Duration,
}

/// The coordinator's view of one GPU and its thread.
struct Worker {
    /// Unique for the coordinator's lifetime: NVML's workers are replaced after a driver
    /// reload while other backends' stay, so positions are not stable.
    id: usize,
    backend: &'static str,
    identity: DeviceIdentity,
    /// Sends a round number; the thread polls and answers on the results channel.
    requests: Option<SyncSender<u64>>,
    /// The round this GPU's thread is working on, if any.
    busy_with: Option<u64>,
    up: bool,
    lost: bool,
    last_good_poll: Option<SystemTime>,
    readings: Option<DeviceReadings>,
}

enum NvmlState {
    Disabled,
    Waiting {
        next_try: Instant,
        delay: Duration,
        failures: u32,
    },
    Ready,
}

/// Runs poll rounds and publishes their snapshots. Used by the daemon's poll thread and,
/// for a single round, by `gpuwarden check`.
pub struct Coordinator {
    config: Config,
    store: Arc<Store>,
    nvml: NvmlState,
    workers: Vec<Worker>,
    results_tx: Sender<PollResult>,
    results_rx: Receiver<PollResult>,
    round: u64,
    backends: BTreeMap<&'static str, BackendStatus>,
    persistence_attempts: PersistenceAttempts,
    round_duration: DurationHistogram,
    log_limiter: RateLimiter,
    xids: Arc<XidStore>,
    /// The daemon listens for NVML XID events; a one-shot `check` does not.
    start_event_thread: bool,
    /// This round's answers, and how many said NVML is gone (driver unloaded).
    answered: usize,
    answered_nvml_gone: usize,
    /// Tells this coordinator's NVML event thread to end (on reload or stop).
    event_thread_stop: Arc<AtomicBool>,
    last_status: String,
    /// Scheduled probe results, copied into every snapshot; None outside the daemon.
    probes: Option<Arc<ProbeState>>,
    next_worker_id: usize,
    /// AMD GPUs are enumerated from sysfs once, at the first round.
    amd_enumerated: bool,
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.event_thread_stop.store(true, Ordering::Relaxed);
    }
}

impl Coordinator {
    pub fn new(config: Config, store: Arc<Store>, xids: Arc<XidStore>) -> Coordinator {
        let (results_tx, results_rx) = mpsc::channel();
        let nvml = if config.nvml.enabled {
            NvmlState::Waiting {
                next_try: Instant::now(),
                delay: config.nvml.retry_initial,
                failures: 0,
            }
        } else {
            NvmlState::Disabled
        };
        let mut backends = BTreeMap::new();
        if config.nvml.enabled {
            backends.insert(nvml::BACKEND, BackendStatus::default());
        }
        if config.amd.enabled {
            backends.insert(sysfs::BACKEND, BackendStatus::default());
            if config.amd.rocm_smi.enabled {
                backends.insert(rocm_smi::BACKEND, BackendStatus::default());
            }
        }
        Coordinator {
            config,
            store,
            nvml,
            workers: Vec::new(),
            results_tx,
            results_rx,
            round: 0,
            backends,
            persistence_attempts: BTreeMap::new(),
            round_duration: DurationHistogram::new(),
            log_limiter: RateLimiter::new(Duration::from_secs(300)),
            xids,
            start_event_thread: true,
            answered: 0,
            answered_nvml_gone: 0,
            event_thread_stop: Arc::new(AtomicBool::new(false)),
            last_status: String::new(),
            probes: None,
            next_worker_id: 0,
            amd_enumerated: false,
        }
    }

    /// Every GPU says NVML is not initialised or the driver is not loaded: the driver was
    /// unloaded (and may be coming back, as in a driver upgrade). Stop the old GPU threads and
    /// event thread, keep the GPUs listed as down (so their alerts fire and their XID counts
    /// stay), and initialise NVML again with the usual back-off.
    fn start_over(&mut self) {
        log::warn!(
            "NVML stopped answering on every GPU (not initialised / driver not loaded): the driver was unloaded or \
             reloaded; initialising NVML again"
        );
        self.event_thread_stop.store(true, Ordering::Relaxed);
        self.event_thread_stop = Arc::new(AtomicBool::new(false));
        for worker in self.workers.iter_mut().filter(|w| w.backend == nvml::BACKEND) {
            // Dropping the request channel ends the thread after its current poll.
            worker.requests = None;
            worker.busy_with = None;
            worker.up = false;
            worker.readings = None;
        }
        if let Some(status) = self.backends.get_mut(nvml::BACKEND) {
            status.up = false;
        }
        self.nvml = NvmlState::Waiting {
            next_try: Instant::now(),
            delay: self.config.nvml.retry_initial,
            failures: 0,
        };
    }

    /// Takes over the counters of the coordinator this one replaces (after a reload), so
    /// error and persistence counters and the duration histograms do not reset.
    pub fn inherit_counters(&mut self, previous: Coordinator) {
        for (name, status) in &previous.backends {
            if let Some(mine) = self.backends.get_mut(name) {
                mine.poll_duration = status.poll_duration.clone();
                mine.call_seconds = status.call_seconds;
                mine.errors = status.errors.clone();
            }
        }
        self.persistence_attempts = previous.persistence_attempts.clone();
        self.round_duration = previous.round_duration.clone();
    }

    /// A one-line summary for systemd's STATUS=, sent when it changes.
    pub fn report_status(&mut self) {
        let snapshot = self.store.latest();
        // Any GPU at all (NVIDIA or AMD), or NVML ready: the health summary.
        let status = match self.nvml {
            NvmlState::Waiting { .. } if snapshot.devices.is_empty() => {
                "NVML not available: serving gpuwarden's own metrics".to_string()
            }
            NvmlState::Disabled if snapshot.devices.is_empty() => "NVML disabled in the config".to_string(),
            _ => health_summary(&snapshot),
        };
        if status != self.last_status {
            notify::status(&status);
            self.last_status = status;
        }
    }

    /// For one-shot use (`check`): no NVML event thread.
    pub fn without_event_thread(mut self) -> Coordinator {
        self.start_event_thread = false;
        self
    }

    /// Loads NVML if it is not loaded yet and its retry time has come.
    fn ensure_nvml(&mut self) {
        let NvmlState::Waiting {
            next_try,
            delay,
            failures,
        } = self.nvml
        else {
            return;
        };
        if Instant::now() < next_try {
            return;
        }
        let loaded = NvmlBackend::load(&self.config.nvml).and_then(|backend| {
            let pollers = backend.device_pollers(self.config.persistence.enable, self.config.poll.slow_interval)?;
            Ok((backend, pollers))
        });
        match loaded {
            Ok((backend, pollers)) => {
                let driver = backend.driver_version().unwrap_or_default();
                log::info!("NVML ready (driver {driver}): {} NVIDIA GPU(s)", pollers.len());
                if self.config.xid.nvml_events && self.start_event_thread {
                    let gpus = pollers
                        .iter()
                        .map(|p| (p.identity().index, p.identity().pci_bus_id.clone()))
                        .collect();
                    if let Err(e) =
                        nvml_events::spawn(backend.nvml(), gpus, self.xids.clone(), self.event_thread_stop.clone())
                    {
                        log::error!("cannot start the NVML XID event thread: {e}");
                    }
                }
                // After a driver reload the old NVML workers go; other backends' stay.
                self.workers.retain(|w| w.backend != nvml::BACKEND);
                for poller in pollers {
                    let worker = self.spawn_worker(Box::new(poller), nvml::BACKEND);
                    self.workers.push(worker);
                }
                self.nvml = NvmlState::Ready;
                if let Some(status) = self.backends.get_mut(nvml::BACKEND) {
                    status.up = true;
                }
            }
            Err(e) => {
                if failures == 0 {
                    log::warn!(
                        "NVML is not available ({e}) from {:?}: no NVIDIA GPU metrics; trying again every {} or less. \
                         On a node without NVIDIA GPUs set nvml.enabled: false",
                        self.config.nvml.library_path,
                        humantime::format_duration(self.config.nvml.retry_max)
                    );
                } else {
                    log::debug!("NVML still not available: {e}");
                }
                let next_delay = (delay * 2).min(self.config.nvml.retry_max);
                self.nvml = NvmlState::Waiting {
                    next_try: Instant::now() + delay,
                    delay: next_delay,
                    failures: failures + 1,
                };
            }
        }
    }

    /// Enumerates the AMD GPUs in sysfs, once. A tree that cannot be read leaves the
    /// backend down; a node without AMD GPUs has it up with none.
    fn ensure_amd(&mut self) {
        if !self.config.amd.enabled || self.amd_enumerated {
            return;
        }
        self.amd_enumerated = true;
        let root = self.config.amd.sysfs_root.clone();
        match sysfs::device_pollers(&root) {
            Ok(mut pollers) => {
                if self.config.amd.rocm_smi.enabled {
                    self.start_rocm_smi(&mut pollers);
                }
                if !pollers.is_empty() {
                    log::info!("amdgpu sysfs: {} AMD GPU(s) under {}", pollers.len(), root.display());
                }
                for poller in pollers {
                    let worker = self.spawn_worker(Box::new(poller), sysfs::BACKEND);
                    self.workers.push(worker);
                }
                if let Some(status) = self.backends.get_mut(sysfs::BACKEND) {
                    status.up = true;
                }
            }
            Err(e) => log::warn!(
                "cannot read {} ({e}): no AMD GPU metrics; on a node without AMD GPUs set amd.enabled: false",
                sysfs::drm_dir(&root).display()
            ),
        }
    }

    /// ROCm SMI takes the GPUs it sees out of `sysfs` (each poller keeps its sysfs twin for
    /// what ROCm SMI does not read); those it does not see stay with the sysfs backend.
    fn start_rocm_smi(&mut self, sysfs_pollers: &mut Vec<sysfs::SysfsDevicePoller>) {
        let path = self.config.amd.rocm_smi.library_path.clone();
        match rocm_smi::load(&path) {
            Ok(smi) => {
                let driver_version = sysfs_pollers
                    .first()
                    .map(|p| p.identity().driver_version.clone())
                    .unwrap_or_default();
                let pollers = rocm_smi::device_pollers(smi, sysfs_pollers, &driver_version);
                log::info!("ROCm SMI {} ready: {} AMD GPU(s)", smi.version, pollers.len());
                for poller in pollers {
                    let worker = self.spawn_worker(Box::new(poller), rocm_smi::BACKEND);
                    self.workers.push(worker);
                }
                if let Some(status) = self.backends.get_mut(rocm_smi::BACKEND) {
                    status.up = true;
                }
            }
            // Most nodes have no ROCm: not a warning. The sysfs backend reads AMD GPUs then.
            Err(e) => log::info!("ROCm SMI not used ({e}); AMD GPUs, if any, are read from sysfs"),
        }
    }

    fn spawn_worker(&mut self, mut poller: Box<dyn DevicePoller>, backend: &'static str) -> Worker {
        let identity = poller.identity().clone();
        let device = self.next_worker_id;
        self.next_worker_id += 1;
        // One request in flight at most: a busy (hung) thread is simply not asked again.
        let (requests_tx, requests_rx) = mpsc::sync_channel::<u64>(1);
        let results = self.results_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("poll-gpu{}", identity.index))
            .spawn(move || {
                while let Ok(round) = requests_rx.recv() {
                    let started = Instant::now();
                    let report = poller.poll();
                    let result = PollResult {
                        device,
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
            id: device,
            backend,
            identity,
            requests,
            busy_with: None,
            up: false,
            lost: false,
            last_good_poll: None,
            readings: None,
        }
    }

    /// One round: ask every idle GPU, wait for answers until the deadline, publish.
    pub fn run_round(&mut self) {
        self.ensure_amd();
        self.ensure_nvml();
        self.round += 1;
        let round = self.round;
        let started = Instant::now();
        let deadline = started + self.config.poll.timeout;

        self.answered = 0;
        self.answered_nvml_gone = 0;
        // Answers that came in after an earlier round's deadline free their thread.
        while let Ok(late) = self.results_rx.try_recv() {
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
                    let repeats = crate::logging::held_back_suffix(held_back);
                    log::warn!(
                        gpu_uuid = worker.identity.uuid.as_str(), pci_bus_id = worker.identity.pci_bus_id.as_str();
                        "GPU {} ({}) did not answer within {:?}; reporting it down until it does{repeats}",
                        worker.identity.index,
                        worker.identity.uuid,
                        self.config.poll.timeout
                    );
                }
                worker.up = false;
                worker.readings = None;
            }
        }
        if !self.workers.is_empty() {
            self.round_duration.observe(started.elapsed().as_secs_f64());
        }
        if matches!(self.nvml, NvmlState::Ready) && self.answered > 0 && self.answered_nvml_gone == self.answered {
            self.start_over();
        }
        self.publish();
    }

    /// Takes in one GPU's answer; only an answer for the current round counts as up.
    fn accept(&mut self, result: PollResult, current_round: u64) {
        let Some(worker) = self.workers.iter_mut().find(|w| w.id == result.device) else {
            return;
        };
        worker.busy_with = None;
        if let Some(status) = self.backends.get_mut(worker.backend) {
            status.poll_duration.observe(result.elapsed.as_secs_f64());
            status.call_seconds += result.report.call_seconds;
            for (call, _) in &result.report.errors {
                *status.errors.entry(call).or_insert(0) += 1;
            }
        }
        for (call, error) in &result.report.errors {
            let key = format!("{}/{call}/{error}", worker.identity.uuid);
            if let Some(held_back) = self.log_limiter.allow(&key) {
                let repeats = crate::logging::held_back_suffix(held_back);
                log::warn!(
                    gpu_uuid = worker.identity.uuid.as_str(), pci_bus_id = worker.identity.pci_bus_id.as_str();
                    "GPU {} ({}): {call} failed: {error}{repeats}",
                    worker.identity.index,
                    worker.identity.uuid
                );
            }
        }
        if let Some(outcome) = result.report.persistence {
            *self
                .persistence_attempts
                .entry((worker.identity.uuid.clone(), outcome.label()))
                .or_insert(0) += 1;
        }
        if result.round != current_round {
            return;
        }
        if worker.backend == nvml::BACKEND {
            self.answered += 1;
        }
        if result.report.nvml_gone {
            // Not this GPU's fault: the driver went away. Counted, and handled for all GPUs
            // at the end of the round.
            self.answered_nvml_gone += 1;
            worker.up = false;
            worker.readings = None;
            return;
        }
        let was_up = worker.up;
        let was_lost = worker.lost;
        let answered_before = worker.last_good_poll.is_some();
        match result.report.readings {
            Some(readings) => {
                worker.up = true;
                worker.lost = false;
                worker.last_good_poll = Some(SystemTime::now());
                worker.readings = Some(readings);
                if !was_up && (was_lost || answered_before) {
                    log::info!(
                        gpu_uuid = worker.identity.uuid.as_str(), pci_bus_id = worker.identity.pci_bus_id.as_str();
                        "GPU {} ({}) answers again", worker.identity.index, worker.identity.uuid
                    );
                }
            }
            None => {
                worker.up = false;
                worker.lost = true;
                worker.readings = None;
                if !was_lost {
                    log::error!(
                        gpu_uuid = worker.identity.uuid.as_str(), pci_bus_id = worker.identity.pci_bus_id.as_str();
                        "GPU {} ({}, {}) is lost: the driver reports it fell off the bus",
                        worker.identity.index,
                        worker.identity.uuid,
                        worker.identity.pci_bus_id
                    );
                }
            }
        }
    }

    fn publish(&mut self) {
        let devices = self
            .workers
            .iter()
            .map(|w| DeviceSnapshot {
                identity: w.identity.clone(),
                up: w.up,
                lost: w.lost,
                last_good_poll: w.last_good_poll,
                readings: w.readings.clone(),
            })
            .collect();
        let previous = self.store.latest().generation;
        self.store.publish(Snapshot {
            xid: self.xids.snapshot(),
            xid_critical_hold: self.config.xid.critical_hold,
            probe: self.probes.as_ref().map(|p| p.snapshot()).unwrap_or_default(),
            generation: previous + 1,
            backends: self.backends.clone(),
            devices,
            persistence_attempts: self.persistence_attempts.clone(),
            round_duration: self.round_duration.clone(),
        });
    }
}

/// "8 GPU(s): 0 unhealthy, 1 degraded", for systemd's STATUS=.
fn health_summary(snapshot: &Snapshot) -> String {
    let states: Vec<HealthState> = snapshot
        .devices
        .iter()
        .map(|d| health::state(&health::device_findings(snapshot, d)))
        .collect();
    let count = |s: HealthState| states.iter().filter(|x| **x == s).count();
    format!(
        "{} GPU(s): {} unhealthy, {} degraded",
        states.len(),
        count(HealthState::Unhealthy),
        count(HealthState::Degraded)
    )
}

/// The running poll loop; dropping the handle does not stop it, [`PollLoop::stop`] does.
pub struct PollLoop {
    stop: Sender<()>,
    /// The coordinator comes back through here when its thread ends.
    finished: Receiver<Coordinator>,
}

impl PollLoop {
    /// Runs the first round before returning, so the first scrape already has data.
    /// `previous` (after a reload) hands over the counters the old loop kept.
    pub fn start(
        config: Config,
        store: Arc<Store>,
        xids: Arc<XidStore>,
        probes: Arc<ProbeState>,
        previous: Option<Coordinator>,
    ) -> std::io::Result<PollLoop> {
        let interval = config.poll.interval;
        let mut coordinator = Coordinator::new(config, store, xids);
        coordinator.probes = Some(probes);
        if let Some(previous) = previous {
            coordinator.inherit_counters(previous);
        }
        coordinator.run_round();
        coordinator.report_status();
        let watchdog = notify::watchdog_interval();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (finished_tx, finished_rx) = mpsc::channel::<Coordinator>();
        std::thread::Builder::new()
            .name("poll-coordinator".into())
            .spawn(move || {
                let mut next = Instant::now() + interval;
                let mut last_ping = Instant::now();
                if watchdog.is_some() {
                    notify::watchdog();
                }
                // Wake at the next round, or at once when asked to stop.
                while let Err(RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(next.saturating_duration_since(Instant::now()))
                {
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
                    // Keep to the interval's grid; after a long round, start again from now.
                    next += interval;
                    if next < Instant::now() {
                        next = Instant::now() + interval;
                    }
                }
                let _ = finished_tx.send(coordinator);
            })?;
        Ok(PollLoop {
            stop: stop_tx,
            finished: finished_rx,
        })
    }

    /// Stops the loop and returns its coordinator, or None when the loop did not finish within
    /// `wait` (it is stuck in a vendor call; the process will go on without it).
    pub fn stop(self, wait: Duration) -> Option<Coordinator> {
        let _ = self.stop.send(());
        self.finished.recv_timeout(wait).ok()
    }
}
