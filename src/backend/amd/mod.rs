//! AMD GPUs. The amdgpu sysfs backend needs no library: hwmon, the `gpu_metrics` table, the
//! PCI device's link files and the RAS counters under /sys/class/drm/cardN/device.

pub mod gpu_metrics;
pub mod rocm_smi;
pub mod sysfs;
