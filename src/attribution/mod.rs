//! Workload attribution: which job or pod uses each GPU. Read in the background (the
//! publisher asks at most every few seconds), never on the scrape path.
//!
//! - `jobs`: dcgm-exporter's HPC job mapping layout, one file per GPU whose lines are the job
//!   ids running on it (written by a batch scheduler's prolog and cleared by its epilog;
//!   deploy/slurm/ has Slurm's).
//! - `kubelet`: which pod and container holds each GPU, from the kubelet's pod-resources API.
//! - `processes`: a compute process's name and container, for the per-process series.
//! - `drm_clients`: GPU processes from the kernel's DRM client statistics in /proc (AMD).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `drm_clients.rs` | GPU processes from the kernel's DRM client statistics (Documentation/gpu/drm-usage-stats): every open DRM file a driver such as amdgpu exposes has... |
//! | `jobs.rs` | The HPC job mapping directory (`hpc_jobs.mapping_dir`), in dcgm-exporter's layout: one file per GPU, named by the GPU's index (as `nvidia-smi` and `gpu="N"`... |
//! | `kubelet.rs` | Which pod holds each GPU, from the kubelet's pod-resources API: gRPC `v1.PodResourcesLister/List` over the unix socket... |
//! | `processes.rs` | What the per-process series say about a process beside its pid: its name and the container it runs in, read from /proc (`processes.proc_root`: a DaemonSet... |
//! <!-- /files -->

pub(crate) mod drm_clients;
pub(crate) mod jobs;
pub(crate) mod kubelet;
pub(crate) mod processes;

use std::path::PathBuf;
use std::time::Duration;

/// Why an attribution input could not be read at all. Each says what to fix; what was
/// skipped inside an input that could be read is counted (`input::Skips`), not an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttributionError {
    #[error("cannot read {what} {}: {source}", .path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot look at {}'s file descriptors: {source}", .fd_dir.display()
    )]
    FileDescriptors { fd_dir: PathBuf, source: std::io::Error },
    #[error(
        "hpc_jobs.mapping_dir {} belongs to uid {owner}, not to root or to gpuwarden's user (uid {me}): \
         other users could write job ids for any GPU; chown it to root (the prolog runs as root)",
        .dir.display()
    )]
    MappingDirOwner { dir: PathBuf, owner: u32, me: u32 },
    #[error(
        "hpc_jobs.mapping_dir {} is writable by its group or by everyone (mode {mode:o}): other users could \
         write job ids for any GPU; chmod go-w it (or set the sticky bit)",
        .dir.display()
    )]
    MappingDirWritable { dir: PathBuf, mode: u32 },
    #[error("cannot connect: {0}")]
    KubeletConnect(tonic::transport::Error),
    #[error("not ready: {0}")]
    KubeletNotReady(tonic::transport::Error),
    #[error("List failed: {}: {}", .0.code(), .0.message())]
    KubeletList(Box<tonic::Status>),
    #[error("no answer within {0:?}")]
    KubeletTimeout(Duration),
}
