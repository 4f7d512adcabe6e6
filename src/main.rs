//! gpuwarden's command line: `run`, `check`, `probe`, `config check`, `xid explain|scan`,
//! `events`, `report`, `health`.
//! The work is in the library (lib.rs).

use clap::{Parser, Subcommand};
use gpuwarden::cli::{check, copy_binary, demo, demo_inject};
use gpuwarden::config::{Config, Overrides};
use gpuwarden::service::exit::{CliError, CliResult, Exit};
use gpuwarden::service::logging;
use gpuwarden::{daemon, health, journal, probe, xid};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Used when --config is not given and this file exists.
const DEFAULT_CONFIG_PATH: &str = "/etc/gpuwarden/config.yaml";

#[derive(Parser)]
#[command(
    name = "gpuwarden",
    version,
    about = "GPU fleet operations daemon and Prometheus exporter"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Config file (default: /etc/gpuwarden/config.yaml when it exists, else built-in
    /// defaults). `run`, `check` and `probe` run with it; `events` and `report` read its
    /// state.path, `health` its local_api.socket.
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: poll every GPU and serve Prometheus metrics.
    Run {
        /// Listen address, overriding the config's `listen`: HOST:PORT, IP:PORT, [IPv6]:PORT
        /// or :PORT (every IPv4 address).
        #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
        listen: Option<SocketAddr>,
        /// Run over eight simulated GPUs (needs the simulated NVML library; see README).
        #[arg(long)]
        demo: bool,
    },
    /// Poll every GPU once and print what needs attention. Exit 0: healthy; 1: findings; 2: no GPU read.
    Check {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Check the simulated GPUs of the demo: the running demo's (the newest), as they
        /// are now, where one runs; else a fresh one.
        #[arg(long)]
        demo: bool,
    },
    /// Run the CUDA probe on one GPU now: bf16 GEMM, FP32 FMA, HBM copy and pinned PCIe
    /// bandwidth, compared with what the model should reach. Exit 0: passed (or no expected
    /// values for this model); 1: a test failed; 2: could not run; 3: the GPU is busy.
    Probe(ProbeArgs),
    /// Work with config files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// The operator's own health rules (health.custom_rules).
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// XID errors: look up a code, or find XIDs in kernel-log text.
    Xid {
        #[command(subcommand)]
        command: XidCommand,
    },
    /// Print the health journal's events (read-only; also while the daemon runs). Exit 2 when
    /// the journal cannot be read.
    Events {
        /// The journal to read, instead of the config's state.path.
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
        /// Only events since this long ago (30m, 7d) or this Unix time.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only this GPU: its index (as `gpuwarden check` shows it) or its UUID.
        #[arg(long, value_name = "N|UUID")]
        gpu: Option<String>,
        /// Only these kinds, comma-separated.
        #[arg(long, value_name = "LIST", value_delimiter = ',')]
        kind: Vec<journal::event::Kind>,
        /// Also the baselines: each counter's reading at first sight and at each start (left
        /// out by default: they say where a count stood, not that anything happened).
        #[arg(long)]
        all: bool,
        /// At most this many (the newest).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
        /// Read the journal of the demo running now (`gpuwarden run --demo`; with several,
        /// the newest, said on stderr).
        #[arg(long, conflicts_with_all = ["state", "config"])]
        demo: bool,
        /// Read the journal of the demo running as this pid.
        #[arg(long, value_name = "PID", conflicts_with_all = ["state", "config"])]
        demo_pid: Option<u32>,
    },
    /// Print one GPU's evidence packet for a vendor case (RMA) from the journal: identity, XID
    /// timeline, ECC and row remapping, probes, slowdowns, NVLink, and what NVIDIA's documents
    /// say to do. Exit 1: no such GPU in the journal; 2: the journal cannot be read.
    Report {
        /// The journal to read, instead of the config's state.path.
        #[arg(long, value_name = "FILE")]
        state: Option<PathBuf>,
        /// The GPU: its index or UUID.
        #[arg(long, value_name = "N|UUID", required_unless_present = "nic", conflicts_with = "nic")]
        gpu: Option<String>,
        /// A network adapter instead of a GPU: its name (mlx5_0), for a cable, transceiver or
        /// adapter case.
        #[arg(long, value_name = "DEVICE")]
        nic: Option<String>,
        /// Print the report as JSON.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// Print the report as Markdown (for a ticket or a vendor case).
        #[arg(long)]
        markdown: bool,
        /// Read the journal of the demo running now (`gpuwarden run --demo`; with several,
        /// the newest, said on stderr).
        #[arg(long, conflicts_with_all = ["state", "config"])]
        demo: bool,
        /// Read the journal of the demo running as this pid.
        #[arg(long, value_name = "PID", conflicts_with_all = ["state", "config"])]
        demo_pid: Option<u32>,
    },
    /// Print the running daemon's health verdict (asked over its local socket, never by
    /// polling the GPUs again). Exit 0: no GPU unhealthy; 1: a GPU or the node is
    /// unhealthy; 2: unknown (the daemon does not answer); 3: the idle node's scheduled
    /// validation runs (keep new work off it; nothing is wrong). The first line is short, for
    /// node-problem-detector and Slurm's HealthCheckProgram.
    Health {
        #[command(subcommand)]
        action: Option<HealthAction>,
        /// The daemon's socket (default: the config's local_api.socket).
        #[arg(long, value_name = "PATH", global = true)]
        socket: Option<PathBuf>,
        /// Print the verdict (or the clear's answer) as JSON.
        #[arg(long, global = true)]
        json: bool,
        /// Ask the demo running now (`gpuwarden run --demo`; with several, the newest, said
        /// on stderr).
        #[arg(long, global = true, conflicts_with_all = ["socket", "config"])]
        demo: bool,
        /// Ask the demo running as this pid.
        #[arg(long, value_name = "PID", global = true, conflicts_with_all = ["socket", "config"])]
        demo_pid: Option<u32>,
    },
    /// Put a fault into the running demo (an XID, a hot, lost or slow GPU, a port down) to
    /// follow its story through health, the page, events and the report.
    Demo {
        #[command(subcommand)]
        command: demo_inject::DemoCommand,
    },
    /// Write gpuwarden's man pages (roff), gpuwarden(1) and one per command
    /// (gpuwarden-run(1), ...), made from these same definitions, into DIR (the Debian
    /// package installs them: `man gpuwarden`).
    Man {
        /// The directory to write the pages into.
        dir: PathBuf,
    },
    /// Print the shell completion script for bash, zsh or fish (the Debian package installs
    /// each where its shell looks: /usr/share/bash-completion/completions/gpuwarden,
    /// /usr/share/zsh/vendor-completions/_gpuwarden, /usr/share/fish/vendor_completions.d/).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Copy this binary to DIR/gpuwarden (mode 0755): how a Kubernetes init container hands
    /// gpuwarden to node-problem-detector's container, as gpuwarden's image has no shell or cp.
    #[command(name = "copy-binary", hide = true)]
    CopyBinary {
        /// The directory to put the binary in.
        dir: PathBuf,
    },
    /// The daemon's journal worker: one request on stdin, one answer on stdout (internal;
    /// the daemon runs it, see src/journal/store/worker.rs).
    #[command(name = "journal-worker", hide = true)]
    JournalWorker,
}

