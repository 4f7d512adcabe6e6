//! Test harness: the real gpuwarden binary over the simulated NVML library, real HTTP.
//!
//! `Daemon::start` writes a scenario file and a config into a temporary directory, starts
//! `gpuwarden run` on port 0 and reads the bound address from its log. `set_scenario`
//! rewrites the scenario by rename, so the simulated library never reads half a file.

#![allow(dead_code)] // each test file uses a different part of the harness

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_gpuwarden");

/// The shipped alert and recording rules.
pub const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/gpuwarden.rules.yml");

/// The demo's eight H200s, the richest scenario we ship.
pub const DEMO_SCENARIO: &str = include_str!("../../config/demo-scenario.yaml");

/// The simulated libnvidia-ml that cargo built as a dev-dependency of the daemon.
pub fn sim_library() -> PathBuf {
    let dir = Path::new(BIN).parent().expect("binary has a directory");
    for candidate in [
        dir.join("libgpuwarden_sim_nvml.so"),
        dir.join("deps/libgpuwarden_sim_nvml.so"),
    ] {
        if candidate.exists() {
            return candidate;
        }
    }
    panic!("libgpuwarden_sim_nvml.so not found next to {BIN}; run the tests with cargo test");
}

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

/// The simulated library built as an old driver (tests/sim-nvml-old): some symbols missing.
pub fn old_sim_library() -> PathBuf {
    sim_library().with_file_name("libgpuwarden_sim_nvml_old.so")
}

pub struct Daemon {
    pub child: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
    pub log: Arc<Mutex<Vec<String>>>,
}

/// Config for a test daemon: fast polls, the simulated library, loopback port 0, and a
/// kernel log of its own (`@KMSG@` becomes the file `kmsg` in the daemon's directory).
/// `extra` holds further top-level sections.
pub fn test_config(library: &Path, extra: &str) -> String {
    format!(
        "listen: 127.0.0.1:0\npoll:\n  interval: 200ms\n  timeout: 150ms\n  slow_interval: 200ms\nnvml:\n  library_path: {}\n  retry_initial: 200ms\n  retry_max: 1s\n\
         xid:\n  kernel_log_path: \"@KMSG@\"\n  dedup_window: 2s\n{extra}",
        library.display()
    )
}

impl Daemon {
    pub fn start(scenario: &str) -> Daemon {
        Daemon::start_with(scenario, &test_config(&sim_library(), ""))
    }

    pub fn start_with(scenario: &str, config: &str) -> Daemon {
        Daemon::start_with_kernel_log(scenario, config, "")
    }

    /// Starts with `kernel_log` already in the kernel log, as records logged before boot
    /// finished or before the daemon started.
    pub fn start_with_kernel_log(scenario: &str, config: &str, kernel_log: &str) -> Daemon {
        Daemon::start_full(scenario, config, kernel_log, &[])
    }

    /// The general form: also sets environment variables (NOTIFY_SOCKET, WATCHDOG_USEC, ...).
    pub fn start_full(scenario: &str, config: &str, kernel_log: &str, env: &[(&str, String)]) -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("scenario.yaml"), scenario).expect("write scenario");
        let kmsg = dir.path().join("kmsg");
        std::fs::write(&kmsg, kernel_log).expect("write kernel log");
        let config = config.replace("@KMSG@", &kmsg.display().to_string());
        std::fs::write(dir.path().join("config.yaml"), config).expect("write config");
        let mut child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(dir.path().join("config.yaml"))
            .env("GPUWARDEN_SIM_NVML_SCENARIO", dir.path().join("scenario.yaml"))
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpuwarden");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            if let Some(addr) = log.lock().unwrap().iter().find_map(|l| {
                l.split("serving metrics on ")
                    .nth(1)
                    .map(|rest| rest.trim_start_matches("https://").trim_start_matches("http://"))
                    .map(|rest| rest.split('/').next().unwrap_or("").to_string())
            }) {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "gpuwarden exited with {status} before serving; log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "gpuwarden did not start; log:\n{}",
                log.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Daemon { child, addr, dir, log }
    }

    /// Appends lines to the daemon's kernel log, as the kernel would.
    pub fn log_kernel(&self, lines: &str) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("kmsg"))
            .expect("open kmsg");
        f.write_all(lines.as_bytes()).expect("append kmsg");
    }

    /// Rewrites the scenario atomically; the simulated library picks it up on its next call.
    pub fn set_scenario(&self, scenario: &str) {
        let tmp = self.dir.path().join("scenario.yaml.tmp");
        std::fs::write(&tmp, scenario).expect("write scenario");
        std::fs::rename(&tmp, self.dir.path().join("scenario.yaml")).expect("rename scenario");
    }

    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        http_get(&self.addr, path, headers)
    }

    pub fn scrape(&self) -> Metrics {
        let response = self.get("/metrics", &[]);
        assert_eq!(response.status, 200, "{}", response.text());
        Metrics::parse(&response.text())
    }

    /// Scrapes until `check` holds, or fails after a few seconds with the last scrape.
    pub fn scrape_until(&self, what: &str, check: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let m = self.scrape();
            if check(&m) {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last scrape:\n{}",
                m.text
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn signal(&self, signal: i32) {
        unsafe { libc_kill(self.child.id() as i32, signal) };
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.yaml")
    }

    /// Sends SIGTERM and returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.signal(15);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, signal: i32) -> i32;
}

pub struct Response {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
}

/// A plain HTTP/1.1 GET over a fresh connection: no client library between the test and
/// what the daemon sends.
pub fn http_get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    Response { status, headers, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..line_end]).trim(), 16).expect("chunk size");
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// One sample of a scrape.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape (text format 0.0.4 or OpenMetrics), for asserting values by labels.
pub struct Metrics {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("sample line has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        Metrics {
            text: text.to_string(),
            samples,
        }
    }

    /// Samples of `name` whose labels include all of `labels`.
    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The one value of `name` with these labels; None when there is no such series.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found = self.find(name, labels);
        assert!(found.len() <= 1, "{name}{labels:?} matches {} series", found.len());
        found.first().map(|s| s.value)
    }

    pub fn has_family(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(if escaped == 'n' { '\n' } else { escaped });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}

