//! The health journal end to end: the real daemon over the simulated GPUs writing a real
//! SQLite file, restarted, rebooted, killed, locked and handed garbage; read back with
//! `gpuwarden events` and `gpuwarden report`, and with SQLite itself.

use crate::common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Xid 48 (double-bit ECC, fatal) on GPU 0 as a /dev/kmsg record with sequence number 501.
const FATAL_XID: &str = "3,501,5000000,-;NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=train, DBE (0x00000000)\n";
const GPU0_UUID: &str = "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000000";
const GPU0_SERIAL: &str = "1653024000000";

fn gpu0() -> (&'static str, &'static str) {
    ("gpu", "0")
}

fn xid_rows(state: &Path) -> Vec<serde_json::Value> {
    events_json(state, &["--kind", "xid"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// `gpuwarden report --gpu GPU --json` on the journal at `state`.
fn report_json(state: &Path, gpu: &str) -> serde_json::Value {
    gpuwarden_json(&["report", "--gpu", gpu], state)
}

/// Seconds since boot, as the kernel stamps its records.
fn uptime_seconds() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits until the journal holds `n` XID rows (the writer batches once a second).
fn wait_for_xid_rows(state: &Path, n: usize) -> Vec<serde_json::Value> {
    eventually(&format!("{n} XID row(s)"), Duration::from_secs(10), || {
        let rows = if state.exists() { xid_rows(state) } else { Vec::new() };
        (rows.len() >= n).then_some(rows)
    })
}

fn unhealthy(m: &Metrics) -> bool {
    m.value("gpu_health", &[gpu0(), ("state", "unhealthy")]) == Some(1.0)
}

#[test]
fn a_fatal_xid_holds_its_gpu_across_a_restart_and_is_listed_once() {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    d.scrape_until("Xid 48 makes GPU 0 unhealthy", unhealthy);
    let state = d.state_path();
    wait_for_xid_rows(&state, 1);
    // Restarted after the ring buffer dropped the line: the journal still knows.
    let d = d.restart(false, Some(""));
    let m = d.scrape_until("GPU 0 unhealthy after the restart", unhealthy);
    assert_eq!(
        m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "48")]),
        Some(1.0),
        "{}",
        m.text
    );
    let rows = xid_rows(&state);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(row["gpu_uuid"], GPU0_UUID);
    assert_eq!(row["serial"], GPU0_SERIAL);
    assert_eq!(row["pci_bus_id"], "0000:19:00.0");
    assert_eq!(row["details"]["xid"], 48);
    assert_eq!(row["details"]["severity"], "fatal");
    assert_eq!(row["details"]["kmsg_sequence"], 501);
    assert!(
        row["details"]["raw"]
            .as_str()
            .unwrap()
            .contains("Xid (PCI:0000:19:00): 48"),
        "{row}"
    );
    // The kernel's time of the record: 5 s after boot.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let uptime = uptime_seconds();
    let at = row["at"].as_f64().unwrap();
    assert!(
        (at - (now - uptime + 5.0)).abs() < 2.0,
        "at {at}, boot + 5 s {}",
        now - uptime + 5.0
    );
    // The evidence packet names the serial and the XID.
    let report = report_json(&state, "0");
    assert_eq!(report["identity"]["serial"], GPU0_SERIAL);
    assert_eq!(report["identity"]["uuid"], GPU0_UUID);
    assert_eq!(report["identity"]["vbios"], "96.00.AF.00.01");
    assert_eq!(report["identity"]["board_part_number"], "692-2G520-0280-000");
    assert_eq!(report["xids"][0]["details"]["xid"], 48);
    assert_eq!(report["verdict"], "unhealthy");
    assert!(
        report["guidance"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["finding"].as_str().unwrap().contains("Xid 48")),
        "{report:#}"
    );
}

#[test]
fn a_line_still_in_the_ring_buffer_after_a_restart_is_not_counted_twice() {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    d.scrape_until("Xid 48 counted", |m| {
        m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "48")]) == Some(1.0)
    });
    let state = d.state_path();
    wait_for_xid_rows(&state, 1);
    // The kernel log still holds the record; a new one comes after the restart.
    let d = d.restart(
        false,
        Some(&format!(
            "{FATAL_XID}3,502,6000000,-;NVRM: Xid (PCI:0000:19:00): 48, pid=2, name=train, DBE (0x00000000)\n"
        )),
    );
    let m = d.scrape_until("the new record counted once", |m| {
        m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "48")]) == Some(2.0)
    });
    let rows = wait_for_xid_rows(&state, 2);
    // Counted twice, the old line would be a third row a batch (a second) later.
    holds_for("two XID rows", Duration::from_millis(1500), || {
        match xid_rows(&state).len() {
            2 => Ok(()),
            n => Err(format!("{n} rows")),
        }
    });
    let sequences: Vec<u64> = rows
        .iter()
        .map(|r| r["details"]["kmsg_sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, vec![501, 502]);
    assert_eq!(
        d.scrape().value("gpu_xid_errors_total", &[gpu0(), ("xid", "48")]),
        Some(2.0),
        "{}",
        m.text
    );
}

#[test]
fn after_a_reboot_the_verdict_starts_fresh_and_the_history_stays() {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    d.scrape_until("unhealthy", unhealthy);
    let state = d.state_path();
    wait_for_xid_rows(&state, 1);
    d.reboot();
    let d = d.restart(false, Some(""));
    let m = d.scrape_until("GPU 0 ok after the reboot", |m| {
        m.value("gpu_health", &[gpu0(), ("state", "ok")]) == Some(1.0)
    });
    assert_eq!(
        m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "48")]),
        None,
        "{}",
        m.text
    );
    let rows = xid_rows(&state);
    assert_eq!(rows.len(), 1, "the history stays: {rows:#?}");
    assert_eq!(rows[0]["boot_id"], TEST_BOOT_ID);
    // Both boots are in the report (the new one from the writer's first batch).
    eventually("both boots in the report", Duration::from_secs(10), || {
        let report = report_json(&state, GPU0_UUID);
        (report["identity"]["boots_seen"].as_array().unwrap().len() == 2).then_some(())
    });
    drop(d);
}

#[test]
fn a_garbage_state_file_is_moved_aside_and_a_new_journal_started() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    std::fs::write(&state, "this is not a SQLite database, just some garbage\n".repeat(100)).unwrap();
    let config = test_config(
        &sim_library(),
        &format!(
            "state:\n  path: {}\n  boot_id_file: /proc/sys/kernel/random/boot_id\n",
            state.display()
        ),
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    d.scrape_until("the journal up on a new file", |m| {
        m.value("gpuwarden_journal_up", &[]) == Some(1.0)
    });
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state.db.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "the garbage was moved aside: {aside:?}");
    assert!(d.log_text().contains("moved it to"), "{}", d.log_text());
    let rows = events_json(&state, &["--kind", "daemon"]);
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows:#}");
}