#[derive(Subcommand)]
enum XidCommand {
    /// Print what an XID code means, its severity and what to do. Exit 1 for a code not in the catalog.
    Explain {
        /// The XID code, a number (79).
        code: u32,
    },
    /// Print one JSON object per XID found in kernel-log text (raw /dev/kmsg records, dmesg,
    /// dmesg -T, journalctl -k, syslog); reads stdin when no FILE is given.
    Scan {
        /// The kernel-log text to read (default: stdin).
        file: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Test rules: a rule file is run once over this node's snapshot (or the demo's) and every
    /// rule's outcome printed; a test file (rule_files, tests) runs them over its scenarios and
    /// checks what fires. Exit 1 when a rule fails or an expectation does not hold, 78 when a
    /// rule does not compile.
    Test {
        /// A rule file (`rules:`) or a test file (`rule_files:` and `tests:`).
        file: PathBuf,
        /// Run a rule file over the simulated GPUs of the demo.
        #[arg(long)]
        demo: bool,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a config file; errors name file, line and column. Exit 78 (EX_CONFIG) when invalid.
    Check {
        /// The config file to check.
        file: PathBuf,
    },
}

/// The config file to use: FILE, else /etc/gpuwarden/config.yaml when it exists, else none.
fn config_path(path: Option<&Path>) -> Option<PathBuf> {
    match path {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|p| p.exists()),
    }
}

