//! `events`: sinks that take the journal's rows off the node, at least once (docs/journal.md,
//! "Events out"). Read at start; a reload that changes them is said in the log and takes
//! effect at the next start (a sink's cursor is its own, by name, across both).

use super::*;

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Events {
    /// Where the rows go; none by default.
    #[serde(deserialize_with = "sinks")]
    pub sinks: Vec<Sink>,
}

/// One sink: a name (its cursor's, its metrics' `sink` label) and where it delivers: a
/// webhook (CloudEvents) or an OTLP collector (logs), one of the two.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sink {
    pub name: String,
    #[serde(default)]
    pub webhook: Option<Webhook>,
    #[serde(default)]
    pub otlp: Option<Otlp>,
    /// Where a sink seen for the first time starts: `now` (after the newest row) or
    /// `beginning` (the oldest row the journal keeps).
    #[serde(default)]
    pub start: SinkStart,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkStart {
    #[default]
    Now,
    Beginning,
}

/// An HTTP endpoint that takes one CloudEvents 1.0 JSON event per POST (structured mode) and
/// answers 2xx once it has it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// `http://` or `https://`; redirects are not followed.
    pub url: String,
    /// The HMAC-SHA256 key of the `X-Gpuwarden-Signature-256` header; "" sends none.
    #[serde(default)]
    pub secret_file: PathBuf,
    /// PEM certificates an `https://` endpoint's chain must end in; "" uses the system's.
    #[serde(default)]
    pub ca_file: PathBuf,
    /// One delivery, connection to answer, within this.
    #[serde(default = "webhook_timeout", deserialize_with = "sink_timeout")]
    pub timeout: Duration,
}

/// An OpenTelemetry Collector's OTLP/HTTP logs endpoint (`http://collector:4318/v1/logs`):
/// the rows of a batch as one protobuf `ExportLogsServiceRequest`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Otlp {
    /// The full URL, `/v1/logs` included; redirects are not followed.
    pub url: String,
    /// PEM certificates an `https://` endpoint's chain must end in; "" uses the system's.
    #[serde(default)]
    pub ca_file: PathBuf,
    #[serde(default = "webhook_timeout", deserialize_with = "sink_timeout")]
    pub timeout: Duration,
}

impl Sink {
    /// Where it posts, how long it waits, and the CA file for https.
    pub fn target(&self) -> (&str, Duration, &Path) {
        match (&self.webhook, &self.otlp) {
            (Some(w), _) => (&w.url, w.timeout, &w.ca_file),
            (None, Some(o)) => (&o.url, o.timeout, &o.ca_file),
            // Refused when the config is read.
            (None, None) => ("", Duration::ZERO, Path::new("")),
        }
    }
}

fn webhook_timeout() -> Duration {
    Duration::from_secs(5)
}

/// The sinks, each name once and made of letters, digits, `-` and `_`, each URL one gpuwarden
/// can post to.
fn sinks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Sink>, D::Error> {
    let sinks = Vec::<Sink>::deserialize(d)?;
    let mut names = std::collections::BTreeSet::new();
    for sink in &sinks {
        let good = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if sink.name.is_empty() || sink.name.len() > 64 || !sink.name.chars().all(good) {
            return Err(serde::de::Error::custom(format!(
                "events.sinks: the name {:?} is not one; write 1 to 64 letters, digits, - or _",
                sink.name
            )));
        }
        if !names.insert(sink.name.as_str()) {
            return Err(serde::de::Error::custom(format!(
                "events.sinks: {:?} is named twice; each sink keeps its own cursor by its name",
                sink.name
            )));
        }
        if sink.webhook.is_some() == sink.otlp.is_some() {
            return Err(serde::de::Error::custom(format!(
                "events.sinks {:?}: give it one of `webhook:` (CloudEvents) or `otlp:` (OTLP logs)",
                sink.name
            )));
        }
        Endpoint::parse(sink.target().0)
            .map_err(|e| serde::de::Error::custom(format!("events.sinks {:?}: {e}", sink.name)))?;
    }
    Ok(sinks)
}

/// Where a webhook sink posts: scheme, host, port and path, checked when the config is read.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub uri: hyper::Uri,
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

/// A webhook url gpuwarden cannot post to, and why.
#[derive(Debug, thiserror::Error)]
#[error("the url {url:?} {why}")]
pub struct BadUrl {
    url: String,
    why: &'static str,
}

impl Endpoint {
    /// `http://host[:port]/path` or `https://...`; anything else says what to write.
    pub fn parse(url: &str) -> Result<Endpoint, BadUrl> {
        let bad = |why: &'static str| BadUrl {
            url: url.to_string(),
            why,
        };
        let uri: hyper::Uri = url.parse().map_err(|_| bad("is not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("must begin with http:// or https://")),
        };
        let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(|| bad("has no host"))?;
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        if authority.contains('@') {
            return Err(bad("carries a user or password; put a secret in secret_file instead"));
        }
        // The http crate's parser takes `:99999` and `:8o80` and then answers "no port";
        // that must not mean port 80. The text after the host is the port, checked here.
        let after_host = match authority.rfind(']') {
            Some(end) => &authority[end + 1..],
            None => authority.rfind(':').map_or("", |colon| &authority[colon..]),
        };
        let port = match after_host.strip_prefix(':') {
            None if after_host.is_empty() => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                match digits.parse::<u16>() {
                    Ok(port) if port > 0 => port,
                    _ => return Err(bad("has a port outside 1-65535")),
                }
            }
            _ => {
                return Err(bad(
                    "has a port that is not a number; write host:port with a port of 1-65535",
                ));
            }
        };
        Ok(Endpoint {
            host: host.trim_start_matches('[').trim_end_matches(']').to_string(),
            port,
            tls,
            uri,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_or_refused_with_what_to_write() {
        let e = Endpoint::parse("https://events.example.com/gpuwarden?team=ml").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.tls), ("events.example.com", 443, true));
        let e = Endpoint::parse("http://[::1]:8080/in").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.tls), ("::1", 8080, false));
        let e = Endpoint::parse("http://[::1]/in").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 80));
        let e = Endpoint::parse("http://collector:4318/v1/logs").unwrap();
        assert_eq!(e.port, 4318);
        for (bad, says) in [
            ("ftp://x/y", "must begin with http:// or https://"),
            ("events.example.com/x", "is not a URL"),
            ("http://user:pw@x/y", "carries a user or password"),
            ("not a url", "is not a URL"),
            ("http://x:99999/in", "a port outside 1-65535"),
            ("http://x:0/in", "a port outside 1-65535"),
            ("http://x:8o80/in", "a port that is not a number"),
            ("http://x:/in", "a port that is not a number"),
            ("https://[::1]:70000/in", "a port outside 1-65535"),
        ] {
            let e = Endpoint::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
