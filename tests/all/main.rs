//! Every integration test in one binary, one module per concern (docs/testing.md lists
//! them). One binary instead of 22: the test harness is compiled and linked once, which
//! took a `cargo test --no-run` after a one-line library change from 6.6-6.9 s to 3.6-3.7 s
//! and a rebuild of the workspace's own crates from 32 s to 22 s (2 cores, 2026-11-24,
//! docs/testing.md). Run one concern with `cargo test --test all daemon::`.

mod activity;
mod alerting;
mod amd;
mod architecture;
mod cli;
mod collective;
mod common;
mod custom_rules;
mod daemon;
mod dashboards;
mod dcgm_compat;
mod deploy;
mod events_out;
mod fault_story;
mod hardening;
mod health_api;
mod hostile_inputs;
mod hpc_jobs;
mod journal;
mod kube_real;
mod kubelet_pods;
mod kubernetes;
mod network;
mod one_voice;
mod probe;
mod readme;
mod reload;
mod sdc;
mod slurm_real;
mod status_page;
mod systemd;
mod systemd_real;
mod web;
mod wire;
mod xid;
