//! The journal's rows off the node (docs/journal.md, "Events out"): a webhook sink gets every
//! row as a signed CloudEvent, in order, at least once, through a receiver that is down, a
//! daemon restart mid-backlog, and receivers that refuse one event, redirect, answer 10 MB or
//! never answer; each costs its own sink's delivery and nothing else. Every event is counted
//! against the journal's own rows, and a GPU's event names the job on the GPU then.

use crate::common::*;
use std::time::Duration;

const FATAL_XID: &str = "3,501,5000000,-;NVRM: Xid (PCI:0000:19:00): 48, pid=1, name=train, DBE (0x00000000)\n";

/// The journal's row ids, oldest first; `None` while the daemon has not made its journal yet
/// (the file or its table is not there: a loaded machine starts it late).
fn journal_ids(d: &Daemon) -> Option<Vec<i64>> {
    let conn =
        rusqlite::Connection::open_with_flags(d.state_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    let mut statement = conn.prepare("SELECT id FROM events ORDER BY id").ok()?;
    statement
        .query_map([], |r| r.get(0))
        .ok()?
        .collect::<rusqlite::Result<Vec<i64>>>()
        .ok()
}

/// The row id an event carries (`ROWID-MICROS`).
fn row_id(event: &serde_json::Value) -> i64 {
    event["id"]
        .as_str()
        .and_then(|id| id.split('-').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

fn sink(name: &str, url: &str, extra: &str) -> String {
    format!(
        "    - name: {name}\n      start: beginning\n      webhook:\n        url: \"{url}\"\n        timeout: 1s\n{extra}"
    )
}

fn lag_rows(m: &Metrics, sink: &str) -> Option<f64> {
    m.value("gpuwarden_sink_lag_rows", &[("sink", sink)])
}

fn counter(m: &Metrics, name: &str, sink: &str) -> f64 {
    m.value(name, &[("sink", sink)]).unwrap_or(0.0)
}

/// Waits until the receiver holds an event for every journal row, and says what it got.
fn until_all_taken(d: &Daemon, receiver: &Receiver, what: &str) -> Vec<i64> {
    eventually(what, Duration::from_secs(60), || {
        let want = journal_ids(d)?;
        let got: Vec<i64> = receiver.events().iter().map(row_id).collect();
        want.iter().all(|id| got.contains(id)).then_some(got)
    })
}

/// While a sink backs off (8 s and more between tries), its lag is the journal's truth every
/// second: the rows written meanwhile are counted, and the oldest row's age grows, so
/// GpuwardenSinkLagging sees a sink that is down when it is down.
#[test]
fn a_sinks_lag_is_the_journals_truth_while_it_backs_off() {
    let port = free_port();
    let events = format!(
        "events:\n  sinks:\n{}",
        sink("ops", &format!("http://127.0.0.1:{port}/in"), "")
    );
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), &events), FATAL_XID);
    d.scrape_until_within(
        "the fourth failure (the next try 8 s away)",
        Duration::from_secs(30),
        |m| counter(m, "gpuwarden_sink_failed_total", "ops") >= 4.0,
    );
    let before = journal_ids(&d).expect("the journal").len();
    d.log_kernel(
        "NVRM: Xid (PCI:0000:19:00): 13, pid=2, name=x, one\n\
         NVRM: Xid (PCI:0000:3b:00): 31, pid=2, name=x, two\n\
         NVRM: Xid (PCI:0000:4c:00): 43, pid=2, name=x, three\n",
    );
    let rows = eventually("the three rows written", Duration::from_secs(5), || {
        let ids = journal_ids(&d)?;
        (ids.len() >= before + 3).then_some(ids.len())
    });
    let m = d.scrape_until_within(
        "the lag counting them before the next try",
        Duration::from_secs(3),
        |m| lag_rows(m, "ops") == Some(rows as f64),
    );
    let failed = counter(&m, "gpuwarden_sink_failed_total", "ops");
    let age = m.value("gpuwarden_sink_lag_seconds", &[("sink", "ops")]).unwrap();
    d.scrape_until_within("the oldest row's age growing", Duration::from_secs(4), |m| {
        m.value("gpuwarden_sink_lag_seconds", &[("sink", "ops")]).unwrap_or(0.0) >= age + 2.0
    });
    assert_eq!(
        counter(&d.scrape(), "gpuwarden_sink_failed_total", "ops"),
        failed,
        "all of it while the sink waited, not at a try"
    );
}

