//! gpuwarden's library: everything but the command line, so that tests, benchmarks and fuzz
//! targets can reach the parts (the kernel-log parser, the config, the renderers).
//!
//! See README.md for what gpuwarden does and docs/architecture.md for how the pieces fit:
//! backends read the vendor libraries on threads of their own, the poller publishes whole
//! snapshots to the store, and the HTTP server renders the latest snapshot.

// Private by default: an item is `pub` only where another crate (the binary, the integration
// tests, the benchmarks, the fuzz targets) reaches it; everything else is `pub(crate)` or
// narrower, and clippy's `-D warnings` turns a new `pub` that nothing outside can reach into an
// error. The modules left `pub` below are the ones those crates name.
#![warn(unreachable_pub)]

pub(crate) mod attribution;
pub mod backend;
pub mod cli;
pub mod config;
pub mod custom_rules;
pub mod daemon;
pub mod health;
pub mod input;
pub mod journal;
pub(crate) mod kube;
pub(crate) mod lifecycle;
pub mod metrics;
pub mod model;
pub mod probe;
pub mod remediation;
pub(crate) mod serve;
pub mod service;
pub(crate) mod snapshot;
pub mod sources;
pub mod xid;
