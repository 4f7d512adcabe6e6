//! The health stage's memory: everything the rules need from earlier rounds and snapshots,
//! in one place. The poller hands over raw readings; a new poll round is noted here (error
//! rates, hardware slowdowns, clock-event starts), and each assembled snapshot's verdict goes
//! through the operator's debounce and hold here. A new rule that needs history keeps it in a
//! module of health/ and is fed from [`HealthMemory`].

use super::debounce::Debouncer;
use super::rates::ErrorRateTracker;
use super::slowdown::HwSlowdownTracker;
use super::starts::EventStartCounter;
use super::thermal_time::ThermalTimeTracker;
use crate::config::RulePolicy;
use crate::model::health::Clears;
use crate::model::health::Reason;
use crate::model::{DeviceSnapshot, Snapshot};
use std::time::{Duration, Instant};

/// What the health stage remembers across rounds and snapshots. One per publisher: a
/// one-shot `check` starts with none.
#[derive(Debug, Default)]
pub struct HealthMemory {
    /// When each GPU last showed a hardware power slowdown.
    hw_slowdown: HwSlowdownTracker,
    /// How each GPU's error counters grew within the last hour.
    error_rates: ErrorRateTracker,
    /// How often each clock-event reason became active.
    clock_event_starts: EventStartCounter,
    /// How long each GPU's clocks were slowed for temperature within the last hour.
    thermal_time: ThermalTimeTracker,
    /// Each network port's flaps and error growth.
    nic_trends: super::nic_trends::NicTrendTracker,
    /// The operator's debounce and hold per rule.
    debouncer: Debouncer,
    /// The operator's own rules: their windows and state.
    custom_rules: super::custom::CustomRuleRunner,
}

impl HealthMemory {
    /// A new poll round: writes each device's history (`hw_slowdown_seen`, `error_growth`,
    /// `clock_event_starts`, `thermal_slowdown`) from this round and the ones before.
    /// `clears`: the operator's clears, from which error growth and thermal time count again.
    pub fn note_round(&mut self, devices: &mut [DeviceSnapshot], clears: &Clears, now: Instant) {
        self.hw_slowdown.track(devices, now);
        self.error_rates.track(devices, clears, now);
        self.clock_event_starts.track(devices, now);
        self.thermal_time.track(devices, clears, now);
    }

    /// The network ports' latest scan (its source's `version`), with each port's trend
    /// written in: flaps within `flap_window`, error growth within the hour.
    pub fn note_nics(
        &mut self,
        scan: &std::sync::Arc<crate::model::nic::NicScan>,
        version: u64,
        flap_window: Duration,
        clears: &Clears,
        now: Instant,
    ) -> std::sync::Arc<crate::model::nic::NicScan> {
        self.nic_trends.annotate(scan, version, flap_window, clears, now)
    }

    /// An assembled snapshot: the operator's own rules add their findings to the built-ins'.
    pub fn custom_rules(&mut self, snapshot: &mut Snapshot, rules: &[crate::config::CustomRule], now: Instant) {
        self.custom_rules.apply(snapshot, rules, now);
    }

    /// An assembled snapshot: its findings raise a GPU's state only after the rule's
    /// debounce, and a cleared condition lowers it only after its hold (`health.rules`).
    pub fn debounce(
        &mut self,
        snapshot: &mut Snapshot,
        rules: &[(Reason, RulePolicy)],
        poll_interval: Duration,
        now: Instant,
    ) {
        self.debouncer.apply(snapshot, rules, poll_interval, now);
        // A GPU whose findings the debounce holds back (ok so far) has no next step to take.
        for device in &mut snapshot.devices {
            if device.health.state == crate::model::health::HealthState::Ok {
                device.health.next_step = None;
            }
        }
    }
}
