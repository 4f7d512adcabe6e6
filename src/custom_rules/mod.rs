//! The operator's own health rules (`health.custom_rules`, docs/health.md "Rules as code"):
//! CEL expressions over what the built-in rules see, compiled and checked when the config
//! is read, run by the health stage (health/custom.rs) once per snapshot.
//!
//! - [`schema`]: the variables and fields a rule can read, per scope (GPU, port, node);
//! - [`check`]: compiling a rule, with every error `config check` can give before it runs;
//! - [`cost`]: the bound on one evaluation's steps and values, worked out before it runs;
//! - [`windows`]: the recent history of the readings rules take windows over;
//! - [`run`]: one evaluation, and what it came to.
//!
//! The language is CEL through the `cel` crate (cel-rust): README "Dependencies" says why.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `check.rs` | Compiling an operator's rule, and everything `config check` can say about it before it runs: a syntax error, a name or field that does not exist (with the... |
//! | `cost.rs` | A bound on what one evaluation of a rule can cost, worked out from its syntax tree before it ever runs (`config check`, the start, every reload, `rules... |
//! | `run.rs` | Running a compiled rule over one subject's values: whether it fires, what it read (for the finding's message), and the errors that take it out of service |
//! | `schema.rs` | What an operator's rule can read: the variables of each scope and the fields of each, with their types and meaning |
//! | `windows.rs` | Windows over a reading's recent history, for the operator's rules: `increase(series, window)`, `max_over`, `min_over`, `avg_over`, and `xid_count(code[,... |
//! <!-- /files -->

pub(crate) mod check;
pub mod cost;
pub(crate) mod run;
pub(crate) mod schema;
pub(crate) mod windows;

pub use check::{Compiled, RuleError, compile};
pub use schema::Scope;
