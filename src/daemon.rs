//! `gpuwarden run`: the poll loop, the HTTP server, reloads and an orderly stop.
//!
//! Start-up order matters: the listener is bound first (a taken port is a start-up error,
//! not something to find out later), then the first poll round runs, then systemd hears
//! READY=1, so the first scrape already has data.
//!
//! SIGHUP re-reads the config file. A config that does not parse (or whose web config does
//! not load) is refused with a logged error and the running settings stay; a good one is
//! built into new [`Settings`] and swapped in whole: the poll loop, /healthz, the HTTP
//! server, the XID store and the probe scheduler read them from there. Only the keys in
//! [`settings::RestartOnly`] (`listen`) need a restart, and the reload's log line names
//! them when they changed. A reload never waits for the poll loop. SIGTERM or SIGINT closes
//! the listener, gives scrapes in flight up to 4 seconds, stops the poll loop without
//! waiting on a hung driver call, and exits 0: within systemd's 5-second expectation even
//! with a wedged GPU.

use crate::backend::XidEvents;
use crate::config::settings::{self, Settings, SharedSettings};
use crate::config::{Config, Overrides};
use crate::journal::{self, Journal};
use crate::metrics::exposition::RenderCache;
use crate::probe::schedule;
use crate::serve::http::{self, AppState};
use crate::service::exit::Exit;
use crate::service::notify;
use crate::service::stop::{Shutdown, Stop};
use crate::snapshot::publisher::Publisher;
use crate::snapshot::store::Store;
use crate::sources::Sources;
use crate::sources::poller::{Coordinator, PollLoop};
use crate::xid::kmsg::{self, ResumePoints};
use crate::xid::store::{XidSource, XidStore};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

/// The shortest gap between two publishes of news from between rounds (XIDs, probe results).
const REFRESH_EVERY: Duration = Duration::from_millis(200);

/// How long scrapes in flight may take to finish once we are told to stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);
/// How long every thread and task may take to end after the stop (beyond the drain):
/// threads wait a second at most in the driver's event wait or in poll(2).
const STOP_TIMEOUT: Duration = Duration::from_millis(1500);

/// `config_path` is the file SIGHUP re-reads (None: built-in defaults); `overrides` are the
/// command line's, applied again after every reload.
pub fn run(config: Config, config_path: Option<PathBuf>, overrides: Overrides) -> Exit {
    let checked = config
        .refuse_unasked_simulation(config_path.as_deref())
        .map(|()| config);
    let settings = match checked.and_then(Settings::build) {
        Ok(s) => s,
        Err(e) => {
            log::error!("{e}");
            return Exit::CONFIG;
        }
    };
    raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Longer than the longest periodic read's period (the PCI census, 30 s): the blocking
        // pool's thread reading the side sources lives on between reads (default 10 s).
        .thread_keep_alive(Duration::from_secs(45))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log::error!("cannot start the async runtime: {e}");
            return Exit::FAILURE;
        }
    };
    let code = runtime.block_on(serve(settings, config_path, overrides));
    // Threads blocked in a vendor call must not hold the process up.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// Every scrape is a socket: raise the soft open-file limit to the hard one (systemd's
/// default soft limit is 1024), so a thousand concurrent scrapers do not run us out of
/// descriptors. Failure only means the old limit stays.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid pointer to an rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                log::debug!("could not raise the open-file limit from {}", limit.rlim_cur);
            }
        }
    }
}

/// How long a taken port is tried again before giving up: a previous instance that is still
/// stopping (a restart) lets go of it within its own stop timeout of a few seconds.
const BIND_RETRY_FOR: Duration = Duration::from_secs(5);

