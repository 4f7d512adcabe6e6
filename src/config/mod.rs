//! The configuration file: its keys, their defaults, and errors that say where and what to fix.
//!
//! Every key is optional and has the default that config/gpuwarden.yaml documents. Unknown
//! keys are errors (a misspelt key that is silently ignored is how a fleet ends up with
//! persistence mode off). Every error names the file, line and column.

pub mod settings;
pub mod web;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// sysexits.h EX_CONFIG: what `gpuwarden config check` and a refused start exit with.
pub const EX_CONFIG: i32 = 78;

/// A listen address as node_exporter takes it: `IP:PORT`, `[IPv6]:PORT`, `:PORT` (every IPv4
/// address), or `HOST:PORT` with a name resolved once, here (the first address it has).
pub fn parse_listen(text: &str) -> Result<SocketAddr, ListenError> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let named = text.to_string();
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| ListenError::NotAnAddress(named.clone()))?;
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(ListenError::NoPort(named));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(ListenError::NotAnAddress(named));
    }
    use std::net::ToSocketAddrs;
    let mut addresses = text.to_socket_addrs().map_err(|source| ListenError::Unresolved {
        text: named.clone(),
        host: host.to_string(),
        source,
    })?;
    addresses.next().ok_or_else(|| ListenError::NoAddress {
        text: named,
        host: host.to_string(),
    })
}

/// What to write instead, said with every [`ListenError`].
const LISTEN_HINT: &str =
    "write IP:PORT (127.0.0.1:9100), [IPv6]:PORT, HOST:PORT (localhost:9100) or :PORT (0.0.0.0:9100)";

/// Why a listen address cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{0:?} has no port; {LISTEN_HINT}")]
    NoPort(String),
    #[error("{0:?} is not an address; {LISTEN_HINT}")]
    NotAnAddress(String),
    #[error("{text:?}: the name {host:?} does not resolve ({source}); {LISTEN_HINT}")]
    Unresolved {
        text: String,
        host: String,
        source: std::io::Error,
    },
    #[error("{text:?}: the name {host:?} has no address; {LISTEN_HINT}")]
    NoAddress { text: String, host: String },
}

fn listen_address<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    parse_listen(&text).map_err(serde::de::Error::custom)
}

/// sysexits.h EX_USAGE: the command line was wrong (a mistyped flag, a bad value). No command
/// uses 64 for a result, so a script never reads a typo as a verdict.
pub const EX_USAGE: i32 = 64;

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
    pub state: State,
    pub health: Health,
    pub local_api: LocalApi,
}

/// The local API (docs/health.md, "The verdict for schedulers"): `gpuwarden health` and the
/// scheduler hooks ask the running daemon here, never over the network.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalApi {
    /// A Unix socket, mode 0600, answering only root and gpuwarden's own user; "" turns it off.
    pub socket: PathBuf,
}

/// Where the local API listens by default; systemd's `RuntimeDirectory=gpuwarden` makes the
/// directory.
pub const LOCAL_SOCKET: &str = "/run/gpuwarden/gpuwarden.sock";

impl Default for LocalApi {
    fn default() -> Self {
        LocalApi {
            socket: PathBuf::from(LOCAL_SOCKET),
        }
    }
}

/// The operator's health policy (docs/health.md, "Policy"). Reloadable.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Health {
    /// XID severities over NVIDIA's catalog: `{48: fatal, 45: ignore}`, with `all` for every
    /// code not listed.
    #[serde(deserialize_with = "xid_severity")]
    pub xid_severity: crate::model::xid::XidPolicy,
    /// Per rule (by its reason): how long its condition must hold before the finding is
    /// raised, and how long it must be clear before the finding clears.
    #[serde(deserialize_with = "rule_policies")]
    pub rules: std::collections::BTreeMap<String, RulePolicy>,
    /// A GPU within this many degrees C of its slowdown temperature is degraded
    /// (`temperature_near_slowdown`); unset: no such finding (the alert still warns at 5 C).
    #[serde(deserialize_with = "temperature_margin")]
    pub temperature_margin_c: Option<f64>,
    /// Per error counter: more errors than this within the last hour make a GPU degraded
    /// (`ecc_corrected_rate`, `nvlink_error_rate`, `pcie_replay_rate`); unset: no such finding.
    #[serde(deserialize_with = "error_rates")]
    pub error_rates: crate::model::health::ErrorRateLimits,
}

