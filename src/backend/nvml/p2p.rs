//! Peer-to-peer over NVLink between this GPU and each other one (`nvmlDeviceGetP2PStatus`
//! with the NVLink capability): what DCGM's `dcgmGetNvLinkP2PStatus` reads for
//! dcgm-exporter's `DCGM_EXP_P2P_STATUS`. A pair that cannot talk over NVLink (PCIe cards, a
//! link disabled by a registry key) is told apart from one that can; a node of one GPU has no
//! pairs and no series.

use super::calls::CallErrors;
use nvml_wrapper::Device;
use nvml_wrapper::enum_wrappers::device::P2pCapabilitiesIndex;
use nvml_wrapper::error::NvmlError;

/// NVML's status for each peer, by the peer's NVML index (`nvmlGpuP2PStatus_t`: 0 OK, 1
/// chipset, 2 GPU, 3 topology not supported, 4 disabled by a registry key, 5 not supported,
/// 6 unknown). Peers whose call fails are left out (and counted by the caller).
pub(super) fn read(
    device: &Device<'static>,
    peers: &[(u32, Device<'static>)],
    calls: &mut CallErrors,
) -> Vec<(u32, u32)> {
    peers
        .iter()
        .filter_map(|(index, peer)| {
            let status = calls.read("nvmlDeviceGetP2PStatus", || nvlink_status(device, peer))?;
            Some((*index, status))
        })
        .collect()
}

fn nvlink_status(device: &Device<'static>, peer: &Device<'static>) -> Result<u32, NvmlError> {
    match device.p2p_status(peer, P2pCapabilitiesIndex::NvLink) {
        Ok(status) => Ok(status.as_c()),
        // A status newer than nvml-wrapper knows: its number (the metrics call it Unknown).
        Err(NvmlError::UnexpectedVariant(status)) => Ok(status),
        Err(e) => Err(e),
    }
}
