//! The HTTP server: `/metrics`, `/healthz` and `/`.
//!
//! Handlers only read the snapshot store and the render cache; nothing here calls a vendor
//! library, so a hung driver can never hold up a scrape.
//!
//! The accept loop is our own (hyper-util) rather than `axum::serve`, for the limits a
//! daemon on every node needs: a client gets 5 seconds to send its request headers (a
//! slowloris client is dropped instead of holding a connection forever) and 90 seconds
//! between requests on a kept-alive connection (keep_alive.rs), headers may take 16 KiB, and
//! at most 4096 connections are open at once; when all are taken, those that waited longest
//! for a request are closed to admit new ones (slots.rs), so no client can lock scrapes out
//! by holding them. Requests have 10 seconds to be answered.
//!
//! With a web config (web_config.rs) connections are TLS (the handshake gets the same 5
//! seconds as the headers) and every endpoint asks for basic auth. The security settings sit
//! behind a lock so that a reload can swap them; each connection takes the TLS settings of
//! the moment it was accepted.

use crate::config::settings::SharedSettings;
use crate::journal::store::worker;
use crate::metrics::exposition::{self, RenderCache};
use crate::serve::keep_alive::{HEADER_READ_TIMEOUT, HeadDeadline};
use crate::serve::slots;
use crate::serve::status_page;
use crate::snapshot::store::Store;
use axum::Router;
use axum::extract::Request;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::timeout::TimeoutLayer;

/// Connections open at once; more wait in the kernel's accept queue.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// The largest request head we read.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Connections the kernel completes and queues for us before it drops new SYNs: tokio's
/// default (128 here) filled in a burst, and a fresh scrape's dropped SYN waits a second for
/// its retransmission; the kernel caps it at net.core.somaxconn (4096 on current kernels), as
/// Go's servers ask for.
const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket on `address` with [`LISTEN_BACKLOG`], SO_REUSEADDR as std sets it.
pub(crate) fn listen_with_backlog(address: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match address {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// HTTP/1 connections as every listener serves them: a request head of at most
/// [`MAX_HEADER_BYTES`]. hyper's own header timeout is off: it would count the time between
/// requests too (keep_alive.rs); the TCP listener wraps each connection in a
/// [`HeadDeadline`], and the local API sets hyper's, with one request a connection.
pub(crate) fn connection_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(MAX_HEADER_BYTES);
    builder
}

/// Serves `app` until `stop`, then lets requests in flight finish for up to `drain` and
/// returns.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    settings: Arc<SharedSettings>,
    stop: crate::service::stop::Stop,
    drain: Duration,
) {
    let builder = connection_builder();
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // The most connections open at once since the last trim, kept at accept time so that a
    // burst shorter than the trimmer's tick is seen.
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Told when the peak reaches a burst: the trimmer sleeps until then.
    let burst = Arc::new(tokio::sync::Notify::new());
    let trimmer = tokio::spawn(return_memory_after_bursts(slots.clone(), peak.clone(), burst.clone()));
    let mut accept_errors = crate::service::logging::RateLimiter::new(Duration::from_secs(60));
    let mut evictions = crate::service::logging::RateLimiter::new(Duration::from_secs(300));
    let registry = slots::Registry::default();
    loop {
        if stop.is_stopped() {
            break;
        }
        let Some(permit) = take_slot(&slots, &registry, &mut evictions, &stop).await else {
            break;
        };
        let open = MAX_CONNECTIONS - slots.available_permits();
        if peak.fetch_max(open, std::sync::atomic::Ordering::Relaxed) < BURST && open >= BURST {
            burst.notify_one();
        }
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: say so now and then, and carry on.
                    if accept_errors.allow("accept").is_some() {
                        log::warn!("accepting a connection failed: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.stopped() => break,
        };
        let tls = settings.current().web.tls.clone();
        spawn_connection(
            stream,
            app.clone(),
            tls,
            &builder,
            &graceful,
            Admitted {
                permit,
                slot: registry.admit(),
            },
        );
    }
    drop(listener);
    trimmer.abort();
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        log::warn!("scrapes still open after {drain:?}; closing them");
    }
}