/// `health.error_rates`: each limit a whole number of errors an hour.
fn error_rates<'de, D: Deserializer<'de>>(d: D) -> Result<crate::model::health::ErrorRateLimits, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Written {
        #[serde(default)]
        ecc_corrected: Option<serde_json::Value>,
        #[serde(default)]
        nvlink: Option<serde_json::Value>,
        #[serde(default)]
        pcie_replay: Option<serde_json::Value>,
    }
    fn count<E: serde::de::Error>(key: &str, value: Option<serde_json::Value>) -> Result<Option<u64>, E> {
        let Some(value) = value else {
            return Ok(None);
        };
        value.as_u64().map(Some).ok_or_else(|| {
            E::custom(format!(
                "health.error_rates.{key} is {value}; write a whole number of errors an hour (0 or more)"
            ))
        })
    }
    let written = Written::deserialize(d)?;
    Ok(crate::model::health::ErrorRateLimits {
        ecc_corrected: count("ecc_corrected", written.ecc_corrected)?,
        nvlink: count("nvlink", written.nvlink)?,
        pcie_replay: count("pcie_replay", written.pcie_replay)?,
    })
}

fn temperature_margin<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let margin = f64::deserialize(d)?;
    if !(0.0..=50.0).contains(&margin) {
        return Err(serde::de::Error::custom(format!(
            "health.temperature_margin_c is {margin}; write 0 to 50 degrees C"
        )));
    }
    Ok(Some(margin))
}

/// One rule's debounce and hold (docs/health.md, "Debounce and hold").
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RulePolicy {
    /// The condition must be seen this many polls in a row (a number) or this long (a
    /// duration) before its finding is raised; 1 (the default): at once.
    #[serde(deserialize_with = "debounce")]
    pub debounce: Debounce,
    /// Once raised, the finding stays until its condition has been clear this long.
    #[serde(deserialize_with = "rule_hold")]
    pub hold: Duration,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Debounce {
    #[default]
    None,
    Polls(u32),
    For(Duration),
}

impl Debounce {
    /// How long the condition must have held, given the poll interval: N polls in a row are
    /// N - 1 intervals from the first to the last.
    pub fn span(self, poll_interval: Duration) -> Duration {
        match self {
            Debounce::None => Duration::ZERO,
            Debounce::Polls(n) => poll_interval.saturating_mul(n.saturating_sub(1)),
            Debounce::For(d) => d,
        }
    }
}

fn debounce<'de, D: Deserializer<'de>>(d: D) -> Result<Debounce, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = Debounce;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a number of polls (3) or a duration (30s)")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Debounce, E> {
            match u32::try_from(v) {
                Ok(n) if (1..=10_000).contains(&n) => Ok(Debounce::Polls(n)),
                _ => Err(E::custom(format!(
                    "debounce {v} polls: write 1 to 10000 polls, or a duration (30s)"
                ))),
            }
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Debounce, E> {
            u64::try_from(v)
                .map_err(|_| {
                    E::custom(format!(
                        "debounce {v} polls: write 1 to 10000 polls, or a duration (30s)"
                    ))
                })
                .and_then(|v| self.visit_u64(v))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Debounce, E> {
            let d = humantime::parse_duration(v.trim()).map_err(|e| {
                E::custom(format!(
                    "{v:?} is not a debounce ({e}); write a number of polls (3) or a duration (30s)"
                ))
            })?;
            if d > Duration::from_secs(24 * 3600) {
                return Err(E::custom(format!("debounce {v} is over a day; write at most 24h")));
            }
            Ok(Debounce::For(d))
        }
    }
    d.deserialize_any(V)
}

/// A rule's name as a key of `health.rules`: one of the rules' reasons.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct RuleName(String);

