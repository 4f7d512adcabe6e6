//! A thin client of the Kubernetes API: one request, JSON in and out, over HTTPS with the
//! service account's bearer token. Eight endpoints are all gpuwarden calls (kube/node.rs,
//! kube/devices.rs, kube/events.rs), which is why it is this and not kube-rs (README,
//! "Dependencies"). Like a sink's POST (journal/sinks/webhook.rs), whatever the API server
//! does costs this client alone and never more than its timeout (the one HTTP client,
//! service/http_client.rs): connection to answer within `kubernetes.api.timeout`, at most
//! [`MAX_ANSWER`] bytes of an answer, no redirect followed.

use crate::config::{Endpoint, KubeApi};
use crate::service::http_client::{Exchange, ExchangeError};
use hyper::{Method, Request, StatusCode};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The most of an answer read: a list of a few thousand nodes' worth, a page at a time.
pub(crate) const MAX_ANSWER: usize = 8 << 20;
/// The most a token file may hold (a projected token is about 1 KB).
const MAX_TOKEN: u64 = 16 << 10;

/// Why a request did not get an answer, or got one that says no.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    #[error("{method} {path}: the API server answered {status}: {message}")]
    Refused {
        method: Method,
        path: String,
        status: StatusCode,
        message: String,
    },
    #[error("{0}: the answer is not the JSON expected: {1}")]
    Decode(String, serde_json::Error),
}

impl ApiError {
    /// The HTTP status of an answer that said no.
    pub(crate) fn status(&self) -> Option<StatusCode> {
        match self {
            ApiError::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// The API server and how to talk to it.
pub(crate) struct Client {
    endpoint: Endpoint,
    tls: Arc<rustls::ClientConfig>,
    token_file: PathBuf,
    timeout: Duration,
}

impl Client {
    /// From the config, with the in-pod defaults: `KUBERNETES_SERVICE_HOST`/`_PORT` when no
    /// server is set. The CA is read here; the token at every request.
    pub(crate) fn new(api: &KubeApi) -> Result<Client, ApiError> {
        let server = if api.server.is_empty() {
            let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
            let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
            if host.is_empty() {
                return Err(ApiError::Setup(
                    "kubernetes.api.server is not set and KUBERNETES_SERVICE_HOST is not either (not in a pod?); set the server"
                        .into(),
                ));
            }
            let host = if host.contains(':') { format!("[{host}]") } else { host };
            format!("https://{host}:{port}")
        } else {
            api.server.clone()
        };
        let endpoint = Endpoint::parse(&server).map_err(|e| ApiError::Setup(format!("kubernetes.api.server: {e}")))?;
        if !endpoint.tls {
            return Err(ApiError::Setup(format!(
                "kubernetes.api.server {server:?}: the API server is spoken to over https:// only (a bearer token goes with every request)"
            )));
        }
        let tls = crate::journal::sinks::client_tls(&api.ca_file)
            .map_err(|e| ApiError::Setup(format!("kubernetes.api.ca_file: {e}")))?;
        Ok(Client {
            endpoint,
            tls: Arc::new(tls),
            token_file: api.token_file.clone(),
            timeout: api.timeout,
        })
    }

    /// `GET path`, its answer as `T`.
    pub(crate) async fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        let body = self.send(Method::GET, path, None).await?;
        serde_json::from_slice(&body).map_err(|e| ApiError::Decode(format!("GET {path}"), e))
    }

    /// A request with a JSON body of `content_type` (a patch type, or plain JSON); the answer
    /// is read and dropped.
    pub(crate) async fn write(
        &self,
        method: Method,
        path: &str,
        content_type: &'static str,
        body: &serde_json::Value,
    ) -> Result<(), ApiError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ApiError::Decode(format!("{method} {path}"), e))?;
        self.send(method, path, Some((content_type, bytes))).await.map(drop)
    }

    /// `DELETE path`.
    pub(crate) async fn delete(&self, path: &str) -> Result<(), ApiError> {
        self.send(Method::DELETE, path, None).await.map(drop)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<Vec<u8>, ApiError> {
        let token = self.token()?;
        self.exchange(method, path, &token, body).await
    }

    /// The bearer token as the file holds it now: a regular file, at most 16 KB.
    fn token(&self) -> Result<String, ApiError> {
        use crate::input::{Kinds, Links};
        use std::io::Read;
        let failed = |why: String| {
            ApiError::Setup(format!(
                "kubernetes.api.token_file {}: {why}",
                self.token_file.display()
            ))
        };
        // The kubelet's projected token is a link into a timestamped directory it swaps.
        let file =
            crate::input::open(&self.token_file, Links::Follow, Kinds::Regular).map_err(|e| failed(e.to_string()))?;
        let mut token = String::new();
        file.take(MAX_TOKEN + 1)
            .read_to_string(&mut token)
            .map_err(|e| failed(e.to_string()))?;
        let token = token.trim();
        if token.len() as u64 > MAX_TOKEN || token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(failed(
                "it does not hold one token (1 to 16384 printable characters)".into(),
            ));
        }
        Ok(token.to_string())
    }

    async fn exchange(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> Result<Vec<u8>, ApiError> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .header(hyper::header::ACCEPT, "application/json");
        let payload = match body {
            Some((content_type, bytes)) => {
                request = request.header(hyper::header::CONTENT_TYPE, content_type);
                bytes
            }
            None => Vec::new(),
        };
        let exchange = Exchange {
            endpoint: &self.endpoint,
            tls: Some(&self.tls),
            timeout: self.timeout,
            max_answer: MAX_ANSWER,
        };
        let answer = exchange.send(request, payload).await?;
        match (answer.status.is_success(), answer.whole) {
            (true, true) => Ok(answer.body),
            (true, false) => Err(ApiError::Setup(format!(
                "{method} {path}: the answer is over {MAX_ANSWER} bytes"
            ))),
            (false, _) => Err(ApiError::Refused {
                method,
                path: path.to_string(),
                status: answer.status,
                message: status_message(&answer.body),
            }),
        }
    }
}

/// The `message` of a `Status` answer, printable and cut at 300 characters; the raw text
/// where the answer is not one.
fn status_message(said: &[u8]) -> String {
    let text = serde_json::from_slice::<serde_json::Value>(said)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(said).into_owned());
    crate::input::printable(text.trim()).chars().take(300).collect()
}

/// A path segment or query value as the API takes it: what is not unreserved is %-escaped
/// (a label selector's `=` and `,`, a field selector's `.`).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
