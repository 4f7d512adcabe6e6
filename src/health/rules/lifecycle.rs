//! Where a GPU is in its life rather than what it reads: being reset, lost, not answering,
//! awaiting its validation, or a new board in its slot.

use super::*;

/// The GPU being reset by automatic remediation stays unhealthy from the decision until its
/// validation starts (the next row), so no health check sees a moment to resume the node in;
/// the other NVIDIA GPUs, whose NVML the daemon let go of for the reset, read as such rather
/// than as not responding.
pub(super) fn remediating(seen: &Seen) -> Option<Hit> {
    let reset = seen.resetting?;
    if reset.uuid == seen.device.identity.uuid {
        return Some(Hit::said(
            "being reset by gpuwarden's automatic remediation: out of service until the reset is done and a probe \
             has validated the GPU"
                .to_string(),
            Some(HealthState::Unhealthy),
        ));
    }
    let let_go = seen.device.identity.vendor == crate::model::Vendor::Nvidia && seen.device.answered().is_none();
    let_go.then(|| {
        Hit::said(
            format!(
                "not polled while gpuwarden resets GPU {} ({}): NVML is let go of for the reset, and polled again once it is done",
                reset.index, reset.pci_bus_id
            ),
            None,
        )
    })
}

pub(super) fn gpu_lost(seen: &Seen) -> Option<Hit> {
    seen.device
        .lost
        .then(|| "the GPU is lost (fallen off the bus)".to_string().into())
}

pub(super) fn not_responding(seen: &Seen) -> Option<Hit> {
    seen.device.answered().is_none().then(|| {
        "the GPU did not answer within poll.timeout: the driver may be hung"
            .to_string()
            .into()
    })
}

pub(super) fn validating(seen: &Seen) -> Option<Hit> {
    // A scheduled validation of the idle node is no finding: the node's verdict says it
    // (health/verdict.rs), and a failure is probe_failed like any validation's.
    let validation = seen
        .validation
        .filter(|v| v.pending() && v.kind == crate::model::health::ValidationKind::Repair)?;
    let since = humantime::format_rfc3339_seconds(crate::model::from_unix_seconds(validation.since));
    let waiting = match seen.probe_error {
        Some(error) => format!("its last probe could not run ({error}); tried again every minute"),
        None => "it runs as soon as the GPU is idle".to_string(),
    };
    Some(Hit::said(
        format!(
            "kept out of service until a probe passes, after {} ({since}); {waiting}",
            validation.why
        ),
        None,
    ))
}

pub(super) fn board_replaced(seen: &Seen) -> Option<Hit> {
    let swap = seen.board_swap?;
    let at = crate::model::from_unix_seconds(swap.at);
    let recent = seen
        .now
        .duration_since(at)
        .map(|age| age <= BOARD_SWAP_NOTICE)
        .unwrap_or(true);
    (recent && seen.after_clear(at)).then(|| {
        Hit::said(
            format!(
                "a different board in this slot since {}: it replaced serial {} ({}); the old board's history stays \
             in the journal (`gpuwarden report --gpu {}`), this one's starts clean",
                humantime::format_rfc3339_seconds(at),
                swap.previous_serial.as_deref().unwrap_or("unknown"),
                swap.previous_uuid,
                swap.previous_uuid
            ),
            None,
        )
    })
}
