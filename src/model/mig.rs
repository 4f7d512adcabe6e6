//! Multi-Instance GPU: whether a GPU is partitioned, and its GPU instances.

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Mig {
    /// MIG mode now, and what it becomes at the next GPU reset.
    pub enabled: bool,
    pub pending: bool,
    pub instances: Vec<MigDevice>,
}

/// One MIG device: a compute instance in a GPU instance, with a UUID of its own (what
/// `CUDA_VISIBLE_DEVICES` and the kubelet name).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MigDevice {
    pub uuid: String,
    pub gpu_instance: u32,
    pub compute_instance: Option<u32>,
    /// `1g.18gb`, `3g.71gb`, ...: the profile part of the MIG device's name.
    pub profile: String,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// GPM activity of its GPU instance over the last `poll.gpm_interval`; `None` on the
    /// first interval and where the driver gives none.
    pub activity: Option<super::activity::Activity>,
}
