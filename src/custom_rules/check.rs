//! Compiling an operator's rule, and everything `config check` can say about it before it
//! runs: a syntax error, a name or field that does not exist (with the ones that do), a
//! window function's arguments, an expression too big or nested too deep to bound its work,
//! and a type error, found by a dry run of every call in the expression over a sample where
//! every field is present. Each with the line and column within the expression.
//!
//! CEL has no loops: an expression's work is bounded by its size and by the list macros
//! (`exists`, `all`, `map`, `filter`) over the lists it is given, so the size and the nesting
//! of those macros are bounded here, and the lists by the daemon's own bounds.

use super::schema::{self, Scope};
use super::windows::{self, Over, WindowCall};
use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, ExecutionError, Program, Value};
use std::sync::{Arc, OnceLock};

/// The longest expression, in bytes.
pub(crate) const MAX_SOURCE_BYTES: usize = 4096;
/// The most nodes an expression's syntax tree may have.
pub(crate) const MAX_NODES: usize = 1000;
/// How deeply an expression may nest (`1 + 1 + ... + 1` nests as deep as it is long): the
/// walk here, the dry run and each evaluation recurse that deep, on the publisher's stack.
pub(crate) const MAX_DEPTH: usize = 64;
/// How deeply list macros may nest (`gpus.exists(g, gpus.exists(h, ...))` is two).
pub(crate) const MAX_MACRO_DEPTH: usize = 2;

/// A rule compiled and checked, ready to run.
pub struct Compiled {
    pub source: String,
    pub scope: Scope,
    pub(super) program: Program,
    /// The fields of the scope's own variable (`gpu`, `port`, `node`) it reads.
    pub fields: Vec<&'static str>,
    /// The other variables it reads (`probe`, `jobs`, `gpus`, ...).
    pub variables: Vec<&'static str>,
    /// The fields of `gpu` any selection in it could read from an element of a node rule's
    /// `gpus` (every `x.name` whose name is one of them): only these are put in its maps.
    pub gpus_fields: Vec<&'static str>,
    /// The windows it asks for.
    pub calls: Vec<WindowCall>,
    /// `gpu.FIELD` for each of `fields`, parsed once: what a finding's message reads back.
    pub(super) read_back: Vec<(&'static str, IdedExpr)>,
    /// The bound on one evaluation (super::cost), worked out once when it is compiled: the
    /// runner weighs it against the stage's budget at every snapshot.
    cost: super::cost::Cost,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Compiled({:?} on {})", self.source, self.scope.label())
    }
}

impl Compiled {
    /// The bound on one evaluation's cost (super::cost).
    pub fn cost(&self) -> super::cost::Cost {
        self.cost
    }
}

impl PartialEq for Compiled {
    fn eq(&self, other: &Compiled) -> bool {
        self.source == other.source && self.scope == other.scope
    }
}

/// What is wrong with an expression, and where in it (from 1).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (line {line}, column {column} of the expression)")]
pub struct RuleError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// The CEL environment every rule is compiled and run in: the standard functions and macros.
pub(crate) fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(Env::stdlib())).clone()
}

/// A context of `env` with the window functions, for the variables of one subject each.
pub(crate) fn root_context() -> Context<'static, 'static> {
    let mut context = Context::with_env(env());
    for (name, over) in Over::FUNCTIONS {
        // The names are not the standard library's, so this cannot conflict.
        let _ = context.add_function(
            name,
            move |cel::extractors::Arguments(args): cel::extractors::Arguments| windows::lookup(over, &args),
        );
    }
    context
}

