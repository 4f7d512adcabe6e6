//! `gpuwarden health`: the running daemon's verdict, asked over the local API's socket
//! (local_api.rs) instead of polling the GPUs a second time. Exit 0: no GPU unhealthy (ok or
//! degraded); 1: a GPU or the node is unhealthy; 2: unknown (the daemon does not answer, or
//! has not finished its first poll); 3: the idle node's scheduled validation runs. node-problem-detector's custom plugins and Slurm's
//! health check read the exit code and the first line (deploy/).

use super::verdict::{Level, NodeVerdict, VerdictState};
use crate::service::exit::{CliError, CliResult, Exit};
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// How long the daemon has to answer: NPD's default plugin timeout is 5 s.
const TIMEOUT: Duration = Duration::from_secs(3);
/// The longest answer read: a node of many GPUs with every finding is a few KiB.
const MAX_ANSWER: u64 = 1024 * 1024;

/// Why the daemon's verdict could not be had.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("the daemon does not answer on {path}: {source} (is gpuwarden running, and am I root?)")]
    Connect { path: String, source: std::io::Error },
    #[error("the daemon's answer on {path} could not be read: {detail}")]
    Answer { path: String, detail: String },
    #[error("the daemon refused ({status}): {message}")]
    Refused { status: String, message: String },
    #[error("the daemon did not answer on {path} within {} s (stopped, or hung?)", .timeout.as_secs())]
    TimedOut { path: String, timeout: Duration },
}

/// How long a clear may take: the daemon waits for its next poll round (10 s at most).
const CLEAR_TIMEOUT: Duration = Duration::from_secs(15);

/// One request over the socket; the JSON body of a 200 answer, read as a `T`. `timeout`
/// covers the whole exchange, connect included: a stopped daemon (SIGSTOP) whose accept
/// queue is full makes connect(2) on a Unix socket wait forever, and a health check that
/// hangs would hang Slurm's and node-problem-detector's with it. The exchange runs on a
/// thread of its own; one that overruns is left behind and ends with the process.
fn request<T: serde::de::DeserializeOwned + Send + 'static>(
    socket: &Path,
    method: &str,
    request_path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<T, AskError> {
    let (socket_owned, method, request_path, body) = (
        socket.to_path_buf(),
        method.to_string(),
        request_path.to_string(),
        body.map(str::to_string),
    );
    let shown = socket.display().to_string();
    let answer = crate::service::deadline::within("local-api-client", timeout, move || {
        exchange::<T>(&socket_owned, &method, &request_path, body.as_deref(), timeout)
    });
    match answer {
        Ok(answer) => answer,
        Err(crate::service::deadline::Late::Spawn(e)) => Err(AskError::Connect { path: shown, source: e }),
        Err(crate::service::deadline::Late::TimedOut(_)) => Err(AskError::TimedOut { path: shown, timeout }),
    }
}

/// The exchange itself: connect, write, read.
fn exchange<T: serde::de::DeserializeOwned>(
    socket: &Path,
    method: &str,
    request_path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<T, AskError> {
    let shown = socket.display().to_string();
    let connect = |source| AskError::Connect {
        path: shown.clone(),
        source,
    };
    let answer = |detail: String| AskError::Answer {
        path: shown.clone(),
        detail,
    };
    let mut stream = std::os::unix::net::UnixStream::connect(socket).map_err(connect)?;
    stream.set_read_timeout(Some(timeout)).map_err(connect)?;
    stream.set_write_timeout(Some(timeout)).map_err(connect)?;
    // HTTP/1.0 with Connection: close: the answer ends where the stream does.
    let body = body.unwrap_or_default();
    write!(
        stream,
        "{method} {request_path} HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(connect)?;
    let mut raw = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .map_err(|e| answer(e.to_string()))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| answer("no end of headers".to_string()))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(AskError::Refused {
            status: status.split_whitespace().skip(1).collect::<Vec<_>>().join(" "),
            message: crate::input::printable(body.trim()),
        });
    }
    serde_json::from_str(body).map_err(|e| answer(e.to_string()))
}

/// Prints the verdict; the exit code says it for scripts.
pub fn health(socket: &Path, json: bool) -> CliResult {
    let verdict = match request::<NodeVerdict>(socket, "GET", "/api/v1/health", None, TIMEOUT) {
        Ok(verdict) => verdict,
        Err(e) => {
            // First line for NPD and Slurm, on stdout: short, says it is not known.
            println!("unknown: {e}");
            return Ok(Exit::UNKNOWN);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&verdict).unwrap_or_default());
    } else {
        print!("{}", text(&verdict));
    }
    Ok(exit_code(&verdict))
}