#[test]
fn a_journal_that_cannot_be_opened_leaves_metrics_and_health_working() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be: SQLite cannot open it.
    let state = dir.path().join("state.db");
    std::fs::create_dir(&state).unwrap();
    let config = test_config(
        &sim_library(),
        &format!(
            "state:\n  path: {}\n  boot_id_file: /proc/sys/kernel/random/boot_id\n",
            state.display()
        ),
    );
    let mut d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &config, FATAL_XID);
    let m = d.scrape_until("health goes on without the journal", |m| {
        unhealthy(m) && m.value("gpuwarden_journal_up", &[]) == Some(0.0)
    });
    assert!(
        m.value("gpu_temperature_celsius", &[gpu0(), ("sensor", "gpu")])
            .is_some()
    );
    d.wait_for_log("cannot write", 1, Duration::from_secs(10));
    // Each batch (a second) tries again: the log says it once.
    holds_for("logged once", Duration::from_millis(1500), || {
        let log = d.log_text();
        match log.matches("cannot write").count() {
            1 => Ok(()),
            n => Err(format!("{n} times:\n{log}")),
        }
    });
    let log = d.log_text();
    assert!(log.contains("state.path"), "says what to do:\n{log}");
    // At the stop, the rows held in memory are lost, and the log blames the file, not a hung
    // worker (which an operator would go and look for).
    d.signal(15);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    let log = d.log_text();
    let lost = log
        .lines()
        .find(|l| l.contains("could not be written before the stop"))
        .unwrap_or_else(|| panic!("the loss is logged:\n{log}"));
    assert!(lost.contains("is not a regular file"), "{lost}");
    assert!(!lost.contains("did not answer"), "{lost}");
}

#[test]
fn a_locked_journal_counts_write_errors_and_loses_nothing_once_free() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("journal up", |m| m.value("gpuwarden_journal_up", &[]) == Some(1.0));
    let state = d.state_path();
    let mut other = rusqlite::Connection::open(&state).unwrap();
    let lock = other
        .transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)
        .unwrap();
    d.log_kernel(FATAL_XID);
    let m = d.scrape_until("the journal down while locked", |m| {
        m.value("gpuwarden_journal_up", &[]) == Some(0.0)
    });
    assert!(
        m.value("gpuwarden_journal_write_errors_total", &[]).unwrap_or(0.0) >= 1.0,
        "{}",
        m.text
    );
    assert!(unhealthy(&m), "health goes on");
    lock.rollback().unwrap();
    drop(other);
    // The writer tries again after 1 s, the wait doubling while it fails: a lock held for a few
    // seconds costs a few seconds more, not the 30 s of the longest wait. The XID seen while
    // locked is written then.
    let freed = std::time::Instant::now();
    let rows = eventually("the XID written after the lock", Duration::from_secs(40), || {
        Some(xid_rows(&state)).filter(|rows| !rows.is_empty())
    });
    assert_eq!(rows.len(), 1);
    assert!(
        freed.elapsed() < Duration::from_secs(15),
        "written {:?} after the lock was freed: the back-off starts at 1 s",
        freed.elapsed()
    );
    d.scrape_until("journal up again", |m| {
        m.value("gpuwarden_journal_up", &[]) == Some(1.0)
    });
}

#[test]
fn kill_9_while_writing_loses_at_most_the_last_second_and_never_the_file() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("journal up", |m| m.value("gpuwarden_journal_up", &[]) == Some(1.0));
    let state = d.state_path();
    // 40 distinct XIDs (two GPUs, 20 codes of the catalog, so no storm limit applies).
    let codes = [
        13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120,
    ];
    let mut lines = String::new();
    let mut sequence = 1000;
    for bus in ["19", "3b"] {
        for code in codes {
            sequence += 1;
            lines.push_str(&format!(
                "3,{sequence},7000000,-;NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=1, name=x, test\n"
            ));
        }
    }
    d.log_kernel(&lines);
    // Meant: the promise is that a kill loses at most the last second's rows (a batch a
    // second); these 40 are 2.5 s old when it comes.
    std::thread::sleep(Duration::from_millis(2500));
    // Then more, and kill -9 at once: those may be lost, the file may not.
    d.log_kernel("3,2001,8000000,-;NVRM: Xid (PCI:0000:5d:00): 13, pid=1, name=x, test\n");
    let d = d.restart(true, None);
    let conn = rusqlite::Connection::open(&state).unwrap();
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    let written: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE kind = 'xid' AND at < 1e10",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        written >= 40,
        "the 40 XIDs written more than a second before the kill are there: {written}"
    );
    drop(d);
}

#[test]
fn the_api_and_the_status_page_show_the_journal() {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    d.scrape_until("unhealthy", unhealthy);
    wait_for_xid_rows(&d.state_path(), 1);
    let answer = d.get("/api/v1/events?kind=xid&gpu=0", &[]);
    assert_eq!(answer.status, 200, "{}", answer.text());
    let json: serde_json::Value = serde_json::from_str(&answer.text()).unwrap();
    let rows = json["events"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{json:#}");
    assert_eq!(rows[0]["details"]["xid"], 48);
    assert_eq!(rows[0]["gpu_uuid"], GPU0_UUID);
    // Everything of GPU 0 since an hour ago holds the XID and the verdict change.
    let all: serde_json::Value = serde_json::from_str(&d.get("/api/v1/events?since=1h&gpu=0", &[]).text()).unwrap();
    let kinds: Vec<&str> = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"health") && kinds.contains(&"inventory"), "{kinds:?}");
    assert_eq!(d.get("/api/v1/events?kind=nonsense", &[]).status, 400);
    assert_eq!(d.get("/api/v1/events?limit=0", &[]).status, 400);
    assert_eq!(d.get("/api/v1/events?gpu=GPU-not-here", &[]).status, 404);
    let page = d.get("/", &[]).page_text();
    assert!(page.contains("Recent events (7 days)"), "{page}");
    assert!(page.contains("Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE, fatal)"), "{page}");
}

#[test]
fn with_the_journal_off_nothing_is_written_and_the_api_says_so() {
    let config = test_config(&sim_library(), "state:\n  path: \"\"\n");
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &config, FATAL_XID);
    let m = d.scrape_until("unhealthy", unhealthy);
    assert_eq!(
        m.value("gpuwarden_journal_up", &[]),
        None,
        "absent with the journal off"
    );
    assert_eq!(d.get("/api/v1/events", &[]).status, 404);
    assert!(!d.get("/", &[]).page_text().contains("Recent events"));
    assert!(!d.dir.path().join("state.db").exists());
}

fn journal_up(m: &Metrics) -> Option<f64> {
    m.value("gpuwarden_journal_up", &[])
}

/// Kernel-log lines with `n` distinct XIDs (20 codes over the 8 GPUs, so no storm limit
/// applies within a minute) and long enough lines to fill a small file system.
fn many_xids(first_sequence: u32, n: usize) -> String {
    let codes = [
        13, 31, 32, 38, 43, 45, 61, 62, 63, 64, 68, 69, 74, 92, 94, 95, 119, 120, 121, 140,
    ];
    let padding = "x".repeat(700);
    (0..n)
        .map(|i| {
            let bus = &DEMO_ADDRESSES[i % 8][5..10];
            let code = codes[(i / 8) % codes.len()];
            format!(
                "3,{},9000000,-;NVRM: Xid (PCI:0000:{bus}): {code}, pid=1, name=x, {padding}\n",
                first_sequence as usize + i
            )
        })
        .collect()
}

#[test]
fn a_full_disk_leaves_metrics_and_health_working() {
    // 512 KiB for the journal's directory: the schema and a few batches fit, then SQLite
    // answers "database or disk is full".
    let d = Daemon::start_in_private_mounts(DEMO_SCENARIO, "mount -t tmpfs -o size=512k tmpfs \"$STATE\"");
    d.scrape_until("journal up", |m| journal_up(m) == Some(1.0));
    d.log_kernel(&many_xids(3000, 1500));
    let m = d.scrape_until_within("the journal down: disk full", Duration::from_secs(20), |m| {
        journal_up(m) == Some(0.0)
    });
    assert!(
        m.value("gpuwarden_journal_write_errors_total", &[]).unwrap_or(0.0) >= 1.0,
        "{}",
        m.text
    );
    d.log_kernel(FATAL_XID);
    let m = d.scrape_until("health goes on", unhealthy);
    assert!(
        m.value("gpu_temperature_celsius", &[gpu0(), ("sensor", "gpu")])
            .is_some()
    );
    let log = d.log_text();
    assert!(log.contains("free space"), "says what to do:\n{log}");
    assert_eq!(log.matches("cannot write").count(), 1, "logged once:\n{log}");
}

