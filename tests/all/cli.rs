//! The command line: `check`, `config check`, and how `run` refuses bad input.

use crate::common;

use common::*;
use std::process::{Command, Output};

fn gpuwarden(args: &[&str], scenario: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env("RUST_LOG", "warn");
    if let Some(s) = scenario {
        cmd.env("GPUWARDEN_SIM_NVML_SCENARIO", s);
    }
    cmd.output().expect("run gpuwarden")
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn config_check_accepts_the_shipped_config() {
    let out = gpuwarden(
        &[
            "config",
            "check",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/gpuwarden.yaml"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).ends_with(": ok\n"));
}

#[test]
fn config_check_names_file_line_and_column_and_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        &dir,
        "bad.yaml",
        "listen: 127.0.0.1:9100\npoll:\n  interval: 1s\n  timeot: 1s\n",
    );
    let out = gpuwarden(&["config", "check", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with(&format!("{}:4:3: ", file.display())), "{stderr}");
    assert!(stderr.contains("timeot"), "{stderr}");
}

/// What the daemon would refuse or where others could interfere is said, with the fix: a
/// FIFO as the kernel log (the reader refuses it, issue #51 item 16) and a reboot marker in a
/// directory anyone can write (item 9). The config is still valid: exit 0.
#[test]
fn config_check_warns_of_a_fifo_kernel_log_and_a_world_writable_marker_directory() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kmsg.fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let file = write(
        &dir,
        "config.yaml",
        &format!(
            "xid:\n  kernel_log_path: {}\nremediation:\n  reboot_marker: {}/reboot-required\n",
            fifo.display(),
            open.display()
        ),
    );
    let out = gpuwarden(&["config", "check", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not a regular file or /dev/kmsg"), "{stderr}");
    assert!(stderr.contains("can be written by others than root"), "{stderr}");
}

#[test]
fn config_check_of_a_missing_file_says_so() {
    let out = gpuwarden(&["config", "check", "/nonexistent/gpuwarden.yaml"], None);
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the config file"));
}

#[test]
fn run_refuses_a_bad_config_with_ex_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "bad.yaml", "persistence:\n  enable: maybe\n");
    let out = gpuwarden(&["run", "--config", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{}:2:", file.display())), "{stderr}");
}

#[test]
fn a_taken_port_is_a_clear_start_up_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = write(&dir, "c.yaml", "nvml:\n  enabled: false\n");
    let out = gpuwarden(&["run", "--config", config.to_str().unwrap(), "--listen", &addr], None);
    // 69 (EX_UNAVAILABLE), which the unit's RestartPreventExitStatus names: no restart loop.
    assert_eq!(
        out.status.code(),
        Some(i32::from(gpuwarden::service::exit::Exit::UNAVAILABLE.code()))
    );
    let unit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/gpuwarden.service")).unwrap();
    assert!(unit.contains("RestartPreventExitStatus=69 78"), "{unit}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("cannot listen on {addr}")), "{stderr}");
    assert!(stderr.contains("config key `listen`"), "{stderr}");
    assert!(stderr.contains("trying again"), "{stderr}");
}

fn check_over_demo(json: bool) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(&dir, "s.yaml", DEMO_SCENARIO);
    let kmsg = write(&dir, "kmsg", "");
    let config = write(
        &dir,
        "c.yaml",
        &format!(
            "nvml:\n  library_path: {}\nxid:\n  kernel_log_path: {}\n",
            sim_library().display(),
            kmsg.display()
        ),
    );
    let mut args = vec!["check", "--config", config.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    gpuwarden(&args, Some(&scenario))
}

#[test]
fn check_prints_a_table_with_findings_and_exits_1() {
    let out = check_over_demo(false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "findings exist in the demo:\n{stdout}");
    let rows: Vec<&str> = stdout.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(rows.len(), 9, "header and 8 GPUs:\n{stdout}");
    assert!(
        rows[1].contains("NVIDIA H200") && rows[1].contains("0000:19:00.0") && rows[1].contains("34 C"),
        "{}",
        rows[1]
    );
    assert!(
        rows[4].contains("Gen5 x8") && rows[4].contains("degraded"),
        "{}",
        rows[4]
    );
    assert!(stdout.contains("PCIe link runs at x8 of x16"), "{stdout}");
    assert!(stdout.contains("clocks are slowed for temperature"), "{stdout}");
    assert!(stdout.contains("uncorrectable ECC"), "{stdout}");
    assert!(stdout.contains("row remap is pending"), "{stdout}");
    // check only looks: GPU 4's persistence mode is reported off, not turned on.
    assert!(
        stdout.contains("GPU 4") && stdout.contains("persistence mode is off"),
        "{stdout}"
    );
}

#[test]
fn check_json_carries_readings_health_and_findings() {
    let out = check_over_demo(true);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(report["backends"]["nvml"], true);
    let devices = report["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 8);
    let d1 = &devices[1];
    assert_eq!(d1["identity"]["uuid"], "GPU-5f2c7a1e-0000-4d6b-9a0c-000000000001");
    assert_eq!(d1["readings"]["temperatures"]["gpu"], 61.0);
    assert_eq!(d1["readings"]["power_watts"], 690.0);
    assert_eq!(d1["readings"]["clocks_hertz"]["sm"], 1.44e9);
    assert_eq!(d1["readings"]["pcie"]["width"], 16);
    assert_eq!(d1["readings"]["persistence_mode"], true);
    assert_eq!(d1["health"], "ok");
    let d3 = &devices[3];
    assert_eq!(d3["health"], "degraded");
    assert_eq!(d3["findings"][0]["reason"], "pcie_width_degraded");
}

#[test]
fn check_without_nvml_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "c.yaml",
        "nvml:\n  library_path: /nonexistent/libnvidia-ml.so.1\nxid:\n  read_kernel_log: false\n",
    );
    let out = gpuwarden(&["check", "--config", config.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NVML is not available"), "{stderr}");
    // It runs once: it must not promise to try again.
    assert!(!stderr.contains("trying again"), "{stderr}");
}

#[test]
fn check_on_a_healthy_node_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    // GPU 0 of the demo alone is healthy.
    let only_first = DEMO_SCENARIO
        .split("  - name:")
        .take(2)
        .collect::<Vec<_>>()
        .join("  - name:");
    let scenario = write(&dir, "s.yaml", &only_first);
    let config = write(
        &dir,
        "c.yaml",
        &format!(
            // The simulated GPU reports an NVSwitch fabric, and no fabric manager runs here.
            "nvml:\n  library_path: {}\nxid:\n  read_kernel_log: false\nfabric_manager:\n  check: false\n",
            sim_library().display()
        ),
    );
    let out = gpuwarden(&["check", "--config", config.to_str().unwrap()], Some(&scenario));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

/// Replays the config fuzzer's corpus on stable Rust: no panic, and every error names the file.
#[test]
fn the_config_fuzz_corpus_parses_without_panics() {
    // At least the three seeds.
    for text in fuzz_corpus("config", 3) {
        if let Err(e) = gpuwarden::config::Config::parse(&text, std::path::Path::new("fuzz.yaml")) {
            assert!(e.to_string().starts_with("fuzz.yaml"), "{e}");
        }
    }
}

/// `check --demo` and `run --demo` leave nothing behind in the temp directory.
#[test]
fn the_demo_removes_its_temporary_files() {
    let tmp = tempfile::tempdir().unwrap();
    let leftovers = || std::fs::read_dir(tmp.path()).unwrap().count();
    let out = Command::new(BIN)
        .args(["check", "--demo"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(leftovers(), 0, "check --demo left files");

    let mut run = Command::new(BIN)
        .args(["run", "--demo", "--listen", "127.0.0.1:0"])
        .env("TMPDIR", tmp.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The files exist while it runs: the simulated library reads the scenario.
    eventually(
        "run --demo to write its files",
        std::time::Duration::from_secs(10),
        || (leftovers() > 0).then_some(()),
    );
    // SIGTERM once it serves, so its handler is in place (a fixed 500 ms after the files was
    // not always enough on a loaded CI machine: the signal then killed it before it could
    // clean up). The journal's file in the demo's directory comes after the handler.
    let serving = || {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .any(|dir| dir.path().join("gpuwarden.sock").exists())
    };
    eventually(
        "run --demo to open its local API",
        std::time::Duration::from_secs(30),
        || serving().then_some(()),
    );
    // Meant: a moment past the socket's bind, as a person's Ctrl-C would come.
    std::thread::sleep(std::time::Duration::from_millis(200));
    // SAFETY: kill(2) on our own child.
    unsafe { kill(run.id() as i32, 15) };
    assert_eq!(run.wait().unwrap().code(), Some(0));
    assert_eq!(leftovers(), 0, "run --demo left files");
}

unsafe extern "C" {
    fn kill(pid: i32, signal: i32) -> i32;
}

#[test]
fn cargo_run_demo_works_from_a_fresh_clone_with_the_library_cargo_builds_as_a_dependency() {
    // `cargo run --release -- run --demo`: cargo builds the package's dependencies only, so
    // the simulated NVML library must be one (not only a workspace member) ...
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_default();
    assert!(
        dependencies.contains("gpuwarden-sim-nvml = { path = \"tests/sim-nvml\" }"),
        "{dependencies}"
    );
    // ... which cargo puts in target/release/deps, beside nothing else the demo needs.
    let target = tempfile::tempdir().unwrap();
    let binary = target.path().join("gpuwarden");
    std::fs::copy(BIN, &binary).unwrap();
    std::fs::create_dir(target.path().join("deps")).unwrap();
    std::fs::copy(sim_library(), target.path().join("deps/libgpuwarden_sim_nvml.so")).unwrap();
    let d = Daemon::spawn_program(&binary, &["run", "--demo", "--listen", "127.0.0.1:0"]);
    let m = d.scrape_until("the demo's eight GPUs", |m| m.find("gpu_up", &[]).len() == 8);
    assert_eq!(m.find("gpu_info", &[("name", "NVIDIA H200")]).len(), 8);
}

/// Every command that prints, with its output already closed (`| head -1` that has exited):
/// it ends quietly, never with a panic (exit 101, "failed printing to stdout").
#[test]
fn a_closed_output_ends_every_printing_command_quietly() {
    let d = Daemon::start(DEMO_SCENARIO);
    d.scrape_until("the first poll", |m| m.value("gpu_up", &[("gpu", "0")]) == Some(1.0));
    let dir = tempfile::tempdir().unwrap();
    let scenario = write(&dir, "s.yaml", DEMO_SCENARIO);
    let config = write(
        &dir,
        "c.yaml",
        &format!(
            "nvml:\n  library_path: {}\nstate:\n  path: \"\"\n",
            sim_library().display()
        ),
    );
    let kernel_log = write(
        &dir,
        "kmsg",
        &dmesg_stamped(&"NVRM: Xid (PCI:0000:19:00): 13, pid=1, name=x, y\n".repeat(2000)),
    );
    let state = d.state_path();
    let socket = d.socket_path();
    let (config, kernel_log, state, socket) = (
        config.display().to_string(),
        kernel_log.display().to_string(),
        state.display().to_string(),
        socket.display().to_string(),
    );
    let commands: Vec<Vec<&str>> = vec![
        vec!["check", "--json", "--config", &config],
        vec!["check", "--config", &config],
        vec!["xid", "explain", "79"],
        vec!["xid", "scan", &kernel_log],
        vec!["events", "--json", "--state", &state],
        vec!["events", "--state", &state],
        vec!["report", "--gpu", "0", "--state", &state],
        vec!["health", "--json", "--socket", &socket],
        vec!["health", "--socket", &socket],
        vec!["config", "check", &config],
        vec!["--help"],
        vec!["--version"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(BIN)
            .args(&args)
            .env("GPUWARDEN_SIM_NVML_SCENARIO", &scenario)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
    }
}

/// Every usage error exits 64 (EX_USAGE), which no command uses for a result: a Slurm or NPD
/// script must never read a typo as a verdict (2 is "unknown" for health, "no GPU" for check).
#[test]
fn every_usage_error_exits_64_and_help_exits_0() {
    let usage_errors: &[&[&str]] = &[
        &[],
        &["frobnicate"],
        &["--bogus"],
        &["health", "--jsno"],
        &["health", "clear", "--gpu", "0"],
        &["health", "clear", "--gpu", "0", "--reason", ""],
        &["check", "--bogus"],
        &["check", "--config"],
        &["events", "--since", "7x", "--state", "/nonexistent"],
        &["events", "--kind", "xdi", "--state", "/nonexistent"],
        &["events", "--limit", "many"],
        &["report"],
        &["report", "--gpu", "0", "--json", "--markdown"],
        &["xid", "explain", "seventy-nine"],
        &["xid"],
        &["config", "check"],
        &["probe", "--gpu", "-1"],
        &["run", "--listen", "not an address"],
    ];
    for args in usage_errors {
        let out = gpuwarden(args, None);
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stderr.is_empty(), "{args:?} says what is wrong");
    }
    for args in [
        &["--help"][..],
        &["--version"],
        &["health", "--help"],
        &["health", "clear", "--help"],
    ] {
        let out = gpuwarden(args, None);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
}

/// The man pages in debian/man are what the command definitions make (`gpuwarden man DIR`),
/// one per visible command.
#[test]
fn the_man_pages_are_what_the_command_line_makes() {
    let dir = tempfile::tempdir().unwrap();
    let out = gpuwarden(&["man", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("debian/man");
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(dir.path()),
        names(&committed),
        "regenerate with: gpuwarden man debian/man"
    );
    for name in names(dir.path()) {
        let made = std::fs::read_to_string(dir.path().join(&name)).unwrap();
        let kept = std::fs::read_to_string(committed.join(&name)).unwrap();
        assert_eq!(made, kept, "{name} is out of date: gpuwarden man debian/man");
    }
    let health = std::fs::read_to_string(committed.join("gpuwarden-health.1")).unwrap();
    assert!(health.contains("local_api.socket"), "the options' help is in the page");
    // NAME is one short line, as whatis(1) lists it; the whole text is the DESCRIPTION.
    for name in names(&committed) {
        let page = std::fs::read_to_string(committed.join(&name)).unwrap();
        let line = page
            .split(".SH NAME\n")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .unwrap_or("");
        assert!(line.len() <= 120 && !line.contains(". "), "{name}: NAME is {line:?}");
    }
}

/// The sections an operator looks for: gpuwarden(1) has EXIT STATUS (every code the CLI
/// exits with), FILES, ENVIRONMENT and EXAMPLES; every page has its command's EXIT STATUS;
/// `gpuwarden --help` lists `man`. As `man` renders them.
#[test]
fn the_man_pages_say_exit_status_files_environment_and_examples() {
    let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("debian/man");
    let rendered = |page: &str| -> String {
        let out = Command::new("man")
            .args(["-P", "cat", "-l"])
            .arg(committed.join(page))
            .env("MANWIDTH", "200")
            .output()
            .expect("man (Debian's man-db)");
        assert!(out.status.success(), "{page}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let top = rendered("gpuwarden.1");
    for section in ["EXIT STATUS", "FILES", "ENVIRONMENT", "EXAMPLES", "SEE ALSO"] {
        assert!(
            top.contains(&format!("\n{section}\n")),
            "gpuwarden(1) lacks {section}:\n{top}"
        );
    }
    let exits = top.split("EXIT STATUS").nth(1).unwrap().split("FILES").next().unwrap();
    for code in ["0", "1", "2", "3", "64", "69", "78"] {
        assert!(
            exits.lines().any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "code {code}:\n{exits}"
        );
    }
    assert!(
        top.contains("/var/lib/gpuwarden/state.db") && top.contains("RUST_LOG"),
        "{top}"
    );
    let health = rendered("gpuwarden-health.1");
    let exits = health.split("EXIT STATUS").nth(1).unwrap();
    assert!(
        exits.contains("3      the idle node's scheduled validation runs"),
        "{health}"
    );
    assert!(
        health.contains("gpuwarden health clear --gpu 0"),
        "an example: {health}"
    );
    for entry in std::fs::read_dir(&committed).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(rendered(&name).contains("\nEXIT STATUS\n"), "{name} has no EXIT STATUS");
    }
    let help = gpuwarden(&["--help"], None);
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("\n  man "),
        "--help lists man"
    );
}

/// `listen:` and `--listen` as node_exporter takes them: a host name, an IP, `:PORT`.
#[test]
fn listen_takes_a_host_name_an_ip_or_a_bare_port() {
    let dir = tempfile::tempdir().unwrap();
    for (listen, ok) in [
        ("localhost:9100", true),
        (":9100", true),
        ("127.0.0.1:9100", true),
        ("\"[::1]:9100\"", true),
        ("localhost", false),
        (":port", false),
        ("no-such-host.invalid:9100", false),
    ] {
        let config = write(&dir, "c.yaml", &format!("listen: {listen}\n"));
        let out = gpuwarden(&["config", "check", config.to_str().unwrap()], None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), ok, "{listen}: {stderr}");
        if !ok {
            assert!(stderr.contains("c.yaml:1:"), "{listen}: {stderr}");
            assert!(stderr.contains(":PORT"), "{listen}: says what to write: {stderr}");
        }
    }
}

/// `events`, `report` and `health` find a running demo's journal and socket: with `--demo`,
/// and `events`/`report` by themselves when the configured journal does not exist. `health`
/// run by a script (no terminal, as Slurm and NPD run it) never falls back to a demo. The
/// demo's log names both paths.
#[test]
fn events_report_and_health_find_a_running_demo() {
    let tmp = tempfile::tempdir().unwrap();
    // A Daemon: stopped with SIGTERM however the test ends, so the demo removes its files.
    let mut run =
        Daemon::spawn_command_with_env(&["run", "--demo", "--listen", "127.0.0.1:0"], &[("TMPDIR", tmp.path())]);
    let log = run.log_text();
    let dir = tmp.path().join(format!("gpuwarden-demo-{}", run.child.id()));
    assert!(
        log.contains(&format!("journal {}", dir.join("state.db").display())),
        "{log}"
    );
    assert!(
        log.contains(&format!("local API {}", dir.join("gpuwarden.sock").display())),
        "{log}"
    );
    let gpuwarden = |args: &[&str]| Command::new(BIN).args(args).env("TMPDIR", tmp.path()).output().unwrap();
    let report = until_ok("GPU 0's report", std::time::Duration::from_secs(15), || {
        let out = gpuwarden(&["report", "--demo", "--gpu", "0", "--json"]);
        match out.status.code() {
            Some(0) => serde_json::from_slice::<serde_json::Value>(&out.stdout).map_err(|e| e.to_string()),
            _ => Err(format!("{out:?}")),
        }
    });
    assert_eq!(report["identity"]["pci_bus_id"], "0000:19:00.0");
    let out = gpuwarden(&["events", "--demo", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .unwrap()
            .is_array()
    );
    let out = gpuwarden(&["health", "--demo"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    // The demo advises: GPU 6's driver asks for a reset (its pending row remap).
    until_ok("GPU 6's next step", std::time::Duration::from_secs(10), || {
        let text = String::from_utf8_lossy(&gpuwarden(&["health", "--demo"]).stdout).to_string();
        match text.contains("next step: GPU 6 gpu_reset: the driver asks for a GPU reset (recovery action)") {
            true => Ok(()),
            false => Err(text),
        }
    });
    // By themselves, where the configured journal is not there.
    let config = tmp.path().join("c.yaml");
    std::fs::write(
        &config,
        "state:\n  path: /nonexistent/state.db\nlocal_api:\n  socket: /nonexistent/g.sock\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["events", "--json"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    if !std::path::Path::new("/var/lib/gpuwarden/state.db").exists() {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("reading the running demo's"),
            "{out:?}"
        );
    }
    // A script's `health` (no terminal here) does not fall back to the demo: unknown.
    let out = gpuwarden(&["health", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    run.signal(15);
    assert_eq!(run.child.wait().unwrap().code(), Some(0));
    // Gone with the demo: `--demo` says there is none.
    let out = gpuwarden(&["events", "--demo"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no demo is running"),
        "{out:?}"
    );
}

/// The shell completions in debian/completions are what the command definitions make
/// (`gpuwarden completions SHELL`), so the package never installs stale ones.
#[test]
fn the_shell_completions_are_what_the_command_line_makes() {
    let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("debian/completions");
    for (shell, file) in [
        ("bash", "gpuwarden.bash"),
        ("zsh", "_gpuwarden"),
        ("fish", "gpuwarden.fish"),
    ] {
        let out = gpuwarden(&["completions", shell], None);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let kept = std::fs::read(committed.join(file)).unwrap();
        assert!(
            out.stdout == kept,
            "debian/completions/{file} is out of date: gpuwarden completions {shell} > debian/completions/{file}"
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("health") && text.contains("config"), "{shell}: {text}");
    }
}

/// A flag with two letters swapped gets the flag it meant, as clap's own suggestions do for
/// other typos (`--jsn`), and still exits 64.
#[test]
fn a_mistyped_flag_gets_a_did_you_mean() {
    for (args, meant) in [
        (&["demo", "inject", "--gpu", "0", "--xdi", "79"][..], "--xid"),
        (&["check", "--jsn"], "--json"),
    ] {
        let out = gpuwarden(args, None);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("tip: a similar argument exists: '{meant}'")),
            "{args:?}: {stderr}"
        );
    }
}

/// The Slurm check's report to the daemon is `health scheduler-report`, not to be taken for the
/// RMA evidence (`gpuwarden report`); `health report`, its old name, still answers, so the
/// health check scripts already on nodes keep working through an upgrade.
#[test]
fn the_schedulers_report_is_named_apart_from_the_rma_report() {
    let help = gpuwarden(&["health", "--help"], None);
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("scheduler-report"), "{text}");
    assert!(!text.lines().any(|l| l.trim_start().starts_with("report ")), "{text}");
    let old = gpuwarden(&["health", "report", "--help"], None);
    assert_eq!(old.status.code(), Some(0), "{old:?}");
    assert!(String::from_utf8_lossy(&old.stdout).contains("gpuwarden health scheduler-report"));
}

/// gpuwarden's simulated NVML named by mistake on a real node would serve invented GPUs: what
/// loads the library (`config check`, `check`, `run`) refuses it (exit 78, file:line:column of
/// `library_path`) unless a simulation scenario is given, as the tests, the load scripts and
/// `--demo` give one; `health`, which loads no library, still answers from the journal.
#[test]
fn a_simulated_library_is_refused_where_no_simulation_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    let socket = dir.path().join("gpuwarden.sock");
    let config = write(
        &dir,
        "gpuwarden.yaml",
        &format!(
            "listen: 127.0.0.1:0\nnvml:\n  library_path: {}\nstate:\n  path: {}\nlocal_api:\n  socket: {}\n",
            sim_library().display(),
            state.display(),
            socket.display()
        ),
    );
    let config = config.to_str().unwrap();
    let refused = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .env("RUST_LOG", "warn")
            .env_remove("GPUWARDEN_SIM_NVML_SCENARIO")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(78), "{args:?}: {out:?}");
        assert!(
            stderr.contains(&format!("{config}:3:3: nvml.library_path"))
                && stderr.contains("is gpuwarden's simulated library")
                && stderr.contains("gpuwarden run --demo"),
            "{args:?}: {stderr}"
        );
    };
    refused(&["config", "check", config]);
    refused(&["check", "--config", config]);
    refused(&["run", "--config", config]);
    // Given a scenario, the same config is a simulation that was asked for.
    let scenario = write(&dir, "scenario.yaml", DEMO_SCENARIO);
    let out = gpuwarden(&["config", "check", config], Some(&scenario));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = gpuwarden(&["check", "--config", config], Some(&scenario));
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    // health loads no library: it asks the daemon at the config's socket (none runs here).
    let out = Command::new(BIN)
        .args(["health", "--config", config])
        .env_remove("GPUWARDEN_SIM_NVML_SCENARIO")
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("does not answer on {}", socket.display())) && !said.contains("simulated library"),
        "{said}"
    );
}

/// The global `--config` shows only in the help of commands that read a config; where none is
/// read (`xid`, `config check`, `man`, `completions`, `demo`) it is hidden, and still accepted
/// so that a wrapper passing it to every call keeps working.
#[test]
fn config_shows_only_where_a_config_is_read() {
    let help = |args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--help");
        let out = gpuwarden(&args, None);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for command in [
        &["run"][..],
        &["check"],
        &["probe"],
        &["health"],
        &["events"],
        &["report"],
        &["rules", "test"],
    ] {
        assert!(
            help(command).contains("--config <FILE>"),
            "{command:?} reads a config: {}",
            help(command)
        );
    }
    for command in [
        &["xid", "explain"][..],
        &["xid", "scan"],
        &["config", "check"],
        &["man"],
        &["completions"],
        &["demo", "inject"],
    ] {
        assert!(
            !help(command).contains("--config"),
            "{command:?} reads none: {}",
            help(command)
        );
    }
    let out = gpuwarden(
        &["xid", "explain", "79", "--config", "/nonexistent/gpuwarden.yaml"],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Xid 79"), "{out:?}");
}
