//! gpuwarden's library: everything but the command line, so that tests, benchmarks and fuzz
//! targets can reach the parts (the kernel-log parser, the config, the renderers).
//!
//! See README.md for what gpuwarden does and docs/architecture.md for how the pieces fit:
//! backends read the vendor libraries on threads of their own, the poller publishes whole
//! snapshots to the store, and the HTTP server renders the latest snapshot.

pub mod attribution;
pub mod backend;
pub mod cli;
pub mod config;
pub mod custom_rules;
pub mod daemon;
pub mod health;
pub mod input;
pub mod journal;
pub mod kube;
pub mod lifecycle;
pub mod metrics;
pub mod model;
pub mod probe;
pub mod remediation;
pub mod serve;
pub mod service;
pub mod snapshot;
pub mod sources;
pub mod xid;
