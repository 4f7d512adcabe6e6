//! NVLink: error counters growing, links down, and the GPU outside its NVLink fabric.

use super::*;

pub(super) fn nvlink_error_rate(seen: &Seen, _: &DeviceReadings) -> Option<Hit> {
    error_rate(
        seen,
        ErrorCounter::Nvlink,
        "NVLink errors (CRC, replay, recovery over its links)",
    )
}

pub(super) fn nvlink_down(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    let links = r.nvlinks.as_ref()?;
    let down: Vec<String> = links.links_down().map(|l| l.link.to_string()).collect();
    if down.is_empty() {
        return None;
    }
    Some(
        format!(
            "NVLink {} down ({} of {} up): traffic to the other GPUs slows or falls back to PCIe",
            down.join(", "),
            links.links_up(),
            links.board_links
        )
        .into(),
    )
}

pub(super) fn fabric_not_ready(seen: &Seen, r: &DeviceReadings) -> Option<Hit> {
    let fabric = r.fabric.as_ref().filter(|f| f.degraded())?;
    let manager = match seen.fabric_manager {
        Some(m) if m.running => format!("nvidia-fabricmanager runs ({})", m.detail),
        Some(m) => format!("nvidia-fabricmanager is not running ({})", m.detail),
        None => "nvidia-fabricmanager not checked".to_string(),
    };
    Some(match &fabric.error {
        Some(error) => {
            format!("the NVLink fabric refused the GPU ({error}); {manager}: its NVLinks carry nothing").into()
        }
        None => format!(
            "the GPU has not joined the NVLink fabric (state {}); {manager}: jobs across GPUs fail or fall back to \
             PCIe until it has",
            fabric.state
        )
        .into(),
    })
}
