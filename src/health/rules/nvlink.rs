//! NVLink: error counters growing, links down, and the GPU outside its NVLink fabric.

use super::*;

pub(super) fn nvlink_error_rate(seen: &Seen, _: &DeviceReadings) -> Option<Hit> {
    error_rate(
        seen,
        ErrorCounter::Nvlink,
        "NVLink errors (CRC, replay, recovery over its links)",
        "see which link with nvidia-smi nvlink -e (or gpu_nvlink_link_errors_total); reset the GPU, reseat or service the baseboard if it goes on",
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
            "NVLink {} down ({} of {} up): traffic to the other GPUs slows or falls back to PCIe; \
             check nvidia-smi nvlink -s and the kernel log, then reset the GPU or reseat the baseboard",
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
        Some(error) => format!(
            "the NVLink fabric refused the GPU ({error}); {manager}: its NVLinks carry nothing; check \
             nvidia-fabricmanager's log, then reset the GPU"
        )
        .into(),
        None => format!(
            "the GPU has not joined the NVLink fabric (state {}); {manager}: start or check nvidia-fabricmanager \
             (`systemctl status nvidia-fabricmanager`). Jobs across GPUs fail or fall back to PCIe until it has",
            fabric.state
        )
        .into(),
    })
}
