//! The health rules, one row each: its reason (the `reason` label), its severity, the
//! condition in words and what to do (docs/health.md's table is these rows; a test holds the
//! two equal), and the check over one GPU's part of a snapshot.
//!
//! Rows are looked at in order. XIDs come first: they explain the rest (a GPU that fell off
//! the bus is also not answering). A row that `ends` stops the look when it fires: a lost GPU
//! is not also "not responding", and a GPU that did not answer has no readings to judge.
//! The next step (operator policy) makes severities and thresholds configurable from here.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `driver.rs` | What the driver says of the GPU: persistence mode, the vGPU licence, its recovery action |
//! | `lifecycle.rs` | Where a GPU is in its life rather than what it reads: being reset, lost, not answering, awaiting its validation, or a new board in its slot |
//! | `memory.rs` | GPU memory: uncorrectable and corrected ECC, and row remapping |
//! | `nvlink.rs` | NVLink: error counters growing, links down, and the GPU outside its NVLink fabric |
//! | `pcie.rs` | The PCIe link: a narrower width than the slot's, and replays growing |
//! | `probe.rs` | The probe: a failed test, and figures below the GPU's baseline or its neighbours' |
//! | `thermal.rs` | Temperature and clocks: slowed for heat now or for a share of the last hour, near its slowdown threshold, and hardware power slowdowns |
//! | `xid.rs` | The XID rows: fatal and critical XIDs as the operator's policy counts them |
//! <!-- /files -->

use crate::model::clock_events::{ClockReason, HW_POWER_REASONS, THERMAL_REASONS};
use crate::model::health::RuleId;
use crate::model::health::{BOARD_SWAP_NOTICE, ErrorCounter, HealthState};
use crate::model::xid::{Severity, XidCount};
use crate::model::{DeviceReadings, EccScope, EccType, Threshold};
use crate::xid::catalog;
use std::time::Duration;

/// A hardware power slowdown keeps the GPU degraded this long after it was last seen, so
/// one that comes and goes between scrapes is not missed, and frequent ones stay visible.
pub(crate) const HW_SLOWDOWN_WINDOW: Duration = Duration::from_secs(600);
/// The share of the last hour a GPU's clocks may spend slowed for temperature before
/// `thermal_slowdown_time` finds it: six minutes an hour is a cooling problem, not a hot day.
pub(crate) const THERMAL_TIME_SHARE: f64 = 0.10;
/// The least time counted before that share means anything (after a start or a clear, one
/// minute of slowdown in the first two would be half).
pub(crate) const THERMAL_TIME_LEAST: Duration = Duration::from_secs(600);

pub(crate) use super::table::{Check, Hit, Resetting, Rule, Seen, StepAdvice};
use crate::model::health::Step;

mod driver;
mod lifecycle;
mod memory;
mod nvlink;
mod pcie;
mod probe;
mod thermal;
mod xid;

use driver::*;
use lifecycle::*;
use memory::*;
use nvlink::*;
use pcie::*;
use probe::*;
use thermal::*;
use xid::*;

/// Several things seen, or none: `None` for an empty list.
pub(super) fn listed(items: Vec<String>, hit: impl FnOnce(String) -> Hit) -> Option<Hit> {
    (!items.is_empty()).then(|| hit(items.join("; ")))
}

/// "412 corrected ECC errors in the last 60 min (health.error_rates.ecc_corrected is 100
/// an hour)": more of the counter's errors within the last hour than the operator allows.
pub(super) fn error_rate(seen: &Seen, counter: ErrorCounter, what: &str) -> Option<Hit> {
    let limit = seen.limits.error_rates.get(counter)?;
    let growth = seen
        .device
        .history
        .error_growth
        .get(counter)
        .filter(|g| g.errors > limit)?;
    Some(
        format!(
            "{} {what} in the last {} min (health.error_rates.{} is {limit} an hour)",
            growth.errors,
            growth.over.as_secs().div_ceil(60).max(1),
            counter.key()
        )
        .into(),
    )
}

use HealthState::{Degraded, Ok as Notice, Unhealthy};

/// The rule named `reason`: how the config's `health.rules` keys and the debouncer find
/// their rule (the table is the one list of names).
pub(crate) fn named(reason: RuleId) -> Option<&'static Rule> {
    all().find(|rule| rule.reason == reason)
}

/// Every rule: the GPUs', then the node's.
fn all() -> impl Iterator<Item = &'static Rule> {
    RULES
        .iter()
        .chain([
            &GPU_MISSING,
            &super::nvswitch::SXID_FATAL,
            &super::nvswitch::FABRIC_MANAGER_DOWN,
            &REBOOT_REQUIRED,
            &super::collective::COLLECTIVE_FAILED,
            &super::collective::COLLECTIVE_SLOW,
        ])
        .chain(super::network::PORT_RULES)
        .chain([&super::network::PORTS_MISSING])
}

