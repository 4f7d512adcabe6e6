//! NVLink: per link its state, its error counters and the bytes it moved. The number of links
//! the board has is read once; a board without NVLink gets no NVLink series.
//!
//! Measured on an H200 (docs/performance.md): the counters cost the driver about 0.75 ms of
//! CPU per link however many of that link's counters one call asks for (14 ms for 18 links),
//! so they are read every `poll.topology_interval` (2 minutes), all in one
//! `nvmlDeviceGetFieldValues` call (scope = link). The states cost 0.2 ms for all 18 links in
//! one such call, but `nvmlDeviceGetNvLinkState` once per link every second cost the daemon
//! 4 ms of CPU per GPU per second: they are read in the slow tier, in one call.

use super::calls::CallErrors;
use super::fields::scoped_field_values;
use crate::model::links::{NvLink, NvLinks};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::NVML_NVLINK_MAX_LINKS;
use nvml_wrapper_sys::bindings::field_id::*;

/// What a per-link counter field becomes.
#[derive(Clone, Copy)]
enum Reading {
    Error(&'static str),
    /// Counted in KiB by the driver.
    Kib(&'static str),
}

/// Fields asked for each link, with the link as scope.
const PER_LINK: [(u32, Reading); 5] = [
    (NVML_FI_DEV_NVLINK_ERROR_DL_CRC, Reading::Error("crc_flit")),
    (NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, Reading::Error("replay")),
    (NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, Reading::Error("recovery")),
    (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, Reading::Kib("tx")),
    (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, Reading::Kib("rx")),
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
pub fn board_links(device: &Device<'static>, calls: &mut CallErrors) -> u32 {
    calls
        .read("nvmlDeviceGetFieldValues:nvlink_count", || {
            scoped_field_values(device, &[(NVML_FI_DEV_NVLINK_LINK_COUNT, 0)])
        })
        .and_then(|v| v.first().copied().flatten())
        .map(|n| (n as u32).min(NVML_NVLINK_MAX_LINKS))
        .unwrap_or(0)
}

/// Each link's state, in one call (`NVML_FI_DEV_NVLINK_GET_STATE`, scope = link); a link
/// whose state the driver does not give has `up: None`.
pub fn states(device: &Device<'static>, board_links: u32, calls: &mut CallErrors) -> Option<NvLinks> {
    if board_links == 0 {
        return None;
    }
    let requests: Vec<(u32, u32)> = (0..board_links).map(|link| (NVML_FI_DEV_NVLINK_GET_STATE, link)).collect();
    let values = calls.read("nvmlDeviceGetFieldValues:nvlink_states", || scoped_field_values(device, &requests))?;
    let links = (0..board_links)
        .zip(values)
        .map(|(link, state)| NvLink {
            link,
            up: state.map(|s| s != 0.0),
            ..NvLink::default()
        })
        .collect();
    Some(NvLinks { board_links, links })
}

/// Each link's error and byte counters, in one call; `None` when the call failed.
pub fn counters(device: &Device<'static>, board_links: u32, calls: &mut CallErrors) -> Option<Vec<LinkCounters>> {
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
    let values = calls.read("nvmlDeviceGetFieldValues:nvlink_counters", || scoped_field_values(device, &requests))?;
    let mut values = values.into_iter();
    let mut links = Vec::with_capacity(board_links as usize);
    for link in 0..board_links {
        let mut counters = LinkCounters::default();
        for (_, reading) in PER_LINK {
            let Some(value) = values.next().flatten() else { continue };
            match reading {
                Reading::Error(kind) => counters.errors.push((kind, value as u64)),
                Reading::Kib(direction) => counters.bytes.push((direction, value as u64 * 1024)),
            }
        }
        if (link as usize) < CRC_DATA.len()
            && let Some(value) = values.next().flatten()
        {
            counters.errors.push(("crc_data", value as u64));
        }
        links.push(counters);
    }
    Some(links)
}

/// One link's counters, as the last counter read left them.
#[derive(Debug, Clone, Default)]
pub struct LinkCounters {
    pub errors: Vec<(&'static str, u64)>,
    pub bytes: Vec<(&'static str, u64)>,
}

/// The states of this poll with the counters of the last counter read.
pub fn merge(mut links: NvLinks, counters: &[LinkCounters]) -> NvLinks {
    for (link, c) in links.links.iter_mut().zip(counters) {
        link.errors = c.errors.clone();
        link.bytes = c.bytes.clone();
    }
    links
}
