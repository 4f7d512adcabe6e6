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

pub mod check;
pub mod cost;
pub mod run;
pub mod schema;
pub mod windows;

pub use check::{Compiled, RuleError, compile};
pub use schema::Scope;
