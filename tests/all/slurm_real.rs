//! The shipped prolog and epilog under a real Slurm (Debian's slurm-wlm and munge): one node
//! whose controller, slurmd and munged all run under a temporary directory, with their own
//! ports, a fresh munge key on a private socket (`AuthInfo=socket=`), and two GPUs in
//! gres.conf as character devices made with `mknod c 195 N` (Slurm refuses plain files).
//! The daemon runs over the simulated NVML with `hpc_jobs.mapping_dir` where the prolog
//! writes. What a user checks: a job's id shows on the GPUs Slurm gave it and goes when it is
//! cancelled; array tasks arrive as plain job ids; the prolog runs with no PATH.
//!
//! Needs root (CI runs as root): as another user the daemons run through `sudo -n`. Every
//! process it starts is stopped by its PID when the test ends.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn checked(what: &str, out: std::io::Result<Output>) -> String {
    let out = out.unwrap_or_else(|e| {
        panic!("{what}: {e}; install Debian's slurmctld, slurmd, slurm-client and munge (scripts/ci/test.sh does)")
    });
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// munged, slurmctld and slurmd on one node under `dir`; stopped (by PID) when dropped.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
    /// This machine's node (the others, where a test adds some, have no slurmd).
    host: String,
}

impl Slurm {
    /// Waits until `runs` health checks that began from now on have ended (the wrapper of
    /// `health_checked_slurm_with` notes each run's start and end in `check-runs`): what "the
    /// next checks leave the node as it is" needs, however loaded the machine, and no longer.
    fn health_checks(&self, runs: usize) {
        let from = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let deadline = Instant::now() + Duration::from_secs(60 + 15 * runs as u64);
        loop {
            let noted = std::fs::read_to_string(self.dir.join("check-runs")).unwrap_or_default();
            let began_since = noted
                .lines()
                .filter_map(|line| line.split_whitespace().next()?.parse::<f64>().ok())
                .filter(|started| *started >= from)
                .count();
            if began_since >= runs {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{runs} health check(s) did not run ({began_since} did); slurmd log:\n{}",
                std::fs::read_to_string(self.dir.join("log/slurmd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `extra`: more slurm.conf lines (a health check).
    fn start(dir: &Path, prolog: &Path, epilog: &Path, extra: &str) -> Slurm {
        let d = dir.display();
        let host = checked("hostname", Command::new("hostname").arg("-s").output())
            .trim()
            .to_string();
        for sub in ["dev", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        for gpu in 0..2 {
            let device = dir.join(format!("dev/nvidia{gpu}"));
            checked(
                "mknod",
                as_root("mknod")
                    .arg(&device)
                    .args(["c", "195", &gpu.to_string()])
                    .output(),
            );
        }
        // A fresh key: munge wants 1 KiB of randomness, readable by its owner only.
        let mut key = vec![0u8; 1024];
        {
            use std::io::Read;
            std::fs::File::open("/dev/urandom")
                .unwrap()
                .read_exact(&mut key)
                .unwrap();
        }
        std::fs::write(dir.join("munge.key"), key).unwrap();
        checked(
            "chmod the key",
            Command::new("chmod").arg("400").arg(dir.join("munge.key")).output(),
        );
        // -f: the temporary directory's parents (/tmp) are writable by others.
        checked(
            "munged",
            as_root("munged")
                .arg("-f")
                .arg(format!("--socket={d}/munge.sock"))
                .arg(format!("--key-file={d}/munge.key"))
                .arg(format!("--pid-file={d}/munged.pid"))
                .arg(format!("--log-file={d}/log/munged.log"))
                .arg(format!("--seed-file={d}/munge.seed"))
                .output(),
        );
        let (ctld_port, slurmd_port) = (free_port(), free_port());
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=gwtest\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ctld_port}\n\
                 SlurmdPort={slurmd_port}\nAuthType=auth/munge\nAuthInfo=socket={d}/munge.sock\n\
                 CredType=cred/munge\nSlurmUser=root\nSlurmdUser=root\nStateSaveLocation={d}/state\n\
                 SlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_Core\nGresTypes=gpu\nPrologFlags=Alloc\nProlog={}\nEpilog={}\n\
                 SlurmdParameters=config_overrides\nReturnToService=2\nMpiDefault=none\n\
                 JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n{extra}\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs=2 Gres=gpu:2 State=UNKNOWN\n\
                 PartitionName=debug Nodes=ALL Default=YES MaxTime=10 State=UP\n",
                prolog.display(),
                epilog.display(),
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("gres.conf"),
            format!("Name=gpu File={d}/dev/nvidia0\nName=gpu File={d}/dev/nvidia1\n"),
        )
        .unwrap();
        let slurm = Slurm {
            dir: dir.to_path_buf(),
            conf: conf.clone(),
            host: host.clone(),
        };
        // Both daemonise; -i: no state from an earlier run.
        checked(
            "slurmctld",
            as_root("slurmctld").arg("-f").arg(&conf).arg("-i").output(),
        );
        checked("slurmd", as_root("slurmd").arg("-f").arg(&conf).output());
        until_ok("the node to come up idle", Duration::from_secs(30), || {
            let state = slurm.client("sinfo", &["-h", "-N", "-n", &host, "-o", "%t"]);
            (state.trim() == "idle").then_some(()).ok_or_else(|| {
                let log = std::fs::read_to_string(dir.join("log/slurmd.log")).unwrap_or_default();
                format!("{state}; slurmd log:\n{log}")
            })
        });
        slurm
    }

    /// A client command (sinfo, sbatch, scancel) against this cluster; its stdout.
    fn client(&self, program: &str, args: &[&str]) -> String {
        // Through env(1): sudo would not pass SLURM_CONF on.
        checked(
            program,
            as_root("env")
                .arg(format!("SLURM_CONF={}", self.conf.display()))
                .arg(program)
                .args(args)
                .output(),
        )
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let mut pids = Vec::new();
        for daemon in ["slurmd", "slurmctld", "munged"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join(format!("{daemon}.pid"))) {
                let _ = as_root("kill").arg(pid.trim()).status();
                pids.push(pid.trim().to_string());
            }
        }
        // Gone before the directory is removed under them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|pid| Path::new(&format!("/proc/{pid}")).exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn the_prolog_and_epilog_under_a_real_slurm() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let jobs_dir = dir.join("jobs");
    // Slurm runs the prolog with no environment of ours: a wrapper names the directory, and
    // records what the prolog was given.
    let script = |name: &str, shipped: &str, record: bool| {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\n{}GPUWARDEN_JOB_DIR={} exec /bin/sh {}/deploy/slurm/{shipped}\n",
                if record {
                    format!("env > {}/prolog-env.$SLURM_JOB_ID\n", dir.display())
                } else {
                    String::new()
                },
                jobs_dir.display(),
                env!("CARGO_MANIFEST_DIR")
            ),
        )
        .unwrap();
        checked("chmod", Command::new("chmod").arg("755").arg(&path).output());
        path
    };
    let prolog = script("prolog", "prolog.sh", true);
    let epilog = script("epilog", "epilog.sh", false);
    let slurm = Slurm::start(dir, &prolog, &epilog, "");

    let config = test_config(
        &sim_library(),
        &format!("hpc_jobs:\n  mapping_dir: {}\n", jobs_dir.display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let submit = |args: &[&str]| -> String {
        let out = slurm.client("sbatch", &[&["--parsable", "-o", "/dev/null"], args].concat());
        out.trim().split(';').next().unwrap_or("").to_string()
    };

    // A job with both GPUs: on GPUs 0 and 1 within a few seconds, gone when cancelled.
    let job = submit(&["--gres=gpu:2", "--wrap", "sleep 120"]);
    let m = d.scrape_until_within("the job on its GPUs", Duration::from_secs(30), |m| {
        gpu_jobs(m).len() == 2
    });
    assert_eq!(
        gpu_jobs(&m),
        [("0".to_string(), job.clone()), ("1".to_string(), job.clone())]
    );
    let env = std::fs::read_to_string(dir.join(format!("prolog-env.{job}"))).unwrap();
    assert!(env.contains("SLURM_JOB_GPUS=0,1"), "{env}");
    assert!(
        !env.lines().any(|l| l.starts_with("PATH=")),
        "slurmd gave the prolog a PATH now:\n{env}"
    );
    slurm.client("scancel", &[&job]);
    d.scrape_until_within("the job gone", Duration::from_secs(30), |m| gpu_jobs(m).is_empty());

    // An array of two one-GPU tasks: each task a plain job id of its own, one per GPU.
    let array = submit(&["--array=0-1", "--gres=gpu:1", "--wrap", "sleep 120"]);
    let m = d.scrape_until_within("the array's tasks", Duration::from_secs(30), |m| gpu_jobs(m).len() == 2);
    let ids: Vec<String> = gpu_jobs(&m).into_iter().map(|(_, id)| id).collect();
    assert!(ids.iter().all(|id| id.chars().all(|c| c.is_ascii_digit())), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
    assert!(
        ids.contains(&array),
        "the first task keeps the array's id: {ids:?} / {array}"
    );
    let gpus: Vec<String> = gpu_jobs(&m).into_iter().map(|(gpu, _)| gpu).collect();
    assert_eq!(gpus, ["0", "1"]);
    slurm.client("scancel", &[&array]);
    d.scrape_until_within("the array gone", Duration::from_secs(30), |m| gpu_jobs(m).is_empty());
    // The node was never drained by a prolog failure.
    assert_eq!(slurm.client("sinfo", &["-h", "-o", "%t"]).trim(), "idle");
}

/// The node's state and drain reason as Slurm shows them ("drain gpuwarden: GPU 0 xid_fatal").
/// The node's state and reason as sinfo prints them (`drain gpuwarden: ...`, `idle none`),
/// without the `*` slurmctld adds while slurmd is late to answer its ping: Slurm's view of its
/// own daemon on a loaded machine (three times the cores' load made it `idle* none`), not the
/// drain or resume that gpuwarden's health check decides and these tests look at.
fn node_state(slurm: &Slurm) -> String {
    let out = slurm.client("sinfo", &["-h", "-N", "-n", &slurm.host, "-o", "%t %E"]);
    let out = out.trim();
    match out.split_once(' ') {
        Some((state, reason)) => format!("{} {reason}", state.trim_end_matches('*')),
        None => out.trim_end_matches('*').to_string(),
    }
}

fn wait_for_node(slurm: &Slurm, what: &str, within: Duration, check: impl Fn(&str) -> bool) -> String {
    until_ok(what, within, || {
        let state = node_state(slurm);
        match check(&state) {
            true => Ok(state),
            false => {
                let log = std::fs::read_to_string(slurm.dir.join("log/slurmd.log")).unwrap_or_default();
                Err(format!("the node is {state:?}; slurmd log:\n{log}"))
            }
        }
    })
}

/// A one-node Slurm whose HealthCheckProgram is the shipped healthcheck.sh against `d`, every
/// `interval` seconds.
fn health_checked_slurm(dir: &Path, d: &Daemon, interval: u64) -> Slurm {
    health_checked_slurm_with(dir, d, interval, "", "")
}

/// The same, with `env` exported to the check (`NAME=value ...`) and `nodes` more slurm.conf
/// lines (nodes without a slurmd, for the drain guard to count).
fn health_checked_slurm_with(dir: &Path, d: &Daemon, interval: u64, env: &str, nodes: &str) -> Slurm {
    // slurmd runs the health check with no environment of ours: a wrapper names the daemon's
    // socket and this cluster's slurm.conf for scontrol and sinfo, and gives a PATH where
    // gpuwarden is (installed elsewhere than /usr/bin: found through the PATH it was given).
    // While `break-sinfo` exists, sinfo fails.
    let conf = dir.join("slurm.conf");
    let check = dir.join("healthcheck");
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("gpuwarden")).unwrap();
    std::fs::write(
        bin.join("failing-sinfo"),
        "#!/bin/sh\necho 'sinfo: error: cannot reach slurmctld' >&2\nexit 1\n",
    )
    .unwrap();
    // A controller that hangs: sinfo never answers.
    std::fs::write(bin.join("hanging-sinfo"), "#!/bin/sh\nexec sleep 600\n").unwrap();
    for fake in ["failing-sinfo", "hanging-sinfo"] {
        checked("chmod", Command::new("chmod").arg("755").arg(bin.join(fake)).output());
    }
    std::fs::write(
        &check,
        format!(
            "#!/bin/sh\nexport SLURM_CONF={} GPUWARDEN_SOCKET={} PATH={bin} {env}\n\
             [ -e {dir}/break-sinfo ] && export SINFO={bin}/failing-sinfo\n\
             [ -e {dir}/hang-sinfo ] && export SINFO={bin}/hanging-sinfo GPUWARDEN_SLURM_TIMEOUT=2\n\
             started=$(/bin/date +%s.%N)\n/bin/sh {}/deploy/slurm/healthcheck.sh\n\
             /bin/date +%s.%N >{dir}/check-done\necho \"$started $(/bin/date +%s.%N)\" >>{dir}/check-runs\n",
            conf.display(),
            d.socket_path().display(),
            env!("CARGO_MANIFEST_DIR"),
            dir = dir.display(),
            bin = bin.display(),
        ),
    )
    .unwrap();
    checked("chmod", Command::new("chmod").arg("755").arg(&check).output());
    let noop = dir.join("noop");
    std::fs::write(&noop, "#!/bin/sh\nexit 0\n").unwrap();
    checked("chmod", Command::new("chmod").arg("755").arg(&noop).output());
    Slurm::start(
        dir,
        &noop,
        &noop,
        &format!(
            "HealthCheckProgram={}\nHealthCheckInterval={interval}\nHealthCheckNodeState=ANY\n{nodes}",
            check.display()
        ),
    )
}

#[test]
fn the_health_check_drains_on_an_unhealthy_gpu_resumes_after_and_leaves_an_admins_drain_alone() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let slurm = health_checked_slurm(dir, &d, INTERVAL);
    let within = Duration::from_secs(INTERVAL + 1 + 4); // an interval, a poll, and slack for CI
    // Healthy (the demo's GPUs are ok or degraded): a few checks leave the node idle.
    slurm.health_checks(1);
    assert_eq!(node_state(&slurm), "idle none");

    // A fatal XID on GPU 0: drained, the reason naming the GPU and the finding.
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    d.scrape_until("GPU 0 unhealthy", |m| {
        m.value("gpu_health", &[("gpu", "0"), ("state", "unhealthy")]) == Some(1.0)
    });
    let state = wait_for_node(&slurm, "the drain", within, |s| s.starts_with("drain"));
    assert!(state.contains("gpuwarden: GPU 0 xid_fatal"), "{state}");
    // Each run tells the daemon what Slurm shows: drained by gpuwarden, no job running.
    d.scrape_until("the node's state from the check", |m| {
        m.value("gpuwarden_scheduler_node_drained", &[("by", "gpuwarden")]) == Some(1.0)
            && m.value("gpuwarden_scheduler_node_drained", &[("by", "none")]) == Some(0.0)
            && m.value("gpuwarden_scheduler_jobs", &[]) == Some(0.0)
    });

    // The operator's policy no longer counts Xid 48: every GPU healthy, the node resumed.
    reload(&d, |c| format!("{c}health:\n  xid_severity: {{48: ignore}}\n"));
    wait_for_node(&slurm, "the resume", within, |s| s == "idle none");

    // An admin drains the node: the health check never resumes it nor takes its reason,
    // healthy or not.
    let host = checked("hostname", Command::new("hostname").arg("-s").output())
        .trim()
        .to_string();
    slurm.client(
        "scontrol",
        &[
            "update",
            &format!("nodename={host}"),
            "state=drain",
            "reason=disk maintenance",
        ],
    );
    slurm.health_checks(2);
    assert_eq!(node_state(&slurm), "drain disk maintenance");
    d.scrape_until("an admin's drain seen as such", |m| {
        m.value("gpuwarden_scheduler_node_drained", &[("by", "other")]) == Some(1.0)
    });
    reload(&d, |c| c.replace("{48: ignore}", "{48: fatal}"));
    d.scrape_until("GPU 0 unhealthy again", |m| {
        m.value("gpu_health", &[("gpu", "0"), ("state", "unhealthy")]) == Some(1.0)
    });
    slurm.health_checks(2);
    assert_eq!(node_state(&slurm), "drain disk maintenance");

    // sinfo fails while the admin's drain stands and a GPU is unhealthy: the check cannot
    // tell the admin's drain from none, so it changes nothing (it used to overwrite it).
    std::fs::write(dir.join("break-sinfo"), "").unwrap();
    slurm.health_checks(2);
    assert_eq!(node_state(&slurm), "drain disk maintenance");
    // The admin resumes the node; with sinfo still failing, nothing drains it either.
    slurm.client("scontrol", &["update", &format!("nodename={host}"), "state=resume"]);
    slurm.health_checks(2);
    assert_eq!(node_state(&slurm), "idle none");
    // sinfo answers again: the unhealthy GPU drains the node.
    std::fs::remove_file(dir.join("break-sinfo")).unwrap();
    let state = wait_for_node(&slurm, "the drain once sinfo answers", within, |s| {
        s.starts_with("drain")
    });
    assert!(state.contains("gpuwarden: GPU 0 xid_fatal"), "{state}");

    // The controller hangs (sinfo never answers) while the GPU is healthy again: each check
    // gives up after GPUWARDEN_SLURM_TIMEOUT (2 s here) and changes nothing, instead of hanging
    // slurmd's health checks for good; once sinfo answers, the next check resumes the node.
    std::fs::write(dir.join("hang-sinfo"), "").unwrap();
    let hung_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    reload(&d, |c| c.replace("{48: fatal}", "{48: ignore}"));
    slurm.health_checks(2);
    assert!(
        node_state(&slurm).starts_with("drain"),
        "no resume while sinfo does not answer"
    );
    // Checks that began with sinfo hanging ended (the wrapper notes each end): none hangs.
    let done: f64 = std::fs::read_to_string(dir.join("check-done"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        done > hung_at + 2.0,
        "the last check ended {:.1} s after sinfo began to hang",
        done - hung_at
    );
    std::fs::remove_file(dir.join("hang-sinfo")).unwrap();
    wait_for_node(
        &slurm,
        "the resume once sinfo answers",
        within + Duration::from_secs(2),
        |s| s == "idle none",
    );
}

/// Return to service only after a probe passes (issue "Validate, don't only watch", item 1),
/// with the simulated CUDA driver answering: a fatal XID drains the node; the operator's clear
/// keeps it drained as `validating` while GPU 0 is busy; once idle the probe runs (the schedule
/// is off) and its pass resumes the node. Then a GPU slow at HBM copies: its clear's probe
/// fails, and the node stays drained as `probe_failed`, naming the test and the figure.
#[test]
fn a_cleared_gpu_stays_drained_as_validating_until_its_probe_passes_and_a_failed_one_stays_drained() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let idle = all_idle(&with_cuda(DEMO_SCENARIO));
    let busy = edit_device(&idle, 0, |dev| format!("{dev}    compute_processes: 1\n"));
    let slow = edit_device(&idle, 0, |dev| {
        dev.replace("hbm_copy_gbps: 4300", "hbm_copy_gbps: 2000")
    });
    // The schedule off: only validation probes run. Short tests, so a probe takes a second.
    let probes = "probe:\n  schedule: false\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 20s\n  \
                  durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";
    let cuda = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda.path(), true).display().to_string())];
    let d = Daemon::start_full(&busy, &test_config(&sim_library(), probes), "", &env);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let slurm = health_checked_slurm(dir, &d, INTERVAL);
    let within = Duration::from_secs(INTERVAL + 1 + 4);
    slurm.health_checks(1);
    assert_eq!(node_state(&slurm), "idle none");

    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    let state = wait_for_node(&slurm, "the drain", within, |s| s.contains("xid_fatal"));
    assert!(
        state.starts_with("drain") && state.contains("gpuwarden: GPU 0 xid_fatal"),
        "{state}"
    );

