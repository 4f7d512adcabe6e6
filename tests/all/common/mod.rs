//! Test harness: the real gpuwarden binary over the simulated vendor libraries, real HTTP.
//! One file per concern:
//!
//! | file | what |
//! | --- | --- |
//! | `daemon.rs` | `Daemon`: start `gpuwarden run` on port 0 with a scenario and a config, signal, stop |
//! | `http.rs` | a plain HTTP/1.1 GET with no client library in between |
//! | `metrics.rs` | a parsed scrape, to assert values by labels |
//! | `scenario.rs` | the simulated libraries and scenario edits (NVML, CUDA) |
//! | `prometheus.rs` | a real Prometheus on loopback |
//! | `kubelet.rs` | a fake kubelet serving the pod-resources API |
//! | `kube.rs` | a real Kubernetes control plane (etcd, kube-apiserver) on loopback |
//! | `host.rs` | what several tests need of the machine: root for the real peers, a free port, a FIFO, (GPU, job) pairs |
//! | `verdict_poll.rs` | the node's verdict asked every 0.1 s through a hand-over |

mod daemon;
mod host;
mod http;
mod kube;
mod kubelet;
mod metrics;
mod prometheus;
mod receiver;
mod scenario;
mod verdict_poll;

pub use daemon::*;
pub use host::*;
pub use http::*;
pub use kube::*;
pub use kubelet::*;
pub use metrics::*;
pub use prometheus::*;
pub use receiver::*;
pub use scenario::*;
pub use verdict_poll::*;

use std::path::Path;

pub const BIN: &str = env!("CARGO_BIN_EXE_gpuwarden");

/// The shipped alert and recording rules.
pub const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/gpuwarden.rules.yml");

/// Every input of a fuzz target's committed corpus (fuzz/corpus/TARGET), as text; panics when
/// the corpus holds fewer than `at_least` inputs.
pub fn fuzz_corpus(target: &str, at_least: usize) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let inputs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| String::from_utf8_lossy(&std::fs::read(entry.unwrap().path()).unwrap()).into_owned())
        .collect();
    assert!(
        inputs.len() >= at_least,
        "{target}: {} inputs, expected at least {at_least}",
        inputs.len()
    );
    inputs
}

/// A file of the repository, by its path from the repository's root.
pub fn repo_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Looks every 100 ms for `window` and fails, with what `look` said, the first time it does
/// not hold: for what a test means to last (a debounce, a hold, nothing more written or
/// logged), where a sleep and one look afterwards would miss a change that came and went.
pub fn holds_for(what: &str, window: std::time::Duration, mut look: impl FnMut() -> Result<(), String>) {
    let end = std::time::Instant::now() + window;
    loop {
        if let Err(why) = look() {
            panic!("{what} did not hold: {why}");
        }
        if std::time::Instant::now() >= end {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Looks every 200 ms until `look` gives `Ok`, or fails after `within` saying `what` and
/// the last `Err` (what was there instead).
pub fn until_ok<T>(what: &str, within: std::time::Duration, mut look: impl FnMut() -> Result<T, String>) -> T {
    let deadline = std::time::Instant::now() + within;
    loop {
        match look() {
            Ok(found) => return found,
            Err(last) => assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}: {last}"
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Looks every 200 ms until `look` gives a value, or fails after `within` saying `what`.
pub fn eventually<T>(what: &str, within: std::time::Duration, mut look: impl FnMut() -> Option<T>) -> T {
    until_ok(what, within, || look().ok_or_else(|| "not yet".to_string()))
}
