//! `listen`: the HTTP server's address, as `HOST:PORT`, `IP:PORT`, `[IPv6]:PORT` or `:PORT`
//! (also `--listen`). Needs a restart to change.

use super::*;

/// A listen address as node_exporter takes it: `IP:PORT`, `[IPv6]:PORT`, `:PORT` (every IPv4
/// address), or `HOST:PORT` with a name resolved once, here (the first address it has).
pub fn parse_listen(text: &str) -> Result<SocketAddr, ListenError> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let named = text.to_string();
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| ListenError::NotAnAddress(named.clone()))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(ListenError::NoPort(named));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(ListenError::NotAnAddress(named));
    }
    use std::net::ToSocketAddrs;
    let mut addresses = text.to_socket_addrs().map_err(|source| ListenError::Unresolved {
        text: named.clone(),
        host: host.to_string(),
        source,
    })?;
    addresses.next().ok_or_else(|| ListenError::NoAddress {
        text: named,
        host: host.to_string(),
    })
}

/// What to write instead, said with every [`ListenError`].
pub(super) const LISTEN_HINT: &str =
    "write IP:PORT (127.0.0.1:9100), [IPv6]:PORT, HOST:PORT (localhost:9100) or :PORT (0.0.0.0:9100)";

/// Why a listen address cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{0:?} has no port; {LISTEN_HINT}")]
    NoPort(String),
    #[error("{0:?} is not an address; {LISTEN_HINT}")]
    NotAnAddress(String),
    #[error("{text:?}: the name {host:?} does not resolve ({source}); {LISTEN_HINT}")]
    Unresolved {
        text: String,
        host: String,
        source: std::io::Error,
    },
    #[error("{text:?}: the name {host:?} has no address; {LISTEN_HINT}")]
    NoAddress { text: String, host: String },
}

pub(super) fn listen_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen(&text).map_err(serde::de::Error::custom)
}
