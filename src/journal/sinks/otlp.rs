//! Journal rows as OTLP logs (docs/journal.md, "Events out"): one `ExportLogsServiceRequest`
//! per batch, protobuf over HTTP (`POST /v1/logs`, `application/x-protobuf`), what an
//! OpenTelemetry Collector's `otlphttp` receiver takes. Each row is a log record: its time,
//! its summary as the body, the CloudEvent's id as `event.id` (the same at every retry, so a
//! pipeline can drop duplicates), the kind as the event name, the GPU and the details as
//! attributes; the host and gpuwarden as the resource.

use crate::journal::sinks::cloudevent;
use crate::journal::store::read::Row;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

fn text(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// The row's severity as OpenTelemetry's: an XID's or SXID's own (fatal, critical, warning),
/// a verdict's (unhealthy, degraded), else information.
fn severity(row: &Row) -> SeverityNumber {
    let word = row.details["severity"]
        .as_str()
        .or_else(|| row.details["state"].as_str())
        .unwrap_or("");
    match word {
        "fatal" => SeverityNumber::Fatal,
        "critical" | "unhealthy" | "failed" => SeverityNumber::Error,
        "warning" | "degraded" => SeverityNumber::Warn,
        _ => SeverityNumber::Info,
    }
}

fn record(row: &Row, observed: f64) -> LogRecord {
    let event = cloudevent::event(row);
    let nanos = |seconds: f64| (seconds.max(0.0) * 1e9) as u64;
    let mut attributes = vec![
        text("event.id", event["id"].as_str().unwrap_or_default()),
        text("gpuwarden.kind", row.kind.clone()),
        text("gpuwarden.boot_id", row.boot_id.clone()),
        text("gpuwarden.details", row.details.to_string()),
    ];
    if let Some(uuid) = &row.gpu_uuid {
        attributes.push(text("gpu.uuid", uuid.clone()));
    }
    if let Some(serial) = &row.serial {
        attributes.push(text("gpu.serial", serial.clone()));
    }
    if let Some(bus) = &row.pci_bus_id {
        attributes.push(text("gpu.pci_bus_id", bus.clone()));
    }
    let severity = severity(row);
    LogRecord {
        time_unix_nano: nanos(if row.at.is_finite() { row.at } else { 0.0 }),
        observed_time_unix_nano: nanos(observed),
        severity_number: severity as i32,
        severity_text: severity
            .as_str_name()
            .trim_start_matches("SEVERITY_NUMBER_")
            .to_string(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(row.summary.clone())),
        }),
        attributes,
        event_name: format!("{}{}", cloudevent::TYPE_PREFIX, row.kind),
        ..Default::default()
    }
}

/// The batch as one request, grouped under its host (a batch holds one host's rows; a journal
/// moved between hosts keeps each row's own).
pub(crate) fn request(rows: &[Row], observed: f64) -> ExportLogsServiceRequest {
    let mut resource_logs: Vec<ResourceLogs> = Vec::new();
    for row in rows {
        let at = resource_logs.iter().position(|r| {
            r.resource.as_ref().is_some_and(|res| {
                res.attributes
                    .iter()
                    .any(|a| a.key == "host.name" && *a == text("host.name", row.host.clone()))
            })
        });
        let index = at.unwrap_or_else(|| {
            resource_logs.push(ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![
                        text("service.name", "gpuwarden"),
                        text("service.version", env!("CARGO_PKG_VERSION")),
                        text("host.name", row.host.clone()),
                    ],
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: "gpuwarden.journal".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            });
            resource_logs.len() - 1
        });
        resource_logs[index].scope_logs[0]
            .log_records
            .push(record(row, observed));
    }
    ExportLogsServiceRequest { resource_logs }
}

/// The request's protobuf bytes.
pub(crate) fn body(rows: &[Row], observed: f64) -> Vec<u8> {
    request(rows, observed).encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(id: i64, host: &str, details: serde_json::Value) -> Row {
        Row {
            id,
            at: 1_795_662_000.5,
            boot_id: "b0".into(),
            host: host.into(),
            kind: "xid".into(),
            gpu_uuid: Some("GPU-1".into()),
            serial: None,
            pci_bus_id: Some("0000:19:00.0".into()),
            summary: "Xid 79".into(),
            details,
        }
    }

    #[test]
    fn rows_are_log_records_under_their_host_and_round_trip_through_protobuf() {
        let rows = [
            row(1, "node-1", json!({"severity": "fatal"})),
            row(2, "node-1", json!({"state": "degraded"})),
            row(3, "node-2", json!(null)),
        ];
        let decoded = ExportLogsServiceRequest::decode(body(&rows, 1_795_662_001.0).as_slice()).unwrap();
        assert_eq!(decoded.resource_logs.len(), 2, "one resource per host");
        let records = &decoded.resource_logs[0].scope_logs[0].log_records;
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].time_unix_nano, 1_795_662_000_500_000_000);
        assert_eq!(records[0].severity_number, SeverityNumber::Fatal as i32);
        assert_eq!(records[0].severity_text, "FATAL");
        assert_eq!(records[1].severity_number, SeverityNumber::Warn as i32);
        assert_eq!(records[0].event_name, "io.gpuwarden.xid");
        let id = records[0].attributes.iter().find(|a| a.key == "event.id").unwrap();
        assert_eq!(*id, text("event.id", "1-1795662000500000"), "the CloudEvent's id");
        let other = &decoded.resource_logs[1].scope_logs[0].log_records;
        assert_eq!(other[0].severity_number, SeverityNumber::Info as i32);
    }
}
