//! Workload attribution: which job or pod uses each GPU. Read in the background (the
//! publisher asks at most every few seconds), never on the scrape path.
//!
//! - `jobs`: dcgm-exporter's HPC job mapping layout, one file per GPU whose lines are the job
//!   ids running on it (written by a batch scheduler's prolog and cleared by its epilog;
//!   deploy/slurm/ has Slurm's).
//! - `kubelet`: which pod and container holds each GPU, from the kubelet's pod-resources API.
//! - `processes`: a compute process's name and container, for the per-process series.
//! - `drm_clients`: GPU processes from the kernel's DRM client statistics in /proc (AMD).

pub mod drm_clients;
pub mod jobs;
pub mod kubelet;
pub mod processes;