#[test]
fn a_read_only_file_system_leaves_health_working_and_the_journal_catches_up() {
    // A journal from before, on a file system that is read-only when the daemon starts (a
    // file system with open writers cannot be made read-only under them).
    let before = tempfile::tempdir().unwrap();
    let file = before.path().join("state.db");
    rusqlite::Connection::open(&file)
        .unwrap()
        .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (x); PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    let d = Daemon::start_in_private_mounts(
        DEMO_SCENARIO,
        &format!(
            "mount -t tmpfs tmpfs \"$STATE\" && cp {} \"$STATE\"/ && mount -o remount,ro \"$STATE\"",
            file.display()
        ),
    );
    let state = d.state_path();
    let dir = state.parent().unwrap().display().to_string();
    d.log_kernel(FATAL_XID);
    let m = d.scrape_until("the journal down, health on", |m| {
        journal_up(m) == Some(0.0) && unhealthy(m)
    });
    assert!(
        m.value("gpuwarden_journal_write_errors_total", &[]).unwrap_or(0.0) >= 1.0,
        "{}",
        m.text
    );
    assert!(d.log_text().contains("cannot write"), "{}", d.log_text());
    // Writable again: within the 30 s retry the XID seen meanwhile is written.
    d.in_mount_namespace(&format!("mount -o remount,rw {dir}"));
    d.scrape_until_within("the journal up again", Duration::from_secs(45), |m| {
        journal_up(m) == Some(1.0)
    });
    d.wait_for_log("writing again", 1, Duration::from_secs(5));
    let rows: f64 = d
        .scrape()
        .value("gpuwarden_journal_rows_written_total", &[])
        .unwrap_or(0.0);
    assert!(rows >= 2.0, "the daemon start and the XID: {rows}");
}

/// Waits until the journal holds a row of `kind` for `uuid`; returns all of that kind.
fn wait_for_kind(state: &Path, kind: &str, uuid: &str) -> Vec<serde_json::Value> {
    wait_for_kind_within(state, kind, uuid, Duration::from_secs(10))
}

fn wait_for_kind_within(state: &Path, kind: &str, uuid: &str, within: Duration) -> Vec<serde_json::Value> {
    eventually(&format!("a {kind} row for {uuid}"), within, || {
        if !state.exists() {
            return None;
        }
        let rows: Vec<serde_json::Value> = events_json(state, &["--kind", kind])
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r["gpu_uuid"] == uuid)
            .collect();
        (!rows.is_empty()).then_some(rows)
    })
}

#[test]
fn each_change_of_a_gpu_is_one_row() {
    let d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    assert_eq!(wait_for_kind(&state, "inventory", GPU0_UUID).len(), 1);
    // GPU 4 came with persistence mode off: a row, named, when gpuwarden turned it on.
    let turned_on = wait_for_kind(&state, "persistence", "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000004");
    assert_eq!(turned_on[0]["details"]["times_since_start"], 1, "{turned_on:#?}");
    // GPU 0: two uncorrectable ECC errors, a pending row remap, NVLink errors and a link down.
    let changed = edit_device(DEMO_SCENARIO, 0, |dev| {
        dev.replace(
            "aggregate: { corrected: 40, uncorrected: 0 }",
            "aggregate: { corrected: 40, uncorrected: 2 }",
        )
        .replace("pending: false", "pending: true")
        .replacen("{ up: true, crc_flit: 0,", "{ up: false, crc_flit: 7,", 1)
        .replace("recovery_action: 0", "recovery_action: 2")
    });
    d.set_scenario(&changed);
    // Each kind's first row is the reading at first sight; the change is the row after it.
    let changed_row = |kind: &str| {
        eventually(&format!("the {kind} change"), Duration::from_secs(10), || {
            let rows = wait_for_kind(&state, kind, GPU0_UUID);
            (rows.len() >= 2).then(|| rows[rows.len() - 1].clone())
        })
    };
    let first_ecc = &wait_for_kind(&state, "ecc", GPU0_UUID)[0];
    assert_eq!(first_ecc["details"]["reading"], "at first sight", "{first_ecc:#}");
    assert_eq!(first_ecc["details"]["uncorrectable"], 0);
    let ecc = changed_row("ecc");
    assert_eq!(ecc["details"]["uncorrectable_before"], 0);
    assert_eq!(ecc["details"]["uncorrectable"], 2);
    let remap = changed_row("row_remap");
    assert_eq!(remap["details"]["pending"], true);
    let nvlink = changed_row("nvlink");
    assert_eq!(nvlink["details"]["links_down"], serde_json::json!([0]));
    assert_eq!(nvlink["details"]["errors"], 7);
    // The driver's recovery action: "none" at first sight is no row; its change is one.
    let recovery = wait_for_kind(&state, "recovery_action", GPU0_UUID);
    assert_eq!(recovery.len(), 1, "{recovery:#?}");
    assert_eq!(recovery[0]["details"]["before"], "none");
    assert_eq!(recovery[0]["details"]["action"], "node_reboot");
    // And the RMA report lists it.
    let report = report_json(&state, "0");
    assert!(
        report["other"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "recovery_action" && r["details"]["action"] == "node_reboot"),
        "{report:#}"
    );
    let health = wait_for_kind(&state, "health", GPU0_UUID);
    assert_ne!(health.last().unwrap()["details"]["to"], "ok", "{health:#?}");
    // GPU 1 falls off the bus, and comes back.
    d.set_scenario(&edit_device(&changed, 1, |dev| format!("{dev}    lost: true\n")));
    let uuid1 = "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000001";
    wait_for_kind(&state, "lost", uuid1);
    d.set_scenario(&changed);
    wait_for_kind(&state, "back", uuid1);
    // Steady now: no more rows of those kinds (the writer writes changes, not states).
    std::thread::sleep(Duration::from_millis(2500));
    for kind in [
        "ecc",
        "row_remap",
        "nvlink",
        "lost",
        "back",
        "inventory",
        "recovery_action",
    ] {
        let rows: Vec<_> = events_json(&state, &["--kind", kind, "--gpu", "0"])
            .as_array()
            .unwrap()
            .clone();
        // The reading at first sight and the change; one inventory row; GPU 0 was never lost.
        let expected = match kind {
            "ecc" | "row_remap" | "nvlink" => 2,
            "inventory" | "recovery_action" => 1,
            _ => 0,
        };
        assert_eq!(rows.len(), expected, "{kind}: {rows:#?}");
    }
}

