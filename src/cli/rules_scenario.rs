//! Test files for the operator's rules, run by `gpuwarden rules test FILE` (docs/health.md,
//! "Testing rules"): scenarios of readings step by step, the rules run over each step with
//! their windows, debounce and hold as the daemon runs them, and the findings at given times
//! compared with what the test expects, as `promtool test rules` does for alerts.
//!
//! ```yaml
//! rule_files: [gpu-rules.yaml]   # relative to this file
//! interval: 1m                   # between steps (the poll, for the debounce)
//! tests:
//!   - name: HBM hot for five minutes
//!     gpus:
//!       - memory_temperature_c: 85 92 93 94 95 96 97
//!         ecc_corrected: 0+100x6    # 0, 100, ... 600 (promtool's notation); _ is absent
//!     expect:
//!       - {at: 2m, gpu: 0, firing: []}
//!       - {at: 6m, gpu: 0, firing: [hbm_hot]}
//! ```

use crate::config::{Config, CustomRule};
use crate::custom_rules::run::Outcome;
use crate::custom_rules::schema::{self, Kind, Scope};
use crate::custom_rules::windows::{self, Histories, WindowCall};
use crate::health::debounce::Debouncer;
use crate::model::health::{Finding, Reason};
use crate::model::{DeviceSnapshot, Snapshot};
use crate::service::exit::{CliError, CliResult, Exit};
use cel::Value;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    rule_files: Vec<PathBuf>,
    #[serde(default)]
    interval: Option<String>,
    tests: Vec<Test>,
}

/// The readings of one GPU, port or the node: a field's value per step.
type Series = BTreeMap<String, serde_json::Value>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Test {
    name: String,
    #[serde(default)]
    gpus: Vec<Series>,
    #[serde(default)]
    ports: Vec<Series>,
    #[serde(default)]
    node: Series,
    expect: Vec<Expect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    at: String,
    #[serde(default)]
    gpu: Option<usize>,
    #[serde(default)]
    port: Option<usize>,
    #[serde(default)]
    node: bool,
    firing: Vec<String>,
}

/// What is wrong with a test of a test file.
#[derive(Debug, thiserror::Error)]
enum ScenarioError {
    #[error("no field `{name}` of {scope}; the fields are: {fields}")]
    UnknownField {
        name: String,
        scope: &'static str,
        fields: String,
    },
    #[error("{field}: {token:?} is not {want}")]
    BadValue {
        field: String,
        token: String,
        want: &'static str,
    },
    #[error("at {at:?}: {why}")]
    BadAt { at: String, why: String },
    #[error("an expectation names one of gpu: N, port: N or node: true")]
    NoOwner,
    #[error(
        "{given} {what} in one test, over {max}: the rules' cost bound (and the daemon's) assumes at most \
         {max}; split it into tests"
    )]
    TooMany {
        what: &'static str,
        given: usize,
        max: usize,
    },
}

/// The most GPUs and ports one test may give: the bounds the rules' cost is worked out for
/// (custom_rules::cost), so a test cannot run a rule further than the daemon would.
const MAX_TEST_GPUS: usize = crate::custom_rules::cost::MAX_GPUS as usize;
const MAX_TEST_PORTS: usize = crate::model::nic::MAX_PORTS;

