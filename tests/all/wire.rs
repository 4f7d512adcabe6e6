//! The wire, byte for byte: what the metrics, the local API and the CLI say about a node with
//! a fatal XID held back by a guard, over the demo's eight GPUs (each with its own finding),
//! against tests/golden/wire.txt. Taken before the domain values became enums (issue #56):
//! every metric name, label value, JSON field and CLI line must stay as it was. Numbers are
//! folded to `N` (readings and times move), and the test's own directory to `<dir>`; every
//! word stays. `GOLDEN_UPDATE=1 cargo test --test all wire::` writes the file anew, for a
//! change that means to alter the wire (and says so in its commit).

use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/wire.txt");

/// Each run of digits (with a decimal part) as `N`, the test's directories as `<dir>`, the
/// checkout as `<repo>`, the machine's name as `<host>`.
fn fold(text: &str, dirs: &[&Path]) -> String {
    // The checkout's own path (the fake reset command lives there) is wherever CI cloned it.
    let mut text = text.replace(env!("CARGO_MANIFEST_DIR"), "<repo>");
    // The machine's name, where the report names the host.
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        text = text
            .replace(&format!("| host | {host} |"), "| host | <host> |")
            .replace(&format!("on host {host} "), "on host <host> ");
    }
    for dir in dirs {
        text = text.replace(&dir.display().to_string(), "<dir>");
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars.peek().is_some_and(|n| n.is_ascii_digit() || *n == '.') {
                chars.next();
            }
            out.push('N');
        } else {
            out.push(c);
        }
    }
    out
}

/// The exposition without its values: HELP, TYPE and each series' name and labels, sorted
/// (the order of families is the registry's, already pinned by tests/all/daemon.rs).
fn series(body: &str) -> String {
    let mut lines: Vec<String> = body
        .lines()
        .map(|line| match line.starts_with('#') {
            true => line,
            false => line.rsplit_once(' ').map_or(line, |(series, _)| series),
        })
        // The build's own revision changes with every commit.
        .map(|line| match line.split_once("revision=\"") {
            Some((head, _)) if line.starts_with("gpuwarden_build_info") => format!("{head}revision=\"<rev>\"}}"),
            _ => line.to_string(),
        })
        .collect();
    lines.sort_unstable();
    lines.dedup();
    lines.join("\n")
}

fn cli(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run gpuwarden");
    format!(
        "$ gpuwarden {}\nexit {}\n{}{}",
        args.join(" "),
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn pretty(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).expect("JSON");
    serde_json::to_string_pretty(&value).expect("JSON text")
}

#[test]
fn metrics_api_and_cli_say_what_they_said_before() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pause"), "").unwrap();
    let config = test_config(&sim_library(), &auto_remediation(dir.path(), &fake_reset_command()));
    let d = Daemon::start_full(
        &all_idle(DEMO_SCENARIO),
        &config,
        "NVRM: Xid (PCI:0000:19:00): 94, pid=1, name=x, Contained: SM (0x1)\n",
        &[],
    );
    d.report_drained_with_no_job();
    d.scrape_until("the reset held back by the pause file", |m| {
        m.value("gpu_remediation_held_back", &[("gpu", "0"), ("guard", "paused")]) == Some(1.0)
    });
    // Every source has had its first round (the slow tier, the topology) and the journal its
    // first batch.
    std::thread::sleep(Duration::from_secs(2));
    let socket = d.socket_path();
    let socket = socket.to_str().unwrap();
    let state = d.state_path();
    let state = state.to_str().unwrap();
    let mut wire = String::new();
    wire += "## /metrics\n";
    wire += &series(&String::from_utf8_lossy(&d.get("/metrics", &[]).body));
    wire += "\n## /api/v1/health\n";
    wire += &pretty(&d.get("/api/v1/health", &[]).body);
    for args in [
        &["health", "--socket", socket][..],
        &["health", "--json", "--socket", socket],
        &["report", "--gpu", "0", "--state", state],
        &["report", "--gpu", "6", "--state", state],
        &["xid", "explain", "94"],
        &["xid", "explain", "79"],
    ] {
        wire += "\n## cli\n";
        wire += &cli(args);
    }
    let kinds: Vec<String> = events_json(&d.state_path(), &[])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{} {}", e["kind"], e["summary"]))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    wire += "\n## events (kind, summary)\n";
    wire += &kinds.join("\n");
    let wire = fold(&wire, &[d.config_path().parent().unwrap(), dir.path()]);
    if std::env::var_os("GOLDEN_UPDATE").is_some() {
        std::fs::create_dir_all(Path::new(GOLDEN).parent().unwrap()).unwrap();
        std::fs::write(GOLDEN, &wire).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(GOLDEN).expect("tests/golden/wire.txt (GOLDEN_UPDATE=1 writes it)");
    if wire != golden {
        let first = wire
            .lines()
            .zip(golden.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(wire.lines().count().min(golden.lines().count()));
        panic!(
            "the wire changed at line {}:\n  now:    {:?}\n  golden: {:?}\n(GOLDEN_UPDATE=1 writes it anew, for a change meant to alter the wire)",
            first + 1,
            wire.lines().nth(first),
            golden.lines().nth(first)
        );
    }
}