/// A free connection slot; when every slot is taken, the connections that waited longest for
/// a request give theirs up (slots.rs), looked at again while none comes free (the ones held
/// may all be young). None at the stop.
async fn take_slot(
    slots: &Arc<Semaphore>,
    registry: &slots::Registry,
    evictions: &mut crate::service::logging::RateLimiter,
    stop: &crate::service::stop::Stop,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(permit) = slots.clone().try_acquire_owned() {
        return Some(permit);
    }
    loop {
        let closed = registry.evict_longest_waiting(slots::EVICT_AT_ONCE, slots::MIN_WAIT);
        if closed > 0 && evictions.allow("evict").is_some() {
            log::warn!(
                "all {MAX_CONNECTIONS} HTTP connection slots were taken; closed {closed} connection(s) that waited \
                 longest for a request to admit new ones (one client holding many connections?)"
            );
        }
        tokio::select! {
            permit = slots.clone().acquire_owned() => return permit.ok(),
            _ = tokio::time::sleep(slots::MIN_WAIT / 5) => {}
            _ = stop.stopped() => return None,
        }
    }
}

/// What an accepted connection holds while it is open: one of the `MAX_CONNECTIONS` permits,
/// and its slot in the registry that picks the longest-waiting connections to give theirs up.
struct Admitted {
    permit: tokio::sync::OwnedSemaphorePermit,
    slot: Arc<slots::Tracker>,
}

/// Serves one accepted connection on a task of its own, over TLS when configured; the
/// permit goes with it.
fn spawn_connection(
    stream: tokio::net::TcpStream,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    builder: &http1::Builder,
    graceful: &GracefulShutdown,
    Admitted { permit, slot }: Admitted,
) {
    let service = TowerToHyperService::new(app);
    match tls {
        None => {
            let stream = HeadDeadline::in_slot(stream, slot);
            let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                // A client that goes away mid-request is not our error.
                let _ = connection.await;
                drop(permit);
            });
        }
        Some(config) => {
            let builder = builder.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(config);
                // A failed or too slow handshake (a plain-HTTP client, a wrong client
                // certificate, a slowloris) just ends the connection.
                if let Ok(Ok(tls_stream)) = tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                    let stream = HeadDeadline::in_slot(tls_stream, slot);
                    let connection = watcher.watch(builder.serve_connection(TokioIo::new(stream), service));
                    let _ = connection.await;
                }
                drop(permit);
            });
        }
    }
}

/// Open connections above which a burst is worth giving memory back for afterwards.
const BURST: usize = 256;
/// Open connections at or below which the burst is over (Prometheus keeps one or two open).
const CALM: usize = 16;

/// Each open connection holds buffers; glibc keeps what a burst of thousands freed in its
/// arenas, so RSS stayed at its peak for good (88 MB after twelve bursts of 2000). Once the
/// connections drop back after a burst, hand the free memory back to the kernel.
async fn return_memory_after_bursts(
    slots: Arc<Semaphore>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
    burst: Arc<tokio::sync::Notify>,
) {
    use std::sync::atomic::Ordering;
    loop {
        // Asleep until a burst: no wake-up a second on a node scraped once in a while.
        burst.notified().await;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let open = MAX_CONNECTIONS - slots.available_permits();
            if peak.load(Ordering::Relaxed) >= BURST && open <= CALM {
                peak.store(open, Ordering::Relaxed);
                crate::service::logging::trim_heap();
                break;
            }
        }
    }
}

#[derive(Clone)]
pub(crate) struct AppState {
    pub store: Arc<Store>,
    pub cache: Arc<RenderCache>,
    /// The running settings: the staleness limit of /healthz, TLS and basic auth. Read at
    /// every request, so a reload applies to the next one.
    pub settings: Arc<SharedSettings>,
    /// Journal reads at once (the API and the status page): each runs a worker process
    /// (journal/store/worker.rs) that opens the file read-only; more wait (the page) or get 503
    /// (the API).
    pub journal_readers: Arc<Semaphore>,
    /// Each GPU's last hour and day (`/api/v1/history`, the status page's trends).
    pub history: Arc<crate::serve::history::History>,
}

/// How many journal reads may run at once: each is a process of a few MiB for its time.
pub(crate) const JOURNAL_READERS: usize = 2;
/// A journal read that has not answered by then is killed (the file is on a hung disk).
const JOURNAL_READ_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/", get(index))
        .route("/api/v1/events", get(events))
        .route("/api/v1/health", get(health))
        .route("/api/v1/history", get(history))
        .layer(middleware::from_fn_with_state(state.clone(), require_basic_auth))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(10),
        ))
        .with_state(state)
}