/// The config at `path`; a bad one is logged (file, line, column) and exits 78.
fn load_config(path: Option<&Path>) -> Result<Config, CliError> {
    match path {
        Some(p) => Config::load(p).map_err(|e| {
            log::error!("{e}");
            CliError::quiet(Exit::CONFIG)
        }),
        None => Ok(Config::default()),
    }
}

/// The command line's overrides: `--listen`, and for `--demo` the simulated library and the
/// demo's kernel log, with the demo's temporary files (removed when that is dropped).
fn overrides(listen: Option<SocketAddr>, demo: bool) -> Result<(Overrides, Option<demo::Demo>), CliError> {
    let mut overrides = Overrides {
        listen,
        ..Overrides::default()
    };
    if !demo {
        return Ok((overrides, None));
    }
    match demo::prepare() {
        Ok(demo) => {
            log::info!(
                "demo mode (pid {}): eight simulated GPUs from {}; journal {}, local API {} \
                 (`gpuwarden events`, `report` and `health` find them with --demo while the demo runs; \
                 `gpuwarden demo inject` puts a fault in, docs/fault-end-to-end.md)",
                std::process::id(),
                demo.library.display(),
                demo.state.display(),
                demo.socket.display()
            );
            match &demo.cuda {
                Some(cuda) => log::info!("demo mode: the probe runs on the simulated CUDA ({})", cuda.display()),
                None => log::warn!(
                    "demo mode: no simulated CUDA ({}) was built: validations cannot run; \
                     build it with `cargo build --release --workspace`",
                    demo::CUDA_LIBRARY_FILE
                ),
            }
            overrides.nvml_library_path = Some(demo.library.clone());
            overrides.kernel_log_path = Some(demo.kernel_log.clone());
            overrides.no_pci_census = true;
            overrides.hpc_jobs_dir = Some(demo.jobs.clone());
            overrides.state_path = Some(demo.state.clone());
            overrides.local_socket = Some(demo.socket.clone());
            overrides.sysfs_root = Some(demo.sys_root.clone());
            overrides.no_fabric_manager = true;
            overrides.remediation_advise = true;
            gpuwarden::cli::demo_fabric::flap(demo.sys_root.clone());
            Ok((overrides, Some(demo)))
        }
        Err(e) => {
            log::error!("{e}");
            Err(CliError::quiet(Exit::FAILURE))
        }
    }
}

/// Restores SIGPIPE's default action (the Rust runtime ignores it): a write to a closed pipe
/// ends the process quietly.
fn quiet_on_closed_output() {
    // SAFETY: signal(2) with a valid signal number and SIG_DFL, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// `--listen` and `listen:` as node_exporter takes them: `HOST:PORT` (a name, resolved once),
/// `IP:PORT`, `[IPv6]:PORT`, or `:PORT` for every IPv4 address.
fn parse_listen(text: &str) -> Result<SocketAddr, gpuwarden::config::ListenError> {
    gpuwarden::config::parse_listen(text)
}

/// The command line; a usage error (a mistyped flag, a missing value) exits 64 (EX_USAGE),
/// never 2, which `health` and `check` use for a result.
fn parse_command_line() -> Cli {
    use clap::FromArgMatches;
    match definition().try_get_matches().and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => {
            let args: Vec<String> = std::env::args().collect();
            let e = gpuwarden::cli::suggest::with_suggestion(e, &definition(), &args);
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => Exit::USAGE.code().into(),
            };
            quiet_on_closed_output();
            let _ = e.print();
            std::process::exit(code);
        }
    }
}

/// The command line for parsing, help, man and completions: `--config` hidden where unread.
fn definition() -> clap::Command {
    gpuwarden::cli::config_flag::hidden_where_unread(<Cli as clap::CommandFactory>::command())
}

fn completions(shell: clap_complete::Shell) -> CliResult {
    clap_complete::generate(shell, &mut definition(), "gpuwarden", &mut std::io::stdout());
    Ok(Exit::SUCCESS)
}

/// The man pages, roff, from the same definitions as `--help`, into `dir`.
fn man_pages(dir: &Path) -> CliResult {
    gpuwarden::cli::man::write_pages(definition(), dir)
}

