//! The HTTP server: `/metrics`, `/healthz` and `/`.
//!
//! Handlers only read the snapshot store and the render cache; nothing here calls a vendor
//! library, so a hung driver can never hold up a scrape.

use crate::exposition::{self, RenderCache};
use crate::status_page;
use crate::store::Store;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;
use std::time::Duration;
use tower_http::timeout::TimeoutLayer;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    pub cache: Arc<RenderCache>,
    /// /healthz fails when the poller has not published for this long.
    pub stale_after: Duration,
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/", get(index))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(10),
        ))
        .with_state(state)
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let header_str = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    let format = exposition::negotiate_format(header_str(header::ACCEPT));
    let gzipped = exposition::accepts_gzip(header_str(header::ACCEPT_ENCODING));
    let snapshot = state.store.latest();
    let body = state.cache.body(snapshot, format, gzipped);
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
        Some(at) if at.elapsed() <= state.stale_after => (StatusCode::OK, "ok\n").into_response(),
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

/// The status page: every GPU with its health, temperature, clock events and XIDs.
async fn index(State(state): State<AppState>) -> Html<String> {
    Html(status_page::render(&state.store.latest()))
}
