//! gpuwarden's library: everything but the command line, so that tests, benchmarks and fuzz
//! targets can reach the parts (the kernel-log parser, the config, the renderers).
//!
//! See README.md for what gpuwarden does and docs/architecture.md for how the pieces fit:
//! backends read the vendor libraries on threads of their own, the poller publishes whole
//! snapshots to the store, and the HTTP server renders the latest snapshot.

pub mod attribution;
pub mod backend;
pub mod cadence;
pub mod check;
pub mod clock_events;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod exposition;
pub mod health;
pub mod history;
pub mod html;
pub mod http;
pub mod input;
pub mod journal;
pub mod local_api;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod notify;
pub mod pci;
pub mod poller;
pub mod probe;
pub mod publisher;
pub mod recent;
pub mod residency;
pub mod settings;
pub mod sources;
pub mod sparkline;
pub mod status_page;
pub mod stop;
pub mod store;
pub mod web_config;
pub mod xid;
