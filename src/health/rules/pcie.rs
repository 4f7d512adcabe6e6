//! The PCIe link: a narrower width than the slot's, and replays growing.

use super::*;

pub(super) fn pcie_width_degraded(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    (r.pcie.width_degraded() == Some(true)).then(|| {
        format!(
            "PCIe link runs at x{} of x{}",
            r.pcie.width.unwrap_or(0),
            r.pcie.width_max.unwrap_or(0)
        )
        .into()
    })
}

pub(super) fn pcie_replay_rate(seen: &Seen, _: &DeviceReadings) -> Option<Hit> {
    error_rate(seen, ErrorCounter::PcieReplay, "PCIe replays")
}
