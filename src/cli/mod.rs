//! The one-shot commands that are not a component's own: `gpuwarden check` (one round, what to
//! act on), `--demo` (the daemon over the simulated library), `demo inject` (faults put into
//! a running demo) and `copy-binary` (the binary handed to another container).

pub mod check;
pub mod config_flag;
pub mod copy_binary;
pub mod demo;
pub mod demo_fabric;
pub mod demo_inject;
pub mod man;
pub mod rules;
pub mod rules_scenario;
pub mod suggest;
