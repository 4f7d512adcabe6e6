//! Clearing a GPU after a repair (`gpuwarden health clear`, docs/health.md "Clear after a
//! repair"): what is asked, which GPU it names, and what the answer says. The local API
//! (local_api.rs) takes the request; the rules drop what was held from before the clear
//! (rules/, `Seen::cleared`); this module is the words and checks around it.

use super::verdict::FindingView;
use crate::model::health::RuleId;
use crate::model::{DeviceSnapshot, Snapshot};
use serde::{Deserialize, Serialize};

/// The longest reason kept: a ticket number and a few words.
pub(crate) const MAX_REASON: usize = 200;

/// `POST /api/v1/health/clear`'s body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClearRequest {
    /// An index (`0`), a UUID or a PCI address; empty when `nic` is given.
    #[serde(default)]
    pub gpu: String,
    /// A network adapter (`mlx5_0`) instead of a GPU (health/clear_nic.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    /// Why: the repair, a ticket.
    pub reason: String,
    /// Let the GPU back without the probe a clear of an unhealthy GPU otherwise asks for
    /// (`health.validate_after_clear`); recorded in the journal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_validation: bool,
}

/// What the daemon answers once the next poll has looked at the GPU again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClearAnswer {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    /// The reasons of the findings the clear let go of.
    pub cleared: Vec<String>,
    /// Findings still present after the clear: their condition still holds.
    pub still: Vec<FindingView>,
    /// False when no poll round came within the wait: `still` is as of the last one.
    pub polled_after: bool,
    /// What the clear did about validation (a probe before return to service), for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<String>,
}

impl ClearAnswer {
    /// The findings still present whose condition holds: all but the validation the clear
    /// started, which is the clear's own next step, not something left over.
    pub(crate) fn holding(&self) -> impl Iterator<Item = &FindingView> {
        self.still.iter().filter(|f| !is_validation(f))
    }
}

fn is_validation(f: &FindingView) -> bool {
    f.reason == RuleId::Validating.label()
}

/// Why a clear was refused; each says what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ClearError {
    #[error("say why with --reason (what was repaired, a ticket); at most {MAX_REASON} characters")]
    Reason,
    #[error("no GPU {0:?} on this node; give its index, UUID or PCI address (`gpuwarden health` lists them)")]
    NoSuchGpu(String),
    #[error("GPU {index} is ambiguous here ({uuids}); give its UUID or PCI address")]
    Ambiguous { index: String, uuids: String },
    #[error("no network adapter {0:?} on this node; give its name as `nic_info` shows it (mlx5_0)")]
    NoSuchNic(String),
}

impl ClearRequest {
    /// The reason as it is kept: trimmed, control characters replaced, not empty, not long.
    pub(crate) fn checked_reason(&self) -> Result<String, ClearError> {
        let reason = crate::input::printable(self.reason.trim());
        // Something a person can read: not only blanks and replaced control characters.
        if !reason.chars().any(char::is_alphanumeric) || reason.chars().count() > MAX_REASON {
            return Err(ClearError::Reason);
        }
        Ok(reason)
    }
}

