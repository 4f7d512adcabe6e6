//! Running a compiled rule over one subject's values: whether it fires, what it read (for
//! the finding's message), and the errors that take it out of service.

use super::check::Compiled;
use super::schema::{self, GpuFacts, NodeFacts, PortFacts};
use cel::{Context, ExecutionError, Value};
use std::time::Duration;

/// One evaluation's longest CPU time: far over what any rule `config check` accepts costs
/// (super::cost bounds it before it runs; the worst accepted took about a millisecond,
/// benches/custom_rules.rs), so a rule over it is disabled at once: what the static bound
/// did not foresee (a node with more GPUs than it assumes) costs that rule, not the verdict.
pub(crate) const MAX_EVALUATION: Duration = Duration::from_millis(50);
/// A rule's CPU time in one snapshot, over all its subjects, above which the snapshot counts
/// against it.
pub(crate) const MAX_PER_SNAPSHOT: Duration = Duration::from_millis(20);
/// How many of its recent snapshots a rule is judged over, and how many over its budget
/// disable it: CPU time, not wall time, and not one snapshot (a thread preempted on a busy
/// node, or a first evaluation faulting the interpreter's code in, is not the rule's cost).
pub(crate) const BUDGET_SNAPSHOTS: usize = 10;
pub(crate) const OVER_BUDGET_SNAPSHOTS: usize = 3;
/// The most steps (super::cost) all the operator's rules may take in one snapshot, each
/// rule's bound times its subjects on the node: beyond it the costliest rules are disabled.
pub(crate) const MAX_STAGE_STEPS: u64 = 400_000;

/// This thread's CPU time so far (user and system).
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on this stack.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if !ok {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// One evaluation: what it came to, and the CPU time it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub outcome: Outcome,
    pub cpu: Duration,
}

/// What one evaluation came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// True: the finding is made; with what the rule read.
    Fired(String),
    /// False.
    Quiet,
    /// It reads something this subject does not have (a reading the GPU does not give, a
    /// window with no samples yet): it does not apply here.
    NotApplicable,
    /// An error of its own (a division by zero, an overflow): the rule is disabled until the
    /// config changes (as it is when too costly, which the runner judges from `cpu`).
    Failed(String),
}

/// The variables a subject's rules see, bound over a root context (`check::root_context`).
pub(crate) fn gpu_scope<'a>(
    root: &'a Context<'static, 'static>,
    facts: &GpuFacts,
    wanted: &Wanted,
) -> Context<'a, 'static> {
    let mut context = root.new_inner_scope();
    context.add_variable_from_value("gpu", schema::map_of(schema::GPU_FIELDS, facts, Some(&wanted.fields)));
    if wanted.variables.contains(&"probe") {
        context.add_variable_from_value("probe", schema::probe_map(&facts.probe));
    }
    if wanted.variables.contains(&"jobs") {
        context.add_variable_from_value("jobs", facts.jobs.to_vec());
    }
    if wanted.variables.contains(&"pods") {
        context.add_variable_from_value("pods", facts.pods.clone());
    }
    context
}

pub(crate) fn port_scope<'a>(
    root: &'a Context<'static, 'static>,
    facts: &PortFacts,
    wanted: &Wanted,
) -> Context<'a, 'static> {
    let mut context = root.new_inner_scope();
    context.add_variable_from_value("port", schema::map_of(schema::PORT_FIELDS, facts, Some(&wanted.fields)));
    context
}

pub(crate) fn node_scope<'a>(
    root: &'a Context<'static, 'static>,
    facts: &NodeFacts,
    wanted: &Wanted,
) -> Context<'a, 'static> {
    let mut context = root.new_inner_scope();
    context.add_variable_from_value("node", schema::map_of(schema::NODE_FIELDS, facts, Some(&wanted.fields)));
    if wanted.variables.contains(&"gpus") {
        let gpus: Vec<Value> = facts
            .gpus
            .iter()
            .map(|g| schema::map_of(schema::GPU_FIELDS, g, Some(&wanted.gpus_fields)))
            .collect();
        context.add_variable_from_value("gpus", gpus);
    }
    context
}

/// What a set of rules of one scope read, together: only these are put in their maps.
#[derive(Debug, Default, Clone)]
pub(crate) struct Wanted {
    pub fields: Vec<&'static str>,
    pub variables: Vec<&'static str>,
    /// The fields of each of `gpus` (node rules).
    pub gpus_fields: Vec<&'static str>,
}

impl Wanted {
    pub(crate) fn of<'a>(rules: impl IntoIterator<Item = &'a Compiled>) -> Wanted {
        let mut wanted = Wanted::default();
        for rule in rules {
            for field in &rule.fields {
                if !wanted.fields.contains(field) {
                    wanted.fields.push(field);
                }
            }
            for variable in &rule.variables {
                if !wanted.variables.contains(variable) {
                    wanted.variables.push(variable);
                }
            }
            for field in &rule.gpus_fields {
                if !wanted.gpus_fields.contains(field) {
                    wanted.gpus_fields.push(field);
                }
            }
        }
        wanted
    }
}

impl Compiled {
    /// Runs the rule in `context`. A panic in the interpreter is the rule's failure, not
    /// the daemon's.
    pub fn evaluate(&self, context: &Context) -> Evaluation {
        let started = thread_cpu_time();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.program.execute(context)));
        let cpu = thread_cpu_time().saturating_sub(started);
        let outcome = match result {
            Err(_) => Outcome::Failed("the CEL interpreter panicked on it".into()),
            Ok(Ok(Value::Bool(true))) => Outcome::Fired(self.what_it_read(context)),
            Ok(Ok(Value::Bool(false))) => Outcome::Quiet,
            Ok(Ok(other)) => Outcome::Failed(format!("it gave a {}, not a bool", other.type_of())),
            Ok(Err(ExecutionError::NoSuchKey(_))) => Outcome::NotApplicable,
            Ok(Err(e)) => Outcome::Failed(e.to_string()),
        };
        Evaluation { outcome, cpu }
    }

    /// "gpu.memory_temperature_c = 93, increase(\"ecc_corrected\", \"10m\") = 1200": the
    /// values the rule read, for the finding's message.
    fn what_it_read(&self, context: &Context) -> String {
        let own = self.scope.label();
        let mut parts: Vec<String> = Vec::new();
        for (field, expr) in &self.read_back {
            if let Ok(value) = context.resolve(expr) {
                parts.push(format!("{own}.{field} = {}", shown(&value)));
            }
        }
        for call in &self.calls {
            if let Some(value) = super::windows::current(call) {
                parts.push(format!("{} = {}", call.written(), shown(&Value::Float(value))));
            }
        }
        parts.join(", ")
    }
}

/// A value as a person reads it: 93 rather than Float(93.0).
fn shown(value: &Value) -> String {
    match value {
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
        Value::Float(f) => format!("{f:.4}"),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => format!("\"{s}\""),
        Value::List(l) => format!("{} items", l.len()),
        other => format!("{other:?}"),
    }
}