    // Repaired and cleared: still drained, now as validating; GPU 0 runs a job, so no probe yet.
    let (code, out, _) = d.clear("0", "replaced the HBM board, INC-1", &[]);
    assert_eq!(code, 0, "the clear was taken and its validation started: {out}");
    assert!(out.contains("let go of xid_fatal"), "{out}");
    assert!(
        out.contains("validating: GPU 0 stays out of service until a probe passes"),
        "{out}"
    );
    let state = wait_for_node(&slurm, "validating", within, |s| s.contains("validating"));
    assert_eq!(state, "drain gpuwarden: GPU 0 validating");
    d.scrape_until("the busy GPU's probe skipped", |m| {
        m.value(
            "gpu_probe_skipped_total",
            &[("gpu", "0"), ("reason", "compute_processes")],
        )
        .is_some()
    });
    slurm.health_checks(2);
    assert_eq!(
        node_state(&slurm),
        "drain gpuwarden: GPU 0 validating",
        "no probe, no resume"
    );

    // The job ends: the probe runs at once and passes; the node resumes.
    d.set_scenario(&idle);
    wait_for_node(
        &slurm,
        "the resume after the probe passed",
        within + Duration::from_secs(10),
        |s| s == "idle none",
    );
    let m = d.scrape();
    assert_eq!(
        m.value("gpu_probe_runs_total", &[("gpu", "0"), ("result", "pass")]),
        Some(1.0)
    );
    assert!(
        d.log_text().contains("GPU 0 validated: passed the probe"),
        "{}",
        d.log_text()
    );

