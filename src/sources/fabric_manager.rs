//! Whether nvidia-fabricmanager runs, as a source: on a node whose GPUs report an NVLink
//! fabric and whose PCI bus shows the NVSwitches (the host of an HGX board, not a virtual
//! machine given some of its GPUs), every [`LOOK_EVERY`], its pid file (`fabric_manager.pid_file`,
//! by default where fabricmanager.cfg's `PID_FILE_PATH` puts it)
//! and that pid's `/proc/PID/comm` (`fabric_manager.process`). Elsewhere it does not look. The
//! pid file and /proc are read like every outside file: bounded, no link followed for the
//! value, nothing that can block.
//!
//! A name alone proves nothing: when the pid file names a dead pid, any user can fork until
//! they hold that pid (32,768 forks at most) and name their process `nv-fabricmanage`. So the
//! process must also run as root (real and effective uid 0, from `/proc/PID/status`, which a
//! user's non-dumpable process cannot fake as it can the owner of `/proc/PID`), and its
//! executable (`/proc/PID/exe`) must bear the configured name: a user's link named so to a
//! set-uid program runs with their real uid and the program's name.

use super::Periodic;
use super::round::PolledGpus;
use crate::config::settings::Settings;
use crate::input::{self, Input, Skips};
use crate::model::links::FabricManager;
use crate::service::versioned::Versioned;
use std::sync::Arc;
use std::time::Duration;

pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(30);
/// The bytes of a name the kernel keeps in `comm` (TASK_COMM_LEN less its NUL).
const COMM_LEN: usize = 15;

pub(crate) struct FabricManagerCheck {
    polled: Arc<Versioned<PolledGpus>>,
}

impl FabricManagerCheck {
    pub(crate) fn new(polled: Arc<Versioned<PolledGpus>>) -> FabricManagerCheck {
        FabricManagerCheck { polled }
    }
}

impl Periodic for FabricManagerCheck {
    type Value = Option<FabricManager>;
    const NAME: &'static str = "source-fabric-manager";

    fn every(&self, settings: &Settings) -> Option<Duration> {
        let fabric = self.polled.get().gpus.iter().any(|gpu| gpu.fabric);
        (settings.config.fabric_manager.check && fabric).then_some(LOOK_EVERY)
    }

    /// GPUs report their fabric from the first topology read on: look again every second
    /// until the first round is published, then every half minute while none has.
    fn look_again_while_off(&self) -> Option<Duration> {
        super::look_again_after_the_first_round(&self.polled, LOOK_EVERY)
    }

    /// None (not looked for) where no NVSwitch is on this node's PCI bus: a virtual machine
    /// given GPUs of an NVSwitch board reports their fabric, but the host's fabric manager
    /// serves it (seen on a cloud VM of two H200s: fabric Completed, no switch, no manager).
    fn read(&mut self, settings: &Settings) -> Option<FabricManager> {
        if crate::input::pci::nvswitches_on_the_bus(&settings.sys_root) == 0 {
            return None;
        }
        let config = &settings.config.fabric_manager;
        Some(look(
            &config.pid_file,
            &config.process,
            &settings.config.processes.proc_root,
        ))
    }
}

/// The pid in `pid_file`, and whether `/proc/PID/comm` under `proc_root` names `process`.
pub(crate) fn look(pid_file: &std::path::Path, process: &str, proc_root: &std::path::Path) -> FabricManager {
    let mut skips = Skips::new(Input::Proc);
    let Some(text) = input::read_value(pid_file, 32, &mut skips) else {
        return FabricManager {
            running: false,
            pid: None,
            detail: format!("no pid file at {}", pid_file.display()),
        };
    };
    let Some(pid) = text.parse::<u32>().ok().filter(|p| *p > 0) else {
        return FabricManager {
            running: false,
            pid: None,
            detail: format!("{} holds no pid", pid_file.display()),
        };
    };
    let dir = proc_root.join(pid.to_string());
    let comm = input::read_value(&dir.join("comm"), 64, &mut skips);
    // The kernel keeps 15 bytes of a process name: `nv-fabricmanager` is `nv-fabricmanage`.
    let short = crate::input::truncate_utf8(process, COMM_LEN);
    let named = comm.as_deref().is_some_and(|c| c == process || c == short);
    let not_proven = named.then(|| not_the_manager(&dir, process, &mut skips)).flatten();
    let running = named && not_proven.is_none();
    let detail = match (&comm, not_proven) {
        (Some(name), Some(why)) => format!("pid {pid} from {} is named {name} but {why}", pid_file.display()),
        (Some(name), None) if running => format!("pid {pid} ({name})"),
        (Some(name), None) => format!("pid {pid} from {} is {name}, not {process}", pid_file.display()),
        (None, _) => format!("pid {pid} from {} is not running", pid_file.display()),
    };
    FabricManager {
        running,
        pid: Some(pid),
        detail,
    }
}

