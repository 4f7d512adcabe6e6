//! Running the operator's rules (`health.custom_rules`) over each assembled snapshot, after
//! the built-in rules and before the debounce: a rule that fires adds a finding under its own
//! name, which then goes where every finding goes (the verdict, the scheduler, the journal,
//! the page). A rule that fails at run time (an error of its own, or over its time) is
//! disabled alone, said once in the log and by `gpuwarden_custom_rule_up`, until the config
//! changes it.

use crate::config::CustomRule;
use crate::custom_rules::run::{self, Outcome, Wanted};
use crate::custom_rules::schema::{self, GpuFacts, NodeFacts, PortFacts, ProbeFigure};
use crate::custom_rules::windows::{self, Histories, WindowCall};
use crate::custom_rules::{Compiled, Scope, check};
use crate::model::health::{CustomName, CustomRuleStatus, Finding, Reason};
use crate::model::{DeviceSnapshot, Snapshot};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// What the runner remembers of one rule.
#[derive(Debug, Default)]
struct Kept {
    /// The source it was compiled from: a change of it in the config lets a disabled rule run again.
    source: String,
    disabled: Option<String>,
    /// Its CPU time in the snapshot being judged, over all its subjects.
    cpu_now: std::time::Duration,
    /// Its last snapshots, newest last, each whether it went over its budget
    /// (`run::MAX_PER_SNAPSHOT`), at most `run::BUDGET_SNAPSHOTS` of them.
    recent: std::collections::VecDeque<bool>,
    evaluations: u64,
    seconds: f64,
}

/// The operator's rules' memory: their windows' series, and each rule's state.
#[derive(Debug, Default)]
pub struct CustomRuleRunner {
    histories: Histories,
    kept: HashMap<CustomName, Kept>,
    /// The last operator's clear seen per GPU UUID (its time): a newer one starts the GPU's
    /// windows afresh, as it does the built-in error rates.
    clears_seen: HashMap<String, f64>,
}

/// A rule ready to run.
struct Ready<'a> {
    name: CustomName,
    rule: &'a CustomRule,
    compiled: &'a Arc<Compiled>,
}

impl CustomRuleRunner {
    /// Runs `rules` over `snapshot` (as of `now`): adds their findings, and each rule's state.
    pub fn apply(&mut self, snapshot: &mut Snapshot, rules: &[CustomRule], now: Instant) {
        self.forget_changed(rules);
        self.forget_cleared(snapshot);
        let ready: Vec<Ready> = rules
            .iter()
            .filter_map(|rule| rule.ready().map(|(name, compiled)| Ready { name, rule, compiled }))
            .filter(|r| self.kept.get(&r.name).is_none_or(|k| k.disabled.is_none()))
            .collect();
        let ready = self.within_stage_budget(snapshot, ready);
        if !ready.is_empty() {
            for r in &ready {
                if let Some(kept) = self.kept.get_mut(&r.name) {
                    kept.cpu_now = std::time::Duration::ZERO;
                }
            }
            let found = self.run_all(snapshot, &ready, now);
            self.judge_budgets(&ready);
            for (owner, finding) in found {
                match owner {
                    Some(i) => snapshot.devices[i].health.findings.push(finding),
                    None => snapshot.node_findings.push(finding),
                }
            }
            for device in &mut snapshot.devices {
                device.health.state = super::state(&device.health.findings);
            }
        }
        snapshot.custom_rules = Arc::new(self.statuses(rules));
    }

