//! The health verdict of one GPU and the findings behind it. The rules live in
//! src/health.rs; the verdict is computed once per snapshot and carried in it, so /metrics,
//! the status page, `check` and systemd's STATUS line all show the same thing.

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    #[default]
    Ok,
    Degraded,
    Unhealthy,
}

impl HealthState {
    pub const ALL: [HealthState; 3] = [HealthState::Ok, HealthState::Degraded, HealthState::Unhealthy];

    pub fn label(self) -> &'static str {
        match self {
            HealthState::Ok => "ok",
            HealthState::Degraded => "degraded",
            HealthState::Unhealthy => "unhealthy",
        }
    }

    /// A finding's word for its severity: a finding that leaves the verdict ok is a notice.
    pub fn finding_label(self) -> &'static str {
        match self {
            HealthState::Ok => "notice",
            other => other.label(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable machine name, used as the `reason` label of `gpu_health_reason`.
    pub reason: Reason,
    pub severity: HealthState,
    /// What was seen and what to do, for a person.
    pub message: String,
    /// What a node finding is about, where there can be several of one reason: a network
    /// port (`mlx5_0/1`), a GPU's PCI address. `None` for a GPU's own findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// One GPU's verdict and its findings, as computed for the snapshot that carries it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceHealth {
    pub state: HealthState,
    pub findings: Vec<Finding>,
    /// What to do next about an unhealthy GPU (`remediation.mode: advise`; health/ladder.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_step: Option<NextStep>,
}

/// A step of the remediation ladder: the `step` label of `gpu_remediation_next_step`, the
/// word in `gpuwarden health` and the journal's rows. Ordered weakest first: a reboot does
/// what a reset does and more, and a person's service is past both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Drain the GPU's jobs and reset it (automatic remediation takes this one itself).
    GpuReset,
    /// The node needs a reboot: a reset did not or cannot mend it.
    RebootRequired,
    /// A person: reseat, replace, RMA.
    Service,
}

impl Step {
    pub const ALL: [Step; 3] = [Step::GpuReset, Step::RebootRequired, Step::Service];

    pub fn label(self) -> &'static str {
        match self {
            Step::GpuReset => "gpu_reset",
            Step::RebootRequired => "reboot_required",
            Step::Service => "service",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// What to do about a GPU off the bus, said once: the XID catalog's advice for Xid 79
/// (RESTART_BM, xid/catalog.rs) and the `gpu_lost` rule's action are this text, so the
/// finding, the next step, the page and the report say the same.
pub const OFF_THE_BUS_ACTION: &str = "drain the node and reboot it (a GPU off the bus answers no reset); if it falls off again, reseat it, check the slot and riser, and open a case with the vendor";

/// The remediation ladder's next step for an unhealthy GPU.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct NextStep {
    pub step: Step,
    /// Why, from the driver's recovery action, the XID catalog or the finding.
    pub why: String,
    /// The command that does it, where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl NextStep {
    /// The step as `health`, the status page and the alerts say it: `gpu_reset: why;
    /// \`command\` once its jobs are off it`.
    pub fn describe(&self) -> String {
        let command = self
            .command
            .as_ref()
            .map(|c| format!("; `{c}` once its jobs are off it"))
            .unwrap_or_default();
        format!("{}: {}{command}", self.step, self.why)
    }
}

/// The operator's thresholds the rules read (config `xid.critical_hold` and `health.*`),
/// carried by the snapshot they were applied to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    /// How long a critical XID keeps its GPU degraded.
    pub critical_hold: std::time::Duration,
    /// `health.temperature_margin_c`: the headroom below slowdown that makes a GPU degraded.
    pub temperature_margin: Option<f64>,
    /// `health.error_rates`.
    pub error_rates: ErrorRateLimits,
    /// `network`: the thresholds of the network ports' rules.
    pub network: NetworkLimits,
    /// `health.validate_after_clear`: a clear or a board swap starts a validation.
    pub validate_after_clear: bool,
    /// `probe.regression_pct` and `probe.baseline_probes`: when a probe counts as regressed.
    pub probe_regression: ProbeRegression,
    /// `remediation.mode` advise or auto: what the ladder words its steps with; None: off.
    pub remediation: Option<LadderLimits>,
}