fn main() -> std::process::ExitCode {
    let cli = parse_command_line();
    if matches!(cli.command, Command::JournalWorker) {
        // No logger: its answer, failures included, is the one thing it writes.
        std::process::exit(journal::store::worker::serve());
    }
    // A one-shot command whose output is closed (`check --json | head -1`) ends quietly, as
    // other Unix tools do; the daemon keeps SIGPIPE ignored (a client gone is an error).
    if !matches!(cli.command, Command::Run { .. }) {
        quiet_on_closed_output();
    }
    // The daemon says what it does; a one-shot command prints only what went wrong.
    logging::init(if matches!(cli.command, Command::Run { .. }) {
        "info"
    } else {
        "warn"
    });
    // The one exit: what the command found, or the error that stopped it, said once.
    match dispatch(cli.command, cli.config) {
        Ok(exit) => exit.into(),
        Err(error) => {
            if !error.message.is_empty() {
                eprintln!("{error}");
            }
            error.exit.into()
        }
    }
}

/// Runs one command: its outcome, or what stopped it.
fn dispatch(command: Command, config: Option<PathBuf>) -> CliResult {
    match command {
        Command::Run { listen, demo } => run(config, listen, demo),
        Command::Check { json, demo } => check(config, json, demo),
        Command::Probe(args) => probe(config, args),
        Command::Xid {
            command: XidCommand::Explain { code },
        } => xid::cli::explain(code),
        Command::Xid {
            command: XidCommand::Scan { file },
        } => xid::cli::scan(file.as_deref()),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => config_check(&file),
        Command::Rules {
            command: RulesCommand::Test { file, demo },
        } => rules_test(config, &file, demo),
        Command::Events {
            state,
            since,
            gpu,
            kind,
            all,
            limit,
            json,
            demo,
            demo_pid,
        } => state_path(config, state, demo_choice(demo, demo_pid)).and_then(|path| {
            journal::cli::events(
                &path,
                &journal::cli::EventsOptions {
                    since,
                    gpu,
                    kinds: kind,
                    limit,
                    json,
                    all,
                },
            )
        }),
        Command::Report {
            state,
            gpu,
            nic,
            json,
            markdown,
            demo,
            demo_pid,
        } => state_path(config, state, demo_choice(demo, demo_pid))
            .and_then(|path| report(&path, gpu, nic, json, markdown)),
        // Served in main before the logger; never here.
        Command::JournalWorker => Err(CliError::quiet(Exit::USAGE)),
        Command::Man { dir } => man_pages(&dir),
        Command::CopyBinary { dir } => copy_binary::run(&dir),
        Command::Completions { shell } => completions(shell),
        Command::Health {
            action,
            socket,
            json,
            demo,
            demo_pid,
        } => health(config, socket, json, demo_choice(demo, demo_pid), action),
        Command::Demo { command } => demo_inject::run(command),
    }
}

/// `--demo` and `--demo-pid`: `None` for neither, else the pid asked for (`None`: the newest).
fn demo_choice(demo: bool, pid: Option<u32>) -> Option<Option<u32>> {
    (demo || pid.is_some()).then_some(pid)
}