    /// The rules whose bounds fit the stage's budget on this node (run::MAX_STAGE_STEPS: each
    /// rule's bound on one evaluation times its subjects here); the costliest beyond it are
    /// disabled, said once, so the verdict never waits on the operator's rules as a whole.
    fn within_stage_budget<'a>(&mut self, snapshot: &Snapshot, ready: Vec<Ready<'a>>) -> Vec<Ready<'a>> {
        let subjects = |scope: Scope| -> u64 {
            match scope {
                Scope::Gpu => snapshot.devices.len() as u64,
                Scope::Port => snapshot.nics.ports().count() as u64,
                Scope::Node => 1,
            }
        };
        let mut by_cost: Vec<(u64, usize, Ready)> = ready
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    r.compiled.cost().work.saturating_mul(subjects(r.compiled.scope).max(1)),
                    i,
                    r,
                )
            })
            .collect();
        let total: u64 = by_cost.iter().fold(0, |sum, (steps, _, _)| sum.saturating_add(*steps));
        if total <= run::MAX_STAGE_STEPS {
            return by_cost.into_iter().map(|(_, _, r)| r).collect();
        }
        // Cheapest first: as many rules as fit run; the costliest go.
        by_cost.sort_by_key(|(steps, i, _)| (*steps, *i));
        let mut spent = 0u64;
        let mut kept = Vec::new();
        for (steps, i, rule) in by_cost {
            if spent.saturating_add(steps) <= run::MAX_STAGE_STEPS {
                spent += steps;
                kept.push((i, rule));
                continue;
            }
            let why = format!(
                "the operator's rules together could take {total} steps a snapshot on this node, over {}; this one \
                 alone up to {steps} ({} per evaluation): make it cheaper, or fewer rules",
                run::MAX_STAGE_STEPS,
                rule.compiled.cost().work
            );
            log::warn!(
                "health rule {} is disabled: {why}; change it and reload",
                rule.rule.name
            );
            if let Some(state) = self.kept.get_mut(&rule.name) {
                state.disabled = Some(why);
            }
        }
        // Back in the config's order.
        kept.sort_by_key(|(i, _)| *i);
        kept.into_iter().map(|(_, r)| r).collect()
    }

    /// After a snapshot: a rule over its CPU budget in too many of its recent snapshots is
    /// disabled (counted per rule over time, whatever its subjects: a rule slow on one GPU
    /// and quick on the others is still slow).
    fn judge_budgets(&mut self, ready: &[Ready]) {
        for r in ready {
            let Some(kept) = self.kept.get_mut(&r.name) else {
                continue;
            };
            if kept.disabled.is_some() {
                continue;
            }
            kept.recent.push_back(kept.cpu_now > run::MAX_PER_SNAPSHOT);
            while kept.recent.len() > run::BUDGET_SNAPSHOTS {
                kept.recent.pop_front();
            }
            let over = kept.recent.iter().filter(|o| **o).count();
            if over >= run::OVER_BUDGET_SNAPSHOTS {
                let why = format!(
                    "over its CPU budget of {} ms a snapshot in {over} of its last {} snapshots (the last took {} ms)",
                    run::MAX_PER_SNAPSHOT.as_millis(),
                    kept.recent.len(),
                    kept.cpu_now.as_millis()
                );
                log::warn!("health rule {} is disabled: {why}; change it and reload", r.rule.name);
                kept.disabled = Some(why);
            }
        }
    }

    /// Each rule's state as /metrics shows it.
    fn statuses(&self, rules: &[CustomRule]) -> Vec<CustomRuleStatus> {
        rules
            .iter()
            .map(|rule| {
                let kept = CustomName::intern(&rule.name).and_then(|n| self.kept.get(&n));
                CustomRuleStatus {
                    name: rule.name.clone(),
                    scope: rule.on.label(),
                    disabled: kept.and_then(|k| k.disabled.clone()),
                    evaluations: kept.map_or(0, |k| k.evaluations),
                    seconds: kept.map_or(0.0, |k| k.seconds),
                }
            })
            .collect()
    }

    /// A GPU cleared after a repair since the last snapshot: what its windows held from before
    /// no longer counts (`increase("ecc_corrected", "10m")` would otherwise find the old burst
    /// again right after `gpuwarden health clear`).
    fn forget_cleared(&mut self, snapshot: &Snapshot) {
        for (uuid, clear) in snapshot.clears.iter() {
            if self.clears_seen.get(uuid) != Some(&clear.at) {
                self.clears_seen.insert(uuid.clone(), clear.at);
                self.histories.forget(uuid);
            }
        }
    }

    /// Forgets the rules gone from the config, and the failures of those changed in it.
    fn forget_changed(&mut self, rules: &[CustomRule]) {
        let now: HashMap<CustomName, &str> = rules
            .iter()
            .filter_map(|r| Some((CustomName::intern(&r.name)?, r.when.value.as_str())))
            .collect();
        self.kept
            .retain(|name, kept| now.get(name).is_some_and(|source| *source == kept.source));
        for (name, source) in now {
            self.kept.entry(name).or_insert_with(|| Kept {
                source: source.to_string(),
                ..Kept::default()
            });
        }
    }

    /// Every rule over its subjects: the findings, by the GPU's place in the snapshot (or
    /// `None`: the node's).
    fn run_all(&mut self, snapshot: &Snapshot, ready: &[Ready], now: Instant) -> Vec<(Option<usize>, Finding)> {
        let longest = ready
            .iter()
            .flat_map(|r| r.compiled.calls.iter().filter_map(|c| c.window))
            .max()
            .unwrap_or(windows::MAX_WINDOW);
        let step = windows::step_for(longest);
        let of = |scope: Scope| {
            ready
                .iter()
                .filter(move |r| r.compiled.scope == scope)
                .collect::<Vec<_>>()
        };
        let (gpu_rules, port_rules, node_rules) = (of(Scope::Gpu), of(Scope::Port), of(Scope::Node));
        let want_probe = gpu_rules.iter().any(|r| r.compiled.variables.contains(&"probe"))
            || node_rules.iter().any(|r| r.compiled.variables.contains(&"gpus"));
        let gpus: Vec<GpuFacts> = snapshot
            .devices
            .iter()
            .map(|d| gpu_facts(snapshot, d, want_probe))
            .collect();
        let ports: Vec<PortFacts> = snapshot
            .nics
            .ports()
            .map(|(device, port)| PortFacts { device, port })
            .collect();
        let root = check::root_context();
        let mut found = self.run_gpus(&gpus, &gpu_rules, &root, step, now);
        found.extend(self.run_ports(&ports, &port_rules, &root, step, now));
        if !node_rules.is_empty() {
            let node = NodeFacts {
                hostname: &snapshot.hostname,
                gpus: &gpus,
                gpus_missing: snapshot.missing_gpus().count(),
                ports: &ports,
                fabric_manager_running: snapshot.fabric_manager.as_ref().map(|f| f.running),
            };
            let wanted = Wanted::of(node_rules.iter().map(|r| r.compiled.as_ref()));
            windows::set_figures(Vec::new());
            let context = run::node_scope(&root, &node, &wanted);
            let fired = self.evaluate(&node_rules, &context, None, "the node");
            found.extend(fired.into_iter().map(|f| (None, f)));
        }
        self.forget_subjects(&gpus, &ports, ready);
        found
    }

    /// The GPU rules over every GPU; their findings by the GPU's place.
    fn run_gpus(
        &mut self,
        gpus: &[GpuFacts],
        rules: &[&Ready],
        root: &cel::Context<'static, 'static>,
        step: std::time::Duration,
        now: Instant,
    ) -> Vec<(Option<usize>, Finding)> {
        let mut found = Vec::new();
        if rules.is_empty() {
            return found;
        }
        let wanted = Wanted::of(rules.iter().map(|r| r.compiled.as_ref()));
        let calls = calls_of(rules);
        for (i, facts) in gpus.iter().enumerate() {
            let subject = facts.device.identity.uuid.as_str();
            for call in &calls {
                let value = match call.xid_code() {
                    Some(code) => Some(xid_count(facts, code)),
                    None => schema::series_value(schema::GPU_FIELDS, facts, &call.series),
                };
                if let Some(value) = value {
                    self.histories.note(subject, &call.series, value, now, step);
                }
            }
            self.set_figures(subject, &calls, now, |call| {
                call.xid_code().map(|code| xid_count(facts, code))
            });
            let context = run::gpu_scope(root, facts, &wanted);
            let label = format!("GPU {} ({subject})", facts.device.identity.index);
            let fired = self.evaluate(rules, &context, None, &label);
            found.extend(fired.into_iter().map(|f| (Some(i), f)));
        }
        found
    }

    /// The port rules over every port; their findings are the node's, by port.
    fn run_ports(
        &mut self,
        ports: &[PortFacts],
        rules: &[&Ready],
        root: &cel::Context<'static, 'static>,
        step: std::time::Duration,
        now: Instant,
    ) -> Vec<(Option<usize>, Finding)> {
        let mut found = Vec::new();
        if rules.is_empty() {
            return found;
        }
        let wanted = Wanted::of(rules.iter().map(|r| r.compiled.as_ref()));
        let calls = calls_of(rules);
        for facts in ports {
            let subject = format!("{}/{}", facts.device.name, facts.port.port);
            for call in &calls {
                if let Some(value) = schema::series_value(schema::PORT_FIELDS, facts, &call.series) {
                    self.histories.note(&subject, &call.series, value, now, step);
                }
            }
            self.set_figures(&subject, &calls, now, |_| None);
            let context = run::port_scope(root, facts, &wanted);
            let label = format!("port {subject}");
            let fired = self.evaluate(rules, &context, Some(&subject), &label);
            found.extend(fired.into_iter().map(|f| (None, f)));
        }
        found
    }

    /// Puts `subject`'s window figures in place for its rules.
    /// `total` gives what a call without a window counts (`xid_count(code)`).
    fn set_figures(
        &self,
        subject: &str,
        calls: &[WindowCall],
        now: Instant,
        total: impl Fn(&WindowCall) -> Option<f64>,
    ) {
        let figures = calls
            .iter()
            .map(|call| {
                let figure = match call.window {
                    Some(_) => self.histories.figure(subject, call, now),
                    None => total(call),
                };
                (call.clone(), figure)
            })
            .collect();
        windows::set_figures(figures);
    }

    /// Runs `rules` in `context`: the findings of those that fired; those that failed are
    /// disabled.
    fn evaluate(
        &mut self,
        rules: &[&Ready],
        context: &cel::Context,
        subject: Option<&str>,
        label: &str,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        for rule in rules {
            let Some(kept) = self.kept.get_mut(&rule.name) else {
                continue;
            };
            if kept.disabled.is_some() {
                continue;
            }
            let run::Evaluation { outcome, cpu } = rule.compiled.evaluate(context);
            kept.evaluations += 1;
            kept.seconds += cpu.as_secs_f64();
            kept.cpu_now += cpu;
            // One evaluation far over any accepted rule's cost: disabled at once, not after
            // more snapshots of it.
            let outcome = if cpu > run::MAX_EVALUATION {
                Outcome::Failed(format!(
                    "one evaluation took {} ms of CPU, over {} ms",
                    cpu.as_millis(),
                    run::MAX_EVALUATION.as_millis()
                ))
            } else {
                outcome
            };
            match outcome {
                Outcome::Fired(read) => out.push(Finding {
                    reason: Reason::Custom(rule.name),
                    severity: rule.rule.severity,
                    message: fired_message(rule.rule, &read),
                    subject: subject.map(str::to_string),
                }),
                Outcome::Failed(why) => {
                    log::warn!(
                        "health rule {} is disabled: {why} (on {label}); change it and reload",
                        rule.rule.name
                    );
                    kept.disabled = Some(why);
                }
                Outcome::Quiet | Outcome::NotApplicable => {}
            }
        }
        out
    }

    /// Forgets the series of GPUs and ports gone, and those no rule asks for.
    fn forget_subjects(&mut self, gpus: &[GpuFacts], ports: &[PortFacts], ready: &[Ready]) {
        let present: std::collections::HashSet<String> = gpus
            .iter()
            .map(|g| g.device.identity.uuid.clone())
            .chain(ports.iter().map(|p| format!("{}/{}", p.device.name, p.port.port)))
            .collect();
        let named: std::collections::HashSet<&str> = ready
            .iter()
            .flat_map(|r| r.compiled.calls.iter().map(|c| c.series.as_str()))
            .collect();
        self.histories
            .retain(&|subject| present.contains(subject), &|series| named.contains(series));
        self.clears_seen.retain(|uuid, _| present.contains(uuid));
    }
}

