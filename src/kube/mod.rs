//! The verdict on the cluster's own objects, straight to the API server (`kubernetes.node`,
//! `kubernetes.devices`; docs/health.md, "Kubernetes"): the node's condition and taint
//! (kube/node.rs), each GPU's `DeviceTaintRule` (kube/devices.rs), and the journal's rows about
//! a GPU's service as Events (kube/events.rs), over a thin client (kube/client.rs).
//!
//! One thread, like an event sink's (journal/sinks/mod.rs): the API server down, slow or
//! refusing never slows the poll, the scrape or the verdict; it only makes this thread retry,
//! with a back-off from 1 s to 30 s. The condition, taint and rules are levels: each pass
//! makes them what the latest snapshot's verdict says, when that changed, after a failure,
//! and every 5 minutes (the heartbeat), so an outage or a restart loses nothing and a taint
//! someone removed by hand comes back while the GPU is still unhealthy. The Events are edges:
//! read from the journal after a cursor of their own (`kubernetes:events`), in order, at least
//! once, each named after its row so that none is doubled. The cap's decisions go to the
//! GPU's service state as the Slurm drain guard's do (`gpuwarden_drain_guard_refused`,
//! GpuwardenDrainGuardActive, and automatic resets held back); the Events' lag and the
//! thread's failures are served as a sink's (`gpuwarden_sink_*{sink="kubernetes:events"}`).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `client.rs` | A thin client of the Kubernetes API: one request, JSON in and out, over HTTPS with the service account's bearer token |
//! | `devices.rs` | The verdict on each GPU's DRA device (docs/health.md, "Kubernetes"): where the cluster runs a DRA driver, a `DeviceTaintRule` (resource.k8s.io/v1,... |
//! | `events.rs` | The journal's rows about a GPU's service as Kubernetes Events on the node (`kubectl describe node` lists them): a verdict change with its findings, a clear,... |
//! | `node.rs` | The verdict on the node's own Node object (docs/health.md, "Kubernetes"): a condition that follows it (True is a problem, node-problem-detector's... |
//! <!-- /files -->

pub(crate) mod client;
pub(crate) mod devices;
pub(crate) mod events;
pub(crate) mod node;

use crate::config::{Config, KubeNode};
use crate::journal::sinks::outbox;
use crate::lifecycle::{Command, Lifecycle};
use crate::model::scheduler::DrainGuard;
use crate::model::sink::SinkStates;
use crate::service::stop::Stop;
use crate::service::versioned::Versioned;
use crate::snapshot::store::Store;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The Events' cursor in the journal and their name in `gpuwarden_sink_*`: a `:` no sink's
/// name can hold.
pub(crate) const CURSOR: &str = "kubernetes:events";
/// How often a pass runs while nothing changed: the condition's heartbeat.
const RESYNC: Duration = Duration::from_secs(300);
/// While the cap holds the taint back, how often the fleet is counted again.
const RECOUNT: Duration = Duration::from_secs(15);
/// Where the API has no DeviceTaintRules, how often it is asked again.
const DEVICES_AGAIN: Duration = Duration::from_secs(600);
const IDLE: Duration = Duration::from_secs(1);
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The same failure is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(300);
/// Journal rows read at a time.
const BATCH: usize = 100;

/// What the thread reads and writes beside the API server.
pub(crate) struct Shared {
    pub store: Arc<Store>,
    pub lifecycle: Arc<Lifecycle>,
    pub states: Arc<Versioned<SinkStates>>,
    /// The journal file, when the journal is on: the Events come from it.
    pub journal: Option<PathBuf>,
}

impl Shared {
    /// From the daemon's store and sources; `journal` where the journal is on.
    pub(crate) fn new(store: &Arc<Store>, sources: &crate::sources::Sources, journal: Option<PathBuf>) -> Shared {
        Shared {
            store: store.clone(),
            lifecycle: sources.service.clone(),
            states: sources.sinks.clone(),
            journal,
        }
    }
}

/// The Node's name: the setting, else `NODE_NAME` (the DaemonSet's), else the host name.
pub(crate) fn node_name(settings: &KubeNode) -> String {
    if !settings.name.is_empty() {
        return settings.name.clone();
    }
    match std::env::var("NODE_NAME") {
        Ok(name) if !name.trim().is_empty() => name.trim().to_string(),
        _ => crate::input::hostname(),
    }
}