/// A token that is not a value of its field's kind: the token, and what it should be.
struct BadToken(String, &'static str);

fn config_error(file: &Path, message: impl std::fmt::Display) -> CliError {
    CliError::new(Exit::CONFIG, format!("{}: {message}", file.display()))
}

/// Runs every test of `file`; prints each expectation's result.
pub(crate) fn run(file: &Path) -> CliResult {
    let text = crate::config::read_config_file(file, "test file").map_err(|e| config_error(file, e))?;
    let options = serde_saphyr::options! { strict_booleans: true };
    let tests: TestFile = serde_saphyr::from_str_with_options(&text, options).map_err(|e| config_error(file, e))?;
    let interval = match &tests.interval {
        Some(text) => {
            humantime::parse_duration(text).map_err(|e| config_error(file, format!("interval {text:?}: {e}")))?
        }
        None => Duration::from_secs(60),
    };
    if interval.is_zero() {
        return Err(config_error(file, "interval must be more than 0"));
    }
    let mut rules = Vec::new();
    let mut taken = Vec::new();
    let dir = file.parent().unwrap_or(Path::new("."));
    for rule_file in &tests.rule_files {
        let path = dir.join(rule_file);
        let more =
            Config::read_rule_file_into(&path, &mut taken).map_err(|e| CliError::new(Exit::CONFIG, e.to_string()))?;
        rules.extend(more);
    }
    let mut failed = 0;
    for test in &tests.tests {
        let report =
            run_test(test, &rules, interval).map_err(|e| config_error(file, format!("test {:?}: {e}", test.name)))?;
        failed += report.failed;
        print!("{}", report.text);
    }
    println!(
        "{}: {} tests, {}",
        file.display(),
        tests.tests.len(),
        if failed == 0 {
            "all passed".to_string()
        } else {
            format!("{failed} expectations failed")
        }
    );
    Ok(if failed == 0 { Exit::SUCCESS } else { Exit::FAILURE })
}

/// One test's printout, and how many of its expectations failed.
struct Report {
    text: String,
    failed: usize,
}

/// Who a finding is about in a test: GPU n, port n, or the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Owner {
    Gpu(usize),
    Port(usize),
    Node,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Gpu(i) => write!(f, "gpu {i}"),
            Owner::Port(i) => write!(f, "port {i}"),
            Owner::Node => f.write_str("node"),
        }
    }
}

/// Refuses a test of more GPUs or ports than the bounds allow.
fn within_bounds(test: &Test) -> Result<(), ScenarioError> {
    for (what, given, max) in [
        ("GPUs", test.gpus.len(), MAX_TEST_GPUS),
        ("ports", test.ports.len(), MAX_TEST_PORTS),
    ] {
        if given > max {
            return Err(ScenarioError::TooMany { what, given, max });
        }
    }
    Ok(())
}

fn run_test(test: &Test, rules: &[CustomRule], interval: Duration) -> Result<Report, ScenarioError> {
    within_bounds(test)?;
    let gpus: Vec<Steps> = test
        .gpus
        .iter()
        .map(|s| steps(s, Scope::Gpu))
        .collect::<Result<_, _>>()?;
    let ports: Vec<Steps> = test
        .ports
        .iter()
        .map(|s| steps(s, Scope::Port))
        .collect::<Result<_, _>>()?;
    let node = steps(&test.node, Scope::Node)?;
    // Until the last step given or the last expectation, whichever is later: a series shorter
    // than that keeps its last value.
    let mut ats = Vec::new();
    for expect in &test.expect {
        let bad_at = |why: String| ScenarioError::BadAt {
            at: expect.at.clone(),
            why,
        };
        let at = humantime::parse_duration(&expect.at).map_err(|e| bad_at(e.to_string()))?;
        if at.as_nanos() % interval.as_nanos() != 0 || at > interval * 100_000 {
            return Err(bad_at(format!(
                "not a step (every {}, at most 100000)",
                humantime::format_duration(interval)
            )));
        }
        ats.push((at.as_nanos() / interval.as_nanos()) as usize);
    }
    let given = gpus
        .iter()
        .chain(&ports)
        .chain([&node])
        .map(Steps::len)
        .max()
        .unwrap_or(0);
    let count = given.max(ats.iter().max().map_or(0, |a| a + 1)).max(1);
    let mut world = World::new(rules, interval, gpus.len());
    let mut firing: Vec<BTreeMap<Owner, BTreeSet<String>>> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for step in 0..count {
        let found = world.step(step, &gpus, &ports, &node, &mut failures);
        firing.push(found);
    }
    let mut text = format!("{}\n", test.name);
    let mut failed = failures.len();
    for failure in &failures {
        text.push_str(&format!("  FAILED: {failure}\n"));
    }
    for (expect, step) in test.expect.iter().zip(ats) {
        let owner = match (expect.gpu, expect.port, expect.node) {
            (Some(i), None, false) => Owner::Gpu(i),
            (None, Some(i), false) => Owner::Port(i),
            (None, None, true) => Owner::Node,
            _ => return Err(ScenarioError::NoOwner),
        };
        let got = firing[step].get(&owner).cloned().unwrap_or_default();
        let want: BTreeSet<String> = expect.firing.iter().cloned().collect();
        let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
        if got == want {
            text.push_str(&format!("  ok: at {} {owner} firing [{}]\n", expect.at, list(&got)));
        } else {
            failed += 1;
            text.push_str(&format!(
                "  FAILED: at {} {owner} firing [{}], expected [{}]\n",
                expect.at,
                list(&got),
                list(&want)
            ));
        }
    }
    Ok(Report { text, failed })
}

