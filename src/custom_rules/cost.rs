//! A bound on what one evaluation of a rule can cost, worked out from its syntax tree before
//! it ever runs (`config check`, the start, every reload, `rules test`): how many steps the
//! interpreter takes at most, and how large the biggest value it builds can be.
//!
//! CEL has no loops, but its list macros (`exists`, `all`, `map`, `filter`) run their body once
//! per element of a list, and a list can be written out in the rule (`[1, 2, ..., 240]`), built
//! by `+`, or made by another macro. Bounding the source's size and the macros' nesting alone
//! let four literal lists of 240 with macros two deep cost 1.3-1.8 s of CPU per evaluation, and
//! a 1,958-byte rule of nested `map`s take 9.6 s and 1.5 GB in `config check`'s dry run. So
//! each expression's *shape* is estimated from the bottom up (how many elements a list may
//! have, how long a string, and how large each element), with the daemon's own bounds for what
//! it puts in a rule's variables (64 GPUs, 64 jobs and pods per GPU, 256-byte strings), and a
//! macro's body counts once per element its list may have. The estimate is an upper bound: a
//! rule within [`MAX_WORK`] and [`MAX_VALUE`] cannot cost more, whatever it reads.

use super::schema::{self, Scope};
use cel::common::ast::{EntryExpr, Expr, IdedExpr, operators};

/// The most interpreter steps one evaluation may take (each element of each macro's list
/// counts its body's steps again). The worst rule within it took about a millisecond of CPU on
/// the development machine (benches/custom_rules.rs, docs/performance.md).
pub const MAX_WORK: u64 = 20_000;
/// The most elements (or string bytes) one value an evaluation builds may hold. Memory as a
/// whole is bounded by [`MAX_WORK`] too: each step builds at most one element, and a `+`
/// counts as many steps as it copies.
pub const MAX_VALUE: u64 = 100_000;

/// GPUs on a node, as `gpus` of a node rule holds them: an HGX board carries 8, the largest
/// single nodes 16. On a node with more, a node rule that runs a macro over `gpus` costs more
/// than its bound in proportion; the run-time budget (health/custom.rs) is the backstop there.
pub const MAX_GPUS: u64 = 16;
/// Jobs and pods on one GPU (attribution's own bounds).
const MAX_PER_GPU: u64 = 64;
/// Fields of a map variable (`gpu`, `port`, `node`, `probe`): more than any has.
const MAX_FIELDS: u64 = 128;
/// The longest string a variable's field holds (names, ids, states).
const MAX_STRING: u64 = 256;

/// How large a value can be: its length (elements of a list or map, bytes of a string; 1
/// for a number or bool), the length of each of its elements, and of each of theirs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Shape {
    len: u64,
    elem: u64,
    inner: u64,
}

impl Shape {
    const SCALAR: Shape = Shape {
        len: 1,
        elem: 0,
        inner: 0,
    };

    fn new(len: u64, elem: u64, inner: u64) -> Shape {
        Shape { len, elem, inner }
    }

    /// Everything it holds, elements of elements included.
    fn total(self) -> u64 {
        self.len
            .saturating_mul(self.elem.max(1))
            .saturating_mul(self.inner.max(1))
    }

    /// One of its elements.
    fn element(self) -> Shape {
        Shape::new(self.elem.max(1), self.inner, 0)
    }
}

/// What a rule's evaluation can cost: the steps, and its largest value's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub work: u64,
    pub largest: u64,
}

/// The bound of `expr`, a rule of `scope`.
pub fn of(expr: &IdedExpr, scope: Scope) -> Cost {
    let mut walk = Walk {
        scope,
        bound: Vec::new(),
        largest: 0,
    };
    let (work, _) = walk.expr(expr);
    Cost {
        work,
        largest: walk.largest,
    }
}

struct Walk {
    scope: Scope,
    /// The names macros bind where the walk is, with their shapes.
    bound: Vec<(String, Shape)>,
    largest: u64,
}

impl Walk {
    /// (steps, shape) of `expr`.
    fn expr(&mut self, expr: &IdedExpr) -> (u64, Shape) {
        let (work, shape) = self.inside(expr);
        // What the evaluation builds (not what it is given, which it shares): a list or map
        // written out, one a macro makes, a concatenation.
        let builds = match &expr.expr {
            Expr::List(_) | Expr::Map(_) | Expr::Comprehension(_) => true,
            Expr::Call(call) => call.func_name == operators::ADD,
            _ => false,
        };
        if builds {
            self.largest = self.largest.max(shape.len);
        }
        (work, shape)
    }

