//! The configuration file: its keys, their defaults, and errors that say where and what to fix.
//!
//! Every key is optional and has the default that config/gpuwarden.yaml documents. Unknown
//! keys are errors (a misspelt key that is silently ignored is how a fleet ends up with
//! persistence mode off). Every error names the file, line and column.
//!
//! One file per section (poll.rs, health.rs, probe.rs, ...), each with its type, defaults,
//! bounds and what a reload does with it; this file holds the whole `Config`, the command
//! line's overrides, loading with positions in errors, and the guarded file read.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `attribution.rs` | Who uses each GPU: `kubernetes` (the kubelet's pod-resources socket), `processes` (per process series) and `hpc_jobs` (the job mapping directory) |
//! | `backends.rs` | The GPU backends' own sections: `nvml`, `persistence`, `amd` (and its `rocm_smi`) |
//! | `custom_rules.rs` | `health.custom_rules` and `health.custom_rules_dir`: the operator's own rules, CEL expressions compiled and checked when the config is read (docs/health.md,... |
//! | `durations.rs` | Duration keys, written the way Prometheus configs write them (`500ms`, `1s`, `5m`), each bounded to a range that makes sense for its key |
//! | `events.rs` | `events`: sinks that take the journal's rows off the node, at least once (docs/journal.md, "Events out") |
//! | `fabric_manager.rs` | `fabric_manager`: how gpuwarden tells whether nvidia-fabricmanager runs on a node whose GPUs report an NVLink fabric (NVSwitch systems) |
//! | `health.rs` | `health`: the operator's policy over the rules (docs/health.md, "Policy"): XID severities, per-rule debounce and hold, error-rate limits, the temperature margin |
//! | `kubernetes.rs` | `kubernetes.api`, `kubernetes.node` and `kubernetes.devices`: the verdict written to the node's own objects in the API server, directly (docs/health.md,... |
//! | `listen.rs` | `listen`: the HTTP server's address, as `HOST:PORT`, `IP:PORT`, `[IPv6]:PORT` or `:PORT` (also `--listen`) |
//! | `local_api.rs` | `local_api`: the Unix socket where `gpuwarden health` and the scheduler hooks ask the running daemon |
//! | `network.rs` | `network`: the node's InfiniBand and RoCE ports (docs/health.md, "Network ports"): how often they are read and the thresholds of their rules |
//! | `output.rs` | What the exposition serves beyond the defaults: `compat` (dcgm-exporter's names), `nvlink` (per-link series), `metrics` (gpuwarden's timing of its own... |
//! | `poll.rs` | `poll`: the round's interval and deadline and the tiers' intervals (docs/performance.md) |
//! | `probe.rs` | `probe`: the CUDA probe's tests, durations, limits and schedule (docs/probe.md) |
//! | `remediation.rs` | `remediation`: what gpuwarden advises, or does, about an unhealthy GPU (docs/health.md, "Remediation") |
//! | `settings.rs` | The running daemon's settings: built from a config by one function (`Settings::build`) and swapped whole on reload, so no part of the daemon keeps a value... |
//! | `simulated.rs` | gpuwarden's simulated vendor libraries (tests/sim-nvml, tests/sim-rocm-smi) invent their GPUs from a scenario file |
//! | `state.rs` | `state`: the health journal's file, its retention and size cap (docs/journal.md) |
//! | `trusted.rs` | The settings that name something the daemon loads, runs or trusts as root: checked with input::trust when the config file is read (`config check`, the... |
//! | `web.rs` | TLS and basic auth, configured the way Prometheus exporters are: a `web.config` file in the exporter-toolkit format... |
//! | `xid.rs` | `xid`: where XIDs are read from (the kernel log, NVML events), their de-duplication and how long a critical one holds |
//! <!-- /files -->

pub(crate) mod settings;
pub(crate) mod web;