    // A board slow at HBM: a new fatal XID, a clear, and its probe fails. Drained as
    // probe_failed with the figure, and it stays so (not probed again until the next clear).
    d.set_scenario(&slow);
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    wait_for_node(&slurm, "the second drain", within, |s| s.contains("xid_fatal"));
    let (code, out, _) = d.clear("0", "reseated, INC-2", &[]);
    assert_eq!(code, 0, "taken; its validation runs: {out}");
    let state = wait_for_node(&slurm, "the failed validation", within + Duration::from_secs(10), |s| {
        s.contains("probe_failed")
    });
    assert_eq!(state, "drain gpuwarden: GPU 0 probe_failed");
    let (_, text) = d.health(false);
    assert!(
        text.contains("failed the probe: hbm_copy 2000.0 GB/s, 50% of the expected 4000.0 GB/s"),
        "names the test and the figure: {text}"
    );
    slurm.health_checks(2);
    assert_eq!(node_state(&slurm), "drain gpuwarden: GPU 0 probe_failed");
    let m = d.scrape();
    assert_eq!(
        m.value("gpu_probe_runs_total", &[("gpu", "0"), ("result", "fail")]),
        Some(1.0),
        "probed once"
    );
}

/// The idle node's scheduled validation (issue "Validate, don't only watch", item 5), under the
/// real Slurm with the simulated CUDA driver: on an idle node the daemon's sweep makes the
/// verdict `validating` (`gpuwarden health` exits 3) and the health check drains the node as
/// `gpuwarden: validating`; every GPU is probed, one after the other, and the node resumes
/// once all passed. A second sweep meets a job starting on GPU 5: it ends, and the node goes
/// back to work at the check's next run and stays there while the job runs.
#[test]
fn the_idle_nodes_scheduled_validation_drains_probes_every_gpu_resumes_and_gives_way_to_a_job() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let idle = all_idle(&with_cuda(DEMO_SCENARIO));
    let with_job = edit_device(&idle, 5, |dev| format!("{dev}    compute_processes: 1\n"));
    let probes = "probe:\n  schedule: true\n  mode: node\n  interval: 2s\n  memory_cap_mib: 256\n  max_utilization: 0.5\n  \
                  timeout: 20s\n  durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";
    let cuda = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda.path(), true).display().to_string())];
    let d = Daemon::start_full(&idle, &test_config(&sim_library(), probes), "", &env);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let slurm = health_checked_slurm(dir, &d, INTERVAL);
    let within = Duration::from_secs(INTERVAL + 1 + 4);

    // The sweep starts 2 s after the daemon: drained as validating.
    let state = wait_for_node(&slurm, "the sweep's drain", within + Duration::from_secs(2), |s| {
        s.contains("validating")
    });
    assert_eq!(state, "drain gpuwarden: validating");
    let (code, text) = d.health(false);
    assert_eq!(code, 3, "{text}");
    assert!(
        text.starts_with("validating: the node's scheduled validation: "),
        "{text}"
    );
    // No next sweep for a while, so the resume can be seen.
    reload(&d, |c| c.replace("interval: 2s\n", "interval: 1h\n"));
    wait_for_node(
        &slurm,
        "the resume after every GPU passed",
        Duration::from_secs(60),
        |s| s == "idle none",
    );
    let m = d.scrape();
    for gpu in 0..8 {
        let gpu = gpu.to_string();
        assert_eq!(
            m.value("gpu_probe_runs_total", &[("gpu", gpu.as_str()), ("result", "pass")]),
            Some(1.0),
            "GPU {gpu} probed once"
        );
    }
    let rows = Command::new(BIN)
        .args(["events", "--json", "--kind", "validation", "--state"])
        .arg(d.state_path())
        .output()
        .expect("run gpuwarden events");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&rows.stdout).unwrap_or_default();
    let passed = rows
        .iter()
        .filter(|r| r["details"]["state"] == "passed" && r["details"]["validation"]["kind"] == "sweep")
        .count();
    assert_eq!(passed, 8, "{rows:#?}");

    // The next sweep meets a job: it ends, the node goes back to work and stays there.
    reload(&d, |c| c.replace("interval: 1h\n", "interval: 2s\n"));
    wait_for_node(
        &slurm,
        "the second sweep's drain",
        within + Duration::from_secs(2),
        |s| s.contains("validating"),
    );
    d.set_scenario(&with_job);
    wait_for_node(
        &slurm,
        "the resume once a job started",
        within + Duration::from_secs(20),
        |s| s == "idle none",
    );
    assert!(
        d.log_text().contains("runs on GPU 5; the node goes back to work"),
        "{}",
        d.log_text()
    );
    slurm.health_checks(2);
    assert_eq!(node_state(&slurm), "idle none", "no sweep while the job runs");
}

