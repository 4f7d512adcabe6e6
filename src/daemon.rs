//! `gpuwarden run`: the poll loop, the HTTP server, reloads and an orderly stop.
//!
//! Start-up order matters: the listener is bound first (a taken port is a start-up error,
//! not something to find out later), then the first poll round runs, then systemd hears
//! READY=1, so the first scrape already has data.
//!
//! SIGHUP re-reads the config file. A config that does not parse is refused with a logged
//! error and the running one stays; a good one replaces the poll loop (counters carry over).
//! `listen` changes need a restart. SIGTERM or SIGINT closes the listener, gives scrapes in
//! flight up to 4 seconds, stops the poll loop without waiting on a hung driver call, and
//! exits 0: within systemd's 5-second expectation even with a wedged GPU.

use crate::config::{Config, Overrides};
use crate::exposition::RenderCache;
use crate::http::{self, AppState};
use crate::notify;
use crate::poller::PollLoop;
use crate::probe::schedule::{self, ChildSettings, ProbeState};
use crate::store::Store;
use crate::web_config::WebSecurity;
use crate::xid::{kmsg, store::XidStore};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

/// How long scrapes in flight may take to finish once we are told to stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);
/// How long to wait for the poll loop's current round before leaving it behind.
const POLL_STOP_TIMEOUT: Duration = Duration::from_millis(800);

/// `config_path` is the file SIGHUP re-reads (None: built-in defaults); `overrides` are the
/// command line's, applied again after every reload.
pub fn run(config: Config, config_path: Option<PathBuf>, overrides: Overrides) -> i32 {
    raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log::error!("cannot start the async runtime: {e}");
            return 1;
        }
    };
    let code = runtime.block_on(serve(config, config_path, overrides));
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

