//! NVLink fabric registration (`nvmlDeviceGetGpuFabricInfoV`): on NVSwitch systems each GPU
//! registers with the fabric manager at boot, and until it has, its NVLinks carry nothing.
//! GPUs that are not part of a fabric answer "not supported" and get no series.

use super::calls::CallErrors;
use crate::model::links::{Fabric, FabricState};
use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper_sys::bindings::*;

pub(super) fn read(device: &Device<'static>, calls: &mut CallErrors) -> Option<Fabric> {
    let info = calls.read("nvmlDeviceGetGpuFabricInfoV", || fabric_info(device))?;
    let state = match info.state as u32 {
        NVML_GPU_FABRIC_STATE_NOT_STARTED => FabricState::NotStarted,
        NVML_GPU_FABRIC_STATE_IN_PROGRESS => FabricState::InProgress,
        NVML_GPU_FABRIC_STATE_COMPLETED => FabricState::Completed,
        // NOT_SUPPORTED: this GPU is not on an NVLink fabric.
        _ => return None,
    };
    // The status is only meaningful once registration finished.
    let error = (state == FabricState::Completed)
        .then(|| nvml_try(info.status).err().map(|e| e.to_string()))
        .flatten();
    Some(Fabric {
        state,
        error,
        clique_id: info.cliqueId,
    })
}

fn fabric_info(device: &Device<'static>) -> Result<nvmlGpuFabricInfoV_t, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetGpuFabricInfoV.as_ref())?;
    // SAFETY: plain data; all-zero is valid. The version word is NVML_STRUCT_VERSION(..., 3):
    // the struct's size with the version in the top byte.
    let mut info: nvmlGpuFabricInfoV_t = unsafe { std::mem::zeroed() };
    info.version = std::mem::size_of::<nvmlGpuFabricInfoV_t>() as u32 | (3 << 24);
    // SAFETY: a valid device handle and a versioned struct, as nvml.h asks.
    nvml_try(unsafe { sym(device.handle(), &mut info) })?;
    Ok(info)
}