/// One subject's values, per field, per step (`None`: absent at that step).
struct Steps {
    fields: Vec<(String, Kind, Vec<Option<Value>>)>,
}

impl Steps {
    fn len(&self) -> usize {
        self.fields.iter().map(|(_, _, v)| v.len()).max().unwrap_or(0)
    }

    /// The map of the subject at `step` (a series shorter than the test keeps its last value).
    fn at(&self, step: usize) -> HashMap<String, Value> {
        let mut map = HashMap::new();
        for (name, _, values) in &self.fields {
            if let Some(Some(value)) = values.get(step.min(values.len().saturating_sub(1))) {
                map.insert(name.clone(), value.clone());
            }
        }
        map
    }

    fn number(&self, field: &str, step: usize) -> Option<f64> {
        match self.at(step).get(field)? {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }
}

/// The kinds of a scope's fields, with the extra keys a test may give (`xid_79`, `jobs`).
fn kind_of(scope: Scope, name: &str) -> Option<Kind> {
    fn find<R>(fields: &[schema::Field<R>], name: &str) -> Option<Kind> {
        fields.iter().find(|f| f.name == name).map(|f| f.kind)
    }
    match scope {
        Scope::Gpu if name.strip_prefix("xid_").is_some_and(|c| c.parse::<u32>().is_ok()) => Some(Kind::Int),
        Scope::Gpu if name == "jobs" || name == "pods" => Some(Kind::Strings),
        Scope::Gpu => find(schema::GPU_FIELDS, name),
        Scope::Port => find(schema::PORT_FIELDS, name),
        Scope::Node => find(schema::NODE_FIELDS, name),
    }
}

fn steps(series: &Series, scope: Scope) -> Result<Steps, ScenarioError> {
    let mut fields = Vec::new();
    for (name, written) in series {
        let Some(kind) = kind_of(scope, name) else {
            return Err(ScenarioError::UnknownField {
                name: name.clone(),
                scope: scope.label(),
                fields: schema::field_names(scope.label()).unwrap_or_default().join(", "),
            });
        };
        let text = match written {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let values = expand(&text, kind).map_err(|BadToken(token, want)| ScenarioError::BadValue {
            field: name.clone(),
            token,
            want,
        })?;
        fields.push((name.clone(), kind, values));
    }
    Ok(Steps { fields })
}

/// "85 92 _ 0+100x3" as values of `kind`: `_` is absent, `a+bxn` is a, a+b, ... a+nb.
fn expand(text: &str, kind: Kind) -> Result<Vec<Option<Value>>, BadToken> {
    let mut out = Vec::new();
    for token in text.split_whitespace() {
        if token == "_" {
            out.push(None);
            continue;
        }
        if kind.numeric()
            && let Some((start, rest)) = token.split_once(['+', '-']).filter(|(s, _)| !s.is_empty())
            && let Some((by, times)) = rest.split_once('x')
        {
            let sign = if token[start.len()..].starts_with('-') {
                -1.0
            } else {
                1.0
            };
            let bad = || BadToken(token.to_string(), "a+bxn with n at most 100000");
            let parse = |t: &str| t.parse::<f64>().map_err(|_| bad());
            let (start, by) = (parse(start)?, parse(by)?);
            let times: u32 = times.parse().ok().filter(|n| *n <= 100_000).ok_or_else(bad)?;
            out.extend((0..=times).map(|i| Some(number(start + sign * by * f64::from(i), kind))));
            continue;
        }
        out.push(Some(value(token, kind)?));
    }
    Ok(out)
}

fn number(v: f64, kind: Kind) -> Value {
    match kind {
        Kind::Int => Value::Int(v as i64),
        _ => Value::Float(v),
    }
}

fn value(token: &str, kind: Kind) -> Result<Value, BadToken> {
    match kind {
        Kind::Int | Kind::Double => token
            .parse::<f64>()
            .map(|v| number(v, kind))
            .map_err(|_| BadToken(token.to_string(), "a number")),
        Kind::Bool => match token {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(BadToken(token.to_string(), "true or false")),
        },
        Kind::String => Ok(Value::String(Arc::new(token.to_string()))),
        Kind::Strings => Ok(Value::List(Arc::new(
            token
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(Arc::new(s.to_string())))
                .collect(),
        ))),
    }
}

/// The rules and their memory through one test's steps.
struct World<'a> {
    rules: Vec<(
        &'a CustomRule,
        crate::model::health::CustomName,
        &'a Arc<crate::custom_rules::Compiled>,
    )>,
    interval: Duration,
    histories: Histories,
    debouncer: Debouncer,
    policies: Vec<(Reason, crate::config::RulePolicy)>,
    start: Instant,
    devices: Vec<DeviceSnapshot>,
    disabled: BTreeSet<String>,
}

