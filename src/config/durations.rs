//! Duration keys, written the way Prometheus configs write them (`500ms`, `1s`, `5m`), each
//! bounded to a range that makes sense for its key.

use super::*;

/// Reads durations the way Prometheus configs write them: `500ms`, `1s`, `5m`.
pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "{text:?} is not a duration ({e}); write it like 500ms, 1s or 5m"
        ))
    })
}

/// Defines a deserializer for a duration key that must fall in a range: a duration of 0
/// where a period is meant spins, and one of centuries overflows the clock.
macro_rules! bounded_duration {
    ($name:ident, $key:literal, $min:expr, $max:expr) => {
        pub(super) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
            in_range(duration(d)?, $key, $min, $max)
        }
    };
}

pub(super) const MS: Duration = Duration::from_millis(1);
pub(super) const SECOND: Duration = Duration::from_secs(1);
pub(super) const HOUR: Duration = Duration::from_secs(3600);
pub(super) const DAY: Duration = Duration::from_secs(24 * 3600);

bounded_duration!(poll_interval, "poll.interval", 10 * MS, HOUR);
bounded_duration!(poll_timeout, "poll.timeout", MS, HOUR);
bounded_duration!(poll_slow_interval, "poll.slow_interval", 10 * MS, DAY);
bounded_duration!(poll_topology_interval, "poll.topology_interval", 10 * MS, DAY);
bounded_duration!(poll_gpm_interval, "poll.gpm_interval", 10 * MS, DAY);
bounded_duration!(nvml_retry, "nvml.retry_initial and retry_max", 100 * MS, DAY);
bounded_duration!(xid_dedup_window, "xid.dedup_window", 100 * MS, HOUR);
bounded_duration!(sink_timeout, "events.sinks[].webhook.timeout", 100 * MS, 60 * SECOND);
bounded_duration!(xid_critical_hold, "xid.critical_hold", SECOND, 30 * DAY);
bounded_duration!(rule_hold, "health.rules.*.hold", Duration::ZERO, DAY);
bounded_duration!(probe_interval, "probe.interval", SECOND, 366 * DAY);
bounded_duration!(remediation_timeout, "remediation.timeout", SECOND, HOUR);
bounded_duration!(probe_sample_interval, "probe.sample_interval", 10 * MS, 10 * SECOND);
bounded_duration!(probe_timeout, "probe.timeout", SECOND, HOUR);
bounded_duration!(kubernetes_refresh, "kubernetes.refresh", SECOND, HOUR);
bounded_duration!(kubernetes_api_timeout, "kubernetes.api.timeout", 100 * MS, 60 * SECOND);
bounded_duration!(network_interval, "network.interval", SECOND, HOUR);
bounded_duration!(network_counters_interval, "network.counters_interval", SECOND, HOUR);
bounded_duration!(network_flap_window, "network.flap_window", 10 * SECOND, DAY);
bounded_duration!(state_retention, "state.retention", HOUR, 10 * 366 * DAY);

pub(super) fn in_range<E: serde::de::Error>(
    value: Duration,
    key: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, E> {
    if value < min || value > max {
        return Err(E::custom(format!(
            "{key} is {}; it must be from {} to {}",
            humantime::format_duration(value),
            humantime::format_duration(min),
            humantime::format_duration(max)
        )));
    }
    Ok(value)
}

/// Writes a duration the way `duration` reads it (the daemon hands its running probe
/// settings to `gpuwarden probe` as JSON).
pub(super) fn write_duration<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*value).to_string())
}
