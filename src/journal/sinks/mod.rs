//! Delivery of the journal's rows to each configured sink (docs/journal.md, "Events out"), at
//! least once: one thread per sink reads the rows after its cursor (journal/sinks/outbox.rs), in
//! order, posts each as a CloudEvent (journal/sinks/cloudevent.rs) or each batch as OTLP logs
//! (journal/sinks/otlp.rs) over HTTP (journal/sinks/webhook.rs), and moves the cursor only once the sink
//! said yes. A failure is retried, the same event, after a back-off
//! that doubles from 1 s to 5 minutes; nothing after it goes first. It never blocks polling or
//! the verdict: its own thread, its own connection to the journal file, and its own state,
//! which /metrics shows (`gpuwarden_sink_*`). The daemon's stop does not wait for a delivery
//! in flight: its cursor moves only after the sink's yes, so the event goes again after the
//! restart (the same id).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `cloudevent.rs` | A journal row as a CloudEvents 1.0 event in structured mode (`application/cloudevents+json`; docs/journal.md, "Events out"), and the HMAC-SHA256 signature a... |
//! | `otlp.rs` | Journal rows as OTLP logs (docs/journal.md, "Events out"): one `ExportLogsServiceRequest` per batch, protobuf over HTTP (`POST /v1/logs`,... |
//! | `outbox.rs` | The journal's outbox for sinks that take its rows off the node (docs/journal.md, "Events out"): each sink's cursor, the id of the last row it acknowledged,... |
//! | `webhook.rs` | One POST of one event to a webhook sink (journal/sinks/mod.rs delivers them in order), through the one HTTP client (service/http_client.rs): whatever the... |
//! <!-- /files -->

pub(crate) mod cloudevent;
pub(crate) mod otlp;
pub(crate) mod outbox;
pub(crate) mod webhook;

use crate::config::{Sink, SinkStart};
use crate::journal::store::db;
use crate::model::sink::{SinkState, SinkStates};
use crate::service::stop::Stop;
use crate::service::versioned::Versioned;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first retry's wait, doubled at each failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How often an idle sink looks for new rows.
const IDLE: Duration = Duration::from_secs(1);
/// Rows read at a time.
const BATCH: usize = 100;
/// The most a secret file may hold.
const MAX_SECRET: u64 = 4096;
/// The same failure is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(300);

/// What a sink needs that is read once at its start: the endpoint, TLS, what it sends.
struct Prepared {
    endpoint: webhook::Endpoint,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    format: Format,
}

/// What goes in one POST.
enum Format {
    /// One row as a CloudEvent, signed with the secret when there is one.
    CloudEvent { secret: Option<Vec<u8>> },
    /// The batch's rows as one OTLP logs request.
    Otlp,
}

/// Why a sink cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SinkError {
    #[error("{0}")]
    Url(#[from] crate::config::BadUrl),
    #[error("its secret file {0}: {1}")]
    Secret(PathBuf, SecretError),
    #[error("its CA file {0}: {1}")]
    Ca(PathBuf, String),
}

/// The system's CA bundle (Debian, Ubuntu, Fedora and Alpine put one here).
const SYSTEM_CAS: &str = "/etc/ssl/certs/ca-certificates.crt";

fn prepare(sink: &Sink) -> Result<Prepared, SinkError> {
    let (url, timeout, ca_file) = sink.target();
    let endpoint = webhook::Endpoint::parse(url)?;
    let format = match &sink.webhook {
        Some(hook) if !hook.secret_file.as_os_str().is_empty() => {
            let path = &hook.secret_file;
            let key = read_secret(path).map_err(|why| SinkError::Secret(path.clone(), why))?;
            Format::CloudEvent { secret: Some(key) }
        }
        Some(_) => Format::CloudEvent { secret: None },
        None => Format::Otlp,
    };
    let tls = if endpoint.tls {
        let ca = if ca_file.as_os_str().is_empty() {
            PathBuf::from(SYSTEM_CAS)
        } else {
            ca_file.to_path_buf()
        };
        Some(Arc::new(client_tls(&ca)?))
    } else {
        None
    };
    Ok(Prepared {
        endpoint,
        tls,
        timeout,
        format,
    })
}