mod attribution;
mod backends;
mod custom_rules;
mod durations;
mod events;
mod fabric_manager;
mod health;
mod kubernetes;
mod listen;
mod local_api;
mod network;
mod output;
mod poll;
mod probe;
mod remediation;
mod simulated;
mod state;
mod trusted;
mod xid;
pub use attribution::*;
pub use backends::*;
pub use custom_rules::{CustomRule, MAX_CUSTOM_RULES};
use durations::*;
pub use events::*;
pub use fabric_manager::*;
pub use health::*;
pub use kubernetes::*;
pub use listen::*;
pub use local_api::*;
pub use network::*;
pub use output::*;
pub use poll::*;
pub use probe::*;
pub use remediation::*;
pub use state::*;
pub use xid::*;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address and port the HTTP server listens on: `HOST:PORT`, `IP:PORT`, `[IPv6]:PORT` or
    /// `:PORT` ([`parse_listen`]).
    #[serde(deserialize_with = "listen_address")]
    pub listen: SocketAddr,
    pub poll: Poll,
    pub nvml: Nvml,
    pub persistence: Persistence,
    pub xid: Xid,
    pub web: Web,
    pub amd: Amd,
    pub probe: Probe,
    /// Look on the PCI bus for GPUs no backend enumerates.
    pub pci_census: bool,
    pub hpc_jobs: HpcJobs,
    pub processes: Processes,
    pub kubernetes: Kubernetes,
    pub nvlink: Nvlink,
    pub compat: Compat,
    pub metrics: Metrics,
    pub state: State,
    pub health: Health,
    pub local_api: LocalApi,
    pub network: Network,
    pub fabric_manager: FabricManager,
    pub remediation: Remediation,
    pub events: Events,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([0, 0, 0, 0], 9100)),
            poll: Poll::default(),
            nvml: Nvml::default(),
            persistence: Persistence::default(),
            xid: Xid::default(),
            web: Web::default(),
            amd: Amd::default(),
            probe: Probe::default(),
            pci_census: true,
            hpc_jobs: HpcJobs::default(),
            processes: Processes::default(),
            kubernetes: Kubernetes::default(),
            nvlink: Nvlink::default(),
            compat: Compat::default(),
            metrics: Metrics::default(),
            state: State::default(),
            health: Health::default(),
            local_api: LocalApi::default(),
            network: Network::default(),
            fabric_manager: FabricManager::default(),
            remediation: Remediation::default(),
            events: Events::default(),
        }
    }
}

/// What the command line sets over the config file (`--listen`, `--demo`); applied at start
/// and again after every reload, so SIGHUP does not undo it.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub nvml_library_path: Option<PathBuf>,
    pub kernel_log_path: Option<PathBuf>,
    /// The demo's GPUs are simulated: the real PCI bus says nothing about them. A default
    /// only: a config file that sets `pci_census` keeps its value.
    pub no_pci_census: bool,
    /// The demo's job directory. A default only: a config file that sets
    /// `hpc_jobs.mapping_dir` keeps its value.
    pub hpc_jobs_dir: Option<PathBuf>,
    /// The demo's journal. A default only: a config file that sets `state.path` keeps it.
    pub state_path: Option<PathBuf>,
    /// The demo's local API socket. A default only, like `state_path`.
    pub local_socket: Option<PathBuf>,
    /// The demo's sysfs tree (its network ports). A default only: a config file that sets
    /// `amd.sysfs_root` keeps its value.
    pub sysfs_root: Option<PathBuf>,
    /// The demo's simulated NVSwitch fabric has no nvidia-fabricmanager to look for. A default
    /// only: a config file that sets `fabric_manager` keeps its value.
    pub no_fabric_manager: bool,
    /// The demo shows the remediation ladder's advice. A default only: a config file that sets
    /// `remediation` keeps its value.
    pub remediation_advise: bool,
}

