//! Automatic remediation (`remediation.mode: auto`; docs/health.md "Remediation"): the
//! guards an automatic GPU reset must pass (guards.rs), the executor that runs it and what
//! follows (auto.rs), the child process each step runs as (command.rs), and the reboot marker
//! (marker.rs). The ladder that words the step lives with the rules (health/ladder.rs).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `auto.rs` | `remediation.mode: auto`: a thread that looks at every published snapshot and, for one GPU at a time whose ladder step is a GPU reset, resets it when every... |
//! | `command.rs` | Runs one remediation step's command the way the probe runs: a child process, here in a process group of its own so that its deadline kills everything it... |
//! | `guards.rs` | The guards an automatic GPU reset must pass, each a pure function of the snapshot (and what the config and the pause file say), each saying what it saw when... |
//! | `marker.rs` | The reboot marker (`remediation.reboot_marker`, `/run/gpuwarden/reboot-required` by default), in the manner of Debian's `/run/reboot-required`: a file whose... |
//! <!-- /files -->

pub(crate) mod auto;
pub(crate) mod command;
pub(crate) mod guards;
pub mod marker;
