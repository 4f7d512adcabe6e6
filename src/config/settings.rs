//! The running daemon's settings: built from a config by one function ([`Settings::build`])
//! and swapped whole on reload, so no part of the daemon keeps a value read once at start-up.
//!
//! Every part reads [`SharedSettings::current`] when it needs a value: the poll loop at each
//! round (interval, timeout, and whether its backends must be made anew), /healthz at each
//! request (the staleness limit), the HTTP server at each connection and request (TLS and
//! basic auth), the probe scheduler at each tick. What cannot change without a restart is
//! listed in [`RestartOnly`] and named in the reload's log line.

use crate::config::web::WebSecurity;
use crate::config::{Amd, Config, Nvml, Probe};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// A config key a reload cannot apply: the listening socket is bound once, before the first
/// poll, so that a taken port is a start-up error; the journal's file, the local socket, the
/// sinks and the Kubernetes client are made once at start. Each key says how to tell a change
/// and how to keep the running value, so a key cannot be listed without being kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartOnly {
    Listen,
    State,
    LocalApi,
    Events,
    KubernetesApi,
    KubernetesNode,
    KubernetesDevices,
}

impl RestartOnly {
    pub(crate) const ALL: [RestartOnly; 7] = [
        RestartOnly::Listen,
        RestartOnly::State,
        RestartOnly::LocalApi,
        RestartOnly::Events,
        RestartOnly::KubernetesApi,
        RestartOnly::KubernetesNode,
        RestartOnly::KubernetesDevices,
    ];

    /// The key as the config file writes it.
    pub(crate) fn key(self) -> &'static str {
        match self {
            RestartOnly::Listen => "listen",
            RestartOnly::State => "state",
            RestartOnly::LocalApi => "local_api",
            RestartOnly::Events => "events",
            RestartOnly::KubernetesApi => "kubernetes.api",
            RestartOnly::KubernetesNode => "kubernetes.node",
            RestartOnly::KubernetesDevices => "kubernetes.devices",
        }
    }

    /// What a reload that changed the key keeps running, said in its log line.
    fn what_restarts(self) -> &'static str {
        match self {
            RestartOnly::Listen => "the listening socket",
            RestartOnly::State => "the journal",
            RestartOnly::LocalApi => "the local socket",
            RestartOnly::Events => "each sink, which keeps its cursor by name,",
            RestartOnly::KubernetesApi | RestartOnly::KubernetesNode | RestartOnly::KubernetesDevices => {
                "the Kubernetes client"
            }
        }
    }

    /// Puts the running value back into `new` when it differs; whether it did.
    fn keep(self, running: &Config, new: &mut Config) -> bool {
        fn keep_field<T: PartialEq + Clone>(running: &T, new: &mut T) -> bool {
            let changed = running != new;
            if changed {
                *new = running.clone();
            }
            changed
        }
        match self {
            RestartOnly::Listen => keep_field(&running.listen, &mut new.listen),
            RestartOnly::State => keep_field(&running.state, &mut new.state),
            RestartOnly::LocalApi => keep_field(&running.local_api, &mut new.local_api),
            RestartOnly::Events => keep_field(&running.events, &mut new.events),
            RestartOnly::KubernetesApi => keep_field(&running.kubernetes.api, &mut new.kubernetes.api),
            RestartOnly::KubernetesNode => keep_field(&running.kubernetes.node, &mut new.kubernetes.node),
            RestartOnly::KubernetesDevices => keep_field(&running.kubernetes.devices, &mut new.kubernetes.devices),
        }
    }
}

/// Keeps the running values of what a reload cannot apply ([`RestartOnly`]), and says so.
pub(crate) fn keep_restart_only(running: &Config, new: &mut Config) {
    let asked = new.listen;
    for key in RestartOnly::ALL {
        if !key.keep(running, new) {
            continue;
        }
        if key == RestartOnly::Listen {
            log::warn!(
                "reload: `listen` changed from {} to {asked}; it takes a restart, keeping {}",
                running.listen,
                running.listen
            );
        } else {
            log::warn!(
                "reload: `{}` changed; it takes a restart ({} is made once, at start), keeping the running one",
                key.key(),
                key.what_restarts()
            );
        }
    }
}