/// What the remediation ladder needs of the config (health/ladder.rs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LadderLimits {
    /// The GPU reset's words, `{pci_bus_id}` in them (`remediation.reset_command`).
    pub reset_command: Vec<String>,
    /// `remediation.max_resets_per_day`: past it, a GPU's step is a reboot.
    pub max_resets_per_day: u32,
    /// `remediation.mode: auto`: gpuwarden acts on the steps (its families are served).
    pub auto: bool,
}

/// When a probe's figure counts as regressed (`probe_regressed`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProbeRegression {
    /// Percent below a reference.
    pub pct: f64,
    /// How many earlier probes make the GPU's own baseline.
    pub baseline_probes: usize,
}

/// An error counter whose growth the operator can put a limit on (`health.error_rates`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCounter {
    /// Corrected (single-bit) ECC errors, volatile (since the driver loaded).
    EccCorrected,
    /// NVLink CRC, replay and recovery errors, summed over the GPU's links.
    Nvlink,
    /// PCIe replays (the link retransmitted a packet).
    PcieReplay,
}

impl ErrorCounter {
    pub const ALL: [ErrorCounter; 3] = [
        ErrorCounter::EccCorrected,
        ErrorCounter::Nvlink,
        ErrorCounter::PcieReplay,
    ];

    /// Its key under `health.error_rates`.
    pub fn key(self) -> &'static str {
        match self {
            ErrorCounter::EccCorrected => "ecc_corrected",
            ErrorCounter::Nvlink => "nvlink",
            ErrorCounter::PcieReplay => "pcie_replay",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// The operator's limits on error counters: more errors than this within the last hour make
/// the GPU degraded. `None` (the default) for a counter: no such finding.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ErrorRateLimits {
    pub ecc_corrected: Option<u64>,
    pub nvlink: Option<u64>,
    pub pcie_replay: Option<u64>,
}

impl ErrorRateLimits {
    pub fn get(&self, counter: ErrorCounter) -> Option<u64> {
        match counter {
            ErrorCounter::EccCorrected => self.ecc_corrected,
            ErrorCounter::Nvlink => self.nvlink,
            ErrorCounter::PcieReplay => self.pcie_replay,
        }
    }
}

/// How much a counter grew within the last hour, as far as the daemon has watched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Growth {
    pub errors: u64,
    /// Since when it was counted: an hour, or less after a start or a counter reset.
    pub over: std::time::Duration,
}

/// What the health stage remembers of one GPU across rounds and writes into each round's
/// snapshot (`health::memory::HealthMemory::note_round`). A rule that needs history reads it
/// here; the poll loop hands over an empty one, so a new piece of history is a field here and
/// its tracker in health/, nothing in the poller.
#[derive(Debug, Clone, Default)]
pub struct GpuHistory {
    /// When a hardware power slowdown (`HW_POWER_REASONS`) was last seen, active or as growth
    /// of its driver counter.
    pub hw_slowdown_seen: Option<std::time::Instant>,
    /// How its error counters grew within the last hour.
    pub error_growth: ErrorGrowth,
    /// How often each clock-event reason became active since the daemon started, and within
    /// the last `xid::RECENT_WINDOW`.
    pub clock_event_starts: Vec<crate::model::ClockEventStarts>,
    /// How long its clocks were slowed for temperature within the last hour, by the driver's
    /// counters; `None` where the GPU does not count it.
    pub thermal_slowdown: Option<ThermalTime>,
}

/// Time a GPU's clocks were slowed, and over how long it was counted (an hour, or less after
/// a start, a counter reset or a clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThermalTime {
    pub slowed: std::time::Duration,
    pub over: std::time::Duration,
}

