//! The status page at `/`: each GPU with its health, temperature, active clock-event reasons
//! and XIDs, for a person who opens the node's address in a browser.
//!
//! Plain server-rendered HTML from the latest snapshot: no JavaScript, a refresh every five
//! seconds, and nothing that calls a vendor library.

use crate::model::{Snapshot, unix_seconds};
use crate::xid::catalog;
use std::fmt::Write;
use std::time::SystemTime;

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn ago(then: SystemTime) -> String {
    let seconds = (unix_seconds(SystemTime::now()) - unix_seconds(then)).max(0.0);
    match seconds {
        s if s < 90.0 => format!("{s:.0}s ago"),
        s if s < 5400.0 => format!("{:.0}m ago", s / 60.0),
        s if s < 172_800.0 => format!("{:.0}h ago", s / 3600.0),
        s => format!("{:.0}d ago", s / 86400.0),
    }
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0 0 .2em}p.meta{color:#666;margin:0 0 1em}\
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.45em .6em;border-bottom:1px solid #ddd;vertical-align:top}\
th{background:#f4f4f4}.state{font-weight:600;border-radius:3px;padding:.1em .5em;color:#fff}\
.ok{background:#2e7d32}.degraded{background:#ef6c00}.unhealthy{background:#c62828}\
.reason{display:inline-block;background:#eee;border-radius:3px;padding:0 .4em;margin:0 .2em .2em 0}\
.hot{color:#c62828;font-weight:600}td.n{white-space:nowrap}ul{margin:0;padding-left:1.1em}small{color:#666}";

/// Renders the page for one snapshot.
/// The job and the pods using a GPU, as a line under its name; empty when none.
fn attribution(snapshot: &Snapshot, uuid: &str) -> String {
    let mut out = String::new();
    if let Some(jobs) = snapshot.jobs.get(uuid) {
        out.push_str(&format!("<br><small>job {}</small>", escape(&jobs.join(", "))));
    }
    if let Some(pods) = snapshot.pods.get(uuid) {
        let names: Vec<String> = pods
            .iter()
            .map(|h| match h.gpu_instance {
                Some(gi) => format!("{}/{} ({}, MIG GPU instance {gi})", h.namespace, h.pod, h.container),
                None => format!("{}/{} ({})", h.namespace, h.pod, h.container),
            })
            .collect();
        out.push_str(&format!("<br><small>pod {}</small>", escape(&names.join(", "))));
    }
    out
}

/// GPM activity (SM, tensor, DRAM) and MIG, as a table cell.
fn activity_cell(r: Option<&crate::model::DeviceReadings>) -> String {
    let mut cell = String::from("<td class=\"n\">");
    match r.and_then(|r| r.activity.as_ref()) {
        Some(a) => {
            let pct = |v: Option<f64>| {
                v.map(|v| format!("{:.0}%", v * 100.0))
                    .unwrap_or_else(|| "&ndash;".into())
            };
            let _ = write!(
                cell,
                "SM {}<br><small>tensor {} &middot; DRAM {}</small>",
                pct(a.sm_active),
                pct(a.tensor_active),
                pct(a.dram_active)
            );
        }
        None => cell.push_str("<small>&ndash;</small>"),
    }
    if let Some(mig) = r.and_then(|r| r.mig.as_ref()).filter(|m| m.enabled) {
        let profiles: Vec<&str> = mig.instances.iter().map(|i| i.profile.as_str()).collect();
        let _ = write!(cell, "<br><small>MIG: {}</small>", escape(&profiles.join(", ")));
    }
    cell.push_str("</td>");
    cell
}

/// NVLinks up of the board's, their errors, and the fabric, as a table cell.
fn links_cell(r: Option<&crate::model::DeviceReadings>) -> String {
    let mut cell = String::from("<td class=\"n\">");
    match r.and_then(|r| r.nvlinks.as_ref()) {
        Some(n) => {
            let errors: u64 = n.links.iter().map(|l| l.errors_total()).sum();
            let _ = write!(
                cell,
                "NVLink {}/{} up<br><small>{errors} errors</small>",
                n.links_up(),
                n.board_links
            );
        }
        None => cell.push_str("<small>no NVLink</small>"),
    }
    if let Some(f) = r.and_then(|r| r.fabric.as_ref()) {
        let _ = write!(
            cell,
            "<br><small>fabric {}{}</small>",
            f.state,
            if f.error.is_some() { " (refused)" } else { "" }
        );
    }
    cell.push_str("</td>");
    cell
}

/// The journal's recent rows by GPU UUID (node rows under ""), or why it could not be read.
pub type Timeline = Result<std::collections::BTreeMap<String, Vec<crate::journal::read::Row>>, String>;

pub fn render(snapshot: &Snapshot) -> String {
    render_with_timeline(snapshot, None)
}

/// The page with each GPU's recent events from the journal (None: the journal is off).
pub fn render_with_timeline(snapshot: &Snapshot, timeline: Option<&Timeline>) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let host = &snapshot.hostname;
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">\
         <title>gpuwarden {}</title><style>{STYLE}</style></head><body>\
         <h1>gpuwarden on {}</h1><p class=\"meta\">version {} &middot; {} GPU(s) &middot; \
         <a href=\"/metrics\">/metrics</a> &middot; <a href=\"/healthz\">/healthz</a></p>",
        escape(host.trim()),
        escape(host.trim()),
        env!("CARGO_PKG_VERSION"),
        snapshot.devices.len()
    );
    // A vendor that is not on the node (no amdgpu driver) is no notice.
    for (backend, status) in snapshot.backends.iter().filter(|(_, status)| !status.absent) {
        if !status.up {
            let why = status.note.as_deref().unwrap_or("no readings from it");
            let _ = write!(out, "<p><b>{}</b>: {}.</p>", escape(backend), escape(why));
        }
    }
    for f in &snapshot.node_findings {
        let _ = write!(out, "<p><b>{}</b>: {}</p>", f.severity.label(), escape(&f.message));
    }
    if snapshot.devices.is_empty() {
        out.push_str("<p>No GPU found.</p></body></html>\n");
        return out;
    }
    out.push_str(
        "<table><thead><tr><th>GPU</th><th>Health</th><th>Temperature</th><th>Power</th>\
         <th>Activity</th><th>Links</th><th>Clock events</th><th>XIDs</th><th>Last probe</th></tr></thead><tbody>",
    );
    for d in &snapshot.devices {
        device_row(&mut out, snapshot, d);
    }
    out.push_str("</tbody></table>");
    if let Some(timeline) = timeline {
        timeline_section(&mut out, snapshot, timeline);
    }
    out.push_str("</body></html>\n");
    out
}

/// The last seven days of the journal, a few rows per GPU (`gpuwarden events` has the rest).
fn timeline_section(out: &mut String, snapshot: &Snapshot, timeline: &Timeline) {
    out.push_str("<h2>Recent events (7 days)</h2>");
    let rows = match timeline {
        Ok(rows) => rows,
        Err(e) => {
            let _ = write!(out, "<p>The journal cannot be read: {}.</p>", escape(e));
            return;
        }
    };
    out.push_str("<table class=\"timeline\"><thead><tr><th>GPU</th><th>events (newest last)</th></tr></thead><tbody>");
    let mut row = |label: String, uuid: &str| {
        let _ = write!(out, "<tr class=\"events\"><td>{label}</td><td>");
        match rows.get(uuid) {
            Some(list) if !list.is_empty() => {
                for r in list {
                    let _ = write!(
                        out,
                        "<div><small>{}</small> <b>{}</b> {}</div>",
                        escape(&crate::journal::report::utc(r.at)),
                        escape(&r.kind),
                        escape(&r.summary)
                    );
                }
            }
            _ => out.push_str("<small>none</small>"),
        }
        out.push_str("</td></tr>");
    };
    for d in &snapshot.devices {
        row(format!("GPU {}", d.identity.index), &d.identity.uuid);
    }
    row("node".to_string(), "");
    out.push_str("</tbody></table>");
}

/// One GPU's row of the table.
fn device_row(out: &mut String, snapshot: &Snapshot, d: &crate::model::DeviceSnapshot) {
    let id = &d.identity;
    let xids = snapshot.xid.for_bus(&id.pci_bus_id);
    let findings = &d.health.findings;
    let state = d.health.state;
    let _ = write!(
        out,
        "<tr><td><b>{}</b> {}<br><small>{} &middot; {}</small>{}</td>",
        id.index,
        escape(&id.name),
        escape(&id.pci_bus_id),
        escape(&id.uuid),
        attribution(snapshot, &id.uuid)
    );
    let _ = write!(out, "<td><span class=\"state {0}\">{0}</span>", state.label());
    if !findings.is_empty() {
        out.push_str("<ul>");
        for f in findings {
            let _ = write!(out, "<li>{}</li>", escape(&f.message));
        }
        out.push_str("</ul>");
    }
    out.push_str("</td>");
    let r = d.answered();
    temperature_and_power_cells(out, r);
    out.push_str(&activity_cell(r));
    out.push_str(&links_cell(r));
    events_and_xids_cells(out, r, xids);
    out.push_str("</td><td>");
    out.push_str(&probe_cell(snapshot, d));
    out.push_str("</td></tr>");
}

/// The temperature (with the slowdown threshold) and power (with the limit) cells.
fn temperature_and_power_cells(out: &mut String, r: Option<&crate::model::DeviceReadings>) {
    let temp = r.and_then(|r| r.die_temperature());
    let slowdown = r.and_then(|r| r.threshold("slowdown"));
    match (temp, slowdown) {
        (Some(t), Some(s)) => {
            let class = if s - t < 5.0 { " class=\"hot\"" } else { "" };
            let _ = write!(
                out,
                "<td class=\"n\"><span{class}>{t:.0} C</span><br><small>slowdown at {s:.0} C</small></td>"
            );
        }
        (Some(t), None) => {
            let _ = write!(out, "<td>{t:.0} C</td>");
        }
        _ => out.push_str("<td>&ndash;</td>"),
    }
    match r.and_then(|r| Some((r.power_watts?, r.power_limit_watts?))) {
        Some((p, l)) => {
            let _ = write!(out, "<td class=\"n\">{p:.0} W<br><small>of {l:.0} W</small></td>");
        }
        None => out.push_str("<td>&ndash;</td>"),
    }
}

/// The active clock-event reasons and the XIDs seen, each a cell.
fn events_and_xids_cells(
    out: &mut String,
    r: Option<&crate::model::DeviceReadings>,
    xids: &[crate::model::xid::XidCount],
) {
    out.push_str("<td>");
    let active: Vec<&str> = r
        .map(|r| r.clock_events.iter().filter(|e| e.active).map(|e| e.reason).collect())
        .unwrap_or_default();
    if active.is_empty() {
        out.push_str("<small>none</small>");
    }
    for reason in active {
        let _ = write!(out, "<span class=\"reason\">{}</span>", escape(reason));
    }
    out.push_str("</td><td>");
    if xids.is_empty() {
        out.push_str("<small>none</small>");
    } else {
        out.push_str("<ul>");
        for x in xids {
            let name = catalog::lookup(x.xid).map(|e| e.name).unwrap_or("unknown");
            let _ = write!(
                out,
                "<li>Xid {} <small>{} &middot; {} &middot; x{} &middot; {}</small></li>",
                x.xid,
                escape(name),
                x.severity.label(),
                x.count,
                ago(x.last_seen)
            );
        }
        out.push_str("</ul>");
    }
}

/// The last probe: its verdict, when, and the tests that failed; or why there is none.
fn probe_cell(snapshot: &Snapshot, d: &crate::model::DeviceSnapshot) -> String {
    let probe = &snapshot.probe;
    let Some(report) = probe.reports.get(&d.identity.uuid) else {
        return match probe.last_error.get(&d.identity.uuid) {
            Some(e) => format!("<small>could not run: {}</small>", escape(e)),
            None if probe.schedule_enabled => "<small>not run yet</small>".to_string(),
            None => "<small>not scheduled (probe.schedule)</small>".to_string(),
        };
    };
    let when = ago(crate::model::from_unix_seconds(report.started));
    let mut cell = match report.passed() {
        Some(true) => format!("pass <small>{when}</small>"),
        Some(false) => format!("<span class=\"hot\">FAIL</span> <small>{when}</small>"),
        None => format!("no expected values <small>{when}</small>"),
    };
    for t in report.tests.iter().filter(|t| t.pass == Some(false)) {
        if let (Some(s), Some(e)) = (t.sustained, t.expected) {
            let _ = write!(
                cell,
                "<br><small>{} {} of {}</small>",
                t.test.name(),
                t.test.unit().human(s),
                t.test.unit().human(e)
            );
        }
    }
    cell
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(
            escape("<b>\"GPU\" & 'x'</b>"),
            "&lt;b&gt;&quot;GPU&quot; &amp; &#39;x&#39;&lt;/b&gt;"
        );
    }
}
