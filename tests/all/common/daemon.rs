//! `Daemon`: the real `gpuwarden run` over the simulated NVML library. `Daemon::start` writes
//! a scenario file and a config into a temporary directory, starts the daemon on port 0 and
//! reads the bound address from its log. `set_scenario` rewrites the scenario by rename, so
//! the simulated library never reads half a file.

use super::{BIN, Metrics, Response, http_get, sim_library};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Daemon {
    pub child: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Config for a test daemon: fast polls, the simulated library, loopback port 0, and a
/// kernel log of its own (`@KMSG@` becomes the file `kmsg` in the daemon's directory), and
/// a journal of its own (`@STATE@`: `state.db` there, with the boot id in `boot_id`) unless
/// `extra` sets `state`. `extra` holds further top-level sections.
pub fn test_config(library: &Path, extra: &str) -> String {
    let state = if extra.contains("state:") { "" } else { STATE_SECTION };
    // The simulated fabric has no nvidia-fabricmanager; the tests that look for one say where.
    let fabric_manager = if extra.contains("fabric_manager:") {
        ""
    } else {
        "fabric_manager:\n  check: false\n"
    };
    format!(
        "listen: 127.0.0.1:0\npoll:\n  interval: 200ms\n  timeout: 150ms\n  slow_interval: 200ms\n  topology_interval: 200ms\n  gpm_interval: 200ms\nnvml:\n  library_path: {}\n  retry_initial: 200ms\n  retry_max: 1s\n\
         {fabric_manager}{state}xid:\n  kernel_log_path: \"@KMSG@\"\n  dedup_window: 2s\n{extra}",
        library.display()
    )
}

/// A test daemon's own journal: `state.db` and `boot_id` in its directory.
const STATE_SECTION: &str = "state:\n  path: \"@STATE@\"\n  boot_id_file: \"@BOOT@\"\n";

/// A test daemon's own local API socket (`gpuwarden.sock` in its directory), first in the
/// file so that tests that append to the last section still do. Never the machine's
/// /run/gpuwarden: one test would answer for another.
fn with_own_socket(config: &str, dir: &std::path::Path) -> String {
    if config.contains("local_api:") {
        return config.to_string();
    }
    format!(
        "local_api:\n  socket: \"{}\"\n{config}",
        dir.join("gpuwarden.sock").display()
    )
}

/// The boot id a test daemon reads until [`Daemon::reboot`].
pub const TEST_BOOT_ID: &str = "0e5c1a2b-0000-4000-8000-000000000001";

impl Daemon {
    pub fn start(scenario: &str) -> Daemon {
        Daemon::start_with(scenario, &test_config(&sim_library(), ""))
    }

    pub fn start_with(scenario: &str, config: &str) -> Daemon {
        Daemon::start_with_kernel_log(scenario, config, "")
    }

    /// Starts with `kernel_log` already in the kernel log, as records logged before boot
    /// finished or before the daemon started.
    pub fn start_with_kernel_log(scenario: &str, config: &str, kernel_log: &str) -> Daemon {
        Daemon::start_full(scenario, config, kernel_log, &[])
    }

    /// The general form: also sets environment variables (NOTIFY_SOCKET, WATCHDOG_USEC, ...).
    pub fn start_full(scenario: &str, config: &str, kernel_log: &str, env: &[(&str, String)]) -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("scenario.yaml"), scenario).expect("write scenario");
        let kmsg = dir.path().join("kmsg");
        std::fs::write(&kmsg, dmesg_stamped(kernel_log)).expect("write kernel log");
        std::fs::write(dir.path().join("boot_id"), format!("{TEST_BOOT_ID}\n")).expect("write boot id");
        // Never the machine's /var/lib/gpuwarden: a journal shared between tests would carry
        // one test's XIDs into another.
        let config = if config.contains("state:") {
            config.to_string()
        } else {
            format!("{config}{STATE_SECTION}")
        };
        let config = with_own_socket(&config, dir.path());
        let config = config
            .replace("@KMSG@", &kmsg.display().to_string())
            .replace("@STATE@", &dir.path().join("state.db").display().to_string())
            .replace("@BOOT@", &dir.path().join("boot_id").display().to_string());
        std::fs::write(dir.path().join("config.yaml"), config).expect("write config");
        // Kept beside the config, so that a restart starts with the same environment.
        let env_file: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(dir.path().join("env"), env_file).expect("write env");
        Daemon::spawn(Daemon::command_in(dir.path()), dir)
    }

    /// Starts the daemon in a private mount namespace where `setup` (a shell script, run as
    /// root; `$STATE` is the directory of the daemon's journal) ran first: a small or
    /// read-only file system for the journal. The daemon keeps the pid (`exec`).
    pub fn start_in_private_mounts(scenario: &str, setup: &str) -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let state_dir = dir.path().join("state");
        std::fs::create_dir(&state_dir).expect("state dir");
        std::fs::write(dir.path().join("scenario.yaml"), scenario).expect("write scenario");
        std::fs::write(dir.path().join("kmsg"), "").expect("write kernel log");
        std::fs::write(dir.path().join("boot_id"), format!("{TEST_BOOT_ID}\n")).expect("write boot id");
        let config = with_own_socket(&test_config(&sim_library(), ""), dir.path())
            .replace("@KMSG@", &dir.path().join("kmsg").display().to_string())
            .replace("@STATE@", &state_dir.join("state.db").display().to_string())
            .replace("@BOOT@", &dir.path().join("boot_id").display().to_string());
        std::fs::write(dir.path().join("config.yaml"), config).expect("write config");
        let mut command = super::as_root("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "{setup}\nexec {BIN} run --config {}",
                dir.path().join("config.yaml").display()
            ))
            .env("STATE", &state_dir)
            .env("GPUWARDEN_SIM_NVML_SCENARIO", dir.path().join("scenario.yaml"));
        Daemon::spawn(command, dir)
    }

    /// Runs `script` (as root) in the daemon's mount namespace.
    pub fn in_mount_namespace(&self, script: &str) {
        let out = super::as_root("nsenter")
            .args(["-t", &self.child.id().to_string(), "-m", "sh", "-c", script])
            .output()
            .expect("nsenter");
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn command_in(dir: &Path) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(["run", "--config"])
            .arg(dir.join("config.yaml"))
            .env("GPUWARDEN_SIM_NVML_SCENARIO", dir.join("scenario.yaml"));
        let env = std::fs::read_to_string(dir.join("env")).unwrap_or_default();
        command.envs(env.lines().filter_map(|line| line.split_once('=')));
        command
    }

    /// `gpuwarden health [--json]` against this daemon: exit code and stdout.
    pub fn health(&self, json: bool) -> (i32, String) {
        let mut command = Command::new(BIN);
        command.arg("health").arg("--socket").arg(self.socket_path());
        if json {
            command.arg("--json");
        }
        let out = command.output().expect("run gpuwarden health");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    }

    /// `gpuwarden health clear --gpu GPU --reason REASON [EXTRA]` against this daemon: exit
    /// code, stdout and stderr.
    pub fn clear(&self, gpu: &str, reason: &str, extra: &[&str]) -> (i32, String, String) {
        let out = Command::new(BIN)
            .args(["health", "clear", "--gpu", gpu, "--reason", reason, "--socket"])
            .arg(self.socket_path())
            .args(extra)
            .output()
            .expect("run gpuwarden health clear");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// This daemon's local API socket.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.path().join("gpuwarden.sock")
    }

    /// The journal this daemon writes (`state.db` in its directory, or in `state/` there
    /// for [`Daemon::start_in_private_mounts`]).
    pub fn state_path(&self) -> PathBuf {
        let own_mount = self.dir.path().join("state");
        if own_mount.is_dir() {
            own_mount.join("state.db")
        } else {
            self.dir.path().join("state.db")
        }
    }

    /// Stops the daemon (`kill -9` when `kill`, else SIGTERM), replaces its kernel log with
    /// `kernel_log` when given (the ring buffer after the restart), and starts it again over
    /// the same directory: config, scenario and journal.
    pub fn restart(mut self, kill: bool, kernel_log: Option<&str>) -> Daemon {
        if kill {
            let _ = self.child.kill();
        } else {
            self.signal(15);
        }
        let _ = self.child.wait();
        if let Some(text) = kernel_log {
            std::fs::write(self.dir.path().join("kmsg"), dmesg_stamped(text)).expect("write kernel log");
        }
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        Daemon::spawn(Daemon::command_in(dir.path()), dir)
    }

    /// What the Slurm health check reports of a node it drained and that has no job left
    /// (`gpuwarden health scheduler-report --node gpuwarden --jobs 0`): the scheduler guard's evidence.
    pub fn report_drained_with_no_job(&self) {
        let out = Command::new(BIN)
            .args([
                "health",
                "scheduler-report",
                "--node",
                "gpuwarden",
                "--jobs",
                "0",
                "--socket",
            ])
            .arg(self.socket_path())
            .output()
            .expect("run gpuwarden health scheduler-report");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    /// A new boot id for the next start, as after a reboot.
    pub fn reboot(&self) {
        std::fs::write(
            self.dir.path().join("boot_id"),
            "0e5c1a2b-0000-4000-8000-000000000002\n",
        )
        .expect("write boot id");
    }

    /// `gpuwarden ARGS` as it is (the demo, say), with a directory of its own.
    pub fn spawn_command(args: &[&str]) -> Daemon {
        let mut command = Command::new(BIN);
        command.args(args);
        Daemon::spawn(command, tempfile::tempdir().expect("temp dir"))
    }

    /// `gpuwarden ARGS` with `env` set (TMPDIR for a demo of its own).
    pub fn spawn_command_with_env(args: &[&str], env: &[(&str, &Path)]) -> Daemon {
        let mut command = Command::new(BIN);
        command.args(args);
        for (key, value) in env {
            command.env(key, value);
        }
        Daemon::spawn(command, tempfile::tempdir().expect("temp dir"))
    }

    /// `PROGRAM ARGS`: a copy of the gpuwarden binary somewhere else (the demo's layouts).
    pub fn spawn_program(program: &Path, args: &[&str]) -> Daemon {
        let mut command = Command::new(program);
        command.args(args);
        Daemon::spawn(command, tempfile::tempdir().expect("temp dir"))
    }

    /// Starts `command` and waits until it serves.
    fn spawn(mut command: Command, dir: tempfile::TempDir) -> Daemon {
        let mut child = command
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpuwarden");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Some(addr) = log.lock().unwrap().iter().find_map(|l| {
                l.split("serving metrics on ")
                    .nth(1)
                    .map(|rest| rest.trim_start_matches("https://").trim_start_matches("http://"))
                    .map(|rest| rest.split('/').next().unwrap_or("").to_string())
            }) {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "gpuwarden exited with {status} before serving; log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "gpuwarden did not start; log:\n{}",
                log.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon { child, addr, dir, log }
    }

    /// Appends lines to the daemon's kernel log, as the kernel would.
    pub fn log_kernel(&self, lines: &str) {
        self.log_kernel_raw(&dmesg_stamped(lines));
    }

    /// Appends `lines` to the kernel log as they are: for the tests of the formats themselves.
    pub fn log_kernel_raw(&self, lines: &str) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("kmsg"))
            .expect("open kmsg");
        f.write_all(lines.as_bytes()).expect("append kmsg");
    }

    /// Rewrites the scenario atomically; the simulated library picks it up on its next call.
    pub fn set_scenario(&self, scenario: &str) {
        let tmp = self.dir.path().join("scenario.yaml.tmp");
        std::fs::write(&tmp, scenario).expect("write scenario");
        std::fs::rename(&tmp, self.dir.path().join("scenario.yaml")).expect("rename scenario");
    }

    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http_get(&self.addr, path, headers)
    }

    pub fn scrape(&self) -> Metrics {
        let response = self.get("/metrics", &[]);
        assert_eq!(response.status, 200, "{}", response.text());
        Metrics::parse(&response.text())
    }

    /// Scrapes until `check` holds, or fails after a few seconds with the last scrape.
    pub fn scrape_until(&self, what: &str, check: impl Fn(&Metrics) -> bool) -> Metrics {
        self.scrape_until_within(what, Duration::from_secs(10), check)
    }

    /// As `scrape_until`, for what takes longer on a loaded machine (a series of probes).
    pub fn scrape_until_within(&self, what: &str, within: Duration, check: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = Instant::now() + within;
        loop {
            let m = self.scrape();
            if check(&m) {
                return m;
            }
            if Instant::now() >= deadline {
                let log = self.log_text();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "timed out waiting for {what}; last scrape:\n{}\nthe daemon's log, last lines:\n{}",
                    m.text,
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits until `text` appears in the log at least `times` times, or fails after `within`
    /// with the log.
    pub fn wait_for_log(&self, text: &str, times: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.log_text().matches(text).count() < times {
            assert!(
                Instant::now() < deadline,
                "{text:?} not logged {times} time(s):\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) with our own child's pid; no memory is involved.
        unsafe { libc_kill(self.child.id() as i32, signal) };
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    /// Sends SIGTERM and returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.signal(15);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How long a test daemon has to stop on SIGTERM before it is killed: its own stop takes
/// well under this (docs/architecture.md), a hung test double may not.
const STOP_DEADLINE: Duration = Duration::from_secs(5);

impl Drop for Daemon {
    /// SIGTERM, as systemd stops it, so it removes what it made (a demo's directory under
    /// /tmp, its socket); SIGKILL only after [`STOP_DEADLINE`].
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        self.signal(15);
        let deadline = Instant::now() + STOP_DEADLINE;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

pub const SIGHUP: i32 = 1;

/// Rewrites the daemon's config with `edit` applied, sends SIGHUP, and waits for the log to
/// say the reload was taken.
pub fn reload(d: &Daemon, edit: impl Fn(&str) -> String) {
    let config = std::fs::read_to_string(d.config_path()).unwrap();
    let edited = edit(&config);
    assert_ne!(config, edited, "the edit changed nothing");
    std::fs::write(d.config_path(), edited).unwrap();
    let reloads = d.log_text().matches("reloaded the config").count();
    d.signal(SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.log_text().matches("reloaded the config").count() == reloads {
        assert!(Instant::now() < deadline, "no reload; log:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Automatic remediation's config for the tests (`remediation.mode: auto`): `reset_command`,
/// persistence handled around it by commands that only say so, the marker and the pause file
/// under `dir`, and a policy that makes Xid 94 fatal.
pub fn auto_remediation(dir: &Path, reset_command: &str) -> String {
    format!(
        "remediation:\n  mode: auto\n  reset_command: \"{reset_command}\"\n  \
         persistence_off_command: \"/bin/echo persistence off for {{pci_bus_id}}\"\n  \
         persistence_on_command: \"/bin/echo persistence on for {{pci_bus_id}}\"\n  timeout: 10s\n  \
         reboot_marker: {d}/reboot-required\n  pause_file: {d}/pause\n\
         health:\n  xid_severity: {{94: fatal}}\n",
        d = dir.display()
    )
}

/// The fake GPU reset over the simulated NVML (tests/fixtures/fake-gpu-reset.sh), as a
/// `remediation.reset_command`.
pub fn fake_reset_command() -> String {
    format!(
        "{}/tests/fixtures/fake-gpu-reset.sh {{pci_bus_id}}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `gpuwarden ARGS... --json --state STATE` as JSON; the command must succeed. A journal the
/// daemon has made but not yet given its tables (its first moments) is waited for, 10 s at most.
pub fn gpuwarden_json(args: &[&str], state: &Path) -> serde_json::Value {
    let out = super::until_ok(&format!("gpuwarden {args:?}"), Duration::from_secs(10), || {
        let out = Command::new(BIN)
            .args(args)
            .args(["--json", "--state"])
            .arg(state)
            .output()
            .unwrap_or_else(|e| panic!("run gpuwarden {args:?}: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        match out.status.success() || !stderr.contains("holds no journal yet") {
            true => Ok(out),
            false => Err(stderr),
        }
    });
    assert!(
        out.status.success(),
        "gpuwarden {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("gpuwarden {args:?} --json is not JSON: {e}"))
}

/// `gpuwarden events ARGS... --json --state STATE` as JSON; the command must succeed.
pub fn events_json(state: &Path, args: &[&str]) -> serde_json::Value {
    // Every row: the tests look at the baselines too (`events` leaves them out by default).
    gpuwarden_json(&[&["events", "--all"], args].concat(), state)
}

/// `lines` as `dmesg` prints them: a driver line written bare (`NVRM: Xid ...`, as the tests
/// write them) gets the kernel's `[seconds.micros]` stamp, which marks where its record starts
/// (a bare line is `dmesg -t`'s, which gpuwarden does not read: xid/parse.rs). Each stamp is
/// new, as each record's time is; anything else is kept as it is.
pub fn dmesg_stamped(lines: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT_MICROS: AtomicU64 = AtomicU64::new(100_000_000);
    lines
        .split_inclusive('\n')
        .map(|line| {
            if line.starts_with("NVRM: ") || line.starts_with("nvidia-nvswitch") {
                let micros = NEXT_MICROS.fetch_add(1_000, Ordering::Relaxed);
                format!("[{:>5}.{:06}] {line}", micros / 1_000_000, micros % 1_000_000)
            } else {
                line.to_string()
            }
        })
        .collect()
}

/// `gpuwarden report --gpu GPU --markdown --state STATE`: the GPU's evidence as a person reads it.
pub fn report_markdown(state: &Path, gpu: &str) -> String {
    let out = Command::new(BIN)
        .args(["report", "--gpu", gpu, "--markdown", "--state"])
        .arg(state)
        .output()
        .unwrap_or_else(|e| panic!("run gpuwarden report: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The section `## TITLE` of a Markdown report, up to the next section; None without one.
pub fn report_section(report: &str, title: &str) -> Option<String> {
    let rest = report.split(&format!("\n## {title}\n")).nth(1)?;
    Some(rest.split("\n## ").next().unwrap_or(rest).to_string())
}