impl<'de> Deserialize<'de> for RuleName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RuleName, D::Error> {
        let name = String::deserialize(d)?;
        if crate::model::health::RULE_REASONS.contains(&name.as_str()) {
            Ok(RuleName(name))
        } else {
            Err(serde::de::Error::custom(format!(
                "no health rule {name:?}; the rules are {}",
                crate::model::health::RULE_REASONS.join(", ")
            )))
        }
    }
}

fn rule_policies<'de, D: Deserializer<'de>>(d: D) -> Result<std::collections::BTreeMap<String, RulePolicy>, D::Error> {
    let written = std::collections::BTreeMap::<RuleName, RulePolicy>::deserialize(d)?;
    Ok(written.into_iter().map(|(k, v)| (k.0, v)).collect())
}

/// An XID code, or `all`, as a key of `health.xid_severity`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum XidKey {
    All,
    Code(u32),
}

impl<'de> Deserialize<'de> for XidKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<XidKey, D::Error> {
        struct Key;
        impl serde::de::Visitor<'_> for Key {
            type Value = XidKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an XID code (1 to 65535) or `all`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<XidKey, E> {
                match u32::try_from(v) {
                    Ok(code) if (1..=65535).contains(&code) => Ok(XidKey::Code(code)),
                    _ => Err(E::custom(format!(
                        "XID code {v} is out of range; XID codes are 1 to 65535"
                    ))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<XidKey, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("XID code {v} is out of range; XID codes are 1 to 65535")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<XidKey, E> {
                match v.trim() {
                    "all" => Ok(XidKey::All),
                    digits => match digits.parse::<u64>() {
                        Ok(n) => self.visit_u64(n),
                        Err(_) => Err(E::custom(format!(
                            "{v:?} is not an XID code; write a number (48) or `all`"
                        ))),
                    },
                }
            }
        }
        d.deserialize_any(Key)
    }
}

/// A severity as the operator writes it.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum SeverityName {
    Fatal,
    Critical,
    Warning,
    /// Counted (metrics, journal) with severity `info`; never a finding.
    Ignore,
}

/// `health.xid_severity` as written, every key once: `{48: fatal, "48": ignore}` names one
/// code twice, and which one wins would be a guess, so it is refused.
struct XidSeverities(Vec<(XidKey, SeverityName)>);

impl<'de> Deserialize<'de> for XidSeverities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<XidSeverities, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = XidSeverities;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of XID codes (or `all`) to fatal, critical, warning or ignore")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<XidSeverities, A::Error> {
                let mut entries: Vec<(XidKey, SeverityName)> = Vec::new();
                while let Some(key) = map.next_key::<XidKey>()? {
                    if entries.iter().any(|(seen, _)| *seen == key) {
                        let named = match key {
                            XidKey::All => "`all`".to_string(),
                            XidKey::Code(code) => format!("XID {code}"),
                        };
                        return Err(serde::de::Error::custom(format!(
                            "{named} is given twice in health.xid_severity (48 and \"48\" are one code); keep one"
                        )));
                    }
                    let value = map.next_value::<SeverityName>()?;
                    entries.push((key, value));
                }
                Ok(XidSeverities(entries))
            }
        }
        d.deserialize_map(Entries)
    }
}

fn xid_severity<'de, D: Deserializer<'de>>(d: D) -> Result<crate::model::xid::XidPolicy, D::Error> {
    use crate::model::xid::Severity;
    let written = XidSeverities::deserialize(d)?.0;
    let mut policy = crate::model::xid::XidPolicy::default();
    for (key, name) in written {
        let severity = match name {
            SeverityName::Fatal => Severity::Fatal,
            SeverityName::Critical => Severity::Critical,
            SeverityName::Warning => Severity::Warning,
            SeverityName::Ignore => Severity::Info,
        };
        match key {
            XidKey::All => policy.all = Some(severity),
            XidKey::Code(code) => {
                policy.codes.insert(code, severity);
            }
        }
    }
    Ok(policy)
}