    fn inside(&mut self, expr: &IdedExpr) -> (u64, Shape) {
        match &expr.expr {
            Expr::Literal(literal) => {
                use cel::common::ast::LiteralValue as L;
                let len = match literal {
                    L::String(s) => s.inner().len() as u64,
                    L::Bytes(b) => b.inner().len() as u64,
                    _ => 1,
                };
                (1, Shape::new(len, 0, 0))
            }
            Expr::Ident(name) => (1, self.variable(name)),
            Expr::Select(select) => {
                let (work, operand) = self.expr(&select.operand);
                // A field of a map: a number, a bool or a string; `gpus`' elements' fields too.
                let shape = Shape::new(operand.elem.max(MAX_STRING), operand.inner, 0);
                (work.saturating_add(1), shape)
            }
            Expr::Call(call) => {
                let mut work: u64 = 1;
                let mut shapes = Vec::with_capacity(call.args.len() + 1);
                if let Some(target) = &call.target {
                    let (w, s) = self.expr(target);
                    work = work.saturating_add(w);
                    shapes.push(s);
                }
                for arg in &call.args {
                    let (w, s) = self.expr(arg);
                    work = work.saturating_add(w);
                    shapes.push(s);
                }
                let (extra, shape) = call_shape(&call.func_name, &shapes);
                (work.saturating_add(extra), shape)
            }
            Expr::List(list) => {
                let mut work = list.elements.len() as u64;
                let (mut elem, mut inner) = (0, 0);
                for e in &list.elements {
                    let (w, s) = self.expr(e);
                    work = work.saturating_add(w);
                    elem = elem.max(s.len);
                    inner = inner.max(s.elem.max(1).saturating_mul(s.inner.max(1)));
                }
                (work, Shape::new(list.elements.len() as u64, elem, inner))
            }
            Expr::Map(map) => {
                let mut work = map.entries.len() as u64;
                let mut elem = 0;
                for entry in &map.entries {
                    let parts: Vec<&IdedExpr> = match &entry.expr {
                        EntryExpr::MapEntry(e) => vec![&e.key, &e.value],
                        EntryExpr::StructField(f) => vec![&f.value],
                    };
                    for part in parts {
                        let (w, s) = self.expr(part);
                        work = work.saturating_add(w);
                        elem = elem.max(s.total());
                    }
                }
                (work, Shape::new(map.entries.len() as u64, elem, 0))
            }
            Expr::Comprehension(c) => self.comprehension(c),
            // Refused by the compile check; nothing to count.
            Expr::Struct(_) | Expr::Unspecified => (1, Shape::SCALAR),
        }
    }

    /// A list macro: its list, its start, and its body once per element of the list.
    fn comprehension(&mut self, c: &cel::common::ast::ComprehensionExpr) -> (u64, Shape) {
        let (range_work, range) = self.expr(&c.iter_range);
        let (init_work, init) = self.expr(&c.accu_init);
        let runs = range.len.max(1);
        let element = range.element();
        let before = self.bound.len();
        self.bound.push((c.iter_var.clone(), element));
        if let Some(second) = &c.iter_var2 {
            self.bound.push((second.clone(), element));
        }
        // Once with the accumulator as it starts, for what one step adds to it; then
        // with it as large as all the steps can make it (map, filter: one element a
        // step), for what a step and the result cost then.
        // The step's cost is taken with the accumulator as it starts: `map` and
        // `filter` append to it in place (cel's AppendStep), `all` and `exists` keep a bool.
        self.bound.push((c.accu_var.clone(), init));
        let (step_work, first_step) = self.expr(&c.loop_step);
        self.bound.pop();
        let grown = Shape::new(
            init.len
                .saturating_add(runs.saturating_mul(first_step.len.saturating_sub(init.len).max(1))),
            first_step.elem.max(init.elem),
            first_step.inner.max(init.inner),
        );
        self.bound.push((c.accu_var.clone(), grown));
        let (cond_work, _) = self.expr(&c.loop_cond);
        let (result_work, result) = self.expr(&c.result);
        self.bound.truncate(before);
        let body = cond_work.saturating_add(step_work);
        let work = range_work
            .saturating_add(init_work)
            .saturating_add(runs.saturating_mul(body))
            .saturating_add(result_work);
        (work, result)
    }

    /// The shape of a name: one a macro binds, or one of the scope's variables.
    fn variable(&self, name: &str) -> Shape {
        if let Some((_, shape)) = self.bound.iter().rev().find(|(bound, _)| bound == name) {
            return *shape;
        }
        if !schema::variables(self.scope).iter().any(|v| v.name == name) {
            return Shape::SCALAR;
        }
        match name {
            "gpus" => Shape::new(MAX_GPUS, MAX_FIELDS, MAX_STRING),
            "jobs" | "pods" => Shape::new(MAX_PER_GPU, MAX_STRING, 0),
            _ => Shape::new(MAX_FIELDS, MAX_STRING, 0),
        }
    }
}