/// Binds the listener; a port in use is tried again every half second for a few seconds.
async fn bind(config: &Config) -> std::io::Result<tokio::net::TcpListener> {
    let started = std::time::Instant::now();
    loop {
        match crate::serve::http::listen_with_backlog(config.listen) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && started.elapsed() < BIND_RETRY_FOR => {
                if started.elapsed() < Duration::from_millis(500) {
                    log::warn!("{} is in use; trying again for {BIND_RETRY_FOR:?}", config.listen);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            result => return result,
        }
    }
}

fn bind_error_message(config: &Config, e: &std::io::Error) -> String {
    let mut message = format!(
        "cannot listen on {} (config key `listen`, or --listen): {e}",
        config.listen
    );
    if e.kind() == std::io::ErrorKind::AddrInUse {
        message.push_str(". Another program holds the port");
        if config.listen.port() == 9100 {
            message
                .push_str(" (9100 is node_exporter's default port too; if it runs here, give gpuwarden another one)");
        }
    }
    message
}

/// The kernel-log reader, and the signal that stops it alone (a reload that moves it).
struct KernelLogReader {
    path: PathBuf,
    stop: Stop,
}

impl KernelLogReader {
    /// `resume`: where earlier readers got to, per path, so a reload never counts a log twice.
    fn start(
        config: &Config,
        xids: &Arc<XidStore>,
        resume: &Arc<ResumePoints>,
        daemon: &Stop,
    ) -> Option<KernelLogReader> {
        if !config.xid.read_kernel_log {
            return None;
        }
        let stop = daemon.child("xid-kernel-log");
        let path = config.xid.kernel_log_path.clone();
        match kmsg::spawn_follower(
            path.clone(),
            xids.clone(),
            stop.handle("xid-kernel-log"),
            resume.clone(),
        ) {
            Ok(()) => Some(KernelLogReader { path, stop }),
            Err(e) => {
                log::error!("cannot start the kernel-log XID reader: {e}");
                None
            }
        }
    }
}

/// Starts, stops or moves the kernel-log reader when a reload changed its keys.
fn reload_kernel_log(
    running: Option<KernelLogReader>,
    config: &Config,
    xids: &Arc<XidStore>,
    resume: &Arc<ResumePoints>,
    daemon: &Stop,
) -> Option<KernelLogReader> {
    let wanted = config.xid.read_kernel_log.then_some(&config.xid.kernel_log_path);
    if running.as_ref().map(|k| &k.path) == wanted {
        return running;
    }
    if let Some(old) = running {
        old.stop.stop_child();
        if !config.xid.read_kernel_log {
            xids.forget_source(XidSource::KernelLog);
        }
    }
    KernelLogReader::start(config, xids, resume, daemon)
}

/// Publishes what the side inputs brought between poll rounds, so an XID or a probe result
/// shows on /metrics within a fraction of a second whatever `poll.interval` is. It waits for
/// a source to signal a change (no wake-ups while nothing happens), and publishes at most
/// every [`REFRESH_EVERY`], whatever an XID storm does.
fn spawn_refresher(publisher: Arc<Publisher>, stop: Stop) {
    let changed = publisher.sources().changed.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = changed.wait() => {}
                _ = stop.stopped() => break,
            }
            publisher.refresh_if_changed();
            tokio::select! {
                _ = tokio::time::sleep(REFRESH_EVERY) => {}
                _ = stop.stopped() => break,
            }
        }
    });
}

/// Why the daemon could not start, or refused a reload (and kept what runs).
#[derive(Debug, thiserror::Error)]
enum DaemonError {
    #[error("cannot start the poll thread: {0}")]
    PollThread(std::io::Error),
    #[error("the first poll round failed: {0}")]
    FirstRound(tokio::task::JoinError),
    #[error("SIGHUP: gpuwarden runs on built-in defaults (no config file): nothing to reload")]
    NothingToReload,
    #[error("reload refused, keeping the running config: {0}")]
    ReloadRefused(crate::config::ConfigError),
    #[error("{0}")]
    Journal(journal::LockError),
    #[error("reload refused, keeping the running config: its thread failed: {0}")]
    ReloadThread(String),
}

