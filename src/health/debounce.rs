//! The operator's debounce and hold per rule (`health.rules`): a finding is raised only once
//! its condition has held for the rule's debounce, and once raised it stays until the
//! condition has been clear for the rule's hold. The rules themselves stay pure (a
//! snapshot in, findings out); this is the one place that remembers across snapshots, kept
//! by the publisher and applied to each snapshot after [`super::evaluate`].
//!
//! Time, not snapshot counts: a snapshot is also put together between polls when a side
//! input changes, so "N polls" is read as N - 1 poll intervals from the first sighting.

use crate::config::RulePolicy;
use crate::model::Snapshot;
use crate::model::health::Finding;
use crate::model::health::Reason;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One (owner, rule, subject)'s memory.
#[derive(Debug)]
struct Track {
    /// When the condition was first seen in its current stretch; None while it is clear.
    since: Option<Instant>,
    /// When it was last seen.
    last_seen: Instant,
    /// The finding is raised (passed the debounce, not yet past its hold).
    raised: bool,
    /// The last finding the rule made, shown while it is held.
    finding: Finding,
}

/// Whose findings: a GPU's (by UUID) or the node's own.
const NODE: &str = "node";

/// A track's key: the owner (a GPU's UUID, or [`NODE`]), the rule's reason, and the
/// finding's subject (a network port, for the node's findings).
type Key = (String, Reason, Option<String>);

#[derive(Debug, Default)]
pub(crate) struct Debouncer {
    tracks: HashMap<Key, Track>,
    /// The last operator's clear seen per GPU UUID (its time): a newer one lets go of the
    /// findings held only by a rule's hold.
    clears_seen: HashMap<String, f64>,
}

/// What one pass over one owner's findings goes by.
struct Pass<'a> {
    rules: &'a [(Reason, RulePolicy)],
    poll_interval: Duration,
    now: Instant,
}

impl Debouncer {
    /// Applies `rules` to every GPU's findings and the node's in `snapshot` (as of `now`) and
    /// sets each GPU's state from what is left.
    pub(crate) fn apply(
        &mut self,
        snapshot: &mut Snapshot,
        rules: &[(Reason, RulePolicy)],
        poll_interval: Duration,
        now: Instant,
    ) {
        if rules.is_empty() {
            self.tracks.clear();
            return;
        }
        let pass = Pass {
            rules,
            poll_interval,
            now,
        };
        for device in &mut snapshot.devices {
            let uuid = device.identity.uuid.clone();
            let clear = snapshot.clears.get(&uuid).map(|c| c.at);
            let cleared_now = clear.is_some() && self.clears_seen.get(&uuid).copied() != clear;
            if let Some(at) = clear {
                self.clears_seen.insert(uuid.clone(), at);
            }
            self.apply_to(&uuid, &mut device.health.findings, &|_| cleared_now, &pass);
            device.health.state = super::state(&device.health.findings);
        }
        // Adapters cleared since the last snapshot: their ports' held findings go.
        let mut cleared_ports: Vec<String> = Vec::new();
        for (key, clear) in snapshot.clears.iter() {
            if let Some(device) = super::clear_nic::device_of(key)
                && self.clears_seen.insert(key.clone(), clear.at) != Some(clear.at)
            {
                cleared_ports.push(format!("{device}/"));
            }
        }
        let cleared_port = |subject: &Option<String>| {
            subject
                .as_deref()
                .is_some_and(|s| cleared_ports.iter().any(|ports| s.starts_with(ports.as_str())))
        };
        self.apply_to(NODE, &mut snapshot.node_findings, &cleared_port, &pass);
        // GPUs gone from the node, and rules taken out of the policy, are forgotten.
        let present: std::collections::HashSet<&str> =
            snapshot.devices.iter().map(|d| d.identity.uuid.as_str()).collect();
        self.tracks.retain(|(owner, reason, _), _| {
            (owner == NODE || present.contains(owner.as_str())) && rules.iter().any(|(r, _)| r == reason)
        });
        self.clears_seen
            .retain(|key, _| present.contains(key.as_str()) || super::clear_nic::device_of(key).is_some());
    }