impl<'a> World<'a> {
    fn new(rules: &'a [CustomRule], interval: Duration, gpus: usize) -> World<'a> {
        let rules: Vec<_> = rules
            .iter()
            .filter_map(|r| r.ready().map(|(name, compiled)| (r, name, compiled)))
            .collect();
        let policies = rules
            .iter()
            .map(|(r, name, _)| (Reason::Custom(*name), r.policy()))
            .collect();
        let devices = (0..gpus).map(|i| DeviceSnapshot::stand_in(i as u32)).collect();
        World {
            rules,
            interval,
            histories: Histories::default(),
            debouncer: Debouncer::default(),
            policies,
            start: Instant::now(),
            devices,
            disabled: BTreeSet::new(),
        }
    }

    /// One step: every rule over every subject, then the debounce; what fires, by owner.
    fn step(
        &mut self,
        step: usize,
        gpus: &[Steps],
        ports: &[Steps],
        node: &Steps,
        failures: &mut Vec<String>,
    ) -> BTreeMap<Owner, BTreeSet<String>> {
        let now = self.start + self.interval * step as u32;
        let root = crate::custom_rules::check::root_context();
        let mut found: Vec<(Owner, Finding)> = Vec::new();
        let mut gpu_maps = Vec::new();
        for (i, gpu) in gpus.iter().enumerate() {
            let mut map = gpu.at(step);
            map.entry("index".into()).or_insert(Value::Int(i as i64));
            map.entry("health".into())
                .or_insert(Value::String(Arc::new("ok".into())));
            let jobs = map.remove("jobs").unwrap_or(Value::List(Arc::default()));
            let pods = map.remove("pods").unwrap_or(Value::List(Arc::default()));
            map.retain(|k, _| !k.starts_with("xid_"));
            let subject = format!("gpu{i}");
            self.note(&subject, Scope::Gpu, gpu, step, now);
            let mut context = root.new_inner_scope();
            context.add_variable_from_value("gpu", Value::from(map.clone()));
            context.add_variable_from_value("jobs", jobs);
            context.add_variable_from_value("pods", pods);
            context.add_variable_from_value("probe", Value::from(HashMap::<String, Value>::new()));
            found.extend(self.evaluate(Scope::Gpu, &context, Owner::Gpu(i), step, failures));
            gpu_maps.push(Value::from(map));
        }
        for (i, port) in ports.iter().enumerate() {
            let subject = format!("port{i}");
            self.note(&subject, Scope::Port, port, step, now);
            let mut context = root.new_inner_scope();
            context.add_variable_from_value("port", Value::from(port.at(step)));
            found.extend(self.evaluate(Scope::Port, &context, Owner::Port(i), step, failures));
        }
        windows::set_figures(Vec::new());
        let mut context = root.new_inner_scope();
        context.add_variable_from_value("node", Value::from(node.at(step)));
        context.add_variable_from_value("gpus", gpu_maps);
        found.extend(self.evaluate(Scope::Node, &context, Owner::Node, step, failures));
        self.debounce(found, now)
    }

    /// Notes the windows' series of `subject` at `step`, and puts its figures in place.
    fn note(&mut self, subject: &str, scope: Scope, values: &Steps, step: usize, now: Instant) {
        let calls: Vec<WindowCall> = self
            .rules
            .iter()
            .filter(|(_, _, c)| c.scope == scope)
            .flat_map(|(_, _, c)| c.calls.iter().cloned())
            .collect();
        let longest = calls
            .iter()
            .filter_map(|c| c.window)
            .max()
            .unwrap_or(windows::MAX_WINDOW);
        let every = windows::step_for(longest);
        let mut figures = Vec::new();
        for call in calls {
            let field = match call.xid_code() {
                Some(code) => format!("xid_{code}"),
                None => call.series.clone(),
            };
            // An XID code the test does not give counted none.
            let value = values.number(&field, step).or(call.xid_code().map(|_| 0.0));
            if let Some(value) = value {
                self.histories.note(subject, &call.series, value, now, every);
            }
            let figure = match call.window {
                Some(_) => self.histories.figure(subject, &call, now),
                None => value,
            };
            figures.push((call, figure));
        }
        windows::set_figures(figures);
    }

    fn evaluate(
        &mut self,
        scope: Scope,
        context: &cel::Context,
        owner: Owner,
        step: usize,
        failures: &mut Vec<String>,
    ) -> Vec<(Owner, Finding)> {
        let mut out = Vec::new();
        for (rule, name, compiled) in self.rules.iter().filter(|(_, _, c)| c.scope == scope) {
            if self.disabled.contains(&rule.name) {
                continue;
            }
            // The cost is the daemon's to judge; a test judges what fires.
            match compiled.evaluate(context).outcome {
                Outcome::Fired(read) => out.push((
                    owner,
                    Finding {
                        reason: Reason::Custom(*name),
                        severity: rule.severity,
                        message: read,
                        subject: None,
                    },
                )),
                Outcome::Failed(why) => {
                    failures.push(format!(
                        "rule {} failed on {owner} at step {step}, and is disabled: {why}",
                        rule.name
                    ));
                    self.disabled.insert(rule.name.clone());
                }
                Outcome::Quiet | Outcome::NotApplicable => {}
            }
        }
        out
    }

    /// The findings through the rules' debounce and hold, as the daemon applies them.
    fn debounce(&mut self, found: Vec<(Owner, Finding)>, now: Instant) -> BTreeMap<Owner, BTreeSet<String>> {
        let mut snapshot = Snapshot {
            devices: self.devices.clone(),
            ..Default::default()
        };
        for (owner, mut finding) in found {
            match owner {
                Owner::Gpu(i) => snapshot.devices[i].health.findings.push(finding),
                Owner::Port(i) => {
                    finding.subject = Some(format!("port{i}"));
                    snapshot.node_findings.push(finding);
                }
                Owner::Node => snapshot.node_findings.push(finding),
            }
        }
        self.debouncer.apply(&mut snapshot, &self.policies, self.interval, now);
        let mut firing: BTreeMap<Owner, BTreeSet<String>> = BTreeMap::new();
        for (i, device) in snapshot.devices.iter().enumerate() {
            for f in &device.health.findings {
                firing.entry(Owner::Gpu(i)).or_default().insert(f.reason.to_string());
            }
        }
        for f in &snapshot.node_findings {
            let owner = match f.subject.as_deref().and_then(|s| s.strip_prefix("port")) {
                Some(i) => Owner::Port(i.parse().unwrap_or(usize::MAX)),
                None => Owner::Node,
            };
            firing.entry(owner).or_default().insert(f.reason.to_string());
        }
        firing
    }
}