/// The shortest staleness limit: a poll round that runs a little late must not fail /healthz.
const MIN_STALE_AFTER: Duration = Duration::from_secs(5);

/// What the backends are made from. When a reload changes any of it, the poll loop lets its
/// backends go and makes them anew (counters carry over); otherwise they stay as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendSettings {
    pub nvml: Nvml,
    pub amd: Amd,
    pub persistence_enable: bool,
    pub slow_interval: Duration,
    pub topology_interval: Duration,
    pub gpm_interval: Duration,
    /// Listen for XIDs on NVML's event set (a thread the NVML backend runs).
    pub nvml_events: bool,
}

/// Switches the GPU pollers read at every poll, shared with them, so that a reload that
/// flips one changes what the next poll reads without making the backends anew (which
/// would drop every GPM-derived series until the next GPM interval).
#[derive(Debug, Clone, Default)]
pub struct LiveSwitches {
    /// Read per-process utilisation (wanted only for per-process series:
    /// `processes.per_process`).
    pub process_utilization: Arc<std::sync::atomic::AtomicBool>,
}

impl LiveSwitches {
    /// Sets every switch from the settings in force.
    pub fn apply(&self, config: &Config) {
        use std::sync::atomic::Ordering;
        self.process_utilization
            .store(config.processes.per_process, Ordering::Relaxed);
    }

    pub fn process_utilization(&self) -> bool {
        self.process_utilization.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl BackendSettings {
    pub fn from_config(config: &Config) -> BackendSettings {
        BackendSettings {
            nvml: config.nvml.clone(),
            amd: config.amd.clone(),
            persistence_enable: config.persistence.enable,
            slow_interval: config.poll.slow_interval,
            topology_interval: config.poll.topology_interval,
            gpm_interval: config.poll.gpm_interval,
            nvml_events: config.xid.nvml_events,
        }
    }
}

/// What the daemon hands to its `gpuwarden probe` child on stdin: the running settings, not
/// the file on disk, which may have changed (or be broken) since the last good reload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildSettings {
    pub nvml: Nvml,
    pub probe: Probe,
}

impl ChildSettings {
    pub fn from_config(config: &Config) -> ChildSettings {
        ChildSettings {
            nvml: config.nvml.clone(),
            probe: config.probe.clone(),
        }
    }
}

/// Everything the running daemon works by.
#[derive(Clone)]
pub struct Settings {
    /// The config these settings were built from (after the command line's overrides).
    pub config: Config,
    pub backends: BackendSettings,
    /// /healthz answers 503 when the poll loop has not published for this long: three poll
    /// intervals, at least five seconds.
    pub stale_after: Duration,
    /// What a scheduled probe child is started with.
    pub probe_child: ChildSettings,
    /// TLS and basic auth (none without `web.config_file`).
    pub web: WebSecurity,
    /// Where the kernel's /sys is found (`amd.sysfs_root`: `/` on a host, a copy in tests):
    /// the PCI census reads it too.
    pub sys_root: std::path::PathBuf,
    /// Which optional metric families are served.
    pub families: Selection,
}

impl Settings {
    /// The daemon's settings: [`Settings::serving_nothing`] plus the TLS and auth of
    /// `web.config_file`. Fails when that web config does not load: serving with weaker
    /// security than configured is not an option, at start or on reload.
    pub fn build(config: Config) -> Result<Settings, crate::config::ConfigError> {
        let web = load_web_security(&config)?;
        Ok(Settings {
            web,
            ..Settings::serving_nothing(config)
        })
    }