/// The fleet drain guard (issue "Heal with guard rails", item 3) under the real Slurm, three
/// nodes in the partition: two without a slurmd, drained with a `gpuwarden:` reason as their
/// own checks would have. With max_drained=2 this node's fatal XID does not drain it: the check
/// tells the daemon, which serves `gpuwarden_drain_guard_refused 1`, and a live Prometheus with
/// the shipped rules fires GpuwardenDrainGuardActive, while the verdict stays unhealthy. Once an
/// admin takes one of the other drains over (its reason no longer gpuwarden's), the next check
/// drains this node.
#[test]
fn the_drain_guard_keeps_a_third_node_in_service_while_its_alert_fires_and_lets_go_below_the_cap() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let others = "NodeName=gwfake1 NodeAddr=127.0.0.2 CPUs=1 State=UNKNOWN\n\
                  NodeName=gwfake2 NodeAddr=127.0.0.3 CPUs=1 State=UNKNOWN\n";
    let slurm = health_checked_slurm_with(dir, &d, INTERVAL, "GPUWARDEN_MAX_DRAINED=2", others);
    for other in ["gwfake1", "gwfake2"] {
        slurm.client(
            "scontrol",
            &[
                "update",
                &format!("nodename={other}"),
                "state=drain",
                "reason=gpuwarden: GPU 0 xid_fatal",
            ],
        );
    }
    let prom = Prometheus::start(&d.addr);
    prom.wait_for_data();

    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    let m = d.scrape_until_within("the guard's refusal", Duration::from_secs(20), |m| {
        m.value("gpuwarden_drain_guard_refused", &[]) == Some(1.0)
    });
    assert_eq!(m.value("gpuwarden_drain_guard_drained_nodes", &[]), Some(2.0));
    assert_eq!(m.value("gpuwarden_drain_guard_nodes", &[]), Some(3.0));
    assert_eq!(
        m.value("gpu_health", &[("gpu", "0"), ("state", "unhealthy")]),
        Some(1.0)
    );
    slurm.health_checks(2);
    assert_eq!(node_state(&slurm), "idle none", "not drained past max_drained");
    assert!(
        d.log_text()
            .contains("2 of 3 nodes of this node's partitions already drained by gpuwarden (max_drained 2)"),
        "{}",
        d.log_text()
    );
    until_ok("GpuwardenDrainGuardActive to fire", Duration::from_secs(20), || {
        let firing = prom.firing();
        match firing.iter().any(|(alert, _)| alert == "GpuwardenDrainGuardActive") {
            true => Ok(()),
            false => Err(format!("{firing:?}")),
        }
    });

    // An admin takes gwfake2's drain over: one gpuwarden drain of three, under the cap.
    slurm.client("scontrol", &["update", "nodename=gwfake2", "reason=admin: PSU swap"]);
    let state = wait_for_node(
        &slurm,
        "the drain under the cap",
        Duration::from_secs(INTERVAL + 1 + 4),
        |s| s.starts_with("drain"),
    );
    assert_eq!(state, "drain gpuwarden: GPU 0 xid_fatal");
    d.scrape_until_within("the guard allowing", Duration::from_secs(10), |m| {
        m.value("gpuwarden_drain_guard_refused", &[]) == Some(0.0)
    });
}

