//! The shape of a health rule, shared by the GPUs' table (rules/) and the network ports'
//! (network.rs): a row (reason, severity, the condition and the action in words, the check)
//! and what each kind of check looks at. docs/health.md's tables are made of these rows.

use crate::model::health::RuleId;
use crate::model::health::{BoardSwap, Finding, HealthState, Limits, NetworkLimits, Step, Validation};
use crate::model::nic::{NicDevice, NicPort};
use crate::model::probe::ProbeReport;
use crate::model::xid::XidCount;
use crate::model::{DeviceReadings, DeviceSnapshot};
use std::time::SystemTime;

/// What the rules look at for one GPU.
pub struct Seen<'a> {
    pub device: &'a DeviceSnapshot,
    /// The GPU's XID counts.
    pub xids: &'a [XidCount],
    /// Its last scheduled probe.
    pub probe: Option<&'a ProbeReport>,
    /// Why its last probe could not run, if it could not.
    pub probe_error: Option<&'a str>,
    /// Its latest wrong results, as the correctness canary found them (probe::sdc).
    pub sdc_suspect: Option<&'a crate::model::probe::SdcSuspect>,
    /// Its latest memory errors, as the HBM pattern test found them (probe::memtest).
    pub hbm_suspect: Option<&'a crate::model::probe::HbmSuspect>,
    /// Its latest probe's figures against its baseline and its neighbours (baseline.rs).
    pub probe_comparisons: &'a [crate::health::baseline::Comparison],
    /// Its latest validation (a probe before return to service), if it had one.
    pub validation: Option<&'a Validation>,
    /// The operator's thresholds.
    pub limits: &'a Limits,
    /// When an operator last cleared the GPU after a repair: what was held from before
    /// no longer counts.
    pub cleared: Option<SystemTime>,
    /// The board this one replaced, when the journal found it in the last day.
    pub board_swap: Option<&'a BoardSwap>,
    /// Whether nvidia-fabricmanager runs, where it is checked (NVSwitch systems).
    pub fabric_manager: Option<&'a crate::model::links::FabricManager>,
    /// The GPU automatic remediation is resetting now, if any: from the decision until its
    /// validation starts, NVML let go of meanwhile.
    pub resetting: Option<Resetting<'a>>,
    pub now: SystemTime,
}

/// The GPU being reset now (remediation/auto.rs), as the rules name it.
#[derive(Clone, Copy)]
pub struct Resetting<'a> {
    pub uuid: &'a str,
    pub index: u32,
    pub pci_bus_id: &'a str,
}

impl Seen<'_> {
    /// Whether something seen at `at` counts: it came after the last clear, if any.
    pub fn after_clear(&self, at: SystemTime) -> bool {
        self.cleared.is_none_or(|cleared| at > cleared)
    }
}

/// A rule that fired: what was seen, and a severity when it is not the row's. The finding's
/// message is what was seen, then the row's action ([`Rule::message`]), unless the case
/// carries its own (`said`): an XID's from the catalog, the driver's recovery action, a GPU
/// being reset or validated, whose words are the action.
pub(crate) struct Hit {
    pub message: String,
    pub severity: Option<HealthState>,
    pub said: bool,
}

impl From<String> for Hit {
    fn from(message: String) -> Hit {
        Hit {
            message,
            severity: None,
            said: false,
        }
    }
}

impl Hit {
    /// A hit whose message already says what to do (see [`Hit`]).
    pub(crate) fn said(message: String, severity: Option<HealthState>) -> Hit {
        Hit {
            message,
            severity,
            said: true,
        }
    }
}

/// The remediation ladder's step when a finding of the row is what decides it (health/ladder.rs):
/// the one place the step of a finding is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepAdvice {
    /// None of its own: the GPU stays in service (a degraded finding or a notice), or the
    /// finding is a step already under way (validating, remediating).
    None,
    /// This step.
    Take(Step),
    /// The XID catalog's resolution bucket of each code (`xid::catalog::Entry::step`).
    FromXid,
    /// The driver's own recovery action.
    FromDriver,
}