/// The sink is down at first (nothing listens), then answers: every row arrives once, in
/// order, signed with the secret; the receiver refuses, then restarts (hangs up), and the
/// daemon restarts, mid-backlog: afterwards nothing is lost and what was acknowledged is not
/// sent again.
#[test]
fn a_sink_down_then_up_and_a_restart_mid_backlog_lose_nothing() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("webhook.key");
    std::fs::write(&secret, "s3cret-key\n").unwrap();
    // Batch job 4242 runs on GPU 0 (bus 19, where the fatal XID comes).
    std::fs::create_dir_all(dir.path().join("jobs")).unwrap();
    std::fs::write(dir.path().join("jobs/0"), "4242\n").unwrap();
    let events = format!(
        "hpc_jobs:\n  mapping_dir: \"{}\"\nevents:\n  sinks:\n{}",
        dir.path().join("jobs").display(),
        sink(
            "ops",
            &format!("http://127.0.0.1:{port}/in"),
            &format!("        secret_file: \"{}\"\n", secret.display())
        )
    );
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), &events), FATAL_XID);
    d.scrape_until("failures while nothing listens", |m| {
        counter(m, "gpuwarden_sink_failed_total", "ops") >= 1.0 && lag_rows(m, "ops").is_some_and(|n| n > 0.0)
    });
    let receiver = Receiver::start(port, Answer::Take);
    let got = until_all_taken(&d, &receiver, "every row after the receiver came up");
    let mut sorted = got.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(got, sorted, "in order, each once");
    let first = &receiver.all()[0];
    let event = first.json();
    assert_eq!(event["specversion"], "1.0");
    assert!(event["type"].as_str().unwrap().starts_with("io.gpuwarden."), "{event}");
    assert_eq!(first.header("content-type"), Some("application/cloudevents+json"));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"s3cret-key");
    let signature = first.header("x-gpuwarden-signature-256").unwrap();
    let hex = signature.strip_prefix("sha256=").unwrap();
    let tag: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    assert!(
        ring::hmac::verify(&key, &first.body, &tag).is_ok(),
        "the signature is the body's"
    );
    let xid = receiver
        .events()
        .into_iter()
        .find(|e| e["type"] == "io.gpuwarden.xid")
        .expect("the fatal XID's row");
    assert_eq!(xid["data"]["gpu"]["pci_bus_id"], "0000:19:00.0", "{xid}");
    d.scrape_until("no lag", |m| lag_rows(m, "ops") == Some(0.0));

    // The receiver refuses from now on; a new XID and the daemon's restart rows wait.
    receiver.set(Answer::Refuse);
    d.scrape_until("job 4242 on GPU 0", |m| {
        gpu_jobs(m).contains(&("0".to_string(), "4242".to_string()))
    });
    let acknowledged = journal_ids(&d).expect("the journal, whose rows the sink took");
    d.log_kernel("3,502,6000000,-;NVRM: Xid (PCI:0000:19:00): 13, pid=2, name=x, test\n");
    d.scrape_until("a backlog", |m| lag_rows(m, "ops").is_some_and(|n| n > 0.0));
    // The receiver restarts: connections closed as they come, then the daemon restarts too.
    receiver.set(Answer::Hangup);
    let failed = counter(&d.scrape(), "gpuwarden_sink_failed_total", "ops");
    d.scrape_until("a hung-up delivery", |m| {
        counter(m, "gpuwarden_sink_failed_total", "ops") > failed
    });
    let d = d.restart(false, None);
    receiver.set(Answer::Take);
    until_all_taken(&d, &receiver, "the backlog after the restart");
    let taken: Vec<i64> = receiver
        .all()
        .iter()
        .filter(|r| r.json()["id"].is_string())
        .map(|r| row_id(&r.json()))
        .collect();
    // The job on the GPU when the row was written goes with the event, not on every series
    // (the Xid 13 came once the job mapping was read; the first XID, in the kernel log at the
    // start, came before it).
    let xid13 = receiver
        .events()
        .into_iter()
        .find(|e| e["data"]["details"]["xid"] == 13)
        .expect("the Xid 13's row");
    assert_eq!(
        xid13["data"]["details"]["on_gpu"]["jobs"],
        serde_json::json!(["4242"]),
        "{xid13}"
    );
    for id in &acknowledged {
        assert_eq!(
            taken.iter().filter(|t| *t == id).count(),
            1,
            "row {id} was acknowledged before the restart: its cursor kept it from going again"
        );
    }
}

