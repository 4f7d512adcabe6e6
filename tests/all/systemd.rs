//! Life under systemd: sd_notify messages, the watchdog, SIGHUP reloads, SIGTERM, the
//! journal, and the unit file's sandbox score.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

/// A socket that plays systemd's NOTIFY_SOCKET.
struct NotifySocket {
    _dir: tempfile::TempDir,
    path: String,
    socket: UnixDatagram,
}

impl NotifySocket {
    fn new() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        NotifySocket {
            path: path.display().to_string(),
            _dir: dir,
            socket,
        }
    }

    /// Every message that arrives within `window`.
    fn collect(&self, window: Duration) -> Vec<String> {
        let until = Instant::now() + window;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < until {
            if let Ok(n) = self.socket.recv(&mut buf) {
                out.push(String::from_utf8_lossy(&buf[..n]).trim_end().to_string());
            }
        }
        out
    }

    /// Messages until one satisfies `done`, or panics after `limit`.
    fn until(&self, what: &str, limit: Duration, done: impl Fn(&str) -> bool) -> Vec<String> {
        let until = Instant::now() + limit;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while Instant::now() < until {
            if let Ok(n) = self.socket.recv(&mut buf) {
                let message = String::from_utf8_lossy(&buf[..n]).trim_end().to_string();
                let finished = done(&message);
                out.push(message);
                if finished {
                    return out;
                }
            }
        }
        panic!("no {what} within {limit:?}; got {out:?}");
    }
}

fn start_notified(scenario: &str, notify: &NotifySocket) -> Daemon {
    let env = [
        ("NOTIFY_SOCKET", notify.path.clone()),
        ("WATCHDOG_USEC", "1000000".to_string()),
    ];
    Daemon::start_full(scenario, &test_config(&sim_library(), ""), "", &env)
}

fn position(messages: &[String], from: usize, pattern: &str) -> usize {
    messages[from..]
        .iter()
        .position(|m| m.lines().any(|l| l == pattern))
        .map(|p| p + from)
        .unwrap_or_else(|| panic!("no {pattern} after message {from} in {messages:?}"))
}

#[test]
fn notify_messages_come_in_order() {
    let notify = NotifySocket::new();
    let d = start_notified(DEMO_SCENARIO, &notify);
    let mut messages = notify.until("READY=1", Duration::from_secs(10), |m| m.contains("READY=1"));
    let ready = messages.len() - 1;
    assert!(
        messages[ready].contains("STATUS=serving 8 GPU(s) on 127.0.0.1:"),
        "{messages:?}"
    );
    // The poll loop's summary went out before READY: the first round was done by then.
    assert!(
        messages[..ready]
            .iter()
            .any(|m| m.contains("STATUS=8 GPU(s): 0 unhealthy, 4 degraded")),
        "{messages:?}"
    );
    // WatchdogSec=1s: pings every half period.
    messages.extend(notify.collect(Duration::from_millis(1600)));
    let pings = messages.iter().filter(|m| m.as_str() == "WATCHDOG=1").count();
    assert!(pings >= 3, "{pings} pings in 1.6s: {messages:?}");

    d.signal(SIGHUP);
    messages.extend(notify.until("READY after reload", Duration::from_secs(10), |m| m.contains("READY=1")));
    let reloading = position(&messages, ready + 1, "RELOADING=1");
    assert!(
        messages[reloading].contains("MONOTONIC_USEC="),
        "{}",
        messages[reloading]
    );
    let ready_again = position(&messages, reloading + 1, "READY=1");

    let code = d.stop();
    let mut rest = notify.collect(Duration::from_millis(300));
    messages.append(&mut rest);
    let stopping = position(&messages, ready_again + 1, "STOPPING=1");
    assert!(ready < reloading && reloading < ready_again && ready_again < stopping);
    assert_eq!(code, Some(0));
}

#[test]
fn watchdog_pings_stop_when_the_poll_loop_hangs_and_resume_after() {
    let notify = NotifySocket::new();
    // NVML fails to initialise, so the poll loop keeps retrying it (every 200ms to 1s)...
    let d = start_notified("init_error: driver_not_loaded\ndevices: []\n", &notify);
    notify.until("first ping", Duration::from_secs(10), |m| m == "WATCHDOG=1");
    // ...until the retry itself hangs inside the driver, as a wedged reload does.
    d.set_scenario("init_error: driver_not_loaded\ninit_hang: 120\ndevices: []\n");
    std::thread::sleep(Duration::from_millis(1500)); // the next retry is at most 1s away
    let _ = notify.collect(Duration::from_millis(200));
    let quiet = notify.collect(Duration::from_millis(2500));
    assert!(
        !quiet.iter().any(|m| m == "WATCHDOG=1"),
        "pings went on while the poll loop hung: {quiet:?}"
    );
    // Scrapes are still answered while the poll loop is stuck.
    assert_eq!(d.get("/metrics", &[]).status, 200);
    // The hang ends (the driver came back): pings resume and NVML comes up.
    d.set_scenario(DEMO_SCENARIO);
    notify.until("pings again", Duration::from_secs(10), |m| m == "WATCHDOG=1");
    d.scrape_until("NVML up", |m| {
        m.value("gpuwarden_backend_up", &[("backend", "nvml")]) == Some(1.0)
    });
}

