//! Peer-to-peer over NVLink between this GPU and each other one (`nvmlDeviceGetP2PStatus`
//! with the NVLink capability): what DCGM's `dcgmGetNvLinkP2PStatus` reads for
//! dcgm-exporter's `DCGM_EXP_P2P_STATUS`. A pair that cannot talk over NVLink (PCIe cards, a
//! link disabled by a registry key) is told apart from one that can; a node of one GPU has no
//! pairs and no series.

use super::calls::CallErrors;
use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper_sys::bindings::*;

/// NVML's status for each peer, by the peer's NVML index (`nvmlGpuP2PStatus_t`: 0 OK, 1
/// chipset, 2 GPU, 3 topology not supported, 4 disabled by a registry key, 5 not supported,
/// 6 unknown). Peers whose call fails are left out (and counted by the caller).
pub fn read(device: &Device<'static>, peers: &[(u32, Device<'static>)], calls: &mut CallErrors) -> Vec<(u32, u32)> {
    peers
        .iter()
        .filter_map(|(index, peer)| {
            let status = calls.read("nvmlDeviceGetP2PStatus", || nvlink_status(device, peer))?;
            Some((*index, status))
        })
        .collect()
}

fn nvlink_status(device: &Device<'static>, peer: &Device<'static>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetP2PStatus.as_ref())?;
    let mut status: nvmlGpuP2PStatus_t = 0;
    // SAFETY: two valid device handles of the same library, a capability index nvml.h
    // defines, and a plain integer out-parameter.
    nvml_try(unsafe {
        sym(
            device.handle(),
            peer.handle(),
            nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_NVLINK,
            &mut status,
        )
    })?;
    Ok(status)
}
