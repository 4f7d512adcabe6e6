//! Running a compiled rule over one subject's values: whether it fires, what it read (for
//! the finding's message), and the errors that take it out of service.

use super::check::Compiled;
use super::schema::{self, GpuFacts, NodeFacts, PortFacts};
use cel::{Context, ExecutionError, Value};
use std::time::{Duration, Instant};

/// One evaluation's longest allowed time: a rule over it is disabled as too costly. The
/// bounds `config check` puts on an expression keep a rule far below it (a few microseconds
/// on the demo's GPUs, docs/performance.md); this catches what they did not foresee.
pub const MAX_EVALUATION: Duration = Duration::from_millis(5);

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
    /// An error of its own (a division by zero, an overflow), or too costly: the rule is
    /// disabled until the config changes.
    Failed(String),
}

/// The variables a subject's rules see, bound over a root context (`check::root_context`).
pub fn gpu_scope<'a>(root: &'a Context<'static, 'static>, facts: &GpuFacts, wanted: &Wanted) -> Context<'a, 'static> {
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

pub fn port_scope<'a>(root: &'a Context<'static, 'static>, facts: &PortFacts, wanted: &Wanted) -> Context<'a, 'static> {
    let mut context = root.new_inner_scope();
    context.add_variable_from_value("port", schema::map_of(schema::PORT_FIELDS, facts, Some(&wanted.fields)));
    context
}

pub fn node_scope<'a>(root: &'a Context<'static, 'static>, facts: &NodeFacts, wanted: &Wanted) -> Context<'a, 'static> {
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
pub struct Wanted {
    pub fields: Vec<&'static str>,
    pub variables: Vec<&'static str>,
    /// The fields of each of `gpus` (node rules).
    pub gpus_fields: Vec<&'static str>,
}

impl Wanted {
    pub fn of<'a>(rules: impl IntoIterator<Item = &'a Compiled>) -> Wanted {
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
    pub fn evaluate(&self, context: &Context) -> Outcome {
        let started = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.program.execute(context)));
        let took = started.elapsed();
        let outcome = match result {
            Err(_) => return Outcome::Failed("the CEL interpreter panicked on it".into()),
            Ok(Ok(Value::Bool(true))) => Outcome::Fired(self.what_it_read(context)),
            Ok(Ok(Value::Bool(false))) => Outcome::Quiet,
            Ok(Ok(other)) => Outcome::Failed(format!("it gave a {}, not a bool", other.type_of())),
            Ok(Err(ExecutionError::NoSuchKey(_))) => Outcome::NotApplicable,
            Ok(Err(e)) => Outcome::Failed(e.to_string()),
        };
        if took > MAX_EVALUATION {
            return Outcome::Failed(format!(
                "one evaluation took {} ms, over the {} ms a rule may take",
                took.as_millis(),
                MAX_EVALUATION.as_millis()
            ));
        }
        outcome
    }

    /// "gpu.memory_temperature_c = 93, increase(\"ecc_corrected\", \"10m\") = 1200": the
    /// values the rule read, for the finding's message.
    fn what_it_read(&self, context: &Context) -> String {
        let own = self.scope.label();
        let mut parts: Vec<String> = Vec::new();
        for field in &self.fields {
            let Some(expr) = super::check::field_expr(own, field) else {
                continue;
            };
            if let Ok(value) = context.resolve(&expr) {
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
