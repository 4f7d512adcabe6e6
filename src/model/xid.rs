//! XID counts as the renderers and the health rules read them, by PCI bus id. The XID store
//! (src/xid/store.rs) counts; this is the copy a snapshot carries.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// How bad an XID is, derived from NVIDIA's immediate action (src/xid/catalog.rs says how).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Unknown,
    Info,
    Warning,
    Critical,
    Fatal,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Unknown => "unknown",
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
            Severity::Fatal => "fatal",
        }
    }
}

/// The operator's XID severities (config `health.xid_severity`), over the catalog's: a code
/// listed here gets that severity, `all` gives every code not listed one, and the catalog
/// decides the rest. The severity is the `severity` label of `gpu_xid_errors_total` and what
/// the health rules read: fatal -> unhealthy until reboot, critical -> degraded for
/// `xid.critical_hold`, warning and ignore (`info`) -> counted, no finding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct XidPolicy {
    pub all: Option<Severity>,
    pub codes: BTreeMap<u32, Severity>,
}

impl XidPolicy {
    /// The operator's severity for `code`; None: the catalog's (`xid::store` asks it).
    pub fn chosen(&self, code: u32) -> Option<Severity> {
        self.codes.get(&code).copied().or(self.all)
    }
}

/// The code under which the XIDs of codes beyond a GPU's limit of distinct codes are counted
/// (label `xid="other"`), so that no count is lost and the series stay bounded.
pub(crate) const OTHER_CODES: u32 = u32::MAX;

/// One XID code on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XidCount {
    pub xid: u32,
    pub severity: Severity,
    pub count: u64,
    #[serde(serialize_with = "crate::model::serialize_system_time")]
    pub last_seen: SystemTime,
    /// How many of them were seen within the last [`RECENT_WINDOW`] (dcgm-exporter's
    /// `DCGM_EXP_XID_ERRORS_COUNT`); counts taken over from the journal have no times.
    #[serde(skip)]
    pub recent: u64,
}

impl XidCount {
    /// The code as a label: its number, or `other` for [`OTHER_CODES`].
    pub fn code(&self) -> String {
        code_label(self.xid)
    }
}

/// A code as a label: its number, or `other` for [`OTHER_CODES`].
pub(crate) fn code_label(code: u32) -> String {
    if code == OTHER_CODES {
        "other".to_string()
    } else {
        code.to_string()
    }
}

/// The window of [`XidCount::recent`]: dcgm-exporter's default `xid-count-window-size`.
pub(crate) const RECENT_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

/// The bus id under which XIDs whose report names no GPU are counted.
pub(crate) const UNATTRIBUTED: &str = "";

/// What the renderers and the health rules read, by PCI bus id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct XidSnapshot {
    /// Counts by PCI bus id; [`UNATTRIBUTED`] for reports that name no GPU.
    pub by_bus: BTreeMap<String, Vec<XidCount>>,
    /// Counts of the XIDs a MIG GPU attributed to one of its GPU instances, by PCI bus id
    /// and instance. Each is also in `by_bus`.
    pub by_instance: BTreeMap<(String, u32), Vec<XidCount>>,
    /// Reports not counted because the store was full (see src/xid/store.rs).
    pub dropped: u64,
    /// Each source that has been started, and whether it is reading now.
    pub sources: BTreeMap<&'static str, bool>,
    /// Reports received per source, before de-duplication.
    pub reports: BTreeMap<&'static str, u64>,
    /// NVSwitch errors (SXIDs) from the kernel log, by switch and code.
    pub sxids: Vec<SxidCount>,
}

/// One NVSwitch's count of one SXID code.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SxidCount {
    /// N of `nvidia-nvswitchN`.
    pub switch: u32,
    /// The switch's PCI address.
    pub pci_bus_id: String,
    pub sxid: u32,
    /// The driver called it fatal (the switch, and the GPUs' NVLink traffic through it, need
    /// a reset); else non-fatal.
    pub fatal: bool,
    pub count: u64,
    #[serde(serialize_with = "crate::model::serialize_system_time")]
    pub last_seen: SystemTime,
    /// The driver's text of the last one (`Link 44 egress non-posted PRIV error`).
    pub message: String,
}

impl SxidCount {
    pub fn severity(&self) -> &'static str {
        if self.fatal { "fatal" } else { "non_fatal" }
    }
}

impl XidSnapshot {
    pub fn for_bus(&self, pci_bus_id: &str) -> &[XidCount] {
        self.by_bus.get(pci_bus_id).map(Vec::as_slice).unwrap_or(&[])
    }
}