/// Starts the thread when `kubernetes.node.enabled`.
pub(crate) fn spawn(config: &Config, shared: Shared, runtime: tokio::runtime::Handle, stop: &Stop) {
    let kube = &config.kubernetes;
    if !kube.node.enabled {
        if kube.devices.taint_rules {
            log::warn!("kubernetes.devices.taint_rules needs kubernetes.node.enabled; no rule is written");
        }
        return;
    }
    if shared.journal.is_none() {
        log::warn!(
            "kubernetes: the journal is off (state.path is empty): no Events are posted; the condition and taints are"
        );
    }
    shared.states.update(|s| {
        s.entry(CURSOR.to_string()).or_default();
    });
    let worker = Worker {
        node: node_name(&kube.node),
        settings: kube.node.clone(),
        api: kube.api.clone(),
        devices: kube.devices.taint_rules,
        shared,
        runtime,
        stop: stop.unawaited("kubernetes"),
        client: None,
        applied: None,
        devices_applied: None,
        devices_missing_since: None,
        unmatched_said: Default::default(),
        refused: None,
        conn: None,
        said: None,
    };
    log::info!(
        "kubernetes: the verdict goes to node {:?}: condition {}, taint {}, device taint rules {}",
        worker.node,
        worker.settings.condition,
        if worker.settings.taint {
            format!("on (max_tainted {})", worker.settings.max_tainted)
        } else {
            "off".into()
        },
        if worker.devices { "on" } else { "off" }
    );
    let started = std::thread::Builder::new()
        .name("kubernetes".into())
        .spawn(move || worker.run());
    if let Err(e) = started {
        log::error!("kubernetes: cannot start its thread: {e}");
    }
}