/// Each [`ErrorCounter`]'s growth on one GPU; `None` where the GPU does not count it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorGrowth([Option<Growth>; 3]);

impl ErrorGrowth {
    pub fn get(&self, counter: ErrorCounter) -> Option<Growth> {
        self.0[counter.slot()]
    }
    pub fn set(&mut self, counter: ErrorCounter, growth: Option<Growth>) {
        self.0[counter.slot()] = growth;
    }
}

/// An operator's "repaired, count it healthy again" for one GPU (`gpuwarden health clear`):
/// findings held from before `at` (XIDs, a failed probe, a hardware slowdown's window, error
/// counts, a rule's hold) no longer count; what still holds comes back at the next poll.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Clear {
    /// Unix seconds.
    pub at: f64,
    pub reason: String,
    /// Who asked: "uid 0, pid 4242 (bash)".
    pub by: String,
}

impl Clear {
    pub fn time(&self) -> std::time::SystemTime {
        super::from_unix_seconds(self.at)
    }
}

/// The latest clear per GPU UUID.
pub type Clears = std::collections::BTreeMap<String, Clear>;

/// A different GPU (another UUID) found in a slot where the journal knew another: the board
/// was replaced. Kept by UUID of the new board.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BoardSwap {
    /// Unix seconds: when the journal first saw the new board.
    pub at: f64,
    pub previous_uuid: String,
    pub previous_serial: Option<String>,
}

/// The board swaps of the last [`BOARD_SWAP_NOTICE`], by the new board's UUID.
pub type BoardSwaps = std::collections::BTreeMap<String, BoardSwap>;

/// The boards the journal knew when the daemon started: a board found at one of these
/// addresses that the journal never saw is a swap it has yet to record, and is kept out of
/// service from the first snapshot (health/mod.rs), not from the journal's first look.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KnownBoards {
    /// Every UUID the journal has facts for.
    pub uuids: std::collections::BTreeSet<String>,
    /// The PCI addresses the journal knew a board at (each board's last address).
    pub addresses: std::collections::BTreeSet<String>,
}

impl KnownBoards {
    /// Whether `uuid` at `pci_bus_id` is a board the journal never saw, in a slot where it
    /// knew another: the journal's writer will record it as a board swap.
    pub fn is_unrecorded_swap(&self, uuid: &str, pci_bus_id: &str) -> bool {
        !pci_bus_id.is_empty() && !self.uuids.contains(uuid) && self.addresses.contains(pci_bus_id)
    }
}

/// How long a board swap is a notice in the verdict (`board_replaced`).
pub const BOARD_SWAP_NOTICE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A GPU that must pass a probe before it counts as in service again
/// (`health.validate_after_clear`, docs/health.md "Return to service"): after an operator
/// cleared it of an unhealthy finding, or after a new board was found in its slot. Kept by
/// UUID; the journal keeps each change (`validation` rows), so a restart or a reboot does not
/// let a GPU skip it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Validation {
    /// Unix seconds: only a probe started at or after this counts.
    pub since: f64,
    /// Why it is validated, for a person: "cleared by uid 0 ...: reseated", "board replaced".
    pub why: String,
    /// What the first probe after `since` came to; None while it is awaited.
    pub outcome: Option<ValidationOutcome>,
    /// After a repair (unhealthy until it passes), or part of a scheduled validation of the
    /// idle node (its node `validating`, no GPU finding while it is awaited).
    #[serde(default)]
    pub kind: ValidationKind,
}

/// Why a GPU is validated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValidationKind {
    /// After a clear of an unhealthy GPU, or a new board: the GPU is unhealthy until it passes.
    #[default]
    Repair,
    /// The idle node's scheduled validation (`probe.mode: node`): the node is kept out of new
    /// work while it runs, and a job that starts ends it.
    Sweep,
}