/// Every rule about one GPU, in the order they are looked at.
pub(crate) const RULES: &[Rule] = &[
    Rule {
        reason: RuleId::XidFatal,
        severity: Unhealthy,
        worse_when: None,
        when: "a fatal XID (see below) was seen on the GPU since boot",
        action: "what NVIDIA's catalog says for the code (the finding quotes it; `gpuwarden xid explain CODE`); the next step is gpuwarden's advice",
        ends: false,
        dcgm: Some(("DRIVER", "DCGM_FR_XID_ERROR")),
        step: StepAdvice::FromXid,
        source: "NVIDIA's Xid catalog: the code's resolution bucket (immediate action)",
        check: Check::Device(xid_fatal),
    },
    Rule {
        reason: RuleId::XidCritical,
        severity: Degraded,
        worse_when: None,
        when: "a critical XID was seen within `xid.critical_hold` (1h)",
        action: "the XID's action; watch whether it recurs",
        ends: false,
        dcgm: Some(("DRIVER", "DCGM_FR_XID_ERROR")),
        step: StepAdvice::None,
        source: "NVIDIA's Xid catalog: the code's resolution bucket",
        check: Check::Device(xid_critical),
    },
    Rule {
        reason: RuleId::RecoveryAction,
        severity: Degraded,
        worse_when: Some("the driver asks for a node reboot"),
        when: "the driver says the GPU needs a recovery action: a GPU reset, a drain and reset, or a drain of peer-to-peer jobs (`gpu_recovery_action`; read every `poll.slow_interval`)",
        action: "what the driver asks: reset the GPU once its jobs are off it; when it asks for a node reboot, drain the node and reboot it",
        ends: false,
        // DCGM's health watches do not read the driver's recovery action (DCGM #263).
        dcgm: None,
        step: StepAdvice::FromDriver,
        source: "the driver's recovery action (NVML field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
        check: Check::Readings(recovery_action),
    },
    VALIDATING,
    Rule {
        reason: RuleId::Remediating,
        severity: Degraded,
        worse_when: Some("it is the GPU being reset"),
        when: "automatic remediation (`remediation.mode: auto`) is resetting the GPU, from the decision until its validation starts; or, for the node's other NVIDIA GPUs, NVML is let go of for that reset and they are not polled meanwhile",
        action: "none: the reset runs, then the GPU's validation (`validating`) keeps it out of service until a probe passes",
        ends: true,
        dcgm: None,
        step: StepAdvice::None,
        source: "gpuwarden's automatic remediation",
        check: Check::Device(remediating),
    },
    GPU_LOST,
    Rule {
        reason: RuleId::NotResponding,
        severity: Degraded,
        worse_when: None,
        when: "the last poll did not finish within `poll.timeout` (a hung driver call)",
        action: "check `dmesg` for Xid errors; if it persists, reset the GPU when it is idle",
        ends: true,
        dcgm: Some(("DRIVER", "DCGM_FR_NVML_API")),
        step: StepAdvice::None,
        source: "DCGM: DCGM_FR_NVML_API",
        check: Check::Device(not_responding),
    },
    Rule {
        reason: RuleId::ThermalSlowdown,
        severity: Degraded,
        worse_when: None,
        when: "`sw_thermal_slowdown` or `hw_thermal_slowdown` is active",
        action: "check airflow, fans and inlet temperature",
        ends: false,
        dcgm: Some(("THERMAL", "DCGM_FR_CLOCK_THROTTLE_THERMAL")),
        step: StepAdvice::None,
        source: "NVML's clock-event reasons; DCGM: DCGM_FR_CLOCK_THROTTLE_THERMAL",
        check: Check::Readings(thermal_slowdown),
    },
    Rule {
        reason: RuleId::ThermalSlowdownTime,
        severity: Degraded,
        worse_when: None,
        when: "the clocks were slowed for temperature (`sw_thermal_slowdown` or `hw_thermal_slowdown`, by the driver's time counters) for a tenth or more of the last hour, counted over 10 minutes at least",
        action: "check airflow, fans, inlet temperature and the heatsink's contact: the GPU runs slower than it should",
        ends: false,
        dcgm: Some(("THERMAL", "DCGM_FR_CLOCK_THROTTLE_THERMAL")),
        step: StepAdvice::None,
        source: "NVML's clock-event time counters; DCGM: DCGM_FR_CLOCK_THROTTLE_THERMAL",
        check: Check::Readings(thermal_slowdown_time),
    },
    Rule {
        reason: RuleId::TemperatureNearSlowdown,
        severity: Degraded,
        worse_when: None,
        when: "the die is within `health.temperature_margin_c` of its slowdown temperature (off unless set)",
        action: "check airflow, fans and inlet temperature before the clocks come down",
        ends: false,
        dcgm: Some(("THERMAL", "DCGM_FR_TEMP_VIOLATION")),
        step: StepAdvice::None,
        source: "DCGM: DCGM_FR_TEMP_VIOLATION",
        check: Check::Readings(temperature_near_slowdown),
    },
    Rule {
        reason: RuleId::HwSlowdown,
        severity: Degraded,
        worse_when: None,
        when: "the hardware pulled the clocks down for power (`hw_slowdown` or `hw_power_brake_slowdown`): active now, or its driver counter grew, within the last 10 minutes (so one between scrapes, or frequent short ones, are seen)",
        action: "check the power supplies, the GPU's power cables and the board",
        ends: false,
        dcgm: Some(("POWER", "DCGM_FR_CLOCK_THROTTLE_POWER")),
        step: StepAdvice::None,
        source: "NVML's clock-event reasons; DCGM: DCGM_FR_CLOCK_THROTTLE_POWER",
        check: Check::Readings(hw_slowdown),
    },
    Rule {
        reason: RuleId::PcieWidthDegraded,
        severity: Degraded,
        worse_when: None,
        when: "current PCIe width below the max",
        action: "reseat the GPU or check the riser and slot",
        ends: false,
        dcgm: Some(("PCIE", "DCGM_FR_PCIE_WIDTH")),
        step: StepAdvice::None,
        source: "DCGM: DCGM_FR_PCIE_WIDTH",
        check: Check::Readings(pcie_width_degraded),
    },
    Rule {
        reason: RuleId::PcieReplayRate,
        severity: Degraded,
        worse_when: None,
        when: "more PCIe replays within the last hour than `health.error_rates.pcie_replay` (off unless set)",
        action: "the link is retransmitting: reseat the GPU, check the riser and slot",
        ends: false,
        dcgm: Some(("PCIE", "DCGM_FR_PCI_REPLAY_RATE")),
        step: StepAdvice::None,
        source: "DCGM: DCGM_FR_PCI_REPLAY_RATE",
        check: Check::Readings(pcie_replay_rate),
    },
    Rule {
        reason: RuleId::PersistenceOff,
        severity: Degraded,
        worse_when: None,
        when: "persistence mode is off (and gpuwarden could not, or was told not to, turn it on)",
        action: "enable it (`nvidia-smi -pm 1`, or nvidia-persistenced; gpuwarden turns it on when it runs as root and `persistence.enable` is on)",
        ends: false,
        dcgm: Some(("DRIVER", "DCGM_FR_PERSISTENCE_MODE")),
        step: StepAdvice::None,
        source: "NVIDIA's driver persistence guide; DCGM: DCGM_FR_PERSISTENCE_MODE",
        check: Check::Readings(persistence_off),
    },
    Rule {
        reason: RuleId::VgpuUnlicensed,
        severity: Degraded,
        worse_when: None,
        when: "in a vGPU guest, the vGPU holds no licence (`gpu_vgpu_licensed` 0; read every `poll.slow_interval`)",
        action: "check that the licence server is reachable and the client configuration token is in place (`nvidia-smi -q` shows the licence status; nvidia-gridd's log says why); `systemctl restart nvidia-gridd`",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "NVIDIA's vGPU licensing guide",
        check: Check::Readings(vgpu_unlicensed),
    },
    Rule {
        reason: RuleId::EccUncorrectable,
        severity: Degraded,
        worse_when: None,
        when: "volatile uncorrectable ECC errors above 0",
        action: "reset the GPU when it is idle to retire the page; if the count grows, plan its replacement",
        ends: false,
        dcgm: Some(("MEM", "DCGM_FR_VOLATILE_DBE_DETECTED")),
        step: StepAdvice::None,
        source: "NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): a reset retires the page; DCGM: DCGM_FR_VOLATILE_DBE_DETECTED",
        check: Check::Readings(ecc_uncorrectable),
    },
    Rule {
        reason: RuleId::EccCorrectedRate,
        severity: Degraded,
        worse_when: None,
        when: "more corrected ECC errors within the last hour than `health.error_rates.ecc_corrected` (off unless set)",
        action: "the memory is wearing: watch for row remaps and uncorrectable errors, and plan the vendor's diagnostics at the next maintenance",
        ends: false,
        dcgm: Some(("MEM", "DCGM_FR_VOLATILE_SBE_DETECTED")),
        step: StepAdvice::None,
        source: "DCGM: DCGM_FR_VOLATILE_SBE_DETECTED",
        check: Check::Readings(ecc_corrected_rate),
    },
    ROW_REMAP_PENDING,
    Rule {
        reason: RuleId::RowRemapFailed,
        severity: Unhealthy,
        worse_when: None,
        when: "a memory row remap failed: no spare rows left",
        action: "take it out of service and RMA it",
        ends: false,
        dcgm: Some(("MEM", "DCGM_FR_ROW_REMAP_FAILURE")),
        step: StepAdvice::Take(Step::Service),
        source: "NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): a failed remap is an RMA condition; DCGM: DCGM_FR_ROW_REMAP_FAILURE",
        check: Check::Readings(row_remap_failed),
    },
    Rule {
        reason: RuleId::NvlinkDown,
        severity: Degraded,
        worse_when: None,
        when: "an NVLink of the GPU is down (`gpu_nvlink_up` 0; read every `poll.topology_interval`, 2 min)",
        action: "check `nvidia-smi nvlink -s` and the kernel log (Xid 74), then reset the GPU; if it stays down, reseat or service the baseboard",
        ends: false,
        dcgm: Some(("NVLINK", "DCGM_FR_NVLINK_DOWN")),
        step: StepAdvice::None,
        source: "DCGM: DCGM_FR_NVLINK_DOWN",
        check: Check::Readings(nvlink_down),
    },
    Rule {
        reason: RuleId::NvlinkErrorRate,
        severity: Degraded,
        worse_when: None,
        when: "more NVLink errors (CRC, replay, recovery, summed over the links) within the last hour than `health.error_rates.nvlink` (off unless set)",
        action: "see which link with `nvidia-smi nvlink -e` (or gpu_nvlink_link_errors_total); reset the GPU, reseat or service the baseboard if it goes on",
        ends: false,
        dcgm: Some(("NVLINK", "DCGM_FR_NVLINK_ERROR_THRESHOLD")),
        step: StepAdvice::None,
        source: "DCGM: DCGM_FR_NVLINK_ERROR_THRESHOLD",
        check: Check::Readings(nvlink_error_rate),
    },
    FABRIC_NOT_READY,
    Rule {
        reason: RuleId::ProbeFailed,
        severity: Degraded,
        worse_when: Some("it was the probe of a validation (\"Return to service\")"),
        when: "the last scheduled probe fell short of the model's expected throughput, or the GPU failed a test with a CUDA error ([probe.md](probe.md)); until a later probe passes. A failed validation probe (or one that hung past `probe.timeout`) stays until the next clear",
        action: "look at its clock-event reasons, temperature and PCIe width under load (`gpuwarden probe --gpu N` on the idle GPU) before taking it out of service; after a failed validation it is out already, and a person must repair it",
        ends: false,
        dcgm: None,
        step: StepAdvice::Take(Step::Service),
        source: "gpuwarden's validation (docs/validation.md): a GPU that fails it after a repair needs a person; DCGM's diagnostics (dcgmi diag -r 3) confirm",
        check: Check::Device(probe_failed),
    },
    Rule {
        reason: RuleId::ProbeRegressed,
        severity: Degraded,
        worse_when: None,
        when: "the latest probe's sustained figure of a test is more than `probe.regression_pct` (7%) below the GPU's own baseline (the median of its last `probe.baseline_probes` (10) probes, at least 3, kept in the journal) or below the median of the node's other GPUs of its model ([probe.md](probe.md), \"Baselines\")",
        action: "look at its clock-event reasons, temperature and power under load (`gpuwarden report --gpu N` has its probe history); have the vendor's diagnostics run at the next maintenance if it stays slow",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "gpuwarden's probe baselines (docs/probe.md)",
        check: Check::Device(probe_regressed),
    },
    Rule {
        reason: RuleId::SdcSuspect,
        severity: Unhealthy,
        worse_when: None,
        when: "the probe's correctness canary found a wrong result: an exact GEMM or FMA chain off by a bit, a digest that changed between runs of the same inputs, or a digest the node's other GPUs of its model (or its own earlier probes) do not share ([probe.md](probe.md), \"Silent data corruption\"); until a person clears it",
        action: "take it out of service (a reset does not mend it) and keep the evidence for the vendor's RMA (`gpuwarden report --gpu N --markdown`: the elements and digests that differ); it fails every validation while it computes wrong",
        ends: false,
        dcgm: None,
        step: StepAdvice::Take(Step::Service),
        source: "no NVIDIA document says a reset mends arithmetic that computes wrong, and DCGM has no failure code for it: the vendor's field diagnostics and RMA decide",
        check: Check::Device(sdc_suspect),
    },
    Rule {
        reason: RuleId::HbmPatternErrors,
        severity: Unhealthy,
        worse_when: None,
        when: "the probe's HBM pattern test (walking ones and zeros, moving inversions, address in address over a share of the free memory) read a word back wrong ([probe.md](probe.md), \"HBM patterns\"); until a person clears it",
        action: "take it out of service (a reset does not mend it) and keep the evidence for the vendor (`gpuwarden report --gpu N --markdown`: the failing offsets and patterns); look at its row remapping and ECC counts (`gpuwarden events --gpu N --kind ecc,row_remap`)",
        ends: false,
        dcgm: Some(("MEM", "DCGM_FR_MEMORY_MISMATCH")),
        step: StepAdvice::Take(Step::Service),
        source: "DCGM: DCGM_FR_MEMORY_MISMATCH; NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/) names no reset that mends memory that reads back wrong where row remapping did not catch it",
        check: Check::Device(hbm_pattern_errors),
    },
    Rule {
        reason: RuleId::BoardReplaced,
        severity: Notice,
        worse_when: None,
        when: "the journal found a different GPU (another UUID) in a slot where it knew another, within the last day; a notice: the verdict stays what the other rules make it",
        action: "none; the old board's serial and history stay in the journal (`gpuwarden report`)",
        ends: false,
        dcgm: None,
        step: StepAdvice::None,
        source: "gpuwarden's journal",
        check: Check::Device(board_replaced),
    },
];