/// The health journal (docs/journal.md): what happened to each GPU, kept on the node across
/// restarts and reboots.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct State {
    /// The SQLite database; "" turns the journal off.
    pub path: PathBuf,
    /// Rows older than this are deleted (hourly).
    #[serde(deserialize_with = "state_retention")]
    pub retention: Duration,
    /// The database's size cap in MiB: past it, the oldest rows go first.
    #[serde(deserialize_with = "state_max_size_mib")]
    pub max_size_mib: u64,
    /// Where the boot id is read: rows carry it, and a fatal XID holds its GPU for the rest of
    /// the boot it was seen in. Another file only for tests and chroots.
    pub boot_id_file: PathBuf,
}

/// Where the journal lives by default; systemd's `StateDirectory=gpuwarden` makes the directory.
pub const STATE_PATH: &str = "/var/lib/gpuwarden/state.db";

impl Default for State {
    fn default() -> Self {
        State {
            path: PathBuf::from(STATE_PATH),
            retention: Duration::from_secs(180 * 24 * 3600),
            max_size_mib: 64,
            boot_id_file: PathBuf::from("/proc/sys/kernel/random/boot_id"),
        }
    }
}

/// Metric names of other exporters, served beside gpuwarden's own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Compat {
    /// dcgm-exporter's `DCGM_FI_*` families, labels and units (docs/metrics.md).
    pub dcgm_exporter: bool,
}

/// NVLink series.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Nvlink {
    /// Series per link (state, errors, bytes: 108 per H200) beside the per-GPU totals; off by
    /// default, as dcgm-exporter's default fields are per GPU too.
    pub per_link: bool,
}

/// Pod attribution from the kubelet's pod-resources API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Kubernetes {
    /// The kubelet's pod-resources socket; the default path is used when it exists (so a node
    /// outside Kubernetes says nothing), a path set here is always asked; "" turns it off.
    pub pod_resources_socket: PathBuf,
    /// How often the kubelet is asked.
    #[serde(deserialize_with = "kubernetes_refresh")]
    pub refresh: Duration,
    /// Resource names that are GPUs; `prefix*` matches by prefix.
    pub resources: Vec<String>,
}

/// Where the kubelet serves its pod-resources API.
pub const KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

impl Default for Kubernetes {
    fn default() -> Self {
        Kubernetes {
            pod_resources_socket: PathBuf::from(KUBELET_SOCKET),
            refresh: Duration::from_secs(15),
            resources: ["nvidia.com/gpu", "nvidia.com/mig-*", "amd.com/gpu"]
                .map(String::from)
                .to_vec(),
        }
    }
}

impl Kubernetes {
    /// True when the socket is the default one (asked only where it exists).
    pub fn socket_is_default(&self) -> bool {
        self.pod_resources_socket == Path::new(KUBELET_SOCKET)
    }
}

/// The compute processes on each GPU.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Processes {
    /// Series per process (pid, name, container id) beside the count; off by default: pids
    /// come and go, and each is a series.
    pub per_process: bool,
    /// At most this many processes per GPU get series of their own, the largest users of
    /// device memory first.
    pub max_per_gpu: u32,
    /// Where /proc is: a container that mounts the host's /proc elsewhere sets it.
    pub proc_root: PathBuf,
}

