//! Inputs from outside, written as an attacker or a careless job script would, against the
//! real daemon: the job mapping directory (a FIFO, a link to a root-only file, hundreds of
//! stray files, files for one GPU by index and by UUID, a directory others may write, an
//! outage and its end) and /proc (a FIFO where `comm` is, a name that is not UTF-8). Each
//! must leave polling, /healthz, the real jobs and a prompt SIGTERM intact and leak nothing
//! onto /metrics. The readers' own unit tests (src/input/mod.rs and its users) cover the rest;
//! docs/testing.md lists them all.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

const UUID5: &str = "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000005";

fn skipped(m: &Metrics, input: &str, reason: &str) -> f64 {
    m.value("gpuwarden_input_skipped_total", &[("input", input), ("reason", reason)])
        .unwrap_or(0.0)
}

fn rounds(m: &Metrics) -> f64 {
    m.value("gpuwarden_poll_round_duration_seconds_count", &[])
        .unwrap_or(0.0)
}

/// The job directory of the issue: a FIFO at GPU 0's file when the daemon starts, a link to
/// a root-only secret as GPU 3's, 600 stray files, a job per real GPU file, and GPU 5 with
/// one file by index and one by UUID. Another FIFO comes while it runs.
#[test]
fn a_hostile_job_directory_freezes_nothing_and_leaks_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("jobs");
    std::fs::create_dir(&dir).unwrap();
    make_fifo(&dir.join("0"));
    let secret = root.path().join("id_ed25519");
    std::fs::write(&secret, "-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0\n").unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("3")).unwrap();
    std::os::unix::fs::symlink("/proc/self/cmdline", dir.join("4")).unwrap();
    for i in 0..300 {
        std::fs::write(dir.join(format!(".{i}")), "999\n").unwrap();
        std::fs::write(dir.join(format!("{}.new", i)), "999\n").unwrap();
    }
    for gpu in [1, 2, 6, 7] {
        std::fs::write(dir.join(gpu.to_string()), format!("{}\n", 48200 + gpu)).unwrap();
    }
    // GPU 5 by index and by UUID, one job on both: merged, each job once.
    std::fs::write(dir.join("5"), "48205\n48300\n").unwrap();
    std::fs::write(dir.join(UUID5), "48300\n48301\n").unwrap();
    // `01` and `+1` are not GPU 1.
    std::fs::write(dir.join("01"), "not-gpu-1\n").unwrap();
    std::fs::write(dir.join("+1"), "not-gpu-1\n").unwrap();

    let config = test_config(
        &sim_library(),
        &format!("hpc_jobs:\n  mapping_dir: {}\n", dir.display()),
    );
    // Before, a FIFO here at start kept HTTP from ever answering.
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("the real jobs", |m| gpu_jobs(m).len() == 7);
    let expected: Vec<(String, String)> = [
        ("1", "48201"),
        ("2", "48202"),
        ("5", "48205"),
        ("5", "48300"),
        ("5", "48301"),
        ("6", "48206"),
        ("7", "48207"),
    ]
    .iter()
    .map(|(g, j)| (g.to_string(), j.to_string()))
    .collect();
    assert_eq!(gpu_jobs(&m), expected);
    assert!(
        !m.text.contains("PRIVATE KEY") && !m.text.contains("c2VjcmV0"),
        "the secret leaked"
    );
    assert!(!m.text.contains("not-gpu-1"), "01 or +1 read as GPU 1");
    assert!(!m.text.contains('\0'), "raw NULs on /metrics");
    assert!(skipped(&m, "job_mapping", "symlink") >= 2.0, "{}", m.text);
    assert!(skipped(&m, "job_mapping", "not_regular_file") >= 1.0);
    assert!(skipped(&m, "job_mapping", "name") >= 602.0);
    assert_eq!(d.get("/healthz", &[]).status, 200);

    // A FIFO where a real job's file was, while it runs: polling goes on, the other jobs stay.
    std::fs::remove_file(dir.join("2")).unwrap();
    make_fifo(&dir.join("2"));
    let before = rounds(&d.scrape());
    holds_for("/healthz 200 beside the FIFO", Duration::from_secs(7), || {
        let health = d.get("/healthz", &[]);
        (health.status == 200).then_some(()).ok_or(health.text())
    });
    let m = d.scrape();
    assert!(
        rounds(&m) >= before + 20.0,
        "polling stalled: {} -> {}",
        before,
        rounds(&m)
    );
    assert_eq!(gpu_jobs(&m).len(), 6, "{:?}", gpu_jobs(&m));
    let log = d.log_text();
    assert!(
        log.contains("job_mapping: skipped") && log.contains("symbolic link"),
        "{log}"
    );

    // SIGTERM with FIFOs in the directory: out within 5 s.
    let asked = Instant::now();
    assert_eq!(d.stop(), Some(0));
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        asked.elapsed()
    );
}