    /// One owner's findings: each (rule, subject) raised after its debounce, held after it
    /// clears.
    /// `cleared_now`: whether the operator cleared the finding's subject (a GPU: all of them)
    /// since the last snapshot, so what only its hold keeps goes.
    fn apply_to(
        &mut self,
        owner: &str,
        findings: &mut Vec<Finding>,
        cleared_now: &dyn Fn(&Option<String>) -> bool,
        pass: &Pass,
    ) {
        // Jitter: polls a little less than an interval apart still count as the next poll.
        let slack = pass.poll_interval / 2;
        for (name, policy) in pass.rules {
            let reason = *name;
            let mut seen_subjects = Vec::new();
            let mut not_yet = Vec::new();
            for (i, finding) in findings.iter().enumerate().filter(|(_, f)| f.reason == reason) {
                let key = (owner.to_string(), reason, finding.subject.clone());
                let track = self.tracks.entry(key).or_insert_with(|| Track {
                    since: None,
                    last_seen: pass.now,
                    raised: false,
                    finding: finding.clone(),
                });
                let since = *track.since.get_or_insert(pass.now);
                track.last_seen = pass.now;
                track.finding = finding.clone();
                if pass.now.duration_since(since) + slack >= policy.debounce.span(pass.poll_interval) {
                    track.raised = true;
                }
                if !track.raised {
                    not_yet.push(i);
                }
                seen_subjects.push(finding.subject.clone());
            }
            for i in not_yet.into_iter().rev() {
                findings.remove(i);
            }
            let gone: Vec<Key> = self
                .tracks
                .keys()
                .filter(|(o, r, subject)| o == owner && *r == reason && !seen_subjects.contains(subject))
                .cloned()
                .collect();
            for key in gone {
                if cleared_now(&key.2) {
                    // Held only by the hold: the operator says it is repaired.
                    self.tracks.remove(&key);
                    continue;
                }
                let Some(track) = self.tracks.get_mut(&key) else {
                    continue;
                };
                track.since = None;
                let clear_for = pass.now.duration_since(track.last_seen);
                if track.raised && clear_for < policy.hold {
                    let mut held = track.finding.clone();
                    held.message = format!(
                        "{} (clear for {}s; held until clear for {}s, {})",
                        held.message,
                        clear_for.as_secs(),
                        policy.hold.as_secs(),
                        match reason {
                            Reason::Rule(_) => format!("health.rules.{reason}.hold"),
                            Reason::Custom(_) => format!("the hold of health rule {reason}"),
                        }
                    );
                    findings.push(held);
                } else {
                    self.tracks.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Debounce;
    use crate::model::health::RuleId;
    use crate::model::health::{DeviceHealth, HealthState};
    use crate::model::{DeviceSnapshot, Vendor};

    fn snapshot(nvlink_down: bool) -> Snapshot {
        let findings = if nvlink_down {
            vec![Finding {
                reason: RuleId::NvlinkDown.into(),
                severity: HealthState::Degraded,
                message: "NVLink 3 down".into(),
                subject: None,
            }]
        } else {
            Vec::new()
        };
        let mut device = DeviceSnapshot::for_test(0, Vendor::Nvidia, "0000:19:00.0", Default::default());
        device.health = DeviceHealth {
            state: super::super::state(&findings),
            findings,
            next_step: None,
        };
        Snapshot {
            devices: vec![device],
            ..Default::default()
        }
    }

    const POLL: Duration = Duration::from_secs(1);

    /// Runs `pattern` (true: the condition seen) one poll apart; how many times the GPU
    /// went from ok to degraded, and its state at the end.
    fn raises(rules: &[(Reason, RulePolicy)], pattern: &[bool]) -> (usize, HealthState) {
        let mut debouncer = Debouncer::default();
        let start = Instant::now();
        let mut last = HealthState::Ok;
        let mut raised = 0;
        for (i, seen) in pattern.iter().enumerate() {
            let mut s = snapshot(*seen);
            debouncer.apply(&mut s, rules, POLL, start + POLL * i as u32);
            let state = s.devices[0].health.state;
            if state != HealthState::Ok && last == HealthState::Ok {
                raised += 1;
            }
            last = state;
        }
        (raised, last)
    }

    fn policy(debounce: Debounce, hold: u64) -> Vec<(Reason, RulePolicy)> {
        vec![(
            RuleId::NvlinkDown.into(),
            RulePolicy {
                debounce,
                hold: Duration::from_secs(hold),
            },
        )]
    }

    #[test]
    fn a_link_flapping_every_poll_for_a_minute_is_one_finding_with_a_hold_and_thirty_without() {
        let flapping: Vec<bool> = (0..60).map(|i| i % 2 == 0).collect();
        assert_eq!(raises(&[], &flapping).0, 30, "no policy: every flap");
        assert_eq!(
            raises(&policy(Debounce::None, 10), &flapping).0,
            1,
            "held through the flaps"
        );
        // Debounce alone: it never holds two polls in a row, so it is never raised.
        assert_eq!(raises(&policy(Debounce::Polls(2), 0), &flapping).0, 0);
    }

    #[test]
    fn debounce_in_polls_or_seconds_raises_only_a_condition_that_stays() {
        let stays = [true; 5];
        assert_eq!(
            raises(&policy(Debounce::Polls(3), 0), &stays),
            (1, HealthState::Degraded)
        );
        assert_eq!(
            raises(&policy(Debounce::Polls(3), 0), &[true, true, false, true, true]).0,
            0
        );
        assert_eq!(raises(&policy(Debounce::For(Duration::from_secs(10)), 0), &stays).0, 0);
        assert_eq!(raises(&policy(Debounce::For(Duration::from_secs(4)), 0), &stays).0, 1);
    }

    #[test]
    fn hold_keeps_a_finding_until_clear_that_long_and_says_so() {
        let rules = policy(Debounce::None, 3);
        let mut debouncer = Debouncer::default();
        let start = Instant::now();
        let mut s = snapshot(true);
        debouncer.apply(&mut s, &rules, POLL, start);
        for (i, expect_held) in [(1, true), (2, true), (3, false)] {
            let mut s = snapshot(false);
            debouncer.apply(&mut s, &rules, POLL, start + POLL * i);
            let held = s.devices[0].health.findings.first();
            assert_eq!(held.is_some(), expect_held, "after {i}s clear");
            if let Some(f) = held {
                assert!(f.message.contains("held until clear for 3s"), "{}", f.message);
                assert_eq!(s.devices[0].health.state, HealthState::Degraded);
            }
        }
    }

    #[test]
    fn an_operators_clear_lets_go_of_a_held_finding_and_one_seen_after_it_counts_again() {
        let rules = policy(Debounce::None, 600);
        let mut debouncer = Debouncer::default();
        let start = Instant::now();
        debouncer.apply(&mut snapshot(true), &rules, POLL, start);
        let mut held = snapshot(false);
        debouncer.apply(&mut held, &rules, POLL, start + POLL);
        assert_eq!(
            held.devices[0].health.state,
            HealthState::Degraded,
            "held for 10 minutes"
        );
        let cleared = |seen: bool| {
            let mut s = snapshot(seen);
            s.clears = std::sync::Arc::new(
                [(
                    "GPU-0".to_string(),
                    crate::model::health::Clear {
                        at: 1.0e9,
                        reason: "reseated".into(),
                        by: "uid 0".into(),
                    },
                )]
                .into(),
            );
            s
        };
        let mut after = cleared(false);
        debouncer.apply(&mut after, &rules, POLL, start + POLL * 2);
        assert_eq!(after.devices[0].health.state, HealthState::Ok, "the clear let go of it");
        // Down again after the clear: raised again, and held again.
        let mut down = cleared(true);
        debouncer.apply(&mut down, &rules, POLL, start + POLL * 3);
        let mut up = cleared(false);
        debouncer.apply(&mut up, &rules, POLL, start + POLL * 4);
        assert_eq!(
            up.devices[0].health.state,
            HealthState::Degraded,
            "the same clear counts once"
        );
    }

    /// The default policy (config::health::default_rule_policies): a port down for 2 s, as
    /// the demo's mlx5_5 is every 25 s, never makes the node unhealthy; one down for 30 s does
    /// (issue #51, item 13).
    #[test]
    fn a_port_down_for_less_than_its_default_debounce_is_no_finding() {
        let rules: Vec<(Reason, RulePolicy)> = crate::config::Health::default()
            .rules
            .into_iter()
            .map(|(r, p)| (r.into(), p))
            .collect();
        let down = |down: bool| Snapshot {
            node_findings: if down {
                vec![Finding {
                    reason: RuleId::NicPortDown.into(),
                    severity: HealthState::Unhealthy,
                    message: "the port is DOWN/Polling".into(),
                    subject: Some("mlx5_5/1".into()),
                }]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        let mut debouncer = Debouncer::default();
        let start = Instant::now();
        let mut s = down(true);
        debouncer.apply(&mut s, &rules, POLL, start);
        assert!(s.node_findings.is_empty(), "not yet");
        let mut s = down(true);
        debouncer.apply(&mut s, &rules, POLL, start + Duration::from_secs(2));
        assert!(s.node_findings.is_empty(), "a 2 s flap");
        let mut s = down(false);
        debouncer.apply(&mut s, &rules, POLL, start + Duration::from_secs(3));
        assert!(s.node_findings.is_empty());
        for at in [10, 20, 30] {
            let mut s = down(true);
            debouncer.apply(&mut s, &rules, POLL, start + Duration::from_secs(at));
            assert!(s.node_findings.is_empty(), "down since 10 s, now {at} s");
        }
        let mut s = down(true);
        debouncer.apply(&mut s, &rules, POLL, start + Duration::from_secs(40));
        assert_eq!(s.node_findings.len(), 1, "down for 30 s");
    }
}