#[derive(Subcommand)]
enum HealthAction {
    /// After a repair: count the GPU healthy again from now on (its fatal XIDs, failed probe
    /// and held findings from before no longer count) and record who and why in the journal.
    /// A finding whose condition still holds (a lost GPU, a pending row remap) comes back at
    /// the next poll, and this says so. Root (or gpuwarden's user), over the local socket only.
    /// Exit 0: the clear was taken (nothing left, or only the validation it started, which
    /// keeps the GPU out until its probe passes); 1: a finding whose condition still holds is
    /// present (it cannot be cleared until it is mended); 2: not cleared (the daemon did not
    /// answer, or refused: no such GPU); 64: no usable reason.
    Clear {
        /// The GPU: its index, UUID or PCI address.
        #[arg(
            long,
            value_name = "N|UUID|PCI",
            required_unless_present = "nic",
            conflicts_with = "nic"
        )]
        gpu: Option<String>,
        /// A network adapter instead (mlx5_0): after a new cable or transceiver, its ports'
        /// flaps and error growth count from now on, and their held findings are let go of.
        #[arg(long, value_name = "DEVICE")]
        nic: Option<String>,
        /// What was repaired, a ticket: kept in the journal.
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Let a GPU that was unhealthy back into service without the probe that otherwise
        /// must pass first (`health.validate_after_clear`); ends a pending or failed
        /// validation. Recorded in the journal with who and why.
        #[arg(long, conflicts_with = "nic")]
        skip_validation: bool,
    },
    /// What the Slurm health check saw, told to the daemon (deploy/slurm/healthcheck.sh runs it;
    /// alias `report`): its drain guard's decision, who drained the node. Served as
    /// gpuwarden_drain_guard_* (alert GpuwardenDrainGuardActive). Exit 0: kept; 2: not taken.
    #[command(name = "scheduler-report", alias = "report", group(clap::ArgGroup::new("what").required(true).multiple(true).args(["guard", "node"])))]
    Report {
        /// refused: not drained, max_drained nodes already drained by gpuwarden; allowed.
        #[arg(
            long,
            value_name = "refused|allowed",
            requires_all = ["guard_drained", "guard_nodes", "guard_max"]
        )]
        guard: Option<GuardDecision>,
        /// Nodes of this node's partitions drained with a gpuwarden: reason.
        #[arg(long, value_name = "N", requires = "guard")]
        guard_drained: Option<u32>,
        /// Nodes in those partitions.
        #[arg(long, value_name = "N", requires = "guard")]
        guard_nodes: Option<u32>,
        /// max_drained as the program has it (5, 10%).
        #[arg(long, value_name = "COUNT|PERCENT", requires = "guard")]
        guard_max: Option<String>,
        /// Who drained the node, as Slurm shows it now.
        #[arg(long, value_name = "gpuwarden|other|none")]
        node: Option<DrainedBy>,
        /// Jobs running on the node (squeue).
        #[arg(long, value_name = "N", requires = "node")]
        jobs: Option<u32>,
    },
}

/// `gpuwarden health`: the socket given, else the config's `local_api.socket`. A config that
/// cannot be read is an unknown verdict (exit 2), as NPD and Slurm's check expect.
fn health(
    config: Option<PathBuf>,
    socket: Option<PathBuf>,
    json: bool,
    demo: Option<Option<u32>>,
    action: Option<HealthAction>,
) -> CliResult {
    let socket = match (socket, demo) {
        (Some(socket), _) => socket,
        (None, Some(pid)) => running_demo(pid)?.socket,
        (None, None) => {
            let explicit = config.is_some();
            let cfg = load_config(config_path(config.as_deref()).as_deref()).map_err(|e| CliError {
                exit: Exit::UNKNOWN,
                ..e
            })?;
            let socket = cfg.local_api.socket;
            // No daemon socket where the config says, a demo running, and a person at a
            // terminal: ask the demo. Never for a script (Slurm's check, NPD: no terminal),
            // which must not act on a demo's simulated verdict.
            // SAFETY: isatty on a descriptor number has no preconditions.
            let person = unsafe { libc::isatty(1) } == 1;
            match (explicit || socket.exists() || !person, demo::running()) {
                (false, Some(demo)) => {
                    eprintln!(
                        "gpuwarden: no socket at {}; asking the running demo (pid {})",
                        socket.display(),
                        demo.pid
                    );
                    demo.socket
                }
                _ => socket,
            }
        }
    };
    match action {
        None => health::cli::health(&socket, json),
        Some(HealthAction::Clear {
            gpu,
            nic,
            reason,
            skip_validation,
        }) => health::cli::clear(
            &socket,
            gpu.as_deref().unwrap_or(""),
            nic.as_deref(),
            &reason,
            skip_validation,
            json,
        ),
        Some(HealthAction::Report {
            guard,
            guard_drained,
            guard_nodes,
            guard_max,
            node,
            jobs,
        }) => {
            use gpuwarden::model::scheduler::{DrainGuard, Drained, NodeState};
            let drain_guard = guard.map(|guard| DrainGuard {
                refused: guard == GuardDecision::Refused,
                drained: guard_drained.unwrap_or_default(),
                nodes: guard_nodes.unwrap_or_default(),
                max: guard_max.unwrap_or_default(),
            });
            let node = node.map(|by| NodeState {
                drained: match by {
                    DrainedBy::Gpuwarden => Drained::Gpuwarden,
                    DrainedBy::Other => Drained::Other,
                    DrainedBy::None => Drained::None,
                },
                jobs,
            });
            health::cli::report(&socket, &health::scheduler_report::ReportRequest { drain_guard, node })
        }
    }
}

