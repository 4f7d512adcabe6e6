//! `gpuwarden check`: poll every GPU once and say what a person should act on.
//!
//! Exit status: 0 when every GPU is healthy, 1 when any finding is degraded or unhealthy,
//! 2 when no GPU could be read at all (no driver, NVML missing, no GPUs), so scripts and
//! node-health checks can branch on it.

use crate::config::Config;
use crate::config::settings::{Settings, SharedSettings};
use crate::health::{Finding, HealthState};
use crate::model::{DeviceSnapshot, Snapshot};
use crate::service::exit::{CliError, CliResult, Exit};
use crate::snapshot::publisher::Publisher;
use crate::snapshot::store::Store;
use crate::sources::Sources;
use crate::sources::poller::Coordinator;
use crate::xid::{kmsg, store::XidCount, store::XidSource, store::XidStore};
use serde::Serialize;
use std::fmt::Write;
use std::sync::Arc;

#[derive(Serialize)]
struct DeviceReport<'a> {
    #[serde(flatten)]
    device: &'a DeviceSnapshot,
    xids: &'a [XidCount],
    health: HealthState,
    findings: &'a [Finding],
}

#[derive(Serialize)]
struct Report<'a> {
    backends: std::collections::BTreeMap<&'static str, bool>,
    devices: Vec<DeviceReport<'a>>,
    /// Findings about the node (a GPU on the PCI bus no backend shows).
    node_findings: &'a [Finding],
}

/// Reads the kernel log's backlog for XIDs, runs one poll round and returns the snapshot.
pub fn poll_once(config: Config) -> Arc<Snapshot> {
    let store = Arc::new(Store::new());
    let xids = Arc::new(XidStore::new(config.xid.dedup_window));
    xids.set_policy(config.health.xid_severity.clone());
    if config.xid.read_kernel_log {
        match kmsg::read_backlog(&config.xid.kernel_log_path, &xids) {
            Ok(_) => xids.set_source_up(XidSource::KernelLog, true),
            Err(e) => {
                xids.set_source_up(XidSource::KernelLog, false);
                log::warn!(
                    "cannot read the kernel log {} ({e}): XIDs since boot are not checked; run as root",
                    config.xid.kernel_log_path.display()
                );
            }
        }
    }
    let settings = Arc::new(SharedSettings::new(Settings::serving_nothing(config)));
    let sources = Sources::new(xids);
    let publisher = Arc::new(Publisher::new(store.clone(), sources.clone(), settings.clone()));
    let mut coordinator = Coordinator::new(settings.clone(), publisher.round_sink(), sources.polled.clone(), None);
    coordinator.run_round();
    // No threads here: the side inputs are read once, after the round (the DRM client walk
    // needs to know whether there are AMD GPUs), and the snapshot is put together again.
    sources.read_periodic_once(&settings.current());
    publisher.refresh_if_changed();
    store.latest()
}

pub fn run(config: Config, file: Option<&std::path::Path>, json: bool) -> CliResult {
    // check loads the vendor libraries: a simulated one named where none is asked for is
    // refused, as the daemon refuses it.
    config
        .refuse_unasked_simulation(file)
        .map_err(|e| CliError::new(Exit::CONFIG, e.to_string()))?;
    let snapshot = poll_once(config);
    let devices: Vec<DeviceReport> = snapshot
        .devices
        .iter()
        .map(|device| {
            let xids = snapshot.xid.for_bus(&device.identity.pci_bus_id);
            DeviceReport {
                device,
                xids,
                health: device.health.state,
                findings: &device.health.findings,
            }
        })
        .collect();
    // A GPU missing from the bus is a finding even when every GPU shown is healthy, and when
    // none is shown at all (the driver is down while its GPUs are on the bus): that node is
    // unhealthy, not "no GPU". Only a node with no GPU anywhere has no verdict.
    let worst = snapshot.worst_health();
    let report = Report {
        node_findings: &snapshot.node_findings,
        backends: snapshot.backends.iter().map(|(k, v)| (*k, v.up)).collect(),
        devices,
    };

    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| {
            CliError::new(
                Exit::UNKNOWN,
                format!("gpuwarden: cannot write the report as JSON: {e}"),
            )
        })?;
        println!("{text}");
    } else if report.devices.is_empty() {
        // No empty table: say what was looked at and why it found nothing.
        println!("No GPU found.");
        for (name, status) in snapshot.backends.iter() {
            let state = match (&status.up, &status.note) {
                (true, _) => "up, no GPU".to_string(),
                (false, Some(note)) => note.to_string(),
                (false, None) => "not available".to_string(),
            };
            println!("  {name}: {state}");
        }
        if snapshot.backends.is_empty() {
            println!("  every GPU backend is disabled in the config");
        }
        for finding in &snapshot.node_findings {
            println!("node: {}: {}", finding.severity.label(), finding.message);
        }
    } else {
        print!("{}", table(&report));
    }
    match worst {
        None if json => Err(CliError::quiet(Exit::UNKNOWN)),
        None => Err(CliError::new(
            Exit::UNKNOWN,
            "gpuwarden: no GPU could be read (see the messages above)",
        )),
        Some(HealthState::Ok) => Ok(Exit::SUCCESS),
        Some(_) => Ok(Exit::FOUND),
    }
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<4} {:<22} {:<13} {:>6} {:>13} {:>9} {:>9} {:<8} {:<10}",
        "GPU", "NAME", "BUS ID", "TEMP", "POWER", "SM CLOCK", "PCIE", "PERSIST", "HEALTH"
    );
    for d in &report.devices {
        let id = &d.device.identity;
        let r = d.device.readings.as_ref();
        let temp = r
            .and_then(|r| r.die_temperature())
            .map(|t| format!("{t:.0} C"))
            .unwrap_or("-".into());
        let power = r
            .and_then(|r| Some(format!("{:.0}/{:.0} W", r.power_watts?, r.power_limit_watts?)))
            .unwrap_or("-".into());
        let sm = r
            .and_then(|r| r.clock(crate::model::ClockDomain::Sm))
            .map(|hz| format!("{:.0} MHz", hz / 1e6))
            .unwrap_or("-".into());
        let pcie = r
            .and_then(|r| Some(format!("Gen{} x{}", r.pcie.generation?, r.pcie.width?)))
            .unwrap_or("-".into());
        let persist = match r.and_then(|r| r.persistence_mode) {
            Some(true) => "on",
            Some(false) => "off",
            None => "-",
        };
        let _ = writeln!(
            out,
            "{:<4} {:<22} {:<13} {:>6} {:>13} {:>9} {:>9} {:<8} {:<10}",
            id.index,
            truncate(&id.name, 22),
            id.pci_bus_id,
            temp,
            power,
            sm,
            pcie,
            persist,
            d.health.label()
        );
    }
    let findings: Vec<_> = report
        .devices
        .iter()
        .flat_map(|d| d.findings.iter().map(move |f| (d, f)))
        .collect();
    if !findings.is_empty() || !report.node_findings.is_empty() {
        let _ = writeln!(out, "\nFindings:");
        for f in report.node_findings {
            let _ = writeln!(out, "  node: {}: {}", f.severity.finding_label(), f.message);
        }
        for (d, f) in findings {
            let id = &d.device.identity;
            let _ = writeln!(
                out,
                "  GPU {} ({}): {}: {}",
                id.index,
                id.uuid,
                f.severity.finding_label(),
                f.message
            );
        }
    }
    out
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        s.chars().take(width - 1).chain(['~']).collect()
    }
}