    /// Settings for what serves nothing over the network (`check`, tests): everything but TLS
    /// and auth, which stay off.
    pub fn serving_nothing(config: Config) -> Settings {
        Settings {
            backends: BackendSettings::from_config(&config),
            stale_after: config.poll.interval.saturating_mul(3).max(MIN_STALE_AFTER),
            probe_child: ChildSettings::from_config(&config),
            web: WebSecurity::none(),
            // The PCI census reads the same /sys as the amdgpu backend (`amd.sysfs_root`: `/`
            // on a host, a fixture tree in tests).
            sys_root: config.amd.sysfs_root.clone(),
            families: Selection::from_config(&config),
            config,
        }
    }
}

/// The web config named by `web.config_file`: TLS and basic auth, or none.
fn load_web_security(config: &Config) -> Result<WebSecurity, crate::config::ConfigError> {
    if config.web.config_file.as_os_str().is_empty() {
        return Ok(WebSecurity::none());
    }
    let security = WebSecurity::load(&config.web.config_file)?;
    log::info!(
        "web config {}: {}{}",
        config.web.config_file.display(),
        if security.tls.is_some() { "TLS" } else { "plain HTTP" },
        if security.auth_required() { ", basic auth" } else { "" }
    );
    Ok(security)
}

/// The settings every part of the daemon reads; a reload replaces them whole.
pub struct SharedSettings {
    current: RwLock<Arc<Settings>>,
    /// The number of reloads: a task sleeps until it moves instead of looking every second.
    replaced: tokio::sync::watch::Sender<u64>,
    /// For threads ([`SharedSettings::wait_for_reload`]): taken around the look at the count
    /// and around each notify, so a reload or a stop cannot slip in before a wait.
    waiting: std::sync::Mutex<()>,
    reloaded: std::sync::Condvar,
}

impl SharedSettings {
    pub fn new(settings: Settings) -> SharedSettings {
        SharedSettings {
            current: RwLock::new(Arc::new(settings)),
            replaced: tokio::sync::watch::Sender::new(0),
            waiting: std::sync::Mutex::new(()),
            reloaded: std::sync::Condvar::new(),
        }
    }

    /// The settings in force now. Cheap (an `Arc` clone); hold it only as long as one piece
    /// of work, so the next piece sees a reload.
    pub fn current(&self) -> Arc<Settings> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn replace(&self, settings: Settings) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(settings);
        self.replaced.send_modify(|n| *n += 1);
        self.wake_waiters();
    }

    /// The number of reloads so far, for [`SharedSettings::wait_for_reload`].
    pub fn reloads(&self) -> u64 {
        *self.replaced.borrow()
    }

    /// Blocks a thread until a reload after the `seen`-th, a call of `wake_waiters` (the
    /// thread's stop makes one: `stopped` says whether it came before the wait began), or
    /// `timeout`; the number of reloads then. A wake-up for another reason returns early too,
    /// so the caller looks again.
    pub fn wait_for_reload(&self, seen: u64, timeout: Duration, stopped: impl Fn() -> bool) -> u64 {
        let held = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        // Looked at under the lock `wake_waiters` takes (after the count moved, or the stop
        // fired): neither can slip in between this look and the wait.
        if self.reloads() != seen || stopped() {
            return self.reloads();
        }
        let _held = self
            .reloaded
            .wait_timeout(held, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        self.reloads()
    }

    /// Wakes every thread in [`SharedSettings::wait_for_reload`] (at a stop).
    pub fn wake_waiters(&self) {
        let _held = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        self.reloaded.notify_all();
    }

    /// Told of every reload after it (`changed().await` returns after the next one).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.replaced.subscribe()
    }
}

/// Which optional groups of metric families are served; chosen from the config at start and at
/// every reload (`Settings::families`), not looked at inside each read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// dcgm-exporter's names beside ours (`compat.dcgm_exporter`).
    pub dcgm_compat: bool,
    /// A series per NVLink (`nvlink.per_link`).
    pub nvlink_per_link: bool,
    /// The daemon's timing of its own polls and vendor calls (`metrics.poll_timing`).
    pub poll_timing: bool,
}

/// The defaults' selection: gpuwarden's own families and its poll timing, nothing optional.
impl Default for Selection {
    fn default() -> Self {
        Selection {
            dcgm_compat: false,
            nvlink_per_link: false,
            poll_timing: true,
        }
    }
}

