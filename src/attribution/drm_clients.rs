//! GPU processes from the kernel's DRM client statistics (Documentation/gpu/drm-usage-stats):
//! every open DRM file a driver such as amdgpu exposes has `/proc/PID/fdinfo/FD` lines
//! `drm-driver`, `drm-pdev` (the GPU's PCI address), `drm-client-id` and `drm-memory-vram`.
//! This is what the AMD backends have in place of NVML's compute-process list; `nvidia`'s
//! CUDA contexts do not show here, so NVIDIA GPUs keep NVML's list.
//!
//! Walking every process's file descriptors costs real time on a busy node, so only fds that
//! point at a DRM device (`/dev/dri/...`) are read, and the walk runs at most every
//! [`SCAN_EVERY`] (see the publisher).

use crate::input;
use crate::model::GpuProcess;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// An fdinfo file with DRM usage statistics is about a kilobyte (one line per engine and
/// memory region); more is not one.
const MAX_FDINFO: usize = 16 * 1024;

/// How often /proc is walked for DRM clients.
pub(crate) const SCAN_EVERY: Duration = Duration::from_secs(10);

/// Processes with a DRM client open, by the GPU's PCI bus id (lower case, `0000:c1:00.0`);
/// device memory is the client's `drm-memory-vram`, summed over the process's clients of
/// that GPU. `Err` when some process's file descriptors could not be looked at (another
/// user's, without CAP_SYS_PTRACE) or /proc cannot be read: the list would be short, and a
/// short list is not shown (no made-up counts).
pub(crate) fn scan(
    proc_root: &Path,
    skips: &mut input::Skips,
) -> Result<BTreeMap<String, Vec<GpuProcess>>, super::AttributionError> {
    let mut by_gpu: BTreeMap<String, BTreeMap<u32, (Vec<String>, u64)>> = BTreeMap::new();
    let entries = std::fs::read_dir(proc_root).map_err(|source| super::AttributionError::Read {
        what: "processes.proc_root",
        path: proc_root.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let fd_dir = entry.path().join("fd");
        let fds = match std::fs::read_dir(&fd_dir) {
            Ok(fds) => fds,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(super::AttributionError::FileDescriptors { fd_dir, source: e });
            }
            // The process ended, or is a kernel thread.
            Err(_) => continue,
        };
        for fd in fds.flatten() {
            let is_drm = std::fs::read_link(fd.path()).is_ok_and(|target| target.starts_with("/dev/dri/"));
            if !is_drm {
                continue;
            }
            // Bounded and non-blocking like every file from outside (crate::input).
            let fdinfo = entry.path().join("fdinfo").join(fd.file_name());
            let info = match input::read_text(&fdinfo, MAX_FDINFO, input::Links::Refuse) {
                Ok(info) => info.text,
                Err(refused) => {
                    refused.record(skips);
                    continue;
                }
            };
            let Some(client) = parse_fdinfo(&info) else { continue };
            let (clients, vram) = by_gpu.entry(client.pdev).or_default().entry(pid).or_default();
            // Several fds of one process can share a client (dup, fork): count it once.
            if !clients.contains(&client.id) {
                clients.push(client.id);
                *vram += client.vram_bytes;
            }
        }
    }
    Ok(by_gpu
        .into_iter()
        .map(|(gpu, processes)| {
            let list = processes
                .into_iter()
                .map(|(pid, (_, vram))| GpuProcess {
                    pid,
                    used_memory_bytes: Some(vram),
                    ..GpuProcess::default()
                })
                .collect();
            (gpu, list)
        })
        .collect())
}

struct Client {
    pdev: String,
    id: String,
    vram_bytes: u64,
}

/// The DRM client in one fdinfo file; `None` when the file has no DRM usage statistics.
fn parse_fdinfo(text: &str) -> Option<Client> {
    let mut driver = None;
    let mut pdev = None;
    let mut id = None;
    let mut vram = 0u64;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "drm-driver" => driver = Some(value),
            "drm-pdev" => pdev = crate::input::pci::normalize_bus_id(value),
            "drm-client-id" => id = Some(value.to_string()),
            "drm-memory-vram" => vram = parse_size(value).unwrap_or(0),
            _ => {}
        }
    }
    driver?;
    Some(Client {
        pdev: pdev?,
        id: id?,
        vram_bytes: vram,
    })
}