/// `gpuwarden health clear`: clears one GPU (or, with `nic`, one network adapter) and prints
/// what was let go of and what is still present. Exit 0: taken (nothing left but the
/// validation the clear started); 1: a finding whose condition still holds; 2: not cleared;
/// 64: the reason is not one (empty, too long).
pub fn clear(
    socket: &Path,
    gpu: &str,
    nic: Option<&str>,
    reason: &str,
    skip_validation: bool,
    json: bool,
) -> CliResult {
    let asked = super::clear::ClearRequest {
        gpu: gpu.to_string(),
        nic: nic.map(str::to_string),
        reason: reason.to_string(),
        skip_validation,
    };
    if let Err(e) = asked.checked_reason() {
        return Err(CliError::new(Exit::USAGE, format!("not cleared: {e}")));
    }
    let body = serde_json::to_string(&asked).unwrap_or_default();
    let post =
        |body: &str| request::<serde_json::Value>(socket, "POST", "/api/v1/health/clear", Some(body), CLEAR_TIMEOUT);
    let answer = post(&body).map_err(|e| CliError::new(Exit::UNKNOWN, format!("not cleared: {e}")))?;
    let (text, still) = if nic.is_some() {
        match serde_json::from_value::<super::clear_nic::NicClearAnswer>(answer.clone()) {
            Ok(a) => (super::clear_nic::text(&a), a.still.len()),
            Err(e) => return Err(not_an_answer(e)),
        }
    } else {
        match serde_json::from_value::<super::clear::ClearAnswer>(answer.clone()) {
            Ok(a) => (super::clear::text(&a), a.holding().count()),
            Err(e) => return Err(not_an_answer(e)),
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&answer).unwrap_or_default());
    } else {
        print!("{text}");
    }
    Ok(if still == 0 { Exit::SUCCESS } else { Exit::FOUND })
}

/// `gpuwarden health scheduler-report`: tells the daemon what the Slurm health check's drain guard
/// decided (deploy/slurm/healthcheck.sh runs it). Exit 0: kept; 2: not (the daemon did not
/// answer, or refused the report, and says why on stderr).
pub fn report(socket: &Path, report: &super::scheduler_report::ReportRequest) -> CliResult {
    if let Err(e) = report.checked() {
        return Err(CliError::new(Exit::USAGE, format!("not reported: {e}")));
    }
    let body = serde_json::to_string(report).unwrap_or_default();
    request::<serde_json::Value>(socket, "POST", "/api/v1/health/report", Some(&body), TIMEOUT)
        .map(|_| Exit::SUCCESS)
        .map_err(|e| CliError::new(Exit::UNKNOWN, format!("not reported: {e}")))
}

fn not_an_answer(e: serde_json::Error) -> CliError {
    CliError::new(
        Exit::UNKNOWN,
        format!("not cleared: the daemon's answer is not a clear's ({e})"),
    )
}

pub fn exit_code(verdict: &NodeVerdict) -> Exit {
    match verdict.state {
        VerdictState::Unhealthy => Exit::FOUND,
        // Keep new work off it, but nothing is wrong (node-problem-detector takes it for
        // unknown and changes nothing).
        VerdictState::Validating => Exit::VALIDATING,
        VerdictState::Ok | VerdictState::Degraded => Exit::SUCCESS,
        VerdictState::Unknown => Exit::UNKNOWN,
    }
}

/// The first line names the state and, when unhealthy, each GPU and reason in a few words
/// (what NPD puts in the node condition and Slurm in the drain reason); then one line per
/// finding with what to do.
pub fn text(verdict: &NodeVerdict) -> String {
    let mut out = String::new();
    let found: Vec<_> = verdict.at(Level::Unhealthy).collect();
    let unhealthy: Vec<String> = found
        .iter()
        .enumerate()
        .map(|(i, (gpu, f))| match gpu {
            Some(g) => {
                // After a GPU's last finding, its next step: the drain reason Slurm shows
                // and node-problem-detector's message say what the verdict says to do.
                let last = found
                    .get(i + 1)
                    .is_none_or(|(next, _)| next.map(|n| n.uuid.as_str()) != Some(&g.uuid));
                match (&g.next_step, last) {
                    (Some(step), true) => format!("GPU {} {} (next: {})", g.index, f.reason, step.step),
                    _ => format!("GPU {} {}", g.index, f.reason),
                }
            }
            // The port or address, so a drain reason says which (`node nic_port_down mlx5_2/1`).
            None => match &f.subject {
                Some(subject) => format!("node {} {subject}", f.reason),
                None => format!("node {}", f.reason),
            },
        })
        .collect();
    if let (true, Some(validating)) = (unhealthy.is_empty(), &verdict.validating) {
        out.push_str(&format!("validating: {validating}\n"));
    } else if unhealthy.is_empty() {
        out.push_str(&format!("{}: {}\n", verdict.state, verdict.summary));
    } else {
        out.push_str(&format!("{}: {}\n", verdict.state, unhealthy.join(", ")));
    }
    for state in Level::WORST_FIRST {
        for line in verdict.lines_at(state) {
            out.push_str(&format!("  {state}: {line}\n"));
        }
    }
    for g in &verdict.gpus {
        if let Some(next) = &g.next_step {
            out.push_str(&format!("  next step: GPU {} {}\n", g.index, next.describe()));
        }
        if let Some(held) = &g.held_back {
            out.push_str(&format!(
                "  automatic reset of GPU {} held back ({}): {}\n",
                g.index, held.guard, held.why
            ));
        }
    }
    out
}
