//! A real Prometheus (Debian's package) on loopback, scraping a test daemon.

use super::{RULES, eventually, http_get};
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A real Prometheus on loopback, killed when dropped.
pub struct Prometheus {
    child: Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scrapes `target` every second and evaluates the shipped rules every 250 ms; the energy
    /// group, which runs every minute over the last minute (a billing cadence), every second
    /// over the last second, and the energy-rate records over 5 s instead of 5 minutes, so
    /// their series appear within a test's time (their arithmetic is checked by promtool:
    /// deploy/prometheus/tests/energy.test.yml).
    pub fn start(target: &str) -> Prometheus {
        Prometheus::start_with(target, |rules| rules, None)
    }

    /// As [`Prometheus::start`], with the shipped rules changed by `rules` first (a shorter
    /// `for` where a test cannot wait minutes), and sending its alerts to `alertmanager`.
    pub fn start_with(target: &str, rules: impl FnOnce(String) -> String, alertmanager: Option<&str>) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let alerting = alertmanager
            .map(|am| format!("alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\"{am}\"]\n"))
            .unwrap_or_default();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 250ms\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: gpuwarden\n    static_configs:\n      - targets: [\"{target}\"]\n{alerting}",
            dir.path().join("rules.yml").display()
        );
        let shipped = std::fs::read_to_string(RULES)
            .unwrap()
            .replace("    interval: 1m\n", "    interval: 1s\n")
            .replace("offset 1m", "offset 1s")
            .replace(
                "gpu_energy_joules_total offset 5m, 0) / 300",
                "gpu_energy_joules_total offset 5s, 0) / 5",
            );
        std::fs::write(dir.path().join("rules.yml"), rules(shipped)).unwrap();
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus is needed for this test: apt-get install prometheus");
        Prometheus {
            child,
            addr: format!("127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    pub fn get_json(&self, path: &str) -> Option<serde_json::Value> {
        let stream_ok = std::net::TcpStream::connect(&self.addr).is_ok();
        if !stream_ok {
            return None;
        }
        let r = http_get(&self.addr, path, &[]);
        serde_json::from_slice(&r.body).ok()
    }

    /// Every firing alert as Prometheus' API gives it (labels, annotations).
    pub fn firing_alerts(&self) -> Vec<serde_json::Value> {
        let Some(v) = self.get_json("/api/v1/alerts") else {
            return Vec::new();
        };
        v["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["state"] == "firing")
            .cloned()
            .collect()
    }

    /// (alertname, gpu) of every firing alert.
    pub fn firing(&self) -> BTreeSet<(String, String)> {
        let Some(v) = self.get_json("/api/v1/alerts") else {
            return BTreeSet::new();
        };
        v["data"]["alerts"]
            .as_array()
            .map(|alerts| {
                alerts
                    .iter()
                    .filter(|a| a["state"] == "firing")
                    .map(|a| {
                        (
                            a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                            a["labels"]["gpu"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An instant query's series: (labels, value); empty when the query failed.
    pub fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let path = format!("/api/v1/query?query={}", url_encode(promql));
        let Some(v) = self.get_json(&path).filter(|v| v["status"] == "success") else {
            return Vec::new();
        };
        v["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let value = r["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN);
                (r["metric"].clone(), value)
            })
            .collect()
    }

    pub fn query_has_data(&self, promql: &str) -> bool {
        !self.query(promql).is_empty()
    }

    /// Waits until Prometheus has scraped the daemon (a new server takes a few seconds).
    pub fn wait_for_data(&self) {
        eventually("Prometheus to scrape the daemon", Duration::from_secs(60), || {
            self.query_has_data("gpu_up == 1").then_some(())
        });
    }

    /// Waits until Prometheus has scraped the daemon after this call and evaluated its rules
    /// over that scrape: what it then shows is the daemon's state as of now.
    pub fn wait_for_scrape_and_rules(&self) {
        let asked = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        eventually("a scrape after now", Duration::from_secs(30), || {
            // Not a failed or empty query, which `all` would take for a yes.
            let scraped = self.query("timestamp(gpu_up)");
            (!scraped.is_empty() && scraped.iter().all(|(_, at)| *at > asked)).then_some(())
        });
        // Meant: two of the rules' evaluations (250 ms apart, the config above) after it.
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `promtool check metrics` over an exposition: whether it passed, and what it said (its
/// findings go to stderr; empty when it has nothing to complain about).
pub fn promtool_check_metrics(body: &[u8]) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is needed for this test: apt-get install prometheus");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), body).expect("write to promtool");
    let out = child.wait_with_output().expect("promtool's output");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), report)
}

/// A real Alertmanager (Debian's prometheus-alertmanager) on loopback with the shipped
/// config, its receivers pointed at `webhook` and its waits shortened by `times`; killed when
/// dropped.
pub struct Alertmanager {
    child: Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Alertmanager {
    pub fn start(webhook: &str, times: impl FnOnce(String) -> String) -> Alertmanager {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let shipped = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/alertmanager/alertmanager.yml"
        ))
        .unwrap()
        .replace("http://alert-router.example.internal:9095", webhook);
        std::fs::write(dir.path().join("alertmanager.yml"), times(shipped)).unwrap();
        let child = Command::new("prometheus-alertmanager")
            .arg(format!(
                "--config.file={}",
                dir.path().join("alertmanager.yml").display()
            ))
            .arg(format!("--storage.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus-alertmanager is needed for this test: apt-get install prometheus-alertmanager");
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "Alertmanager did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Alertmanager { child, addr, _dir: dir }
    }
}
