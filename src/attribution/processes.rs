//! What the per-process series say about a process beside its pid: its name and the
//! container it runs in, read from /proc (`processes.proc_root`: a DaemonSet mounts the host's
//! /proc elsewhere). Only read when `processes.per_process` is on.
//!
//! Read through [`crate::input`] like every file from outside: a test tree or a hostile
//! mount may put a FIFO or a link where /proc has a file. A name is decoded lossily: any
//! process can set its name to bytes that are not UTF-8 (`PR_SET_NAME`), and a name with
//! U+FFFD in it says more than an empty one.

use crate::input::{self, Skips};
use std::path::Path;

/// `comm` is at most 16 bytes (TASK_COMM_LEN); more is not a process name.
const MAX_COMM: usize = 64;
/// A process's cgroup file: a line per hierarchy, a few hundred bytes on a real node.
const MAX_CGROUP: usize = 16 * 1024;

/// Marks the processes that get series of their own (the largest users of device memory
/// first, at most `max_per_gpu` per GPU) and reads their names and containers. Runs on the
/// poll thread after a round (and on the DRM-client source's thread for AMD GPUs), never
/// under the publisher's lock.
pub(crate) fn describe(devices: &mut [crate::model::DeviceSnapshot], settings: &crate::config::Processes) {
    let mut skips = Skips::new(input::Input::Proc);
    for readings in devices.iter_mut().filter_map(|d| d.readings.as_mut()) {
        if readings.processes.is_some()
            // Not shared yet on the poll thread (no copy made); a copy where it is.
            && let Some(list) = std::sync::Arc::make_mut(readings).processes.as_mut()
        {
            describe_list(list, settings, &mut skips);
        }
    }
}

/// [`describe`] for one GPU's list.
pub(crate) fn describe_list(
    list: &mut [crate::model::GpuProcess],
    settings: &crate::config::Processes,
    skips: &mut Skips,
) {
    list.sort_by(|a, b| b.used_memory_bytes.cmp(&a.used_memory_bytes).then(a.pid.cmp(&b.pid)));
    for process in list.iter_mut().take(settings.max_per_gpu as usize) {
        process.listed = true;
        process.name = name(&settings.proc_root, process.pid, skips);
        process.container_id = container_id(&settings.proc_root, process.pid, skips);
    }
}

/// The process's name (`/proc/PID/comm`), `None` when it is gone or hidden from us.
pub(crate) fn name(proc_root: &Path, pid: u32, skips: &mut Skips) -> Option<String> {
    let comm = input::read_value(&proc_root.join(pid.to_string()).join("comm"), MAX_COMM, skips)?;
    Some(input::printable(&comm))
}

/// The id of the container the process runs in, from its cgroup path: the 64-hex-digit id
/// that docker (`docker-<id>.scope`, `/docker/<id>`), containerd (`cri-containerd-<id>.scope`)
/// and CRI-O (`crio-<id>.scope`) put there. `None` outside a container.
pub(crate) fn container_id(proc_root: &Path, pid: u32, skips: &mut Skips) -> Option<String> {
    let cgroup = input::read_value(&proc_root.join(pid.to_string()).join("cgroup"), MAX_CGROUP, skips)?;
    cgroup.lines().find_map(|line| {
        let path = line.rsplit(':').next()?;
        path.rsplit('/').find_map(|part| {
            let part = part.strip_suffix(".scope").unwrap_or(part);
            let id = part.rsplit(['-', ':']).next()?;
            (id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_string())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_container_ids_from_a_proc_tree() {
        let root = tempfile::tempdir().unwrap();
        let id = "4f2a".repeat(16);
        for (pid, comm, cgroup) in [
            (
                10,
                "python3\n",
                format!("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope\n"),
            ),
            (11, "vllm\n", format!("12:memory:/docker/{id}\n0::/docker/{id}\n")),
            (12, "crio\n", format!("0::/kubepods/burstable/pod9/crio-{id}.scope\n")),
            (13, "sshd\n", "0::/system.slice/ssh.service\n".to_string()),
        ] {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), comm).unwrap();
            std::fs::write(dir.join("cgroup"), cgroup).unwrap();
        }
        let skips = &mut Skips::new(crate::input::Input::Proc);
        assert_eq!(name(root.path(), 10, skips).as_deref(), Some("python3"));
        for pid in [10, 11, 12] {
            assert_eq!(
                container_id(root.path(), pid, skips).as_deref(),
                Some(id.as_str()),
                "{pid}"
            );
        }
        assert_eq!(container_id(root.path(), 13, skips), None);
        assert_eq!(name(root.path(), 99, skips), None, "a process that is gone");
        assert!(skips.is_empty());
    }

    /// A name that is not UTF-8 is shown lossily, not as "" (PR_SET_NAME takes any bytes);
    /// a FIFO or a link where `comm` belongs is skipped at once and counted.
    #[test]
    fn hostile_proc_entries() {
        use crate::input::Reason;
        let root = tempfile::tempdir().unwrap();
        let dir = |pid: u32| {
            let d = root.path().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        std::fs::write(dir(20).join("comm"), b"tr\xffin\x1b[31m\n").unwrap();
        crate::input::make_fifo(&dir(21).join("comm"));
        std::fs::write(root.path().join("shadow"), "root:x\n").unwrap();
        std::os::unix::fs::symlink(root.path().join("shadow"), dir(22).join("comm")).unwrap();
        std::fs::write(dir(23).join("cgroup"), vec![b'0'; 1 << 20]).unwrap();
        let skips = &mut Skips::new(crate::input::Input::Proc);
        assert_eq!(
            name(root.path(), 20, skips).as_deref(),
            Some("tr\u{fffd}in\u{fffd}[31m")
        );
        let started = std::time::Instant::now();
        assert_eq!(name(root.path(), 21, skips), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(name(root.path(), 22, skips), None);
        assert_eq!(container_id(root.path(), 23, skips), None);
        assert_eq!(skips.count(Reason::NotRegularFile), 1);
        assert_eq!(skips.count(Reason::Symlink), 1);
        assert_eq!(skips.count(Reason::TooLarge), 1);
    }
}