/// Rules the remediation ladder and the verdict name in code (compared as rules, never by a
/// name written again): each is in `RULES` at its place.
pub(crate) const VALIDATING: Rule = Rule {
    reason: RuleId::Validating,
    severity: Unhealthy,
    worse_when: None,
    when: "an operator cleared the GPU of an unhealthy finding, automatic remediation reset it, or the journal found a new board in its slot, and no probe has passed since (`health.validate_after_clear`, on by default; \"Return to service\" below)",
    action: "none: the probe runs as soon as the GPU is idle, and a pass returns the node to service; `gpuwarden health clear --skip-validation` lets it back without one",
    ends: false,
    dcgm: None,
    step: StepAdvice::None,
    source: "gpuwarden's validation (docs/validation.md)",
    check: Check::Device(validating),
};

pub(crate) const GPU_LOST: Rule = Rule {
    reason: RuleId::GpuLost,
    severity: Unhealthy,
    worse_when: None,
    when: "the driver answers \"GPU is lost\" (fallen off the bus)",
    action: crate::model::health::OFF_THE_BUS_ACTION,
    ends: true,
    dcgm: Some(("PCIE", "DCGM_FR_NVML_API")),
    step: StepAdvice::Take(Step::RebootRequired),
    source: "NVIDIA's Xid catalog: Xid 79, RESTART_BM",
    check: Check::Device(gpu_lost),
};