/// The fleet drain guard's decision, as the Slurm health check passes it (`--guard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum GuardDecision {
    Refused,
    Allowed,
}

/// Who drained the node, as Slurm shows it (`--node`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DrainedBy {
    Gpuwarden,
    Other,
    None,
}

/// The journal `events` and `report` read: --state, else the config's state.path.
fn state_path(config: Option<PathBuf>, state: Option<PathBuf>, demo: Option<Option<u32>>) -> Result<PathBuf, CliError> {
    if let Some(state) = state {
        return Ok(state);
    }
    if let Some(pid) = demo {
        return running_demo(pid).map(|d| d.state);
    }
    let explicit = config.is_some();
    let cfg = load_config(config_path(config.as_deref()).as_deref())?;
    if cfg.state.path.as_os_str().is_empty() {
        return Err(CliError::new(
            Exit::UNKNOWN,
            "gpuwarden: the journal is off (state.path is \"\"); --state FILE reads one",
        ));
    }
    // No journal where the config says, and a demo running: that is what was meant.
    if !explicit
        && !cfg.state.path.exists()
        && let Some(demo) = demo::running()
    {
        eprintln!(
            "gpuwarden: no journal at {}; reading the running demo's (pid {}) at {}",
            cfg.state.path.display(),
            demo.pid,
            demo.state.display()
        );
        return Ok(demo.state);
    }
    Ok(cfg.state.path)
}

/// `--demo` (`pid` `None`: the newest) or `--demo-pid`: that demo, or exit 2 saying why not.
fn running_demo(pid: Option<u32>) -> Result<demo::RunningDemo, CliError> {
    demo::choose(pid).map_err(|e| CliError::new(Exit::UNKNOWN, format!("gpuwarden: {e}")))
}

fn run(config: Option<PathBuf>, listen: Option<std::net::SocketAddr>, demo: bool) -> CliResult {
    let path = config_path(config.as_deref());
    let mut cfg = load_config(path.as_deref())?;
    let (overrides, demo_files) = overrides(listen, demo)?;
    overrides.apply(&mut cfg, path.as_deref());
    let exit = daemon::run(cfg, path, overrides);
    drop(demo_files);
    Ok(exit)
}

/// `gpuwarden report`: one GPU's evidence, or one network adapter's.
fn report(path: &std::path::Path, gpu: Option<String>, nic: Option<String>, json: bool, markdown: bool) -> CliResult {
    let format = match (json, markdown) {
        (true, _) => journal::cli::ReportFormat::Json,
        (_, true) => journal::cli::ReportFormat::Markdown,
        _ => journal::cli::ReportFormat::Text,
    };
    match (&gpu, &nic) {
        (_, Some(nic)) => journal::cli::report_nic(path, nic, format),
        (Some(gpu), None) => journal::cli::report(path, gpu, format),
        // clap requires one of the two.
        (None, None) => Err(CliError::new(Exit::USAGE, "gpuwarden report: --gpu or --nic")),
    }
}

fn check(config: Option<PathBuf>, json: bool, demo: bool) -> CliResult {
    let path = config_path(config.as_deref());
    let mut cfg = load_config(path.as_deref())?;
    // `check --demo` beside a running demo polls that demo's GPUs as they are now.
    let (overrides, demo_files) = match demo.then(demo::attach_running).flatten() {
        Some(attached) => (attached?, None),
        None => overrides(None, demo)?,
    };
    overrides.apply(&mut cfg, path.as_deref());
    // check only looks: it reports persistence mode off rather than changing it.
    cfg.persistence.enable = false;
    cfg.nvml.one_shot = true;
    let result = check::run(cfg, path.as_deref(), json);
    drop(demo_files);
    result
}

