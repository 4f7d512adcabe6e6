//! The one-shot commands that are not a component's own: `gpuwarden check` (one round, what to
//! act on), `--demo` (the daemon over the simulated library), `demo inject` (faults put into
//! a running demo) and `copy-binary` (the binary handed to another container).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `check.rs` | `gpuwarden check`: poll every GPU once and say what a person should act on |
//! | `config_flag.rs` | The global `--config` where a command reads no config (`xid`, `config check`, `man`, `completions`, `demo`): hidden from that command's help, man page and... |
//! | `copy_binary.rs` | `gpuwarden copy-binary DIR`: put this very binary at DIR/gpuwarden |
//! | `demo.rs` | `--demo`: the real daemon over the simulated NVML library and a shipped scenario of eight GPUs, so that someone without a GPU sees real output |
//! | `demo_fabric.rs` | The demo's network: a sysfs tree of eight ConnectX-7 InfiniBand ports at NDR, one behind each simulated GPU's PCIe switch as on an HGX H200 node, read by... |
//! | `demo_inject.rs` | `gpuwarden demo inject`: faults put into a running demo, as the real thing would show them to the daemon |
//! | `man.rs` | `gpuwarden man DIR`: the man pages, gpuwarden(1) and one per command, made by clap_mangen from the command definitions, with the sections an operator looks... |
//! | `rules.rs` | `gpuwarden rules test FILE`: the operator's rules, tested before they reach a fleet |
//! | `rules_scenario.rs` | Test files for the operator's rules, run by `gpuwarden rules test FILE` (docs/health.md, "Testing rules"): scenarios of readings step by step, the rules run... |
//! | `suggest.rs` | "Did you mean": the command's own flag nearest an unknown one, for the typos clap's own suggestion does not catch |
//! <!-- /files -->

pub mod check;
pub mod config_flag;
pub mod copy_binary;
pub mod demo;
pub mod demo_fabric;
pub mod demo_inject;
pub mod man;
pub mod rules;
pub(crate) mod rules_scenario;
pub mod suggest;