pub(crate) const ROW_REMAP_PENDING: Rule = Rule {
    reason: RuleId::RowRemapPending,
    severity: Degraded,
    worse_when: None,
    when: "a row remap waits for a GPU reset",
    action: "reset the GPU (or reboot) when it is idle to apply it",
    ends: false,
    dcgm: Some(("MEM", "DCGM_FR_PENDING_ROW_REMAP")),
    step: StepAdvice::Take(Step::GpuReset),
    source: "NVIDIA GPU Memory Error Management (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): a pending remap is applied at the next GPU reset",
    check: Check::Readings(row_remap_pending),
};

pub(crate) const FABRIC_NOT_READY: Rule = Rule {
    reason: RuleId::FabricNotReady,
    severity: Unhealthy,
    worse_when: None,
    when: "on an NVSwitch system, the GPU has not completed NVLink fabric registration, or completed it with an error (`gpu_fabric_state`, `gpu_fabric_registration_ok`); the message says whether nvidia-fabricmanager runs",
    action: "start or check nvidia-fabricmanager (`systemctl status nvidia-fabricmanager`, its log), then reset the GPU",
    ends: false,
    dcgm: Some(("NVLINK", "DCGM_FR_NVLINK_DOWN")),
    step: StepAdvice::Take(Step::GpuReset),
    source: "NVIDIA's Fabric Manager user guide: a GPU joins the fabric again through a reset",
    check: Check::Readings(fabric_not_ready),
};

