//! One POST of one event to a webhook sink (journal/sinks/mod.rs delivers them in order): HTTP/1.1
//! over TCP, or TLS for `https://`, through hyper's client connection. Whatever the endpoint
//! does costs that sink alone and never more than its timeout: redirects are not followed
//! (the event goes where the config says or nowhere), at most [`MAX_ANSWER`] bytes of the
//! answer are read, and the whole exchange, connection to answer, runs within the sink's
//! timeout (a slow loris is a failure, not a hang).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// The most of an answer's body read: enough for an error message, nothing like 10 MB.
pub(crate) const MAX_ANSWER: usize = 64 << 10;

pub(crate) use crate::config::Endpoint;

/// Why one delivery did not take.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    #[error("{0}")]
    Url(String),
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("TLS with {0}: {1}")]
    Tls(String, std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("it answered {0}{1}")]
    Refused(StatusCode, String),
}

/// Posts `body` with `headers`; Ok once the endpoint answered 2xx.
pub(crate) async fn post(
    endpoint: &Endpoint,
    tls: Option<&Arc<rustls::ClientConfig>>,
    headers: &[(&str, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), PostError> {
    tokio::time::timeout(timeout, exchange(endpoint, tls, headers, body))
        .await
        .map_err(|_| PostError::Timeout(timeout))?
}

async fn exchange(
    endpoint: &Endpoint,
    tls: Option<&Arc<rustls::ClientConfig>>,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(), PostError> {
    let address = format!("{}:{}", endpoint.host, endpoint.port);
    let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| PostError::Connect(address.clone(), e))?;
    let _ = tcp.set_nodelay(true);
    match (endpoint.tls, tls) {
        (true, Some(config)) => {
            let name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
                .map_err(|e| PostError::Url(format!("{} is not a TLS server name: {e}", endpoint.host)))?;
            let stream = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| PostError::Tls(address, e))?;
            send(TokioIo::new(stream), endpoint, headers, body).await
        }
        (true, None) => Err(PostError::Url("an https:// sink has no TLS settings".into())),
        (false, _) => send(TokioIo::new(tcp), endpoint, headers, body).await,
    }
}

async fn send<S>(io: S, endpoint: &Endpoint, headers: &[(&str, String)], body: Vec<u8>) -> Result<(), PostError>
where
    S: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    // The connection's task ends with it: when this delivery's future is dropped (a timeout)
    // or the answer is read.
    let driver = tokio::spawn(connection);
    let path = endpoint.uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = endpoint.uri.authority().map_or(endpoint.host.as_str(), |a| a.as_str());
    let mut request = Request::post(path).header(hyper::header::HOST, authority).header(
        hyper::header::USER_AGENT,
        concat!("gpuwarden/", env!("CARGO_PKG_VERSION")),
    );
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| PostError::Url(format!("the request cannot be made: {e}")))?;
    let answer = sender.send_request(request).await;
    let result = match answer {
        Ok(answer) => {
            let status = answer.status();
            let said = read_some(answer.into_body()).await;
            if status.is_success() {
                Ok(())
            } else {
                let said = String::from_utf8_lossy(&said);
                let said: String = crate::input::printable(said.trim()).chars().take(200).collect();
                let redirect = if status.is_redirection() {
                    " (a redirect: not followed)".to_string()
                } else {
                    String::new()
                };
                Err(PostError::Refused(
                    status,
                    if said.is_empty() {
                        redirect
                    } else {
                        format!("{redirect}: {said}")
                    },
                ))
            }
        }
        Err(e) => Err(PostError::Http(e)),
    };
    driver.abort();
    result
}

/// Up to [`MAX_ANSWER`] bytes of an answer's body; the rest is never read.
async fn read_some(mut body: hyper::body::Incoming) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < MAX_ANSWER {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = MAX_ANSWER - out.len();
                    out.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            _ => break,
        }
    }
    out
}