/// The rule's advice, then what it read.
fn fired_message(rule: &CustomRule, read: &str) -> String {
    if read.is_empty() {
        format!("{} (health rule {})", rule.advice, rule.name)
    } else {
        format!("{} (health rule {}: {read})", rule.advice, rule.name)
    }
}

/// The windows a scope's rules ask for, each once.
fn calls_of(rules: &[&Ready]) -> Vec<WindowCall> {
    let mut calls: Vec<WindowCall> = Vec::new();
    for call in rules.iter().flat_map(|r| r.compiled.calls.iter()) {
        if !calls.contains(call) {
            calls.push(call.clone());
        }
    }
    calls
}

/// The GPU's XIDs of `code` since its last clear.
fn xid_count(facts: &GpuFacts, code: u32) -> f64 {
    facts
        .xids
        .iter()
        .filter(|x| x.xid == code)
        .map(|x| x.count)
        .sum::<u64>() as f64
}

/// One GPU as the operator's rules see it.
fn gpu_facts<'a>(snapshot: &'a Snapshot, device: &'a DeviceSnapshot, want_probe: bool) -> GpuFacts<'a> {
    let uuid = &device.identity.uuid;
    let probe = if want_probe {
        probe_figures(snapshot, device)
    } else {
        Vec::new()
    };
    GpuFacts {
        device,
        health: device.health.state,
        probe,
        jobs: snapshot.jobs.get(uuid).map_or(&[], Vec::as_slice),
        pods: snapshot
            .pods
            .get(uuid)
            .map(|pods| pods.iter().map(|p| format!("{}/{}", p.namespace, p.pod)).collect())
            .unwrap_or_default(),
        xids: super::xids_since_clear(snapshot, device),
    }
}