/// Why a secret file gives no key.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretError {
    #[error("{0}")]
    Open(crate::input::Refused),
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("it holds more than {MAX_SECRET} bytes; a key is 32 to 64")]
    TooLong,
    #[error("it is empty")]
    Empty,
}

/// The secret file's bytes, without a trailing newline: a regular file (the administrator's
/// path: a link is followed), at most [`MAX_SECRET`] bytes.
fn read_secret(path: &Path) -> Result<Vec<u8>, SecretError> {
    use crate::input::{Kinds, Links};
    use std::io::Read;
    let file = crate::input::open(path, Links::Follow, Kinds::Regular).map_err(SecretError::Open)?;
    let mut key = Vec::new();
    file.take(MAX_SECRET + 1).read_to_end(&mut key)?;
    if key.len() as u64 > MAX_SECRET {
        return Err(SecretError::TooLong);
    }
    while key.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        key.pop();
    }
    if key.is_empty() {
        return Err(SecretError::Empty);
    }
    Ok(key)
}

pub(crate) fn client_tls(ca: &Path) -> Result<rustls::ClientConfig, SinkError> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let failed = |e: &dyn std::fmt::Display| SinkError::Ca(ca.to_path_buf(), e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| failed(&e))? {
        let cert = cert.map_err(|e| failed(&e))?;
        // A certificate the store refuses is skipped: the system bundle holds some old ones.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(failed(&"it holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| failed(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Starts a thread per sink. A sink that cannot start (its secret unreadable, say) tries again
/// at each back-off, each try a failure in its state and the log, its lag counted all along
/// (so GpuwardenSinkLagging fires for it); the others run.
pub(crate) fn spawn_all(
    sinks: &[Sink],
    journal: &Path,
    runtime: tokio::runtime::Handle,
    states: Arc<Versioned<SinkStates>>,
    stop: &Stop,
) {
    for sink in sinks {
        states.update(|s| {
            s.insert(sink.name.clone(), SinkState::default());
        });
        let (sink, journal, runtime, states, stop) = (
            sink.clone(),
            journal.to_path_buf(),
            runtime.clone(),
            states.clone(),
            stop.unawaited("sink"),
        );
        let started = std::thread::Builder::new()
            .name(format!("sink-{}", sink.name))
            .spawn(move || deliver(&sink, &journal, &runtime, &states, &stop));
        if let Err(e) = started {
            log::error!("events: cannot start a thread for a sink: {e}");
        }
    }
}

/// The sink's loop: rows after the cursor, one at a time, until the stop.
fn deliver(sink: &Sink, journal: &Path, runtime: &tokio::runtime::Handle, states: &Versioned<SinkStates>, stop: &Stop) {
    let start = match sink.start {
        SinkStart::Now => outbox::Start::Now,
        SinkStart::Beginning => outbox::Start::Beginning,
    };
    // The connection, and the file (device, inode) it was opened on.
    let mut conn: Option<(rusqlite::Connection, (u64, u64))> = None;
    let mut backoff = MIN_BACKOFF;
    let mut said: Option<(String, Instant)> = None;
    let mut prepared: Option<Prepared> = None;
    loop {
        if stop.is_stopped() {
            return;
        }
        let ready = match prepared.as_ref() {
            Some(p) => Ok(p),
            None => match prepare(sink) {
                Ok(p) => Ok(&*prepared.insert(p)),
                Err(e) => Err(e),
            },
        };
        // A file deleted or replaced while the daemon runs (the writer refills a new one): the
        // old connection would read the old file for good.
        let now_at = file_id(journal);
        if conn.as_ref().is_some_and(|(_, id)| Some(*id) != now_at) {
            conn = None;
        }
        let step = match (conn.as_mut(), now_at) {
            (Some((c, _)), _) => one_batch(c, sink, start, ready, runtime, states),
            // The writer makes the file on a first start: nothing to deliver until it has.
            (None, None) => Ok(false),
            (None, Some(id)) => db::open_for_cursors(journal)
                .map_err(DeliveryError::from)
                .and_then(|opened| {
                    // The writer makes the file first and its tables a moment later: until
                    // they are there, there is nothing to deliver (and no failure to report).
                    let ready = outbox::tables_ready(&opened)?;
                    if ready {
                        conn = Some((opened, id));
                    }
                    Ok(ready)
                }),
        };
        let wait = match step {
            Ok(true) => {
                backoff = MIN_BACKOFF;
                continue;
            }
            Ok(false) => IDLE,
            // A delivery cut short by the stop is no failure to report.
            Err(_) if stop.is_stopped() => return,
            Err(error) => {
                let why = error.to_string();
                let repeat = said
                    .as_ref()
                    .is_some_and(|(w, at)| *w == why && at.elapsed() < LOG_EVERY);
                if !repeat {
                    log::warn!(
                        "events: sink {:?} failed ({why}); retrying every {backoff:?} or less",
                        sink.name
                    );
                    said = Some((why.clone(), Instant::now()));
                }
                states.update(|s| {
                    let state = s.entry(sink.name.clone()).or_default();
                    state.failed += 1;
                    state.last_error = Some(why);
                });
                let wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            }
        };
        if sleep_telling_lag(wait, conn.as_ref().map(|(c, _)| c), sink, states, stop) {
            return;
        }
    }
}

/// Waits `wait` (a back-off of up to 5 minutes, or an idle second), telling the sink's lag
/// as the journal has it every second meanwhile: rows keep coming while a sink is down, and
/// GpuwardenSinkLagging must see them when they come, not at the next try. True at the stop.
fn sleep_telling_lag(
    wait: Duration,
    conn: Option<&rusqlite::Connection>,
    sink: &Sink,
    states: &Versioned<SinkStates>,
    stop: &Stop,
) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        if stop.sleep(left.min(IDLE)) {
            return true;
        }
        if let Some(conn) = conn
            && let Ok(Some(cursor)) = outbox::known_cursor(conn, &sink.name)
            && let Err(e) = tell_lag(conn, sink, cursor, states, crate::model::unix_now())
        {
            log::debug!("events: sink {:?}: cannot read its lag: {e}", sink.name);
        }
    }
}