/// An unreadable directory warns, its recovery is logged, and a second outage warns again.
/// A directory that others may write is refused with what to do.
#[test]
fn job_directory_outages_are_logged_each_time_and_unsafe_modes_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("jobs");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("1"), "48201\n").unwrap();
    let config = test_config(
        &sim_library(),
        &format!("hpc_jobs:\n  mapping_dir: {}\n", dir.display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    d.scrape_until("the job", |m| gpu_jobs(m).len() == 1);
    let count = |text: &str| d.log_text().matches(text).count();
    for outage in 1..=2 {
        // A directory everyone may write: refused, no jobs shown.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        d.scrape_until_within("no jobs", Duration::from_secs(15), |m| gpu_jobs(m).is_empty());
        d.wait_for_log("writable by its group or by everyone", outage, Duration::from_secs(5));
        assert!(d.log_text().contains("chmod go-w"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        d.scrape_until_within("the job back", Duration::from_secs(15), |m| gpu_jobs(m).len() == 1);
        d.wait_for_log("can be read again", outage, Duration::from_secs(5));
    }
    assert_eq!(count("writable by its group or by everyone"), 2, "{}", d.log_text());
}

/// A FIFO where a process's `comm` is, and a name that is not UTF-8, under a `proc_root` of
/// the test's: polling goes on, the FIFO's process gets no name, the other a lossy one.
#[test]
fn a_hostile_proc_tree_freezes_nothing() {
    let proc_root = tempfile::tempdir().unwrap();
    let process = |pid: u32| {
        let dir = proc_root.path().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };
    // GPU 1's process (pid 4211) hides its name behind bytes that are not UTF-8
    // (PR_SET_NAME takes any); GPU 2's (pid 4302) has a FIFO for `comm`.
    std::fs::write(process(4211).join("comm"), b"tr\xffin\n").unwrap();
    make_fifo(&process(4302).join("comm"));
    let config = test_config(
        &sim_library(),
        &format!(
            "processes:\n  per_process: true\n  proc_root: {}\n",
            proc_root.path().display()
        ),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("per-process series", |m| {
        m.value("gpu_process_memory_used_bytes", &[("pid", "4211")]).is_some()
    });
    let named = m.find("gpu_process_memory_used_bytes", &[("pid", "4211")]);
    assert_eq!(
        named[0].labels["process"], "tr\u{fffd}in",
        "a lossy name, not an empty one"
    );
    let fifo = m.find("gpu_process_memory_used_bytes", &[("pid", "4302")]);
    assert_eq!(fifo[0].labels.get("process").map(String::as_str).unwrap_or(""), "");
    assert!(skipped(&m, "proc", "not_regular_file") >= 1.0);
    let before = rounds(&m);
    // Meant: two seconds hold five rounds or more of a poll that never stalls.
    std::thread::sleep(Duration::from_secs(2));
    assert!(rounds(&d.scrape()) >= before + 5.0, "polling stalled");
    assert_eq!(d.get("/healthz", &[]).status, 200);
    let asked = Instant::now();
    assert_eq!(d.stop(), Some(0));
    assert!(asked.elapsed() < Duration::from_secs(5));
}

/// `run --demo --config FILE`: a key the file sets wins over the demo's choice.
#[test]
fn the_demo_keeps_the_job_directory_a_config_file_sets() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("my-jobs");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("4"), "90001\n").unwrap();
    let config = root.path().join("config.yaml");
    std::fs::write(
        &config,
        format!("listen: 127.0.0.1:0\nhpc_jobs:\n  mapping_dir: {}\n", dir.display()),
    )
    .unwrap();
    let d = Daemon::spawn_command(&["run", "--demo", "--config", &config.display().to_string()]);
    let m = d.scrape_until("the file's job", |m| !gpu_jobs(m).is_empty());
    assert_eq!(gpu_jobs(&m), [("4".to_string(), "90001".to_string())]);
    assert!(
        d.log_text().contains("keeping `hpc_jobs.mapping_dir`"),
        "{}",
        d.log_text()
    );
}