/// Compiles `source` as a rule of `scope` and checks it. Err: what to fix, and where.
pub fn compile(source: &str, scope: Scope) -> Result<Compiled, RuleError> {
    let at_start = |message: String| RuleError {
        line: 1,
        column: 1,
        message,
    };
    if source.trim().is_empty() {
        return Err(at_start("the expression is empty".into()));
    }
    if source.len() > MAX_SOURCE_BYTES {
        return Err(at_start(format!(
            "the expression is {} bytes, over {MAX_SOURCE_BYTES}: split it into rules",
            source.len()
        )));
    }
    let program = env().compile(source).map_err(|e| syntax_error(&e.to_string()))?;
    let mut walk = Walk {
        scope,
        program: &program,
        bound: Vec::new(),
        nodes: 0,
        level: 0,
        fields: Vec::new(),
        variables: Vec::new(),
        gpus_fields: Vec::new(),
        calls: Vec::new(),
    };
    walk.visit(program.expression(), 0)?;
    let cost = check_cost(&program, scope)?;
    let (fields, variables, gpus_fields, calls) = (walk.fields, walk.variables, walk.gpus_fields, walk.calls);
    let read_back = fields
        .iter()
        .filter_map(|f| Some((*f, field_expr(scope.label(), f)?)))
        .collect();
    let compiled = Compiled {
        read_back,
        source: source.to_string(),
        scope,
        program,
        fields,
        variables,
        gpus_fields,
        calls,
        cost,
    };
    dry_run(&compiled)?;
    Ok(compiled)
}

/// Refuses a rule whose evaluation could cost more than the bounds allow (super::cost), before
/// anything runs it, the dry run below included: the comprehension that costs most is named.
/// Ok: the bound, kept with the rule.
fn check_cost(program: &Program, scope: Scope) -> Result<super::cost::Cost, RuleError> {
    let whole = super::cost::of(program.expression(), scope);
    if whole.work <= super::cost::MAX_WORK && whole.largest <= super::cost::MAX_VALUE {
        return Ok(whole);
    }
    let costliest = costliest_macro(program.expression(), scope).unwrap_or(program.expression());
    let message = if whole.work > super::cost::MAX_WORK {
        format!(
            "one evaluation could take up to {} steps, over {}: a list macro runs its body once per element of \
             its list (a list written out in the rule, `gpus`, or another macro's list), so shorten the lists, \
             take a macro out of another, or split the rule",
            whole.work,
            super::cost::MAX_WORK
        )
    } else {
        format!(
            "it could build a value of up to {} elements, over {}: `map` and `+` inside a list macro multiply \
             what they build; shorten the lists or split the rule",
            whole.largest,
            super::cost::MAX_VALUE
        )
    };
    Err(position(program, costliest, message))
}

/// The outermost list macro whose cost is the largest, to point at.
fn costliest_macro(expr: &IdedExpr, scope: Scope) -> Option<&IdedExpr> {
    fn walk<'a>(expr: &'a IdedExpr, scope: Scope, best: &mut Option<(u64, &'a IdedExpr)>) {
        match &expr.expr {
            Expr::Comprehension(_) => {
                let cost = super::cost::of(expr, scope).work;
                if best.is_none_or(|(b, _)| cost > b) {
                    *best = Some((cost, expr));
                }
            }
            Expr::Call(call) => {
                if let Some(target) = &call.target {
                    walk(target, scope, best);
                }
                call.args.iter().for_each(|a| walk(a, scope, best));
            }
            Expr::Select(select) => walk(&select.operand, scope, best),
            Expr::List(list) => list.elements.iter().for_each(|e| walk(e, scope, best)),
            _ => {}
        }
    }
    let mut best = None;
    walk(expr, scope, &mut best);
    best.map(|(_, e)| e)
}

/// cel's parse error ("ERROR: <input>:1:11: Syntax error: ..." and a caret) as a RuleError.
fn syntax_error(rendered: &str) -> RuleError {
    let first = rendered.lines().next().unwrap_or(rendered);
    let rest = first.split_once("<input>:").map_or(first, |(_, rest)| rest);
    let mut parts = rest.splitn(3, ':');
    let line = parts.next().and_then(|l| l.trim().parse().ok());
    let column = parts.next().and_then(|c| c.trim().parse().ok());
    match (line, column, parts.next()) {
        (Some(line), Some(column), Some(message)) => RuleError {
            line,
            column,
            message: message.trim().to_string(),
        },
        _ => RuleError {
            line: 1,
            column: 1,
            message: first.trim().to_string(),
        },
    }
}

