//! The local API: a Unix socket (config `local_api.socket`, mode 0600) where `gpuwarden
//! health`, Slurm's health check and node-problem-detector ask the running daemon for its
//! verdict, instead of polling the GPUs a second time. Never on the network: the file's
//! mode and the peer's credentials (root or gpuwarden's own user, `SO_PEERCRED`) are its
//! authentication, so it needs no TLS or password.
//!
//! `POST /api/v1/health/clear` (`gpuwarden health clear`) is here only, never on the HTTP
//! server: who cleared a GPU is the peer's credentials (uid, pid and its command name), kept
//! in the journal with the reason.
//!
//! Hostile shapes: a file, link or directory at the path is left alone (only a stale socket
//! is replaced); a peer of another user is closed at once and counted in the log (rate
//! limited); at most [`MAX_CONNECTIONS`] at once, each with the HTTP server's header timeout
//! and size limit (`http::connection_builder`), as long for the body, one request per
//! connection and [`CONNECTION_LIFETIME`] in all: slow or idle clients free their slots in
//! seconds.

use crate::health::clear::{self, ClearRequest};
use crate::journal::Journal;
use crate::journal::event::{Event, GpuRef, Kind};
use crate::lifecycle::ValidationStart;
use crate::model::health::{Clear, Clears};
use crate::serve::http::AppState;
use axum::extract::{DefaultBodyLimit, Extension, FromRef, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Router, body::Bytes};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UnixListener;
use tokio::sync::Semaphore;

/// Local clients at once: a health check every few seconds needs one, but idle or slow
/// clients (root's, the only ones answered) must not queue it behind them: each costs a task
/// and a small buffer, so there is room for many.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// How long a local client has to send its request head, and then its body: a local program
/// sends both at once.
const LOCAL_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest request body: a clear is a GPU and a reason.
const MAX_BODY: usize = 4096;
/// The longest a clear waits for the next poll round to look at the GPU again.
const MAX_CLEAR_WAIT: Duration = Duration::from_secs(10);
/// The longest a clear waits for the journal, before it takes effect (its row) and after the
/// round (its outcome): past it, the clear goes on and the row stays queued. Twice this and
/// the round's wait fit the answer's time-out below.
const CLEAR_JOURNAL_WAIT: Duration = Duration::from_secs(2);

/// What the local API's handlers share.
#[derive(Clone)]
pub(crate) struct LocalState {
    pub app: AppState,
    /// The service state's owner: where a clear and its validation go, as one transition,
    /// and the Slurm health check's report (`gpuwarden health scheduler-report`).
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
    /// Where a clear is recorded; None with the journal off.
    pub journal: Option<Journal>,
}

impl FromRef<LocalState> for AppState {
    fn from_ref(local: &LocalState) -> AppState {
        local.app.clone()
    }
}

/// Who is on the other end of a connection, from the kernel (`SO_PEERCRED`).
#[derive(Debug, Clone)]
struct Peer {
    uid: u32,
    pid: Option<i32>,
}

impl Peer {
    fn of(stream: &tokio::net::UnixStream) -> Option<Peer> {
        let credentials = stream.peer_cred().ok()?;
        Some(Peer {
            uid: credentials.uid(),
            pid: credentials.pid(),
        })
    }

    /// Its command name (/proc/PID/comm; the process sets it, so it is only a hint), read
    /// only for a clear, while the peer waits for its answer: not for every health check.
    fn comm(&self) -> String {
        self.pid
            .and_then(|pid| {
                let mut skips = crate::input::Skips::new(crate::input::Input::Proc);
                crate::input::read_value(Path::new(&format!("/proc/{pid}/comm")), 64, &mut skips)
            })
            .map(|comm| crate::input::printable(comm.trim()))
            .unwrap_or_default()
    }

