//! The network ports end to end: the real daemon over the demo's eight simulated GPUs and a
//! sysfs tree of eight NDR ports beside them (the demo's, src/cli/demo_fabric.rs), changed
//! under the running daemon as a failing port changes it. Each rule of docs/health.md's
//! "Network ports" shows in the node's verdict (/api/v1/health) and in
//! `gpu_node_health_reason`, the hold of `health.rules` keeps a port that came back, and a
//! counter that goes back (the adapter reset) is not a negative rate.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn port(root: &Path, device: &str) -> PathBuf {
    std::fs::canonicalize(root.join("sys/class/infiniband").join(device))
        .unwrap()
        .join("ports/1")
}

/// Writes `value` by rename, as the reader must never see half a file.
fn put(dir: &Path, file: &str, value: &str) {
    let path = dir.join(file);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{value}\n")).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

fn finding(m: &Metrics, reason: &str, subject: &str) -> bool {
    m.value("gpu_node_health_reason", &[("reason", reason), ("subject", subject)]) == Some(1.0)
}

fn verdict(d: &Daemon) -> serde_json::Value {
    serde_json::from_slice(&d.get("/api/v1/health", &[]).body).unwrap()
}

#[test]
fn every_port_rule_reaches_the_nodes_verdict_through_the_daemon() {
    let sys = tempfile::tempdir().unwrap();
    gpuwarden::cli::demo_fabric::write_tree(sys.path()).unwrap();
    let extra = format!(
        "amd:\n  sysfs_root: {}\nnetwork:\n  interval: 1s\n  counters_interval: 1s\n  expected_ports: 8\n\
         health:\n  rules:\n    nic_port_down: {{hold: 4s}}\n",
        sys.path().display()
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &test_config(&sim_library(), &extra));
    let within = Duration::from_secs(15);

    // The demo's tree: mlx5_3 at HDR beside GPU 3.
    d.scrape_until_within("the slow port", within, |m| finding(m, "nic_rate_low", "mlx5_3/1"));
    let v = verdict(&d);
    let slow = v["node_findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["reason"] == "nic_rate_low")
        .unwrap();
    assert_eq!(slow["subject"], "mlx5_3/1");
    assert_eq!(slow["severity"], "degraded");
    // The port families in base units (issue #51, item 15: the rate was in bits), which
    // promtool checks: nothing to report.
    let m = d.scrape();
    assert_eq!(
        m.value("nic_port_speed_bytes", &[("device", "mlx5_0")]),
        Some(50e9),
        "4X NDR, 400 Gb/s"
    );
    let (ok, report) = promtool_check_metrics(&d.get("/metrics", &[]).body);
    assert!(ok && report.trim().is_empty(), "promtool check metrics:\n{report}");
    assert!(
        slow["message"]
            .as_str()
            .unwrap()
            .contains("GPU 3 behind the same switch"),
        "{slow}"
    );

    // mlx5_0 goes down: unhealthy, and 7 of the 8 expected ports up.
    let p0 = port(sys.path(), "mlx5_0");
    put(&p0, "state", "1: DOWN");
    put(&p0, "phys_state", "3: Disabled");
    let m = d.scrape_until_within("the down port", within, |m| {
        finding(m, "nic_port_down", "mlx5_0/1") && finding(m, "nic_ports_missing", "")
    });
    assert_eq!(m.value("nic_port_up", &[("device", "mlx5_0")]), Some(0.0));
    assert_eq!(verdict(&d)["state"], "unhealthy");
    // What Slurm's check puts in the drain reason: the port, not only the rule.
    let health = std::process::Command::new(BIN)
        .args(["health", "--socket", d.socket_path().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(health.status.code(), Some(1));
    let first = String::from_utf8_lossy(&health.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    assert_eq!(first, "unhealthy: node nic_port_down mlx5_0/1, node nic_ports_missing");
    let lines = d.log_text();
    assert!(!lines.contains("panicked"), "{lines}");

    // It comes back: the finding is held for health.rules.nic_port_down.hold, then goes.
    put(&p0, "state", "4: ACTIVE");
    put(&p0, "phys_state", "5: LinkUp");
    d.scrape_until_within("the port up again", within, |m| {
        m.value("nic_port_up", &[("device", "mlx5_0")]) == Some(1.0) && !finding(m, "nic_ports_missing", "")
    });
    let held = verdict(&d)["node_findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["reason"] == "nic_port_down")
        .cloned()
        .expect("the down port is held for 4 s after it came back");
    assert!(
        held["message"].as_str().unwrap().contains("held until clear for 4s"),
        "{held}"
    );
    d.scrape_until_within("the hold to end", within, |m| !finding(m, "nic_port_down", "mlx5_0/1"));

    // mlx5_1 flaps three times between two reads: flapping, and link errors grew.
    put(&port(sys.path(), "mlx5_1"), "counters/link_downed", "4");
    let m = d.scrape_until_within("the flapping port", within, |m| {
        finding(m, "nic_port_flapping", "mlx5_1/1") && finding(m, "nic_link_errors", "mlx5_1/1")
    });
    assert_eq!(m.value("nic_port_flaps", &[("device", "mlx5_1")]), Some(3.0));

    // mlx5_2 takes 121 symbol errors: more than 120 an hour.
    let p2 = port(sys.path(), "mlx5_2");
    put(&p2, "counters/symbol_error", "121");
    d.scrape_until_within("the symbol errors", within, |m| {
        finding(m, "nic_symbol_errors", "mlx5_2/1")
    });
    // A new cable: the operator clears the adapter, and its old errors no longer count
    // (without the clear they would for the rest of the hour).
    let clear = std::process::Command::new(BIN)
        .args(["health", "clear", "--socket", d.socket_path().to_str().unwrap()])
        .args(["--nic", "mlx5_2", "--reason", "replaced the cable, INC-77"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&clear.stdout);
    assert_eq!(
        clear.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&clear.stderr)
    );
    assert!(said.starts_with("cleared network adapter mlx5_2 (0000:"), "{said}");
    assert!(
        said.contains("let go of nic_symbol_errors") && said.contains("no finding left"),
        "{said}"
    );
    let m = d.scrape();
    assert!(!finding(&m, "nic_symbol_errors", "mlx5_2/1"), "{}", m.text);
    // An adapter the node does not have is refused.
    let none = std::process::Command::new(BIN)
        .args(["health", "clear", "--socket", d.socket_path().to_str().unwrap()])
        .args(["--nic", "mlx5_9", "--reason", "x"])
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no network adapter \"mlx5_9\""));
    // More errors after the clear count again, from the clear.
    put(&p2, "counters/symbol_error", "250");
    d.scrape_until_within("new symbol errors", within, |m| {
        finding(m, "nic_symbol_errors", "mlx5_2/1")
    });
    // The adapter resets its counters: 0 again is a new start, not -250.
    put(&p2, "counters/symbol_error", "0");
    let m = d.scrape_until_within("the reset counter", within, |m| {
        m.value(
            "nic_port_errors_total",
            &[("device", "mlx5_2"), ("counter", "symbol_error")],
        ) == Some(0.0)
            && !finding(m, "nic_symbol_errors", "mlx5_2/1")
    });
    assert!(!m.text.contains("-250"));

    // mlx5_4's own PCIe link trains to x8.
    let pci = std::fs::canonicalize(sys.path().join("sys/class/infiniband/mlx5_4/device")).unwrap();
    put(&pci, "current_link_width", "8");
    d.scrape_until_within("the narrowed adapter", within, |m| {
        finding(m, "nic_pcie_narrowed", "mlx5_4/1")
    });
    assert!(!d.log_text().contains("panicked"));
}

#[test]
fn a_node_without_rdma_hardware_shows_no_port_and_no_finding() {
    let sys = tempfile::tempdir().unwrap();
    let extra = format!(
        "amd:\n  sysfs_root: {}\nnetwork:\n  interval: 1s\n  counters_interval: 1s\n",
        sys.path().display()
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &test_config(&sim_library(), &extra));
    let m = d.scrape_until("a poll", |m| m.has_family("gpu_up"));
    // Through a round of the network collector (every second) too.
    let mut later = Vec::new();
    holds_for("scrapes kept", Duration::from_millis(1500), || {
        later.push(d.scrape());
        Ok(())
    });
    for m in std::iter::once(m).chain(later) {
        assert!(!m.text.contains("nic_"), "{}", m.text);
        assert!(!m.has_family("gpu_node_health_reason"));
    }
}

/// NVSwitch errors through the real kernel-log reader: a non-fatal one is counted and changes
/// nothing, a fatal one makes the node unhealthy naming the GPUs, and the same text in a user's
/// record (root writing to /dev/kmsg: the user facility) or quoted inside another message is
/// not counted.
#[test]
fn a_fatal_sxid_makes_the_node_unhealthy_and_a_forged_one_nothing() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.log_kernel(
        "6,10,1000000,-;nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV error\n\
         12,11,1000001,-;nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 24007, Fatal, forged by root through /dev/kmsg\n\
         4,12,1000002,-;tmpfs: Unknown parameter 'nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 24007, Fatal, x'\n",
    );
    let count = |m: &Metrics, switch: &str| m.value("gpu_nvswitch_sxid_errors_total", &[("switch", switch)]);
    let m = d.scrape_until("the non-fatal SXID", |m| count(m, "1") == Some(1.0));
    assert_eq!(count(&m, "3"), None, "a forged SXID was counted:\n{}", m.text);
    assert!(
        m.find("gpu_node_health_reason", &[("reason", "nvswitch_sxid_fatal")])
            .is_empty()
    );
    assert_eq!(
        m.value(
            "gpu_nvswitch_sxid_errors_total",
            &[("sxid", "12028"), ("severity", "non_fatal")]
        ),
        Some(1.0)
    );

    d.log_kernel("3,13,2000000,-;nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n");
    d.scrape_until("the fatal SXID", |m| {
        m.value(
            "gpu_node_health_reason",
            &[("reason", "nvswitch_sxid_fatal"), ("subject", "nvswitch2")],
        ) == Some(1.0)
    });
    let v: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).unwrap();
    assert_eq!(v["state"], "unhealthy");
    let finding = v["node_findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["reason"] == "nvswitch_sxid_fatal")
        .unwrap()
        .clone();
    let message = finding["message"].as_str().unwrap();
    assert!(
        message.contains("SXid 20034 (DLPL) x1: Link 30 LTSSM Fault Up"),
        "{message}"
    );
    assert!(message.contains("GPU(s) 0, 1, 2, 3, 4, 5, 6, 7"), "{message}");

    // The journal has both SXIDs (not the forged one), and a restart whose kernel log no longer
    // holds them (the ring buffer moved on) keeps the fatal one's finding from there.
    let state = d.state_path();
    let events = || {
        let out = std::process::Command::new(BIN)
            .args(["events", "--state", state.to_str().unwrap(), "--kind", "sxid"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let rows = until_ok("two rows", Duration::from_secs(10), || {
        let rows = events();
        (rows.lines().count() >= 2).then(|| rows.clone()).ok_or(rows)
    });
    assert_eq!(rows.lines().count(), 2, "{rows}");
    assert!(
        rows.contains("SXid 12028 (NPORT egress, non_fatal) on NVSwitch 1 at 0000:06:00.0"),
        "{rows}"
    );
    assert!(
        rows.contains("SXid 20034 (DLPL, fatal) on NVSwitch 2 at 0000:07:00.0"),
        "{rows}"
    );
    let d = d.restart(false, Some(""));
    let m = d.scrape_until("the fatal SXID after the restart", |m| {
        m.value(
            "gpu_node_health_reason",
            &[("reason", "nvswitch_sxid_fatal"), ("subject", "nvswitch2")],
        ) == Some(1.0)
    });
    assert_eq!(
        m.value(
            "gpu_nvswitch_sxid_errors_total",
            &[("sxid", "20034"), ("severity", "fatal")]
        ),
        Some(1.0)
    );
}

/// The daemon over the demo's NVSwitch fabric with the board's switches on the bus (the host
/// that must run the fabric manager), its pid file under `dir` naming `pid`, and `sleep` as
/// the fabric manager's name: a real process stands in for it.
fn daemon_with_fabric_manager(dir: &Path, pid: u32) -> Daemon {
    let pid_file = dir.join("nv-fabricmanager.pid");
    std::fs::write(&pid_file, format!("{pid}\n")).unwrap();
    nvswitch_fixture(dir, "0000:05:00.0");
    let extra = format!(
        "fabric_manager:\n  pid_file: {}\n  process: sleep\namd:\n  sysfs_root: {}\n",
        pid_file.display(),
        dir.display()
    );
    Daemon::start_with(DEMO_SCENARIO, &test_config(&sim_library(), &extra))
}

/// nvidia-fabricmanager through the daemon, on the demo's NVSwitch fabric: a live process
/// named as configured is up; once it is gone the node is degraded (every GPU joined the
/// fabric before), and unhealthy when a GPU then waits for the fabric. A real process stands
/// in for the fabric manager (`sleep`, named in `fabric_manager.process`).
#[test]
fn the_fabric_manager_is_looked_for_on_a_fabric_node_and_its_absence_judged() {
    let dir = tempfile::tempdir().unwrap();
    let mut manager = std::process::Command::new("sleep").arg("600").spawn().unwrap();
    let d = daemon_with_fabric_manager(dir.path(), manager.id());
    let within = Duration::from_secs(45);
    d.scrape_until_within("the fabric manager up", within, |m| {
        m.value("gpu_fabric_manager_up", &[]) == Some(1.0)
    });
    manager.kill().unwrap();
    manager.wait().unwrap();
    // (Without the switches on the bus, as in a VM given some of a board's GPUs, it is not
    // looked for: `a_vm_given_fabric_gpus_does_not_look_for_the_fabric_manager`.)
    let m = d.scrape_until_within("the fabric manager down", within, |m| {
        m.value("gpu_fabric_manager_up", &[]) == Some(0.0)
    });
    assert_eq!(
        m.value(
            "gpu_node_health_reason",
            &[("reason", "fabric_manager_down"), ("severity", "degraded")]
        ),
        Some(1.0),
        "{}",
        m.text
    );
    // GPU 4 leaves the fabric (a reset it cannot rejoin from): unhealthy, and its own finding
    // says the fabric manager is not running.
    d.set_scenario(&edit_device(DEMO_SCENARIO, 4, |dev| {
        dev.replace("fabric: { state: completed", "fabric: { state: not_started")
    }));
    d.scrape_until_within("GPU 4 out of the fabric", within, |m| {
        m.value(
            "gpu_node_health_reason",
            &[("reason", "fabric_manager_down"), ("severity", "unhealthy")],
        ) == Some(1.0)
    });
    let v: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).unwrap();
    let gpu4 = v["gpus"].as_array().unwrap().iter().find(|g| g["index"] == 4).unwrap();
    let finding = gpu4["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["reason"] == "fabric_not_ready")
        .unwrap();
    assert_eq!(finding["severity"], "unhealthy");
    assert!(
        finding["message"]
            .as_str()
            .unwrap()
            .contains("nvidia-fabricmanager is not running (pid"),
        "{finding}"
    );
}

/// A virtual machine given GPUs of an NVSwitch board: they report their fabric (Completed),
/// but no NVSwitch is on its bus and the host's fabric manager serves it. Seen on a cloud VM
/// of two H200s (docs/validation.md): not looked for, no finding.
#[test]
fn a_vm_given_fabric_gpus_does_not_look_for_the_fabric_manager() {
    let dir = tempfile::tempdir().unwrap();
    pci_fixture(dir.path(), &[("0000:19:00.0", Some("nvidia"))]);
    let extra = format!(
        "fabric_manager:\n  pid_file: {}\namd:\n  sysfs_root: {}\n",
        dir.path().join("nv-fabricmanager.pid").display(),
        dir.path().display()
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &test_config(&sim_library(), &extra));
    d.scrape_until("the fabric", |m| m.has_family("gpu_fabric_state"));
    holds_for("no fabric manager finding", Duration::from_secs(2), || {
        let m = d.scrape();
        match m.has_family("gpu_fabric_manager_up")
            || !m
                .find("gpu_node_health_reason", &[("reason", "fabric_manager_down")])
                .is_empty()
        {
            false => Ok(()),
            true => Err(m.text),
        }
    });
}

/// The pid file names a process that an ordinary user holds under the fabric manager's name
/// (issue #51, item 7: a user forked until they held a dead manager's pid): it is not the
/// fabric manager, since it does not run as root. A real process of `nobody` stands in.
#[test]
fn a_users_process_named_as_the_fabric_manager_is_not_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut impostor = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "600"])
        .spawn()
        .unwrap();
    let d = daemon_with_fabric_manager(dir.path(), impostor.id());
    let m = d.scrape_until_within("the fabric manager looked for", Duration::from_secs(45), |m| {
        m.value("gpu_fabric_manager_up", &[]).is_some()
    });
    assert_eq!(m.value("gpu_fabric_manager_up", &[]), Some(0.0), "{}", m.text);
    let v: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).unwrap();
    assert!(v.to_string().contains("is named sleep but runs as uid 65534"), "{v}");
    impostor.kill().unwrap();
    impostor.wait().unwrap();
}