#[test]
fn a_different_gpu_at_the_same_address_is_a_board_swap_and_the_old_serial_keeps_its_rows() {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    let state = d.state_path();
    wait_for_xid_rows(&state, 1);
    d.reboot();
    // The board in slot 0000:19:00.0 replaced: another UUID and serial.
    let swapped = edit_device(DEMO_SCENARIO, 0, |dev| {
        dev.replace(GPU0_UUID, "GPU-0b0a4d1e-1111-4d6b-9a0c-00000000beef")
            .replace(GPU0_SERIAL, "1653099999999")
    });
    d.set_scenario(&swapped);
    // Asked every 0.1 s through the restart, as a Slurm check would: the node went out of
    // service with the fatal XID and the new board must be validated before it may come
    // back, so no answer from the new daemon may read fit, not even its first snapshot's
    // (before the journal's writer has looked at it and recorded the swap).
    // The journal is slow to take it in (another process holds its write lock for 3 s, as
    // `sqlite3 state.db` left in a transaction would): what the first snapshots say, they
    // say without the journal's writer.
    let poll = VerdictPoll::start(d.socket_path());
    let lock = hold_write_lock(&state, Duration::from_secs(3));
    let d = d.restart(false, Some(""));
    let _ = lock.wait_with_output();
    // The journal tries its file again 30 s later. Meanwhile its writer found the swap from
    // the facts the start read (before, it looked with no facts and missed the swap for good),
    // and the new board is out of service.
    let (code, text) = d.health(false);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.starts_with("unhealthy: GPU 0 validating") && text.contains("(it replaced serial 1653024000000)"),
        "{text}"
    );
    let swap = wait_for_kind_within(
        &state,
        "board_swap",
        "GPU-0b0a4d1e-1111-4d6b-9a0c-00000000beef",
        Duration::from_secs(45),
    );
    assert_eq!(swap[0]["details"]["previous_serial"], GPU0_SERIAL);
    assert_eq!(swap[0]["serial"], "1653099999999");
    assert_eq!(swap[0]["pci_bus_id"], "0000:19:00.0");
    // GPU 0 is now the new board, with a clean history; the old one's XID keeps its serial.
    let new_rows = events_json(&state, &["--gpu", "0", "--kind", "xid"]);
    assert_eq!(new_rows.as_array().unwrap().len(), 0, "{new_rows:#}");
    let old_rows = xid_rows(&state);
    assert_eq!(old_rows.len(), 1);
    assert_eq!(old_rows[0]["serial"], GPU0_SERIAL);
    let report = report_json(&state, GPU0_UUID);
    assert_eq!(report["identity"]["serial"], GPU0_SERIAL);
    assert_eq!(report["xids"].as_array().unwrap().len(), 1);

    // The verdict says which board was replaced, and the old board's fatal XID (another boot's
    // and another board's) does not count; but the new board has not proved itself yet: it is
    // validating (the test has no CUDA, so its probe cannot run and it stays so).
    let gpu0_verdict = |d: &Daemon| -> Option<serde_json::Value> {
        let verdict: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).ok()?;
        verdict["gpus"]
            .as_array()?
            .iter()
            .find(|g| g["pci_bus_id"] == "0000:19:00.0")
            .cloned()
    };
    let finding = |gpu: &serde_json::Value, reason: &str| -> Option<serde_json::Value> {
        gpu["findings"]
            .as_array()?
            .iter()
            .find(|f| f["reason"] == reason)
            .cloned()
    };
    let replaced = |d: &Daemon| -> Option<String> {
        let gpu0 = gpu0_verdict(d)?;
        assert!(finding(&gpu0, "xid_fatal").is_none(), "{gpu0}");
        let notice = finding(&gpu0, "board_replaced")?;
        assert_eq!(notice["severity"], "notice");
        notice["message"].as_str().map(str::to_string)
    };
    let message = eventually("the notice", Duration::from_secs(10), || replaced(&d));
    assert!(
        message.contains(&format!("it replaced serial {GPU0_SERIAL} ({GPU0_UUID})")),
        "{message}"
    );
    let validating = |d: &Daemon| gpu0_verdict(d).and_then(|g| finding(&g, "validating"));
    let finding_now = eventually("validating", Duration::from_secs(10), || validating(&d));
    assert_eq!(finding_now["severity"], "unhealthy");
    let message = finding_now["message"].as_str().unwrap();
    assert!(
        message.contains("a new board in slot 0000:19:00.0 (it replaced serial 1653024000000)"),
        "{message}"
    );
    let m = d.scrape();
    assert_eq!(
        m.value("gpu_health_reason", &[gpu0(), ("reason", "board_replaced")]),
        Some(1.0)
    );
    assert_eq!(m.value("gpu_health", &[gpu0(), ("state", "unhealthy")]), Some(1.0));
    let (code, text) = d.health(false);
    assert_eq!(code, 1);
    assert!(text.starts_with("unhealthy: GPU 0 validating"), "{text}");
    assert!(
        text.contains("notice: GPU 0") && text.contains("board_replaced"),
        "{text}"
    );
    let rows = wait_for_kind(&state, "validation", "GPU-0b0a4d1e-1111-4d6b-9a0c-00000000beef");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["details"]["state"], "pending", "{rows:#?}");
    // Meant: the verdict is asked for half a second more after the row, still held.
    std::thread::sleep(Duration::from_millis(500));
    let asks = poll.finish();
    assert_held_throughout(&asks, true);
    assert_eq!(asks.last().map(|a| a.code), Some(1), "{asks:#?}");

    // A restart keeps both (from the journal): a restart does not let a board skip its probe.
    let d = d.restart(false, Some(""));
    eventually("the notice after a restart", Duration::from_secs(10), || replaced(&d));
    eventually("validating after a restart", Duration::from_secs(10), || validating(&d));
    // A clear of a validating GPU starts another validation: a clear alone never lets it back.
    let (code, text, _) = d.clear("0", "new board checked", &[]);
    assert_eq!(code, 0, "taken: its validation started, nothing else holds: {text}");
    assert!(text.contains("let go of board_replaced"), "{text}");
    assert!(
        text.contains("validating: GPU 0 stays out of service until a probe passes"),
        "{text}"
    );
    // The operator skips it: back in service, and the journal says who and why.
    let (code, text, _) = d.clear("0", "new board checked", &["--skip-validation"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("not validated: skipped by uid"), "{text}");
    assert_eq!(replaced(&d), None);
    assert_eq!(validating(&d), None);
    let skipped = eventually("the skipped row", Duration::from_secs(10), || {
        let rows = wait_for_kind(&state, "validation", "GPU-0b0a4d1e-1111-4d6b-9a0c-00000000beef");
        rows.into_iter().find(|r| r["details"]["state"] == "skipped")
    });
    assert!(
        skipped["summary"].as_str().unwrap().contains("new board checked"),
        "{skipped:#?}"
    );
}

/// Another process (Python's sqlite3) holding the journal's write lock for `hold`, from when
/// this returns.
fn hold_write_lock(state: &Path, hold: Duration) -> std::process::Child {
    let script = format!(
        "import sqlite3, sys, time\n\
         c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
         c.execute('BEGIN IMMEDIATE')\n\
         print('held', flush=True)\n\
         time.sleep({})\n\
         c.execute('ROLLBACK')\n",
        hold.as_secs_f64()
    );
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(state)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    let stdout = child.stdout.as_mut().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("read");
    assert_eq!(line.trim(), "held");
    child
}

#[test]
fn one_xid_seen_by_both_sources_is_one_row_with_both() {
    let d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    wait_for_kind(&state, "inventory", GPU0_UUID);
    d.set_scenario(&edit_device(DEMO_SCENARIO, 2, |dev| {
        format!("{dev}    xid_events: [48]\n")
    }));
    // The kernel's record of the same event: time since boot now, as the kernel stamps it.
    let uptime = uptime_seconds();
    d.log_kernel(&format!(
        "3,700,{},-;NVRM: Xid (PCI:0000:4c:00): 48, pid=1, name=x, DBE\n",
        (uptime * 1e6) as u64
    ));
    let uuid2 = "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000002";
    let row = eventually("the row with both sources", Duration::from_secs(10), || {
        let rows = wait_for_kind(&state, "xid", uuid2);
        (rows[0]["details"]["sources"].as_array().unwrap().len() == 2).then_some(rows)
    });
    assert_eq!(row.len(), 1, "{row:#?}");
    assert!(
        row[0]["details"]["raw"].as_str().unwrap().contains("0000:4c:00"),
        "{row:#?}"
    );
    assert_eq!(row[0]["details"]["kmsg_sequence"], 700);
}