async fn start_poll_loop(coordinator: Coordinator, stop: Stop) -> Result<PollLoop, DaemonError> {
    match tokio::task::spawn_blocking(move || PollLoop::start(coordinator, stop)).await {
        Ok(Ok(poll_loop)) => Ok(poll_loop),
        Ok(Err(e)) => Err(DaemonError::PollThread(e)),
        Err(e) => Err(DaemonError::FirstRound(e)),
    }
}

/// SIGTERM, SIGINT and SIGHUP, installed before anything starts.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Binds the listener or says why not, with the exit code for it.
async fn listen(config: &Config) -> Result<tokio::net::TcpListener, Exit> {
    bind(config).await.map_err(|e| {
        log::error!("{}", bind_error_message(config, &e));
        // Not 1: the unit's RestartPreventExitStatus lists this code, so a port that
        // another program holds (node_exporter's 9100) does not become a restart loop
        // that floods the journal every RestartSec.
        if e.kind() == std::io::ErrorKind::AddrInUse {
            Exit::UNAVAILABLE
        } else {
            Exit::FAILURE
        }
    })
}

/// Everything the daemon runs, started in order: the sources, the poll loop (whose first
/// round runs before this returns), the refresher.
struct Running {
    settings: Arc<SharedSettings>,
    store: Arc<Store>,
    xids: Arc<XidStore>,
    resume: Arc<ResumePoints>,
    kernel_log: Option<KernelLogReader>,
    poll_loop: PollLoop,
    /// Each GPU's service state (the local API sends it clears and scheduler reports).
    lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// The journal's handle; None with the journal off.
    journal: Option<Journal>,
    /// The daemon's own handle: children (the kernel-log reader) are made from it.
    stop: Stop,
}

/// Before the kernel log is read: this boot's XID counts from before a restart, and the
/// last /dev/kmsg record they came from, so that nothing is lost or counted twice; and the
/// operators' clears of this boot, so that a cleared XID stays cleared. Gives back the GPUs'
/// facts, which the journal's writer starts from.
fn take_over_from_journal(
    place: &journal::Place,
    config: &Config,
    sources: &Sources,
    resume: &ResumePoints,
) -> Vec<journal::writer::facts::GpuFacts> {
    let seed = journal::seed(place);
    let xids = &sources.xids;
    if !seed.clears.is_empty() {
        log::info!(
            "journal: {} GPU(s) cleared earlier in this boot stay cleared",
            seed.clears.len()
        );
    }
    if seed.answered {
        crate::remediation::marker::agree_with_journal(
            &config.remediation.reboot_marker,
            seed.remediation.reboot_required.as_ref(),
        );
    }
    let waiting: Vec<String> = seed
        .validations
        .iter()
        .filter(|(_, v)| v.outcome.is_none() || v.failed().is_some())
        .map(|(uuid, v)| format!("{uuid} ({})", v.state()))
        .collect();
    if !waiting.is_empty() {
        log::info!(
            "journal: GPU(s) not yet validated stay out of service until a probe passes: {}",
            waiting.join(", ")
        );
    }
    sources
        .service
        .apply(crate::lifecycle::Command::Seed(crate::lifecycle::ServiceState {
            clears: Arc::new(seed.clears),
            known_boards: Arc::new(journal::store::read::known_boards(&seed.facts)),
            board_swaps: Arc::new(seed.board_swaps),
            validations: Arc::new(seed.validations),
            scheduler: Arc::default(),
            remediation: Arc::new(seed.remediation),
        }));
    take_over_probes(sources, seed.probe_history, seed.sdc);
    if !seed.xid_counts.is_empty() {
        let total: u64 = seed.xid_counts.iter().map(|(_, n, _)| n).sum();
        log::info!(
            "journal: {total} XID(s) counted earlier in this boot (boot id {}) are counted again",
            place.boot_id
        );
    }
    xids.seed(&seed.xid_counts);
    xids.seed_sxids(&seed.sxids);
    if let Some(sequence) = seed.kmsg_sequence {
        resume.resume_after(&config.xid.kernel_log_path, sequence);
    }
    // A kernel log that is a file goes on where the last run read up to, and the records it
    // counted in this boot are known by their identities if the file is read again.
    for position in seed.file_positions {
        resume.resume_file(position);
    }
    xids.seed_identities(&crate::xid::kmsg::identities_of_lines(
        seed.kernel_lines.iter().map(String::as_str),
    ));
    seed.facts
}

