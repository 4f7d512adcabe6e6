//! One network adapter's evidence for a cable, transceiver or adapter replacement
//! (`gpuwarden report --nic mlx5_0`): the adapter as last recorded (type, firmware, board, PCI
//! address, the GPUs behind its switch), every change of its ports' findings with the state,
//! rate and error counters at that moment, and what docs/health.md says to do for each
//! finding seen.

use crate::journal::store::read::{self, Query, Row};
use crate::journal::writer::nic_rows;
use crate::model::health::RuleId;
use rusqlite::Connection;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct NicReport {
    pub generated_at: f64,
    pub device: String,
    /// The adapter as last recorded (`hca_type`, `fw_ver`, `board_id`, `pci_bus_id`,
    /// `near_gpus`, `pcie`).
    pub adapter: serde_json::Value,
    pub host: Option<String>,
    /// Its firmware or board as first seen and changed.
    pub adapter_rows: Vec<Row>,
    /// Each change of its ports' findings.
    pub finding_rows: Vec<Row>,
    /// For each finding seen: what to do.
    pub guidance: Vec<(String, String)>,
}

/// The report for `device`; `None` when the journal has no row of it.
pub(crate) fn build(conn: &Connection, device: &str, now: f64) -> rusqlite::Result<Option<NicReport>> {
    let rows = read::events(
        conn,
        &Query {
            gpus: vec![nic_rows::key(device)],
            limit: read::MAX_LIMIT,
            ..Default::default()
        },
    )?;
    if rows.is_empty() {
        return Ok(None);
    }
    let (adapter_rows, finding_rows): (Vec<Row>, Vec<Row>) =
        rows.into_iter().partition(|r| r.details.get("raised").is_none());
    let adapter = adapter_rows.last().map(|r| r.details.clone()).unwrap_or_default();
    let host = adapter_rows.iter().chain(&finding_rows).last().map(|r| r.host.clone());
    let mut seen = std::collections::BTreeSet::new();
    for row in &finding_rows {
        for reason in row.details["raised"].as_array().into_iter().flatten() {
            if let Some(reason) = reason.as_str() {
                seen.insert(reason.to_string());
            }
        }
    }
    let guidance = seen
        .into_iter()
        .filter_map(|reason| {
            let rule = crate::health::rules::named(RuleId::from_label(&reason)?)?;
            Some((reason, format!("{} (docs/health.md, \"Network ports\")", rule.action)))
        })
        .collect();
    Ok(Some(NicReport {
        generated_at: now,
        device: device.to_string(),
        adapter,
        host,
        adapter_rows,
        finding_rows,
        guidance,
    }))
}

/// The report as Markdown, for a ticket.
pub(crate) fn markdown(report: &NicReport) -> String {
    let a = &report.adapter;
    let field = |name: &str, key: &str| {
        let value = match &a[key] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(items) if !items.is_empty() => {
                items.iter().filter_map(|i| i.as_str()).collect::<Vec<_>>().join(", ")
            }
            _ => "unknown".to_string(),
        };
        format!("| {name} | {value} |\n")
    };
    let mut out = format!(
        "# Network adapter evidence: {}\n\n| | |\n| --- | --- |\n",
        report.device
    );
    out.push_str(&field("type (HCA)", "hca_type"));
    out.push_str(&field("firmware", "fw_ver"));
    out.push_str(&field("board id", "board_id"));
    out.push_str(&field("PCI bus id", "pci_bus_id"));
    out.push_str(&field("GPUs behind its switch", "near_gpus"));
    out.push_str(&format!("| host | {} |\n", report.host.as_deref().unwrap_or("unknown")));
    for (title, rows) in [
        ("Port findings", &report.finding_rows),
        ("Adapter and clears", &report.adapter_rows),
    ] {
        out.push_str(&format!("\n## {title}\n\n"));
        if rows.is_empty() {
            out.push_str("None recorded.\n");
            continue;
        }
        out.push_str("| time (UTC) | what | counters then |\n| --- | --- | --- |\n");
        for r in rows {
            let counters = r.details["port_state"]["counters"]
                .as_object()
                .map(|c| {
                    c.iter()
                        .filter(|(_, v)| v.as_u64().is_some_and(|n| n > 0))
                        .map(|(k, v)| format!("{k} {v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                crate::journal::report::utc(r.at),
                r.summary.replace('|', "\\|"),
                counters
            ));
        }
    }
    out.push_str("\n## What to do\n\n");
    if report.guidance.is_empty() {
        out.push_str("No finding recorded.\n");
    }
    for (reason, advice) in &report.guidance {
        out.push_str(&format!("- **{reason}**: {advice}\n"));
    }
    out
}