/// `1052 KiB` -> 1077248; the units drm-usage-stats allows (none, KiB, MiB, GiB).
fn parse_size(value: &str) -> Option<u64> {
    let mut parts = value.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    let scale = match parts.next() {
        None => 1,
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some("GiB") => 1 << 30,
        Some(_) => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const CLIENT: &str = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1160\ndrm-driver:\tamdgpu\n\
        drm-client-id:\t{ID}\ndrm-pdev:\t0000:C1:00.0\npasid:\t32780\ndrm-memory-vram:\t{VRAM} KiB\n\
        drm-memory-gtt:\t12 KiB\ndrm-engine-gfx:\t12345 ns\n";

    /// A fixture /proc: pid 100 with two fds on one client of GPU c1 and one on another
    /// client, pid 200 on GPU c1 too, pid 300 with a plain file, pid 400 with a DRM fd
    /// whose fdinfo has no usage statistics (a display-only driver).
    fn fixture(root: &Path) {
        let add = |pid: u32, fd: u32, target: &str, fdinfo: &str| {
            let dir = root.join(pid.to_string());
            std::fs::create_dir_all(dir.join("fd")).unwrap();
            std::fs::create_dir_all(dir.join("fdinfo")).unwrap();
            symlink(target, dir.join("fd").join(fd.to_string())).unwrap();
            std::fs::write(dir.join("fdinfo").join(fd.to_string()), fdinfo).unwrap();
        };
        let client = |id: u32, vram_kib: u64| {
            CLIENT
                .replace("{ID}", &id.to_string())
                .replace("{VRAM}", &vram_kib.to_string())
        };
        add(100, 5, "/dev/dri/renderD128", &client(34, 1_048_576));
        add(100, 6, "/dev/dri/renderD128", &client(34, 1_048_576));
        add(100, 7, "/dev/dri/renderD128", &client(35, 1024));
        add(200, 3, "/dev/dri/renderD128", &client(40, 2048));
        add(300, 3, "/var/log/syslog", &client(50, 4096));
        add(400, 9, "/dev/dri/card0", "pos:\t0\nflags:\t02\n");
        std::fs::create_dir_all(root.join("self")).unwrap();
    }

    #[test]
    fn drm_clients_by_gpu_and_process() {
        let root = tempfile::tempdir().unwrap();
        fixture(root.path());
        let found = scan(root.path(), &mut input::Skips::new(input::Input::Proc)).unwrap();
        assert_eq!(found.keys().collect::<Vec<_>>(), ["0000:c1:00.0"]);
        let list: Vec<(u32, Option<u64>)> = found["0000:c1:00.0"]
            .iter()
            .map(|p| (p.pid, p.used_memory_bytes))
            .collect();
        assert_eq!(
            list,
            [(100, Some((1_048_576 + 1024) * 1024)), (200, Some(2048 * 1024))],
            "a client shared by two fds counts once; non-DRM files and DRM files without statistics count not at all"
        );
    }

    /// A FIFO where an fdinfo file is, and a 1 MiB one: skipped at once and counted, the
    /// other clients still found.
    #[test]
    fn hostile_fdinfo_files_are_skipped() {
        let root = tempfile::tempdir().unwrap();
        fixture(root.path());
        let dir = root.path().join("500");
        std::fs::create_dir_all(dir.join("fd")).unwrap();
        std::fs::create_dir_all(dir.join("fdinfo")).unwrap();
        for fd in [3, 4] {
            symlink("/dev/dri/renderD128", dir.join("fd").join(fd.to_string())).unwrap();
        }
        crate::input::make_fifo(&dir.join("fdinfo/3"));
        std::fs::write(dir.join("fdinfo/4"), vec![b'x'; 1 << 20]).unwrap();
        let mut skips = input::Skips::new(input::Input::Proc);
        let started = std::time::Instant::now();
        let found = scan(root.path(), &mut skips).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(found["0000:c1:00.0"].len(), 2, "pids 100 and 200 as before");
        assert_eq!(skips.count(input::Reason::NotRegularFile), 1);
    }

    #[test]
    fn a_missing_proc_gives_nothing() {
        assert!(
            scan(
                Path::new("/nonexistent/proc"),
                &mut input::Skips::new(input::Input::Proc)
            )
            .is_err()
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1052 KiB"), Some(1052 * 1024));
        assert_eq!(parse_size("3 GiB"), Some(3 << 30));
        assert_eq!(parse_size("77"), Some(77));
        assert_eq!(parse_size("5 furlongs"), None);
    }
}
