//! The shipped unit under a real systemd, with its whole sandbox: systemd boots as PID 1 of a
//! private PID and mount namespace (fresh /tmp and /run, so its boot-time clean-up touches
//! nothing of the machine's), the unit and a drop-in go into its /run/systemd/system, and the
//! daemon runs over the simulated NVML and CUDA libraries. One boot, several steps: start
//! until READY and the STATUS text, an XID in the real journal with its fields, reload (good
//! and bad), stop with exit 0, a watchdog restart when the poll loop hangs, a bad config
//! exiting 78 without a restart loop, and a scheduled probe child inside the sandbox.
//!
//! Needs root (CI runs as root): as another user it runs the namespace through `sudo -n`.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// systemd as PID 1 of a namespace of its own; stopped when dropped.
struct Systemd {
    unshare: Child,
    /// systemd's PID as the machine sees it, for nsenter and signals.
    pid: u32,
}

impl Systemd {
    fn boot(dir: &Path) -> Systemd {
        // Outside /tmp: the namespace mounts a fresh /tmp over it.
        let script = dir.join("boot.sh");
        std::fs::write(
            &script,
            // The journal too: its files stay in the namespace, not in the machine's
            // /var/log/journal.
            "#!/bin/sh\nmount -t tmpfs tmpfs /tmp\nmount -t tmpfs tmpfs /run\nmount -t proc proc /proc\n\
             mkdir -p /var/log/journal && mount -t tmpfs tmpfs /var/log/journal\n\
             exec /usr/lib/systemd/systemd --system --unit=basic.target\n",
        )
        .unwrap();
        let unshare = as_root("unshare")
            .args(["--pid", "--fork", "--mount", "--propagation", "private", "sh"])
            .arg(&script)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare (util-linux)");
        let deadline = Instant::now() + Duration::from_secs(30);
        // Down the process tree (sudo, then unshare, then the script that execs systemd) to
        // systemd itself: nsenter needs a process inside the new PID namespace.
        let pid = loop {
            let mut pid = unshare.id();
            let mut found = None;
            for _ in 0..4 {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if comm.trim() == "systemd" {
                    found = Some(pid);
                    break;
                }
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
                match children.split_whitespace().next().and_then(|p| p.parse().ok()) {
                    Some(child) => pid = child,
                    None => break,
                }
            }
            if let Some(pid) = found {
                break pid;
            }
            assert!(
                Instant::now() < deadline,
                "systemd did not start; run the tests as root (or with passwordless sudo)"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let systemd = Systemd { unshare, pid };
        loop {
            let state = systemd.run("systemctl", &["is-system-running"]);
            if state.contains("running") || state.contains("degraded") {
                break;
            }
            assert!(Instant::now() < deadline, "systemd never finished booting: {state}");
            std::thread::sleep(Duration::from_millis(200));
        }
        systemd
    }

    /// Runs a command inside the namespace; its stdout and stderr.
    fn run(&self, program: &str, args: &[&str]) -> String {
        let out = as_root("nsenter")
            .args(["-t", &self.pid.to_string(), "-m", "-p", program])
            .args(args)
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    fn shell(&self, script: &str) -> String {
        self.run("sh", &["-c", script])
    }

    fn show(&self, property: &str) -> String {
        self.run("systemctl", &["show", "-P", property, "gpuwarden.service"])
            .trim()
            .to_string()
    }

    fn wait_for(&self, what: &str, within: Duration, check: impl Fn(&Systemd) -> bool) {
        until_ok(what, within, || match check(self) {
            true => Ok(()),
            false => Err(format!(
                "state {} ({}), status {:?}; journal:\n{}",
                self.show("ActiveState"),
                self.show("Result"),
                self.show("StatusText"),
                self.run("journalctl", &["-u", "gpuwarden", "--no-pager", "-n", "40"])
            )),
        });
    }
}

impl Drop for Systemd {
    fn drop(&mut self) {
        // SIGRTMIN+4: systemd's "halt" for a container.
        let _ = as_root("kill")
            .args(["-s", "SIGRTMIN+4", &self.pid.to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.unshare.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.unshare.kill();
    }
}

/// Writes `text` to `path` inside the namespace (its /run is its own).
fn put(systemd: &Systemd, path: &str, text: &str) {
    let staged = std::env::temp_dir().join(format!("gpuwarden-systemd-{}", std::process::id()));
    std::fs::write(&staged, text).unwrap();
    // /tmp is the namespace's own too: pass the text on stdin instead.
    let out = as_root("nsenter")
        .args(["-t", &systemd.pid.to_string(), "-m", "-p", "sh", "-c"])
        // Written beside and renamed: the service may start (a watchdog restart) while the
        // file is being written, and a half-written scenario is a machine with no GPU.
        .arg(format!(
            "mkdir -p $(dirname {path}) && cat > {path}.part && mv {path}.part {path}"
        ))
        .stdin(std::fs::File::open(&staged).unwrap())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&staged);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Copies a file of this machine (the binary, a simulated library) into the namespace's own
/// /run, executable. What the unit runs must live there: the unit's sandbox hides /home and
/// /root (ProtectHome) and gives it a /tmp of its own (PrivateTmp), and the namespace mounts
/// a fresh /tmp, so a checkout under any of them could not be run from where cargo built it.
fn stage(systemd: &Systemd, from: &Path, to: &str) -> PathBuf {
    let out = as_root("nsenter")
        .args(["-t", &systemd.pid.to_string(), "-m", "-p", "sh", "-c"])
        .arg(format!("mkdir -p $(dirname {to}) && cat > {to} && chmod 755 {to}"))
        .stdin(std::fs::File::open(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "staging {}: {}",
        from.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(to)
}

#[test]
fn the_shipped_unit_under_a_real_systemd() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let systemd = Systemd::boot(dir.path());
    let port = free_port();
    let binary = stage(&systemd, Path::new(BIN), "/run/gpuwarden-test/bin/gpuwarden");
    let nvml = stage(
        &systemd,
        &sim_library(),
        "/run/gpuwarden-test/lib/libgpuwarden_sim_nvml.so",
    );
    // One simulated CUDA library under every name, as links: one file loaded once, so the
    // driver and cuBLAS share its state.
    let host_cuda = sim_cuda_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), true);
    stage(
        &systemd,
        &host_cuda.join("libcuda.so"),
        "/run/gpuwarden-test/cuda/libsim_cuda.so",
    );
    systemd.shell(
        "cd /run/gpuwarden-test/cuda && for n in libcuda.so libcuda.so.1 libcublas.so libcublas.so.13; do \
         ln -sf libsim_cuda.so $n; done",
    );
    let cuda = PathBuf::from("/run/gpuwarden-test/cuda");
    let config = format!(
        "listen: 127.0.0.1:{port}\npoll:\n  interval: 200ms\n  timeout: 150ms\n  slow_interval: 200ms\n\
         nvml:\n  library_path: {}\n  retry_initial: 200ms\n  retry_max: 1s\n\
         xid:\n  kernel_log_path: /run/gpuwarden-test/kmsg\n{FAST_PROBES}",
        nvml.display()
    );
    put(&systemd, "/run/gpuwarden-test/config.yaml", &config);
    put(&systemd, "/run/gpuwarden-test/scenario.yaml", &with_cuda(DEMO_SCENARIO));
    put(&systemd, "/run/gpuwarden-test/kmsg", "");
    // The journal's state directory on a tmpfs of this namespace's own, so no state.db is
    // left on the machine (an empty directory is); systemd sets it up (StateDirectory=).
    systemd.shell("mkdir -p /var/lib/gpuwarden && mount -t tmpfs -o mode=0700 tmpfs /var/lib/gpuwarden");
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/gpuwarden.service")).unwrap();
    put(&systemd, "/run/systemd/system/gpuwarden.service", &unit);
    // Only what a test needs differs from the shipped unit: the binary, its config, the
    // simulated libraries, and a short watchdog so its restart comes within the test.
    put(
        &systemd,
        "/run/systemd/system/gpuwarden.service.d/test.conf",
        &format!(
            "[Service]\nExecStart=\nExecStart={} run --config /run/gpuwarden-test/config.yaml\n\
             Environment=GPUWARDEN_SIM_NVML_SCENARIO=/run/gpuwarden-test/scenario.yaml\n\
             Environment=LD_LIBRARY_PATH={}\nWatchdogSec=3s\n",
            binary.display(),
            cuda.display()
        ),
    );
    systemd.run("systemctl", &["daemon-reload"]);

    // Start: `systemctl start` returns once READY=1 came (Type=notify).
    let out = systemd.run("systemctl", &["start", "gpuwarden.service"]);
    assert_eq!(systemd.show("ActiveState"), "active", "{out}");
    systemd.wait_for("the health summary in STATUS", Duration::from_secs(10), |s| {
        s.show("StatusText").starts_with("8 GPU(s): 0 unhealthy,")
    });
    let m = Metrics::parse(&http_get(&format!("127.0.0.1:{port}"), "/metrics", &[]).text());
    assert_eq!(m.find("gpu_up", &[]).len(), 8);

    // A scheduled probe child runs inside the sandbox (MemoryDenyWriteExecute, the system
    // call filter) over the simulated CUDA driver, and passes.
    until_ok("a probe passed under systemd", Duration::from_secs(60), || {
        let m = Metrics::parse(&http_get(&format!("127.0.0.1:{port}"), "/metrics", &[]).text());
        let passed = m
            .find("gpu_probe_runs_total", &[("result", "pass")])
            .iter()
            .any(|s| s.value >= 1.0);
        passed.then_some(()).ok_or(m.text)
    });

    // The local API: systemd made /run/gpuwarden (RuntimeDirectory=), the daemon's socket is
    // there, and `gpuwarden health` (root, as Slurm's health check runs) gets its verdict.
    let health = systemd.shell(&format!("{} health; echo exit=$?", binary.display()));
    let first = health.lines().next().unwrap_or_default();
    assert!(
        health.contains("exit=0") && (first.starts_with("ok: 8 GPU(s)") || first.starts_with("degraded: 8 GPU(s)")),
        "{health}"
    );
    assert!(
        systemd.shell("stat -c %a /run/gpuwarden/gpuwarden.sock").trim() == "600",
        "the socket is root's only"
    );

    // An XID reaches the real journal with the fields to filter on.
    systemd
        .shell("echo '[  700.000001] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception' >> /run/gpuwarden-test/kmsg");
    systemd.wait_for("the XID in the journal", Duration::from_secs(10), |s| {
        s.run("journalctl", &["-u", "gpuwarden", "XID=13", "-o", "json", "--no-pager"])
            .contains("\"PCI_BUS_ID\":\"0000:3b:00.0\"")
    });
    // The health journal: written to the state directory systemd made, through the sandbox
    // (ProtectSystem=strict), and readable with `gpuwarden events` while the daemon runs.
    systemd.wait_for("the XID in the health journal", Duration::from_secs(10), |s| {
        s.shell(&format!(
            "{} events --state /var/lib/gpuwarden/state.db --kind xid 2>&1",
            binary.display()
        ))
        .contains("Xid 13")
    });
    assert_eq!(
        systemd.shell("stat -c '%a %U' /var/lib/gpuwarden").trim(),
        "750 root",
        "StateDirectory= made it"
    );
    let m = Metrics::parse(&http_get(&format!("127.0.0.1:{port}"), "/metrics", &[]).text());
    assert_eq!(m.value("gpuwarden_journal_up", &[]), Some(1.0), "{}", m.text);
    let persistence = systemd.run(
        "journalctl",
        &[
            "-u",
            "gpuwarden",
            "GPU_UUID=GPU-5f2c7a1e-0000-4d6b-9a0c-000000000004",
            "--no-pager",
        ],
    );
    assert!(
        persistence.contains("persistence mode was off on GPU 4"),
        "{persistence}"
    );

    // Reload: a good config applies, a bad one is refused and the service stays up.
    systemd
        .shell("sed -i 's/critical_hold: .*//; s/^xid:/xid:\\n  critical_hold: 2h/' /run/gpuwarden-test/config.yaml");
    systemd.run("systemctl", &["reload", "gpuwarden.service"]);
    systemd.wait_for("the reload", Duration::from_secs(10), |s| {
        s.run("journalctl", &["-u", "gpuwarden", "--no-pager"])
            .contains("reloaded the config")
    });
    systemd.shell("echo 'poll: {intervall: 1s}' >> /run/gpuwarden-test/config.yaml");
    systemd.run("systemctl", &["reload", "gpuwarden.service"]);
    systemd.wait_for("the refused reload", Duration::from_secs(10), |s| {
        s.run("journalctl", &["-u", "gpuwarden", "--no-pager"])
            .contains("reload refused")
    });
    assert_eq!(systemd.show("ActiveState"), "active");
    systemd.shell("sed -i '/intervall/d' /run/gpuwarden-test/config.yaml");

    // The poll loop hangs (the driver goes away and nvmlInit blocks): the watchdog pings stop
    // and systemd restarts the service; with the driver back it comes up again.
    let restarts: u32 = systemd.show("NRestarts").parse().unwrap();
    put(
        &systemd,
        "/run/gpuwarden-test/scenario.yaml",
        &format!("uninitialized: true\ninit_hang: 600\n{}", with_cuda(DEMO_SCENARIO)),
    );
    systemd.wait_for("a watchdog restart", Duration::from_secs(30), |s| {
        s.show("NRestarts").parse::<u32>().unwrap_or(0) > restarts
    });
    let journal = systemd.run("journalctl", &["-u", "gpuwarden", "--no-pager"]);
    assert!(journal.contains("Watchdog timeout"), "{journal}");
    put(&systemd, "/run/gpuwarden-test/scenario.yaml", &with_cuda(DEMO_SCENARIO));
    systemd.wait_for("the service back", Duration::from_secs(30), |s| {
        s.show("ActiveState") == "active" && s.show("StatusText").starts_with("8 GPU(s)")
    });

    // Stop: exit 0.
    systemd.run("systemctl", &["stop", "gpuwarden.service"]);
    assert_eq!(systemd.show("ExecMainStatus"), "0");
    assert_eq!(systemd.show("Result"), "success");

    // A bad config: exit 78 and no restart loop (RestartPreventExitStatus).
    systemd.shell("echo 'poll: {intervall: 1s}' >> /run/gpuwarden-test/config.yaml");
    let restarts: u32 = systemd.show("NRestarts").parse().unwrap();
    systemd.run("systemctl", &["start", "gpuwarden.service"]);
    systemd.wait_for("the failed start", Duration::from_secs(10), |s| {
        s.show("ActiveState") == "failed"
    });
    assert_eq!(systemd.show("ExecMainStatus"), "78");
    // RestartSec is 5s: a loop would have restarted it by now.
    std::thread::sleep(Duration::from_secs(7));
    assert_eq!(systemd.show("NRestarts").parse::<u32>().unwrap(), restarts);
    assert_eq!(systemd.show("ActiveState"), "failed");
}
