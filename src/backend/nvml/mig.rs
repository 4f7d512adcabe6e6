//! MIG: whether the GPU is partitioned (read every `poll.topology_interval`: it changes only
//! with a reset), and, while it is, each MIG device's UUID, GPU and compute instance, profile
//! and memory (every `poll.slow_interval`). The UUIDs let pod attribution map a kubelet's MIG
//! device ids to their GPU. Only read: gpuwarden never changes MIG mode.

use super::calls::CallErrors;
use crate::model::mig::MigDevice;
use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};

/// MIG mode now and after the next reset; `None` where the GPU has no MIG.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct MigMode {
    pub enabled: bool,
    pub pending: bool,
}

pub(super) fn mode(device: &Device<'static>, calls: &mut CallErrors) -> Option<MigMode> {
    let mode = calls.read("nvmlDeviceGetMigMode", || device.mig_mode())?;
    Some(MigMode {
        enabled: mode.current == nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE,
        pending: mode.pending == nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE,
    })
}

/// The MIG devices of a GPU in MIG mode.
pub(super) fn devices(device: &Device<'static>, calls: &mut CallErrors) -> Vec<MigDevice> {
    let mut instances = Vec::new();
    let slots = calls
        .read("nvmlDeviceGetMaxMigDeviceCount", || device.mig_device_count())
        .unwrap_or(0);
    for slot in 0..slots {
        // Empty slots answer NotFound: not an error, just no MIG device there.
        let handle = match device.mig_device_by_index(slot) {
            Ok(handle) => handle,
            Err(NvmlError::NotFound) => continue,
            Err(e) => {
                calls
                    .errors
                    .push(("nvmlDeviceGetMigDeviceHandleByIndex", e.to_string()));
                continue;
            }
        };
        let Some(uuid) = calls.read("nvmlDeviceGetUUID", || handle.uuid()) else {
            continue;
        };
        let Some(gpu_instance) = calls.read("nvmlDeviceGetGpuInstanceId", || instance_id(&handle, false)) else {
            continue;
        };
        let memory = calls.read("nvmlDeviceGetMemoryInfo_v2", || handle.memory_info());
        instances.push(MigDevice {
            uuid,
            gpu_instance,
            compute_instance: calls.read("nvmlDeviceGetComputeInstanceId", || instance_id(&handle, true)),
            profile: handle.name().map(|n| profile_of(&n)).unwrap_or_default(),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            activity: None,
        });
    }
    instances
}

/// nvml-wrapper does not wrap the instance id calls.
fn instance_id(handle: &Device<'static>, compute: bool) -> Result<u32, NvmlError> {
    let lib = handle.nvml().lib();
    let mut id = 0u32;
    // SAFETY: a MIG device handle and a pointer to an unsigned int, as nvml.h declares.
    let code = unsafe {
        if compute {
            nvml_sym(lib.nvmlDeviceGetComputeInstanceId.as_ref())?(handle.handle(), &mut id)
        } else {
            nvml_sym(lib.nvmlDeviceGetGpuInstanceId.as_ref())?(handle.handle(), &mut id)
        }
    };
    nvml_try(code).map(|_| id)
}

/// "NVIDIA H200 MIG 1g.18gb" -> "1g.18gb"; the last word where the name has no "MIG".
fn profile_of(name: &str) -> String {
    name.rsplit_once("MIG ")
        .map(|(_, profile)| profile)
        .or_else(|| name.split_whitespace().last())
        .unwrap_or("")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn profile_from_the_mig_device_name() {
        assert_eq!(super::profile_of("NVIDIA H200 MIG 1g.18gb"), "1g.18gb");
        assert_eq!(super::profile_of("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), "3g.40gb");
        assert_eq!(super::profile_of("4g.71gb"), "4g.71gb");
    }
}