impl Default for Processes {
    fn default() -> Self {
        Processes {
            per_process: false,
            max_per_gpu: 16,
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// Batch jobs per GPU from a job mapping directory (dcgm-exporter's layout).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HpcJobs {
    /// One file per GPU (its index or UUID), one job id per line; empty: off.
    pub mapping_dir: PathBuf,
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
            state: State::default(),
            health: Health::default(),
            local_api: LocalApi::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default, try_from = "RawPoll")]
pub struct Poll {
    /// How often every GPU is read.
    pub interval: Duration,
    /// How long one poll of one GPU may take before that GPU is reported as not answering
    /// (`gpu_up` 0) for this round. A call that hangs stalls only its own GPU.
    pub timeout: Duration,
    /// How often the slowly changing and costly readings are read (energy, ECC and remap
    /// counts, PCIe replays, clock-event time); at least `interval`.
    pub slow_interval: Duration,
    /// How often the NVLink error and byte counters (15 ms of driver CPU per read of an
    /// H200's 18 links), fabric registration and MIG mode are read. Read at the first poll
    /// after this much time.
    pub topology_interval: Duration,
    /// How often GPM activity is computed (2.3 ms of driver CPU per GPU on an H200); the
    /// values are averages over this interval.
    pub gpm_interval: Duration,
}

impl Default for Poll {
    fn default() -> Self {
        Poll {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            slow_interval: Duration::from_secs(10),
            topology_interval: Duration::from_secs(120),
            gpm_interval: Duration::from_secs(30),
        }
    }
}

/// `Poll` as written, before the checks that involve both keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawPoll {
    #[serde(deserialize_with = "poll_interval", serialize_with = "write_duration")]
    interval: Duration,
    #[serde(deserialize_with = "poll_timeout", serialize_with = "write_duration")]
    timeout: Duration,
    #[serde(deserialize_with = "poll_slow_interval", serialize_with = "write_duration")]
    slow_interval: Duration,
    #[serde(deserialize_with = "poll_topology_interval", serialize_with = "write_duration")]
    topology_interval: Duration,
    #[serde(deserialize_with = "poll_gpm_interval", serialize_with = "write_duration")]
    gpm_interval: Duration,
}

impl Default for RawPoll {
    fn default() -> Self {
        let p = Poll::default();
        RawPoll {
            interval: p.interval,
            timeout: p.timeout,
            slow_interval: p.slow_interval,
            topology_interval: p.topology_interval,
            gpm_interval: p.gpm_interval,
        }
    }
}

/// Why the poll section's durations do not go together.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("poll.interval is {0:?}; it must be at least 10ms")]
    IntervalTooShort(Duration),
    #[error("poll.timeout ({timeout:?}) must be more than 0 and at most poll.interval ({interval:?})")]
    Timeout { timeout: Duration, interval: Duration },
    #[error("poll.slow_interval ({slow:?}) must be at least poll.interval ({interval:?})")]
    SlowInterval { slow: Duration, interval: Duration },
}

