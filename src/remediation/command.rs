//! Runs one remediation step's command the way the probe runs: a child process, here in a
//! process group of its own so that its deadline kills everything it started (a reset script
//! that forks `nvidia-smi`), never through a shell, its output (stdout and stderr together)
//! kept to [`MAX_OUTPUT`] bytes while the rest is read and thrown away so the child never
//! blocks on a full pipe.

use crate::model::remediation::MAX_OUTPUT;
use crate::service::stop::Stop;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How a command ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ran {
    /// None: it exited 0; Some: why it failed (exit status, killed at the deadline, no such
    /// program).
    pub failed: Option<String>,
    /// What it printed, lossily decoded, at most [`MAX_OUTPUT`] bytes.
    pub output: String,
    pub duration: Duration,
}

/// How long the output's reader is waited for after the command's group is gone.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// Runs `words` (the program, then its arguments) until it exits, `timeout` passes (its whole
/// process group is killed) or `stop` fires.
pub(crate) fn run(words: &[String], timeout: Duration, stop: &Stop) -> Ran {
    let started = Instant::now();
    let failed = |why: String| Ran {
        failed: Some(why),
        output: String::new(),
        duration: started.elapsed(),
    };
    let Some((program, args)) = words.split_first() else {
        return failed("the command is empty".into());
    };
    let (reader, writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return failed(format!("cannot make a pipe for its output: {e}")),
    };
    let writer_err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return failed(format!("cannot make a pipe for its output: {e}")),
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_err)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe. The step must not outlive the daemon.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let spawned = command.spawn();
    // Our copies of the pipe's write end go with `command`: the reader sees the end once the
    // child (and whatever it started) closed theirs.
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return failed(format!("cannot start {program:?}: {e}")),
    };
    let output = Arc::new(Mutex::new(Vec::new()));
    let kept = output.clone();
    let (read_all, reader_done) = std::sync::mpsc::channel::<()>();
    // A thread of its own: a grandchild that keeps the pipe open cannot hold up the step.
    let _ = std::thread::Builder::new()
        .name("remediation-output".into())
        .spawn(move || {
            read_bounded(reader, &kept);
            let _ = read_all.send(());
        });
    let failure = wait(&mut child, started + timeout, timeout, stop);
    // Whatever it started and left behind goes with it.
    kill_group(child.id());
    // The reader sees the pipe's end as soon as the group is gone and takes what is left in
    // it; something outside the group still holding the pipe (a daemon the command started
    // in a session of its own) is not waited for past OUTPUT_GRACE.
    let _ = reader_done.recv_timeout(OUTPUT_GRACE);
    let bytes = output.lock().unwrap_or_else(PoisonError::into_inner).clone();
    // Lines kept, every other control character (a terminal escape) replaced.
    let text = crate::input::printable_lines(&String::from_utf8_lossy(&bytes));
    Ran {
        failed: failure,
        output: crate::model::remediation::bounded_output(&text),
        duration: started.elapsed(),
    }
}

/// Waits for `child` until it exits or `deadline` passes or `stop` fires (then its group is
/// killed): None when it exited 0, else why it failed.
fn wait(child: &mut std::process::Child, deadline: Instant, timeout: Duration, stop: &Stop) -> Option<String> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return None,
            Ok(Some(status)) => {
                return Some(match status.code() {
                    Some(code) => format!("exit status {code}"),
                    None => "killed by a signal".to_string(),
                });
            }
            Ok(None) if Instant::now() >= deadline || stop.is_stopped() => {
                kill_group(child.id());
                let _ = child.wait();
                return Some(if stop.is_stopped() {
                    "the daemon stopped; killed it".to_string()
                } else {
                    format!("did not finish within remediation.timeout ({timeout:?}); killed it")
                });
            }
            Ok(None) => {
                stop.sleep(Duration::from_millis(50));
            }
            Err(e) => return Some(format!("waiting for it failed: {e}")),
        }
    }
}

/// Keeps the first [`MAX_OUTPUT`] bytes (and a few more, so the cut is seen) and reads on to
/// the end.
fn read_bounded(mut reader: impl Read, kept: &Mutex<Vec<u8>>) {
    let mut buffer = [0u8; 4096];
    loop {
        match reader.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                let room = (MAX_OUTPUT + 64).saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
    }
}

fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: a plain signal to the child's own process group (process_group(0) made its
        // pid the group's id); a group that is gone answers ESRCH, harmlessly.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::stop::Shutdown;

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn exit_and_output_are_kept() {
        let shutdown = Shutdown::new();
        let stop = shutdown.handle("test");
        let ok = run(&sh("echo resetting; echo done >&2"), Duration::from_secs(10), &stop);
        assert_eq!(ok.failed, None);
        assert!(
            ok.output.contains("resetting") && ok.output.contains("done"),
            "{:?}",
            ok.output
        );
        let bad = run(&sh("echo 'GPU is in use'; exit 3"), Duration::from_secs(10), &stop);
        assert_eq!(bad.failed.as_deref(), Some("exit status 3"));
        assert!(bad.output.contains("in use"));
        let missing = run(&["/nonexistent/gpu-reset".to_string()], Duration::from_secs(10), &stop);
        assert!(missing.failed.unwrap().starts_with("cannot start"), "no such program");
    }

    #[test]
    fn the_deadline_kills_the_whole_group_and_output_is_bounded() {
        let shutdown = Shutdown::new();
        let stop = shutdown.handle("test");
        let marker = std::env::temp_dir().join(format!("gpuwarden-grandchild-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        // A grandchild that would write the marker after the deadline, had it survived.
        let script = format!(
            "(sleep 2; touch {}) & head -c 100000 /dev/zero | tr '\\0' x; sleep 30",
            marker.display()
        );
        let started = Instant::now();
        let hung = run(&sh(&script), Duration::from_millis(500), &stop);
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(hung.failed.unwrap().contains("did not finish within"));
        assert!(hung.output.len() <= MAX_OUTPUT + 40, "{}", hung.output.len());
        assert!(hung.output.ends_with("bytes cut]"), "said it was cut");
        std::thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "the grandchild was killed with its group");
    }

    #[test]
    fn the_last_output_is_kept_and_a_process_outside_the_group_holding_the_pipe_is_not_waited_for() {
        let shutdown = Shutdown::new();
        let stop = shutdown.handle("test");
        // 3 KiB written right before the exit: all of it is read before the result is made.
        let burst = run(
            &sh("head -c 3000 /dev/zero | tr '\\0' y; echo; echo last line"),
            Duration::from_secs(10),
            &stop,
        );
        assert_eq!(burst.failed, None);
        assert!(
            burst.output.ends_with("last line"),
            "{:?}",
            &burst.output[burst.output.len().saturating_sub(40)..]
        );
        // A daemon started in a session of its own keeps the pipe open for 5 s after the
        // command exits; the step ends after the grace, with what was written.
        let started = Instant::now();
        let escaped = run(&sh("setsid sleep 5 & echo started it"), Duration::from_secs(10), &stop);
        let took = started.elapsed();
        assert_eq!(escaped.failed, None);
        assert!(escaped.output.contains("started it"), "{:?}", escaped.output);
        assert!(
            took < Duration::from_secs(3),
            "waited {took:?} for a pipe held outside the group"
        );
    }
}