impl Overrides {
    /// Applies the overrides to `config`, read from `file` (None: built-in defaults). What
    /// the simulated GPUs need (the library, the kernel log) always wins; the demo's other
    /// choices give way to a key the file sets, and the log says so.
    pub fn apply(&self, config: &mut Config, file: Option<&Path>) {
        let text = file
            .filter(|_| {
                self.no_pci_census
                    || self.hpc_jobs_dir.is_some()
                    || self.state_path.is_some()
                    || self.local_socket.is_some()
                    || self.sysfs_root.is_some()
                    || self.no_fabric_manager
                    || self.remediation_advise
            })
            .and_then(|f| read_config_file(f, "config file").ok())
            .unwrap_or_default();
        let file_sets = |section: &str, key: &str| {
            let set = key_position(&text, section, key).is_some();
            if set {
                let name = if key.is_empty() {
                    section.to_string()
                } else {
                    format!("{section}.{key}")
                };
                log::info!("demo: keeping `{name}` as the config file sets it");
            }
            set
        };
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(path) = &self.nvml_library_path {
            config.nvml.enabled = true;
            config.nvml.library_path = path.clone();
        }
        if let Some(path) = &self.kernel_log_path {
            config.xid.kernel_log_path = path.clone();
        }
        if self.no_pci_census && !file_sets("pci_census", "") {
            config.pci_census = false;
        }
        if let Some(dir) = &self.hpc_jobs_dir
            && !file_sets("hpc_jobs", "mapping_dir")
        {
            config.hpc_jobs.mapping_dir = dir.clone();
        }
        if let Some(path) = &self.state_path
            && !file_sets("state", "path")
        {
            config.state.path = path.clone();
        }
        if let Some(path) = &self.local_socket
            && !file_sets("local_api", "socket")
        {
            config.local_api.socket = path.clone();
        }
        if let Some(path) = &self.sysfs_root
            && !file_sets("amd", "sysfs_root")
        {
            config.amd.sysfs_root = path.clone();
        }
        if self.no_fabric_manager && !file_sets("fabric_manager", "") {
            config.fabric_manager.check = false;
        }
        if self.remediation_advise && !file_sets("remediation", "") {
            config.remediation.mode = RemediationMode::Advise;
        }
    }
}

/// A config that could not be used, with where and why.
#[derive(Debug)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: Option<u64>,
    pub column: Option<u64>,
    pub message: String,
    /// The lines around the error with a caret under it, when the parser has them.
    pub snippet: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ":{line}:{column}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(snippet) = &self.snippet {
            write!(f, "\n{snippet}")?;
        }
        Ok(())
    }
}

/// Where `key:` is written inside the top-level `section:` of a YAML text, as (line,
/// column), both from 1: to point at the key a check after parsing found wrong.
pub(crate) fn key_position(text: &str, section: &str, key: &str) -> Option<(u64, u64)> {
    let mut in_section = false;
    for (index, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        if indent == 0 && !trimmed.is_empty() && !trimmed.starts_with('#') {
            in_section = trimmed.starts_with(&format!("{section}:"));
            if key.is_empty() && in_section {
                return Some((index as u64 + 1, 1));
            }
            continue;
        }
        if in_section && (trimmed.starts_with(&format!("{key}:")) || trimmed.starts_with(&format!("\"{key}\":"))) {
            return Some((index as u64 + 1, indent as u64 + 1));
        }
    }
    None
}

/// Where `key:` is written inside `section:`, for a check outside this module (`config
/// check`'s look at the kernel log) to point at it.
pub fn setting_position(text: &str, section: &str, key: &str) -> Option<(u64, u64)> {
    key_position(text, section, key)
}