impl TryFrom<RawPoll> for Poll {
    type Error = PollError;
    fn try_from(raw: RawPoll) -> Result<Self, PollError> {
        if raw.interval < Duration::from_millis(10) {
            return Err(PollError::IntervalTooShort(raw.interval));
        }
        if raw.timeout.is_zero() || raw.timeout > raw.interval {
            return Err(PollError::Timeout {
                timeout: raw.timeout,
                interval: raw.interval,
            });
        }
        if raw.slow_interval < raw.interval {
            return Err(PollError::SlowInterval {
                slow: raw.slow_interval,
                interval: raw.interval,
            });
        }
        Ok(Poll {
            interval: raw.interval,
            timeout: raw.timeout,
            slow_interval: raw.slow_interval,
            topology_interval: raw.topology_interval,
            gpm_interval: raw.gpm_interval,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Nvml {
    /// Set to false on nodes without NVIDIA GPUs to skip even looking for the library.
    pub enabled: bool,
    /// The NVML library to load: a file name searched the usual way, or a path.
    pub library_path: PathBuf,
    /// How long to wait before trying again when NVML cannot be loaded or initialised
    /// (no driver yet, or a driver reload); doubles up to `retry_max`.
    #[serde(deserialize_with = "nvml_retry", serialize_with = "write_duration")]
    pub retry_initial: Duration,
    #[serde(deserialize_with = "nvml_retry", serialize_with = "write_duration")]
    pub retry_max: Duration,
    /// Not from the file: the command polls once and exits (`check`), so it never tries again.
    #[serde(skip)]
    pub one_shot: bool,
}

impl Default for Nvml {
    fn default() -> Self {
        Nvml {
            enabled: true,
            // The unversioned libnvidia-ml.so comes only with development packages.
            library_path: PathBuf::from("libnvidia-ml.so.1"),
            retry_initial: Duration::from_secs(5),
            retry_max: Duration::from_secs(300),
            one_shot: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Persistence {
    /// Turn persistence mode on wherever a poll finds it off. gpuwarden never turns it off.
    pub enable: bool,
}

impl Default for Persistence {
    fn default() -> Self {
        Persistence { enable: true }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Xid {
    /// Count XIDs from the kernel log.
    pub read_kernel_log: bool,
    /// The kernel log: /dev/kmsg, or a file or FIFO that carries kernel-log lines.
    pub kernel_log_path: PathBuf,
    /// Count XIDs from NVML's event set.
    pub nvml_events: bool,
    /// Reports of the same XID on the same GPU from different sources within this window
    /// are one event.
    #[serde(deserialize_with = "xid_dedup_window", serialize_with = "write_duration")]
    pub dedup_window: Duration,
    /// How long a critical XID keeps its GPU `degraded`. Fatal XIDs keep it `unhealthy`
    /// until the daemon restarts (normally: until the node reboots).
    #[serde(deserialize_with = "xid_critical_hold", serialize_with = "write_duration")]
    pub critical_hold: Duration,
}

impl Default for Xid {
    fn default() -> Self {
        Xid {
            read_kernel_log: true,
            kernel_log_path: PathBuf::from("/dev/kmsg"),
            nvml_events: true,
            dedup_window: Duration::from_secs(10),
            critical_hold: Duration::from_secs(3600),
        }
    }
}

/// TLS and basic auth for the HTTP server.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Web {
    /// A web config file in the Prometheus exporter-toolkit format (tls_server_config,
    /// basic_auth_users); empty: plain HTTP without auth.
    pub config_file: PathBuf,
}

/// AMD GPUs, read from amdgpu's sysfs files.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Amd {
    /// Set to false on nodes without AMD GPUs to skip even looking.
    pub enabled: bool,
    /// Where sysfs is: `/` on a host; a copy of the tree for tests, or a container that
    /// mounts the host's /sys elsewhere.
    pub sysfs_root: PathBuf,
    pub rocm_smi: RocmSmi,
}

impl Default for Amd {
    fn default() -> Self {
        Amd {
            enabled: true,
            sysfs_root: PathBuf::from("/"),
            rocm_smi: RocmSmi::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RocmSmi {
    /// Read AMD GPUs through ROCm SMI when it is installed; sysfs alone otherwise.
    pub enabled: bool,
    /// The library: a file name searched the usual way, or a path.
    pub library_path: PathBuf,
}

impl Default for RocmSmi {
    fn default() -> Self {
        RocmSmi {
            enabled: true,
            library_path: PathBuf::from("librocm_smi64.so.1"),
        }
    }
}

/// The CUDA probe: `gpuwarden probe` and the scheduled probes of the daemon.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Probe {
    /// Run probes from the daemon. Off by default: a probe loads the GPU for about 15 s.
    pub schedule: bool,
    /// How often each GPU is probed when `schedule` is on.
    #[serde(deserialize_with = "probe_interval", serialize_with = "write_duration")]
    pub interval: Duration,
    /// The tests a probe runs, in this order.
    #[serde(deserialize_with = "probe_tests")]
    pub tests: Vec<crate::model::probe::Test>,
    /// How long each test runs; long enough for clocks and power to settle.
    pub durations: ProbeDurations,
    /// A test passes when it reaches at least this fraction of the expected value.
    #[serde(deserialize_with = "fraction")]
    pub pass_fraction: f64,
    /// Device memory the probe may allocate (MiB); buffer sizes shrink to fit. The CUDA
    /// context itself takes about 500 MiB more.
    #[serde(deserialize_with = "memory_cap_mib")]
    pub memory_cap_mib: u64,
    /// A GPU is probed only when its utilization is at most this (0..1) and it runs no
    /// compute process.
    #[serde(deserialize_with = "fraction")]
    pub max_utilization: f64,
    /// How often the GPU is sampled while a probe runs.
    #[serde(deserialize_with = "probe_sample_interval", serialize_with = "write_duration")]
    pub sample_interval: Duration,
    /// A scheduled probe that has not finished after this long is killed.
    #[serde(deserialize_with = "probe_timeout", serialize_with = "write_duration")]
    pub timeout: Duration,
    /// cuBLAS to load for the GEMM test: empty means search the usual names
    /// (libcublas.so.13, .12, ...); a path loads that file first.
    pub cublas_library: PathBuf,
    /// Expected values that override or extend the shipped table (docs/probe.md).
    pub expected: Vec<crate::model::probe::Expectation>,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            schedule: false,
            interval: Duration::from_secs(24 * 3600),
            tests: crate::model::probe::Test::ALL.to_vec(),
            durations: ProbeDurations::default(),
            pass_fraction: 0.9,
            memory_cap_mib: 4096,
            max_utilization: 0.05,
            sample_interval: Duration::from_millis(100),
            timeout: Duration::from_secs(120),
            cublas_library: PathBuf::new(),
            expected: Vec::new(),
        }
    }
}

/// How long each probe test runs.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeDurations {
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub gemm_bf16: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub fma_fp32: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub hbm_copy: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub pcie_h2d: Duration,
    #[serde(deserialize_with = "test_duration", serialize_with = "write_duration")]
    pub pcie_d2h: Duration,
}

impl Default for ProbeDurations {
    fn default() -> Self {
        ProbeDurations {
            // The GEMM runs longest: a power-capped board needs a while to settle (an H200
            // bursts to ~790 TFLOP/s for ~40 ms, then swings between ~665 and ~695), and the
            // sustained figure is taken over the second half of the run.
            gemm_bf16: Duration::from_secs(5),
            fma_fp32: Duration::from_secs(2),
            hbm_copy: Duration::from_secs(2),
            pcie_h2d: Duration::from_secs(2),
            pcie_d2h: Duration::from_secs(2),
        }
    }
}

impl ProbeDurations {
    pub fn of(&self, test: crate::model::probe::Test) -> Duration {
        use crate::model::probe::Test;
        match test {
            Test::GemmBf16 => self.gemm_bf16,
            Test::FmaFp32 => self.fma_fp32,
            Test::HbmCopy => self.hbm_copy,
            Test::PcieH2d => self.pcie_h2d,
            Test::PcieD2h => self.pcie_d2h,
        }
    }
}

/// Reads durations the way Prometheus configs write them: `500ms`, `1s`, `5m`.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "{text:?} is not a duration ({e}); write it like 500ms, 1s or 5m"
        ))
    })
}

/// Defines a deserializer for a duration key that must fall in a range: a duration of 0
/// where a period is meant spins, and one of centuries overflows the clock.
macro_rules! bounded_duration {
    ($name:ident, $key:literal, $min:expr, $max:expr) => {
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
            in_range(duration(d)?, $key, $min, $max)
        }
    };
}

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