impl Selection {
    pub fn from_config(config: &Config) -> Selection {
        Selection {
            dcgm_compat: config.compat.dcgm_exporter,
            nvlink_per_link: config.nvlink.per_link,
            poll_timing: config.metrics.poll_timing,
        }
    }

    /// Everything on: what the docs and the tests of the whole catalogue look at.
    pub const ALL: Selection = Selection {
        dcgm_compat: true,
        nvlink_per_link: true,
        poll_timing: true,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key a reload cannot change is kept at its running value (and only those), and
    /// docs/architecture.md's sentence names every one.
    #[test]
    fn a_reload_keeps_each_restart_only_key_and_the_docs_name_them_all() {
        let running = Config::default();
        for key in RestartOnly::ALL {
            let mut new = Config::default();
            match key {
                RestartOnly::Listen => new.listen = "127.0.0.1:9999".parse().unwrap(),
                RestartOnly::State => new.state.path = "/elsewhere/state.db".into(),
                RestartOnly::LocalApi => new.local_api.socket = "/elsewhere/gw.sock".into(),
                RestartOnly::Events => {
                    let sink = "events:\n  sinks:\n    - name: ops\n      webhook:\n        url: http://127.0.0.1:9/\n";
                    new.events = Config::parse(sink, std::path::Path::new("t.yaml")).unwrap().events
                }
                RestartOnly::KubernetesApi => new.kubernetes.api.server = "https://10.0.0.1:6443".into(),
                RestartOnly::KubernetesNode => new.kubernetes.node.name = "another-node".into(),
                RestartOnly::KubernetesDevices => {
                    new.kubernetes.devices.taint_rules = !new.kubernetes.devices.taint_rules
                }
            }
            new.poll.interval = Duration::from_secs(7);
            assert_ne!(format!("{new:?}"), format!("{running:?}"), "{key:?} made no change");
            keep_restart_only(&running, &mut new);
            assert_eq!(new.poll.interval, Duration::from_secs(7), "a reloadable key stays new");
            new.poll.interval = running.poll.interval;
            assert_eq!(format!("{new:?}"), format!("{running:?}"), "{key:?} was not kept");
        }
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/architecture.md")).unwrap();
        let sentence = doc.lines().find(|l| l.contains("need a restart")).unwrap_or_default();
        for key in RestartOnly::ALL {
            assert!(
                sentence.contains(&format!("`{}`", key.key())),
                "{key:?} is not in: {sentence}"
            );
        }
    }

    #[test]
    fn a_thread_waiting_for_a_reload_wakes_at_the_reload_and_at_a_stop() {
        let shared = Arc::new(SharedSettings::new(Settings::serving_nothing(Config::default())));
        let seen = shared.reloads();
        let waiter = {
            let shared = shared.clone();
            std::thread::spawn(move || shared.wait_for_reload(seen, Duration::from_secs(60), || false))
        };
        std::thread::sleep(Duration::from_millis(50));
        shared.replace(Settings::serving_nothing(Config::default()));
        assert_eq!(waiter.join().unwrap(), seen + 1);
        // A stop: `wake_waiters` ends the wait with no reload.
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let (shared, stopped) = (shared.clone(), stopped.clone());
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                shared.wait_for_reload(seen + 1, Duration::from_secs(60), || {
                    stopped.load(std::sync::atomic::Ordering::SeqCst)
                });
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        shared.wake_waiters();
        assert!(waiter.join().unwrap() < Duration::from_secs(10));
    }

    #[test]
    fn staleness_follows_the_poll_interval_and_never_overflows() {
        for (interval, stale_after) in [
            (Duration::from_secs(1), Duration::from_secs(5)),
            (Duration::from_secs(10), Duration::from_secs(30)),
            (Duration::MAX, Duration::MAX),
        ] {
            let mut config = Config::default();
            config.poll.interval = interval;
            assert_eq!(
                Settings::serving_nothing(config).stale_after,
                stale_after,
                "{interval:?}"
            );
        }
    }
}