/// Splits serde-saphyr's rendered error ("error: line 2 column 13: MESSAGE", then a snippet
/// that names `<input>` and repeats the message after the caret) into the message and a
/// snippet that names the file and says it once.
pub(crate) fn split_rendered(rendered: &str, file: &Path) -> (String, Option<String>) {
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or("");
    let message = first.strip_prefix("error: ").unwrap_or(first);
    // "line 2 column 13: " is in the file:line:column prefix already.
    let message = match message.split_once(": ") {
        Some((location, rest)) if location.starts_with("line ") && location.contains(" column ") => rest,
        _ => message,
    };
    let snippet: Vec<String> = lines
        .map(|line| {
            if let Some(rest) = line.trim_start().strip_prefix("--> <input>") {
                let indent = &line[..line.len() - line.trim_start().len()];
                format!("{indent}--> {}{rest}", file.display())
            } else if let Some(caret) = line.find('^').filter(|_| line.trim_start().starts_with('|')) {
                line[..=caret].to_string()
            } else {
                line.to_string()
            }
        })
        .collect();
    let snippet = (!snippet.is_empty()).then(|| snippet.join("\n"));
    (message.trim().to_string(), snippet)
}

impl std::error::Error for ConfigError {}

/// YAML text of `file` as a `T`, with strict booleans (`yes`/`no`/`on`/`off` are strings);
/// an error with its file, line, column and snippet. The config and the rule files read so.
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(text: &str, file: &Path) -> Result<T, ConfigError> {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_str_with_options::<T>(text, options).map_err(|e| {
        let location = e.location();
        let (message, snippet) = split_rendered(e.render().trim(), file);
        ConfigError {
            file: file.to_path_buf(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            message,
            snippet,
        }
    })
}

impl Config {
    /// Parses YAML text; `file` is only used to name the source in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
        // Strict booleans: `yes`/`no`/`on`/`off` are strings, not booleans, so
        // `enable: off` is an error rather than a silent surprise (parse_yaml).
        // An empty file means all defaults.
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let config: Config = parse_yaml(text, file)?;
        config.check_debounce_spans(text, file)?;
        let mut config = config;
        let mut taken = Vec::new();
        custom_rules::compile_all(&mut config.health.custom_rules, text, file, &mut taken)?;
        Ok(config)
    }

    /// One bound for both forms of a debounce: N polls at `poll.interval` span at most a day,
    /// as a duration does (10000 polls at 1h would be over a year).
    fn check_debounce_spans(&self, text: &str, file: &Path) -> Result<(), ConfigError> {
        for (name, rule) in &self.health.rules {
            if let Debounce::Polls(n) = rule.debounce {
                let span = rule.debounce.span(self.poll.interval);
                if span > DAY {
                    let at = key_position(text, "health", name.label());
                    return Err(ConfigError {
                        file: file.to_path_buf(),
                        line: at.map(|(line, _)| line),
                        column: at.map(|(_, column)| column),
                        message: format!(
                            "health.rules.{name}.debounce: {n} polls at poll.interval {} span {}, over a day; \
                             write fewer polls or a duration of at most 24h",
                            humantime::format_duration(self.poll.interval),
                            humantime::format_duration(span)
                        ),
                        snippet: None,
                    });
                }
            }
        }
        Ok(())
    }

    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = read_config_file(file, "config file").map_err(|e| ConfigError {
            file: file.to_path_buf(),
            line: None,
            column: None,
            message: e.to_string(),
            snippet: None,
        })?;
        let mut config = Config::parse(&text, file)?;
        config.check_trusted_paths(&text, file)?;
        if !config.health.custom_rules_dir.as_os_str().is_empty() {
            let mut taken: Vec<(String, PathBuf)> = config
                .health
                .custom_rules
                .iter()
                .map(|r| (r.name.clone(), file.to_path_buf()))
                .collect();
            let more = custom_rules::read_dir(&config.health.custom_rules_dir, &mut taken)?;
            config.health.custom_rules.extend(more);
        }
        Ok(config)
    }

    /// Reads one rule file (`gpuwarden rules test`): its rules, compiled and checked.
    pub fn read_rule_file(file: &Path) -> Result<Vec<CustomRule>, ConfigError> {
        custom_rules::read_file(file, &mut Vec::new())
    }

    /// Reads one rule file of several (a rules test's `rule_files`): `taken` are the names
    /// (and files) read before, which its rules must not take again.
    pub fn read_rule_file_into(
        file: &Path,
        taken: &mut Vec<(String, PathBuf)>,
    ) -> Result<Vec<CustomRule>, ConfigError> {
        custom_rules::read_file(file, taken)
    }
}