bounded_duration!(poll_interval, "poll.interval", 10 * MS, HOUR);
bounded_duration!(poll_timeout, "poll.timeout", MS, HOUR);
bounded_duration!(poll_slow_interval, "poll.slow_interval", 10 * MS, DAY);
bounded_duration!(poll_topology_interval, "poll.topology_interval", 10 * MS, DAY);
bounded_duration!(poll_gpm_interval, "poll.gpm_interval", 10 * MS, DAY);
bounded_duration!(nvml_retry, "nvml.retry_initial and retry_max", 100 * MS, DAY);
bounded_duration!(xid_dedup_window, "xid.dedup_window", 100 * MS, HOUR);
bounded_duration!(xid_critical_hold, "xid.critical_hold", SECOND, 30 * DAY);
bounded_duration!(rule_hold, "health.rules.*.hold", Duration::ZERO, DAY);
bounded_duration!(probe_interval, "probe.interval", SECOND, 366 * DAY);
bounded_duration!(probe_sample_interval, "probe.sample_interval", 10 * MS, 10 * SECOND);
bounded_duration!(probe_timeout, "probe.timeout", SECOND, HOUR);
bounded_duration!(kubernetes_refresh, "kubernetes.refresh", SECOND, HOUR);
bounded_duration!(state_retention, "state.retention", HOUR, 10 * 366 * DAY);

