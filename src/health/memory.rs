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
pub(crate) struct HealthMemory {
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
    /// Each GPU's history as the last poll round left it, by UUID: a snapshot between rounds
    /// (a probe's result, a clear) is judged with it, not with a second count of one round.
    histories: std::collections::BTreeMap<String, crate::model::health::GpuHistory>,
}

/// What the health stage reads beside the snapshot it judges.
pub(crate) struct Judging<'a> {
    pub config: &'a crate::config::Config,
    /// The snapshot is a new poll round's (its history is counted from it), not a refresh
    /// between rounds.
    pub new_round: bool,
    /// The network ports' scan's version (a scan is counted into the ports' trends once).
    pub nics_version: u64,
    pub now: Instant,
}

impl HealthMemory {
    /// The health stage, one call per snapshot: a new round's history (error rates, slowdowns,
    /// clock-event starts, thermal time) or the last round's on a refresh, the network ports'
    /// trends, the rules' findings and each GPU's verdict and next step (`super::evaluate`),
    /// the operator's own rules under their bounds, then the debounce and hold
    /// (`health.rules`). The snapshot comes in as the sources put it together, with no verdict.
    pub(crate) fn judge(&mut self, snapshot: &mut Snapshot, judging: &Judging) {
        let (config, now) = (judging.config, judging.now);
        if judging.new_round {
            let clears = snapshot.clears.clone();
            self.note_round(&mut snapshot.devices, &clears, now);
            self.histories = snapshot
                .devices
                .iter()
                .map(|d| (d.identity.uuid.clone(), d.history.clone()))
                .collect();
        } else {
            for device in &mut snapshot.devices {
                if let Some(history) = self.histories.get(&device.identity.uuid) {
                    device.history = history.clone();
                }
            }
        }
        snapshot.nics = self.nic_trends.annotate(
            &snapshot.nics,
            judging.nics_version,
            config.network.flap_window,
            &snapshot.clears,
            now,
        );
        super::evaluate(snapshot);
        self.custom_rules.apply(snapshot, &config.health.custom_rules, now);
        self.debounce(snapshot, &rule_policies(&config.health), config.poll.interval, now);
    }

    /// A new poll round: writes each device's history (`hw_slowdown_seen`, `error_growth`,
    /// `clock_event_starts`, `thermal_slowdown`) from this round and the ones before.
    /// `clears`: the operator's clears, from which error growth and thermal time count again.
    fn note_round(&mut self, devices: &mut [DeviceSnapshot], clears: &Clears, now: Instant) {
        self.hw_slowdown.track(devices, now);
        self.error_rates.track(devices, clears, now);
        self.clock_event_starts.track(devices, now);
        self.thermal_time.track(devices, clears, now);
    }

    /// An assembled snapshot: its findings raise a GPU's state only after the rule's
    /// debounce, and a cleared condition lowers it only after its hold (`health.rules`).
    fn debounce(
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

/// Every rule's debounce and hold: the built-ins' (`health.rules`) and the operator's own.
fn rule_policies(health: &crate::config::Health) -> Vec<(Reason, RulePolicy)> {
    let builtin = health
        .rules
        .iter()
        .map(|(rule, policy)| ((*rule).into(), policy.clone()));
    let custom = health.custom_rules.iter().filter_map(|rule| {
        let (name, _) = rule.ready()?;
        Some((Reason::Custom(name), rule.policy()))
    });
    builtin.chain(custom).collect()
}