/// The largest config file read: a fully commented config is about 20 KiB.
pub const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// Reads a config file (`what`: "config file", "web config file") through the hardened
/// reader: a regular file only (a FIFO would block the start or a reload, /dev/zero would be
/// read without end), opened without blocking, at most [`MAX_CONFIG_BYTES`]. A link is
/// followed: the config directory is root's, and Kubernetes mounts ConfigMaps as links.
/// Err: what is wrong and what to do.
pub fn read_config_file(file: &Path, what: &'static str) -> Result<String, ReadConfigError> {
    use crate::input::{Links, Reason, Refused};
    // `--config /dev/null`: the usual way to ask for the built-in defaults.
    if std::fs::canonicalize(file).is_ok_and(|p| p == Path::new("/dev/null")) {
        return Ok(String::new());
    }
    let (bytes, truncated) = crate::input::read_bytes(file, MAX_CONFIG_BYTES, Links::Follow).map_err(|e| match e {
        Refused::Missing => ReadConfigError::Missing(what),
        Refused::Skip(Reason::NotRegularFile, _) => ReadConfigError::NotAFile(what),
        skip => ReadConfigError::Unreadable {
            what,
            detail: skip.to_string(),
        },
    })?;
    if truncated {
        return Err(ReadConfigError::TooLarge(what));
    }
    String::from_utf8(bytes).map_err(|e| ReadConfigError::NotUtf8 {
        what,
        offset: e.utf8_error().valid_up_to(),
    })
}