    /// "uid 0, pid 4242 (bash)".
    fn describe(&self, comm: &str) -> String {
        match self.pid {
            Some(pid) => format!("uid {}, pid {pid} ({comm})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }
}

/// What the socket answers.
pub(crate) fn router(state: LocalState) -> Router {
    Router::new()
        .route("/api/v1/health", get(crate::serve::http::health))
        .route("/api/v1/health/clear", post(clear_gpu))
        .route("/api/v1/health/report", post(scheduler_report))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        // A body that trickles in holds a slot: it has as long as a request head has.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(LOCAL_READ_TIMEOUT))
        // A clear waits for the next poll round (MAX_CLEAR_WAIT at most); nothing takes longer.
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            MAX_CLEAR_WAIT + Duration::from_secs(5),
        ))
        .with_state(state)
}

/// The longest a local connection lives, whatever its client does: one request (a head, a
/// body, a clear's wait for the next poll round) and its answer.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(20);

fn refused(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (status, format!("{message}\n")).into_response()
}

/// `POST /api/v1/health/clear` with `{"gpu": "0", "reason": "reseated, INC-42"}`: clears the
/// GPU from now on, waits for the next poll round to look at it again, records who and why
/// in the journal, and answers what was let go of and what is still present.
async fn clear_gpu(State(local): State<LocalState>, Extension(peer): Extension<Peer>, body: Bytes) -> Response {
    let request: ClearRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return refused(
                StatusCode::BAD_REQUEST,
                format!("not a clear request ({e}); send {{\"gpu\": \"0\", \"reason\": \"...\"}}"),
            );
        }
    };
    let reason = match request.checked_reason() {
        Ok(reason) => reason,
        Err(e) => return refused(StatusCode::BAD_REQUEST, e),
    };
    if let Some(nic) = &request.nic {
        return clear_nic(&local, &peer, nic, reason).await;
    }
    let before = local.app.store.latest();
    let device = match clear::find_gpu(&before, &request.gpu) {
        Ok(device) => device.clone(),
        Err(e) => return refused(StatusCode::NOT_FOUND, e),
    };
    let at = crate::model::unix_now();
    let comm = peer.comm();
    let by = peer.describe(&comm);
    let uuid = device.identity.uuid.clone();
    let kept = Clear {
        at,
        reason: reason.clone(),
        by: by.clone(),
    };
    let (step, validation) = validation_step(&local, &before, &device, &request, &kept);
    // Its outcome (`cleared`, `still`) is known after the next round; until then it is null.
    let row = Event::new(
        at,
        Kind::Clear,
        Some(GpuRef::of(&device.identity)),
        format!("cleared by {by}: {reason}"),
        clear_details(
            &peer,
            &comm,
            &reason,
            [
                ("skip_validation", request.skip_validation.into()),
                ("validation", serde_json::json!(validation)),
            ],
        ),
    );
    let (polled_after, after) = keep_clear(&local, uuid.clone(), kept, step, row).await;
    let mut answer = clear::answer(
        &device,
        after.devices.iter().find(|d| d.identity.uuid == uuid),
        polled_after,
    );
    answer.validation = validation;
    let still: Vec<&str> = answer.still.iter().map(|f| f.reason.as_str()).collect();
    log::info!(
        "GPU {} ({uuid}) cleared by {by}: {reason}; let go of [{}], still present [{}]",
        device.identity.index,
        answer.cleared.join(", "),
        still.join(", ")
    );
    let outcome = serde_json::json!({"cleared": answer.cleared, "still": still});
    amend_outcome(&local, &uuid, at, outcome).await;
    json_answer(&answer)
}

/// A clear's step about validation (health/clear.rs, `validation_step`), for the owner to
/// take with the clear: a new pending validation, or the open one ended as skipped; and what
/// the answer says of it.
fn validation_step(
    local: &LocalState,
    before: &crate::model::Snapshot,
    device: &crate::model::DeviceSnapshot,
    request: &ClearRequest,
    Clear { at, by, reason }: &Clear,
) -> (ValidationStart, Option<String>) {
    let at = *at;
    use crate::model::health::{Validation, ValidationKind, ValidationOutcome};
    let uuid = &device.identity.uuid;
    let on = local.app.settings.current().config.health.validate_after_clear;
    let validation = Validation {
        since: at,
        why: format!("a clear by {by}: {reason}"),
        outcome: None,
        kind: ValidationKind::Repair,
    };
    match clear::validation_step(device, on, request.skip_validation, before.validations.get(uuid)) {
        clear::ValidationStep::Start => {
            log::info!(gpu_uuid = uuid.as_str(); "GPU {} validating: it returns to service once a probe passes", device.identity.index);
            let said = format!(
                "validating: GPU {} stays out of service until a probe passes; it runs as soon as the GPU is idle \
                 (`gpuwarden health` shows it; --skip-validation lets it back without one)",
                device.identity.index
            );
            (ValidationStart::Start(validation), Some(said))
        }
        clear::ValidationStep::Skip => {
            let detail = format!("skipped by {by}: {reason}");
            log::warn!(gpu_uuid = uuid.as_str(); "GPU {} returns to service without a validation probe: {detail}", device.identity.index);
            let said = format!("not validated: {detail}");
            let outcome = ValidationOutcome::Skipped { at, detail };
            (ValidationStart::Skip { validation, outcome }, Some(said))
        }
        clear::ValidationStep::None(why) => (ValidationStart::Nothing, why.map(str::to_string)),
    }
}