/// How a validation ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ValidationOutcome {
    /// The probe passed: back in service.
    Passed { at: f64, detail: String },
    /// The probe failed (a test short of its expected figure, a CUDA error, a probe that
    /// hung): unhealthy again until the next clear.
    Failed { at: f64, detail: String },
    /// An operator let the GPU back without a probe (`health clear --skip-validation`).
    Skipped { at: f64, detail: String },
}

impl ValidationOutcome {
    pub fn label(&self) -> &'static str {
        match self {
            ValidationOutcome::Passed { .. } => "passed",
            ValidationOutcome::Failed { .. } => "failed",
            ValidationOutcome::Skipped { .. } => "skipped",
        }
    }
    pub fn detail(&self) -> &str {
        match self {
            ValidationOutcome::Passed { detail, .. }
            | ValidationOutcome::Failed { detail, .. }
            | ValidationOutcome::Skipped { detail, .. } => detail,
        }
    }
}

impl Validation {
    /// Still waiting for its probe: the GPU is kept out of service.
    pub fn pending(&self) -> bool {
        self.outcome.is_none()
    }
    /// Its probe failed: the GPU is unhealthy until the next clear.
    pub fn failed(&self) -> Option<&str> {
        match &self.outcome {
            Some(ValidationOutcome::Failed { detail, .. }) => Some(detail),
            _ => None,
        }
    }
    /// Its state's word: pending, passed, failed or skipped.
    pub fn state(&self) -> &'static str {
        self.outcome.as_ref().map_or("pending", ValidationOutcome::label)
    }
}

/// Every GPU's latest validation, by UUID.
pub type Validations = std::collections::BTreeMap<String, Validation>;

/// `network.expected_rate_gbps`: the rate a port should run at per link layer, in Gb/s.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExpectedRates {
    pub infiniband: Option<f64>,
    pub ethernet: Option<f64>,
}

impl ExpectedRates {
    /// The rate set for `link_layer` (`infiniband`, `ethernet`).
    pub fn get(&self, link_layer: &str) -> Option<f64> {
        match link_layer {
            "infiniband" => self.infiniband,
            "ethernet" => self.ethernet,
            _ => None,
        }
    }
}

/// The operator's thresholds for the network rules (config `network`), carried by the
/// snapshot they were applied to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetworkLimits {
    pub expected_ports: Option<u32>,
    pub expected_rate: ExpectedRates,
    pub flaps: u32,
    pub flap_window: std::time::Duration,
    pub symbol_errors_per_hour: u64,
    /// Devices not judged.
    pub ignore: Vec<String>,
}

crate::model::label::label_enum! {
    /// Every health rule by its reason (the `reason` label of `gpu_health_reason`), in the rule
    /// table's order: the one list of rule names, which the config's `health.rules` keys are
    /// checked against and each row of `health::rules` is named by (a test holds the two equal).
    pub enum RuleId {
        XidFatal => "xid_fatal",
        XidCritical => "xid_critical",
        RecoveryAction => "recovery_action",
        Validating => "validating",
        Remediating => "remediating",
        GpuLost => "gpu_lost",
        NotResponding => "not_responding",
        ThermalSlowdown => "thermal_slowdown",
        ThermalSlowdownTime => "thermal_slowdown_time",
        TemperatureNearSlowdown => "temperature_near_slowdown",
        HwSlowdown => "hw_slowdown",
        PcieWidthDegraded => "pcie_width_degraded",
        PcieReplayRate => "pcie_replay_rate",
        PersistenceOff => "persistence_off",
        VgpuUnlicensed => "vgpu_unlicensed",
        EccUncorrectable => "ecc_uncorrectable",
        EccCorrectedRate => "ecc_corrected_rate",
        RowRemapPending => "row_remap_pending",
        RowRemapFailed => "row_remap_failed",
        NvlinkDown => "nvlink_down",
        NvlinkErrorRate => "nvlink_error_rate",
        FabricNotReady => "fabric_not_ready",
        ProbeFailed => "probe_failed",
        ProbeRegressed => "probe_regressed",
        SdcSuspect => "sdc_suspect",
        HbmPatternErrors => "hbm_pattern_errors",
        BoardReplaced => "board_replaced",
        GpuMissing => "gpu_missing",
        NvswitchSxidFatal => "nvswitch_sxid_fatal",
        FabricManagerDown => "fabric_manager_down",
        RebootRequired => "reboot_required",
        CollectiveFailed => "collective_failed",
        CollectiveSlow => "collective_slow",
        NicPortFlapping => "nic_port_flapping",
        NicPortDown => "nic_port_down",
        NicRateLow => "nic_rate_low",
        NicLinkErrors => "nic_link_errors",
        NicSymbolErrors => "nic_symbol_errors",
        NicPcieNarrowed => "nic_pcie_narrowed",
        NicPortsMissing => "nic_ports_missing",
    }
}

