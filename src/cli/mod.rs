//! The one-shot commands that are not a component's own: `gpuwarden check` (one round, what to
//! act on) and `--demo` (the daemon over the simulated library).

pub mod check;
pub mod demo;
pub mod demo_fabric;