/// `POST /api/v1/health/report` with `{"drain_guard": {"refused": true, "drained": 2,
/// "nodes": 3, "max": "2"}}`: what the Slurm health check's fleet drain guard decided about
/// this node (model/scheduler.rs). Kept until the next report; served as
/// `gpuwarden_drain_guard_*`; a change of decision is logged.
async fn scheduler_report(State(local): State<LocalState>, Extension(peer): Extension<Peer>, body: Bytes) -> Response {
    use crate::health::scheduler_report::ReportRequest;
    let request: ReportRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return refused(
                StatusCode::BAD_REQUEST,
                format!(
                    "not a scheduler report ({e}); send {{\"drain_guard\": {{\"refused\": true, \"drained\": 2, \"nodes\": 3, \"max\": \"2\"}}}}"
                ),
            );
        }
    };
    let guard = match request.checked() {
        Ok(guard) => guard,
        Err(e) => return refused(StatusCode::BAD_REQUEST, e),
    };
    let before = local.lifecycle.get().scheduler.clone();
    let was_refused = before
        .as_ref()
        .as_ref()
        .and_then(|r| r.drain_guard.as_ref())
        .map(|(_, g)| g.refused);
    if let Some(g) = &guard
        && Some(g.refused) != was_refused
    {
        let by = peer.describe(&peer.comm());
        if g.refused {
            log::warn!(
                "drain guard ({by}): {} of {} nodes of this node's partitions already drained by gpuwarden (max_drained {}); this node is not drained",
                g.drained,
                g.nodes,
                g.max
            );
        } else if was_refused == Some(true) {
            log::info!(
                "drain guard ({by}): draining allowed again ({} of {} nodes drained)",
                g.drained,
                g.nodes
            );
        }
    }
    let at = crate::model::unix_now();
    let mut report = before.as_ref().clone().unwrap_or_default();
    if let Some(guard) = guard {
        report.drain_guard = Some((at, guard));
    }
    if let Some(node) = request.node {
        report.node = Some((at, node));
    }
    tell_owner(&local, crate::lifecycle::Command::SchedulerReport(report), None).await;
    (StatusCode::OK, "{}").into_response()
}

/// A clear of a network adapter (`"nic": "mlx5_0"`): as a GPU's, keyed `nic:<device>`.
async fn clear_nic(local: &LocalState, peer: &Peer, nic: &str, reason: String) -> Response {
    use crate::health::clear_nic;
    let before = local.app.store.latest();
    let device = match clear_nic::find_nic(&before, nic) {
        Ok(device) => device.clone(),
        Err(e) => return refused(StatusCode::NOT_FOUND, e),
    };
    let at = crate::model::unix_now();
    let comm = peer.comm();
    let by = peer.describe(&comm);
    let key = clear_nic::key(&device.name);
    let kept = Clear {
        at,
        reason: reason.clone(),
        by: by.clone(),
    };
    let row = Event::new(
        at,
        Kind::Clear,
        Some(GpuRef {
            uuid: key.clone(),
            serial: None,
            pci_bus_id: device.pci_bus_id.clone().unwrap_or_default(),
            index: None,
        }),
        format!("network adapter {} cleared by {by}: {reason}", device.name),
        clear_details(peer, &comm, &reason, [("device", device.name.clone().into())]),
    );
    let (polled_after, after) = keep_clear(local, key.clone(), kept, ValidationStart::Nothing, row).await;
    let answer = clear_nic::answer(&before, &after, &device.name, polled_after);
    let still: Vec<String> = answer
        .still
        .iter()
        .map(|f| format!("{} {}", f.subject.as_deref().unwrap_or(""), f.reason))
        .collect();
    log::info!(
        "network adapter {} cleared by {by}: {reason}; let go of [{}], still present [{}]",
        device.name,
        answer.cleared.join(", "),
        still.join(", ")
    );
    amend_outcome(
        local,
        &key,
        at,
        serde_json::json!({"cleared": answer.cleared, "still": still}),
    )
    .await;
    json_answer(&answer)
}

/// A clear row's details as written before the clear takes effect: the reason, who asked
/// (as `by` says it, and uid, pid and command apart), `cleared` and `still` null until the
/// round after it is in (`amend_outcome`), and what the kind of clear adds.
fn clear_details<const N: usize>(
    peer: &Peer,
    comm: &str,
    reason: &str,
    extra: [(&str, serde_json::Value); N],
) -> serde_json::Value {
    let mut details = serde_json::json!({
        "reason": reason,
        "by": peer.describe(comm),
        "uid": peer.uid,
        "pid": peer.pid,
        "comm": comm,
        "cleared": null,
        "still": null,
    });
    if let Some(fields) = details.as_object_mut() {
        fields.extend(extra.into_iter().map(|(k, v)| (k.to_string(), v)));
    }
    details
}

