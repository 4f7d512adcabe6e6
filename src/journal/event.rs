//! One journal row: what happened, when, on which boot, host and GPU.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a row records. The names are the `kind` column and `gpuwarden events --kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Kind {
    /// An XID, counted once whichever sources saw it (details: code, name, severity,
    /// sources, the kernel-log line).
    Xid,
    /// More reports of one XID on one GPU than are recorded one by one (a storm): their count.
    XidStorm,
    /// The health verdict changed (from, to, findings).
    Health,
    /// A probe finished (each test's measured and expected value, pass).
    Probe,
    /// The uncorrectable ECC count changed.
    Ecc,
    /// Row remapping: pending, failed, or the remapped rows changed.
    RowRemap,
    /// The driver's recovery action changed (none, GPU reset, node reboot, drain...).
    RecoveryAction,
    /// NVLink errors grew, or links went down or came back.
    Nvlink,
    /// The PCIe replay counter as read at a GPU's first sight and at each start.
    Pcie,
    /// A thermal or power-brake slowdown episode (start, duration).
    Slowdown,
    /// The GPU stopped answering (fell off the bus).
    Lost,
    /// A lost GPU answers again.
    Back,
    /// A GPU on the PCI bus that no backend enumerates.
    PciMissing,
    /// gpuwarden turned persistence mode on.
    Persistence,
    /// Driver, VBIOS, board part number or InfoROM of a GPU: first seen, or changed.
    Inventory,
    /// A different GPU (another UUID and serial) at a PCI address: a board swap.
    BoardSwap,
    /// An operator cleared a GPU after a repair (`gpuwarden health clear`): who (uid, pid,
    /// command), why, and the findings it let go of and those still present.
    Clear,
    /// The daemon started or stopped.
    Daemon,
    /// A network adapter first seen in this run or changed (firmware, board), or a port's
    /// findings raised or cleared (journal/writer/nic_rows.rs).
    Nic,
    /// An NVSwitch error (SXID) from the kernel log: code, switch, severity, the line.
    Sxid,
    /// A GPU's validation (a probe before return to service) began, passed, failed or was
    /// skipped (details: the whole validation).
    Validation,
    /// An unhealthy GPU's next remediation step as advised, a reset or reboot mark that
    /// automatic remediation made, and its outcome.
    Remediation,
    /// The probe's correctness canary found a GPU computing wrong (the evidence), or a GPU
    /// model's agreement digest was first given or replaced (docs/probe.md, "Silent data
    /// corruption").
    Sdc,
    /// The probe's HBM pattern test found a GPU's memory reading back wrong: the passes, the
    /// failing offsets and what they held (docs/probe.md, "HBM patterns").
    Memtest,
    /// An all-reduce across the node's GPUs: its GPUs, path, bus bandwidth and verdict
    /// (docs/probe.md, "The GPUs together").
    Collective,
}

impl Kind {
    pub const ALL: [Kind; 25] = [
        Kind::Xid,
        Kind::XidStorm,
        Kind::Health,
        Kind::Probe,
        Kind::Ecc,
        Kind::RowRemap,
        Kind::RecoveryAction,
        Kind::Nvlink,
        Kind::Pcie,
        Kind::Slowdown,
        Kind::Lost,
        Kind::Back,
        Kind::PciMissing,
        Kind::Persistence,
        Kind::Inventory,
        Kind::BoardSwap,
        Kind::Clear,
        Kind::Daemon,
        Kind::Nic,
        Kind::Sxid,
        Kind::Validation,
        Kind::Remediation,
        Kind::Sdc,
        Kind::Memtest,
        Kind::Collective,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Xid => "xid",
            Kind::XidStorm => "xid_storm",
            Kind::Health => "health",
            Kind::Probe => "probe",
            Kind::Ecc => "ecc",
            Kind::RowRemap => "row_remap",
            Kind::RecoveryAction => "recovery_action",
            Kind::Nvlink => "nvlink",
            Kind::Pcie => "pcie",
            Kind::Slowdown => "slowdown",
            Kind::Lost => "lost",
            Kind::Back => "back",
            Kind::PciMissing => "pci_missing",
            Kind::Persistence => "persistence",
            Kind::Inventory => "inventory",
            Kind::BoardSwap => "board_swap",
            Kind::Clear => "clear",
            Kind::Daemon => "daemon",
            Kind::Nic => "nic",
            Kind::Sxid => "sxid",
            Kind::Validation => "validation",
            Kind::Remediation => "remediation",
            Kind::Sdc => "sdc",
            Kind::Memtest => "memtest",
            Kind::Collective => "collective",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Which GPU a row is about, as it was known when the row was written: the serial stays
/// with its rows after the board moves or is replaced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuRef {
    pub uuid: String,
    pub serial: Option<String>,
    pub pci_bus_id: String,
    pub index: Option<u32>,
}

impl GpuRef {
    /// The GPU `uuid` as `snapshot` names it; only the UUID when it is not on the node now.
    pub fn in_snapshot(snapshot: &crate::model::Snapshot, uuid: &str) -> GpuRef {
        match snapshot.devices.iter().find(|d| d.identity.uuid == uuid) {
            Some(device) => GpuRef::of(&device.identity),
            None => GpuRef {
                uuid: uuid.to_string(),
                serial: None,
                pci_bus_id: String::new(),
                index: None,
            },
        }
    }

    /// A GPU the daemon sees now, by its identity.
    pub fn of(identity: &crate::model::DeviceIdentity) -> GpuRef {
        GpuRef {
            uuid: identity.uuid.clone(),
            serial: identity.serial.clone(),
            pci_bus_id: identity.pci_bus_id.clone(),
            index: Some(identity.index),
        }
    }
}

/// A row before it is written. Time, boot id and host are the writer's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Unix seconds.
    pub at: f64,
    pub kind: Kind,
    pub gpu: Option<GpuRef>,
    /// One line for people: what happened.
    pub summary: String,
    /// The details as JSON (kind-specific).
    pub details: Value,
}

impl Event {
    pub fn new(at: f64, kind: Kind, gpu: Option<GpuRef>, summary: String, details: Value) -> Event {
        Event {
            at,
            kind,
            gpu,
            summary,
            details,
        }
    }
}