#[test]
fn an_xid_storm_is_counted_whole_and_recorded_in_part() {
    let mut d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    wait_for_kind(&state, "inventory", GPU0_UUID);
    let lines: String = (0..25)
        .map(|i| {
            format!(
                "3,{},9000000,-;NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, storm\n",
                800 + i
            )
        })
        .collect();
    d.log_kernel(&lines);
    d.scrape_until("all 25 counted", |m| {
        m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "13")]) == Some(25.0)
    });
    wait_for_xid_rows(&state, 10);
    // Stopped (its directory kept): the storm's count is written at the stop.
    d.signal(15);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    assert_eq!(xid_rows(&state).len(), 10, "ten a minute one by one");
    let storm = events_json(&state, &["--kind", "xid_storm"]);
    assert_eq!(storm[0]["details"]["reports"], 15, "{storm:#}");
}

#[test]
fn probes_slowdowns_and_a_gpu_missing_from_the_bus_are_recorded() {
    // The PCI bus has a ninth NVIDIA GPU that NVML does not enumerate.
    let root = tempfile::tempdir().unwrap();
    let mut gpus: Vec<(&str, Option<&str>)> = DEMO_ADDRESSES.iter().map(|a| (*a, Some("nvidia"))).collect();
    gpus.push(("0000:ee:00.0", None));
    pci_fixture(root.path(), &gpus);
    let config = test_config(
        &sim_library(),
        &format!("amd:\n  sysfs_root: {}\n{FAST_PROBES}", root.path().display()),
    );
    let cuda = tempfile::tempdir().unwrap();
    let env = [("LD_LIBRARY_PATH", sim_cuda_dir(cuda.path(), true).display().to_string())];
    let mut d = Daemon::start_full(&with_cuda(DEMO_SCENARIO), &config, "", &env);
    let state = d.state_path();
    let probe = wait_for_kind(&state, "probe", GPU0_UUID);
    let tests = probe[0]["details"]["tests"].as_array().unwrap();
    assert!(!tests.is_empty(), "{probe:#?}");
    assert!(
        tests
            .iter()
            .all(|t| t.get("sustained").is_some() && t.get("expected").is_some()),
        "{tests:#?}"
    );
    let missing = eventually("a pci_missing row", Duration::from_secs(10), || {
        let rows = events_json(&state, &["--kind", "pci_missing"])
            .as_array()
            .unwrap()
            .clone();
        (!rows.is_empty()).then_some(rows)
    });
    assert_eq!(missing.len(), 1, "{missing:#?}");
    assert_eq!(missing[0]["pci_bus_id"], "0000:ee:00.0");
    // The demo's GPU 2 runs hot (thermal slowdown active): its episode is written at the stop.
    d.signal(15);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    let slowdowns = events_json(&state, &["--kind", "slowdown", "--gpu", "2"]);
    let reasons: Vec<&str> = slowdowns
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["details"]["reason"].as_str().unwrap())
        .collect();
    assert!(reasons.contains(&"hw_thermal_slowdown"), "{slowdowns:#}");
}

/// Runs `gpuwarden journal-worker` (what the daemon runs for every batch and read) with
/// `input` on stdin; its exit status and answer.
fn worker(input: &[u8]) -> (std::process::ExitStatus, serde_json::Value) {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .arg("journal-worker")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run the journal worker");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    let answer = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the answer is JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status, answer)
}

#[test]
fn the_journal_worker_answers_garbage_and_hostile_files_with_a_failure_never_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // Not JSON, the wrong shape, and nothing at all: a failure that says so.
    for input in [&b"\xff\xfe not json"[..], br#"{"request": "drop_table"}"#, b""] {
        let (status, answer) = worker(input);
        assert!(status.success());
        let message = answer["Err"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("unreadable request"), "{answer}");
    }
    // A garbage file at the path: moved aside by the open, a new file with the schema made.
    let state = dir.path().join("state.db");
    std::fs::write(&state, vec![b'x'; 8192]).unwrap();
    let open = serde_json::json!({"request": "open", "path": state, "boot_id": "b"}).to_string();
    let (_, answer) = worker(open.as_bytes());
    let opened = &answer["Ok"];
    assert_eq!(opened["answer"], "opened", "{answer}");
    assert!(
        opened["moved_aside"][1].as_str().unwrap().contains("state.db.corrupt-"),
        "{answer}"
    );
    assert_eq!(events_json(&state, &[]), serde_json::json!([]), "a new, empty journal");
    // A FIFO at the path: refused at once, not waited on.
    let fifo = dir.path().join("fifo.db");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let read =
        serde_json::json!({"request": "events", "path": fifo, "since": null, "gpu": null, "kinds": [], "limit": 10});
    let (_, answer) = worker(read.to_string().as_bytes());
    assert!(
        answer["Err"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not a regular file"),
        "{answer}"
    );
}

/// The storm of the trust round: 10,000 Xid 13 on GPU 0, one Xid 79 on GPU 2, 10,000 more
/// Xid 13. The fatal XID has its row, nothing is dropped, the counts are whole, and after a
/// restart with the line gone from the kernel log GPU 2 is still unhealthy.
#[test]
fn a_storm_never_costs_the_journal_a_fatal_xid_or_a_count() {
    let storm = |first: usize| -> String {
        (first..first + 10_000)
            .map(|i| format!("3,{i},9000000,-;NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, storm\n"))
            .collect()
    };
    let mut d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    wait_for_kind(&state, "inventory", GPU0_UUID);
    d.log_kernel(&format!(
        "{}3,20000,9000001,-;NVRM: Xid (PCI:0000:4c:00): 79, pid=1, name=x, GPU has fallen off the bus.\n{}",
        storm(0),
        storm(20_001)
    ));
    let gpu2_unhealthy = |m: &Metrics| m.value("gpu_health", &[("gpu", "2"), ("state", "unhealthy")]) == Some(1.0);
    let m = d.scrape_until("all 20,000 Xid 13 and the Xid 79 counted", |m| {
        m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "13")]) == Some(20_000.0) && gpu2_unhealthy(m)
    });
    let uuid2 = "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000002";
    let rows = eventually("the Xid 79 row", Duration::from_secs(15), || {
        let rows = xid_rows(&state);
        rows.iter().any(|r| r["details"]["xid"] == 79).then_some(rows)
    });
    let row = rows.iter().find(|r| r["details"]["xid"] == 79).unwrap();
    assert_eq!(row["gpu_uuid"], uuid2, "{row:#}");
    assert!(
        rows.iter().filter(|r| r["details"]["xid"] == 13).count() <= 20,
        "folded: {}",
        rows.len()
    );
    // What the storm still queued goes in the next batches (a second apart): none dropped.
    holds_for("nothing dropped", Duration::from_millis(1500), || {
        match d.scrape().value("gpuwarden_journal_dropped_total", &[]) {
            Some(0.0) => Ok(()),
            other => Err(format!("{other:?}\n{}", m.text)),
        }
    });
    // Stopped, and started again with the ring buffer empty: the counts come from the journal.
    d.signal(15);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    let d = d.restart(false, Some(""));
    let m = d.scrape_until("GPU 2 unhealthy after the restart", gpu2_unhealthy);
    assert_eq!(
        m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "13")]),
        Some(20_000.0)
    );
    let storm_rows = events_json(&state, &["--kind", "xid_storm"]);
    let folded: u64 = storm_rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["details"]["reports"].as_u64().unwrap())
        .sum();
    let single = xid_rows(&state).iter().filter(|r| r["details"]["xid"] == 13).count() as u64;
    assert_eq!(
        folded + single,
        20_000,
        "every report is a row or in a storm row's count"
    );
}