/// What a call adds to its arguments' steps, and the shape it gives: `+` copies both sides,
/// the functions that scan a string or list (`contains`, `in`, `matches`, ...) read all of it.
fn call_shape(function: &str, args: &[Shape]) -> (u64, Shape) {
    let sum_len = args.iter().fold(0u64, |sum, s| sum.saturating_add(s.len));
    let elem = args.iter().map(|s| s.elem).max().unwrap_or(0);
    let inner = args.iter().map(|s| s.inner).max().unwrap_or(0);
    let largest = args.iter().map(|s| s.len).max().unwrap_or(1);
    let scanned = |shapes: &[Shape]| shapes.iter().fold(0u64, |sum, s| sum.saturating_add(copy_steps(*s)));
    match function {
        operators::ADD => (scanned(args), Shape::new(sum_len, elem, inner)),
        operators::INDEX | operators::OPT_INDEX => (1, args.first().map_or(Shape::SCALAR, |s| s.element())),
        "size" | "has" => (1, Shape::SCALAR),
        operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::NOT_STRICTLY_FALSE
        | operators::GREATER
        | operators::GREATER_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::SUBSTRACT
        | operators::MULTIPLY
        | operators::DIVIDE
        | operators::MODULO
        | operators::NEGATE => (1, Shape::SCALAR),
        // A comparison reads at most the shorter side; a scan (`in`, `contains`, `matches`)
        // all of each.
        operators::EQUALS | operators::NOT_EQUALS | "startsWith" | "endsWith" => {
            (args.iter().map(|s| compare_steps(*s)).min().unwrap_or(1), Shape::SCALAR)
        }
        operators::IN | "contains" | "matches" => (
            args.iter().fold(0u64, |sum, s| sum.saturating_add(compare_steps(*s))),
            Shape::SCALAR,
        ),
        operators::CONDITIONAL => {
            let branches = &args[args.len().min(1)..];
            (
                1,
                Shape::new(
                    branches.iter().map(|s| s.len).max().unwrap_or(1),
                    branches.iter().map(|s| s.elem).max().unwrap_or(0),
                    branches.iter().map(|s| s.inner).max().unwrap_or(0),
                ),
            )
        }
        // Conversions and the rest: no larger than their largest argument (a number's
        // string is short).
        _ => (1, Shape::new(largest.max(32), elem, inner)),
    }
}

/// Steps to copy a value into a new one (`+`): a string's bytes go 64 to a step (a memcpy
/// next to the interpreter's own step), a list's elements 4 to a step (each a reference: what
/// they hold is shared, not copied).
fn copy_steps(shape: Shape) -> u64 {
    if shape.elem == 0 {
        1 + shape.len / 64
    } else {
        1 + shape.len / 4
    }
}

/// Steps to compare or scan a value: as [`copy_steps`], each element's own as deep as it goes.
fn compare_steps(shape: Shape) -> u64 {
    if shape.elem == 0 {
        1 + shape.len / 64
    } else {
        let each = compare_steps(Shape::new(shape.elem, shape.inner, 0));
        1 + shape.len.saturating_mul(each) / 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(source: &str, scope: Scope) -> Cost {
        let program = super::super::check::env().compile(source).unwrap();
        of(program.expression(), scope)
    }

    fn literal_list(n: usize) -> String {
        format!("[{}]", (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(","))
    }

    #[test]
    fn everyday_rules_cost_little() {
        for source in [
            "gpu.memory_temperature_c > 90",
            "increase(\"ecc_corrected\", \"10m\") > 100 && gpu.utilization < 0.5",
            "gpus.exists(g, g.temperature_c > 85)",
            "jobs.exists(j, j.startsWith(\"debug-\"))",
        ] {
            let scope = if source.starts_with("gpus") {
                Scope::Node
            } else {
                Scope::Gpu
            };
            let c = cost(source, scope);
            assert!(c.work < 2_000, "{source}: {c:?}");
            assert!(c.largest <= MAX_VALUE, "{source}: {c:?}");
        }
    }

    /// The field reports: literal lists two macros deep, and nested maps.
    #[test]
    fn literal_lists_under_macros_and_nested_maps_are_counted() {
        let l = literal_list(240);
        let two_deep = format!("{l}.exists(a, {l}.exists(b, a == b))");
        let c = cost(&two_deep, Scope::Gpu);
        assert!(c.work > 240 * 240, "{c:?}");
        assert!(c.work > MAX_WORK);
        let maps = format!("{l}.map(a, {l}.map(b, {l})).size() > 0");
        let c = cost(&maps, Scope::Gpu);
        assert!(c.work >= 240 * 240, "{c:?}");
        assert!(c.work > MAX_WORK);
        // `+` inside a macro: each step copies what it concatenates.
        let grown = format!("{l}.map(a, {l} + {l} + {l}).size() > 0");
        let c = cost(&grown, Scope::Gpu);
        assert!(c.work >= 240 * 720 && c.largest >= 720, "{grown}: {c:?}");
        // A value too large to build, without a macro.
        let huge = format!("size({l} + {l}) > 0");
        assert_eq!(cost(&huge, Scope::Gpu).largest, 480);
        // A macro over the node's GPUs, each over another's: the GPUs' own bound.
        let c = cost(
            "gpus.exists(a, gpus.exists(b, a.index != b.index && a.temperature_c == b.temperature_c))",
            Scope::Node,
        );
        assert!(c.work >= MAX_GPUS * MAX_GPUS, "{c:?}");
        assert!(c.work <= MAX_WORK, "{c:?}");
    }
}