/// Keeps a clear under `key` (a GPU's UUID, or `nic:<device>`), its `row` in the journal
/// first, and waits for the next poll round to look again: whether one came, and the
/// snapshot after it.
async fn keep_clear(
    local: &LocalState,
    key: String,
    clear: Clear,
    validation: ValidationStart,
    row: Event,
) -> (bool, std::sync::Arc<crate::model::Snapshot>) {
    let at = clear.at;
    // The clear and its validation, one transition: no snapshot has one without the other.
    let command = crate::lifecycle::Command::Clear {
        key: key.clone(),
        clear,
        validation,
    };
    tell_owner(local, command, Some(row)).await;
    // The answer is the first round judged with this clear: one that began before it and
    // was published after would still show what it let go of.
    let polled_after = next_round(&local.app, Instant::now(), |clears| {
        clears.get(&key).is_some_and(|clear| clear.at == at)
    })
    .await;
    (polled_after, local.app.store.latest())
}

/// Sets a clear's outcome (`cleared`, `still`) in its row, and waits until it is in the file
/// (at most [`CLEAR_JOURNAL_WAIT`]): once `health clear` has answered, the row is whole.
async fn amend_outcome(local: &LocalState, key: &str, at: f64, outcome: serde_json::Value) {
    let Some(journal) = local.journal.clone() else {
        return;
    };
    let amendment = crate::journal::store::worker::Amendment {
        kind: Kind::Clear,
        gpu_uuid: key.to_string(),
        at,
        set: outcome,
    };
    let deadline = Instant::now() + CLEAR_JOURNAL_WAIT;
    let in_file = tokio::task::spawn_blocking(move || journal.amend(amendment).wait_until(deadline)).await;
    if !matches!(in_file, Ok(true)) {
        log::warn!("journal: the clear's outcome was not in the file within {CLEAR_JOURNAL_WAIT:?}; it stays queued");
    }
}