fn in_range<E: serde::de::Error>(value: Duration, key: &str, min: Duration, max: Duration) -> Result<Duration, E> {
    if value < min || value > max {
        return Err(E::custom(format!(
            "{key} is {}; it must be from {} to {}",
            humantime::format_duration(value),
            humantime::format_duration(min),
            humantime::format_duration(max)
        )));
    }
    Ok(value)
}

/// Writes a duration the way `duration` reads it (the daemon hands its running probe
/// settings to `gpuwarden probe` as JSON).
fn write_duration<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*value).to_string())
}

/// A probe test's duration: long enough to measure (100ms), short enough not to hold the GPU (60s).
fn test_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let value = duration(d)?;
    if value < Duration::from_millis(100) || value > Duration::from_secs(60) {
        return Err(serde::de::Error::custom(format!(
            "a probe test runs from 100ms to 60s; {value:?} is outside that"
        )));
    }
    Ok(value)
}

/// A ratio from 0 to 1.
fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&value) {
        return Err(serde::de::Error::custom(format!(
            "{value} is not a fraction; write a number from 0 to 1 (0.9 means 90%)"
        )));
    }
    Ok(value)
}

fn memory_cap_mib<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let value = u64::deserialize(d)?;
    if value < 256 {
        return Err(serde::de::Error::custom(format!(
            "memory_cap_mib is {value}; the smallest buffers the probe measures with need 256 MiB"
        )));
    }
    Ok(value)
}

fn state_max_size_mib<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let value = u64::deserialize(d)?;
    if !(1..=1024 * 1024).contains(&value) {
        return Err(serde::de::Error::custom(format!(
            "state.max_size_mib is {value}; it must be from 1 to 1048576 (a year of a busy node takes a few MiB)"
        )));
    }
    Ok(value)
}

fn probe_tests<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<crate::model::probe::Test>, D::Error> {
    let tests = Vec::<crate::model::probe::Test>::deserialize(d)?;
    if tests.is_empty() {
        return Err(serde::de::Error::custom(
            "probe.tests is empty; list at least one of gemm_bf16, fma_fp32, hbm_copy, pcie_h2d, pcie_d2h",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for test in &tests {
        if !seen.insert(*test) {
            return Err(serde::de::Error::custom(format!("{} is listed twice", test.name())));
        }
    }
    Ok(tests)
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

impl Config {
    /// Parses YAML text; `file` is only used to name the source in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
        // Strict booleans: `yes`/`no`/`on`/`off` are strings, not booleans, so
        // `enable: off` is an error rather than a silent surprise.
        let options = serde_saphyr::options! { strict_booleans: true };
        // An empty file means all defaults.
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let config = serde_saphyr::from_str_with_options::<Config>(text, options).map_err(|e| {
            let location = e.location();
            let (message, snippet) = split_rendered(e.render().trim(), file);
            ConfigError {
                file: file.to_path_buf(),
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
                message,
                snippet,
            }
        })?;
        config.check_debounce_spans(text, file)?;
        Ok(config)
    }

    /// One bound for both forms of a debounce: N polls at `poll.interval` span at most a day,
    /// as a duration does (10000 polls at 1h would be over a year).
    fn check_debounce_spans(&self, text: &str, file: &Path) -> Result<(), ConfigError> {
        for (name, rule) in &self.health.rules {
            if let Debounce::Polls(n) = rule.debounce {
                let span = rule.debounce.span(self.poll.interval);
                if span > DAY {
                    let at = key_position(text, "health", name);
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
        Config::parse(&text, file)
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
        let nvlink = &c.health.rules["nvlink_down"];
        assert_eq!(nvlink.debounce, Debounce::Polls(3));
        assert_eq!(nvlink.hold, Duration::from_secs(300));
        assert_eq!(nvlink.debounce.span(Duration::from_secs(1)), Duration::from_secs(2));
        assert_eq!(
            c.health.rules["thermal_slowdown"].debounce,
            Debounce::For(Duration::from_secs(30))
        );
        assert_eq!(c.health.rules["thermal_slowdown"].hold, Duration::ZERO);
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