/// The walk over the syntax tree.
struct Walk<'a> {
    scope: Scope,
    program: &'a Program,
    /// The names a list macro binds where the walk is.
    bound: Vec<String>,
    nodes: usize,
    /// How deep the walk is now.
    level: usize,
    fields: Vec<&'static str>,
    variables: Vec<&'static str>,
    gpus_fields: Vec<&'static str>,
    calls: Vec<WindowCall>,
}

impl Walk<'_> {
    fn error(&self, expr: &IdedExpr, message: String) -> RuleError {
        position(self.program, expr, message)
    }

    fn visit(&mut self, expr: &IdedExpr, depth: usize) -> Result<(), RuleError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.error(
                expr,
                format!("the expression has over {MAX_NODES} parts: split it into rules"),
            ));
        }
        if self.level >= MAX_DEPTH {
            return Err(self.error(
                expr,
                format!(
                    "the expression nests deeper than {MAX_DEPTH}: group it with parentheses or split it into rules"
                ),
            ));
        }
        self.level += 1;
        let visited = self.visit_inside(expr, depth);
        self.level -= 1;
        visited
    }

    fn visit_inside(&mut self, expr: &IdedExpr, depth: usize) -> Result<(), RuleError> {
        match &expr.expr {
            Expr::Ident(name) => self.name(expr, name),
            Expr::Select(select) => {
                if let Expr::Ident(variable) = &select.operand.expr {
                    self.field(expr, variable, &select.field)?;
                }
                if let Some(f) = schema::GPU_FIELDS.iter().find(|f| f.name == select.field)
                    && !self.gpus_fields.contains(&f.name)
                {
                    self.gpus_fields.push(f.name);
                }
                self.visit(&select.operand, depth)
            }
            Expr::Call(call) => {
                if let Some(over) = Over::from_function(&call.func_name).filter(|_| call.target.is_none()) {
                    self.window(expr, over, &call.args)?;
                }
                if let Some(target) = &call.target {
                    self.visit(target, depth)?;
                }
                call.args.iter().try_for_each(|a| self.visit(a, depth))
            }
            Expr::Comprehension(c) => {
                if depth >= MAX_MACRO_DEPTH {
                    return Err(self.error(
                        expr,
                        format!("list macros nest deeper than {MAX_MACRO_DEPTH}: the work would grow as a power of the lists' length"),
                    ));
                }
                self.visit(&c.iter_range, depth)?;
                self.visit(&c.accu_init, depth)?;
                let names = [Some(&c.iter_var), c.iter_var2.as_ref(), Some(&c.accu_var)];
                let before = self.bound.len();
                self.bound.extend(names.into_iter().flatten().cloned());
                for part in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.visit(part, depth + 1)?;
                }
                self.bound.truncate(before);
                Ok(())
            }
            Expr::List(list) => list.elements.iter().try_for_each(|e| self.visit(e, depth)),
            Expr::Map(map) => map.entries.iter().try_for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(e) => self.visit(&e.key, depth).and_then(|_| self.visit(&e.value, depth)),
                EntryExpr::StructField(f) => self.visit(&f.value, depth),
            }),
            Expr::Struct(_) => Err(self.error(expr, "message literals are not supported in rules".into())),
            Expr::Literal(_) | Expr::Unspecified => Ok(()),
        }
    }

    /// A name: one of the scope's variables, or one a list macro binds.
    fn name(&mut self, expr: &IdedExpr, name: &str) -> Result<(), RuleError> {
        if self.bound.iter().any(|b| b == name) {
            return Ok(());
        }
        let known = schema::variables(self.scope);
        match known.iter().find(|v| v.name == name) {
            Some(v) => {
                if !self.variables.contains(&v.name) {
                    self.variables.push(v.name);
                }
                Ok(())
            }
            None => {
                let names: Vec<&str> = known.iter().map(|v| v.name).collect();
                Err(self.error(
                    expr,
                    format!(
                        "unknown name `{name}`: an `on: {}` rule can read {}",
                        self.scope.label(),
                        names.join(", ")
                    ),
                ))
            }
        }
    }

    /// `variable.field` where `variable` is one of the scope's maps.
    fn field(&mut self, expr: &IdedExpr, variable: &str, field: &str) -> Result<(), RuleError> {
        if self.bound.iter().any(|b| b == variable) || !schema::variables(self.scope).iter().any(|v| v.name == variable)
        {
            return Ok(());
        }
        let Some(names) = schema::field_names(variable) else {
            return Ok(());
        };
        let Some(known) = names.iter().find(|n| **n == field) else {
            let what = if variable == "probe" { "tests" } else { "fields" };
            return Err(self.error(
                expr,
                format!(
                    "`{variable}` has no field `{field}`; its {what} are: {}",
                    names.join(", ")
                ),
            ));
        };
        if variable == self.scope.label() && !self.fields.contains(known) {
            self.fields.push(known);
        }
        Ok(())
    }

    /// A window function's call: literal arguments, a series that exists and is a number.
    fn window(&mut self, expr: &IdedExpr, over: Over, args: &[IdedExpr]) -> Result<(), RuleError> {
        let mut values = Vec::new();
        for arg in args {
            match &arg.expr {
                Expr::Literal(literal) => values.push(literal_value(literal)),
                _ => {
                    return Err(self.error(
                        arg,
                        format!(
                            "{}'s arguments are written out (\"power_w\", \"10m\"), not computed",
                            over.function()
                        ),
                    ));
                }
            }
        }
        let call = windows::parse_args(over, &values).map_err(|e| self.error(expr, e.to_string()))?;
        if call.xid_code().is_none() {
            if self.scope == Scope::Node {
                return Err(self.error(
                    expr,
                    "a node rule has no windows: take them in a gpu or port rule".into(),
                ));
            }
            if schema::window_kind(self.scope, &call.series).is_none() {
                return Err(self.error(
                    args.first().unwrap_or(expr),
                    format!(
                        "`{}` is not a number of `{}`: a window is taken over a numeric field",
                        call.series,
                        self.scope.label()
                    ),
                ));
            }
        } else if self.scope != Scope::Gpu {
            return Err(self.error(expr, "xid_count is a gpu rule's".into()));
        }
        if !self.calls.contains(&call) {
            self.calls.push(call);
        }
        Ok(())
    }
}

