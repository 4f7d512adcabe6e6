//! Multi-Instance GPU: whether a GPU is partitioned, and its GPU instances.

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Mig {
    /// MIG mode now, and what it becomes at the next GPU reset.
    pub enabled: bool,
    pub pending: bool,
    pub instances: Vec<MigDevice>,
}

impl Mig {
    /// The first MIG device of each GPU instance: the GPU instance's compute instances share
    /// its profile and its GPM activity, so one of them stands for it.
    pub fn gpu_instances(&self) -> impl Iterator<Item = &MigDevice> {
        let all = &self.instances;
        all.iter()
            .enumerate()
            .filter(|(n, i)| !all[..*n].iter().any(|earlier| earlier.gpu_instance == i.gpu_instance))
            .map(|(_, i)| i)
    }
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