/// `gpuwarden probe`'s arguments.
#[derive(clap::Args)]
struct ProbeArgs {
    /// The GPU's index, as in `gpuwarden check` and the `gpu` label.
    #[arg(long, default_value_t = 0)]
    gpu: u32,
    /// Comma-separated tests (gemm_bf16, fma_fp32, hbm_copy, pcie_h2d, pcie_d2h); default: the config's probe.tests.
    #[arg(long, value_name = "LIST")]
    tests: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Probe even when the GPU runs compute processes or is busy.
    #[arg(long)]
    force: bool,
    /// Instead of one GPU's tests: an all-reduce across every GPU of the node through
    /// NCCL, its bus bandwidth (every GPU must be idle unless --force).
    #[arg(long, conflicts_with_all = ["gpu", "tests"])]
    collective: bool,
    /// With --collective: only these GPUs (comma-separated indexes). One GPU alone has no
    /// bus to measure, but shows that NCCL loads, runs and sums right.
    #[arg(long, value_name = "LIST", requires = "collective")]
    gpus: Option<String>,
    /// Read the NVML and probe settings as JSON from stdin (how the daemon starts its
    /// scheduled probes, with the settings it runs with).
    #[arg(long, hide = true, conflicts_with = "config")]
    settings_from_stdin: bool,
}

fn probe(config: Option<PathBuf>, args: ProbeArgs) -> CliResult {
    let ProbeArgs {
        gpu,
        tests,
        json,
        force,
        collective,
        gpus,
        settings_from_stdin,
    } = args;
    let mut options = probe::cli::Options {
        gpu,
        tests: None,
        force,
    };
    let cfg = if settings_from_stdin {
        let settings = probe::schedule::settings_from_stdin()
            .map_err(|e| CliError::new(e.exit_code(), format!("gpuwarden probe: {e}")))?;
        Config {
            nvml: settings.nvml,
            probe: settings.probe,
            ..Config::default()
        }
    } else {
        load_config(config_path(config.as_deref()).as_deref())?
    };
    if collective {
        let chosen = gpus
            .as_deref()
            .map(probe::cli_collective::parse_gpus)
            .transpose()
            .map_err(|e| CliError::new(Exit::USAGE, format!("gpuwarden probe --gpus: {e}")))?;
        return probe::cli_collective::main(&cfg, force, chosen.as_deref(), json);
    }
    options.tests = tests
        .as_deref()
        .map(probe::cli::parse_tests)
        .transpose()
        .map_err(|e| CliError::new(Exit::UNKNOWN, format!("gpuwarden probe: {e}")))?;
    probe::cli::main(&cfg, &options, json)
}

fn rules_test(config: Option<PathBuf>, file: &Path, demo: bool) -> CliResult {
    let path = config_path(config.as_deref());
    let mut cfg = load_config(path.as_deref())?;
    let (overrides, demo_files) = overrides(None, demo)?;
    overrides.apply(&mut cfg, path.as_deref());
    let result = gpuwarden::cli::rules::test(cfg, file);
    drop(demo_files);
    result
}

fn config_check(file: &std::path::Path) -> CliResult {
    match Config::load_to_run(file) {
        Ok(config) => {
            if config.xid.read_kernel_log
                && let Some(why) = gpuwarden::xid::kmsg::all_facility(&config.xid.kernel_log_path)
            {
                let place = std::fs::read_to_string(file)
                    .ok()
                    .and_then(|text| gpuwarden::config::setting_position(&text, "xid", "kernel_log_path"));
                let at = place.map_or(String::new(), |(line, column)| format!(":{line}:{column}"));
                return Err(CliError::new(Exit::CONFIG, format!("{}{at}: {why}", file.display())));
            }
            let cautions = [
                config
                    .xid
                    .read_kernel_log
                    .then(|| gpuwarden::xid::kmsg::syslog_notice(&config.xid.kernel_log_path))
                    .flatten(),
                gpuwarden::remediation::marker::caution(&config.remediation.reboot_marker),
                config
                    .xid
                    .read_kernel_log
                    .then(|| gpuwarden::xid::kmsg::caution(&config.xid.kernel_log_path))
                    .flatten(),
            ];
            for caution in cautions.into_iter().flatten() {
                eprintln!("warning: {caution}");
            }
            println!("{}: ok", file.display());
            Ok(Exit::SUCCESS)
        }
        Err(e) => Err(CliError::new(Exit::CONFIG, e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::definition;

    /// Every command, option and argument a user can see has a line of help.
    #[test]
    fn every_command_option_and_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
                let path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(path.clone());
                }
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        let mut command = definition();
        command.build();
        walk(&command, "gpuwarden", &mut missing);
        assert!(missing.is_empty(), "no help for: {missing:#?}");
    }
}