fn literal_value(literal: &cel::common::ast::LiteralValue) -> Value {
    use cel::common::ast::LiteralValue as L;
    match literal {
        L::Int(i) => Value::Int(*i.inner()),
        L::String(s) => Value::String(Arc::new(s.inner().to_string())),
        L::Double(d) => Value::Float(*d.inner()),
        L::Boolean(b) => Value::Bool(*b.inner()),
        L::UInt(u) => Value::UInt(*u.inner()),
        L::Null | L::Bytes(_) => Value::Null,
    }
}

/// `variable.field` as an expression, to read a value a rule read back out of its context.
fn field_expr(variable: &str, field: &str) -> Option<IdedExpr> {
    env()
        .compile(&format!("{variable}.{field}"))
        .ok()
        .map(|p| p.expression().clone())
}

/// `message` at where `expr` was written.
fn position(program: &Program, expr: &IdedExpr, message: String) -> RuleError {
    let offset = program
        .source_info()
        .offset_for(expr.id)
        .map_or(0, |(start, _)| start as usize);
    let (mut line, mut column) = (1, 1);
    for c in program.source_info().source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    RuleError { line, column, message }
}

/// Evaluates every call outside the list macros, innermost first, then the whole, over a
/// sample where every field and test is present: an error of type (an operator on values it
/// does not take, a function that does not exist) is the rule's, wherever it is. An error of
/// value (a division by the sample's 1 - 1) is not: the real values decide.
fn dry_run(compiled: &Compiled) -> Result<(), RuleError> {
    let mut context = root_context();
    for variable in schema::variables(compiled.scope) {
        if let Some(sample) = schema::sample(variable.name) {
            context.add_variable_from_value(variable.name, sample);
        }
    }
    windows::with_samples(|| {
        let mut calls = Vec::new();
        outside_macros(compiled.program.expression(), &mut calls);
        for expr in calls {
            if let Err(e) = context.resolve(expr) {
                type_error(&context, compiled, expr, &e)?;
            }
        }
        let whole = compiled.program.execute(&context);
        match whole {
            Ok(Value::Bool(_)) => Ok(()),
            Ok(other) => Err(position(
                &compiled.program,
                compiled.program.expression(),
                format!(
                    "the expression gives a {}, and a rule's must give a bool (true: the rule fires)",
                    other.type_of()
                ),
            )),
            Err(e) => type_error(&context, compiled, compiled.program.expression(), &e),
        }
    })
}