/// For the test of a kill between a clear's row and its effect (tests/all/health_api.rs): with
/// `GPUWARDEN_TEST_PAUSE_AFTER_CLEAR_ROW` set, a debug build's clear waits there for good.
#[cfg(debug_assertions)]
fn pause_between_journal_and_publish() {
    if std::env::var_os("GPUWARDEN_TEST_PAUSE_AFTER_CLEAR_ROW").is_some() {
        log::warn!("GPUWARDEN_TEST_PAUSE_AFTER_CLEAR_ROW: the clear's row is in; pausing before it takes effect");
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Hands `command` to the service state's owner on the blocking pool, `row` in the journal
/// first where there is one (a clear's): the owner waits for the journal to have the
/// transition in the file before it publishes it, and neither wait may hold up one of the
/// runtime's two workers (the journal's task may need the other).
async fn tell_owner(local: &LocalState, command: crate::lifecycle::Command, row: Option<Event>) {
    let lifecycle = local.lifecycle.clone();
    let journal = local.journal.clone();
    let told = tokio::task::spawn_blocking(move || {
        // On record before it takes effect: a daemon killed in between finds the clear at its
        // next start (the seed reads it back), never a GPU let go that a restart holds again.
        if let (Some(journal), Some(row)) = (journal, row) {
            if !journal.record_and_wait(row, CLEAR_JOURNAL_WAIT) {
                log::warn!(
                    "journal: the clear's row was not in the file within {CLEAR_JOURNAL_WAIT:?}; clearing anyway"
                );
            }
            #[cfg(debug_assertions)]
            pause_between_journal_and_publish();
        }
        lifecycle.apply(command)
    })
    .await;
    if let Err(e) = told {
        log::error!("the service state's owner did not take a command: {e}");
    }
}

/// A clear's answer as JSON.
fn json_answer(answer: &impl serde::Serialize) -> Response {
    match serde_json::to_string(answer) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => refused(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// Waits for a poll round published after `since` that was judged with clears `judged`
/// accepts (a poll interval and its timeout, at most [`MAX_CLEAR_WAIT`]); false when none
/// came.
async fn next_round(app: &AppState, since: Instant, judged: impl Fn(&Clears) -> bool) -> bool {
    let poll = app.settings.current().config.poll.clone();
    let deadline = since + (poll.interval + poll.timeout).min(MAX_CLEAR_WAIT) + Duration::from_millis(500);
    loop {
        if app
            .store
            .round_clears()
            .is_some_and(|(at, clears)| at > since && judged(&clears))
        {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Why the socket was not opened; the daemon goes on without it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocalApiError {
    #[error("{} exists and is not a socket; remove it or set local_api.socket", .0.display())]
    NotASocket(PathBuf),
    #[error("cannot listen on {}: {source}; create its directory (systemd: RuntimeDirectory=gpuwarden) or set local_api.socket", .path.display())]
    Bind { path: PathBuf, source: std::io::Error },
    #[error("{} is the socket of a running daemon ({why}); left to it (stop the other daemon, or give this one another local_api.socket)", .path.display())]
    InUse { path: PathBuf, why: &'static str },
}

/// How long a socket found at the path has to accept a connection before it is taken for
/// a live daemon's (a stopped daemon with a full accept queue does not answer at all).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether a socket at `path` belongs to a live daemon: Err with why when it does (or when it
/// cannot be told), Ok when nothing listens there any more (a daemon that was killed).
fn probe_existing(path: &Path) -> Result<(), &'static str> {
    let target = path.to_path_buf();
    let connected = crate::service::deadline::within("local-api-probe", PROBE_TIMEOUT, move || {
        std::os::unix::net::UnixStream::connect(&target).map(drop)
    });
    match connected {
        Ok(Ok(())) => Err("it accepts connections"),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(Err(_)) => Err("it cannot be connected to, so it cannot be told stale"),
        Err(crate::service::deadline::Late::Spawn(_)) => Err("could not check it"),
        Err(crate::service::deadline::Late::TimedOut(_)) => {
            Err("it does not answer within a second but is listening: a stopped daemon")
        }
    }
}

/// Makes the socket's directory (0750) when it is missing, as systemd's RuntimeDirectory=
/// does for the unit: `gpuwarden run` started by hand as root gets its local API too. Only
/// the last component is made, under an existing parent (never a whole tree of root-owned
/// directories from a mistyped path).
fn make_directory(path: &Path) {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return;
    };
    if dir.exists() || own_uid() != 0 {
        return;
    }
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o750).create(dir) {
        Ok(()) => log::info!("made {} (mode 0750) for the local API", dir.display()),
        Err(e) => log::debug!("cannot make {}: {e}", dir.display()),
    }
}

/// Binds the socket: a stale one (a daemon that was killed) is replaced; a live daemon's
/// socket, or anything else at the path, is refused. The directory is made when missing.
pub(crate) fn bind(path: &Path) -> Result<UnixListener, LocalApiError> {
    make_directory(path);
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(LocalApiError::NotASocket(path.to_path_buf()));
        }
        probe_existing(path).map_err(|why| LocalApiError::InUse {
            path: path.to_path_buf(),
            why,
        })?;
        let _ = std::fs::remove_file(path);
    }
    let bind_error = |source| LocalApiError::Bind {
        path: path.to_path_buf(),
        source,
    };
    let listener = UnixListener::bind(path).map_err(bind_error)?;
    // Others' requests are refused by credentials too; the mode keeps them from connecting.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    Ok(listener)
}

/// Serves until `stop`, then removes the socket (only while it is still this daemon's).
pub(crate) async fn serve(listener: UnixListener, path: PathBuf, app: Router, stop: crate::service::stop::Stop) {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::symlink_metadata(&path).map(|m| m.ino()).ok();
    let mut builder = crate::serve::http::connection_builder();
    // One request a connection (the clients send Connection: close anyway): an idle client
    // never keeps a slot between requests.
    builder.keep_alive(false).header_read_timeout(LOCAL_READ_TIMEOUT);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut refused = crate::service::logging::RateLimiter::new(Duration::from_secs(60));
    let own_uid = own_uid();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.stopped() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.stopped() => break,
        };
        let peer = Peer::of(&stream);
        let uid = peer.as_ref().map(|p| p.uid);
        let Some(peer) = peer.filter(|p| p.uid == 0 || p.uid == own_uid) else {
            if let Some(skipped) = refused.allow("peer") {
                log::warn!(
                    "local API {}: refused a client of uid {uid:?} (only root and gpuwarden's user \
                     are answered){}",
                    path.display(),
                    crate::service::logging::held_back_suffix(skipped)
                );
            }
            continue;
        };
        let app = app.clone().layer(Extension(peer));
        let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
            drop(permit);
        });
    }
    drop(listener);
    if inode.is_some() && std::fs::symlink_metadata(&path).map(|m| m.ino()).ok() == inode {
        let _ = std::fs::remove_file(&path);
    }
}

fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