/// Six sinks at once: one takes everything; one refuses a poison event (500 to the fatal
/// XID's) and holds back the rows after it, its lag growing; one redirects (not followed: the
/// target never hears of it); one answers 10 MB (read no further than 64 kB: delivered); one
/// never answers (its timeout); one cannot start (its secret file is missing) and shows it in
/// its failures and lag. The daemon serves and judges all along.
#[test]
fn a_poison_event_and_hostile_answers_cost_only_their_own_sink() {
    let good = Receiver::start(0, Answer::Take);
    let poison = Receiver::start(0, Answer::RefuseContaining("Xid 48".into()));
    let target = Receiver::start(0, Answer::Take);
    let redirect = Receiver::start(0, Answer::Redirect(target.url()));
    let huge = Receiver::start(0, Answer::Huge(10 << 20));
    let silent = Receiver::start(0, Answer::Silent);
    let events = format!(
        "events:\n  sinks:\n{}{}{}{}{}{}",
        sink("good", &good.url(), ""),
        sink("poison", &poison.url(), ""),
        sink("redirect", &redirect.url(), ""),
        sink("huge", &huge.url(), ""),
        sink("silent", &silent.url(), ""),
        // A secret file that is not there: the sink cannot start, and says so in its lag.
        sink("broken", &good.url(), "        secret_file: /nonexistent/webhook.key\n")
    );
    let d = Daemon::start_with(DEMO_SCENARIO, &test_config(&sim_library(), &events));
    until_all_taken(&d, &good, "the good sink before the XID");
    d.log_kernel(FATAL_XID);
    until_all_taken(&d, &good, "the good sink with the XID");
    until_all_taken(&d, &huge, "the sink that answers 10 MB");
    let m = d.scrape_until("the poison held and the silent sink timed out", |m| {
        counter(m, "gpuwarden_sink_failed_total", "poison") >= 2.0
            && lag_rows(m, "poison").is_some_and(|n| n >= 1.0)
            && counter(m, "gpuwarden_sink_failed_total", "silent") >= 1.0
            && counter(m, "gpuwarden_sink_failed_total", "redirect") >= 1.0
            && counter(m, "gpuwarden_sink_failed_total", "broken") >= 1.0
            && lag_rows(m, "broken").is_some_and(|n| n >= 1.0)
    });
    assert_eq!(counter(&m, "gpuwarden_sink_delivered_total", "broken"), 0.0);
    assert_eq!(counter(&m, "gpuwarden_sink_delivered_total", "silent"), 0.0);
    assert_eq!(counter(&m, "gpuwarden_sink_delivered_total", "redirect"), 0.0);
    assert!(target.all().is_empty(), "a redirect is not followed");
    // The poison sink got everything before the XID, and nothing after it went first.
    let xid_row = journal_ids(&d)
        .unwrap_or_default()
        .into_iter()
        .find(|id| {
            good.events()
                .iter()
                .any(|e| row_id(e) == *id && e["type"] == "io.gpuwarden.xid")
        })
        .unwrap();
    let poisoned: Vec<i64> = poison.events().iter().map(row_id).collect();
    assert!(poisoned.contains(&xid_row), "it was offered the poison event");
    assert!(
        poisoned.iter().all(|id| *id <= xid_row),
        "nothing after the poison went first: {poisoned:?}"
    );
    // The rest of the daemon did not wait for any of them.
    let (code, _) = d.health(false);
    assert!(code >= 0);
    assert_eq!(m.value("gpuwarden_journal_up", &[]), Some(1.0));
    assert!(
        d.log_text().contains("events: sink \"poison\" failed"),
        "said in the log"
    );
}

/// An OTLP sink: every row a log record of an `ExportLogsServiceRequest` (protobuf over HTTP,
/// a batch per request), through a collector that refuses for a while; the records' `event.id`
/// are the rows', each row there at least once, none missing.
#[test]
fn an_otlp_collector_gets_every_row_as_a_log_record() {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use prost::Message;
    let collector = Receiver::start(0, Answer::Refuse);
    let events = format!(
        "events:\n  sinks:\n    - name: collector\n      start: beginning\n      otlp:\n        url: \"http://127.0.0.1:{}/v1/logs\"\n        timeout: 1s\n",
        collector.port
    );
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), &events), FATAL_XID);
    d.scrape_until("a refused batch", |m| {
        counter(m, "gpuwarden_sink_failed_total", "collector") >= 1.0
    });
    collector.set(Answer::Take);
    let records = |collector: &Receiver| -> Vec<(i64, String, String)> {
        collector
            .all()
            .iter()
            .filter(|r| r.header("content-type") == Some("application/x-protobuf"))
            .filter_map(|r| ExportLogsServiceRequest::decode(r.body.as_slice()).ok())
            .flat_map(|request| request.resource_logs)
            .flat_map(|resource| resource.scope_logs)
            .flat_map(|scope| scope.log_records)
            .map(|record| {
                let id = record
                    .attributes
                    .iter()
                    .find(|a| a.key == "event.id")
                    .and_then(|a| a.value.as_ref())
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_default();
                let row: i64 = id
                    .split('"')
                    .nth(1)
                    .and_then(|s| s.split('-').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(-1);
                (row, record.event_name, record.severity_text)
            })
            .collect()
    };
    let got = eventually("every row as a record", Duration::from_secs(60), || {
        let want = journal_ids(&d)?;
        let got = records(&collector);
        want.iter().all(|id| got.iter().any(|(r, _, _)| r == id)).then_some(got)
    });
    let xid = got
        .iter()
        .find(|(_, name, _)| name == "io.gpuwarden.xid")
        .expect("the XID's record");
    assert_eq!(xid.2, "FATAL", "{xid:?}");
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "in order, each once: {got:?}");
    d.scrape_until("no lag", |m| lag_rows(m, "collector") == Some(0.0));
}