/// Pids of the daemon's journal workers running now.
fn journal_workers(daemon_pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let parent = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if parent == Some(daemon_pid) && String::from_utf8_lossy(&cmdline).contains("journal-worker") {
            found.push(pid);
        }
    }
    found
}

/// A journal worker stopped (SIGSTOP) while it writes, XIDs queued after it, then SIGTERM:
/// the daemon exits within its stop time, kills the stalled worker (none is left behind) and
/// writes the queued rows with a fresh one.
#[test]
fn sigterm_while_the_journal_worker_is_stopped_keeps_the_queued_rows_and_leaves_no_worker() {
    let mut d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    wait_for_kind(&state, "inventory", GPU0_UUID);
    let pid = d.child.id();
    // Catch a worker in flight: one runs for each batch (XIDs keep them coming).
    let mut stopped = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut sequence = 900;
    while stopped.is_none() {
        assert!(std::time::Instant::now() < deadline, "never caught a journal worker");
        sequence += 1;
        d.log_kernel(&format!(
            "3,{sequence},9000000,-;NVRM: Xid (PCI:0000:19:00): 31, pid=1, name=x, catch a worker\n"
        ));
        for _ in 0..200 {
            if let Some(worker) = journal_workers(pid).first() {
                let _ = Command::new("kill").args(["-STOP", &worker.to_string()]).status();
                stopped = Some(*worker);
                break;
            }
            // Meant: a worker lives a few milliseconds; looking every 2 ms catches one.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let stopped = stopped.unwrap();
    // Queued while the worker is stopped: a fatal XID on GPU 0 (after the records above).
    d.log_kernel("3,5000,9500000,-;NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=train, DBE (0x00000000)\n");
    d.scrape_until("Xid 48 counted", unhealthy);
    // Meant: a batch's second passes, so the Xid 48 row waits behind the stopped worker.
    std::thread::sleep(Duration::from_millis(1200));
    let started = std::time::Instant::now();
    d.signal(15);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    // The stalled worker was killed, not left behind under PID 1.
    eventually(&format!("worker {stopped} gone"), Duration::from_secs(5), || {
        let status = std::fs::read_to_string(format!("/proc/{stopped}/status")).unwrap_or_default();
        (status.is_empty() || status.contains("State:\tZ")).then_some(())
    });
    let rows = xid_rows(&state);
    assert!(
        rows.iter().any(|r| r["details"]["xid"] == 48),
        "{rows:#?}\n{}",
        d.log_text()
    );
    assert!(
        !d.log_text().contains("could not be written before the stop"),
        "{}",
        d.log_text()
    );
}

/// Two daemons on one state.path: the second is refused at start with who holds the file
/// (exit 69), and writes nothing: every row stays single.
#[test]
fn a_second_daemon_on_the_same_journal_is_refused_and_writes_nothing() {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    let state = d.state_path();
    wait_for_xid_rows(&state, 1);
    // The same config but another port and socket, so only the journal is shared.
    let config = std::fs::read_to_string(d.dir.path().join("config.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // (Its port is 127.0.0.1:0, as every test daemon's.)
    let config = config.replace(
        &d.socket_path().display().to_string(),
        &dir.path().join("second.sock").display().to_string(),
    );
    std::fs::write(dir.path().join("config.yaml"), &config).unwrap();
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(["run", "--config"])
        .arg(dir.path().join("config.yaml"))
        .env("GPUWARDEN_SIM_NVML_SCENARIO", d.dir.path().join("scenario.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("is in use by another gpuwarden"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", d.child.id())), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(15));
    // Had the second written anything, it would show within a batch (a second).
    holds_for("the first daemon's rows alone", Duration::from_millis(1500), || {
        let (xids, started_rows) = (xid_rows(&state).len(), events_json(&state, &["--kind", "daemon"]));
        match started_rows.as_array().map(Vec::len) {
            Some(1) if xids == 1 => Ok(()),
            _ => Err(format!("{xids} XID rows; daemon rows {started_rows:#}")),
        }
    });
}

/// The journal deleted while the daemon runs: noticed, warned about, and filled again with
/// the GPUs' identities and this boot's counts, so a restart still finds the fatal XID.
#[test]
fn a_journal_deleted_while_running_is_refilled_and_a_restart_still_knows_the_fatal_xid() {
    journal_lost_while_running(true);
}

/// The same with the file emptied in place (`: > state.db`).
#[test]
fn a_journal_emptied_while_running_is_refilled_and_a_restart_still_knows_the_fatal_xid() {
    journal_lost_while_running(false);
}

fn journal_lost_while_running(delete: bool) {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    let state = d.state_path();
    wait_for_xid_rows(&state, 1);
    for suffix in ["", "-wal", "-shm"] {
        let file = format!("{}{suffix}", state.display());
        if delete || !suffix.is_empty() {
            let _ = std::fs::remove_file(&file);
        } else {
            std::fs::write(&file, "").unwrap();
        }
    }
    // A change gives the writer a batch to write into the new file.
    d.log_kernel("3,502,6000000,-;NVRM: Xid (PCI:0000:5d:00): 31, pid=1, name=x, MMU Fault\n");
    eventually("the warning", Duration::from_secs(10), || {
        d.log_text().contains("was deleted, emptied or replaced").then_some(())
    });
    // Restarted with the ring buffer empty: the refilled file holds the count.
    let d = d.restart(false, Some(""));
    let m = d.scrape_until("GPU 0 unhealthy after the restart", unhealthy);
    assert_eq!(m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "48")]), Some(1.0));
    let report = report_json(&state, "0");
    assert_eq!(report["identity"]["serial"], GPU0_SERIAL, "{report:#}");
}

