//! What the GPU's performance monitors (NVIDIA GPM, Hopper and newer) say it did between two
//! GPM samples (`poll.gpm_interval` apart): how busy its engines, SMs, tensor cores and memory were, and how many bytes crossed
//! PCIe and NVLink. Each value is an average over the interval between the two samples it
//! was computed from; a value the GPU or driver does not give is absent.

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Activity {
    /// Fraction of time any engine (graphics or compute) was active.
    pub graphics_active: Option<f64>,
    /// Fraction of time each SM had at least one warp assigned, averaged over the SMs.
    pub sm_active: Option<f64>,
    /// Resident warps as a fraction of the most an SM can hold, averaged over the SMs.
    pub sm_occupancy: Option<f64>,
    /// Fraction of time any tensor pipe was active.
    pub tensor_active: Option<f64>,
    /// Fraction of the peak DRAM bandwidth used.
    pub dram_active: Option<f64>,
    /// (pipe, fraction of time active): fp64, fp32, fp16, and the tensor pipes hmma, imma, dfma.
    #[serde(serialize_with = "super::pairs_as_map")]
    pub pipes: Vec<(&'static str, f64)>,
    /// (direction, bytes per second): tx, rx.
    #[serde(serialize_with = "super::pairs_as_map")]
    pub pcie_bytes_per_second: Vec<(&'static str, f64)>,
    /// (direction, bytes per second) over all NVLinks: tx, rx.
    #[serde(serialize_with = "super::pairs_as_map")]
    pub nvlink_bytes_per_second: Vec<(&'static str, f64)>,
}

impl Activity {
    pub fn is_empty(&self) -> bool {
        *self == Activity::default()
    }
}
