//! What the per-process series say about a process beside its pid: its name and the
//! container it runs in, read from /proc (`processes.proc_root`: a DaemonSet mounts the host's
//! /proc elsewhere). Only read when `processes.per_process` is on.

use std::path::Path;

/// The process's name (`/proc/PID/comm`), `None` when it is gone or hidden from us.
pub fn name(proc_root: &Path, pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm")).ok()?;
    let comm = comm.trim();
    (!comm.is_empty()).then(|| comm.chars().take(64).collect())
}

/// The id of the container the process runs in, from its cgroup path: the 64-hex-digit id
/// that docker (`docker-<id>.scope`, `/docker/<id>`), containerd (`cri-containerd-<id>.scope`)
/// and CRI-O (`crio-<id>.scope`) put there. `None` outside a container.
pub fn container_id(proc_root: &Path, pid: u32) -> Option<String> {
    let cgroup = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
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
        assert_eq!(name(root.path(), 10).as_deref(), Some("python3"));
        for pid in [10, 11, 12] {
            assert_eq!(container_id(root.path(), pid).as_deref(), Some(id.as_str()), "{pid}");
        }
        assert_eq!(container_id(root.path(), 13), None);
        assert_eq!(name(root.path(), 99), None, "a process that is gone");
    }
}