#[test]
fn healthz_fails_when_the_poll_loop_stalls() {
    // Start-up waits for the first round, so start with NVML failing fast and make a later
    // retry hang.
    let d = Daemon::start("init_error: driver_not_loaded\ndevices: []\n");
    assert_eq!(d.get("/healthz", &[]).status, 200);
    d.set_scenario("init_error: driver_not_loaded\ninit_hang: 120\ndevices: []\n");
    let stalled = until_ok(
        "/healthz to say 503 after the poll loop hung",
        Duration::from_secs(12),
        || {
            let r = d.get("/healthz", &[]);
            (r.status == 503).then(|| r.text()).ok_or(format!("{}", r.status))
        },
    );
    assert!(stalled.starts_with("poll loop stalled"), "{stalled}");
}

#[test]
fn sighup_with_a_bad_config_keeps_the_running_one() {
    let d = Daemon::start(DEMO_SCENARIO);
    let good = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(d.config_path(), format!("{good}poll:\n  intervall: 1s\n")).unwrap();
    d.signal(SIGHUP);
    d.wait_for_log("reload refused", 1, Duration::from_secs(5));
    let log = d.log_text();
    let path = d.config_path().display().to_string();
    assert!(
        log.contains(&format!("reload refused, keeping the running config: {path}:")),
        "{log}"
    );
    // The daemon goes on as before: same GPUs, still polling.
    let before = d
        .scrape()
        .value("gpu_last_poll_timestamp_seconds", &[("gpu", "0")])
        .unwrap();
    let m = d.scrape_until("still polling", |m| {
        m.value("gpu_last_poll_timestamp_seconds", &[("gpu", "0")])
            .is_some_and(|t| t > before)
    });
    assert_eq!(m.find("gpu_up", &[]).len(), 8);
}

#[test]
fn sighup_with_a_good_config_applies_it_and_keeps_counters() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, Graphics Exception\n");
    d.scrape_until("Xid 13", |m| {
        m.value("gpu_xid_errors_total", &[("gpu", "0"), ("xid", "13")]) == Some(1.0)
    });
    let persistence_before = d.scrape().value(
        "gpuwarden_persistence_enable_attempts_total",
        &[("gpu", "4"), ("result", "enabled")],
    );
    assert_eq!(persistence_before, Some(1.0));

    // Turn NVML off: the GPUs go, the daemon stays.
    let good = std::fs::read_to_string(d.config_path()).unwrap();
    let off = good.replace("nvml:\n", "nvml:\n  enabled: false\n");
    std::fs::write(d.config_path(), &off).unwrap();
    d.signal(SIGHUP);
    let m = d.scrape_until("NVML off", |m| !m.has_family("gpu_up"));
    assert!(
        m.value("gpuwarden_backend_up", &[("backend", "nvml")]).is_none(),
        "{}",
        m.text
    );
    // The snapshot can show NVML off a moment before the line is logged.
    d.wait_for_log("reloaded the config", 1, std::time::Duration::from_secs(5));

    // And back on: the XID count and the persistence counter carried over the reloads.
    std::fs::write(d.config_path(), &good).unwrap();
    d.signal(SIGHUP);
    let m = d.scrape_until("GPUs back", |m| m.find("gpu_up", &[]).len() == 8);
    assert_eq!(
        m.value("gpu_xid_errors_total", &[("gpu", "0"), ("xid", "13")]),
        Some(1.0)
    );
    // Persistence mode stayed on, so there was no new attempt; without the hand-over the
    // new poll loop would have no attempts at all and the series would be gone.
    assert_eq!(
        m.value(
            "gpuwarden_persistence_enable_attempts_total",
            &[("gpu", "4"), ("result", "enabled")]
        ),
        Some(1.0)
    );
}

fn assert_stops_quickly(d: Daemon) {
    let started = Instant::now();
    let code = d.stop();
    let took = started.elapsed();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(5), "SIGTERM took {took:?}");
}

#[test]
fn sigterm_stops_within_five_seconds_even_with_a_hung_gpu_call() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.set_scenario(&edit_device(DEMO_SCENARIO, 1, |dev| {
        format!("{dev}    hang: {{ nvmlDeviceGetPowerUsage: 60 }}\n")
    }));
    d.scrape_until("GPU 1 hung", |m| m.value("gpu_up", &[("gpu", "1")]) == Some(0.0));
    assert_stops_quickly(d);
}

#[test]
fn sigterm_stops_within_five_seconds_even_with_a_hung_nvml_init() {
    let d = Daemon::start("init_error: driver_not_loaded\ndevices: []\n");
    d.set_scenario("init_error: driver_not_loaded\ninit_hang: 120\ndevices: []\n");
    // Meant: the next retry of nvmlInit (at most a second away) is inside the hang by then.
    std::thread::sleep(Duration::from_millis(1500));
    assert_stops_quickly(d);
}