impl StepAdvice {
    /// Its cell in docs/health.md's table.
    pub(crate) fn doc(self) -> &'static str {
        match self {
            StepAdvice::None => "none",
            StepAdvice::Take(step) => step.label(),
            StepAdvice::FromXid => "the code's (catalog)",
            StepAdvice::FromDriver => "the driver's",
        }
    }
}

/// How a rule looks.
pub(crate) enum Check {
    /// At the GPU whatever its state (XIDs, a lost GPU, a probe).
    Device(fn(&Seen) -> Option<Hit>),
    /// At the readings of a GPU that answered its last poll.
    Readings(fn(&Seen, &DeviceReadings) -> Option<Hit>),
    /// At one network port (health/network.rs).
    Port(fn(&PortSeen) -> Option<Hit>),
}

/// One health rule.
pub(crate) struct Rule {
    /// The `reason` label of `gpu_health_reason`, stable.
    pub reason: RuleId,
    pub severity: HealthState,
    /// When a finding is more severe than the row's (docs: "degraded, unhealthy when ...").
    /// Read only by the test that holds docs/health.md equal to the rule table.
    #[cfg_attr(not(test), allow(dead_code))]
    pub worse_when: Option<&'static str>,
    /// The condition, for docs/health.md (read only by the test that holds it equal).
    #[cfg_attr(not(test), allow(dead_code))]
    pub when: &'static str,
    /// What to do: the end of every finding's message ([`Rule::message`]), docs/health.md's
    /// column, the next step's reason, the report's advice and the alert's description.
    /// `--gpu N` is the GPU's own index in a finding.
    pub action: &'static str,
    /// The ladder's step when this finding decides it.
    pub step: StepAdvice,
    /// Why that step and action: the document that says so (NVIDIA's, DCGM's failure code).
    pub source: &'static str,
    /// When it fires, the rows after it are not looked at.
    pub ends: bool,
    /// The DCGM health watch it belongs to and the DCGM failure code it stands for
    /// (dcgm-exporter's `DCGM_EXP_GPU_HEALTH_STATUS`); `None` where DCGM has no such check.
    pub dcgm: Option<(&'static str, &'static str)>,
    pub check: Check,
}

/// What the port rules look at for one port.
pub(crate) struct PortSeen<'a> {
    pub device: &'a NicDevice,
    pub port: &'a NicPort,
    pub limits: &'a NetworkLimits,
    /// The rate this port should run at: the operator's, or the highest among the node's
    /// ports of its link layer.
    pub expected_rate: Option<f64>,
    /// Whether this is the adapter's first port (its PCIe link is judged once).
    pub first_port: bool,
}

impl Rule {
    /// Whether this rule made the finding.
    pub(crate) fn made(&self, finding: &Finding) -> bool {
        finding.reason == self.reason
    }

    /// Whether this rule made any of the findings.
    pub(crate) fn found_in<'a>(&self, findings: impl IntoIterator<Item = &'a Finding>) -> bool {
        findings.into_iter().any(|f| self.made(f))
    }

    /// Its row of docs/health.md's table.
    #[cfg(test)]
    pub(crate) fn doc_row(&self) -> String {
        let severity = match self.worse_when {
            Some(when) => format!("{}, unhealthy when {when}", self.severity.label()),
            None => self.severity.finding_label().to_string(),
        };
        format!(
            "| `{}` | {severity} | {} | {} | {} | {} |",
            self.reason,
            self.when,
            self.action,
            self.step.doc(),
            self.source
        )
    }

    /// The row's action for one GPU (`--gpu N` made its index), or for the node.
    pub(crate) fn action_for(&self, gpu: Option<u32>) -> String {
        match gpu {
            Some(index) => self.action.replace("--gpu N", &format!("--gpu {index}")),
            None => self.action.to_string(),
        }
    }

    /// A finding's message: what was seen, then the row's action (unless the hit says its
    /// own, see [`Hit`]).
    pub(crate) fn message(&self, hit: &Hit, gpu: Option<u32>) -> String {
        if hit.said {
            return hit.message.clone();
        }
        format!("{}: {}", hit.message, self.action_for(gpu))
    }
}