/// The node's rule: a GPU on the PCI bus that no backend shows (its check is
/// `health::evaluate`'s, over the snapshot's census).
pub(crate) const GPU_MISSING: Rule = Rule {
    reason: RuleId::GpuMissing,
    severity: Unhealthy,
    worse_when: None,
    when: "a GPU is on the PCI bus but no backend enumerates it (`gpu_pci_missing`, alert `GpuMissing`)",
    action: "check dmesg for why the driver did not take it, then reseat or replace it",
    ends: false,
    dcgm: None,
    step: StepAdvice::Take(Step::Service),
    source: "the PCI bus shows a GPU the driver does not bind: a person's",
    check: Check::Device(|_| None),
};

/// The node needs a reboot (`remediation.mode: auto`): a GPU reset failed, or the ladder's
/// step for a GPU is a reboot. Kept for the boot, or until that GPU is cleared.
pub(crate) const REBOOT_REQUIRED: Rule = Rule {
    reason: RuleId::RebootRequired,
    severity: Unhealthy,
    worse_when: None,
    when: "automatic remediation found the node needs a reboot: a GPU reset failed, or the driver, a lost GPU or the XID catalog asks for one (`gpuwarden_reboot_required`, alert `GpuwardenRemediationFailed`)",
    action: "drain the node and reboot it; gpuwarden never reboots it (`remediation.reboot_command` may)",
    ends: false,
    dcgm: None,
    step: StepAdvice::Take(Step::RebootRequired),
    source: "gpuwarden's automatic remediation: a reset failed or did not hold",
    check: Check::Device(|_| None),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::health::Limits;
    use crate::model::probe::ProbeReport;
    use std::time::SystemTime;

    /// The rows of the first table in `section` of docs/health.md that starts with `| reason`.
    fn doc_table(after: &str) -> Vec<String> {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/health.md")).unwrap();
        let rest = &doc[doc.find(after).unwrap_or(0)..];
        rest.lines()
            .skip_while(|l| !l.starts_with("| reason |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(str::to_string)
            .collect()
    }

    /// One NVIDIA GPU with these readings, as the rules see it.
    fn gpu_reading(readings: DeviceReadings) -> crate::model::DeviceSnapshot {
        crate::model::DeviceSnapshot::for_test(0, crate::model::Vendor::Nvidia, "0000:19:00.0", readings)
    }

    /// The reasons of what the rules find, in the table's order.
    fn reasons_found(seen: &Seen) -> Vec<&'static str> {
        crate::health::findings(seen).iter().map(|f| f.reason.label()).collect()
    }

    /// One voice: a rule that never takes its GPU or the node out of service does not tell
    /// anyone to drain it, and no advice, the XID catalog's included, names a reset command of
    /// its own (the ladder's next step carries the one command, `remediation.reset_command`).
    #[test]
    fn advice_matches_its_severity_and_names_no_reset_command_of_its_own() {
        let own_reset = |text: &str| text.contains("nvidia-smi -r") || text.contains("--gpu-reset");
        for rule in all() {
            if rule.severity < Unhealthy && rule.worse_when.is_none() {
                assert!(!rule.action.contains("drain"), "{}: {}", rule.reason, rule.action);
            }
            assert!(!own_reset(rule.action), "{}: {}", rule.reason, rule.action);
        }
        // The catalog's advice goes into degraded findings (critical XIDs) as well as
        // unhealthy ones (a fatal code's finding is unhealthy: it may say drain).
        for entry in catalog::CATALOG
            .iter()
            .filter(|e| e.severity < catalog::Severity::Fatal)
        {
            let action = entry.action();
            assert!(
                !action.contains("drain") && !own_reset(&action),
                "Xid {}: {action}",
                entry.code
            );
        }
    }
    #[test]
    fn docs_health_md_lists_every_rule_as_its_row_says() {
        let expected: Vec<String> = RULES.iter().map(Rule::doc_row).collect();
        assert_eq!(
            doc_table("# Health rules"),
            expected,
            "docs/health.md's rule table must be these rows, in this order:\n{}",
            expected.join("\n")
        );
        assert_eq!(
            doc_table("Node findings"),
            vec![
                GPU_MISSING.doc_row(),
                super::super::nvswitch::SXID_FATAL.doc_row(),
                super::super::nvswitch::FABRIC_MANAGER_DOWN.doc_row(),
                REBOOT_REQUIRED.doc_row(),
                super::super::collective::COLLECTIVE_FAILED.doc_row(),
                super::super::collective::COLLECTIVE_SLOW.doc_row()
            ]
        );
        let ports: Vec<String> = super::super::network::PORT_RULES
            .iter()
            .chain([&super::super::network::PORTS_MISSING])
            .map(Rule::doc_row)
            .collect();
        assert_eq!(doc_table("### Network ports"), ports, "{}", ports.join("\n"));
    }

    #[test]
    fn the_temperature_margin_makes_a_finding_only_when_set_and_inside_it() {
        let device = gpu_reading(DeviceReadings {
            temperatures: vec![(crate::model::Sensor::Gpu, 85.0)],
            temperature_thresholds: vec![(Threshold::Slowdown, 87.0)],
            ..Default::default()
        });
        let reasons = |margin: Option<f64>| -> Vec<&'static str> {
            reasons_found(&Seen {
                device: &device,
                xids: &[],
                probe: None,
                probe_error: None,
                sdc_suspect: None,
                hbm_suspect: None,
                probe_comparisons: &[],
                validation: None,
                limits: &Limits {
                    critical_hold: Duration::from_secs(3600),
                    temperature_margin: margin,
                    ..Default::default()
                },
                cleared: None,
                board_swap: None,
                fabric_manager: None,
                resetting: None,
                now: SystemTime::now(),
            })
        };
        assert!(reasons(None).is_empty(), "off unless set");
        assert_eq!(
            reasons(Some(3.0)),
            ["temperature_near_slowdown"],
            "2 C of headroom, inside 3"
        );
        assert!(reasons(Some(2.0)).is_empty(), "2 C of headroom is not under 2");
    }

    /// A probe that failed on GPU 0, started at `started`.
    fn failed_probe(started: SystemTime) -> ProbeReport {
        use crate::model::probe::{Test, TestResult};
        ProbeReport {
            gpu: 0,
            uuid: "GPU-0".into(),
            name: "test".into(),
            started: crate::model::unix_seconds(started),
            wall_seconds: 10.0,
            expectation: None,
            pass_fraction: 0.9,
            tests: vec![TestResult {
                test: Test::GemmBf16,
                params: Default::default(),
                duration_seconds: 1.0,
                burst: None,
                sustained: None,
                expected: None,
                pass: Some(false),
                skipped: None,
                under_load: Default::default(),
                sdc: None,
                memtest: None,
            }],
        }
    }

    /// The reasons found for `device` with these XIDs, probe, validation and clear.
    fn reasons_with(
        device: &crate::model::DeviceSnapshot,
        xids: &[XidCount],
        probe: &ProbeReport,
        validation: Option<&crate::model::health::Validation>,
        cleared: Option<SystemTime>,
    ) -> Vec<&'static str> {
        let limits = Limits {
            critical_hold: Duration::from_secs(3600),
            ..Default::default()
        };
        reasons_found(&Seen {
            device,
            xids,
            probe: Some(probe),
            probe_error: None,
            sdc_suspect: None,
            hbm_suspect: None,
            probe_comparisons: &[],
            validation,
            limits: &limits,
            cleared,
            board_swap: None,
            fabric_manager: None,
            resetting: None,
            now: SystemTime::now(),
        })
    }

    #[test]
    fn an_operators_clear_drops_what_was_seen_before_it_and_nothing_after() {
        let device = gpu_reading(Default::default());
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        let minute_ago = SystemTime::now() - Duration::from_secs(60);
        let xid = |code, severity, last_seen| XidCount {
            xid: code,
            severity,
            count: 1,
            last_seen,
            recent: 0,
        };
        let xids = [
            xid(79, Severity::Fatal, hour_ago),
            xid(94, Severity::Critical, minute_ago),
        ];
        let probe = failed_probe(hour_ago);
        let reasons = |cleared| reasons_with(&device, &xids, &probe, None, cleared);
        assert_eq!(reasons(None), ["xid_fatal", "xid_critical", "probe_failed"]);
        // Cleared half an hour ago: the fatal XID and the probe were before, Xid 94 after.
        let half_hour_ago = SystemTime::now() - Duration::from_secs(1800);
        assert_eq!(reasons(Some(half_hour_ago)), ["xid_critical"]);
        assert!(reasons(Some(SystemTime::now())).is_empty());
    }

    /// The probe of a validation still pending is no finding of its own (the validation's
    /// outcome comes a publish later); one from before the validation began still is.
    #[test]
    fn a_pending_validations_own_probe_is_no_finding_and_an_earlier_one_is() {
        let device = gpu_reading(Default::default());
        let probe = failed_probe(SystemTime::now() - Duration::from_secs(3600));
        let pending = |since: f64| crate::model::health::Validation {
            since,
            why: "a clear".into(),
            outcome: None,
            kind: crate::model::health::ValidationKind::Sweep,
        };
        let seen_with = |v: &crate::model::health::Validation| reasons_with(&device, &[], &probe, Some(v), None);
        assert!(
            seen_with(&pending(probe.started - 1.0)).is_empty(),
            "its own validation's probe"
        );
        assert_eq!(
            seen_with(&pending(probe.started + 1.0)),
            ["probe_failed"],
            "an earlier probe"
        );
    }

    /// The reset's hand-over as the executor walks it (remediation/auto.rs), one state after
    /// the other: the GPU is unhealthy at every step until its validation passes, and the
    /// GPUs whose NVML was let go of read as such, never as not responding.
    /// A reset's story on GPU 0 (a fatal Xid 94 a minute ago) or another GPU: its state and
    /// reasons when it answered or not, while the reset runs or not, with a validation, cleared.
    fn reset_verdict(
        answered: bool,
        resetting: bool,
        validation: Option<&crate::model::health::Validation>,
        cleared: bool,
        gpu: u32,
    ) -> (HealthState, Vec<&'static str>) {
        let xids = [XidCount {
            xid: 94,
            severity: Severity::Fatal,
            count: 1,
            last_seen: SystemTime::now() - Duration::from_secs(60),
            recent: 0,
        }];
        let mut device = crate::model::DeviceSnapshot::for_test(
            gpu,
            crate::model::Vendor::Nvidia,
            "0000:19:00.0",
            Default::default(),
        );
        device.up = answered;
        let findings = crate::health::findings(&Seen {
            device: &device,
            xids: if gpu == 0 { &xids } else { &[] },
            probe: None,
            probe_error: None,
            sdc_suspect: None,
            hbm_suspect: None,
            probe_comparisons: &[],
            validation,
            limits: &Limits::default(),
            cleared: cleared.then(SystemTime::now),
            board_swap: None,
            fabric_manager: None,
            resetting: resetting.then_some(Resetting {
                uuid: "GPU-0",
                index: 0,
                pci_bus_id: "0000:19:00.0",
            }),
            now: SystemTime::now(),
        });
        let reasons = findings.iter().map(|f| f.reason.label()).collect();
        (crate::health::state(&findings), reasons)
    }

    /// The validation a reset done starts, pending, and the same passed.
    fn reset_validations() -> (crate::model::health::Validation, crate::model::health::Validation) {
        use crate::model::health::{Validation, ValidationKind, ValidationOutcome};
        let pending = Validation {
            since: crate::model::unix_now(),
            why: "GPU reset by gpuwarden's automatic remediation".into(),
            outcome: None,
            kind: ValidationKind::Repair,
        };
        let passed = Validation {
            outcome: Some(ValidationOutcome::Passed {
                at: pending.since + 1.0,
                detail: "passed".into(),
            }),
            ..pending.clone()
        };
        (pending, passed)
    }

    #[test]
    fn a_reset_gpu_stays_unhealthy_from_the_decision_until_its_validation_passes() {
        use HealthState::{Degraded, Unhealthy};
        let verdict = reset_verdict;
        // The fault, then the decision, then NVML let go of.
        assert_eq!(verdict(true, false, None, false, 0), (Unhealthy, vec!["xid_fatal"]));
        assert_eq!(
            verdict(true, true, None, false, 0),
            (Unhealthy, vec!["xid_fatal", "remediating"])
        );
        assert_eq!(
            verdict(false, true, None, false, 0),
            (Unhealthy, vec!["xid_fatal", "remediating"])
        );
        assert_eq!(
            verdict(false, true, None, false, 1),
            (Degraded, vec!["remediating"]),
            "another GPU, not polled while NVML is let go of"
        );
    }

    #[test]
    fn a_reset_done_holds_its_gpu_through_the_clear_and_the_validation_until_the_pass() {
        use HealthState::{Ok, Unhealthy};
        let verdict = reset_verdict;
        let (pending, passed) = reset_validations();
        // The reset done: its validation starts, then the clear lets the XID go.
        assert_eq!(
            verdict(false, true, Some(&pending), false, 0),
            (Unhealthy, vec!["xid_fatal", "validating", "remediating"])
        );
        assert_eq!(
            verdict(false, true, Some(&pending), true, 0),
            (Unhealthy, vec!["validating", "remediating"])
        );
        // The executor is done while NVML is still being taken back: the seam that was.
        assert_eq!(
            verdict(false, false, Some(&pending), true, 0),
            (Unhealthy, vec!["validating", "not_responding"])
        );
        assert_eq!(
            verdict(true, false, Some(&pending), true, 0),
            (Unhealthy, vec!["validating"])
        );
        assert_eq!(verdict(true, false, Some(&passed), true, 0), (Ok, vec![]));
        // Another GPU under validation keeps it while a reset lets go of NVML.
        assert_eq!(
            verdict(false, true, Some(&pending), false, 1),
            (Unhealthy, vec!["validating", "remediating"])
        );
    }

    /// What the rules find on a GPU that answered with `readings`, with no XID, probe or clear.
    fn findings_of(readings: DeviceReadings) -> Vec<crate::model::health::Finding> {
        findings_for(&gpu_reading(readings))
    }

    /// What the rules find on `device`, with no XID, probe or clear.
    fn findings_for(device: &crate::model::DeviceSnapshot) -> Vec<crate::model::health::Finding> {
        crate::health::findings(&Seen {
            device,
            xids: &[],
            probe: None,
            probe_error: None,
            sdc_suspect: None,
            hbm_suspect: None,
            probe_comparisons: &[],
            validation: None,
            limits: &Limits::default(),
            cleared: None,
            board_swap: None,
            fabric_manager: None,
            resetting: None,
            now: SystemTime::now(),
        })
    }

    #[test]
    fn a_tenth_of_the_hour_slowed_for_temperature_degrades_once_ten_minutes_are_counted() {
        use crate::model::health::ThermalTime;
        let findings = |slowed: u64, over: u64| {
            let mut device = gpu_reading(Default::default());
            device.history.thermal_slowdown = Some(ThermalTime {
                slowed: Duration::from_secs(slowed),
                over: Duration::from_secs(over),
            });
            findings_for(&device)
        };
        let found = findings(360, 3600);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].reason.label(), "thermal_slowdown_time");
        assert_eq!(found[0].severity, HealthState::Degraded);
        assert!(
            found[0].message.contains("360 s of the last 60 minutes (10 %"),
            "{}",
            found[0].message
        );
        assert!(findings(359, 3600).is_empty(), "under a tenth of the hour");
        assert!(
            findings(300, 599).is_empty(),
            "under 10 minutes counted says nothing yet"
        );
        assert_eq!(findings(60, 600)[0].reason.label(), "thermal_slowdown_time");
        // Not active at a poll: the `thermal_slowdown` rule has nothing, this one does.
        assert!(
            !findings(600, 3600)
                .iter()
                .any(|f| f.reason.label() == "thermal_slowdown")
        );
    }

    #[test]
    fn an_unlicensed_vgpu_is_degraded_and_a_gpu_without_licensing_is_not() {
        let reasons = |licensed: Option<bool>| -> Vec<&'static str> {
            findings_of(DeviceReadings {
                vgpu_licensed: licensed,
                ..Default::default()
            })
            .iter()
            .map(|f| f.reason.label())
            .collect()
        };
        assert_eq!(reasons(Some(false)), ["vgpu_unlicensed"]);
        assert!(reasons(Some(true)).is_empty());
        assert!(reasons(None).is_empty(), "bare metal needs no licence");
    }

    #[test]
    fn the_drivers_recovery_action_degrades_and_a_reboot_makes_unhealthy() {
        use crate::model::RecoveryAction;
        let findings = |action: Option<RecoveryAction>| {
            findings_of(DeviceReadings {
                recovery_action: action,
                ..Default::default()
            })
        };
        for (action, severity, words) in [
            (RecoveryAction::GpuReset, HealthState::Degraded, "a GPU reset"),
            (
                RecoveryAction::DrainAndReset,
                HealthState::Degraded,
                "moved off, then a GPU reset",
            ),
            (RecoveryAction::DrainP2p, HealthState::Degraded, "peer-to-peer"),
            (RecoveryAction::NodeReboot, HealthState::Unhealthy, "a node reboot"),
        ] {
            let found = findings(Some(action));
            assert_eq!(found.len(), 1, "{action:?}: {found:?}");
            assert_eq!(found[0].reason.label(), "recovery_action");
            assert_eq!(found[0].severity, severity, "{action:?}");
            assert!(found[0].message.contains(words), "{}", found[0].message);
            assert!(found[0].message.contains(action.label()), "{}", found[0].message);
        }
        assert!(findings(Some(RecoveryAction::None)).is_empty());
        assert!(findings(None).is_empty(), "a driver that does not say is no finding");
    }

    #[test]
    fn nvmls_recovery_action_values_map_and_an_unknown_one_is_absent() {
        use crate::model::RecoveryAction;
        assert_eq!(RecoveryAction::from_code(0), Some(RecoveryAction::None));
        assert_eq!(RecoveryAction::from_code(2), Some(RecoveryAction::NodeReboot));
        assert_eq!(RecoveryAction::from_code(4), Some(RecoveryAction::DrainAndReset));
        assert_eq!(RecoveryAction::from_code(5), None);
        assert_eq!(RecoveryAction::from_code(u64::MAX), None);
    }

    #[test]
    fn a_rule_is_found_by_its_name_and_every_rule_has_one_row() {
        assert_eq!(named(RuleId::XidFatal).map(|r| r.reason.label()), Some("xid_fatal"));
        // The names are one list: every rule's reason has exactly one row, in the same order.
        let rows: Vec<RuleId> = all().map(|rule| rule.reason).collect();
        assert_eq!(rows, RuleId::ALL);
        assert!(RuleId::from_label("xid_fatals").is_none());
        assert_eq!(rows.len(), RULES.len() + 7 + super::super::network::PORT_RULES.len());
    }

    #[test]
    fn reasons_are_unique_and_only_the_reset_lost_and_silent_gpu_end_the_look() {
        let mut reasons: Vec<&str> = RULES.iter().map(|r| r.reason.label()).collect();
        reasons.sort();
        reasons.dedup();
        assert_eq!(reasons.len(), RULES.len());
        let ending: Vec<&str> = RULES.iter().filter(|r| r.ends).map(|r| r.reason.label()).collect();
        assert_eq!(ending, ["remediating", "gpu_lost", "not_responding"]);
    }
}