/// The calls and selections of `expr` outside list macros (whose names are bound only
/// inside them), innermost first.
fn outside_macros<'a>(expr: &'a IdedExpr, out: &mut Vec<&'a IdedExpr>) {
    match &expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                outside_macros(target, out);
            }
            call.args.iter().for_each(|a| outside_macros(a, out));
            out.push(expr);
        }
        Expr::Select(select) => {
            outside_macros(&select.operand, out);
            out.push(expr);
        }
        Expr::List(list) => list.elements.iter().for_each(|e| outside_macros(e, out)),
        Expr::Comprehension(c) => outside_macros(&c.iter_range, out),
        _ => {}
    }
}

/// `error` from evaluating `expr` over the sample, as the rule's error when it is one of type.
fn type_error(
    context: &Context,
    compiled: &Compiled,
    expr: &IdedExpr,
    error: &ExecutionError,
) -> Result<(), RuleError> {
    let message = match error {
        ExecutionError::DivisionByZero(_) | ExecutionError::RemainderByZero(_) => return Ok(()),
        ExecutionError::FunctionError { function, .. } if function.starts_with('_') => return Ok(()),
        ExecutionError::NoSuchOverload(o) => format!(
            "`{}` does not take ({}): a type error; convert with int(), double() or string()",
            operator(o.function()),
            o.argument_types().join(", ")
        ),
        ExecutionError::NoSuchKey(key) => match &expr.expr {
            Expr::Select(select) => match context.resolve(&select.operand) {
                Ok(Value::Map(map)) => {
                    let mut keys: Vec<String> = map.map.keys().map(|k| format!("{k:?}")).collect();
                    keys.sort();
                    format!("no field `{key}` there; the fields are: {}", keys.join(", "))
                }
                _ => format!("no field `{key}` there"),
            },
            _ => format!("no key `{key}`"),
        },
        ExecutionError::UndeclaredReference(name) => format!(
            "unknown function or name `{name}` (the window functions are increase, max_over, min_over, avg_over, xid_count)"
        ),
        other => other.to_string(),
    };
    Err(position(&compiled.program, expr, message))
}