/// `/api/v1/health` (and the local socket's): the node's and every GPU's verdict with the
/// findings behind it, from the newest snapshot (health/verdict.rs).
pub(crate) async fn health(State(state): State<AppState>) -> Response {
    let verdict = crate::health::verdict::of(&state.store.latest());
    match serde_json::to_string(&verdict) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// Every endpoint asks for basic auth when the web config lists users (exporter-toolkit does
/// the same). bcrypt is slow on purpose, so it runs on the blocking pool.
async fn require_basic_auth(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let security = state.settings.current().web.clone();
    if !security.auth_required() {
        return next.run(request).await;
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let allowed = tokio::task::spawn_blocking(move || security.check_basic_auth(authorization.as_deref()))
        .await
        .unwrap_or(false);
    if allowed {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"gpuwarden\""),
            )],
            "Unauthorized\n",
        )
            .into_response()
    }
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let header_str = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    let format = exposition::negotiate_format(header_str(header::ACCEPT));
    let gzipped = exposition::accepts_gzip(header_str(header::ACCEPT_ENCODING));
    let snapshot = state.store.latest();
    let families = state.settings.current().families;
    let body = state.cache.body(snapshot, families, format, gzipped);
    let mut response = (StatusCode::OK, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
    h.insert(header::VARY, HeaderValue::from_static("Accept, Accept-Encoding"));
    if gzipped {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

/// 200 while the poll loop publishes on time; 503 when it has stalled, so a liveness probe
/// or a watchdog can restart a daemon that no longer refreshes its data.
async fn healthz(State(state): State<AppState>) -> Response {
    match state.store.published_at() {
        Some(at) if at.elapsed() <= state.settings.current().stale_after => (StatusCode::OK, "ok\n").into_response(),
        Some(at) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "poll loop stalled: last snapshot {:.1}s ago\n",
                at.elapsed().as_secs_f64()
            ),
        )
            .into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "no poll has finished yet\n").into_response(),
    }
}

/// The status page: every GPU with its health, temperature, clock events and XIDs, and the
/// journal's last seven days.
async fn index(State(state): State<AppState>) -> Html<String> {
    let snapshot = state.store.latest();
    let path = state.settings.current().config.state.path.clone();
    let timeline = if path.as_os_str().is_empty() {
        None
    } else {
        let now = crate::model::unix_now();
        let read = async {
            let _permit = state.journal_readers.acquire().await.ok()?;
            tokio::task::spawn_blocking(move || {
                let request = worker::Request::Timeline { path, now };
                match worker::call(&request, JOURNAL_READ_TIMEOUT) {
                    Ok(worker::Answer::Timeline { rows }) => Ok(rows),
                    Ok(_) => Err(status_page::TimelineError::Unexpected),
                    Err(e) => Err(status_page::TimelineError::Journal(e)),
                }
            })
            .await
            .ok()
        };
        Some(read.await.unwrap_or(Err(status_page::TimelineError::Busy)))
    };
    Html(status_page::render_with_timeline(
        &snapshot,
        timeline.as_ref(),
        Some(&state.history),
    ))
}

/// `GET /api/v1/history?gpu=N|UUID&metric=NAME[&range=1h|1d]`: one GPU's metric over the last
/// hour (a point every 10 s) or day (a point a minute), oldest first; a gap is `null`.
async fn history(
    State(state): State<AppState>,
    axum::extract::Query(params): axum::extract::Query<std::collections::BTreeMap<String, String>>,
) -> Response {
    use crate::serve::history::{Metric, Range};
    let bad = |message: String| (StatusCode::BAD_REQUEST, format!("{message}\n")).into_response();
    let names = || Metric::ALL.map(Metric::name).join(", ");
    let Some(gpu) = params.get("gpu") else {
        return bad("gpu is missing: give a GPU's index or UUID (gpu=0)".to_string());
    };
    let metric = match params.get("metric").map(|m| (m, Metric::from_name(m))) {
        Some((_, Some(metric))) => metric,
        Some((name, None)) => return bad(format!("no history of {name:?}; there is: {}", names())),
        None => return bad(format!("metric is missing; there is: {}", names())),
    };
    let range = match params.get("range").map(|r| (r, Range::parse(r))) {
        None => Range::Hour,
        Some((_, Some(range))) => range,
        Some((text, None)) => return bad(format!("range {text:?}: write 1h or 1d")),
    };
    match state.history.series(gpu, metric, range) {
        Some(series) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_string(&series).unwrap_or_default(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, format!("no history of GPU {gpu:?} (yet)\n")).into_response(),
    }
}

/// `</api/v1/events?...&before=ID>; rel="next"`: the same query, older rows.
fn next_page_link(params: &std::collections::BTreeMap<String, String>, cursor: &str) -> String {
    let mut query: Vec<String> = params
        .iter()
        .filter(|(k, _)| k.as_str() != "before")
        .map(|(k, v)| format!("{}={}", percent(k), percent(v)))
        .collect();
    query.push(format!("before={}", percent(cursor)));
    format!("</api/v1/events?{}>; rel=\"next\"", query.join("&"))
}