/// The probe's memory from the journal: each GPU's baseline figures, and the GPUs the
/// correctness canary or the pattern test found wrong and no one cleared since (they stay
/// unhealthy), with the canary's agreement digests.
fn take_over_probes(
    sources: &Sources,
    history: std::collections::BTreeMap<String, Vec<crate::model::probe::ProbeFigures>>,
    sdc: journal::SdcSeed,
) {
    let gpus = |indexes: Vec<u32>| indexes.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    if !sdc.hbm.is_empty() {
        log::warn!(
            "journal: GPU(s) {}'s memory read back wrong in the HBM pattern test; they stay unhealthy until cleared",
            gpus(sdc.hbm.values().map(|s| s.gpu).collect())
        );
    }
    if !sdc.suspects.is_empty() {
        log::warn!(
            "journal: GPU(s) {} computed wrong results (silent data corruption suspected) and stay unhealthy until cleared",
            gpus(sdc.suspects.values().map(|s| s.gpu).collect())
        );
    }
    if let Some(run) = sdc
        .collective
        .as_ref()
        .filter(|r| r.verdict != crate::model::collective::CollectiveVerdict::Passed)
    {
        log::warn!(
            "journal: the latest all-reduce across {} was {} ({}); the node keeps that finding until a later run or a clear",
            run.gpu_list(),
            run.verdict.label(),
            run.detail
        );
    }
    sources.probes.update(|probes| {
        for (uuid, figures) in history {
            probes.history.insert(uuid, figures.into());
        }
        probes.sdc_suspects = sdc.suspects;
        probes.sdc_references = sdc.references.into_iter().collect();
        probes.hbm_suspects = sdc.hbm;
        probes.collective = sdc.collective;
        probes.collective_history.figures = sdc.collective_figures.into();
    });
}

/// The journal, when it is on: its lock (refused while another daemon holds it), this boot's
/// seed taken over, and its writer started, before the kernel log's backlog is read (its
/// XIDs go into the journal too).
async fn start_journal(
    config: &Config,
    sources: &Sources,
    store: &Arc<Store>,
    resume: &ResumePoints,
    shutdown: &Shutdown,
) -> Result<Option<Journal>, DaemonError> {
    let place = journal::Place::from_config(config, &crate::input::hostname());
    let lock = match &place {
        Some(place) => match journal::lock_waiting(place).await {
            Ok(lock) => Some(lock),
            Err(e @ journal::LockError::InUse { .. }) => return Err(DaemonError::Journal(e)),
            Err(e) => {
                log::warn!("{e}; going on without the lock");
                Some(journal::JournalLock::none())
            }
        },
        None => None,
    };
    if place.is_none() && !config.events.sinks.is_empty() {
        log::warn!(
            "events: the sinks deliver the journal's rows, and the journal is off (state.path is empty); none runs"
        );
    }
    Ok(place.zip(lock).map(|(place, lock)| {
        let facts = take_over_from_journal(&place, config, sources, resume);
        let started = Journal::start(
            lock,
            place,
            facts,
            store.clone(),
            journal::WritesTo {
                status: sources.journal.clone(),
                lifecycle: sources.service.clone(),
                probes: sources.probes.clone(),
            },
            sources.xids.clone(),
            shutdown.handle("journal"),
        );
        // The sinks read the file the writer keeps, and keep their cursors in it.
        journal::sinks::spawn_all(
            &config.events.sinks,
            &config.state.path,
            tokio::runtime::Handle::current(),
            sources.sinks.clone(),
            &shutdown.handle("sinks"),
        );
        started
    }))
}

