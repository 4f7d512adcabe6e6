//! `gpuwarden xid explain CODE` and `gpuwarden xid scan [FILE]`.

use super::catalog;
use super::parse;
use crate::service::exit::{CliError, CliResult, Exit};
use serde::Serialize;
use std::io::{BufRead, Write};
use std::path::Path;

/// What to do about an SXID, for `explain` and the docs.
pub const SXID_ACTION: &str = "fatal: drain the node; the NVSwitch and the NVLink traffic of the GPUs on its fabric \
     need a reset (reboot the node, or reset the GPUs and switches once idle); collect nvidia-bug-report.sh for NVIDIA \
     if it repeats. Non-fatal: no action by itself; a code that repeats points at the link or switch it names";

/// Prints the catalog entry; exit 0, or 1 when the code is not in the catalog. Codes of
/// 10000 and above are NVSwitch errors (SXIDs): their unit, from the block they fall in.
pub fn explain(code: u32) -> CliResult {
    if let Some(block) = super::sxid::block(code) {
        println!("SXid {code}: an NVSwitch error of its {} unit", block.unit);
        println!("  description: {}", block.what);
        println!(
            "  severity:    as the driver's line says it (Fatal or Non-fatal); a fatal one makes the node unhealthy"
        );
        println!("  action:      {SXID_ACTION}");
        return Ok(Exit::SUCCESS);
    }
    match catalog::lookup(code) {
        Some(e) => {
            println!("Xid {}: {}", e.code, e.name);
            println!("  description: {}", e.description);
            println!("  severity:    {}", e.severity.label());
            println!("  action:      {}", e.action());
            Ok(Exit::SUCCESS)
        }
        None => {
            println!("Xid {code}: not in the catalog this gpuwarden carries (severity unknown)");
            println!("  action:      {}", catalog::UNKNOWN_ACTION);
            Ok(Exit::FOUND)
        }
    }
}

#[derive(Serialize)]
struct Found<'a> {
    line: usize,
    xid: u32,
    /// null when the driver printed no address (or it was redacted).
    pci_bus_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compute_instance: Option<u32>,
    name: &'a str,
    severity: &'a str,
    action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    process: Option<&'a str>,
    message: &'a str,
}

/// Prints one JSON object per XID found in `input` (a file, or stdin when None).
pub fn scan(input: Option<&Path>) -> CliResult {
    let reader: Box<dyn BufRead> = match input {
        Some(path) => match std::fs::File::open(path) {
            Ok(f) => Box::new(std::io::BufReader::new(f)),
            Err(e) => {
                return Err(CliError::new(
                    Exit::FOUND,
                    format!("gpuwarden: cannot read {}: {e}", path.display()),
                ));
            }
        },
        None => Box::new(std::io::stdin().lock()),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // A notice over several lines is one XID, reported at its last line. A person's paste
    // is often `dmesg -t`'s: read unmarked lines here (the daemon does not; xid/parse.rs).
    let mut parser = parse::LogParser::reading_unmarked();
    // Read bytes, not strings: a log with a stray non-UTF-8 byte must not stop the scan.
    for (index, line) in reader.split(b'\n').enumerate() {
        let line = match line {
            Ok(bytes) => bytes,
            Err(e) => {
                return Err(CliError::new(
                    Exit::FOUND,
                    format!("gpuwarden: reading input failed at line {}: {e}", index + 1),
                ));
            }
        };
        for (report, _) in parser.feed(&line, line.len() + 1) {
            if let parse::ReportKind::Sxid { switch, fatal } = report.kind {
                let found = serde_json::json!({
                    "line": index + 1,
                    "sxid": report.xid,
                    "switch": switch,
                    "pci_bus_id": report.pci_bus_id,
                    "unit": super::sxid::block(report.xid).map(|b| b.unit),
                    "severity": if fatal { "fatal" } else { "non_fatal" },
                    "message": report.message,
                });
                if writeln!(out, "{found}").is_err() {
                    return Ok(Exit::SUCCESS);
                }
                continue;
            }
            let entry = catalog::lookup(report.xid);
            let found = Found {
                line: index + 1,
                xid: report.xid,
                pci_bus_id: report.pci_bus_id.as_deref(),
                gpu_instance: report.gpu_instance,
                compute_instance: report.compute_instance,
                name: entry.map(|e| e.name).unwrap_or("unknown"),
                severity: entry.map(|e| e.severity.label()).unwrap_or("unknown"),
                action: entry
                    .map(|e| e.action())
                    .unwrap_or_else(|| catalog::UNKNOWN_ACTION.to_string()),
                pid: report.pid.as_deref(),
                process: report.process.as_deref(),
                message: &report.message,
            };
            let written = serde_json::to_string(&found)
                .map_err(std::io::Error::other)
                .and_then(|json| writeln!(out, "{json}"));
            if written.is_err() {
                // Output closed (piped into head): stop quietly.
                return Ok(Exit::SUCCESS);
            }
        }
    }
    Ok(Exit::SUCCESS)
}