/// Publishes the sink's lag after `cursor` as the journal has it now (a cursor past the
/// newest row: a journal started anew, every row to go), when it changed.
fn tell_lag(
    conn: &rusqlite::Connection,
    sink: &Sink,
    cursor: i64,
    states: &Versioned<SinkStates>,
    now: f64,
) -> rusqlite::Result<()> {
    let (lag_rows, oldest) = outbox::lag(conn, if outbox::started_anew(conn, cursor)? { 0 } else { cursor })?;
    // Told only when it moved (whole seconds): an idle sink looks every second, and each
    // change republishes the snapshot.
    let lag_seconds = oldest.map_or(0.0, |at| (now - at).max(0.0).floor());
    let known = states.get().get(&sink.name).map(|s| (s.lag_rows, s.lag_seconds));
    if known != Some((lag_rows, lag_seconds)) {
        states.update(|s| {
            let state = s.entry(sink.name.clone()).or_default();
            state.lag_rows = lag_rows;
            state.lag_seconds = lag_seconds;
        });
    }
    Ok(())
}

/// Why a delivery step failed.
#[derive(Debug, thiserror::Error)]
enum DeliveryError {
    #[error("the journal: {0}")]
    Open(#[from] db::DbError),
    #[error("the journal: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("cannot write the event: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("event {row}: {error}")]
    Post { row: i64, error: webhook::PostError },
    #[error("it cannot start: {0}")]
    NotReady(String),
}

/// Delivers the rows after the cursor, in order, until one fails: Ok(true) when some went,
/// Ok(false) when there were none, Err with why the first that did not go failed.
fn one_batch(
    conn: &mut rusqlite::Connection,
    sink: &Sink,
    start: outbox::Start,
    prepared: Result<&Prepared, SinkError>,
    runtime: &tokio::runtime::Handle,
    states: &Versioned<SinkStates>,
) -> Result<bool, DeliveryError> {
    let now = crate::model::unix_now();
    let cursor = outbox::cursor(conn, &sink.name, start, now)?;
    let (rows, restarted) = outbox::after(conn, cursor, BATCH, crate::model::unix_now())?;
    if restarted.0 {
        log::warn!(
            "events: sink {:?}: the journal was started anew (its rows begin again); delivering from its first row",
            sink.name
        );
        outbox::restart(conn, &sink.name, now)?;
    }
    tell_lag(conn, sink, if restarted.0 { 0 } else { cursor }, states, now)?;
    // Its lag is counted above even when it cannot start, so its alert fires.
    let prepared = prepared.map_err(|e| DeliveryError::NotReady(e.to_string()))?;
    let any = !rows.is_empty();
    // The state is told once per batch, not per event: each change republishes the snapshot.
    let mut delivered = 0u64;
    let result = match &prepared.format {
        Format::CloudEvent { secret } => rows.iter().try_for_each(|row| {
            post_one(conn, sink, prepared, runtime, row, secret.as_deref())?;
            delivered += 1;
            Ok(())
        }),
        Format::Otlp => post_batch(conn, sink, prepared, runtime, &rows).map(|()| delivered = rows.len() as u64),
    };
    if delivered > 0 {
        states.update(|s| {
            let state = s.entry(sink.name.clone()).or_default();
            state.delivered += delivered;
            state.last_error = None;
        });
        // A batch cut short goes into a back-off: its lag as the journal has it now (rows
        // written meanwhile count too). One that went whole is followed at once by the next
        // batch, which tells it.
        if result.is_err() {
            let cursor = outbox::known_cursor(conn, &sink.name)?.unwrap_or(cursor);
            tell_lag(conn, sink, cursor, states, crate::model::unix_now())?;
        }
    }
    result.map(|()| any)
}

/// Posts the batch as one OTLP request and moves the cursor past its last row once the
/// collector said yes.
fn post_batch(
    conn: &mut rusqlite::Connection,
    sink: &Sink,
    prepared: &Prepared,
    runtime: &tokio::runtime::Handle,
    rows: &[crate::journal::store::read::Row],
) -> Result<(), DeliveryError> {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return Ok(());
    };
    let body = crate::journal::sinks::otlp::body(rows, crate::model::unix_now());
    let headers = [("content-type", "application/x-protobuf".to_string())];
    send(prepared, runtime, &headers, body).map_err(|error| DeliveryError::Post { row: first.id, error })?;
    outbox::acknowledge(conn, &sink.name, last.id, crate::model::unix_now())?;
    Ok(())
}