/// Why a pass did not go through.
#[derive(Debug, thiserror::Error)]
enum PassError {
    #[error("{0}")]
    Client(client::ApiError),
    #[error("node {node:?}: {error}")]
    Node { node: String, error: client::ApiError },
    #[error("device taint rules: {0}")]
    Devices(client::ApiError),
    #[error("event of journal row {row}: {error}")]
    Event { row: i64, error: client::ApiError },
    #[error("the journal: {0}")]
    Open(crate::journal::store::db::DbError),
    #[error("the journal: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// A GPU's device taint as wanted: (UUID, effect, value).
type DeviceWant = (String, &'static str, String);

struct Worker {
    node: String,
    settings: KubeNode,
    api: crate::config::KubeApi,
    devices: bool,
    shared: Shared,
    runtime: tokio::runtime::Handle,
    stop: Stop,
    client: Option<client::Client>,
    /// What the node's objects were last made to say, and when.
    applied: Option<(node::Wants, Instant)>,
    /// The devices' wanted taints last applied, and when.
    devices_applied: Option<(Vec<DeviceWant>, Instant)>,
    /// Since when the API has been seen to lack DeviceTaintRules.
    devices_missing_since: Option<Instant>,
    /// The GPUs already said to have no device in the node's ResourceSlices.
    unmatched_said: std::collections::BTreeSet<String>,
    /// The cap's refusal standing, and when it was counted.
    refused: Option<(node::Refused, Instant)>,
    conn: Option<(rusqlite::Connection, (u64, u64))>,
    said: Option<(String, Instant)>,
}

impl Worker {
    fn run(mut self) {
        let mut backoff = MIN_BACKOFF;
        loop {
            if self.stop.is_stopped() {
                return;
            }
            let wait = match self.pass() {
                Ok(()) => {
                    backoff = MIN_BACKOFF;
                    IDLE
                }
                Err(_) if self.stop.is_stopped() => return,
                Err(why) => {
                    self.failed(why, backoff);
                    let wait = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    wait
                }
            };
            if self.sleep_telling_lag(wait) {
                return;
            }
        }
    }

    /// Waits `wait`, telling the Events' lag as the journal has it every second meanwhile: rows
    /// keep coming while the API server is down, and GpuwardenSinkLagging must see them then,
    /// not at the next try. True at the stop.
    fn sleep_telling_lag(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if self.stop.sleep(left.min(IDLE)) {
                return true;
            }
            if let Err(e) = self.tell_lag() {
                log::debug!("kubernetes: cannot read the Events' lag: {e}");
            }
        }
    }

    /// Publishes the Events' lag after the cursor, when it moved.
    fn tell_lag(&self) -> rusqlite::Result<()> {
        let Some((conn, _)) = self.conn.as_ref() else {
            return Ok(());
        };
        let Some(cursor) = outbox::known_cursor(conn, CURSOR)? else {
            return Ok(());
        };
        let cursor = if outbox::started_anew(conn, cursor)? { 0 } else { cursor };
        let (lag_rows, oldest) = outbox::lag(conn, cursor)?;
        self.publish_lag(lag_rows, oldest, 0);
        Ok(())
    }

    /// Tells the Events' state: rows delivered now, and the lag (rows, age of the oldest).
    fn publish_lag(&self, lag_rows: u64, oldest: Option<f64>, delivered: u64) {
        let lag_seconds = oldest.map_or(0.0, |at| (crate::model::unix_now() - at).max(0.0).floor());
        let known = self
            .shared
            .states
            .get()
            .get(CURSOR)
            .map(|s| (s.lag_rows, s.lag_seconds));
        if delivered > 0 || known != Some((lag_rows, lag_seconds)) {
            self.shared.states.update(|s| {
                let state = s.entry(CURSOR.to_string()).or_default();
                state.delivered += delivered;
                state.lag_rows = lag_rows;
                state.lag_seconds = lag_seconds;
                if delivered > 0 {
                    state.last_error = None;
                }
            });
        }
    }

    /// One pass: the node, the devices, then the Events.
    fn pass(&mut self) -> Result<(), PassError> {
        if self.client.is_none() {
            self.client = Some(client::Client::new(&self.api).map_err(PassError::Client)?);
        }
        let verdict = crate::health::verdict::of(&self.shared.store.latest());
        // Each part on its own: a node write refused does not hold the Events back.
        let node = self.node_pass(&verdict);
        let devices = if self.devices {
            self.devices_pass(&verdict)
        } else {
            Ok(())
        };
        let events = self.events_pass();
        node.and(devices).and(events)
    }

    fn node_pass(&mut self, verdict: &crate::health::verdict::NodeVerdict) -> Result<(), PassError> {
        let Some(wants) = node::wants(verdict) else {
            return Ok(());
        };
        let changed = self.applied.as_ref().is_none_or(|(w, _)| *w != wants);
        let heartbeat = self.applied.as_ref().is_none_or(|(_, at)| at.elapsed() >= RESYNC);
        let recount = self.refused.as_ref().is_some_and(|(_, at)| at.elapsed() >= RECOUNT) && wants.taint.is_some();
        if !changed && !heartbeat && !recount {
            return Ok(());
        }
        let Some(client) = self.client.as_ref() else {
            return Ok(());
        };
        let applied = self
            .runtime
            .block_on(node::apply(client, &self.settings, &self.node, &wants, heartbeat))
            .map_err(|error| PassError::Node {
                node: self.node.clone(),
                error,
            })?;
        self.tell_guard(&wants, applied);
        self.applied = Some((wants, Instant::now()));
        Ok(())
    }

    /// Logs a change of the cap's decision and tells the GPU's service state, as the Slurm
    /// health check's report does.
    fn tell_guard(&mut self, wants: &node::Wants, applied: node::Applied) {
        let was = self.refused.as_ref().map(|(r, _)| r.clone());
        match (&applied.refused, &was) {
            (Some(now), None) => log::warn!(
                "taint guard: {now}; not tainting node {:?}: {}",
                self.node,
                wants.message.lines().next().unwrap_or("")
            ),
            (None, Some(_)) => log::info!("taint guard: tainting allowed again for node {:?}", self.node),
            _ => {}
        }
        // Told when the fleet was counted for a taint, or when a refusal ends without one (the
        // node healthy again): with the counts the cap last made.
        let counted = applied
            .counted
            .clone()
            .or_else(|| was.clone().filter(|_| applied.refused.is_none()));
        if let Some(counts) = counted {
            let mut report = self
                .shared
                .lifecycle
                .get()
                .scheduler
                .as_ref()
                .clone()
                .unwrap_or_default();
            report.drain_guard = Some((
                crate::model::unix_now(),
                DrainGuard {
                    refused: applied.refused.is_some(),
                    drained: counts.tainted as u32,
                    nodes: counts.fleet as u32,
                    max: self.settings.max_tainted.to_string(),
                },
            ));
            self.shared.lifecycle.apply(Command::SchedulerReport(report));
        }
        self.refused = applied.refused.map(|r| (r, Instant::now()));
    }

    fn devices_pass(&mut self, verdict: &crate::health::verdict::NodeVerdict) -> Result<(), PassError> {
        if verdict.state == crate::health::verdict::VerdictState::Unknown {
            return Ok(());
        }
        if self
            .devices_missing_since
            .is_some_and(|at| at.elapsed() < DEVICES_AGAIN)
        {
            return Ok(());
        }
        let wanted: Vec<DeviceWant> = verdict
            .gpus
            .iter()
            .filter_map(|g| devices::wanted(g).map(|(effect, value)| (g.uuid.clone(), effect, value)))
            .collect();
        let due = self
            .devices_applied
            .as_ref()
            .is_none_or(|(w, at)| *w != wanted || at.elapsed() >= RESYNC);
        if !due {
            return Ok(());
        }
        let Some(client) = self.client.as_ref() else {
            return Ok(());
        };
        match self.runtime.block_on(devices::apply(client, &self.node, verdict)) {
            Ok(applied) => {
                // Each GPU no ResourceSlice lists is named once, not at every change.
                let new: Vec<String> = applied
                    .unmatched
                    .into_iter()
                    .filter(|uuid| self.unmatched_said.insert(uuid.clone()))
                    .collect();
                if !new.is_empty() {
                    log::warn!(
                        "kubernetes: no ResourceSlice of node {:?} lists a device with the uuid of GPU(s) {} (no DRA driver for them?): their devices are not tainted",
                        self.node,
                        new.join(", ")
                    );
                }
                if self.devices_missing_since.take().is_some() {
                    log::info!("kubernetes: the API server has DeviceTaintRules now");
                }
                self.devices_applied = Some((wanted, Instant::now()));
                Ok(())
            }
            Err(e) if devices::unsupported(&e) => {
                log::warn!(
                    "kubernetes.devices.taint_rules: the API server has no resource.k8s.io/v1 DeviceTaintRules (Kubernetes before 1.37, or DRA off): the GPUs' devices are not tainted; asking again in {} minutes",
                    DEVICES_AGAIN.as_secs() / 60
                );
                self.devices_missing_since = Some(Instant::now());
                Ok(())
            }
            Err(e) => Err(PassError::Devices(e)),
        }
    }

    /// Posts the Events of the journal's rows after the cursor, in order, until one fails.
    fn events_pass(&mut self) -> Result<(), PassError> {
        let Some(journal) = self.shared.journal.clone() else {
            return Ok(());
        };
        let id = file_id(&journal);
        if self.conn.as_ref().is_some_and(|(_, had)| Some(*had) != id) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let Some(id) = id else {
                return Ok(());
            };
            let conn = crate::journal::store::db::open_for_cursors(&journal).map_err(PassError::Open)?;
            if !outbox::tables_ready(&conn)? {
                return Ok(());
            }
            self.conn = Some((conn, id));
        }
        loop {
            let more = self.events_batch()?;
            if !more || self.stop.is_stopped() {
                return Ok(());
            }
        }
    }