/// Starts automatic remediation's thread (idle unless `remediation.mode: auto`); the hold it
/// asks the poller to let go of NVML with.
fn start_remediation(
    store: &Arc<Store>,
    settings: &Arc<SharedSettings>,
    sources: &Sources,
    journal: Option<Journal>,
    shutdown: &Shutdown,
) -> crate::backend::LibraryHold {
    let hold = crate::backend::LibraryHold::default();
    let executor = crate::remediation::auto::Executor {
        store: store.clone(),
        settings: settings.clone(),
        lifecycle: sources.service.clone(),
        hold: hold.clone(),
        journal,
        fd_dir: PathBuf::from("/proc/self/fd"),
        unhealthy_since: Default::default(),
    };
    crate::remediation::auto::follow_verdict(store, executor.unhealthy_since.clone());
    if let Err(e) = crate::remediation::auto::spawn(executor, shutdown.handle("remediation")) {
        log::error!("cannot start automatic remediation's thread; no automatic resets: {e}");
    }
    hold
}

async fn start(settings: Settings, shutdown: &Shutdown) -> Result<Running, DaemonError> {
    let config = settings.config.clone();
    let settings = Arc::new(SharedSettings::new(settings));
    let store = Arc::new(Store::new());
    let stop = shutdown.handle("daemon");
    let sources = Sources::new(Arc::new(XidStore::new(config.xid.dedup_window)));
    let xids = sources.xids.clone();
    xids.set_policy(config.health.xid_severity.clone());
    let resume = Arc::new(ResumePoints::default());
    let journal = start_journal(&config, &sources, &store, &resume, shutdown).await?;
    let kernel_log = KernelLogReader::start(&config, &xids, &resume, &stop);
    let probe_stop = shutdown.handle("probe-scheduler");
    if let Err(e) = schedule::spawn(
        store.clone(),
        sources.probes.clone(),
        sources.service.clone(),
        settings.clone(),
        probe_stop,
    ) {
        log::error!("cannot start the probe scheduler; no scheduled probes: {e}");
    }
    if config.probe.schedule {
        log::info!("scheduled probes: every {:?} per GPU, when idle", config.probe.interval);
    }
    let shared = crate::kube::Shared::new(&store, &sources, journal.is_some().then(|| config.state.path.clone()));
    crate::kube::spawn(
        &config,
        shared,
        tokio::runtime::Handle::current(),
        &shutdown.handle("kubernetes"),
    );
    let kubelet_stop = shutdown.handle("kubelet");
    tokio::spawn(crate::attribution::kubelet::follow(
        sources.pods.clone(),
        settings.clone(),
        kubelet_stop,
    ));
    // The PCI census before the first round: a verdict published without it would say "ok"
    // on a node whose driver is down while its GPUs are on the bus.
    crate::sources::read_once(crate::sources::pci::PciCensus, &sources.pci, &settings.current());
    sources.spawn_periodic(&settings, &stop);
    let lifecycle = sources.service.clone();
    let hold = start_remediation(&store, &settings, &sources, journal.clone(), shutdown);
    let publisher = Arc::new(Publisher::new(store.clone(), sources, settings.clone()));
    let events = XidEvents {
        store: xids.clone(),
        stop: Arc::new(shutdown.handle("xid-nvml-events")),
    };
    let polled = publisher.sources().polled.clone();
    let coordinator = Coordinator::new(settings.clone(), publisher.round_sink(), polled, Some(events)).with_hold(hold);
    let poll_loop = start_poll_loop(coordinator, shutdown.handle("poll-coordinator")).await?;
    spawn_refresher(publisher, shutdown.handle("publish-events"));
    Ok(Running {
        settings,
        store,
        xids,
        resume,
        kernel_log,
        poll_loop,
        lifecycle,
        journal,
        stop,
    })
}