/// The probe settings of these tests: the schedule off (only validation probes), short tests.
const VALIDATION_PROBES: &str = "probe:\n  schedule: false\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 20s\n  \
     durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";

/// Healing with guard rails (issue "Heal with guard rails", `remediation.mode: auto`), under
/// the real Slurm: a contained Xid 94 (the operator's policy makes it fatal) drains the node;
/// once Slurm shows the node drained by gpuwarden with no job, the daemon lets go of NVML and
/// runs the reset (a fake that refuses while any process holds the simulated NVML, as the
/// real one does), clears the GPU and probes it; the probe passes and the node resumes. GPU 0's
/// row remap that waited for a reset is done with it: the simulated driver learnt the reset.
#[test]
fn an_xid_94_drains_the_gpu_is_reset_probed_and_the_node_resumes() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    // GPU 0's row remap waits for a reset (its driver asks for one); GPU 6's does not here.
    let idle = edit_device(&all_idle(&with_cuda(DEMO_SCENARIO)), 6, |dev| {
        dev.replace("pending: true", "pending: false")
            .replace("recovery_action: 1", "recovery_action: 0")
    });
    let idle = edit_device(&idle, 0, |dev| {
        dev.replace(
            "correctable: 0, uncorrectable: 0, pending: false",
            "correctable: 1, uncorrectable: 0, pending: true",
        )
        .replace("recovery_action: 0", "recovery_action: 1")
    });
    let fake = format!(
        "{}/tests/fixtures/fake-gpu-reset.sh {{pci_bus_id}}",
        env!("CARGO_MANIFEST_DIR")
    );
    let config = format!("{VALIDATION_PROBES}{}", auto_remediation(dir, &fake));
    let cuda = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda.path(), true).display().to_string())];
    let d = Daemon::start_full(&idle, &test_config(&sim_library(), &config), "", &env);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    // Before any scheduler report: GPU 0's pending remap wants a reset, and the scheduler guard
    // holds it back (nothing says the node is out of work).
    d.scrape_until("GPU 0 held back by the scheduler guard", |m| {
        m.value("gpu_remediation_held_back", &[("gpu", "0"), ("guard", "scheduler")]) == Some(1.0)
    });
    let slurm = health_checked_slurm(dir, &d, INTERVAL);
    let within = Duration::from_secs(INTERVAL + 1 + 4);
    slurm.health_checks(1);
    assert_eq!(
        node_state(&slurm),
        "idle none",
        "in service: no reset while Slurm shows it so"
    );
    d.scrape_until("held back while Slurm shows the node in service", |m| {
        m.value("gpu_remediation_held_back", &[("gpu", "0"), ("guard", "scheduler")]) == Some(1.0)
    });
    let (code, text) = d.health(false);
    assert_eq!(code, 0, "degraded only: {text}");
    assert!(
        text.contains("automatic reset of GPU 0 held back (scheduler): Slurm shows the node in service"),
        "{text}"
    );

    // The verdict asked every 0.1 s from the fault to the resume, as a health check that runs
    // at any moment would: unhealthy without a break from the fault until the probe passed.
    let poll = VerdictPoll::start(d.socket_path());
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=x, Contained: SM (0x1)\n");
    let state = wait_for_node(&slurm, "the drain", within, |s| s.contains("xid_fatal"));
    assert!(
        state.starts_with("drain") && state.contains("gpuwarden: GPU 0 xid_fatal"),
        "{state}"
    );
    // The next check reports the node drained by gpuwarden with no job: GPU 0 is reset,
    // validated, and the node resumes.
    wait_for_node(
        &slurm,
        "the resume after reset and probe",
        Duration::from_secs(60),
        |s| s == "idle none",
    );
    let asks = poll.finish();
    assert_held_throughout(&asks, false);
    let runs = code_runs(&asks);
    assert!(
        runs.ends_with(&[1, 0]) && runs.iter().filter(|c| **c == 1).count() == 1,
        "out of service once, then back: {runs:?}"
    );
    assert!(
        asks.iter().any(|a| a.first_line.contains("remediating")),
        "the reset named while it ran: {asks:#?}"
    );
    let m = d.scrape_until("the reset seen", |m| {
        m.value("gpu_remediation_resets", &[("gpu", "0"), ("outcome", "succeeded")]) == Some(1.0)
    });
    assert_eq!(
        m.value("gpu_remediation_resets", &[("gpu", "0"), ("outcome", "failed")]),
        Some(0.0)
    );
    assert_eq!(m.value("gpuwarden_remediation_failed", &[]), Some(0.0));
    assert_eq!(m.value("gpuwarden_reboot_required", &[]), Some(0.0));
    assert_eq!(
        m.value("gpu_probe_runs_total", &[("gpu", "0"), ("result", "pass")]),
        Some(1.0),
        "validated by its probe"
    );
    // The simulated driver learnt the reset: GPU 0's remap is done, its driver asks for nothing.
    assert_eq!(m.value("gpu_row_remap_pending", &[("gpu", "0")]), Some(0.0));
    assert_eq!(
        m.value("gpu_recovery_action", &[("gpu", "0"), ("action", "none")]),
        Some(1.0)
    );
    assert_eq!(
        m.value("gpu_remediation_resets", &[("gpu", "6"), ("outcome", "succeeded")]),
        Some(0.0),
        "no other GPU needed one"
    );
    let (code, text) = d.health(false);
    assert_eq!(code, 0, "{text}");
    let log = d.log_text();
    assert!(
        log.contains("automatic remediation resets it: the driver asks for a GPU reset (recovery action)"),
        "{log}"
    );
    assert!(log.contains("NVML let go of: the GPU reset may run"), "{log}");
    // The journal: the step, its output (persistence off, the reset, persistence on), its
    // exit and duration, and the clear.
    let report = std::process::Command::new(BIN)
        .args(["report", "--gpu", "0", "--state"])
        .arg(d.state_path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains("## Remediation run (resets, reboot marks)\n\n- "),
        "{report}"
    );
    assert!(report.contains("gpu_reset succeeded in"), "{report}");
    assert!(
        report.contains("GPU 0000:19:00.0 was successfully reset."),
        "the step's output: {report}"
    );
    assert!(report.contains("cleared by gpuwarden remediation"), "{report}");
    let events = events_json(&d.state_path(), &[]).to_string();
    assert!(events.contains("persistence off for 0000:19:00.0"), "{events}");
    assert!(events.contains("GPU 0000:19:00.0 was successfully reset."), "{events}");

    // A restart keeps the day's budget (the journal's seed): the same fault again is now a
    // reboot, not a reset. Through the restart the verdict, asked every 0.1 s, is never
    // unhealthy: the kernel log (a file) is not read again as new (issue #51, item 2), and
    // the node stays in service.
    let poll = VerdictPoll::start(d.socket_path());
    let d = d.restart(false, None);
    d.scrape_until("the first poll after the restart", |m| {
        m.value("gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    slurm.health_checks(1);
    let asks = poll.finish();
    assert!(
        asks.iter().all(|a| a.code != 1) && asks.iter().any(|a| a.code == 0),
        "unhealthy after the restart: {asks:#?}"
    );
    assert_eq!(node_state(&slurm), "idle none", "still in service after the restart");
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=x, Contained: SM (0x1)\n");
    let state = wait_for_node(&slurm, "the second drain", within, |s| s.starts_with("drain"));
    assert!(state.contains("gpuwarden:"), "{state}");
    d.scrape_until("the reboot mark", |m| {
        m.value("gpuwarden_reboot_required", &[]) == Some(1.0)
    });
    let marker = std::fs::read_to_string(dir.join("reboot-required")).unwrap();
    assert!(marker.contains("1 GPU reset(s) within 24 h did not hold"), "{marker}");
}

/// A reset that fails: the node needs a reboot. It stays drained (the finding is unhealthy),
/// the marker says why, GpuwardenRemediationFailed's series is 1, the journal keeps the step's
/// output and exit, and nothing is reset again.
#[test]
fn a_failing_reset_marks_the_node_reboot_required_and_it_stays_drained() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let idle = all_idle(&with_cuda(DEMO_SCENARIO));
    let failing = "/bin/sh -c 'echo Unable to reset GPU $0: timed out >&2; exit 3' {pci_bus_id}";
    let config = format!("{VALIDATION_PROBES}{}", auto_remediation(dir, failing));
    let d = Daemon::start_full(&idle, &test_config(&sim_library(), &config), "", &[]);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let slurm = health_checked_slurm(dir, &d, INTERVAL);
    let within = Duration::from_secs(INTERVAL + 1 + 4);
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=x, Contained: SM (0x1)\n");
    wait_for_node(&slurm, "the drain", within, |s| s.contains("xid_fatal"));
    let m = d.scrape_until("the failed reset and the reboot mark", |m| {
        m.value("gpuwarden_remediation_failed", &[]) == Some(1.0)
            && m.value("gpuwarden_reboot_required", &[]) == Some(1.0)
    });
    assert_eq!(
        m.value("gpu_remediation_resets", &[("gpu", "0"), ("outcome", "failed")]),
        Some(1.0)
    );
    let marker = std::fs::read_to_string(dir.join("reboot-required")).unwrap();
    assert!(
        marker.contains("the GPU reset of GPU 0 failed: exit status 3"),
        "{marker}"
    );
    let (code, text) = d.health(false);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("reboot_required"), "{text}");
    // Still drained, several checks later; GPU 6's reset is not tried on a node that needs a
    // reboot anyway.
    slurm.health_checks(2);
    let state = node_state(&slurm);
    assert!(state.starts_with("drain") && state.contains("gpuwarden:"), "{state}");
    let m = d.scrape();
    assert_eq!(
        m.value("gpu_remediation_resets", &[("gpu", "6"), ("outcome", "failed")]),
        Some(0.0)
    );
    assert_eq!(
        m.value("gpu_remediation_resets", &[("gpu", "6"), ("outcome", "succeeded")]),
        Some(0.0)
    );
    let events = events_json(&d.state_path(), &[]).to_string();
    assert!(
        events.contains("Unable to reset GPU 0000:19:00.0: timed out"),
        "{events}"
    );
    assert!(events.contains("gpu_reset failed in"), "{events}");
    assert!(
        events.contains("reboot required: the GPU reset of GPU 0 failed"),
        "{events}"
    );
}

