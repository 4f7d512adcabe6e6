//! The status page at `/`: each GPU with its health, temperature, active clock-event reasons
//! and XIDs, for a person who opens the node's address in a browser.
//!
//! Plain server-rendered HTML from the latest snapshot: no JavaScript, a refresh every five
//! seconds, and nothing that calls a vendor library.

use crate::model::{Snapshot, unix_seconds};
use crate::xid::catalog;
use std::fmt::Write;
use std::time::SystemTime;

use crate::serve::html::escape;

fn ago(then: SystemTime) -> String {
    let seconds = (crate::model::unix_now() - unix_seconds(then)).max(0.0);
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
.hot{color:#c62828;font-weight:600}td.n{white-space:nowrap}ul{margin:0;padding-left:1.1em}small{color:#666}\
.next{margin-top:.3em;padding-left:.4em;border-left:3px solid #c62828;color:#222;font-weight:600}\
td{overflow-wrap:break-word}table.gpus{table-layout:auto;font-size:13px}\
.summary{background:#f7f7f7;border-left:4px solid #999;padding:.5em .8em;margin:0 0 1em;overflow-wrap:break-word}\
.summary.unhealthy{border-color:#c62828}.summary.degraded{border-color:#ef6c00}.summary.ok{border-color:#2e7d32}\
svg.spark{display:block}svg.spark polyline{fill:none;stroke-width:1.3}svg.spark .a{stroke:#1565c0}svg.spark .b{stroke:#8e24aa}\
svg.spark circle.a{fill:#1565c0}svg.spark circle.b{fill:#8e24aa}\
svg.spark .ref{stroke:#c62828;stroke-dasharray:3 2;stroke-width:1}svg.spark .mark{stroke-width:1.5}\
svg.spark .xid{stroke:#c62828}svg.spark .health{stroke:#ef6c00}svg.spark .probe{stroke:#2e7d32}svg.spark text{font-size:10px;fill:#999}\
@media (max-width:760px){body{margin:.6em}table.gpus thead,table.trends thead{display:none}\
table.gpus tr,table.trends tr{display:block;border:1px solid #ddd;border-radius:6px;margin:0 0 .8em;padding:.3em}\
table.gpus td,table.trends td{display:block;border:0;padding:.25em .4em}\
table.gpus td:nth-child(3)::before{content:\"Temperature: \"}table.gpus td:nth-child(4)::before{content:\"Power: \"}\
table.gpus td:nth-child(5)::before{content:\"Activity: \"}table.gpus td:nth-child(6)::before{content:\"Links: \"}\
table.gpus td:nth-child(7)::before{content:\"Clock events: \"}table.gpus td:nth-child(8)::before{content:\"XIDs: \"}\
table.gpus td:nth-child(9)::before{content:\"Last probe: \"}td::before{color:#666;font-size:12px}\
table.trends td:nth-child(2)::before{content:\"Temperature / slowdown\"}table.trends td:nth-child(3)::before{content:\"Power / limit\"}\
table.trends td:nth-child(4)::before{content:\"SM and DRAM activity\"}table.trends td:nth-child(5)::before{content:\"Memory used\"}\
table.trends td:nth-child(6)::before{content:\"Clock-event time\"}table.trends td::before{display:block}}";

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
pub(crate) type Timeline =
    Result<std::collections::BTreeMap<String, Vec<crate::journal::store::read::Row>>, TimelineError>;

/// Why the page shows no recent events.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TimelineError {
    #[error("the journal's readers are all busy")]
    Busy,
    #[error("{0}")]
    Journal(#[from] crate::journal::store::worker::Failure),
    #[error("the journal worker answered something else")]
    Unexpected,
}

/// The page with each GPU's recent events from the journal (None: the journal is off) and
/// its last hour's trends (None: no history kept).
pub(crate) fn render_with_timeline(
    snapshot: &Snapshot,
    timeline: Option<&Timeline>,
    history: Option<&crate::serve::history::History>,
) -> String {
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
            let why = status.note.unwrap_or("no readings from it");
            let _ = write!(out, "<p><b>{}</b>: {}.</p>", escape(backend), escape(why));
        }
    }
    if snapshot.devices.is_empty() {
        // No summary to put them in: the node's findings as they are.
        for f in &snapshot.node_findings {
            let _ = write!(out, "<p><b>{}</b>: {}</p>", f.severity.label(), escape(&f.message));
        }
        out.push_str("<p>No GPU found.</p></body></html>\n");
        return out;
    }
    summary(&mut out, snapshot, timeline);
    out.push_str(
        "<table class=\"gpus\"><thead><tr><th>GPU</th><th>Health</th><th>Temperature</th><th>Power</th>\
         <th>Activity</th><th>Links</th><th>Clock events</th><th>XIDs</th><th>Last probe</th></tr></thead><tbody>",
    );
    // Worst first: unhealthy GPUs, then degraded, then the rest, each in index order.
    let mut devices: Vec<&crate::model::DeviceSnapshot> = snapshot.devices.iter().collect();
    devices.sort_by_key(|d| (std::cmp::Reverse(d.health.state), d.identity.index));
    for d in devices {
        device_row(&mut out, snapshot, d);
    }
    out.push_str("</tbody></table>");
    super::status_network::section(&mut out, snapshot);
    if let Some(history) = history {
        trends_section(&mut out, snapshot, timeline, history);
    }
    if let Some(timeline) = timeline {
        timeline_section(&mut out, snapshot, timeline);
    }
    out.push_str("</body></html>\n");
    match out.find("<body>") {
        Some(body) => format!("{}{}", &out[..body], super::html::with_label_breaks(&out[body..])),
        None => out,
    }
}

/// The node at a glance: GPUs per state, the worst finding with what to do, the time since
/// the last verdict change (from the journal), and the jobs and pods on the GPUs that need
/// attention.
fn summary(out: &mut String, snapshot: &Snapshot, timeline: Option<&Timeline>) {
    use crate::model::health::HealthState;
    let count = |state: HealthState| snapshot.devices.iter().filter(|d| d.health.state == state).count();
    let worst_state = snapshot.worst_health().unwrap_or(HealthState::Ok);
    let _ = write!(
        out,
        "<div class=\"summary {}\"><b>{} GPU(s)</b>: {} ok, {} degraded, {} unhealthy",
        worst_state.label(),
        snapshot.devices.len(),
        count(HealthState::Ok),
        count(HealthState::Degraded),
        count(HealthState::Unhealthy)
    );
    let ports = snapshot
        .node_findings
        .iter()
        .filter_map(|f| f.subject.as_deref().filter(|s| s.contains('/')))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if ports > 0 {
        let _ = write!(out, " &middot; {ports} network port(s) with findings (below)");
    }
    let worst = worst_finding(out, snapshot);
    // The node's own findings (not a port's: those are in the network section), worst
    // first, but for the one already said.
    let mut node: Vec<&crate::model::health::Finding> = snapshot
        .node_findings
        .iter()
        .filter(|f| !f.subject.as_deref().is_some_and(|s| s.contains('/')))
        .filter(|f| !worst.is_some_and(|w| std::ptr::eq(w, *f)))
        .collect();
    node.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for f in node {
        let _ = write!(
            out,
            "<br>node <b>{}</b> ({}): {}",
            escape(f.reason.label()),
            f.severity.label(),
            escape(&f.message)
        );
    }
    if let Some(Ok(rows)) = timeline {
        let last_change = rows
            .values()
            .flatten()
            .filter(|r| r.is(crate::journal::event::Kind::Health))
            .map(|r| r.at)
            .fold(f64::NAN, f64::max);
        if last_change.is_finite() {
            let _ = write!(
                out,
                "<br>last verdict change {}",
                ago(crate::model::from_unix_seconds(last_change))
            );
        }
    }
    affected_work(out, snapshot);
    out.push_str("</div>");
}

/// The summary's worst finding, with what to do about it: the most severe; among equals a
/// GPU's or the node's own before a network port's (a port has its section below), then in
/// order. Returns it when it is the node's.
fn worst_finding<'a>(out: &mut String, snapshot: &'a Snapshot) -> Option<&'a crate::model::health::Finding> {
    use crate::model::health::HealthState;
    let is_port = |f: &crate::model::health::Finding| f.subject.as_deref().is_some_and(|s| s.contains('/'));
    let worst = snapshot
        .devices
        .iter()
        .flat_map(|d| d.health.findings.iter().map(move |f| (Some(d), f)))
        .chain(snapshot.node_findings.iter().map(|f| (None, f)))
        .min_by_key(|(_, f)| (std::cmp::Reverse(f.severity), is_port(f)));
    let (gpu, finding) = worst.filter(|(_, f)| f.severity > HealthState::Ok)?;
    // The finding says what to do in its own words; the ladder's next step, where there is
    // one, is the one command (never the rule table's general advice beside it).
    let next = gpu
        .and_then(|d| d.health.next_step.as_ref())
        .map(|step| {
            format!(
                "<div class=\"next\">Next step: <b>{}</b></div>",
                escape(&step.describe())
            )
        })
        .unwrap_or_default();
    let _ = write!(
        out,
        "<br>worst: <b>{} {}</b>: {}{next}",
        gpu.map_or("node".to_string(), |d| format!("GPU {}", d.identity.index)),
        escape(finding.reason.label()),
        escape(&finding.message),
    );
    gpu.is_none().then_some(finding)
}

/// The jobs and pods on the GPUs that need attention.
fn affected_work(out: &mut String, snapshot: &Snapshot) {
    use crate::model::health::HealthState;
    let mut affected = Vec::new();
    for d in snapshot.devices.iter().filter(|d| d.health.state > HealthState::Ok) {
        if let Some(jobs) = snapshot.jobs.get(&d.identity.uuid) {
            affected.push(format!("job {} (GPU {})", jobs.join(", "), d.identity.index));
        }
        if let Some(pods) = snapshot.pods.get(&d.identity.uuid) {
            for p in pods {
                affected.push(format!("pod {}/{} (GPU {})", p.namespace, p.pod, d.identity.index));
            }
        }
    }
    if !affected.is_empty() {
        let _ = write!(
            out,
            "<br>on the GPUs that need attention: {}",
            escape(&affected.join(", "))
        );
    }
}

/// Each GPU's last hour, with the journal's XIDs, verdict changes and probes on the same
/// time axis.
fn trends_section(
    out: &mut String,
    snapshot: &Snapshot,
    timeline: Option<&Timeline>,
    history: &crate::serve::history::History,
) {
    use crate::serve::history::Range;
    let now = crate::model::unix_now();
    let start = now - 3600.0;
    out.push_str(
        "<h2>Last hour</h2><table class=\"trends\"><thead><tr><th>GPU</th><th>Temperature / slowdown</th>\
         <th>Power / limit</th><th>SM and DRAM activity</th><th>Memory used</th><th>Clock-event time</th></tr></thead><tbody>",
    );
    for d in &snapshot.devices {
        let id = &d.identity;
        let markers = timeline_markers(timeline, &id.uuid);
        let _ = write!(
            out,
            "<tr class=\"trend\"><td><b>{}</b><br><small>{}</small></td>",
            id.index,
            escape(&id.name)
        );
        for cell in trend_cells(id.index, &|m| history.series(&id.uuid, m, Range::Hour)) {
            write_trend_cell(out, cell, &markers, start, now);
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table><p><small>Marks: <span class=\"hot\">XID</span>, verdict change, probe (hover for what).</small></p>");
}

/// The journal's rows about one GPU that a chart marks: XIDs, verdict changes, probes.
fn timeline_markers(timeline: Option<&Timeline>, uuid: &str) -> Vec<crate::serve::sparkline::Marker> {
    let Some(Ok(rows)) = timeline else {
        return Vec::new();
    };
    rows.get(uuid)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            use crate::journal::event::Kind;
            let class = match Kind::from_name(&r.kind)? {
                Kind::Xid | Kind::XidStorm => "xid",
                Kind::Health | Kind::Clear => "health",
                Kind::Probe => "probe",
                _ => return None,
            };
            Some(crate::serve::sparkline::Marker {
                at: r.at,
                class,
                title: format!("{}: {}", crate::journal::report::utc(r.at), r.summary),
            })
        })
        .collect()
}

/// One chart of a GPU's trend row: its lines (series and CSS class), a dashed reference, the
/// value range, the chart's title and the caption under it.
struct TrendCell {
    lines: Vec<(Option<crate::serve::history::Series>, &'static str)>,
    reference: Option<f64>,
    floor: Option<f64>,
    ceiling: Option<f64>,
    title: String,
    caption: String,
}

fn last(s: &Option<crate::serve::history::Series>) -> Option<f64> {
    s.as_ref().and_then(|s| s.points.iter().rev().find_map(|(_, v)| *v))
}

fn peak(s: &Option<crate::serve::history::Series>) -> Option<f64> {
    s.as_ref()
        .map(|s| s.points.iter().filter_map(|(_, v)| *v).fold(f64::NAN, f64::max))
        .filter(|v| v.is_finite())
}

/// A GPU's five charts, from its history (`get`).
fn trend_cells(
    index: u32,
    get: &dyn Fn(crate::serve::history::Metric) -> Option<crate::serve::history::Series>,
) -> [TrendCell; 5] {
    use crate::serve::history::Metric;
    let (temperature, slowdown) = (get(Metric::Temperature), get(Metric::SlowdownTemperature));
    let limit_now = last(&slowdown);
    let temperature_caption = match (last(&temperature), peak(&temperature)) {
        (Some(t), Some(p)) => format!(
            "{t:.0} C now, {p:.0} C max{}",
            limit_now.map_or(String::new(), |l| format!(", slowdown {l:.0} C"))
        ),
        _ => "no reading".to_string(),
    };
    let (power, power_limit) = (get(Metric::Power), get(Metric::PowerLimit));
    let power_caption = match (last(&power), last(&power_limit)) {
        (Some(p), Some(l)) => format!("{p:.0} of {l:.0} W"),
        (Some(p), None) => format!("{p:.0} W"),
        _ => "no reading".to_string(),
    };
    let (sm, dram) = (get(Metric::SmActive), get(Metric::DramActive));
    let activity_caption = match (last(&sm), last(&dram)) {
        (Some(s), Some(m)) => format!("SM {:.0} %, DRAM {:.0} %", s * 100.0, m * 100.0),
        _ => "no GPM readings".to_string(),
    };
    let memory = get(Metric::MemoryUsed);
    let memory_caption = last(&memory).map_or("no reading".to_string(), |b| format!("{:.1} GiB", b / 1024f64.powi(3)));
    let throttle = get(Metric::ClockEventSeconds);
    let throttle_caption =
        last(&throttle).map_or("no reading".to_string(), |r| format!("{:.0} % of the time", r * 100.0));
    let power_reference = last(&power_limit);
    [
        TrendCell {
            lines: vec![(temperature, "a")],
            reference: limit_now,
            floor: None,
            ceiling: None,
            title: format!("GPU {index} temperature, last hour"),
            caption: temperature_caption,
        },
        TrendCell {
            lines: vec![(power, "a")],
            reference: power_reference,
            floor: Some(0.0),
            ceiling: None,
            title: format!("GPU {index} power, last hour"),
            caption: power_caption,
        },
        TrendCell {
            lines: vec![(sm, "a"), (dram, "b")],
            reference: None,
            floor: Some(0.0),
            ceiling: Some(1.0),
            title: format!("GPU {index} SM (blue) and DRAM (purple) activity, last hour"),
            caption: activity_caption,
        },
        TrendCell {
            lines: vec![(memory, "a")],
            reference: None,
            floor: Some(0.0),
            ceiling: None,
            title: format!("GPU {index} memory used, last hour"),
            caption: memory_caption,
        },
        TrendCell {
            lines: vec![(throttle, "a")],
            reference: None,
            floor: Some(0.0),
            ceiling: Some(1.0),
            title: format!("GPU {index} time in clock-event reasons (seconds per second), last hour"),
            caption: throttle_caption,
        },
    ]
}

fn write_trend_cell(
    out: &mut String,
    cell: TrendCell,
    markers: &[crate::serve::sparkline::Marker],
    start: f64,
    now: f64,
) {
    let chart = crate::serve::sparkline::Chart {
        lines: cell
            .lines
            .iter()
            .filter_map(|(s, class)| s.as_ref().map(|s| (s, *class)))
            .collect(),
        reference: cell.reference,
        floor: cell.floor,
        ceiling: cell.ceiling,
        markers,
        title: cell.title,
    };
    let _ = write!(
        out,
        "<td>{}<small>{}</small></td>",
        crate::serve::sparkline::render(&chart, start, now),
        escape(&cell.caption)
    );
}

/// The last seven days of the journal, a few rows per GPU (`gpuwarden events` has the rest).
fn timeline_section(out: &mut String, snapshot: &Snapshot, timeline: &Timeline) {
    out.push_str("<h2>Recent events (7 days)</h2>");
    let rows = match timeline {
        Ok(rows) => rows,
        Err(e) => {
            let _ = write!(out, "<p>The journal cannot be read: {}.</p>", escape(&e.to_string()));
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
    if let Some(step) = &d.health.next_step {
        let _ = write!(
            out,
            "<div class=\"next\">next step: <b>{}</b></div>",
            escape(&step.describe())
        );
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
    let slowdown = r.and_then(|r| r.threshold(crate::model::Threshold::Slowdown));
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
        .map(|r| {
            r.clock_events
                .iter()
                .filter(|e| e.active)
                .map(|e| e.reason.label())
                .collect()
        })
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
    let baseline_probes = snapshot.health_limits.probe_regression.baseline_probes;
    let chart = super::status_probe::trend(probe, &d.identity.uuid, d.identity.index, baseline_probes);
    let Some(report) = probe.reports.get(&d.identity.uuid) else {
        let why = match probe.last_error.get(&d.identity.uuid) {
            Some(e) => format!("<small>could not run: {}</small>", escape(&e.why)),
            None if probe.schedule_enabled => "<small>not run yet</small>".to_string(),
            None => "<small>not scheduled (probe.schedule)</small>".to_string(),
        };
        return why + &chart.unwrap_or_default();
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
    cell.push_str(&chart.unwrap_or_default());
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