/// Why a finding was made: one of the built-in rules, or one of the operator's own rules
/// (`health.custom_rules`, src/custom_rules) by its name. Both show the same way, as the
/// `reason` label, in the journal and to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    Rule(RuleId),
    Custom(CustomName),
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Rule(rule) => rule.label(),
            Reason::Custom(name) => name.0,
        }
    }

    /// The built-in rule, for a finding one of them made.
    pub fn rule(self) -> Option<RuleId> {
        match self {
            Reason::Rule(rule) => Some(rule),
            Reason::Custom(_) => None,
        }
    }

    /// Whether it is a network port's finding (only built-in rules judge ports by name).
    pub fn is_network(self) -> bool {
        self.rule().is_some_and(RuleId::is_network)
    }

    /// Its text, kept for as long as the daemon runs: a custom rule's name is interned.
    pub fn as_str(self) -> &'static str {
        self.label()
    }
}

impl From<RuleId> for Reason {
    fn from(rule: RuleId) -> Reason {
        Reason::Rule(rule)
    }
}

impl PartialEq<RuleId> for Reason {
    fn eq(&self, other: &RuleId) -> bool {
        *self == Reason::Rule(*other)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

/// One of the operator's rules as /metrics shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomRuleStatus {
    pub name: String,
    /// `gpu`, `port` or `node`.
    pub scope: &'static str,
    /// Why it no longer runs, once it failed at run time.
    pub disabled: Option<String>,
    pub evaluations: u64,
    /// The time its evaluations took, in all.
    pub seconds: f64,
}

/// An operator rule's name, interned so that a finding stays `Copy` like a built-in one's.
/// Each distinct name is kept once for the daemon's life: names are short (48 bytes at most)
/// and few (the config takes at most `MAX_CUSTOM_RULES` at a time), so what a long run of
/// reloads with new names keeps is bounded by [`CustomName::MAX_INTERNED`]; past it a name
/// is refused at config check, never leaked without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CustomName(&'static str);

impl CustomName {
    /// The most distinct names one run keeps.
    pub const MAX_INTERNED: usize = 4096;

    /// The name, interned; `None` once [`Self::MAX_INTERNED`] other names were.
    pub fn intern(name: &str) -> Option<CustomName> {
        use std::collections::HashSet;
        use std::sync::{Mutex, OnceLock, PoisonError};
        static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
        let mut names = NAMES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = names.get(name) {
            return Some(CustomName(known));
        }
        if names.len() >= Self::MAX_INTERNED {
            return None;
        }
        let kept: &'static str = Box::leak(name.to_string().into_boxed_str());
        names.insert(kept);
        Some(CustomName(kept))
    }

    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl RuleId {
    /// Whether the rule is about the node's network ports (its findings' subject is a port,
    /// or the node for the ports that are missing).
    pub fn is_network(self) -> bool {
        use RuleId::*;
        matches!(
            self,
            NicPortDown
                | NicRateLow
                | NicPortFlapping
                | NicLinkErrors
                | NicSymbolErrors
                | NicPcieNarrowed
                | NicPortsMissing
        )
    }
}