/// Decodes journald's native protocol: `KEY=value\n`, or `KEY\n<u64 LE length><bytes>\n`.
fn journal_fields(datagram: &[u8]) -> BTreeMap<String, String> {
    let mut fields = BTreeMap::new();
    let mut rest = datagram;
    while !rest.is_empty() {
        let line_end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        let line = &rest[..line_end];
        if let Some(eq) = line.iter().position(|b| *b == b'=') {
            fields.insert(
                String::from_utf8_lossy(&line[..eq]).into_owned(),
                String::from_utf8_lossy(&line[eq + 1..]).into_owned(),
            );
            rest = &rest[(line_end + 1).min(rest.len())..];
        } else {
            let key = String::from_utf8_lossy(line).into_owned();
            let len_start = line_end + 1;
            let len = u64::from_le_bytes(rest[len_start..len_start + 8].try_into().unwrap()) as usize;
            let value = &rest[len_start + 8..len_start + 8 + len];
            fields.insert(key, String::from_utf8_lossy(value).into_owned());
            rest = &rest[(len_start + 8 + len + 1).min(rest.len())..];
        }
    }
    fields
}

#[test]
fn under_journald_records_carry_gpu_uuid_pci_bus_id_and_xid_fields() {
    use std::os::unix::fs::MetadataExt;
    // Play journald: this machine runs none, so its socket path is free.
    let socket_path = std::path::Path::new("/run/systemd/journal/socket");
    assert!(
        !socket_path.exists(),
        "a journald is running here; this test needs its socket path free"
    );
    std::fs::create_dir_all("/run/systemd/journal").unwrap();
    let journal = UnixDatagram::bind(socket_path).unwrap();
    journal.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    struct Cleanup;
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_file("/run/systemd/journal/socket");
        }
    }
    let _cleanup = Cleanup;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.yaml"), DEMO_SCENARIO).unwrap();
    std::fs::write(
        dir.path().join("kmsg"),
        dmesg_stamped("NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        dir.path().join("c.yaml"),
        format!(
            "listen: 127.0.0.1:{port}\nnvml:\n  library_path: {}\nxid:\n  kernel_log_path: {}\nstate:\n  path: {}\n",
            sim_library().display(),
            dir.path().join("kmsg").display(),
            dir.path().join("state.db").display()
        ),
    )
    .unwrap();
    // stderr is "the journal stream": JOURNAL_STREAM names its device and inode.
    let (reader, writer) = std::io::pipe().unwrap();
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&reader))).unwrap();
    let mut child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(dir.path().join("c.yaml"))
        .env("GPUWARDEN_SIM_NVML_SCENARIO", dir.path().join("s.yaml"))
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stderr(writer)
        .spawn()
        .unwrap();
    // Lose GPU 7 once the daemon knows it.
    std::thread::sleep(Duration::from_millis(1500));
    let lost = edit_device(DEMO_SCENARIO, 7, |dev| format!("{dev}    lost: true\n"));
    std::fs::write(dir.path().join("s.tmp"), lost).unwrap();
    std::fs::rename(dir.path().join("s.tmp"), dir.path().join("s.yaml")).unwrap();
    let mut records = Vec::new();
    let until = Instant::now() + Duration::from_secs(8);
    let mut buf = vec![0u8; 65536];
    while Instant::now() < until {
        if let Ok(n) = journal.recv(&mut buf) {
            records.push(journal_fields(&buf[..n]));
        }
        let lost = records
            .iter()
            .any(|r| r.get("MESSAGE").is_some_and(|m| m.contains("is lost")));
        let xid = records.iter().any(|r| r.contains_key("XID"));
        if lost && xid {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    drop(reader);

    let lost = records
        .iter()
        .find(|r| r.get("MESSAGE").is_some_and(|m| m.contains("is lost")))
        .unwrap_or_else(|| panic!("no 'is lost' record in {records:?}"));
    assert_eq!(lost["GPU_UUID"], "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000007");
    assert_eq!(lost["PCI_BUS_ID"], "0000:db:00.0");
    assert_eq!(lost["PRIORITY"], "3", "an error");
    assert_eq!(lost["SYSLOG_IDENTIFIER"], "gpuwarden");
    let xid = records
        .iter()
        .find(|r| r.contains_key("XID"))
        .unwrap_or_else(|| panic!("no XID record in {records:?}"));
    assert_eq!(xid["XID"], "79");
    assert_eq!(xid["PCI_BUS_ID"], "0000:19:00.0");
    assert!(
        xid["MESSAGE"].contains("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"),
        "{xid:?}"
    );
}

#[test]
fn unit_file_sandbox_scores_2_5_or_better() {
    let unit = concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/gpuwarden.service");
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", unit])
        .output()
        .expect("systemd-analyze is needed for this test");
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for gpuwarden.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no score in:\n{text}"));
    assert!(score <= 2.5, "exposure {score} > 2.5:\n{text}");
}
