//! Whether nvidia-fabricmanager runs, as a source: on a node whose GPUs report an NVLink
//! fabric and whose PCI bus shows the NVSwitches (the host of an HGX board, not a virtual
//! machine given some of its GPUs), every [`LOOK_EVERY`], its pid file (`fabric_manager.pid_file`,
//! by default where fabricmanager.cfg's `PID_FILE_PATH` puts it)
//! and that pid's `/proc/PID/comm` (`fabric_manager.process`). Elsewhere it does not look. The
//! pid file and /proc are read like every outside file: bounded, no link followed for the
//! value, nothing that can block.

use super::Periodic;
use crate::config::settings::Settings;
use crate::input::{self, Input, Skips};
use crate::model::links::FabricManager;
use crate::snapshot::store::Store;
use std::sync::Arc;
use std::time::Duration;

pub const LOOK_EVERY: Duration = Duration::from_secs(30);
/// The bytes of a name the kernel keeps in `comm` (TASK_COMM_LEN less its NUL).
const COMM_LEN: usize = 15;

pub struct FabricManagerCheck {
    store: Arc<Store>,
}

impl FabricManagerCheck {
    pub fn new(store: Arc<Store>) -> FabricManagerCheck {
        FabricManagerCheck { store }
    }
}

impl Periodic for FabricManagerCheck {
    type Value = Option<FabricManager>;
    const NAME: &'static str = "source-fabric-manager";

    fn every(&self, settings: &Settings) -> Option<Duration> {
        let latest = self.store.latest();
        let fabric = latest
            .devices
            .iter()
            .any(|d| d.readings.as_ref().is_some_and(|r| r.fabric.is_some()));
        (settings.config.fabric_manager.check && fabric).then_some(LOOK_EVERY)
    }

    /// GPUs report their fabric from the first topology read on: look again every second
    /// until the first round is published, then every half minute while none has.
    fn look_again_while_off(&self) -> Option<Duration> {
        super::look_again_after_the_first_round(&self.store, LOOK_EVERY)
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
pub fn look(pid_file: &std::path::Path, process: &str, proc_root: &std::path::Path) -> FabricManager {
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
    let comm = input::read_value(&proc_root.join(pid.to_string()).join("comm"), 64, &mut skips);
    // The kernel keeps 15 bytes of a process name: `nv-fabricmanager` is `nv-fabricmanage`.
    let short = crate::input::truncate_utf8(process, COMM_LEN);
    let running = comm.as_deref().is_some_and(|c| c == process || c == short);
    let detail = match &comm {
        Some(name) if running => format!("pid {pid} ({name})"),
        Some(name) => format!("pid {pid} from {} is {name}, not {process}", pid_file.display()),
        None => format!("pid {pid} from {} is not running", pid_file.display()),
    };
    FabricManager {
        running,
        pid: Some(pid),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_only_when_the_pid_files_process_is_the_fabric_manager() {
        let dir = tempfile::tempdir().unwrap();
        let proc_root = dir.path().join("proc");
        std::fs::create_dir_all(proc_root.join("4242")).unwrap();
        // As the kernel shows it: 15 bytes of the name.
        std::fs::write(proc_root.join("4242/comm"), "nv-fabricmanage\n").unwrap();
        std::fs::create_dir_all(proc_root.join("77")).unwrap();
        std::fs::write(proc_root.join("77/comm"), "bash\n").unwrap();
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
