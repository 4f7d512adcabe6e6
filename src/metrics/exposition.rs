//! Turning the latest snapshot into the bytes a scrape gets, once per snapshot.
//!
//! Prometheus asks for OpenMetrics first; curl and older scrapers get the classic text
//! format 0.0.4. prometheus-client writes OpenMetrics; the 0.0.4 text is derived from it
//! (the two differ only in counter family names, `# UNIT` and `# EOF` for what we emit).
//! Each (format, compression) is rendered at most once per snapshot generation and then
//! served from the cache, so a scrape costs a copy whatever the number of scrapers.

use crate::metrics;
use crate::model::Snapshot;
use axum::body::Bytes;
use std::io::Write;
use std::sync::{Arc, Mutex};

pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// One item of an Accept or Accept-Encoding header: `name;q=0.5;version=1.0.0`.
struct HeaderItem {
    /// Media type or content coding, lower case.
    name: String,
    /// Preference, 1 when not given; 0 means "not acceptable".
    q: f32,
    version: Option<String>,
}

/// The items of a comma-separated header; parameter names are case-insensitive.
fn header_items(header: &str) -> impl Iterator<Item = HeaderItem> + '_ {
    header.split(',').map(|part| {
        let mut params = part.split(';').map(str::trim);
        let name = params.next().unwrap_or("").to_ascii_lowercase();
        let mut item = HeaderItem {
            name,
            q: 1.0,
            version: None,
        };
        for (key, value) in params.filter_map(|p| p.split_once('=')) {
            match key.trim().to_ascii_lowercase().as_str() {
                "q" => item.q = value.trim().parse().unwrap_or(0.0),
                "version" => item.version = Some(value.trim().to_string()),
                _ => {}
            }
        }
        item
    })
}

/// Picks the format from an Accept header by its q-values: OpenMetrics when it is preferred
/// at least as much as plain text, the text format otherwise (and when there is no header).
pub fn negotiate_format(accept: Option<&str>) -> Format {
    let Some(accept) = accept else {
        return Format::Text;
    };
    let mut openmetrics_q: f32 = 0.0;
    let mut text_q: f32 = 0.0;
    for item in header_items(accept) {
        match item.name.as_str() {
            // We write OpenMetrics 1.0.0; a client that asks only for another version
            // (0.0.1) reads 1.0.0 fine, as Prometheus does.
            "application/openmetrics-text" => openmetrics_q = openmetrics_q.max(item.q),
            "text/plain" if item.version.as_deref().is_none_or(|v| v == "0.0.4") => text_q = text_q.max(item.q),
            "*/*" | "text/*" => text_q = text_q.max(item.q),
            _ => {}
        }
    }
    if openmetrics_q > 0.0 && openmetrics_q >= text_q {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// True when the Accept-Encoding header accepts gzip (q above 0).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|header| {
        header_items(header).any(|item| (item.name == "gzip" || item.name == "x-gzip") && item.q > 0.0)
    })
}

/// Renders a snapshot as OpenMetrics text.
pub fn render_openmetrics(snapshot: Arc<Snapshot>, families: metrics::Selection) -> String {
    let registry = metrics::registry_for(snapshot, families);
    let mut out = String::with_capacity(64 * 1024);
    // Writing to a String cannot fail; an Err here would be a bug in a collector.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        log::error!("encoding metrics failed: {e}");
    }
    out
}

/// The classic Prometheus text format 0.0.4 from OpenMetrics text: counter families are
/// named with their `_total` suffix, `# UNIT` and `# EOF` go, and `unknown` families are
/// counters named without `_total` (`metrics::Kind::CounterAsNamed`, the only kind written as
/// `unknown`), which 0.0.4 calls counters.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut pending_help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            // Hold HELP until TYPE says whether the family is a counter.
            pending_help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let rename = kind == "counter" && !name.ends_with("_total");
            if let Some(help) = pending_help.take() {
                if rename {
                    let text = help
                        .strip_prefix("# HELP ")
                        .and_then(|h| h.split_once(' '))
                        .map(|(_, t)| t)
                        .unwrap_or("");
                    out.push_str(&format!("# HELP {name}_total {text}\n"));
                } else {
                    out.push_str(help);
                    out.push('\n');
                }
            }
            if rename {
                out.push_str(&format!("# TYPE {name}_total counter\n"));
            } else if kind == "unknown" {
                out.push_str(&format!("# TYPE {name} counter\n"));
            } else {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        if let Some(help) = pending_help.take() {
            out.push_str(help);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 4), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    if encoder.write_all(bytes).is_err() {
        return Vec::new();
    }
    encoder.finish().unwrap_or_default()
}

