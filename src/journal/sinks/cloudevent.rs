//! A journal row as a CloudEvents 1.0 event in structured mode (`application/cloudevents+json`;
//! docs/journal.md, "Events out"), and the HMAC-SHA256 signature a webhook sink puts on the
//! body. The event id is the row's: a row delivered twice (at least once means that can
//! happen) carries the same `id` and `source`, so a receiver can drop the second.

use crate::journal::store::read::Row;
use serde_json::json;

/// The CloudEvents `type` prefix: `io.gpuwarden.xid`, `io.gpuwarden.health`, ...
pub(crate) const TYPE_PREFIX: &str = "io.gpuwarden.";

/// The header carrying the body's signature: `sha256=<hex HMAC-SHA256 of the body>`, keyed by
/// the sink's secret (the form GitHub's webhooks use, so receivers have code for it).
pub(crate) const SIGNATURE_HEADER: &str = "x-gpuwarden-signature-256";

/// The row as a CloudEvent. `id` is the row id and its time in microseconds, unique in the
/// journal even across a file started anew; `source` names the host.
pub(crate) fn event(row: &Row) -> serde_json::Value {
    let mut event = json!({
        "specversion": "1.0",
        "id": format!("{}-{}", row.id, (row.at * 1e6).round() as i64),
        "source": format!("gpuwarden://{}", row.host),
        "type": format!("{TYPE_PREFIX}{}", row.kind),
        "time": rfc3339_micros(row.at),
        "datacontenttype": "application/json",
        "data": {
            "summary": row.summary,
            "details": row.details,
            "boot_id": row.boot_id,
            "gpu": row.gpu_uuid.as_ref().map(|uuid| json!({
                "uuid": uuid,
                "serial": row.serial,
                "pci_bus_id": row.pci_bus_id,
            })),
        },
    });
    if let Some(uuid) = &row.gpu_uuid {
        event["subject"] = json!(uuid);
    }
    event
}

/// RFC 3339 with microseconds, UTC; the Unix epoch for a time that is not one.
fn rfc3339_micros(at: f64) -> String {
    let at = if at.is_finite() && at >= 0.0 { at } else { 0.0 };
    humantime::format_rfc3339_micros(crate::model::from_unix_seconds(at)).to_string()
}

/// `sha256=<hex>` of `body` keyed by `secret`.
pub(crate) fn signature(secret: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        Row {
            id: 42,
            at: 1_795_662_000.25,
            boot_id: "b0".into(),
            host: "node-1".into(),
            kind: "xid".into(),
            gpu_uuid: Some("GPU-1".into()),
            serial: Some("1650924060001".into()),
            pci_bus_id: Some("0000:19:00.0".into()),
            summary: "Xid 79: fell off the bus".into(),
            details: json!({"xid": 79}),
        }
    }

    #[test]
    fn a_row_is_a_cloudevent_with_the_rows_own_id() {
        let e = event(&row());
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["id"], "42-1795662000250000");
        assert_eq!(e["source"], "gpuwarden://node-1");
        assert_eq!(e["type"], "io.gpuwarden.xid");
        assert_eq!(e["time"], "2026-11-26T03:00:00.250000Z");
        assert_eq!(e["subject"], "GPU-1");
        assert_eq!(e["data"]["details"]["xid"], 79);
        assert_eq!(e["data"]["gpu"]["pci_bus_id"], "0000:19:00.0");
        assert_eq!(event(&row()), e, "the same row is the same event, id and all");
        let node = Row {
            gpu_uuid: None,
            at: f64::NAN,
            ..row()
        };
        let e = event(&node);
        assert!(e.get("subject").is_none() && e["data"]["gpu"].is_null(), "{e}");
        assert_eq!(e["time"], "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn the_signature_is_rfc_4231s_hmac_sha256() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