/// An operator as written (`_>_` is `>`).
fn operator(function: &str) -> &str {
    function.trim_matches('_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(source: &str, scope: Scope) -> RuleError {
        compile(source, scope).map(|c| c.source).unwrap_err()
    }

    #[test]
    fn good_rules_compile_and_say_what_they_read() {
        let c = compile(
            "gpu.memory_temperature_c > 90 && increase(\"ecc_corrected\", \"10m\") > 1000 && xid_count(79, \"1h\") >= 2",
            Scope::Gpu,
        )
        .unwrap();
        assert_eq!(c.fields, vec!["memory_temperature_c"]);
        assert_eq!(c.calls.len(), 2);
        for (source, scope) in [
            (
                "gpu.utilization > 0.95 && gpu.power_w < 0.3 * gpu.power_limit_w",
                Scope::Gpu,
            ),
            (
                "has(probe.gemm_bf16) && probe.gemm_bf16.figure < 0.9 * probe.gemm_bf16.baseline",
                Scope::Gpu,
            ),
            ("jobs.exists(j, j.startsWith('train'))", Scope::Gpu),
            ("'hw_slowdown' in gpu.clock_events", Scope::Gpu),
            ("gpus.filter(g, g.temperature_c > 85).size() >= 2", Scope::Node),
            (
                "port.link_layer == 'infiniband' && increase('symbol_errors', '10m') > 10",
                Scope::Port,
            ),
            ("gpu.power_w / (gpu.power_limit_w - 1.0) > 0.5", Scope::Gpu),
            (
                "gpu.name.contains('H200') && gpu.uuid.endsWith('7') && int(gpu.temperature_c) > 80",
                Scope::Gpu,
            ),
        ] {
            compile(source, scope).unwrap_or_else(|e| panic!("{source}: {e}"));
        }
    }

    /// An unknown field names the ones that exist, at its column; so does a probe test.
    #[test]
    fn unknown_names_and_fields_are_named_where_they_are() {
        let e = error("gpu.up &&\n  gpu.temprature_c > 90", Scope::Gpu);
        assert_eq!((e.line, e.column), (2, 6), "{e}");
        assert!(e.message.contains("`gpu` has no field `temprature_c`"), "{e}");
        assert!(e.message.contains("temperature_c, memory_temperature_c"), "{e}");
        let e = error("probe.gemm.figure > 1", Scope::Gpu);
        assert!(e.message.contains("its tests are: gemm_bf16"), "{e}");
        let e = error("probe.gemm_bf16.figur > 1", Scope::Gpu);
        assert!(e.message.contains("figure"), "{e}");
        let e = error("port.up", Scope::Gpu);
        assert!(
            e.message
                .contains("unknown name `port`: an `on: gpu` rule can read gpu, probe, jobs, pods"),
            "{e}"
        );
        let e = error("gpus.exists(g, g.temprature_c > 85)", Scope::Node);
        assert!(e.message.contains("temprature_c"), "{e}");
        let e = error("frobnicate(gpu.power_w)", Scope::Gpu);
        assert!(e.message.contains("unknown function or name `frobnicate`"), "{e}");
        // Regular expressions are not in the build: said at config check, not at run time.
        let e = error("gpu.name.matches('H1.*')", Scope::Gpu);
        assert!(e.message.contains("`matches`"), "{e}");
    }

    /// A type error in a branch the sample does not take is still found, at its column.
    #[test]
    fn type_errors_are_found_in_every_branch() {
        let e = error("gpu.up || gpu.name > 3", Scope::Gpu);
        assert_eq!(e.column, 20, "{e}"); // the `>`
        assert!(e.message.contains("`>` does not take (string, int)"), "{e}");
        let e = error("gpu.temperature_c", Scope::Gpu);
        assert!(
            e.message.contains("gives a float, and a rule's must give a bool"),
            "{e}"
        );
    }

    #[test]
    fn the_work_is_bounded_before_it_runs() {
        let e = error("gpus.exists(a, gpus.exists(b, gpus.exists(c, a == b)))", Scope::Node);
        assert!(e.message.contains("nest deeper than 2"), "{e}");
        let long = vec!["gpu.up"; 700].join(" && ");
        assert!(error(&long, Scope::Gpu).message.contains("bytes, over 4096"));
        let deep = vec!["1"; 1100].join("+");
        assert!(
            error(&format!("{deep} > 0"), Scope::Gpu)
                .message
                .contains("nests deeper than 64")
        );
        // Wide, not deep: a list of 1100 numbers.
        let many = vec!["1"; 1100].join(",");
        assert!(
            error(&format!("size([{many}]) > 0"), Scope::Gpu)
                .message
                .contains("over 1000 parts")
        );
        let e = error("increase(gpu.uuid, '10m') > 1", Scope::Gpu);
        assert!(e.message.contains("written out"), "{e}");
        let e = error("increase('uuid', '10m') > 1", Scope::Gpu);
        assert!(e.message.contains("not a number of `gpu`"), "{e}");
        let e = error("max_over('power_w', '2h') > 1", Scope::Gpu);
        assert!(e.message.contains("at most 1h"), "{e}");
    }

    #[test]
    fn syntax_errors_say_where() {
        let e = error("gpu.power_w >", Scope::Gpu);
        assert_eq!((e.line, e.column), (1, 14), "{e}");
        assert!(e.message.contains("Syntax error"), "{e}");
        assert!(error("  ", Scope::Gpu).message.contains("empty"));
    }
}