impl Running {
    /// SIGHUP: a new config swapped in whole, or the old one kept with the reason logged.
    /// The files are read and checked on a blocking thread (the hardened reader never waits
    /// on a FIFO, but a hung file system could): SIGTERM is still heard meanwhile. Returns
    /// false when SIGTERM came first.
    async fn reload(
        &mut self,
        config_path: Option<&PathBuf>,
        overrides: &Overrides,
        term: &mut tokio::signal::unix::Signal,
    ) -> bool {
        notify::reloading();
        let running = self.settings.current().config.clone();
        let (path, overrides) = (config_path.cloned(), overrides.clone());
        let reading = tokio::task::spawn_blocking(move || reload(&running, path.as_ref(), &overrides));
        let read = tokio::select! {
            read = reading => read,
            _ = term.recv() => {
                log::info!("SIGTERM while reloading: stopping (the config being read is dropped)");
                return false;
            }
        };
        let read = read.unwrap_or_else(|e| Err(DaemonError::ReloadThread(e.to_string())));
        match read {
            Ok(new_settings) => {
                self.xids.set_dedup_window(new_settings.config.xid.dedup_window);
                self.xids.set_policy(new_settings.config.health.xid_severity.clone());
                self.kernel_log = reload_kernel_log(
                    self.kernel_log.take(),
                    &new_settings.config,
                    &self.xids,
                    &self.resume,
                    &self.stop,
                );
                self.settings.replace(new_settings);
                self.poll_loop.reload();
                log::info!("reloaded the config");
            }
            Err(message) => log::error!("{message}"),
        }
        true
    }

    fn ready(&self, bound: &str) {
        let devices = self.store.latest().devices.len();
        notify::ready(&format!("serving {devices} GPU(s) on {bound}"));
        self.poll_loop.status_overwritten();
    }
}

async fn serve(settings: Settings, config_path: Option<PathBuf>, overrides: Overrides) -> Exit {
    let Ok(mut signals) = Signals::install() else {
        log::error!("cannot install signal handlers");
        return Exit::FAILURE;
    };
    let listener = match listen(&settings.config).await {
        Ok(listener) => listener,
        Err(code) => return code,
    };
    let shutdown = Shutdown::new();
    let mut running = match start(settings, &shutdown).await {
        Ok(running) => running,
        Err(e @ DaemonError::Journal(journal::LockError::InUse { .. })) => {
            log::error!("{e}");
            return Exit::UNAVAILABLE;
        }
        Err(e) => {
            log::error!("{e}");
            return Exit::FAILURE;
        }
    };
    let app = http::router(consumers(&running, &shutdown));
    let bound = announce(&listener, &running);
    let server_stop = shutdown.handle("http");
    let mut server = tokio::spawn(http::serve(
        listener,
        app,
        running.settings.clone(),
        server_stop,
        DRAIN_TIMEOUT,
    ));
    running.ready(&bound);
    // Once settled (and again after a reload), the code only start-up ran is given back.
    let page_out = tokio::time::sleep(crate::service::residency::SETTLE);
    tokio::pin!(page_out);
    let mut paged_out = false;

    loop {
        tokio::select! {
            _ = signals.term.recv() => { log::info!("SIGTERM: stopping"); break; }
            _ = signals.int.recv() => { log::info!("SIGINT: stopping"); break; }
            _ = signals.hup.recv() => {
                if !running.reload(config_path.as_ref(), &overrides, &mut signals.term).await {
                    break;
                }
                running.ready(&bound);
                page_out.as_mut().reset(tokio::time::Instant::now() + crate::service::residency::SETTLE);
                paged_out = false;
            }
            _ = &mut page_out, if !paged_out => {
                paged_out = true;
                give_back_start_up_code();
            }
            result = &mut server => {
                // The server ended on its own: that is a failure.
                log::error!("the HTTP server stopped: {result:?}");
                return Exit::FAILURE;
            }
        }
    }
    notify::stopping();
    drop(running);
    stop_everything(shutdown, server).await;
    Exit::SUCCESS
}

