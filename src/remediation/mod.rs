//! Automatic remediation (`remediation.mode: auto`; docs/health.md "Remediation"): the
//! guards an automatic GPU reset must pass (guards.rs), the executor that runs it and what
//! follows (auto.rs), the child process each step runs as (command.rs), and the reboot marker
//! (marker.rs). The ladder that words the step lives with the rules (health/ladder.rs).

pub mod auto;
pub mod command;
pub mod guards;
pub mod marker;
