//! One POST of one event to a webhook sink (journal/sinks/mod.rs delivers them in order),
//! through the one HTTP client (service/http_client.rs): whatever the endpoint does costs that
//! sink alone and never more than its timeout, redirects are not followed (the event goes where
//! the config says or nowhere), and at most [`MAX_ANSWER`] bytes of the answer are read.

use crate::service::http_client::{Exchange, ExchangeError};
use hyper::{Request, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// The most of an answer's body read: enough for an error message, nothing like 10 MB.
pub(crate) const MAX_ANSWER: usize = 64 << 10;

pub(crate) use crate::config::Endpoint;

/// Why one delivery did not take.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
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
    let path = endpoint.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = Request::post(path);
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let exchange = Exchange {
        endpoint,
        tls,
        timeout,
        max_answer: MAX_ANSWER,
    };
    let answer = exchange.send(request, body).await?;
    if answer.status.is_success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&answer.body);
    let said: String = crate::input::printable(said.trim()).chars().take(200).collect();
    let redirect = if answer.status.is_redirection() {
        " (a redirect: not followed)"
    } else {
        ""
    };
    Err(PostError::Refused(
        answer.status,
        if said.is_empty() {
            redirect.to_string()
        } else {
            format!("{redirect}: {said}")
        },
    ))
}
