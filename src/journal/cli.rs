//! `gpuwarden events` and `gpuwarden report`: read the journal directly and read-only, so
//! they work while the daemon runs and on a node where it does not.

use crate::journal::event::Kind;
use crate::journal::report;
use crate::journal::store::db;
use crate::journal::store::read::{self, GpuSelector, Query, Row};
use crate::service::exit::{CliError, CliResult, Exit};
use std::path::Path;
use std::time::SystemTime;

pub struct EventsOptions {
    pub since: Option<String>,
    pub gpu: Option<String>,
    /// Only these kinds; empty: every kind.
    pub kinds: Vec<Kind>,
    pub limit: usize,
    pub json: bool,
    /// The baselines too (a counter's reading at first sight or at a start).
    pub all: bool,
}

/// Prints the rows; exit 0 (also when there are none), 2 when the journal cannot be read,
/// 64 for a bad option.
pub fn events(path: &Path, options: &EventsOptions) -> CliResult {
    let mut query = Query {
        limit: options.limit,
        kinds: options.kinds.clone(),
        hide_baselines: !options.all,
        ..Default::default()
    };
    if let Some(since) = &options.since {
        match read::parse_since(since, SystemTime::now()) {
            Ok(since) => query.since = Some(since),
            Err(e) => return Err(usage(&e.to_string())),
        }
    }
    let conn = open(path)?;
    if let Some(gpu) = &options.gpu {
        match read::find_gpu(&conn, &GpuSelector::parse(gpu)) {
            Ok(Some(facts)) => query.gpus = vec![facts.uuid],
            // A UUID the journal never saw as a GPU may still name rows (a board swapped out).
            Ok(None) if gpu.starts_with("GPU-") || gpu.starts_with("AMD-") => query.gpus = vec![gpu.clone()],
            Ok(None) => return Err(not_in_journal(gpu, path)),
            Err(e) => return Err(unreadable(path, &e.to_string())),
        }
    }
    let rows = read::events(&conn, &query).map_err(|e| unreadable(path, &e.to_string()))?;
    if options.json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
    } else {
        // GPUs as every other command names them: index and bus id (the UUID is in --json).
        let indexes = read::gpu_indexes(&conn).unwrap_or_default();
        for row in &rows {
            println!("{}", line(row, &indexes));
        }
    }
    Ok(Exit::SUCCESS)
}

/// One row as a line: time, kind, GPU (`GPU 5 0000:bb:00.0`, by the index the journal last
/// knew it at, or `node`), summary.
pub fn line(row: &Row, indexes: &std::collections::BTreeMap<String, u32>) -> String {
    let bus = row.pci_bus_id.as_deref().filter(|b| !b.is_empty());
    let gpu = match (row.gpu_uuid.as_ref().and_then(|u| indexes.get(u)), bus) {
        (Some(index), Some(bus)) => format!("GPU {index} {bus}"),
        (Some(index), None) => format!("GPU {index}"),
        (None, Some(bus)) => bus.to_string(),
        (None, None) => match &row.gpu_uuid {
            Some(uuid) => uuid.clone(),
            None => "node".to_string(),
        },
    };
    format!("{}  {:<12} {gpu:<20}  {}", report::utc(row.at), row.kind, row.summary)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
    Markdown,
}

/// Prints one GPU's evidence packet; exit 0, 1 when the journal has no such GPU, 2 when it
/// cannot be read.
pub fn report(path: &Path, gpu: &str, format: ReportFormat) -> CliResult {
    let conn = open(path)?;
    let facts = match read::find_gpu(&conn, &GpuSelector::parse(gpu)) {
        Ok(Some(facts)) => facts,
        Ok(None) => return Err(not_in_journal(gpu, path)),
        Err(e) => return Err(unreadable(path, &e.to_string())),
    };
    let now = crate::model::unix_now();
    // The report reads no config: each probe is set against the default baseline (the median
    // of its 10 earlier probes).
    let baseline_probes = crate::config::Probe::default().baseline_probes;
    let r = report::build(&conn, &facts, now, baseline_probes).map_err(|e| unreadable(path, &e.to_string()))?;
    match format {
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default()),
        ReportFormat::Markdown | ReportFormat::Text => print!("{}", report::markdown(&r)),
    }
    Ok(Exit::SUCCESS)
}

/// Prints one network adapter's evidence; exit 0, 1 when the journal has no row of it, 2
/// when it cannot be read.
pub fn report_nic(path: &Path, device: &str, format: ReportFormat) -> CliResult {
    let conn = open(path)?;
    let now = crate::model::unix_now();
    match crate::journal::report::nic::build(&conn, device, now) {
        Ok(Some(r)) => {
            match format {
                ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default()),
                ReportFormat::Markdown | ReportFormat::Text => print!("{}", crate::journal::report::nic::markdown(&r)),
            }
            Ok(Exit::SUCCESS)
        }
        Ok(None) => Err(CliError::new(
            Exit::FOUND,
            format!(
                "gpuwarden: the journal {} has no network adapter {device:?} (give its name as `nic_info` or \
                 `ibstat` shows it, like mlx5_0)",
                path.display()
            ),
        )),
        Err(e) => Err(unreadable(path, &e.to_string())),
    }
}

fn open(path: &Path) -> Result<rusqlite::Connection, CliError> {
    if !path.exists() {
        return Err(unreadable(
            path,
            "no such file (the daemon writes it; is state.path set elsewhere? --state FILE reads another)",
        ));
    }
    let conn = db::open_read_only(path).map_err(|e| unreadable(path, &e.to_string()))?;
    // A file the daemon has made but not yet given its tables (the first moments of a start)
    // would otherwise answer "no such table: events".
    let has_tables: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'events'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| unreadable(path, &e.to_string()))?;
    if !has_tables {
        return Err(unreadable(
            path,
            "it holds no journal yet (a daemon starting makes its tables in a moment; try again)",
        ));
    }
    Ok(conn)
}

/// The journal cannot be read (no file, not a database, no permission).
fn unreadable(path: &Path, why: &str) -> CliError {
    CliError::new(
        Exit::UNKNOWN,
        format!("gpuwarden: cannot read the journal {}: {why}", path.display()),
    )
}

fn not_in_journal(gpu: &str, path: &Path) -> CliError {
    CliError::new(
        Exit::FOUND,
        format!(
            "gpuwarden: the journal {} has no GPU {gpu} (give an index as `gpuwarden check` shows it, or a UUID)",
            path.display()
        ),
    )
}

fn usage(message: &str) -> CliError {
    CliError::new(Exit::USAGE, format!("gpuwarden: {message}"))
}