/// A stop during a reset (issue #51, item 3), under the real Slurm, the verdict asked every
/// 0.1 s from the fault through the reset, the stop and the restart: the reset command hangs
/// (`sleep 300`), SIGTERM ends the daemon and the command with it; the node never reads fit
/// (unhealthy, or unknown while no daemon answers) and stays drained; the attempt is on record
/// as interrupted, counts against the day's budget, and no reboot is marked (a stop is not a
/// failed reset).
#[test]
fn a_stop_during_a_reset_keeps_the_node_drained_and_records_the_attempt() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let idle = all_idle(&with_cuda(DEMO_SCENARIO));
    // A budget of three: after the restart the fault is still there and the reset is tried
    // again, rather than the budget's escalation to a reboot (tested elsewhere).
    let config = format!("{VALIDATION_PROBES}{}", auto_remediation(dir, "/bin/sleep 301"))
        .replace("  timeout: 10s\n", "  timeout: 10s\n  max_resets_per_day: 3\n");
    assert!(config.contains("max_resets_per_day: 3"));
    let d = Daemon::start_full(&idle, &test_config(&sim_library(), &config), "", &[]);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let slurm = health_checked_slurm(dir, &d, INTERVAL);
    let within = Duration::from_secs(INTERVAL + 1 + 4);
    let poll = VerdictPoll::start(d.socket_path());
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=x, Contained: SM (0x1)\n");
    wait_for_node(&slurm, "the drain", within, |s| s.contains("xid_fatal"));
    // The reset command runs (and hangs): its start is on record once NVML was let go of.
    let state_db = d.state_path();
    eventually(
        "the reset's start on record",
        Duration::from_secs(3 * INTERVAL + 10),
        || {
            events_json(&state_db, &["--kind", "remediation"])
                .to_string()
                .contains("gpu_reset started")
                .then_some(())
        },
    );
    let sleeping = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", "^/bin/sleep 301$"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let during = eventually("the reset command running", Duration::from_secs(10), || {
        let during = sleeping();
        (during.len() == 1).then_some(during)
    });
    let d = d.restart(false, None);
    d.scrape_until("the first poll after the restart", |m| {
        m.value("gpu_up", &[("gpu", "0")]) == Some(1.0)
    });
    // Two of the health check's runs after the restart.
    slurm.health_checks(2);
    let asks = poll.finish();
    assert_held_throughout(&asks, true);
    assert_eq!(asks.last().map(|a| a.code), Some(1), "{asks:#?}");
    let state = node_state(&slurm);
    assert!(state.starts_with("drain") && state.contains("gpuwarden:"), "{state}");
    // On record before the command ran; the restart reads a start with no outcome as an
    // interrupted reset, which the day's budget counts (a restart loop cannot reset without
    // end).
    let events = events_json(&d.state_path(), &["--kind", "remediation"]).to_string();
    assert!(events.contains("gpu_reset started"), "{events}");
    let m = d.scrape();
    assert_eq!(
        m.value("gpu_remediation_resets", &[("gpu", "0"), ("outcome", "interrupted")]),
        Some(1.0),
        "counted against the day's budget: {events}"
    );
    assert_eq!(
        m.value("gpuwarden_reboot_required", &[]),
        Some(0.0),
        "a stop is no failed reset"
    );
    assert!(!dir.join("reboot-required").exists(), "no marker file");
    // The stop ended the reset command with the daemon (the new daemon's retry is another).
    assert!(
        !sleeping().contains(&during[0]),
        "the reset command {} outlived the stop",
        during[0]
    );
}

