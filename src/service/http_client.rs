//! One HTTP/1.1 request to a server the config names, for the two clients gpuwarden has (a
//! sink's POST, journal/sinks/webhook.rs; the Kubernetes API, kube/client.rs): TCP, or TLS for
//! `https://`, through hyper's client connection. What the server does costs the caller no
//! more than its timeout: the whole exchange, connection to answer, runs within it (a slow
//! loris is a failure, not a hang), at most the caller's bytes of an answer are read, and a
//! redirect is an answer like any other (never followed).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

use crate::config::Endpoint;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    #[error("{0}")]
    Setup(String),
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("TLS with {0}: {1}")]
    Tls(String, std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// What the server answered: its status and the start of its body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    /// At most the request's `max_answer` bytes.
    pub(crate) body: Vec<u8>,
    /// The body was read to its end within `max_answer` bytes (false: cut, or broken off).
    pub(crate) whole: bool,
}

/// Where and how to send one request.
pub(crate) struct Exchange<'a> {
    pub(crate) endpoint: &'a Endpoint,
    /// The TLS settings; an `https://` endpoint without them is refused.
    pub(crate) tls: Option<&'a Arc<rustls::ClientConfig>>,
    pub(crate) timeout: Duration,
    /// The most of the answer's body read; the rest is never read.
    pub(crate) max_answer: usize,
}

impl Exchange<'_> {
    /// Sends `request` (method, path, headers of the caller's own; `Host` and `User-Agent` are
    /// set here) with `body`, and reads the answer, all within the timeout.
    pub(crate) async fn send(
        &self,
        request: hyper::http::request::Builder,
        body: Vec<u8>,
    ) -> Result<Answer, ExchangeError> {
        tokio::time::timeout(self.timeout, self.exchange(request, body))
            .await
            .map_err(|_| ExchangeError::Timeout(self.timeout))?
    }

    async fn exchange(&self, request: hyper::http::request::Builder, body: Vec<u8>) -> Result<Answer, ExchangeError> {
        let endpoint = self.endpoint;
        let authority = endpoint.uri.authority().map_or(endpoint.host.as_str(), |a| a.as_str());
        let request = request
            .header(hyper::header::HOST, authority)
            .header(
                hyper::header::USER_AGENT,
                concat!("gpuwarden/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| ExchangeError::Setup(format!("the request cannot be made: {e}")))?;
        let address = format!("{}:{}", endpoint.host, endpoint.port);
        // Whether it is TLS, and with what, before any connection: an https:// server without
        // TLS settings is never connected to.
        let tls = match (endpoint.tls, self.tls) {
            (true, Some(config)) => Some(config),
            (true, None) => {
                return Err(ExchangeError::Setup(format!(
                    "{address}: an https:// server and no TLS settings"
                )));
            }
            (false, _) => None,
        };
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| ExchangeError::Connect(address.clone(), e))?;
        let _ = tcp.set_nodelay(true);
        let Some(config) = tls else {
            return self.request(TokioIo::new(tcp), request).await;
        };
        let name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
            .map_err(|e| ExchangeError::Setup(format!("{} is not a TLS server name: {e}", endpoint.host)))?;
        let stream = tokio_rustls::TlsConnector::from(config.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| ExchangeError::Tls(address, e))?;
        self.request(TokioIo::new(stream), request).await
    }

    async fn request<S>(&self, io: S, request: Request<Full<Bytes>>) -> Result<Answer, ExchangeError>
    where
        S: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
        // The connection's task ends with it: when this exchange's future is dropped (a
        // timeout) or the answer is read.
        let driver = tokio::spawn(connection);
        let result = match sender.send_request(request).await {
            Ok(answer) => {
                let status = answer.status();
                let (body, whole) = read_some(answer.into_body(), self.max_answer).await;
                Ok(Answer { status, body, whole })
            }
            Err(e) => Err(ExchangeError::Http(e)),
        };
        driver.abort();
        result
    }
}

/// Up to `max` bytes of an answer's body, and whether that was all of it.
async fn read_some(mut body: hyper::body::Incoming, max: usize) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = max - out.len();
                    if data.len() > room {
                        out.extend_from_slice(&data[..room]);
                        return (out, false);
                    }
                    out.extend_from_slice(data);
                }
            }
            Some(Err(_)) => return (out, false),
            None => return (out, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on a free port that reads one request and answers `answer` (raw bytes), then
    /// holds the connection open for `hold`.
    async fn one_answer(answer: Vec<u8>, hold: Duration) -> Endpoint {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let _ = socket.read(&mut request).await;
            let _ = socket.write_all(&answer).await;
            tokio::time::sleep(hold).await;
        });
        Endpoint::parse(&format!("http://127.0.0.1:{port}/hook")).unwrap()
    }

    fn exchange(endpoint: &Endpoint, max_answer: usize) -> Exchange<'_> {
        Exchange {
            endpoint,
            tls: None,
            timeout: Duration::from_secs(2),
            max_answer,
        }
    }

    #[tokio::test]
    async fn an_answer_is_read_whole_within_its_bound() {
        let endpoint = one_answer(
            b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\nok".to_vec(),
            Duration::ZERO,
        )
        .await;
        let answer = exchange(&endpoint, 16)
            .send(Request::post("/hook"), b"{}".to_vec())
            .await
            .unwrap();
        assert_eq!(answer.status, StatusCode::ACCEPTED);
        assert_eq!(answer.body, b"ok");
        assert!(answer.whole);
    }

    #[tokio::test]
    async fn an_answer_over_the_bound_is_cut_there_and_said_so() {
        let body = "x".repeat(100);
        let raw = format!("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{body}");
        let endpoint = one_answer(raw.into_bytes(), Duration::ZERO).await;
        let answer = exchange(&endpoint, 10)
            .send(Request::get("/hook"), Vec::new())
            .await
            .unwrap();
        assert_eq!(answer.body.len(), 10);
        assert!(!answer.whole);
    }

    #[tokio::test]
    async fn a_server_that_never_finishes_its_answer_costs_the_timeout_and_no_more() {
        let endpoint = one_answer(
            b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nslow".to_vec(),
            Duration::from_secs(30),
        )
        .await;
        let mut slow = exchange(&endpoint, 1000);
        slow.timeout = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let error = slow.send(Request::get("/hook"), Vec::new()).await.unwrap_err();
        assert!(matches!(error, ExchangeError::Timeout(_)), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn an_https_endpoint_without_tls_settings_is_refused_not_spoken_to_in_clear() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{port}/hook")).unwrap();
        let error = exchange(&endpoint, 10)
            .send(Request::post("/hook"), Vec::new())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("no TLS settings"), "{error}");
        let accepted = listener.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "refused before connecting: {accepted:?}"
        );
    }
}