/// The consumers beside /metrics: the history rings (a task) and the local API; the HTTP
/// server's state.
fn consumers(running: &Running, shutdown: &Shutdown) -> AppState {
    let state = AppState {
        store: running.store.clone(),
        cache: Arc::new(RenderCache::default()),
        settings: running.settings.clone(),
        journal_readers: Arc::new(tokio::sync::Semaphore::new(http::JOURNAL_READERS)),
        history: Arc::new(crate::serve::history::History::default()),
    };
    tokio::spawn(crate::serve::history::record(
        state.history.clone(),
        running.store.clone(),
        shutdown.handle("history"),
    ));
    let local = crate::serve::local_api::LocalState {
        app: state.clone(),
        lifecycle: running.lifecycle.clone(),
        journal: running.journal.clone(),
    };
    start_local_api(&running.settings.current().config, local, shutdown);
    state
}

/// Logs where the metrics are served and returns the bound address: not the configured one,
/// since with port 0 the kernel picks the port.
fn announce(listener: &tokio::net::TcpListener, running: &Running) -> String {
    let bound = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| running.settings.current().config.listen.to_string());
    let scheme = if running.settings.current().web.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let devices = running.store.latest().devices.len();
    log::info!("serving metrics on {scheme}://{bound}/metrics ({devices} GPU(s))");
    bound
}

/// Once settled, the pages of code only start-up ran go back to the kernel.
fn give_back_start_up_code() {
    match crate::service::residency::page_out_own_code() {
        Ok(done) => log::debug!(
            "gave back the start-up code: {} mappings, {} KiB asked",
            done.mappings,
            done.bytes / 1024
        ),
        Err(e) => log::debug!("cannot give back the start-up code (MADV_PAGEOUT needs Linux 5.4): {e}"),
    }
}

/// The one stop: every thread and task hears it at once; the HTTP server drains scrapes in
/// flight; what does not end in time (a thread inside a driver call that does not return)
/// is named and left behind.
async fn stop_everything(shutdown: Shutdown, mut server: tokio::task::JoinHandle<()>) {
    shutdown.stop();
    let times = shutdown.times();
    // serve() drains for DRAIN_TIMEOUT at most; the margin covers the accept loop itself.
    if tokio::time::timeout(DRAIN_TIMEOUT + Duration::from_millis(500), &mut server)
        .await
        .is_err()
    {
        server.abort();
    }
    let left = shutdown.wait(STOP_TIMEOUT).await;
    if !left.is_empty() {
        log::warn!(
            "still running after {STOP_TIMEOUT:?}, left behind: {} (each named by what it was doing)",
            left.join(", ")
        );
    }
    log::info!("stopped {}", times.took());
}

/// The local API's socket (local_api.rs), when configured; the daemon goes on without it
/// when it cannot be opened, and says why.
fn start_local_api(config: &Config, state: crate::serve::local_api::LocalState, shutdown: &Shutdown) {
    let path = config.local_api.socket.clone();
    if path.as_os_str().is_empty() {
        return;
    }
    match crate::serve::local_api::bind(&path) {
        Ok(listener) => {
            log::info!("local API on {} (gpuwarden health)", path.display());
            let app = crate::serve::local_api::router(state);
            tokio::spawn(crate::serve::local_api::serve(
                listener,
                path,
                app,
                shutdown.handle("local-api"),
            ));
        }
        Err(e) => log::warn!("no local API: {e}; `gpuwarden health` cannot reach this daemon"),
    }
}

/// Reads the config again for SIGHUP and builds the settings it asks for. Err says why not;
/// the caller logs it and keeps the running settings.
fn reload(running: &Config, path: Option<&PathBuf>, overrides: &Overrides) -> Result<Settings, DaemonError> {
    let Some(path) = path else {
        return Err(DaemonError::NothingToReload);
    };
    let mut new_config = Config::load(path).map_err(DaemonError::ReloadRefused)?;
    overrides.apply(&mut new_config, Some(path));
    new_config
        .refuse_unasked_simulation(Some(path))
        .map_err(DaemonError::ReloadRefused)?;
    settings::keep_restart_only(running, &mut new_config);
    Settings::build(new_config).map_err(DaemonError::ReloadRefused)
}
