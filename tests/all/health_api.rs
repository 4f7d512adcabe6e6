//! The verdict for schedulers: `gpuwarden health` asks the running daemon over its local
//! socket and exits 0 (no GPU unhealthy), 1 (unhealthy) or 2 (unknown); `/api/v1/health`
//! answers the same JSON behind the HTTP server's auth. Hostile shapes of the socket.

use crate::common;
use common::*;
use std::process::Command;
use std::time::Duration;

/// `gpuwarden health [--json]` against `d`: exit code and stdout.
fn health(d: &Daemon, json: bool) -> (i32, String) {
    let mut command = Command::new(BIN);
    command.arg("health").arg("--socket").arg(d.socket_path());
    if json {
        command.arg("--json");
    }
    let out = command.output().expect("run gpuwarden health");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn wait_for_exit(d: &Daemon, code: i32) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (got, out) = health(d, false);
        if got == code {
            return out;
        }
        assert!(std::time::Instant::now() < deadline, "exit {got}, not {code}: {out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn gpuwarden_health_exits_0_then_1_with_the_gpu_and_reason_then_2_without_a_daemon() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    // The demo's GPUs have degraded findings at most: no GPU unhealthy, exit 0.
    let out = wait_for_exit(&d, 0);
    assert!(!out.starts_with("unhealthy"), "{out}");
    // A fatal XID on GPU 0: exit 1, the first line names the GPU and the reason.
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=x, DBE (0x00000000)\n");
    let out = wait_for_exit(&d, 1);
    let first = out.lines().next().unwrap_or_default();
    assert!(first.starts_with("unhealthy: GPU 0 xid_fatal"), "{out}");
    assert!(
        first.len() <= 80,
        "short enough for NPD's default message length: {first}"
    );
    assert!(out.contains("Xid 48"), "the details follow: {out}");
    // --json: the node's state, the GPU's findings, for scripts.
    let (code, json) = health(&d, true);
    assert_eq!(code, 1);
    let verdict: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(verdict["state"], "unhealthy");
    let gpu0 = &verdict["gpus"][0];
    assert_eq!(gpu0["pci_bus_id"], "0000:19:00.0");
    assert_eq!(gpu0["state"], "unhealthy");
    assert!(
        gpu0["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["reason"] == "xid_fatal"),
        "{verdict}"
    );
    // The same over HTTP.
    let answer = http_get(&d.addr, "/api/v1/health", &[]);
    assert_eq!(answer.status, 200);
    let http: serde_json::Value = serde_json::from_slice(&answer.body).expect("HTTP JSON");
    assert_eq!(http["state"], "unhealthy");
    assert_eq!(
        http["gpus"].as_array().map(Vec::len),
        verdict["gpus"].as_array().map(Vec::len)
    );
    // The socket is the daemon's user's only, and goes with the daemon.
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(d.socket_path()).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let socket = d.socket_path();
    drop(d);
    assert!(!socket.exists(), "removed at stop");
    let out = Command::new(BIN)
        .arg("health")
        .arg("--socket")
        .arg(&socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "no daemon: unknown");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("unknown:"));
}

#[test]
fn a_file_at_the_socket_path_is_left_alone_and_a_stale_socket_replaced() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where the socket goes: not removed, the daemon runs without the API.
    let path = dir.path().join("taken.sock");
    std::fs::write(&path, "keep me").unwrap();
    let config = test_config(
        &sim_library(),
        &format!("local_api:\n  socket: \"{}\"\n", path.display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    d.wait_for_log("no local API", 1, Duration::from_secs(10));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    assert!(d.log_text().contains("is not a socket"), "{}", d.log_text());
    drop(d);
    // A stale socket (a daemon killed before it could remove it): replaced.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let config = test_config(
        &sim_library(),
        &format!("local_api:\n  socket: \"{}\"\n", stale.display()),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    d.wait_for_log("local API on", 1, Duration::from_secs(10));
    let out = Command::new(BIN)
        .arg("health")
        .arg("--socket")
        .arg(&stale)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn a_socket_that_never_answers_or_answers_garbage_is_an_unknown_verdict_in_seconds() {
    let dir = tempfile::tempdir().unwrap();
    // Accepts and then says nothing: the client gives up after its 3 s and exits 2.
    let silent = dir.path().join("silent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&silent).unwrap();
    let holder = std::thread::spawn(move || {
        let held = listener.accept();
        std::thread::sleep(Duration::from_secs(6));
        drop(held);
    });
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .arg("health")
        .arg("--socket")
        .arg(&silent)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("unknown:"));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    holder.join().unwrap();
    // Answers bytes that are not HTTP, then a 200 that is not the verdict: unknown both times.
    for answer in [
        &b"\xff\xfe\x00 not http at all"[..],
        b"HTTP/1.1 200 OK\r\n\r\n{\"state\": 7}",
    ] {
        let path = dir.path().join(format!("garbage-{}.sock", answer.len()));
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let answer = answer.to_vec();
        let server = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 512];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(&answer);
        });
        let out = Command::new(BIN)
            .arg("health")
            .arg("--socket")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
        server.join().unwrap();
    }
}