/// Edits one device of a scenario: `edit(yaml_of_device_i)`. The scenario files are ours, so
/// a line-based edit keyed on the device's uuid is enough.
pub fn edit_device(scenario: &str, index: usize, edit: impl Fn(&str) -> String) -> String {
    let marker = format!("-00000000000{index}\n");
    let start = scenario.find(&marker).expect("device in scenario");
    let start = scenario[..start].rfind("  - name:").expect("device start");
    let end = scenario[start + 4..]
        .find("  - name:")
        .map(|e| e + start + 4)
        .unwrap_or(scenario.len());
    format!(
        "{}{}{}",
        &scenario[..start],
        edit(&scenario[start..end]),
        &scenario[end..]
    )
}

/// Replaces `key: old` with `key: new` on the first line that starts with the key.
pub fn set_line(device_yaml: &str, key: &str, new_value: &str) -> String {
    let prefix = format!("    {key}:");
    let mut out = String::new();
    let mut done = false;
    for line in device_yaml.lines() {
        if !done && line.starts_with(&prefix) {
            out.push_str(&format!("{prefix} {new_value}\n"));
            done = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(done, "no {key} in device");
    out
}

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
    /// Scrapes `target` every second and evaluates the shipped rules every 250 ms.
    pub fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 250ms\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: gpuwarden\n    static_configs:\n      - targets: [\"{target}\"]\n",
            RULES
        );
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

    pub fn query_has_data(&self, promql: &str) -> bool {
        let path = format!("/api/v1/query?query={}", url_encode(promql));
        self.get_json(&path)
            .is_some_and(|v| v["status"] == "success" && v["data"]["result"].as_array().is_some_and(|r| !r.is_empty()))
    }

    /// Waits until Prometheus has scraped the daemon (a new server takes a few seconds).
    pub fn wait_for_data(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.query_has_data("gpu_up == 1") {
            assert!(Instant::now() < deadline, "Prometheus never scraped the daemon");
            std::thread::sleep(Duration::from_millis(200));
        }
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

/// A directory holding the simulated CUDA driver (and, with `cublas`, cuBLAS) under the
/// names the probe looks for; put it on LD_LIBRARY_PATH.
pub fn sim_cuda_dir(parent: &Path, cublas: bool) -> PathBuf {
    let library = sim_library().with_file_name("libgpuwarden_sim_cuda.so");
    assert!(
        library.exists(),
        "{} not built; run the tests with cargo test",
        library.display()
    );
    let dir = parent.join(if cublas { "cuda-with-cublas" } else { "cuda-only" });
    std::fs::create_dir_all(&dir).expect("create the sim CUDA directory");
    let mut names = vec!["libcuda.so", "libcuda.so.1"];
    if cublas {
        names.extend(["libcublas.so", "libcublas.so.13"]);
    }
    for name in names {
        let link = dir.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink(&library, &link).expect("symlink the sim CUDA library");
        }
    }
    dir
}

/// Gives every device of a scenario simulated CUDA rates (an H200's, healthy).
pub fn with_cuda(scenario: &str) -> String {
    let rates = "    cuda: {gemm_bf16_tflops: 675, fma_fp32_tflops: 65, hbm_copy_gbps: 4300, pcie_h2d_gbps: 55, pcie_d2h_gbps: 55}\n";
    let mut out = String::new();
    let mut in_device = false;
    for line in scenario.lines() {
        if line.starts_with("  - ") && in_device {
            out.push_str(rates);
        }
        if line.starts_with("  - ") {
            in_device = true;
        }
        out.push_str(line);
        out.push('\n');
    }
    if in_device {
        out.push_str(rates);
    }
    out
}

/// A probe section for test daemons: scheduled every second, short tests, small buffers.
pub const FAST_PROBES: &str = "probe:\n  schedule: true\n  interval: 1s\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 20s\n  durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n";
