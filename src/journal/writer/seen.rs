//! What the journal read of one GPU at its last full look, kept so that a round that changed
//! none of it is passed over with one comparison: no facts built, compared and dropped. The
//! journal looks at every published snapshot on the publishing thread, and most rounds change
//! nothing it records; on an H100 the journal was a quarter of the coordinator's CPU
//! (docs/performance.md, "Fewer instructions a round, the runtime on one beat").
//!
//! It holds exactly what [`crate::journal::writer::facts::facts_of`] and the writer read from a GPU: its
//! identity (the same shared value while its thread lives), the verdict and its findings'
//! reasons and severities, lost or answering, the latest probe's start, the counters the
//! journal records (uncorrectable ECC, PCIe replays, row remapping, the recovery action,
//! NVLink errors and links down, as the same shared reading), the slowdown reasons that open
//! episodes, and persistence mode turned on. A debug build checks every pass-over against the
//! full look ([`assert_nothing_missed`]), so a field added to the facts and not here fails the tests.

use crate::model::health::HealthState;
use crate::model::health::Reason;
use crate::model::links::NvLinks;
use crate::model::{DeviceIdentity, DeviceReadings, DeviceSnapshot, RecoveryAction, RemappedRows, Snapshot};
use std::sync::Arc;

/// One GPU as the journal last read it in full.
pub(crate) struct LastSeen {
    identity: Arc<DeviceIdentity>,
    verdict: HealthState,
    findings: Vec<(Reason, HealthState)>,
    lost: bool,
    probe_started: Option<f64>,
    /// When the last probe that could not run was noted.
    probe_error_at: Option<f64>,
    readings: Option<Counters>,
    persistence_enabled: u64,
}

/// The counters of an answering GPU that the journal records.
#[derive(PartialEq)]
struct Counters {
    ecc_uncorrectable: Option<u64>,
    pcie_replays: Option<u64>,
    remapped_rows: RemappedRows,
    recovery_action: Option<RecoveryAction>,
    /// Shared between rounds until the topology tier reads the links again.
    nvlinks: Option<Arc<NvLinks>>,
    /// Which of `facts::EPISODE_REASONS` are active.
    episodes: u8,
}

impl Counters {
    fn of(r: &DeviceReadings) -> Counters {
        let mut episodes = 0u8;
        for (bit, reason) in crate::journal::writer::facts::EPISODE_REASONS.iter().enumerate() {
            if r.clock_event_active(*reason) {
                episodes |= 1 << bit;
            }
        }
        Counters {
            ecc_uncorrectable: crate::journal::writer::facts::uncorrectable_ecc(r),
            pcie_replays: r.pcie.replay_errors,
            remapped_rows: r.remapped_rows.clone(),
            recovery_action: r.recovery_action,
            nvlinks: r.nvlinks.clone(),
            episodes,
        }
    }

    /// Equal, with the NVLink reading the very same one (not only equal counts: a new read
    /// is looked at in full).
    fn same(&self, other: &Counters) -> bool {
        let same_links = match (&self.nvlinks, &other.nvlinks) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        same_links
            && self.ecc_uncorrectable == other.ecc_uncorrectable
            && self.pcie_replays == other.pcie_replays
            && self.remapped_rows == other.remapped_rows
            && self.recovery_action == other.recovery_action
            && self.episodes == other.episodes
    }
}

impl LastSeen {
    pub(crate) fn of(device: &DeviceSnapshot, snapshot: &Snapshot) -> LastSeen {
        LastSeen {
            identity: device.identity.clone(),
            verdict: device.health.state,
            findings: device.health.findings.iter().map(|f| (f.reason, f.severity)).collect(),
            lost: device.lost,
            probe_started: probe_started(device, snapshot),
            probe_error_at: probe_error_at(device, snapshot),
            readings: device.answered().map(Counters::of),
            persistence_enabled: snapshot.persistence_enabled(&device.identity.uuid),
        }
    }

    /// Whether `device` reads now as it did, with no slowdown episode going on (an episode's
    /// last sighting and its end are a matter of time, not of change).
    pub(crate) fn unchanged(&self, device: &DeviceSnapshot, snapshot: &Snapshot) -> bool {
        let episodes_quiet = self.readings.as_ref().is_none_or(|c| c.episodes == 0);
        episodes_quiet
            && Arc::ptr_eq(&self.identity, &device.identity)
            && self.verdict == device.health.state
            && self.lost == device.lost
            && self.findings.len() == device.health.findings.len()
            && self
                .findings
                .iter()
                .zip(&device.health.findings)
                .all(|((reason, severity), f)| *reason == f.reason && *severity == f.severity)
            && self.probe_started == probe_started(device, snapshot)
            && self.probe_error_at == probe_error_at(device, snapshot)
            && match (&self.readings, device.answered()) {
                (Some(before), Some(now)) => before.same(&Counters::of(now)),
                (None, None) => true,
                _ => false,
            }
            && self.persistence_enabled == snapshot.persistence_enabled(&device.identity.uuid)
    }
}

fn probe_started(device: &DeviceSnapshot, snapshot: &Snapshot) -> Option<f64> {
    snapshot.probe.reports.get(&device.identity.uuid).map(|r| r.started)
}

