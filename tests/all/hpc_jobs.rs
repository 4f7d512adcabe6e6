//! Batch jobs per GPU: the Slurm prolog and epilog under deploy/slurm/ keep the job mapping
//! directory, and the daemon serves what it holds as gpu_job_info, in step with it.

use crate::common;

use common::*;
use std::path::Path;
use std::process::Command;

fn slurm(script: &str, dir: &Path, job: &str, gpus: &str) {
    let path = format!("{}/deploy/slurm/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("sh")
        .arg(&path)
        .env("GPUWARDEN_JOB_DIR", dir)
        .env("SLURM_JOB_ID", job)
        .env("SLURM_JOB_GPUS", gpus)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn jobs(m: &Metrics, gpu: &str) -> Vec<String> {
    let mut jobs: Vec<String> = m
        .find("gpu_job_info", &[("gpu", gpu)])
        .iter()
        .map(|s| s.labels["hpc_job"].clone())
        .collect();
    jobs.sort();
    jobs
}

#[test]
fn the_slurm_prolog_and_epilog_keep_gpu_job_info() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("jobs");
    let config = test_config(
        &sim_library(),
        &format!("hpc_jobs:\n  mapping_dir: {}\n", dir.display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    // No directory yet: no jobs, no error.
    assert!(!d.scrape().has_family("gpu_job_info"));

    slurm("prolog.sh", &dir, "1234", "0,2");
    slurm("prolog.sh", &dir, "5679", "2"); // another job shares GPU 2 (an array task has a plain id of its own too)
    slurm("prolog.sh", &dir, "1234", "0,2"); // a prolog run twice adds nothing
    assert_eq!(std::fs::read_to_string(dir.join("2")).unwrap(), "1234\n5679\n");
    let m = d.scrape_until("the jobs", |m| jobs(m, "2").len() == 2);
    assert_eq!(jobs(&m, "0"), ["1234"]);
    assert_eq!(jobs(&m, "2"), ["1234", "5679"]);
    assert!(jobs(&m, "1").is_empty());
    assert!(d.get("/", &[]).page_text().contains("job 1234, 5679"));

    // The first job ends: the other stays on GPU 2, GPU 0 has none.
    slurm("epilog.sh", &dir, "1234", "0,2");
    assert_eq!(std::fs::read_to_string(dir.join("2")).unwrap(), "5679\n");
    let m = d.scrape_until("the job gone", |m| jobs(m, "0").is_empty());
    assert_eq!(jobs(&m, "2"), ["5679"]);

    // A directory that cannot be read shows no jobs (never stale ones).
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    d.scrape_until("no jobs", |m| !m.has_family("gpu_job_info"));
    assert!(
        d.log_text().contains("cannot read hpc_jobs.mapping_dir"),
        "{}",
        d.log_text()
    );
}

/// The prolog never takes a node out of service: with no PATH (as slurmd runs it) and a job
/// directory it cannot create or write, it says why and exits 0 (a failing prolog drains the
/// node and requeues the job). With a good directory and no PATH it records the job.
#[test]
fn the_prolog_never_fails_and_needs_no_path() {
    let root = tempfile::tempdir().unwrap();
    let run = |dir: &Path, job: &str| {
        Command::new("/bin/sh")
            .arg(format!("{}/deploy/slurm/prolog.sh", env!("CARGO_MANIFEST_DIR")))
            .env_clear()
            .env("GPUWARDEN_JOB_DIR", dir)
            .env("SLURM_JOB_ID", job)
            .env("SLURM_JOB_GPUS", "0,1")
            .output()
            .unwrap()
    };
    // A regular file where the directory should be; a directory under /proc, which no one can make.
    let file = root.path().join("in-the-way");
    std::fs::write(&file, "").unwrap();
    for dir in [file.join("jobs"), Path::new("/proc/gpuwarden-jobs").to_path_buf()] {
        let out = run(&dir, "4242");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // A directory whose lock cannot be opened (a directory in its place): still 0, the job
    // unrecorded only where it could not be written.
    let dir = root.path().join("jobs");
    std::fs::create_dir_all(dir.join(".lock")).unwrap();
    let out = run(&dir, "4243");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir(dir.join(".lock")).unwrap();
    let out = run(&dir, "4244");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("0")).unwrap(), "4244\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode & 0o022,
        0,
        "the directory must not be group- or world-writable: {mode:o}"
    );
}
