//! `--demo`: the real daemon over the simulated NVML library and a shipped scenario of
//! eight GPUs, so that someone without a GPU sees real output.
//!
//! The simulated library (tests/sim-nvml) is built by `cargo build --workspace` next to the
//! gpuwarden binary; the Debian package installs it under /usr/lib/gpuwarden.

use std::path::{Path, PathBuf};

/// Eight H200s with something to look at: clock events, one x8 link, ECC errors, a pending
/// row remap, one GPU whose persistence mode is off.
pub const SCENARIO: &str = include_str!("../../config/demo-scenario.yaml");

/// The demo's kernel log: a few XIDs (an application fault, a contained memory error and
/// its clean-up, a row-remap event), as /dev/kmsg records.
pub const KERNEL_LOG: &str = include_str!("../../config/demo-kernel-log.txt");

pub const LIBRARY_FILE: &str = "libgpuwarden_sim_nvml.so";

/// The simulated CUDA driver and cuBLAS (tests/sim-cuda): the demo's probe runs on it, so a
/// validation after a clear passes (or fails, when `demo inject --slow-probe` says so).
pub const CUDA_LIBRARY_FILE: &str = "libgpuwarden_sim_cuda.so";

/// The demo's batch jobs: (GPU index, job id).
pub const DEMO_JOBS: [(&str, &str); 2] = [("1", "48213"), ("7", "48217")];

/// Where the simulated NVML library is looked for, in order.
pub fn library_candidates() -> Vec<PathBuf> {
    candidates(LIBRARY_FILE)
}

/// Where a simulated library is looked for, in order.
fn candidates(file: &str) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
    {
        // Cargo builds it into deps/ as the daemon's dependency and copies it next to the
        // binary only when it builds the crate itself (`--workspace`): a copy there can be
        // older than deps/'s, so the newer of the two goes first.
        candidates.extend(newest_first(vec![dir.join(file), dir.join("deps").join(file)]));
    }
    candidates.push(PathBuf::from("/usr/lib/gpuwarden").join(file));
    candidates
}

/// The paths by modification time, newest first; those that do not exist last (the tests
/// pick their simulated library with it too).
pub fn newest_first(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort_by_key(|path| std::cmp::Reverse(path.metadata().and_then(|m| m.modified()).ok()));
    paths
}

/// What the demo needs: the simulated library and the demo's kernel log. The scenario and
/// kernel log live in a directory of their own under the temp directory, removed when this
/// is dropped (keep it until the command is done: the simulated library reads the scenario
/// while the daemon runs).
pub struct Demo {
    pub library: PathBuf,
    pub kernel_log: PathBuf,
    /// A job mapping directory: the demo's two busy GPUs run batch jobs.
    pub jobs: PathBuf,
    /// The demo's health journal (gone with the demo, like the rest of its files).
    pub state: PathBuf,
    /// The demo's local API socket: `gpuwarden health --socket` it.
    pub socket: PathBuf,
    /// The demo's sysfs root: its network ports (demo_fabric.rs).
    pub sys_root: PathBuf,
    /// The simulated CUDA the probe loads (libcuda.so.1, libcublas.so.13 and libnccl.so.2
    /// links to it on the probe's LD_LIBRARY_PATH); `None` where it was not built.
    pub cuda: Option<PathBuf>,
    dir: PathBuf,
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            log::debug!("cannot remove the demo's files in {}: {e}", self.dir.display());
        }
    }
}

/// Why the demo cannot start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(
        "the demo needs the simulated NVML library ({LIBRARY_FILE}) next to the gpuwarden binary; \
         build it with `cargo build --release --workspace` (looked in: {looked_in})"
    )]
    NoLibrary { looked_in: String },
    #[error(
        "{} exists and this demo did not make it (another user's, a link, or open to others); \
         the demo will not write there: remove it, or set TMPDIR to a directory of your own",
        .path.display()
    )]
    NotOurs { path: PathBuf },
    #[error("cannot write {what} to {}: {source}", .path.display())]
    Write {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn write_error(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> DemoError {
    let path = path.to_path_buf();
    move |source| DemoError::Write { what, path, source }
}

/// Makes the demo's directory, 0700, only if nothing stands at `dir` (mkdir does not follow
/// a link there): a directory another user made first at the predictable name would let her
/// choose where root writes and which CUDA the validation probe loads. A directory of ours
/// left by an earlier demo with the same PID (0700, ours, no link) is removed and made again.
fn make_own_dir(dir: &Path) -> Result<(), DemoError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let create = || std::fs::DirBuilder::new().mode(0o700).create(dir);
    match create() {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(write_error("the demo's directory", dir)(e));
        }
        Err(_) => {}
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let ours = std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == me && m.permissions().mode() & 0o7777 == 0o700);
    if !ours {
        return Err(DemoError::NotOurs {
            path: dir.to_path_buf(),
        });
    }
    std::fs::remove_dir_all(dir).map_err(write_error("the demo's directory", dir))?;
    create().map_err(write_error("the demo's directory", dir))
}