/// A sink the config cannot have is refused by `config check` with its place and what to
/// write: a scheme other than http(s), both kinds or neither, a misspelt key, a name twice.
#[test]
fn config_check_refuses_a_sink_it_cannot_deliver_to() {
    let dir = tempfile::tempdir().unwrap();
    for (sinks, says) in [
        (
            "    - name: a\n      webhook: {url: \"ftp://x/y\"}\n",
            "3:5: events.sinks \"a\": the url \"ftp://x/y\" must begin with http:// or https://",
        ),
        (
            "    - name: a\n      webhook: {url: \"http://x/y\"}\n      otlp: {url: \"http://x/v1/logs\"}\n",
            "give it one of `webhook:` (CloudEvents) or `otlp:` (OTLP logs)",
        ),
        ("    - name: a\n", "give it one of `webhook:`"),
        (
            "    - name: a\n      webhook: {url: \"http://x/y\", timeot: 5s}\n",
            "4:36: unknown field `timeot`",
        ),
        (
            "    - name: a\n      otlp: {url: \"http://x/v1/logs\"}\n    - name: a\n      otlp: {url: \"http://y/v1/logs\"}\n",
            "\"a\" is named twice",
        ),
        (
            "    - name: \"a b\"\n      otlp: {url: \"http://x/v1/logs\"}\n",
            "write 1 to 64 letters, digits, - or _",
        ),
    ] {
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, format!("events:\n  sinks:\n{sinks}")).unwrap();
        let out = std::process::Command::new(BIN)
            .args(["config", "check"])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{sinks}: {err}");
        assert!(err.contains(says), "{sinks}: {err}");
    }
}

/// The journal file deleted while the daemon runs: the writer starts a new one, and the sink
/// follows it (its connection to the old file let go), delivering the new file's rows, whose
/// event ids differ from the old ones' though their row ids begin again.
#[test]
fn a_sink_follows_a_journal_file_started_anew() {
    let receiver = Receiver::start(0, Answer::Take);
    let events = format!("events:\n  sinks:\n{}", sink("ops", &receiver.url(), ""));
    let d = Daemon::start_with_kernel_log(DEMO_SCENARIO, &test_config(&sim_library(), &events), FATAL_XID);
    // Every row's event id, as the journal holds them now.
    let event_ids = |d: &Daemon| -> Vec<String> {
        let conn = rusqlite::Connection::open_with_flags(d.state_path(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
        let Ok(conn) = conn else { return Vec::new() };
        let Ok(mut statement) = conn.prepare("SELECT id, at FROM events ORDER BY id") else {
            return Vec::new();
        };
        statement
            .query_map([], |r| {
                Ok(format!(
                    "{}-{}",
                    r.get::<_, i64>(0)?,
                    (r.get::<_, f64>(1)? * 1e6).round() as i64
                ))
            })
            .map(|rows| rows.filter_map(Result::ok).collect())
            .unwrap_or_default()
    };
    let taken = |want: &[String]| {
        let got: Vec<String> = receiver
            .events()
            .iter()
            .filter_map(|e| e["id"].as_str().map(String::from))
            .collect();
        !want.is_empty() && want.iter().all(|id| got.contains(id))
    };
    eventually("the first file's rows", Duration::from_secs(60), || {
        taken(&event_ids(&d)).then_some(())
    });
    let state = d.state_path();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", state.display()));
    }
    d.log_kernel("3,502,6000000,-;NVRM: Xid (PCI:0000:5d:00): 31, pid=1, name=x, MMU Fault\n");
    let first_file = receiver.events().len();
    eventually("the new file's rows", Duration::from_secs(60), || {
        let want = event_ids(&d);
        // The new file's row 1 is not the old file's: its event id differs.
        (want.first().is_some_and(|id| id.starts_with("1-")) && taken(&want)).then_some(())
    });
    assert!(receiver.events().len() > first_file);
}