/// LBNL NHC and gpuwarden share Slurm's one HealthCheckProgram slot (docs/why.md): the check
/// runs NHC first (here a stand-in that behaves as NHC does under Slurm: it drains with an
/// "NHC:" reason while its flag file says a check fails, and resumes only its own drain), then
/// gpuwarden's verdict. Each drains with its own reason and leaves the other's alone, and the
/// node stays drained while either finds a problem.
#[test]
fn nhc_and_gpuwarden_share_the_health_check_and_each_keeps_its_own_drain() {
    const INTERVAL: u64 = 3;
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = root.path();
    let host = checked("hostname", Command::new("hostname").arg("-s").output())
        .trim()
        .to_string();
    let nhc = dir.join("nhc");
    std::fs::write(
        &nhc,
        format!(
            "#!/bin/sh\n\
             reason=$(sinfo -h -N -n {host} -o '%E' | head -n 1)\n\
             if [ -e {dir}/nhc-fails ]; then\n\
             \x20 [ \"$reason\" = none ] && scontrol update nodename={host} state=drain reason='NHC: check_fs_mount_rw: /scratch not mounted'\n\
             \x20 exit 1\n\
             fi\n\
             case \"$reason\" in NHC:*) scontrol update nodename={host} state=resume ;; esac\n\
             exit 0\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    checked("chmod", Command::new("chmod").arg("755").arg(&nhc).output());
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let slurm = health_checked_slurm_with(dir, &d, INTERVAL, &format!("GPUWARDEN_NHC={}", nhc.display()), "");
    let within = Duration::from_secs(2 * INTERVAL + 4);
    slurm.health_checks(1);
    assert_eq!(node_state(&slurm), "idle none");

    // NHC finds a problem: its drain, its reason.
    std::fs::write(dir.join("nhc-fails"), "").unwrap();
    wait_for_node(&slurm, "NHC's drain", within, |s| {
        s.starts_with("drain") && s.contains("NHC: check_fs_mount_rw")
    });
    // A GPU fails too: NHC's drain and reason stand.
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    d.scrape_until("GPU 0 unhealthy", |m| {
        m.value("gpu_health", &[("gpu", "0"), ("state", "unhealthy")]) == Some(1.0)
    });
    slurm.health_checks(2);
    assert!(
        node_state(&slurm).contains("NHC: check_fs_mount_rw"),
        "{}",
        node_state(&slurm)
    );

    // NHC's problem is mended: it resumes its own drain, and the same check drains the node for
    // the GPU, with gpuwarden's reason.
    std::fs::remove_file(dir.join("nhc-fails")).unwrap();
    let state = wait_for_node(&slurm, "gpuwarden's drain", within, |s| {
        s.contains("gpuwarden: GPU 0 xid_fatal")
    });
    assert!(state.starts_with("drain"), "{state}");

    // NHC fails again while gpuwarden's drain stands, and the GPU is mended: not resumed; the
    // reason says NHC failed.
    std::fs::write(dir.join("nhc-fails"), "").unwrap();
    reload(&d, |c| format!("{c}health:\n  xid_severity: {{48: ignore}}\n"));
    let state = wait_for_node(&slurm, "kept for NHC", within, |s| {
        s.contains("gpuwarden: NHC failed (exit 1)")
    });
    assert!(state.starts_with("drain"), "{state}");

    // Both pass: resumed.
    std::fs::remove_file(dir.join("nhc-fails")).unwrap();
    wait_for_node(&slurm, "the resume", within, |s| s == "idle none");
}