/// The latest probe's figures of `device`, with their references.
fn probe_figures(snapshot: &Snapshot, device: &DeviceSnapshot) -> Vec<ProbeFigure> {
    let cleared = snapshot.clears.get(&device.identity.uuid).map(|c| c.time());
    let report = snapshot.probe.reports.get(&device.identity.uuid);
    super::baseline::compare(device, snapshot, &snapshot.health_limits.probe_regression, cleared)
        .into_iter()
        .map(|c| ProbeFigure {
            test: c.test.name(),
            figure: c.figure,
            expected: report
                .and_then(|r| r.tests.iter().find(|t| t.test == c.test))
                .and_then(|t| t.expected),
            baseline: c.own.map(|(median, _)| median),
            node_median: c.node.map(|(median, _)| median),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::model::health::HealthState;
    use crate::model::{DeviceReadings, Vendor};
    use std::time::Duration;

    fn rules(yaml: &str) -> Vec<CustomRule> {
        let text = format!("health:\n  custom_rules:\n{yaml}");
        Config::parse(&text, std::path::Path::new("t.yaml"))
            .unwrap()
            .health
            .custom_rules
    }

    fn gpu(index: u32, memory_c: Option<f64>, ecc: u64) -> DeviceSnapshot {
        let mut readings = DeviceReadings {
            memory_total_bytes: Some(80 << 30),
            ..Default::default()
        };
        if let Some(c) = memory_c {
            readings.temperatures.push((crate::model::Sensor::Memory, c));
        }
        readings.ecc_errors.push(crate::model::EccCount {
            error_type: crate::model::EccType::Corrected,
            scope: crate::model::EccScope::Volatile,
            count: ecc,
        });
        DeviceSnapshot::for_test(index, Vendor::Nvidia, &format!("0000:{:02x}:00.0", index + 1), readings)
    }

    fn snapshot(devices: Vec<DeviceSnapshot>) -> Snapshot {
        Snapshot {
            devices,
            ..Default::default()
        }
    }

    const HOT: &str = "    - name: hbm_hot\n      when: gpu.memory_temperature_c > 90\n      severity: unhealthy\n      advice: cool it\n";

    /// The hot GPU gets the finding and the verdict; the cool one does not; the one without
    /// an HBM sensor is not judged (no finding, no error).
    #[test]
    fn a_rule_fires_where_its_condition_holds_and_only_there() {
        let rules = rules(HOT);
        let mut runner = CustomRuleRunner::default();
        let mut s = snapshot(vec![gpu(0, Some(93.0), 0), gpu(1, Some(70.0), 0), gpu(2, None, 0)]);
        runner.apply(&mut s, &rules, Instant::now());
        let f = &s.devices[0].health.findings;
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].reason.label(), "hbm_hot");
        assert_eq!(
            f[0].message,
            "cool it (health rule hbm_hot: gpu.memory_temperature_c = 93)"
        );
        assert_eq!(s.devices[0].health.state, HealthState::Unhealthy);
        assert!(s.devices[1].health.findings.is_empty() && s.devices[2].health.findings.is_empty());
        assert_eq!(s.custom_rules[0].disabled, None);
        assert_eq!(s.custom_rules[0].evaluations, 3);
    }

    /// A rule that fails at run time (an overflow the sample's 1 did not show) is disabled
    /// alone; the next rule runs on; a changed expression runs again.
    #[test]
    fn a_failing_rule_is_disabled_alone_until_it_changes() {
        let overflow =
            "    - name: overflows\n      when: gpu.memory_total_bytes * 1000000000000 > 0\n      advice: a\n";
        let mut runner = CustomRuleRunner::default();
        let both = rules(&format!("{overflow}{HOT}"));
        for _ in 0..2 {
            let mut s = snapshot(vec![gpu(0, Some(93.0), 0)]);
            runner.apply(&mut s, &both, Instant::now());
            let status = &s.custom_rules;
            assert!(
                status[0].disabled.as_deref().is_some_and(|w| w.contains("Overflow")),
                "{status:?}"
            );
            assert_eq!(status[0].evaluations, 1, "evaluated once, then left alone");
            assert_eq!(status[1].disabled, None);
            assert!(
                s.devices[0]
                    .health
                    .findings
                    .iter()
                    .any(|f| f.reason.label() == "hbm_hot")
            );
        }
        let fixed = rules(&format!("{}{HOT}", overflow.replace("1000000000000", "2")));
        let mut s = snapshot(vec![gpu(0, Some(93.0), 0)]);
        runner.apply(&mut s, &fixed, Instant::now());
        assert_eq!(s.custom_rules[0].disabled, None);
        assert!(
            s.devices[0]
                .health
                .findings
                .iter()
                .any(|f| f.reason.label() == "overflows")
        );
    }

    /// A window over snapshots: the corrected errors of the last ten minutes, as the counter
    /// grows between them.
    #[test]
    fn a_window_counts_across_snapshots() {
        let rules =
            rules("    - name: burst\n      when: increase(\"ecc_corrected\", \"10m\") > 1000\n      advice: a\n");
        let mut runner = CustomRuleRunner::default();
        let start = Instant::now();
        let mut fired = Vec::new();
        for minute in 0..15u64 {
            let mut s = snapshot(vec![gpu(0, None, minute * 150)]);
            runner.apply(&mut s, &rules, start + Duration::from_secs(60 * minute));
            fired.push(!s.devices[0].health.findings.is_empty());
        }
        // 150 a minute: over 1000 once seven minutes of growth are in the window.
        assert_eq!(fired.iter().position(|f| *f), Some(7), "{fired:?}");
        let message = {
            let mut s = snapshot(vec![gpu(0, None, 15 * 150)]);
            runner.apply(&mut s, &rules, start + Duration::from_secs(60 * 15));
            s.devices[0].health.findings[0].message.clone()
        };
        assert!(
            message.contains("increase(\"ecc_corrected\", \"10m\") = 1500"),
            "{message}"
        );
    }

    /// `xid_count(code)` counts the GPU's XIDs of the code since its last clear; with a
    /// window, those within it.
    #[test]
    fn xid_counts_with_and_without_a_window() {
        let rules = rules(
            "    - name: any79\n      when: xid_count(79) >= 1\n      advice: a\n    \
             - name: two79\n      when: xid_count(79, \"10m\") >= 2\n      advice: b\n",
        );
        let mut runner = CustomRuleRunner::default();
        let start = Instant::now();
        let fired = |runner: &mut CustomRuleRunner, count: u64, minute: u64| {
            let mut s = snapshot(vec![gpu(0, None, 0)]);
            if count > 0 {
                let xid = crate::model::xid::XidCount {
                    xid: 79,
                    severity: crate::model::xid::Severity::Fatal,
                    count,
                    last_seen: std::time::SystemTime::now(),
                    recent: 0,
                };
                s.xid.by_bus.insert("0000:01:00.0".into(), vec![xid]);
            }
            runner.apply(&mut s, &rules, start + Duration::from_secs(60 * minute));
            let mut names: Vec<&str> = s.devices[0].health.findings.iter().map(|f| f.reason.label()).collect();
            names.sort();
            names.join(",")
        };
        assert_eq!(fired(&mut runner, 0, 0), "");
        assert_eq!(fired(&mut runner, 1, 1), "any79");
        assert_eq!(fired(&mut runner, 2, 2), "any79,two79");
        // Twelve minutes on, the two are out of the window; the count since the clear stays.
        assert_eq!(fired(&mut runner, 2, 14), "any79");
    }

    /// An operator's clear starts the GPU's windows afresh: the burst before it is not found
    /// again after it.
    #[test]
    fn a_clear_starts_the_windows_afresh() {
        let rules =
            rules("    - name: burst\n      when: increase(\"ecc_corrected\", \"10m\") > 1000\n      advice: a\n");
        let mut runner = CustomRuleRunner::default();
        let start = Instant::now();
        let mut clears = std::collections::BTreeMap::new();
        let at = |runner: &mut CustomRuleRunner, minute: u64, ecc: u64, clears: &crate::model::health::Clears| {
            let mut s = snapshot(vec![gpu(0, None, ecc)]);
            s.clears = std::sync::Arc::new(clears.clone());
            runner.apply(&mut s, &rules, start + Duration::from_secs(60 * minute));
            !s.devices[0].health.findings.is_empty()
        };
        assert!(!at(&mut runner, 0, 0, &clears));
        assert!(at(&mut runner, 1, 2000, &clears), "a burst of 2000 in a minute");
        clears.insert(
            "GPU-0".to_string(),
            crate::model::health::Clear {
                at: 1.0,
                reason: "reseated".into(),
                by: "test".into(),
            },
        );
        assert!(!at(&mut runner, 2, 2000, &clears), "the burst is from before the clear");
        assert!(!at(&mut runner, 3, 2100, &clears));
        assert!(at(&mut runner, 4, 3200, &clears), "a new burst after it");
    }

    /// A rule slow on one GPU and quick on the others is judged per rule over its snapshots:
    /// three of its last ten over its budget disable it, whatever its quick evaluations in
    /// between (before: "three in a row" over every evaluation, which the quick GPUs broke).
    #[test]
    fn a_rule_over_its_budget_in_three_of_ten_snapshots_is_disabled() {
        let rules = rules(HOT);
        let mut runner = CustomRuleRunner::default();
        let mut s = snapshot(vec![gpu(0, Some(50.0), 0), gpu(1, Some(50.0), 0)]);
        runner.apply(&mut s, &rules, Instant::now());
        let name = CustomName::intern("hbm_hot").unwrap();
        let ready: Vec<Ready> = rules
            .iter()
            .filter_map(|rule| rule.ready().map(|(name, compiled)| Ready { name, rule, compiled }))
            .collect();
        // The first apply above was one snapshot of its own (quick).
        for (snapshot_cpu_ms, disabled) in [(30, false), (1, false), (25, false), (1, false), (40, true)] {
            runner.kept.get_mut(&name).unwrap().cpu_now = Duration::from_millis(snapshot_cpu_ms);
            runner.judge_budgets(&ready);
            let why = runner.kept[&name].disabled.clone();
            assert_eq!(why.is_some(), disabled, "{snapshot_cpu_ms} ms: {why:?}");
        }
        let why = runner.kept[&name].disabled.clone().unwrap();
        assert!(why.contains("in 3 of its last 6 snapshots"), "{why}");
        // A change of the rule lets it run again.
        let changed = rules_with_threshold(91);
        let mut s = snapshot(vec![gpu(0, Some(95.0), 0)]);
        runner.apply(&mut s, &changed, Instant::now());
        assert_eq!(s.custom_rules[0].disabled, None);
    }

    fn rules_with_threshold(c: u32) -> Vec<CustomRule> {
        rules(&HOT.replace("> 90", &format!("> {c}")))
    }

    /// Rules whose bounds together exceed the stage's budget on this node: the costliest is
    /// disabled, said why, and the others run.
    #[test]
    fn rules_beyond_the_stages_budget_on_this_node_are_disabled_costliest_first() {
        let list = format!("[{}]", (0..30).map(|i| i.to_string()).collect::<Vec<_>>().join(","));
        let costly = format!("{list}.exists(a, {list}.exists(b, a == b + 100))");
        let mut yaml = String::from(HOT);
        // Each within MAX_WORK; 30 of them over 8 GPUs are over the stage's budget.
        for i in 0..30 {
            yaml.push_str(&format!(
                "    - name: costly_{i}\n      when: '{costly}'\n      advice: a\n"
            ));
        }
        let rules = rules(&yaml);
        let per = rules[1].compiled.as_ref().unwrap().cost().work;
        assert!(per <= crate::custom_rules::cost::MAX_WORK, "{per}");
        let mut runner = CustomRuleRunner::default();
        let mut s = snapshot((0..8).map(|i| gpu(i, Some(95.0), 0)).collect());
        runner.apply(&mut s, &rules, Instant::now());
        // Only the stage budget's: under emulation (the arm64 tests run under qemu, which
        // translates code as it first runs) a first costly evaluation can pass the CPU-time
        // guard (run::MAX_EVALUATION) too; that guard has tests of its own.
        let disabled: Vec<&str> = s
            .custom_rules
            .iter()
            .filter(|r| {
                r.disabled
                    .as_deref()
                    .is_some_and(|why| why.contains("together could take"))
            })
            .map(|r| r.name.as_str())
            .collect();
        let fit = (run::MAX_STAGE_STEPS / (per * 8)) as usize;
        assert_eq!(disabled.len(), 30 - fit, "{disabled:?}");
        assert!(!disabled.contains(&"hbm_hot"), "the cheap rule runs");
        assert!(
            s.custom_rules
                .iter()
                .filter_map(|r| r.disabled.as_deref())
                .any(|why| why.contains("together could take") && why.contains("make it cheaper, or fewer rules")),
        );
        assert!(
            s.devices[0]
                .health
                .findings
                .iter()
                .any(|f| f.reason.label() == "hbm_hot")
        );
    }
}
