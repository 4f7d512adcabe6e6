//! `remediation`: what gpuwarden advises doing about an unhealthy GPU (docs/health.md,
//! "Remediation"). Reloadable.

use super::*;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Remediation {
    /// `off` (the default): nothing; `advise`: each unhealthy GPU's next step in the verdict,
    /// the metrics (`gpu_remediation_next_step`) and the journal. gpuwarden does not act on it
    /// by itself (yet): a person or the scheduler's tooling does.
    pub mode: RemediationMode,
    /// The GPU reset the advice names, `{pci_bus_id}` replaced by the GPU's address.
    pub reset_command: String,
}

impl Default for Remediation {
    fn default() -> Self {
        Remediation {
            mode: RemediationMode::Off,
            reset_command: "nvidia-smi --gpu-reset -i {pci_bus_id}".to_string(),
        }
    }
}

/// `remediation.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemediationMode {
    #[default]
    Off,
    Advise,
}