/// The GPU `gpu` names: a UUID, a PCI address, or an index that only one GPU has (on a node
/// with NVIDIA and AMD GPUs both have a GPU 0).
pub(crate) fn find_gpu<'a>(snapshot: &'a Snapshot, gpu: &str) -> Result<&'a DeviceSnapshot, ClearError> {
    let gpu = gpu.trim();
    // lspci writes `3b:00.0`, without the domain.
    let bus = crate::input::pci::normalize_bus_id(gpu)
        .or_else(|| crate::input::pci::normalize_bus_id(&format!("0000:{gpu}")));
    if let Some(device) = snapshot
        .devices
        .iter()
        .find(|d| d.identity.uuid.eq_ignore_ascii_case(gpu) || bus.as_deref() == Some(d.identity.pci_bus_id.as_str()))
    {
        return Ok(device);
    }
    let index: Option<u32> = gpu.parse().ok();
    let by_index: Vec<&DeviceSnapshot> = snapshot
        .devices
        .iter()
        .filter(|d| Some(d.identity.index) == index)
        .collect();
    match by_index.as_slice() {
        [device] => Ok(device),
        [] => Err(ClearError::NoSuchGpu(crate::input::printable(gpu))),
        several => Err(ClearError::Ambiguous {
            index: gpu.to_string(),
            uuids: several
                .iter()
                .map(|d| d.identity.uuid.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The answer from the GPU's findings before the clear and the GPU as the next snapshot
/// shows it (None: it has left the node).
pub(crate) fn answer(before: &DeviceSnapshot, after: Option<&DeviceSnapshot>, polled_after: bool) -> ClearAnswer {
    let still: Vec<FindingView> = after
        .map(|d| d.health.findings.iter().map(FindingView::from).collect())
        .unwrap_or_default();
    let cleared = before
        .health
        .findings
        .iter()
        .filter(|f| !still.iter().any(|s| s.reason == f.reason.label()))
        .map(|f| f.reason.to_string())
        .collect();
    ClearAnswer {
        index: before.identity.index,
        uuid: before.identity.uuid.clone(),
        pci_bus_id: before.identity.pci_bus_id.clone(),
        cleared,
        still,
        polled_after,
        validation: None,
    }
}

/// What a clear does about validation, decided from the GPU as the clear found it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ValidationStep {
    /// Start one: the GPU had an unhealthy finding and validation is on.
    Start,
    /// End the pending or failed one without a probe (`--skip-validation`).
    Skip,
    /// Nothing to do, and why for the answer when there is something to say.
    None(Option<&'static str>),
}

/// Whether clearing `device` starts a validation: only when it was unhealthy, validation is on
/// (`health.validate_after_clear`), the operator did not skip it, and the GPU can run the
/// probe (NVIDIA). A clear of a GPU whose validation is pending or failed starts another: a
/// clear alone never lets an unproven GPU back.
pub(crate) fn validation_step(
    device: &DeviceSnapshot,
    validate_after_clear: bool,
    skip: bool,
    current: Option<&crate::model::health::Validation>,
) -> ValidationStep {
    let unhealthy = device.health.state == crate::model::health::HealthState::Unhealthy;
    let open = current.is_some_and(|v| v.pending() || v.failed().is_some());
    if skip {
        return if open || unhealthy {
            ValidationStep::Skip
        } else {
            ValidationStep::None(None)
        };
    }
    if !unhealthy || !validate_after_clear {
        return ValidationStep::None(None);
    }
    if device.identity.vendor != crate::model::Vendor::Nvidia {
        return ValidationStep::None(Some("not validated: the probe runs on NVIDIA GPUs only"));
    }
    ValidationStep::Start
}

/// For a person: what was let go of, and each finding still present (one line each).
pub(crate) fn text(answer: &ClearAnswer) -> String {
    let gpu = format!("GPU {} ({}, {})", answer.index, answer.uuid, answer.pci_bus_id);
    let mut out = match answer.cleared.as_slice() {
        [] => format!("cleared {gpu}: nothing was held\n"),
        reasons => format!("cleared {gpu}: let go of {}\n", reasons.join(", ")),
    };
    if let Some(validation) = &answer.validation {
        out.push_str(validation);
        out.push('\n');
    }
    for f in answer.still.iter().filter(|f| is_validation(f)) {
        out.push_str(&format!("  {}: {}: {}\n", f.severity, f.reason, f.message));
    }
    if answer.holding().next().is_none() {
        out.push_str("no finding left that the clear could not let go of\n");
        return out;
    }
    let when = if answer.polled_after {
        "after the next poll"
    } else {
        "as of the last poll (the next one has not come yet)"
    };
    out.push_str(&format!(
        "still present {when}; its condition still holds (mend it first):\n"
    ));
    for f in answer.holding() {
        out.push_str(&format!("  {}: {}: {}\n", f.severity, f.reason, f.message));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Vendor;

    fn node() -> Snapshot {
        let gpu = |i, vendor, bus| DeviceSnapshot::for_test(i, vendor, bus, Default::default());
        Snapshot {
            devices: vec![
                gpu(0, Vendor::Nvidia, "0000:19:00.0"),
                gpu(1, Vendor::Nvidia, "0000:3b:00.0"),
                gpu(0, Vendor::Amd, "0000:c1:00.0"),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn a_gpu_is_named_by_uuid_address_or_an_index_only_it_has() {
        let node = node();
        let uuid = |gpu: &str| find_gpu(&node, gpu).map(|d| d.identity.uuid.clone());
        assert_eq!(uuid("GPU-1").as_deref(), Ok("GPU-1"));
        assert_eq!(uuid("gpu-1").as_deref(), Ok("GPU-1"));
        assert_eq!(uuid("3b:00.0").as_deref(), Ok("GPU-1"));
        assert_eq!(uuid("00000000:C1:00.0").as_deref(), Ok("AMD-0"));
        assert_eq!(uuid(" 1 ").as_deref(), Ok("GPU-1"));
        assert!(
            matches!(uuid("0"), Err(ClearError::Ambiguous { .. })),
            "NVIDIA 0 and AMD 0"
        );
        assert_eq!(uuid("7"), Err(ClearError::NoSuchGpu("7".into())));
        assert!(matches!(uuid("GPU-\u{1b}[2J"), Err(ClearError::NoSuchGpu(s)) if !s.contains('\u{1b}')));
    }

    #[test]
    fn only_a_clear_of_an_unhealthy_nvidia_gpu_starts_a_validation_and_skip_ends_one() {
        use crate::model::health::{DeviceHealth, HealthState, Validation};
        let with = |vendor, state| {
            let mut d = DeviceSnapshot::for_test(0, vendor, "0000:19:00.0", Default::default());
            d.health = DeviceHealth {
                state,
                findings: vec![],
                next_step: None,
            };
            d
        };
        let unhealthy = with(Vendor::Nvidia, HealthState::Unhealthy);
        let degraded = with(Vendor::Nvidia, HealthState::Degraded);
        let pending = Validation {
            since: 1.0,
            why: "x".into(),
            outcome: None,
            kind: Default::default(),
        };
        assert_eq!(validation_step(&unhealthy, true, false, None), ValidationStep::Start);
        assert_eq!(
            validation_step(&unhealthy, false, false, None),
            ValidationStep::None(None),
            "off"
        );
        assert_eq!(
            validation_step(&degraded, true, false, None),
            ValidationStep::None(None)
        );
        // Validating is itself unhealthy: clearing it starts another, never lets it back.
        assert_eq!(
            validation_step(&unhealthy, true, false, Some(&pending)),
            ValidationStep::Start
        );
        assert!(matches!(
            validation_step(&with(Vendor::Amd, HealthState::Unhealthy), true, false, None),
            ValidationStep::None(Some(_))
        ));
        assert_eq!(
            validation_step(&unhealthy, true, true, Some(&pending)),
            ValidationStep::Skip
        );
        assert_eq!(
            validation_step(&degraded, true, true, None),
            ValidationStep::None(None),
            "nothing to skip"
        );
    }

    #[test]
    fn a_reason_is_required_kept_short_and_printable() {
        let request = |reason: &str| ClearRequest {
            gpu: "0".into(),
            nic: None,
            reason: reason.into(),
            skip_validation: false,
        };
        assert_eq!(request("  ").checked_reason(), Err(ClearError::Reason));
        assert_eq!(request("\u{7}\n").checked_reason(), Err(ClearError::Reason));
        assert_eq!(
            request(&"x".repeat(MAX_REASON + 1)).checked_reason(),
            Err(ClearError::Reason)
        );
        assert_eq!(
            request(" reseated, INC-42\n").checked_reason().as_deref(),
            Ok("reseated, INC-42")
        );
        assert_eq!(request("a\u{7}b").checked_reason().as_deref(), Ok("a\u{fffd}b"));
    }
}
