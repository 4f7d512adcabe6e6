//! `poll`: the round's interval and deadline and the tiers' intervals (docs/performance.md).
//! Reloadable: the poll loop applies a new interval and deadline at once.

use super::*;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default, try_from = "RawPoll")]
pub struct Poll {
    /// How often every GPU is read.
    pub interval: Duration,
    /// How long one poll of one GPU may take before that GPU is reported as not answering
    /// (`gpu_up` 0) for this round. A call that hangs stalls only its own GPU.
    pub timeout: Duration,
    /// How often the slowly changing and costly readings are read (energy, ECC and remap
    /// counts, PCIe replays, clock-event time); at least `interval`.
    pub slow_interval: Duration,
    /// How often the NVLink error and byte counters (15 ms of driver CPU per read of an
    /// H200's 18 links), fabric registration and MIG mode are read. Read at the first poll
    /// after this much time.
    pub topology_interval: Duration,
    /// How often GPM activity is computed (2.3 ms of driver CPU per GPU on an H200); the
    /// values are averages over this interval.
    pub gpm_interval: Duration,
}

impl Default for Poll {
    fn default() -> Self {
        Poll {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            slow_interval: Duration::from_secs(10),
            topology_interval: Duration::from_secs(120),
            gpm_interval: Duration::from_secs(30),
        }
    }
}

/// `Poll` as written, before the checks that involve both keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawPoll {
    #[serde(deserialize_with = "poll_interval", serialize_with = "write_duration")]
    interval: Duration,
    #[serde(deserialize_with = "poll_timeout", serialize_with = "write_duration")]
    timeout: Duration,
    #[serde(deserialize_with = "poll_slow_interval", serialize_with = "write_duration")]
    slow_interval: Duration,
    #[serde(deserialize_with = "poll_topology_interval", serialize_with = "write_duration")]
    topology_interval: Duration,
    #[serde(deserialize_with = "poll_gpm_interval", serialize_with = "write_duration")]
    gpm_interval: Duration,
}

impl Default for RawPoll {
    fn default() -> Self {
        let p = Poll::default();
        RawPoll {
            interval: p.interval,
            timeout: p.timeout,
            slow_interval: p.slow_interval,
            topology_interval: p.topology_interval,
            gpm_interval: p.gpm_interval,
        }
    }
}

/// Why the poll section's durations do not go together.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("poll.interval is {0:?}; it must be at least 10ms")]
    IntervalTooShort(Duration),
    #[error("poll.timeout ({timeout:?}) must be more than 0 and at most poll.interval ({interval:?})")]
    Timeout { timeout: Duration, interval: Duration },
    #[error("poll.slow_interval ({slow:?}) must be at least poll.interval ({interval:?})")]
    SlowInterval { slow: Duration, interval: Duration },
}

impl TryFrom<RawPoll> for Poll {
    type Error = PollError;
    fn try_from(raw: RawPoll) -> Result<Self, PollError> {
        if raw.interval < Duration::from_millis(10) {
            return Err(PollError::IntervalTooShort(raw.interval));
        }
        if raw.timeout.is_zero() || raw.timeout > raw.interval {
            return Err(PollError::Timeout {
                timeout: raw.timeout,
                interval: raw.interval,
            });
        }
        if raw.slow_interval < raw.interval {
            return Err(PollError::SlowInterval {
                slow: raw.slow_interval,
                interval: raw.interval,
            });
        }
        Ok(Poll {
            interval: raw.interval,
            timeout: raw.timeout,
            slow_interval: raw.slow_interval,
            topology_interval: raw.topology_interval,
            gpm_interval: raw.gpm_interval,
        })
    }
}
