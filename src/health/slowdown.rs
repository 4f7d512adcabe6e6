//! Hardware power slowdown memory: when each GPU last showed one, active in a round or as
//! growth of the driver's counters, so the `hw_slowdown` rule holds its finding for a while
//! after a brake that fired between two polls.

use crate::model::DeviceSnapshot;
use crate::model::clock_events::HW_POWER_REASONS;

/// Remembers, per GPU, when a hardware power slowdown was last seen: active in a round's
/// readings, or its driver counters grew since the last round that had them. The health
/// rules hold the finding for a while after (a brake that fires between polls still counts).
#[derive(Debug, Default)]
pub(crate) struct HwSlowdownTracker {
    /// Per GPU uuid: the last counter total, and when a slowdown was last seen.
    seen: std::collections::HashMap<String, (Option<f64>, Option<std::time::Instant>)>,
}

impl HwSlowdownTracker {
    /// Notes this round and writes each device's `hw_slowdown_seen`.
    pub(crate) fn track(&mut self, devices: &mut [DeviceSnapshot], now: std::time::Instant) {
        for device in devices {
            let entry = self.seen.entry(device.identity.uuid.clone()).or_default();
            if let Some(r) = device.answered() {
                let active = HW_POWER_REASONS.iter().any(|reason| r.clock_event_active(*reason));
                let counters: Vec<f64> = r
                    .clock_event_seconds
                    .iter()
                    .filter(|(reason, _)| HW_POWER_REASONS.contains(reason))
                    .map(|(_, s)| *s)
                    .collect();
                let total = (!counters.is_empty()).then(|| counters.iter().sum::<f64>());
                let grew = entry.0.zip(total).is_some_and(|(before, now)| now > before);
                if active || grew {
                    entry.1 = Some(now);
                }
                if total.is_some() {
                    entry.0 = total;
                }
            }
            device.history.hw_slowdown_seen = entry.1;
        }
    }
}
