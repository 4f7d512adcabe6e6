//! The probe's child process: `gpuwarden probe --json --settings-from-stdin ...`, started by
//! the daemon with the settings it runs with, one piece of GPU work at a time, killed after
//! `probe.timeout` or at the daemon's stop. The CUDA driver, cuBLAS and NCCL are loaded there,
//! never in the daemon (schedule.rs says why).

use crate::config::settings::ChildSettings;
use crate::service::stop::Stop;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A probe that could not run: the `result` label of `gpu_probe_runs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunError {
    /// It could not start or gave no report (no CUDA, a child that died).
    Error,
    /// It ran past `probe.timeout` and was killed.
    Timeout,
}

impl RunError {
    pub fn label(self) -> &'static str {
        match self {
            RunError::Error => "error",
            RunError::Timeout => "timeout",
        }
    }
}

/// Runs `gpuwarden probe --json --settings-from-stdin ARGS` with `settings`, one piece of GPU
/// work at a time, killed after `probe.timeout` or at the daemon's stop: what it printed and
/// its exit status, or why there is nothing.
pub(crate) fn run_process(
    args: &[&str],
    settings: &ChildSettings,
    stop: &Stop,
) -> Result<(String, Option<i32>), (RunError, String)> {
    let _work = super::GPU_WORK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let exe = std::env::current_exe()
        .map_err(|e| (RunError::Error, format!("cannot find gpuwarden's own executable: {e}")))?;
    let input =
        serde_json::to_vec(settings).map_err(|e| (RunError::Error, format!("cannot pass the settings on: {e}")))?;
    let mut command = Command::new(exe);
    command
        .args(["probe", "--json", "--settings-from-stdin"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe. A probe must not outlive the daemon (a stop
    // outside systemd, which would otherwise kill the whole cgroup).
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| (RunError::Error, format!("cannot start the probe process: {e}")))?;
    super::sweep::note_own_probe(child.id());
    if let Some(mut stdin) = child.stdin.take() {
        // The child reads all of stdin before it starts; a failed write shows up as its error.
        let _ = stdin.write_all(&input);
    }
    // The report is a few kB: it fits the pipe, so waiting before reading cannot deadlock.
    let deadline = Instant::now() + settings.probe.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if stop.is_stopped() => {
                let _ = child.kill();
                let _ = child.wait();
                // Not a hung probe: a validation it was for stays pending and runs again after
                // the restart, instead of failing until a person clears the GPU.
                return Err((
                    RunError::Error,
                    "the daemon stopped while the probe ran; killed it (it runs again at the next start)".into(),
                ));
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err((
                    RunError::Timeout,
                    format!(
                        "the probe did not finish within probe.timeout ({:?}); killed it",
                        settings.probe.timeout
                    ),
                ));
            }
            Ok(None) => {
                stop.sleep(Duration::from_millis(100));
            }
            Err(e) => return Err((RunError::Error, format!("waiting for the probe process: {e}"))),
        }
    };
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    Ok((stdout, status.code()))
}