    /// One batch: Ok(true) when a whole batch went and more may wait.
    fn events_batch(&mut self) -> Result<bool, PassError> {
        let (Some((conn, _)), Some(client)) = (self.conn.as_mut(), self.client.as_ref()) else {
            return Ok(false);
        };
        let now = crate::model::unix_now();
        let cursor = outbox::cursor(conn, CURSOR, outbox::Start::Now, now)?;
        let (rows, restarted) = outbox::after(conn, cursor, BATCH, now)?;
        if restarted.0 {
            outbox::restart(conn, CURSOR, now)?;
        }
        let (lag_rows, oldest) = outbox::lag(conn, if restarted.0 { 0 } else { cursor })?;
        let full = rows.len() == BATCH;
        let mut delivered = 0u64;
        let mut result = Ok(());
        // The cursor moves once a batch, past the last row that went (or needed no Event).
        let mut went: Option<i64> = None;
        for row in &rows {
            if let Some(event) = events::event(row, &self.node) {
                let posted = self.runtime.block_on(client.write(
                    hyper::Method::POST,
                    "/api/v1/namespaces/default/events",
                    "application/json",
                    &event,
                ));
                match posted {
                    Ok(()) => delivered += 1,
                    // Posted before (a retry after a timeout, a restart before the cursor moved).
                    Err(e) if e.status() == Some(hyper::StatusCode::CONFLICT) => {}
                    Err(e) => {
                        result = Err(PassError::Event { row: row.id, error: e });
                        break;
                    }
                }
            }
            went = Some(row.id);
        }
        if let Some(id) = went {
            outbox::acknowledge(conn, CURSOR, id, crate::model::unix_now())?;
        }
        let (lag_rows, oldest) = match result {
            Ok(()) => {
                let left = outbox::known_cursor(conn, CURSOR)?.unwrap_or(cursor);
                outbox::lag(conn, left)?
            }
            Err(_) => (lag_rows, oldest),
        };
        self.publish_lag(lag_rows, oldest, delivered);
        result.map(|()| full)
    }

    /// Counts and logs a failed pass (the same failure at most every 5 minutes).
    fn failed(&mut self, error: PassError, backoff: Duration) {
        let why = error.to_string();
        let repeat = self
            .said
            .as_ref()
            .is_some_and(|(w, at)| *w == why && at.elapsed() < LOG_EVERY);
        if !repeat {
            log::warn!("kubernetes: {why}; retrying every {backoff:?} or less");
            self.said = Some((why.clone(), Instant::now()));
        }
        self.shared.states.update(|s| {
            let state = s.entry(CURSOR.to_string()).or_default();
            state.failed += 1;
            state.last_error = Some(why);
        });
    }
}

/// The file's (device, inode); `None` where it is not there.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