/// Posts one row and moves the cursor past it once the sink said yes.
fn post_one(
    conn: &mut rusqlite::Connection,
    sink: &Sink,
    prepared: &Prepared,
    runtime: &tokio::runtime::Handle,
    row: &crate::journal::store::read::Row,
    secret: Option<&[u8]>,
) -> Result<(), DeliveryError> {
    let body = serde_json::to_vec(&cloudevent::event(row))?;
    let mut headers = vec![("content-type", "application/cloudevents+json".to_string())];
    if let Some(secret) = secret {
        headers.push((cloudevent::SIGNATURE_HEADER, cloudevent::signature(secret, &body)));
    }
    send(prepared, runtime, &headers, body).map_err(|error| DeliveryError::Post { row: row.id, error })?;
    outbox::acknowledge(conn, &sink.name, row.id, crate::model::unix_now())?;
    Ok(())
}

/// One POST to the sink's endpoint, on the daemon's runtime, within the sink's timeout.
fn send(
    prepared: &Prepared,
    runtime: &tokio::runtime::Handle,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(), webhook::PostError> {
    runtime.block_on(webhook::post(
        &prepared.endpoint,
        prepared.tls.as_ref(),
        headers,
        body,
        prepared.timeout,
    ))
}

/// The file's (device, inode); `None` where it is not there.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