/// Why a config file cannot be read: what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ReadConfigError {
    #[error("cannot read the {0}: it does not exist")]
    Missing(&'static str),
    #[error("the {0} is not a regular file (a FIFO, device, socket or directory); point it at a file")]
    NotAFile(&'static str),
    #[error("cannot read the {what}: {detail}")]
    Unreadable { what: &'static str, detail: String },
    #[error("the {0} is larger than 1 MiB; is it the right file?")]
    TooLarge(&'static str),
    #[error("the {what} is not UTF-8 text (an invalid byte at offset {offset})")]
    NotUtf8 { what: &'static str, offset: usize },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::RuleId;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.yaml"))
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
        assert_eq!(parse("# nothing\n").unwrap(), Config::default());
    }

    #[test]
    fn shipped_default_config_matches_the_built_in_defaults() {
        let shipped = include_str!("../../config/gpuwarden.yaml");
        assert_eq!(parse(shipped).unwrap(), Config::default());
    }

    /// `nic_port_down` waits 30 s unless the operator says otherwise; another rule's policy
    /// does not take that default away.
    #[test]
    fn the_port_down_debounce_is_a_default_the_operator_can_override() {
        let default = |c: &Config| c.health.rules.get(&RuleId::NicPortDown).map(|p| p.debounce);
        assert_eq!(
            default(&Config::default()),
            Some(Debounce::For(Duration::from_secs(30)))
        );
        let other = parse("health:\n  rules: {nvlink_down: {debounce: 3}}\n").unwrap();
        assert_eq!(default(&other), Some(Debounce::For(Duration::from_secs(30))));
        assert_eq!(other.health.rules[&RuleId::NvlinkDown].debounce, Debounce::Polls(3));
        let at_once = parse("health:\n  rules: {nic_port_down: {debounce: 1}}\n").unwrap();
        assert_eq!(default(&at_once), Some(Debounce::Polls(1)));
    }

    #[test]
    fn reads_every_key() {
        let c = parse(
            "listen: 127.0.0.1:9400\npoll:\n  interval: 250ms\n  timeout: 200ms\n\
             nvml:\n  enabled: false\n  library_path: /opt/lib/libnvidia-ml.so.1\n  \
             retry_initial: 1s\n  retry_max: 1m\npersistence:\n  enable: false\n\
             xid:\n  read_kernel_log: false\n  kernel_log_path: /tmp/kmsg\n  nvml_events: false\n  \
             dedup_window: 5s\n  critical_hold: 30m\n",
        )
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:9400".parse().unwrap());
        assert_eq!(c.poll.interval, Duration::from_millis(250));
        assert_eq!(c.poll.timeout, Duration::from_millis(200));
        assert!(!c.nvml.enabled);
        assert_eq!(c.nvml.library_path, PathBuf::from("/opt/lib/libnvidia-ml.so.1"));
        assert_eq!(c.nvml.retry_max, Duration::from_secs(60));
        assert!(!c.persistence.enable);
        assert!(!c.xid.read_kernel_log && !c.xid.nvml_events);
        assert_eq!(c.xid.kernel_log_path, PathBuf::from("/tmp/kmsg"));
        assert_eq!(c.xid.dedup_window, Duration::from_secs(5));
        assert_eq!(c.xid.critical_hold, Duration::from_secs(1800));
    }

    #[test]
    fn unknown_key_is_refused_with_its_position() {
        let e = parse("poll:\n  interval: 1s\n  intervall: 2s\n").unwrap_err();
        assert_eq!((e.line, e.column), (Some(3), Some(3)), "{e}");
        assert!(e.message.contains("intervall"), "{e}");
        assert!(e.to_string().starts_with("test.yaml:3:3: "), "{e}");
    }

    #[test]
    fn bad_duration_says_how_to_write_one() {
        let e = parse("poll:\n  interval: fast\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("500ms"), "{e}");
    }

    #[test]
    fn slow_interval_shorter_than_interval_is_refused() {
        let e = parse("poll:\n  interval: 2s\n  timeout: 1s\n  slow_interval: 1s\n").unwrap_err();
        assert!(e.line.is_some(), "{e}");
        assert!(e.message.contains("slow_interval"), "{e}");
        let c = parse("poll:\n  slow_interval: 30s\n").unwrap();
        assert_eq!(c.poll.slow_interval, Duration::from_secs(30));
    }

    #[test]
    fn timeout_longer_than_interval_is_refused() {
        let e = parse("poll:\n  interval: 1s\n  timeout: 2s\n").unwrap_err();
        assert!(e.line.is_some(), "{e}");
        assert!(e.message.contains("at most poll.interval"), "{e}");
    }

    #[test]
    fn yaml_1_1_booleans_are_not_booleans() {
        let e = parse("persistence:\n  enable: off\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
    }

    #[test]
    fn probe_settings_are_checked_where_they_are_written() {
        let c = parse("probe:\n  schedule: true\n  tests: [hbm_copy]\n  durations:\n    hbm_copy: 3s\n").unwrap();
        assert!(c.probe.schedule);
        assert_eq!(c.probe.tests, vec![crate::model::probe::Test::HbmCopy]);
        assert_eq!(c.probe.durations.hbm_copy, Duration::from_secs(3));
        for (text, line, says) in [
            ("probe:\n  pass_fraction: 1.5\n", 2, "not a fraction"),
            ("probe:\n  tests: []\n", 2, "list at least one"),
            ("probe:\n  tests: [gemm_fp8]\n", 2, "gemm_fp8"),
            ("probe:\n  tests: [hbm_copy, hbm_copy]\n", 2, "listed twice"),
            ("probe:\n  durations:\n    gemm_bf16: 2m\n", 3, "100ms to 60s"),
            ("probe:\n  memory_cap_mib: 100\n", 2, "256 MiB"),
            (
                "probe:\n  expected:\n    - match: H100\n      hbm_gbps: 1\n",
                4,
                "hbm_gbps",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn xid_severities_override_the_catalog_per_code_and_all_covers_the_rest() {
        use crate::model::xid::Severity;
        let c =
            parse("health:\n  xid_severity:\n    all: ignore\n    48: fatal\n    \"45\": critical\n    13: warning\n")
                .unwrap();
        let policy = &c.health.xid_severity;
        assert_eq!(policy.all, Some(Severity::Info));
        assert_eq!(policy.chosen(48), Some(Severity::Fatal));
        assert_eq!(policy.chosen(45), Some(Severity::Critical));
        assert_eq!(policy.chosen(13), Some(Severity::Warning));
        assert_eq!(policy.chosen(79), Some(Severity::Info), "all: every code not listed");
        let c = parse("health:\n  xid_severity: {94: fatal}\n").unwrap();
        assert_eq!(c.health.xid_severity.chosen(94), Some(Severity::Fatal));
        assert_eq!(c.health.xid_severity.chosen(79), None, "the catalog's");
        for (text, line, says) in [
            ("health:\n  xid_severity:\n    0: fatal\n", 3, "1 to 65535"),
            ("health:\n  xid_severity:\n    70000: fatal\n", 3, "1 to 65535"),
            ("health:\n  xid_severity:\n    -1: fatal\n", 3, "1 to 65535"),
            (
                "health:\n  xid_severity:\n    everything: fatal\n",
                3,
                "write a number (48) or `all`",
            ),
            ("health:\n  xid_severity:\n    48: deadly\n", 3, "fatal"),
            ("health:\n  xid_severities: {}\n", 2, "xid_severities"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn a_code_given_twice_and_a_debounce_over_a_day_in_polls_are_refused() {
        let e = parse("health:\n  xid_severity: {48: fatal, \"48\": ignore}\n").unwrap_err();
        assert!(e.message.contains("XID 48 is given twice"), "{e}");
        assert_eq!(e.file, Path::new("test.yaml"));
        // The same key written alike: the YAML reader refuses it itself.
        let e = parse("health:\n  xid_severity:\n    all: fatal\n    all: ignore\n").unwrap_err();
        assert!(e.message.contains("duplicate"), "{e}");
        let e = parse("health:\n  xid_severity:\n    48: fatal\n    \"048\": ignore\n").unwrap_err();
        assert!(e.message.contains("XID 48 is given twice"), "{e}");
        let e = parse("poll:\n  interval: 1h\n  slow_interval: 1h\n  topology_interval: 1h\n  gpm_interval: 1h\nhealth:\n  rules:\n    nvlink_down: {debounce: 10000}\n").unwrap_err();
        assert!(e.message.contains("over a day"), "{e}");
        assert_eq!(e.line, Some(8), "{e}");
        // 24 polls at 1h: 23 h, under a day.
        assert!(parse("poll:\n  interval: 1h\n  slow_interval: 1h\n  topology_interval: 1h\n  gpm_interval: 1h\nhealth:\n  rules:\n    nvlink_down: {debounce: 24}\n").is_ok());
    }

    #[test]
    fn rule_debounce_and_hold_are_read_per_rule_and_refused_where_wrong() {
        let c = parse(
            "health:\n  rules:\n    nvlink_down: {debounce: 3, hold: 5m}\n    thermal_slowdown:\n      debounce: 30s\n",
        )
        .unwrap();
        let nvlink = &c.health.rules[&RuleId::NvlinkDown];
        assert_eq!(nvlink.debounce, Debounce::Polls(3));
        assert_eq!(nvlink.hold, Duration::from_secs(300));
        assert_eq!(nvlink.debounce.span(Duration::from_secs(1)), Duration::from_secs(2));
        assert_eq!(
            c.health.rules[&RuleId::ThermalSlowdown].debounce,
            Debounce::For(Duration::from_secs(30))
        );
        assert_eq!(c.health.rules[&RuleId::ThermalSlowdown].hold, Duration::ZERO);
        for (text, line, says) in [
            (
                "health:\n  rules:\n    nvlink_flap: {hold: 1m}\n",
                3,
                "no health rule \"nvlink_flap\"",
            ),
            (
                "health:\n  rules:\n    nvlink_down: {debounce: 0}\n",
                3,
                "1 to 10000 polls",
            ),
            (
                "health:\n  rules:\n    nvlink_down: {debounce: soon}\n",
                3,
                "not a debounce",
            ),
            ("health:\n  rules:\n    nvlink_down: {debounce: 2d}\n", 3, "over a day"),
            (
                "health:\n  rules:\n    nvlink_down: {hold: 5years}\n",
                3,
                "health.rules.*.hold",
            ),
            ("health:\n  rules:\n    nvlink_down: {holdd: 1m}\n", 3, "holdd"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn the_temperature_margin_is_off_by_default_and_bounded() {
        assert_eq!(Config::default().health.temperature_margin_c, None);
        let c = parse("health:\n  temperature_margin_c: 3\n").unwrap();
        assert_eq!(c.health.temperature_margin_c, Some(3.0));
        let e = parse("health:\n  temperature_margin_c: 80\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("0 to 50"), "{e}");
    }

    #[test]
    fn error_rate_limits_are_off_by_default_and_checked_where_written() {
        assert_eq!(Config::default().health.error_rates, Default::default());
        let c = parse("health:\n  error_rates:\n    ecc_corrected: 1000\n    pcie_replay: 100\n").unwrap();
        assert_eq!(c.health.error_rates.ecc_corrected, Some(1000));
        assert_eq!(c.health.error_rates.pcie_replay, Some(100));
        assert_eq!(c.health.error_rates.nvlink, None);
        for (text, line, says) in [
            (
                "health:\n  error_rates:\n    ecc_correctable: 10\n",
                3,
                "ecc_correctable",
            ),
            (
                "health:\n  error_rates:\n    nvlink: -1\n",
                3,
                "health.error_rates.nvlink is -1; write a whole number",
            ),
            (
                "health:\n  error_rates:\n    nvlink: lots\n",
                3,
                "health.error_rates.nvlink is \"lots\"",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn durations_out_of_range_are_refused_where_they_are_written() {
        for (text, line, says) in [
            ("poll:\n  interval: 300000000000y\n", 2, "poll.interval is"),
            ("poll:\n  interval: 0s\n", 2, "from 10ms to 1h"),
            ("poll:\n  slow_interval: 1000days\n", 2, "poll.slow_interval"),
            ("nvml:\n  retry_initial: 0s\n", 2, "retry_initial"),
            ("xid:\n  dedup_window: 0s\n", 2, "xid.dedup_window"),
            ("xid:\n  critical_hold: 100years\n", 2, "xid.critical_hold"),
            ("probe:\n  interval: 0s\n", 2, "probe.interval"),
            ("probe:\n  timeout: 0s\n", 2, "probe.timeout"),
            ("probe:\n  sample_interval: 1h\n", 2, "probe.sample_interval"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
        let c = parse("poll:\n  interval: 1h\n  timeout: 30s\n  slow_interval: 1h\n").unwrap();
        assert_eq!(c.poll.interval, HOUR);
    }

    #[test]
    fn errors_name_the_file_once_and_say_the_message_once() {
        let e = parse("poll:\n  interval: fast\n").unwrap_err().to_string();
        assert!(e.starts_with("test.yaml:2:13: \"fast\" is not a duration"), "{e}");
        assert!(e.contains(" --> test.yaml:2:13"), "{e}");
        assert!(!e.contains("<input>") && !e.contains("line 2 column 13"), "{e}");
        assert_eq!(e.matches("is not a duration").count(), 1, "{e}");
    }

    #[test]
    fn bad_listen_address_is_refused() {
        let e = parse("listen: 9100\n").unwrap_err();
        assert_eq!((e.line, e.column), (Some(1), Some(9)), "{e}");
    }
}
