//! Temperature and clocks: slowed for heat now or for a share of the last hour, near its
//! slowdown threshold, and hardware power slowdowns.

use super::*;

pub(super) fn thermal_slowdown(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    let active: Vec<&str> = THERMAL_REASONS
        .iter()
        .copied()
        .filter(|reason| r.clock_event_active(*reason))
        .map(ClockReason::label)
        .collect();
    if active.is_empty() {
        return None;
    }
    let temperature = r.die_temperature().map(|t| format!(" at {t:.0} C")).unwrap_or_default();
    Some(format!("clocks are slowed for temperature ({}){temperature}", active.join(", ")).into())
}

/// Slowed for temperature a tenth or more of the last hour by the driver's counters, which
/// see the short slowdowns between two polls that `thermal_slowdown` misses.
pub(super) fn thermal_slowdown_time(seen: &Seen, _: &DeviceReadings) -> Option<Hit> {
    let time = seen
        .device
        .history
        .thermal_slowdown
        .filter(|t| t.over >= THERMAL_TIME_LEAST)?;
    let share = time.slowed.as_secs_f64() / time.over.as_secs_f64();
    (share >= THERMAL_TIME_SHARE).then(|| {
        format!(
            "clocks were slowed for temperature {:.0} s of the last {} minutes ({:.0} %, by the driver's counters)",
            time.slowed.as_secs_f64(),
            time.over.as_secs() / 60,
            share * 100.0
        )
        .into()
    })
}

pub(super) fn temperature_near_slowdown(seen: &Seen, r: &DeviceReadings) -> Option<Hit> {
    let margin = seen.limits.temperature_margin?;
    let (temperature, slowdown) = (r.die_temperature()?, r.threshold(Threshold::Slowdown)?);
    (slowdown - temperature < margin).then(|| {
        format!(
            "{temperature:.0} C, {:.0} C below its slowdown temperature of {slowdown:.0} C (health.temperature_margin_c \
             {margin})",
            slowdown - temperature
        )
        .into()
    })
}

pub(super) fn hw_slowdown(seen: &Seen, r: &DeviceReadings) -> Option<Hit> {
    let last = seen
        .device
        .history
        .hw_slowdown_seen
        .filter(|at| at.elapsed() <= HW_SLOWDOWN_WINDOW)
        .filter(|at| seen.after_clear(seen.now.checked_sub(at.elapsed()).unwrap_or(seen.now)))?;
    let active: Vec<&str> = HW_POWER_REASONS
        .iter()
        .copied()
        .filter(|reason| r.clock_event_active(*reason))
        .map(ClockReason::label)
        .collect();
    let when = if active.is_empty() {
        format!("{} s ago", last.elapsed().as_secs())
    } else {
        format!("now ({})", active.join(", "))
    };
    Some(format!("the hardware pulled the clocks down for power {when} (slowdown signal or power brake)").into())
}