/// A journal emptied while the daemon runs (root only) is filled again with what a restart's
/// seed needs beyond identities and counts (issue #51, item 5): GPU 0's clear of its fatal XID
/// and the validation it started stay, so after the restart it is still `validating`, not
/// `xid_fatal` again and not back in service unvalidated.
#[test]
fn an_emptied_journal_keeps_the_clear_and_the_validation_across_a_restart() {
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), ""), FATAL_XID);
    let state = d.state_path();
    d.scrape_until("Xid 48 makes GPU 0 unhealthy", unhealthy);
    let (_, out, err) = d.clear("0", "replaced the HBM stack, INC-7", &[]);
    assert!(out.contains("validating"), "{out}{err}");
    wait_for_xid_rows(&state, 1);
    wait_for_kind(&state, "clear", GPU0_UUID);
    wait_for_kind(&state, "validation", GPU0_UUID);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", state.display()));
    }
    std::fs::write(&state, "").unwrap();
    d.log_kernel("3,502,6000000,-;NVRM: Xid (PCI:0000:5d:00): 31, pid=1, name=x, MMU Fault\n");
    eventually("the warning", Duration::from_secs(10), || {
        d.log_text().contains("was deleted, emptied or replaced").then_some(())
    });
    // The refilled file holds them again before the restart reads it.
    wait_for_kind(&state, "clear", GPU0_UUID);
    wait_for_kind(&state, "validation", GPU0_UUID);
    let d = d.restart(false, Some(""));
    d.scrape_until("the first poll after the restart", |m| {
        m.value("gpu_up", &[gpu0()]) == Some(1.0)
    });
    let v: serde_json::Value = serde_json::from_slice(&d.get("/api/v1/health", &[]).body).unwrap();
    let gpu = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["index"] == 0)
        .unwrap()
        .clone();
    let reasons: Vec<&str> = gpu["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "unhealthy")
        .map(|f| f["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["validating"], "{gpu:#}");
}

/// A retention shorter than the uptime: the pruning at a start deletes rows older than the
/// retention, but never this boot's XID counts, so the next restart keeps the fatal XID.
#[test]
fn a_retention_shorter_than_the_uptime_keeps_this_boots_counts() {
    let config = test_config(&sim_library(), "").replace("state:\n", "state:\n  retention: 1h\n");
    assert!(config.contains("retention: 1h"), "{config}");
    let mut d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &config, FATAL_XID);
    let state = d.state_path();
    d.scrape_until("Xid 48 makes GPU 0 unhealthy", unhealthy);
    // The count row (the XID's own row may already be pruned: the kernel dated it 5 s after
    // boot, and this machine may have been up for longer than the retention).
    let counted = || {
        rusqlite::Connection::open(&state)
            .and_then(|c| {
                c.query_row("SELECT count FROM xid_counts WHERE xid = 48", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .ok()
    };
    eventually("the count row", Duration::from_secs(10), || {
        (counted() == Some(1)).then_some(())
    });
    d.signal(15);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    // Two hours pass (the rows made older): this boot's count is past the retention.
    let conn = rusqlite::Connection::open(&state).unwrap();
    conn.execute_batch(
        "UPDATE xid_counts SET last_at = last_at - 7200; UPDATE events SET at = at - 7200;
         UPDATE boots SET first_seen = first_seen - 7200;",
    )
    .unwrap();
    drop(conn);
    // The restart's first batch prunes; the one after must still find the count.
    let d = d.restart(false, Some(""));
    d.scrape_until("GPU 0 unhealthy after the first restart", unhealthy);
    // Meant: the restart's first batch (it prunes) and a second more, as a day would have.
    std::thread::sleep(Duration::from_millis(2500));
    let d = d.restart(false, Some(""));
    let m = d.scrape_until("GPU 0 unhealthy after the second restart", unhealthy);
    assert_eq!(m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "48")]), Some(1.0));
    assert!(
        xid_rows(&state).is_empty(),
        "the old XID row itself is past the retention"
    );
}

/// 5,000 distinct codes on GPU 0: 64 series and one `other`, the values add up, the fatal
/// one after them keeps a count of its own and makes the GPU unhealthy, and the journal
/// stays small.
#[test]
fn thousands_of_distinct_codes_stay_bounded_in_series_and_in_the_journal() {
    let d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    wait_for_kind(&state, "inventory", GPU0_UUID);
    let lines: String = (0..5000u32)
        .map(|i| {
            format!(
                "3,{},9000000,-;NVRM: Xid (PCI:0000:19:00): {}, pid=1, name=x, many codes\n",
                2000 + i,
                10_000 + i
            )
        })
        .collect();
    d.log_kernel(&format!(
        "{lines}3,7001,9000001,-;NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, y\n"
    ));
    let m = d.scrape_until("all 5,001 counted", |m| {
        let total: f64 = m.find("gpu_xid_errors_total", &[gpu0()]).iter().map(|s| s.value).sum();
        total == 5001.0
    });
    // 64 codes, `other` for the rest, and the fatal 79 with a count of its own.
    let series = m.find("gpu_xid_errors_total", &[gpu0()]);
    assert_eq!(series.len(), 66, "{}", series.len());
    let other = series
        .iter()
        .find(|s| s.labels["xid"] == "other")
        .expect("an other series");
    assert_eq!(other.value, 5000.0 - 64.0);
    assert_eq!(m.value("gpu_xid_errors_total", &[gpu0(), ("xid", "79")]), Some(1.0));
    assert!(unhealthy(&m));
    eventually("the Xid 79 row", Duration::from_secs(15), || {
        xid_rows(&state).iter().any(|r| r["details"]["xid"] == 79).then_some(())
    });
    // The size is published after each batch.
    let m = d.scrape_until("the journal's size", |m| {
        m.value("gpuwarden_journal_size_bytes", &[]).is_some_and(|b| b > 0.0)
    });
    let reported = m.value("gpuwarden_journal_size_bytes", &[]).unwrap();
    let size = std::fs::metadata(&state).unwrap().len();
    assert!(size < 2 * 1024 * 1024, "journal {size} bytes");
    assert!(reported <= size as f64, "{reported} vs {size}");
}

/// A batch written again (its worker committed, then answered after its time-out and the
/// writer tried again): recognised by its id and not written twice.
#[test]
fn a_batch_written_twice_is_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let event = |xid: u32| {
        serde_json::json!({"Insert": {"event": {
            "at": 1000.0, "kind": "xid", "gpu": null, "summary": format!("Xid {xid}"),
            "details": {"xid": xid}
        }, "group": xid}})
    };
    let batch = |id: &str| {
        serde_json::json!({
            "request": "write", "id": id, "path": state, "boot_id": "b", "host": "h",
            "items": [event(13), event(31), event(43)], "facts": [], "counts": [],
            "kmsg_sequence": null, "prune": null
        })
        .to_string()
    };
    let (status, first) = worker(batch("run-1:7").as_bytes());
    assert!(status.success(), "{first}");
    assert_eq!(first["Ok"]["rows"], 3, "{first}");
    let (_, again) = worker(batch("run-1:7").as_bytes());
    assert_eq!(again["Ok"]["rows"], 0, "{again}");
    assert_eq!(again["Ok"]["repeated"], true, "{again}");
    let (_, next) = worker(batch("run-1:8").as_bytes());
    assert_eq!(next["Ok"]["rows"], 3, "another batch is written: {next}");
    assert_eq!(xid_rows(&state).len(), 6);
}

/// `/api/v1/events` answers in pages of at most 5,000 rows with a `Link` to the next (older)
/// one: a limit of 100,000 is refused, and following the links reads every row once.
#[test]
fn the_events_api_answers_in_bounded_pages() {
    let d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    wait_for_kind(&state, "inventory", GPU0_UUID);
    let conn = rusqlite::Connection::open(&state).unwrap();
    conn.execute_batch("BEGIN").unwrap();
    for i in 0..12_000 {
        conn.execute(
            "INSERT INTO events (at, boot_id, host, kind, summary, details) VALUES (?1, 'b', 'h', 'daemon', ?2, '{}')",
            rusqlite::params![1_000_000.0 + f64::from(i % 3000), format!("row {i}")],
        )
        .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    assert_eq!(d.get("/api/v1/events?limit=100000", &[]).status, 400);
    let mut path = "/api/v1/events?limit=5000&kind=daemon".to_string();
    let mut seen = std::collections::BTreeSet::new();
    let mut pages = 0;
    loop {
        let response = d.get(&path, &[]);
        assert_eq!(response.status, 200, "{}", response.text());
        let body: serde_json::Value = serde_json::from_str(&response.text()).unwrap();
        let rows = body["events"].as_array().unwrap();
        assert!(rows.len() <= 5000);
        for row in rows {
            assert!(seen.insert(row["id"].as_i64().unwrap()), "a row twice: {row}");
        }
        pages += 1;
        let Some(link) = response.headers.get("link").cloned() else {
            break;
        };
        let next = link.trim_start_matches('<').split('>').next().unwrap().to_string();
        assert!(next.contains("before="), "{link}");
        path = next;
        assert!(pages < 10, "too many pages");
    }
    let rows: i64 = rusqlite::Connection::open(&state)
        .unwrap()
        .query_row("SELECT count(*) FROM events WHERE kind = 'daemon'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(seen.len() as i64, rows);
    assert!(pages >= 3);
}

/// What a GPU already had when it was first seen is evidence too: the demo's GPU 5 comes with
/// an uncorrectable ECC error and GPU 6 with a pending row remap. The report shows both (it
/// said "None recorded" beside a verdict that named them), and each start records the
/// counters again.
#[test]
fn the_report_shows_what_a_gpu_had_when_first_seen_and_at_each_start() {
    let d = Daemon::start(DEMO_SCENARIO);
    let state = d.state_path();
    let uuid = |i: u32| format!("GPU-5f2c7a1e-0000-4d6b-9a0c-00000000000{i}");
    wait_for_kind(&state, "inventory", &uuid(6));
    let memory = |gpu: &str| {
        eventually("memory rows", Duration::from_secs(10), || {
            let report = report_json(&state, gpu);
            let rows = report["memory"].as_array().cloned().unwrap_or_default();
            (!rows.is_empty()).then_some(rows)
        })
    };
    let gpu5 = memory("5");
    assert!(
        gpu5.iter()
            .any(|r| r["kind"] == "ecc" && r["details"]["uncorrectable"] == 1),
        "{gpu5:#?}"
    );
    let gpu6 = memory("6");
    assert!(
        gpu6.iter()
            .any(|r| r["kind"] == "row_remap" && r["details"]["pending"] == true),
        "{gpu6:#?}"
    );
    let markdown = report_markdown(&state, "5");
    assert!(
        markdown.contains("uncorrectable ECC errors (aggregate) 1 at first sight"),
        "{markdown}"
    );
    // Restarted: the counters are read into the journal again.
    let d = d.restart(false, None);
    d.scrape_until("the first poll after the restart", |m| {
        m.value("gpu_up", &[gpu0()]) == Some(1.0)
    });
    eventually("the readings at start", Duration::from_secs(10), || {
        let rows = events_json(&state, &["--kind", "ecc", "--gpu", "5"]);
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["details"]["reading"] == "at start")
            .then_some(())
    });
}

/// `gpuwarden events` for a person: the baselines (each counter's reading at first sight) are
/// left out unless `--all`, each GPU is named by index and bus id as every other command names
/// it, and `--help` lists every kind the parser takes, the ones docs/health.md sends users to
/// among them.
/// A file the daemon has made but not yet given its tables (what `events` read in the first
/// moments of a loaded start): a clear "not yet", not SQLite's "no such table: events".
#[test]
fn events_on_a_journal_without_its_tables_yet_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    std::fs::write(&state, "").unwrap();
    for command in [&["events"][..], &["report", "--gpu", "0"]] {
        let out = Command::new(BIN)
            .args(command)
            .arg("--state")
            .arg(&state)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(stderr.contains("holds no journal yet"), "{command:?}: {stderr}");
        assert!(!stderr.contains("no such table"), "{stderr}");
    }
}

#[test]
fn events_leave_out_baselines_name_gpus_by_index_and_list_every_kind() {
    let d = Daemon::start(DEMO_SCENARIO);
    // Read once the daemon has made it (a loaded machine's start may take a moment).
    d.scrape_until("journal up", |m| journal_up(m) == Some(1.0));
    d.log_kernel("NVRM: Xid (PCI:0000:bb:00): 48, pid=1, name=x, DBE\n");
    let state = d.state_path();
    let events = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("events")
            .args(args)
            .arg("--state")
            .arg(&state)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = until_ok(
        "the Xid 48 row, and the baselines under --all only",
        Duration::from_secs(15),
        || {
            let shown = events(&[]);
            match shown.contains("Xid 48")
                && !shown.contains("at first sight")
                && events(&["--all"]).contains("at first sight")
            {
                true => Ok(shown),
                false => Err(shown),
            }
        },
    );
    let all = events(&["--all"]);
    assert!(all.lines().count() > shown.lines().count(), "{all}\n---\n{shown}");
    assert!(!shown.contains("at first sight"), "{shown}");
    let xid = shown.lines().find(|l| l.contains("Xid 48")).unwrap();
    assert!(xid.contains("  GPU 5 0000:bb:00.0 "), "{xid}");
    assert!(!shown.contains("GPU-5f2c7a1e"), "UUIDs only in --json: {shown}");
    // --json keeps the UUID for tools.
    let json: serde_json::Value = serde_json::from_str(&events(&["--json", "--kind", "xid"])).unwrap();
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .any(|r| r["gpu_uuid"] == "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000005")
    );
    // Every kind is in --help, from the parser's own list.
    let help = Command::new(BIN).args(["events", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for kind in [
        "xid",
        "xid_storm",
        "health",
        "probe",
        "ecc",
        "row_remap",
        "recovery_action",
        "nvlink",
        "pcie",
        "slowdown",
        "lost",
        "back",
        "pci_missing",
        "persistence",
        "inventory",
        "board_swap",
        "clear",
        "daemon",
        "nic",
        "sxid",
        "validation",
        "remediation",
    ] {
        assert!(help.contains(&format!("- {kind}:")), "--help lacks {kind}:\n{help}");
        assert!(events(&["--kind", kind, "--limit", "1"]).lines().count() <= 1);
    }
}

/// The report tells the repair: the advised step under "Advice, clears and validations" (not
/// "Other"), the clear and the validation it started, a validation probe that could not run
/// (no CUDA here) under the probes, and in the Markdown when and on which host it was made.
/// Failed on 2026-11-28: the step sat under "Other", "## Remediation" said "None recorded",
/// the probes that could not run were missing, and the Markdown had no time.
#[test]
fn the_report_tells_the_advice_the_clear_and_a_validation_that_could_not_run() {
    let d = Daemon::start(DEMO_SCENARIO);
    reload(&d, |c| format!("{c}remediation:\n  mode: advise\n"));
    d.log_kernel("NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x, GPU has fallen off the bus.\n");
    eventually("GPU 0 unhealthy", Duration::from_secs(15), || {
        (d.health(false).0 == 1).then_some(())
    });
    let (code, out, err) = d.clear("0", "reseated", &[]);
    assert!(out.contains("validating"), "{code} {out} {err}");
    let report = eventually("the validation that could not run", Duration::from_secs(30), || {
        let text = report_markdown(&d.state_path(), "0");
        text.contains("probe could not run").then_some(text)
    });
    let section =
        |title: &str| report_section(&report, title).unwrap_or_else(|| panic!("no section {title}: {report}"));
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(
        report.contains(&format!(" on host {} by gpuwarden ", hostname.trim())) && report.contains("\nGenerated 20"),
        "{report}"
    );
    let advice = section("Advice, clears and validations");
    assert!(advice.contains("next step advised: reboot_required"), "{advice}");
    assert!(advice.contains("cleared by uid"), "{advice}");
    assert!(advice.contains("validation pending after a clear"), "{advice}");
    assert!(!section("Other").contains("next step advised"), "{report}");
    let probes = section("Probes (and probes that could not run)");
    assert!(probes.contains("probe could not run: "), "{probes}");
    assert!(probes.contains("attempt(s) in a row"), "{probes}");
    assert!(
        section("Remediation run (resets, reboot marks)").starts_with("\nNone run"),
        "{report}"
    );
}