fn probe_error_at(device: &DeviceSnapshot, snapshot: &Snapshot) -> Option<f64> {
    snapshot.probe.last_error.get(&device.identity.uuid).map(|e| e.at)
}

/// A passed-over look would have found nothing: no row, and the same stored facts (debug
/// builds check each pass-over with it, so the tests catch a fact that [`LastSeen`] misses).
#[cfg(debug_assertions)]
pub(crate) fn assert_nothing_missed(
    last: &crate::journal::writer::facts::GpuFacts,
    device: &DeviceSnapshot,
    snapshot: &Snapshot,
    now: f64,
) {
    let mut full = crate::journal::writer::facts::facts_of(device, snapshot, Some(last), now);
    let probe = crate::journal::writer::facts::ProbeNow::of(snapshot, &device.identity.uuid);
    let rows = crate::journal::writer::facts::changes(Some(last), &mut full, probe, now);
    assert!(
        rows.is_empty() && last.same_stored_facts(&full) && last.pcie_replays == full.pcie_replays,
        "the journal passed over GPU {} as unchanged, but a full look finds {rows:?} and {full:?} (was {last:?})",
        device.identity.uuid
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::Finding;
    use crate::model::{ClockEvent, EccCount, EccScope, EccType, Vendor};

    fn gpu(uncorrectable: u64) -> DeviceSnapshot {
        let readings = DeviceReadings {
            ecc_errors: vec![EccCount {
                error_type: EccType::Uncorrected,
                scope: EccScope::Aggregate,
                count: uncorrectable,
            }],
            nvlinks: Some(Arc::new(NvLinks::default())),
            power_watts: Some(100.0),
            ..Default::default()
        };
        DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", readings)
    }

    /// The next round's reading of the same GPU: its own readings anew, shared ones shared.
    fn next_round(d: &DeviceSnapshot, change: impl FnOnce(&mut DeviceReadings)) -> DeviceSnapshot {
        let mut next = d.clone();
        let mut readings = (**d.readings.as_ref().unwrap()).clone();
        readings.power_watts = Some(250.0);
        change(&mut readings);
        next.readings = Some(Arc::new(readings));
        next
    }

    #[test]
    fn a_round_that_changed_only_live_values_is_passed_over() {
        let snapshot = Snapshot::default();
        let d = gpu(0);
        let seen = LastSeen::of(&d, &snapshot);
        assert!(seen.unchanged(&next_round(&d, |_| {}), &snapshot));
    }

    #[test]
    fn each_thing_the_journal_records_makes_the_round_looked_at_in_full() {
        let snapshot = Snapshot::default();
        let d = gpu(0);
        let seen = LastSeen::of(&d, &snapshot);
        let changed = |what: &str, next: DeviceSnapshot| {
            assert!(!seen.unchanged(&next, &snapshot), "{what} changed, yet passed over");
        };
        changed("ECC", next_round(&d, |r| r.ecc_errors[0].count = 1));
        changed("replays", next_round(&d, |r| r.pcie.replay_errors = Some(3)));
        changed("remap", next_round(&d, |r| r.remapped_rows.pending = Some(true)));
        changed(
            "recovery action",
            next_round(&d, |r| r.recovery_action = Some(RecoveryAction::GpuReset)),
        );
        // A new topology read, even with the same counts, is looked at.
        changed(
            "NVLink read",
            next_round(&d, |r| r.nvlinks = Some(Arc::new(NvLinks::default()))),
        );
        changed(
            "slowdown",
            next_round(&d, |r| {
                r.clock_events = vec![ClockEvent {
                    reason: crate::model::clock_events::ClockReason::HwThermalSlowdown,
                    active: true,
                }]
            }),
        );
        let mut lost = d.clone();
        (lost.up, lost.lost, lost.readings) = (false, true, None);
        changed("lost", lost);
        let mut worse = d.clone();
        worse.health.state = HealthState::Degraded;
        worse.health.findings.push(Finding {
            reason: crate::model::health::RuleId::EccUncorrectable.into(),
            severity: HealthState::Degraded,
            message: String::new(),
            subject: None,
        });
        changed("verdict", worse);
        let mut replaced = d.clone();
        replaced.identity = Arc::new((*d.identity).clone());
        changed("identity (a new GPU thread)", replaced);
        let mut persisted = Snapshot::default();
        Arc::make_mut(&mut persisted.persistence_attempts)
            .insert((d.identity.uuid.clone(), crate::model::PersistenceOutcome::Enabled), 1);
        assert!(
            !seen.unchanged(&d, &persisted),
            "persistence turned on, yet passed over"
        );
    }

    #[test]
    fn a_slowdown_going_on_is_looked_at_every_round() {
        let snapshot = Snapshot::default();
        let hot = next_round(&gpu(0), |r| {
            r.clock_events = vec![ClockEvent {
                reason: crate::model::clock_events::ClockReason::SwThermalSlowdown,
                active: true,
            }]
        });
        let seen = LastSeen::of(&hot, &snapshot);
        assert!(!seen.unchanged(&hot, &snapshot));
    }
}
