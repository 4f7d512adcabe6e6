//! NVLink: per link its state, its rate, its error counters and the bytes it moved, in one
//! `nvmlDeviceGetFieldValues` call (scope = link) every `poll.topology_interval` (2 minutes).
//! The number of links the board has is read once; a board without NVLink gets no NVLink
//! series.
//!
//! Measured on an H200 (docs/performance.md): the driver spends about 0.75 ms of CPU per link
//! on these fields however many of that link's fields one call asks for (15 ms for 18 links,
//! up to 40 ms in a daemon beside another NVML client); even the states alone cost 6 ms per
//! read in the daemon. Read every 10 s that was 0.06 % of a core per GPU: too much.

use super::calls::CallErrors;
use super::fields::scoped_field_values;
use crate::model::links::{NvLink, NvLinks};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS;
use nvml_wrapper_sys::bindings::field_id::*;

/// What a per-link field becomes.
#[derive(Clone, Copy)]
enum Reading {
    State,
    Error(&'static str),
    /// Counted in KiB by the driver.
    Kib(&'static str),
    /// The link's rate, MB/s one way (what `nvidia-smi nvlink -s` shows).
    Speed,
}

/// Fields asked for each link, with the link as scope. The driver's cost is per link, not per
/// field: the state costs nothing more beside the counters.
const PER_LINK: [(u32, Reading); 7] = [
    (NVML_FI_DEV_NVLINK_GET_STATE, Reading::State),
    (NVML_FI_DEV_NVLINK_ERROR_DL_CRC, Reading::Error("crc_flit")),
    (NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, Reading::Error("replay")),
    (NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, Reading::Error("recovery")),
    (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, Reading::Kib("tx")),
    (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, Reading::Kib("rx")),
    (NVML_FI_DEV_NVLINK_GET_SPEED, Reading::Speed),
];

/// The data CRC counters have one field id per link (links 0 to 11) rather than a scope.
/// Hopper answers them NOT_SUPPORTED (and nvidia-smi nvlink -e shows no data CRC there), so
/// they add series only on older boards.
const CRC_DATA: [u32; 12] = [
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L1,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L2,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L3,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L4,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L5,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L7,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L8,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L9,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L10,
    NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L11,
];

/// The number of NVLinks the board has; 0 for none (or a driver that does not say).
pub(super) fn board_links(device: &Device<'static>, calls: &mut CallErrors) -> u32 {
    calls
        .read("nvmlDeviceGetFieldValues:nvlink_count", || {
            scoped_field_values(device, &[(NVML_FI_DEV_NVLINK_LINK_COUNT, 0)])
        })
        .and_then(|v| v.first().copied().flatten())
        .map(|n| (n as u32).min(NVML_NVLINK_MAX_LINKS))
        .unwrap_or(0)
}

/// Each link's state and counters, in one call; `None` where the board has no NVLink or
/// the call failed (then nothing is shown until the next read, never stale values).
pub(super) fn read(device: &Device<'static>, board_links: u32, calls: &mut CallErrors) -> Option<NvLinks> {
    if board_links == 0 {
        return None;
    }
    let mut requests = Vec::with_capacity(board_links as usize * (PER_LINK.len() + 1));
    for link in 0..board_links {
        requests.extend(PER_LINK.iter().map(|(field, _)| (*field, link)));
        if let Some(field) = CRC_DATA.get(link as usize) {
            requests.push((*field, 0));
        }
    }
    let values = calls.read("nvmlDeviceGetFieldValues:nvlink", || {
        scoped_field_values(device, &requests)
    })?;
    let mut values = values.into_iter();
    let mut links = Vec::with_capacity(board_links as usize);
    for link in 0..board_links {
        let mut l = NvLink {
            link,
            ..NvLink::default()
        };
        for (_, reading) in PER_LINK {
            let Some(value) = values.next().flatten() else { continue };
            match reading {
                Reading::State => l.up = Some(value != 0.0),
                Reading::Error(kind) => l.errors.push((kind, value as u64)),
                Reading::Kib(direction) => l.bytes.push((direction, value as u64 * 1024)),
                // A link that is down answers 0 on some drivers: no rate, not a rate of 0.
                Reading::Speed => l.speed_bytes_per_second = (value > 0.0).then_some(value * 1e6),
            }
        }
        if (link as usize) < CRC_DATA.len()
            && let Some(value) = values.next().flatten()
        {
            l.errors.push(("crc_data", value as u64));
        }
        links.push(l);
    }
    Some(NvLinks { board_links, links })
}