/// Percent-encodes what is not unreserved in a query component.
fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b',' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `/api/v1/events?since=7d&gpu=0&kind=xid,health&limit=100`: the journal's rows as JSON,
/// read-only, behind the same TLS and auth as /metrics. 404 with the journal off, 400 for
/// a bad parameter, 503 when it cannot be read or too many readers are at it.
async fn events(
    State(state): State<AppState>,
    axum::extract::Query(params): axum::extract::Query<std::collections::BTreeMap<String, String>>,
) -> Response {
    let path = state.settings.current().config.state.path.clone();
    if path.as_os_str().is_empty() {
        return (StatusCode::NOT_FOUND, "the journal is off (state.path is \"\")\n").into_response();
    }
    let query = match events_query(&params) {
        Ok(query) => query,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    // Owned: the permit goes with the stream, until its last row is sent.
    let Ok(permit) = state.journal_readers.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many journal readers at once; try again\n",
        )
            .into_response();
    };
    let request = worker::Request::Events {
        path,
        since: query.since,
        gpu: params.get("gpu").cloned(),
        kinds: query.kinds,
        limit: query.limit,
        before: query.before,
        stream: true,
    };
    let opened = tokio::task::spawn_blocking(move || worker::RowStream::open(&request, JOURNAL_READ_TIMEOUT)).await;
    let (head, rows) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(e)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot read the journal: {e}\n"),
            )
                .into_response();
        }
        Err(_) => return (StatusCode::INTERNAL_SERVER_ERROR, "the journal reader failed\n").into_response(),
    };
    if head.rows.is_none() {
        return (StatusCode::NOT_FOUND, "the journal has no such GPU\n").into_response();
    }
    let body = stream_rows(rows, permit);
    let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    // A full page: the next one is the rows older than its oldest.
    if let Some(link) = head
        .next
        .map(|cursor| next_page_link(&params, &cursor))
        .and_then(|l| axum::http::HeaderValue::from_str(&l).ok())
    {
        response.headers_mut().insert(header::LINK, link);
    }
    response
}

/// What is wrong with an events request's parameters (the body of its 400).
#[derive(Debug, thiserror::Error)]
enum EventsQueryError {
    #[error(transparent)]
    Query(#[from] crate::journal::store::read::QueryError),
    #[error(
        "limit must be from 1 to {} (a page; follow the Link header for older rows)",
        crate::journal::store::read::MAX_HTTP_LIMIT
    )]
    Limit,
    #[error("before must be a page cursor as the Link header gives it (TIME_ID)")]
    Before,
}

/// The events query from the request's parameters.
fn events_query(
    params: &std::collections::BTreeMap<String, String>,
) -> Result<crate::journal::store::read::Query, EventsQueryError> {
    use crate::journal::store::read;
    let mut query = read::Query {
        limit: read::DEFAULT_LIMIT,
        ..Default::default()
    };
    if let Some(since) = params.get("since") {
        query.since = Some(read::parse_since(since, std::time::SystemTime::now())?);
    }
    if let Some(kinds) = params.get("kind") {
        query.kinds = read::parse_kinds(kinds)?;
    }
    if let Some(limit) = params.get("limit") {
        match limit.parse::<usize>() {
            Ok(n) if (1..=read::MAX_HTTP_LIMIT).contains(&n) => query.limit = n,
            _ => return Err(EventsQueryError::Limit),
        }
    }
    if let Some(before) = params.get("before") {
        query.before = Some(read::parse_before(before).ok_or(EventsQueryError::Before)?);
    }
    Ok(query)
}

/// The rows as the worker writes them, in one JSON object: the daemon holds a few of them at a
/// time, never the page. `permit` (one of the journal's reader slots) is held until the last
/// row is sent.
fn stream_rows(mut rows: worker::RowStream, permit: tokio::sync::OwnedSemaphorePermit) -> axum::body::Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(16);
    tokio::task::spawn_blocking(move || {
        let send = |chunk: Result<Vec<u8>, std::io::Error>| tx.blocking_send(chunk.map(Into::into)).is_ok();
        if !send(Ok(b"{\"events\":[".to_vec())) {
            return;
        }
        let mut first = true;
        while let Some(line) = rows.next_line() {
            let chunk = line
                .map(|mut row| {
                    if !std::mem::take(&mut first) {
                        row.insert(0, b',');
                    }
                    row
                })
                .map_err(|e| std::io::Error::other(e.to_string()));
            let failed = chunk.is_err();
            // A client gone, or the worker cut short: end the answer (a cut one aborts).
            if !send(chunk) || failed {
                return;
            }
        }
        send(Ok(b"]}".to_vec()));
        drop(rows);
        drop(permit);
        crate::service::logging::trim_heap();
    });
    axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}