/// The kernel-log reader and the flag that stops it.
struct KernelLogReader {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

fn start_kernel_log(config: &Config, xids: &Arc<XidStore>) -> Option<KernelLogReader> {
    if !config.xid.read_kernel_log {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    match kmsg::spawn_follower(config.xid.kernel_log_path.clone(), xids.clone(), stop.clone()) {
        Ok(()) => Some(KernelLogReader {
            path: config.xid.kernel_log_path.clone(),
            stop,
        }),
        Err(e) => {
            log::error!("cannot start the kernel-log XID reader: {e}");
            None
        }
    }
}

async fn start_poll_loop(
    config: &Config,
    store: &Arc<Store>,
    xids: &Arc<XidStore>,
    probes: &Arc<ProbeState>,
    previous: Option<crate::poller::Coordinator>,
) -> Result<PollLoop, String> {
    let (config, store, xids, probes) = (config.clone(), store.clone(), xids.clone(), probes.clone());
    match tokio::task::spawn_blocking(move || PollLoop::start(config, store, xids, probes, previous)).await {
        Ok(Ok(poll_loop)) => Ok(poll_loop),
        Ok(Err(e)) => Err(format!("cannot start the poll thread: {e}")),
        Err(e) => Err(format!("the first poll round failed: {e}")),
    }
}

async fn serve(mut config: Config, config_path: Option<PathBuf>, overrides: Overrides) -> i32 {
    let (mut term, mut int, mut hup) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(t), Ok(i), Ok(h)) => (t, i, h),
        _ => {
            log::error!("cannot install signal handlers");
            return 1;
        }
    };
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(l) => l,
        Err(e) => {
            log::error!("{}", bind_error_message(&config, &e));
            return 1;
        }
    };
    let security = match load_security(&config) {
        Ok(s) => Arc::new(RwLock::new(s)),
        Err(e) => {
            log::error!("{e}");
            return crate::config::EX_CONFIG;
        }
    };
    let store = Arc::new(Store::new());
    let xids = Arc::new(XidStore::new(config.xid.dedup_window));
    let mut kernel_log = start_kernel_log(&config, &xids);
    let probes = Arc::new(ProbeState::default());
    let probe_settings = Arc::new(Mutex::new(ChildSettings::from_config(&config)));
    let probe_stop = Arc::new(AtomicBool::new(false));
    if let Err(e) = schedule::spawn(
        store.clone(),
        probes.clone(),
        probe_settings.clone(),
        probe_stop.clone(),
    ) {
        log::error!("cannot start the probe scheduler; no scheduled probes: {e}");
    }
    if config.probe.schedule {
        log::info!("scheduled probes: every {:?} per GPU, when idle", config.probe.interval);
    }
    let mut poll_loop = match start_poll_loop(&config, &store, &xids, &probes, None).await {
        Ok(p) => p,
        Err(e) => {
            log::error!("{e}");
            return 1;
        }
    };
    let devices = store.latest().devices.len();
    let stale_after = (config.poll.interval * 3).max(Duration::from_secs(5));
    let app = http::router(AppState {
        store: store.clone(),
        cache: Arc::new(RenderCache::default()),
        stale_after,
        security: security.clone(),
    });
    // The bound address, not the configured one: with port 0 the kernel picks the port.
    let bound = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| config.listen.to_string());
    let scheme = if security.read().unwrap_or_else(PoisonError::into_inner).tls.is_some() {
        "https"
    } else {
        "http"
    };
    log::info!("serving metrics on {scheme}://{bound}/metrics ({devices} GPU(s))");

    let (stop_server, stop_rx) = tokio::sync::watch::channel(false);
    let mut server = tokio::spawn(http::serve(listener, app, security.clone(), stop_rx, DRAIN_TIMEOUT));
    notify::ready(&format!("serving {devices} GPU(s) on {bound}"));

    loop {
        tokio::select! {
            _ = term.recv() => { log::info!("SIGTERM: stopping"); break; }
            _ = int.recv() => { log::info!("SIGINT: stopping"); break; }
            _ = hup.recv() => {
                notify::reloading();
                match reload(&config, config_path.as_ref(), &overrides) {
                    Ok((new_config, new_security)) => {
                        *security.write().unwrap_or_else(PoisonError::into_inner) = new_security;
                        let previous = tokio::task::spawn_blocking(move || poll_loop.stop(POLL_STOP_TIMEOUT)).await.ok().flatten();
                        let kernel_log_changed = new_config.xid.read_kernel_log != config.xid.read_kernel_log
                            || kernel_log.as_ref().is_some_and(|k| k.path != new_config.xid.kernel_log_path);
                        if kernel_log_changed {
                            if let Some(old) = kernel_log.take() {
                                old.stop.store(true, Ordering::Relaxed);
                            }
                            kernel_log = start_kernel_log(&new_config, &xids);
                        }
                        config = new_config;
                        *probe_settings.lock().unwrap_or_else(PoisonError::into_inner) =
                            ChildSettings::from_config(&config);
                        poll_loop = match start_poll_loop(&config, &store, &xids, &probes, previous).await {
                            Ok(p) => p,
                            Err(e) => {
                                log::error!("{e}");
                                return 1;
                            }
                        };
                        log::info!("reloaded the config");
                    }
                    Err(message) => log::error!("{message}"),
                }
                let devices = store.latest().devices.len();
                notify::ready(&format!("serving {devices} GPU(s) on {bound}"));
            }
            result = &mut server => {
                // The server ended on its own: that is a failure.
                log::error!("the HTTP server stopped: {result:?}");
                return 1;
            }
        }
    }

    notify::stopping();
    let _ = stop_server.send(true);
    // serve() drains for DRAIN_TIMEOUT at most; the margin covers the accept loop itself.
    if tokio::time::timeout(DRAIN_TIMEOUT + Duration::from_millis(500), &mut server)
        .await
        .is_err()
    {
        server.abort();
    }
    if tokio::task::spawn_blocking(move || poll_loop.stop(POLL_STOP_TIMEOUT))
        .await
        .ok()
        .flatten()
        .is_none()
    {
        log::warn!("the poll loop is inside a driver call that does not return; leaving it");
    }
    if let Some(k) = kernel_log {
        k.stop.store(true, Ordering::Relaxed);
    }
    // A probe in flight is killed within a tick of this.
    probe_stop.store(true, Ordering::Relaxed);
    log::info!("stopped");
    0
}

/// Reads the config again for SIGHUP. Err carries the message to log; the caller keeps the
/// running config then.
/// The web config named by `web.config_file`: TLS and basic auth, or none.
fn load_security(config: &Config) -> Result<WebSecurity, String> {
    if config.web.config_file.as_os_str().is_empty() {
        return Ok(WebSecurity::none());
    }
    let security = WebSecurity::load(&config.web.config_file).map_err(|e| e.to_string())?;
    log::info!(
        "web config {}: {}{}",
        config.web.config_file.display(),
        if security.tls.is_some() { "TLS" } else { "plain HTTP" },
        if security.auth_required() { ", basic auth" } else { "" }
    );
    Ok(security)
}

fn reload(running: &Config, path: Option<&PathBuf>, overrides: &Overrides) -> Result<(Config, WebSecurity), String> {
    let Some(path) = path else {
        return Err("SIGHUP: gpuwarden runs on built-in defaults (no config file): nothing to reload".to_string());
    };
    let mut new_config = Config::load(path).map_err(|e| format!("reload refused, keeping the running config: {e}"))?;
    overrides.apply(&mut new_config);
    if new_config.listen != running.listen {
        log::warn!(
            "reload: `listen` changed from {} to {}; that takes a restart, keeping {}",
            running.listen,
            new_config.listen,
            running.listen
        );
        new_config.listen = running.listen;
    }
    // A web config that does not load refuses the whole reload: serving on with weaker
    // security than configured is not an option.
    let security =
        load_security(&new_config).map_err(|e| format!("reload refused, keeping the running config: {e}"))?;
    Ok((new_config, security))
}