/// One rendered body and the snapshot generation and families it was rendered from.
struct CachedBody {
    generation: u64,
    families: metrics::Selection,
    body: Bytes,
}

/// Rendered bodies by (format, gzip), each valid for one snapshot generation.
#[derive(Default)]
pub struct RenderCache {
    // Index: format (0 OpenMetrics, 1 text) * 2 + gzip.
    slots: Mutex<[Option<CachedBody>; 4]>,
}

impl RenderCache {
    /// The body for this snapshot in this format, rendering it if this generation has not
    /// been rendered in it yet.
    pub fn body(&self, snapshot: Arc<Snapshot>, families: metrics::Selection, format: Format, gzipped: bool) -> Bytes {
        let slot = (format == Format::Text) as usize * 2 + gzipped as usize;
        let generation = snapshot.generation;
        // Holding the lock while rendering makes concurrent scrapes of a new snapshot wait
        // for one render instead of all doing it.
        let mut slots = match self.slots.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(cached) = &slots[slot]
            && cached.generation == generation
            && cached.families == families
        {
            return cached.body.clone();
        }
        let text = render_openmetrics(snapshot, families);
        let text = match format {
            Format::OpenMetrics => text,
            Format::Text => openmetrics_to_text(&text),
        };
        let body = Bytes::from(if gzipped {
            gzip(text.as_bytes())
        } else {
            text.into_bytes()
        });
        slots[slot] = Some(CachedBody {
            generation,
            families,
            body: body.clone(),
        });
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_2_and_3_accept_headers_get_openmetrics() {
        let prom2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let prom3 = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
        assert_eq!(negotiate_format(Some(prom2)), Format::OpenMetrics);
        assert_eq!(negotiate_format(Some(prom3)), Format::OpenMetrics);
    }

    #[test]
    fn curl_and_text_only_scrapers_get_text() {
        assert_eq!(negotiate_format(None), Format::Text);
        assert_eq!(negotiate_format(Some("*/*")), Format::Text);
        assert_eq!(negotiate_format(Some("text/plain;version=0.0.4")), Format::Text);
        assert_eq!(
            negotiate_format(Some(
                "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"
            )),
            Format::Text
        );
        assert_eq!(negotiate_format(Some("application/openmetrics-text;q=0")), Format::Text);
    }

    #[test]
    fn gzip_negotiation_honours_q() {
        assert!(accepts_gzip(Some("gzip")));
        assert!(accepts_gzip(Some("deflate, gzip;q=0.5")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(Some("identity")));
        assert!(!accepts_gzip(None));
    }

    #[test]
    fn text_format_names_counters_with_total_and_drops_eof() {
        let om = "# HELP gpu_energy_joules Energy.\n# TYPE gpu_energy_joules counter\ngpu_energy_joules_total{gpu=\"0\"} 5.0\n\
                  # HELP gpu_up Up.\n# TYPE gpu_up gauge\ngpu_up{gpu=\"0\"} 1\n# EOF\n";
        let text = openmetrics_to_text(om);
        assert_eq!(
            text,
            "# HELP gpu_energy_joules_total Energy.\n# TYPE gpu_energy_joules_total counter\ngpu_energy_joules_total{gpu=\"0\"} 5.0\n\
             # HELP gpu_up Up.\n# TYPE gpu_up gauge\ngpu_up{gpu=\"0\"} 1\n"
        );
    }

    #[test]
    fn gzip_round_trips() {
        use std::io::Read;
        let body = gzip(b"gpu_up 1\n");
        let mut decoded = String::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_string(&mut decoded)
            .unwrap();
        assert_eq!(decoded, "gpu_up 1\n");
    }
}
