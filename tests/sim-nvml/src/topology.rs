//! NVLink fields, NVLink fabric registration and MIG devices of the simulated library.
//!
//! MIG device handles are not pointers either: the handle of MIG slot `k` of device `i` is
//! `(i + 1) | (k + 1) << 16`, so it never collides with a whole GPU's handle `i + 1`.

use crate::scenario::{self, MigDevice};
use crate::*;

const MIG_SHIFT: usize = 16;

/// The value of an NVLink field for link `scope` (or, for the per-link field ids of the data
/// CRC counters, the link the id names).
pub fn nvlink_field(d: &scenario::Device, field_id: u32, scope: u32) -> Option<u64> {
    if field_id == NVML_FI_DEV_NVLINK_LINK_COUNT {
        return (!d.nvlinks.is_empty()).then_some(d.nvlinks.len() as u64);
    }
    let crc_data_link = match field_id {
        39..=44 => Some(field_id - 39),
        102..=107 => Some(field_id - 102 + 6),
        _ => None,
    };
    if let Some(link) = crc_data_link {
        return d.nvlinks.get(link as usize)?.crc_data;
    }
    let link = d.nvlinks.get(scope as usize)?;
    match field_id {
        NVML_FI_DEV_NVLINK_GET_STATE => Some(link.up as u64),
        NVML_FI_DEV_NVLINK_ERROR_DL_CRC => link.crc_flit,
        NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY => link.replay,
        NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY => link.recovery,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX => link.tx_kib,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX => link.rx_kib,
        // A link that is down answers 0, as the driver does.
        NVML_FI_DEV_NVLINK_GET_SPEED => d.nvlink_speed_mbps.map(|s| if link.up { s } else { 0 }),
        _ => None,
    }
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(
    device: nvmlDevice_t,
    out: *mut nvmlGpuFabricInfoV_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetGpuFabricInfoV", |_, d| {
        if out.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: the caller passes a versioned struct (NVML's contract).
        let out = unsafe { &mut *out };
        if out.version >> 24 != 3 {
            return nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        let Some(fabric) = &d.fabric else {
            out.state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED as _;
            out.status = NOT_SUPPORTED;
            return SUCCESS;
        };
        out.state = match fabric.state.as_str() {
            "not_started" => NVML_GPU_FABRIC_STATE_NOT_STARTED,
            "in_progress" => NVML_GPU_FABRIC_STATE_IN_PROGRESS,
            _ => NVML_GPU_FABRIC_STATE_COMPLETED,
        } as _;
        out.status = fabric.error.as_deref().map(error_code).unwrap_or(SUCCESS);
        out.cliqueId = fabric.clique_id;
        SUCCESS
    })
}

/// NVLink peer-to-peer between two GPUs: the first GPU's `p2p_nvlink_status` when set, else
/// OK where both have NVLinks and NOT_SUPPORTED where either has none (PCIe cards). Other
/// capabilities answer NOT_SUPPORTED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    device1: nvmlDevice_t,
    device2: nvmlDevice_t,
    caps: nvmlGpuP2PCapsIndex_t,
    out: *mut nvmlGpuP2PStatus_t,
) -> nvmlReturn_t {
    device_call(device1, "nvmlDeviceGetP2PStatus", |index, d| {
        let scenario = current();
        let peer = (device2 as usize).wrapping_sub(1);
        let Some(other) = scenario.devices.get(peer).filter(|_| peer != index) else {
            return INVALID_ARGUMENT;
        };
        let status = if caps != nvmlGpuP2PCapsIndex_enum_NVML_P2P_CAPS_INDEX_NVLINK {
            nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_NOT_SUPPORTED
        } else if let Some(status) = d.p2p_nvlink_status {
            status
        } else if !d.nvlinks.is_empty() && !other.nvlinks.is_empty() {
            nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_OK
        } else {
            nvmlGpuP2PStatus_enum_NVML_P2P_STATUS_NOT_SUPPORTED
        };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(status)) }
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMigMode", |_, d| {
        let Some(mig) = &d.mig else { return NOT_SUPPORTED };
        // SAFETY: `current` and `pending` are the caller's, valid for writes or null as the C
        // API allows; put refuses null.
        unsafe {
            let code = put(current, Some(mig.enabled as c_uint));
            if code != SUCCESS {
                return code;
            }
            put(pending, Some(mig.pending.unwrap_or(mig.enabled) as c_uint))
        }
    })
}

/// Seven slots, as on an H100/H200 (seven 1g instances at most).
#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMaxMigDeviceCount", |_, d| {
        let Some(mig) = &d.mig else { return NOT_SUPPORTED };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(if mig.enabled { 7 } else { 0 })) }
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    out: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMigDeviceHandleByIndex", |i, d| {
        let Some(mig) = d.mig.as_ref().filter(|m| m.enabled) else {
            return INVALID_ARGUMENT;
        };
        if index as usize >= mig.devices.len() {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        let handle = (i + 1) | ((index as usize + 1) << MIG_SHIFT);
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(handle as nvmlDevice_t)) }
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    mig_call(device, |_, mig| unsafe { put(out, Some(mig.gpu_instance)) }).unwrap_or(INVALID_ARGUMENT)
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    mig_call(device, |_, mig| unsafe { put(out, Some(mig.compute_instance)) }).unwrap_or(INVALID_ARGUMENT)
}

/// Answers a call made on a MIG device handle; `None` when `handle` is a whole GPU's.
pub fn mig_call(
    handle: nvmlDevice_t,
    answer: impl FnOnce(&scenario::Device, &MigDevice) -> nvmlReturn_t,
) -> Option<nvmlReturn_t> {
    let raw = handle as usize;
    let slot = raw >> MIG_SHIFT;
    if slot == 0 {
        return None;
    }
    let index = (raw & ((1 << MIG_SHIFT) - 1)).wrapping_sub(1);
    let scenario = current();
    let Some(parent) = scenario.devices.get(index) else {
        return Some(INVALID_ARGUMENT);
    };
    if parent.lost {
        return Some(GPU_IS_LOST);
    }
    let Some(mig) = parent.mig.as_ref().and_then(|m| m.devices.get(slot - 1)) else {
        return Some(INVALID_ARGUMENT);
    };
    Some(answer(parent, mig))
}
