//! Things of the test machine that several tests need: root for the real peers (systemd,
//! Slurm), a free port, a FIFO, and the (GPU, job) pairs of a scrape.

use super::Metrics;
use std::path::Path;
use std::process::Command;

unsafe extern "C" {
    fn geteuid() -> u32;
    fn mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

/// `program` as root: as it is when the tests run as root (CI), else through `sudo -n`.
pub fn as_root(program: &str) -> Command {
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } == 0 {
        Command::new(program)
    } else {
        let mut command = Command::new("sudo");
        command.args(["-n", program]);
        command
    }
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Makes a FIFO at `path` (a hostile input: opening it for reading blocks without a writer).
pub fn make_fifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let made = unsafe { mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

/// A process's resident memory in KiB (VmRSS).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// `gpu_job_info`'s (gpu, hpc_job) pairs, sorted.
pub fn gpu_jobs(m: &Metrics) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = m
        .find("gpu_job_info", &[])
        .iter()
        .map(|s| (s.labels["gpu"].clone(), s.labels["hpc_job"].clone()))
        .collect();
    out.sort();
    out
}