/// Why the process at `dir` (/proc/PID), named as the fabric manager, is not it: not root's,
/// or another executable. None when it is.
fn not_the_manager(dir: &std::path::Path, process: &str, skips: &mut Skips) -> Option<String> {
    let status = input::read_text(&dir.join("status"), 4096, input::Links::Refuse).map_err(|e| e.record(skips));
    let uids: Option<Vec<u32>> = status.ok().and_then(|s| {
        let line = s.text.lines().find_map(|l| l.strip_prefix("Uid:"))?.to_string();
        line.split_whitespace().take(2).map(|u| u.parse().ok()).collect()
    });
    match uids.as_deref() {
        Some([0, 0]) => {}
        Some([real, effective]) => return Some(format!("runs as uid {real} (effective {effective}), not root")),
        _ => return Some("its owner cannot be read".to_string()),
    }
    match std::fs::read_link(dir.join("exe")) {
        Ok(target) => {
            let name = target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            // A binary replaced by an upgrade while it runs shows as `name (deleted)`.
            let name = name.strip_suffix(" (deleted)").unwrap_or(&name);
            (name != process).then(|| format!("its executable is {}", input::printable(&target.to_string_lossy())))
        }
        // Without root gpuwarden may not read another user's executable link; root's uid above
        // is what a user cannot fake.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => None,
        Err(_) => Some("its executable cannot be read".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_only_when_the_pid_files_process_is_the_fabric_manager() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        // As the kernel shows them: 15 bytes of the name, the uids, the executable.
        let process = |pid: &str, comm: &str, uid: u32, exe: &str| {
            let dir = proc_root.join(pid);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(
                dir.join("status"),
                format!("Name:\t{comm}\nUmask:\t0022\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n"),
            )
            .unwrap();
            std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        };
        process("4242", "nv-fabricmanage", 0, "/usr/bin/nv-fabricmanager");
        process("77", "bash", 0, "/usr/bin/bash");
        // A user who forked until they held the pid and named themselves so.
        process("1000", "nv-fabricmanage", 1000, "/home/mallory/nv-fabricmanager");
        // A user's link named so to a set-uid program: effective root, real uid theirs.
        process("1001", "nv-fabricmanage", 0, "/usr/bin/passwd");
        std::fs::write(
            proc_root.join("1001/status"),
            "Name:\tnv-fabricmanage\nUid:\t1000\t0\t0\t0\n",
        )
        .unwrap();
        // Root's, but another program.
        process("1002", "nv-fabricmanage", 0, "/tmp/x/nv-fabricmanager-not");
        // Upgraded while it runs.
        process("1003", "nv-fabricmanage", 0, "/usr/bin/nv-fabricmanager (deleted)");
        let pid_file = dir.path().join("nv-fabricmanager.pid");
        let check = |content: Option<&str>| {
            match content {
                Some(c) => std::fs::write(&pid_file, c).unwrap(),
                None => {
                    let _ = std::fs::remove_file(&pid_file);
                }
            }
            look(&pid_file, "nv-fabricmanager", &proc_root)
        };
        let up = check(Some("4242\n"));
        assert!(up.running && up.pid == Some(4242), "{up:?}");
        assert_eq!(up.detail, "pid 4242 (nv-fabricmanage)");
        let stale = check(Some("5151\n"));
        assert!(!stale.running && stale.detail.contains("is not running"), "{stale:?}");
        let reused = check(Some("77\n"));
        assert!(
            !reused.running && reused.detail.contains("is bash, not nv-fabricmanager"),
            "{reused:?}"
        );
        assert!(!check(Some("garbage")).running);
        let forged = check(Some("1000\n"));
        assert!(
            !forged.running && forged.detail.contains("runs as uid 1000"),
            "{forged:?}"
        );
        let setuid = check(Some("1001\n"));
        assert!(
            !setuid.running && setuid.detail.contains("runs as uid 1000 (effective 0)"),
            "{setuid:?}"
        );
        let other = check(Some("1002\n"));
        assert!(
            !other.running && other.detail.contains("its executable is"),
            "{other:?}"
        );
        assert!(check(Some("1003\n")).running, "an upgraded binary still runs");
        let none = check(None);
        assert!(!none.running && none.detail.starts_with("no pid file at"), "{none:?}");
        // A FIFO or a link where the pid file belongs is not read, and does not block.
        crate::input::make_fifo(&pid_file);
        let started = std::time::Instant::now();
        assert!(!look(&pid_file, "nv-fabricmanager", &proc_root).running);
        assert!(started.elapsed() < Duration::from_secs(1));
        std::fs::remove_file(&pid_file).unwrap();
        std::os::unix::fs::symlink(proc_root.join("4242/comm"), &pid_file).unwrap();
        assert!(!look(&pid_file, "nv-fabricmanager", &proc_root).running);
    }
}