/// The simulated NVML library, the first of [`library_candidates`] that exists.
fn simulated_library() -> Result<PathBuf, DemoError> {
    library_candidates()
        .into_iter()
        .find(|p| p.exists())
        .ok_or_else(|| DemoError::NoLibrary {
            looked_in: library_candidates()
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Writes the demo scenario and kernel log to temporary files and finds the simulated library.
/// Must run before any thread starts: it sets the environment variable the library reads.
pub fn prepare() -> Result<Demo, DemoError> {
    let library = simulated_library()?;
    let dir = std::env::temp_dir().join(format!("gpuwarden-demo-{}", std::process::id()));
    make_own_dir(&dir)?;
    // From here on, dropping `demo` removes the directory, also when a write below fails.
    let demo = Demo {
        library,
        kernel_log: dir.join("kmsg"),
        jobs: dir.join("jobs"),
        state: dir.join("state.db"),
        socket: dir.join("gpuwarden.sock"),
        sys_root: dir.join("sysfs"),
        cuda: candidates(CUDA_LIBRARY_FILE).into_iter().find(|p| p.exists()),
        dir: dir.clone(),
    };
    super::demo_fabric::write_tree(&demo.sys_root).map_err(write_error("the demo's network ports", &demo.sys_root))?;
    // GPUs 1 and 7 are the loaded ones; what a Slurm prolog (deploy/slurm/) would write.
    std::fs::create_dir_all(&demo.jobs).map_err(write_error("the demo's job directory", &demo.jobs))?;
    for (gpu, job) in DEMO_JOBS {
        std::fs::write(demo.jobs.join(gpu), format!("{job}\n")).map_err(write_error("the demo's jobs", &demo.jobs))?;
    }
    let scenario = dir.join("scenario.yaml");
    std::fs::write(&scenario, SCENARIO).map_err(write_error("the demo scenario", &scenario))?;
    std::fs::write(&demo.kernel_log, KERNEL_LOG).map_err(write_error("the demo kernel log", &demo.kernel_log))?;
    // SAFETY: called from main before the runtime or any other thread exists.
    unsafe { std::env::set_var("GPUWARDEN_SIM_NVML_SCENARIO", &scenario) };
    if let Some(library) = &demo.cuda {
        let cuda = dir.join("cuda");
        std::fs::create_dir_all(&cuda).map_err(write_error("the demo's CUDA directory", &cuda))?;
        // NCCL too: the simulated library exports its calls, for the all-reduce across GPUs.
        for name in [
            "libcuda.so.1",
            "libcuda.so",
            "libcublas.so.13",
            "libcublas.so",
            "libnccl.so.2",
        ] {
            std::os::unix::fs::symlink(library, cuda.join(name)).map_err(write_error("the demo's CUDA", &cuda))?;
        }
        // The probe is a child process: it loads CUDA by soname from here. The daemon
        // itself never loads CUDA.
        let path = match std::env::var_os("LD_LIBRARY_PATH") {
            Some(old) if !old.is_empty() => {
                let mut path = cuda.into_os_string();
                path.push(":");
                path.push(old);
                path
            }
            _ => cuda.into_os_string(),
        };
        // SAFETY: as above, before any thread exists.
        unsafe { std::env::set_var("LD_LIBRARY_PATH", path) };
    }
    Ok(demo)
}

/// A demo that runs now, as `events`, `report`, `health` and `demo inject` find it: its
/// directory, journal and socket.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningDemo {
    pub pid: u32,
    pub dir: PathBuf,
    pub state: PathBuf,
    pub socket: PathBuf,
}

/// The demo `--demo` (the newest, `pid` `None`) or `--demo-pid PID` means. With several
/// running and no pid it says on stderr which one it took and how to choose another, so a
/// command never reads another demo's journal unannounced.
pub fn choose(pid: Option<u32>) -> Result<RunningDemo, NoDemo> {
    choose_from(running_all(), pid)
}

impl RunningDemo {
    /// Points this process's simulated NVML at the running demo's scenario (the faults
    /// `demo inject` put in, the persistence modes its daemon set), so `check --demo` polls
    /// the demo's GPUs as they are now. Call before any thread exists.
    pub fn attach(&self) -> Result<crate::config::Overrides, DemoError> {
        let library = simulated_library()?;
        // SAFETY: called from main before the runtime or any other thread exists.
        unsafe { std::env::set_var("GPUWARDEN_SIM_NVML_SCENARIO", self.dir.join("scenario.yaml")) };
        // Its files, as `check --demo` reads them (nothing of them is written).
        Ok(crate::config::Overrides {
            nvml_library_path: Some(library),
            kernel_log_path: Some(self.dir.join("kmsg")),
            no_pci_census: true,
            hpc_jobs_dir: Some(self.dir.join("jobs")),
            sysfs_root: Some(self.dir.join("sysfs")),
            no_fabric_manager: true,
            ..crate::config::Overrides::default()
        })
    }
}

/// The newest running demo's files as `check --demo` reads them (see [`RunningDemo::attach`]),
/// said on stderr; `None` when no demo runs (then `check --demo` polls a fresh one).
pub fn attach_running() -> Option<Result<crate::config::Overrides, crate::service::exit::CliError>> {
    let running = choose(None).ok()?;
    eprintln!("gpuwarden: checking the running demo (pid {})", running.pid);
    Some(running.attach().map_err(|e| {
        crate::service::exit::CliError::new(crate::service::exit::Exit::FAILURE, format!("gpuwarden: {e}"))
    }))
}

fn choose_from(all: Vec<RunningDemo>, pid: Option<u32>) -> Result<RunningDemo, NoDemo> {
    let pids = || all.iter().map(|d| d.pid.to_string()).collect::<Vec<_>>().join(", ");
    match pid {
        Some(pid) => all
            .iter()
            .find(|d| d.pid == pid)
            .cloned()
            .ok_or_else(|| NoDemo::NotThatPid { pid, running: pids() }),
        None => {
            let newest = all.first().cloned().ok_or(NoDemo::NoneRunning)?;
            if all.len() > 1 {
                eprintln!(
                    "gpuwarden: {} demos run (pids {}); this is the newest, pid {} (--demo-pid PID chooses)",
                    all.len(),
                    pids(),
                    newest.pid
                );
            }
            Ok(newest)
        }
    }
}

/// Why `--demo` or `--demo-pid` found no demo.
#[derive(Debug, thiserror::Error)]
pub enum NoDemo {
    #[error("no demo is running (start one with `gpuwarden run --demo`)")]
    NoneRunning,
    #[error("no demo runs as pid {pid} (running: {})", if .running.is_empty() { "none" } else { .running })]
    NotThatPid { pid: u32, running: String },
}

/// The newest demo running now, saying so when there are several (see [`choose`]).
pub fn running() -> Option<RunningDemo> {
    choose(None).ok()
}

/// Every demo running now, newest first, found in the temp directory (`gpuwarden-demo-PID`).
/// The temp directory is everyone's to write, so a directory counts only when it is a real
/// directory (no link) owned by this user, and its PID is a live `gpuwarden` process of this
/// user: a planted `gpuwarden-demo-1` is not followed.
pub fn running_all() -> Vec<RunningDemo> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut found: Vec<(u64, RunningDemo)> = Vec::new();
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    for entry in entries.flatten().take(100_000) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("gpuwarden-demo-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        let alive = std::fs::metadata(&proc_dir).is_ok_and(|m| m.uid() == uid)
            && std::fs::read_to_string(proc_dir.join("comm")).is_ok_and(|c| c.trim() == "gpuwarden");
        if !alive {
            continue;
        }
        let dir = entry.path();
        // Newest by when its process started, not by the directory's time, which every file
        // `demo inject` writes there moves.
        found.push((
            started(&proc_dir).unwrap_or(0),
            RunningDemo {
                pid,
                state: dir.join("state.db"),
                socket: dir.join("gpuwarden.sock"),
                dir,
            },
        ));
    }
    found.sort_by_key(|(started, demo)| std::cmp::Reverse((*started, demo.pid)));
    found.into_iter().map(|(_, demo)| demo).collect()
}

/// When the process of `proc_dir` started, in clock ticks since boot (field 22 of its
/// `stat`, counted after the name's closing parenthesis, which the name itself may hold).
fn started(proc_dir: &Path) -> Option<u64> {
    let stat = std::fs::read_to_string(proc_dir.join("stat")).ok()?;
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn the_demo_directory_is_made_only_where_nothing_of_another_stood() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gpuwarden-demo-1");
        make_own_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777, 0o700);
        // A stale one of ours (same PID, earlier demo): made again, empty.
        std::fs::write(dir.join("left"), b"x").unwrap();
        make_own_dir(&dir).unwrap();
        assert!(!dir.join("left").exists());
        // A link planted at the name: refused, and where it points is untouched.
        std::fs::remove_dir(&dir).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        let e = make_own_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("this demo did not make it"), "{e}");
        assert!(elsewhere.exists() && dir.is_symlink());
        // A directory open to others, or another user's.
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(make_own_dir(&dir), Err(DemoError::NotOurs { .. })));
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&dir, Some(1000), Some(1000)).unwrap();
            assert!(matches!(make_own_dir(&dir), Err(DemoError::NotOurs { .. })));
        }
    }

    #[test]
    fn the_newer_built_library_is_tried_first_and_a_missing_one_last() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new, missing) = (
            dir.path().join("old.so"),
            dir.path().join("new.so"),
            dir.path().join("none.so"),
        );
        for (path, age) in [(&old, 3600), (&new, 60)] {
            let file = std::fs::File::create(path).unwrap();
            file.set_modified(SystemTime::now() - Duration::from_secs(age)).unwrap();
        }
        assert_eq!(
            newest_first(vec![missing.clone(), old.clone(), new.clone()]),
            [new, old, missing]
        );
    }
}
