//! The GPU's links to other GPUs: NVLink (per link: state, error counters, bytes moved) and,
//! on NVSwitch systems, whether the GPU has joined the NVLink fabric.

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NvLinks {
    /// Links the board has (NVML's link count), whether or not they are up.
    pub board_links: u32,
    pub links: Vec<NvLink>,
}

impl NvLinks {
    /// (type, errors summed over the links) for each type some link counts.
    pub fn errors_by_type(&self) -> Vec<(&'static str, u64)> {
        sum_by_key(self.links.iter().flat_map(|l| l.errors.iter()))
    }
    /// (direction, bytes summed over the links).
    pub fn bytes_by_direction(&self) -> Vec<(&'static str, u64)> {
        sum_by_key(self.links.iter().flat_map(|l| l.bytes.iter()))
    }
    /// What the links that are up carry one way at their rate, summed; `None` where no link
    /// says its rate.
    pub fn speed_up(&self) -> Option<f64> {
        let rates: Vec<f64> = self
            .links
            .iter()
            .filter(|l| l.up == Some(true))
            .filter_map(|l| l.speed_bytes_per_second)
            .collect();
        (!rates.is_empty()).then(|| rates.iter().sum())
    }
    /// The fastest rate a link of the board says: what each of its links should carry.
    pub fn link_rate(&self) -> Option<f64> {
        self.links
            .iter()
            .filter_map(|l| l.speed_bytes_per_second)
            .fold(None, |best: Option<f64>, r| Some(best.map_or(r, |b| b.max(r))))
    }
    pub fn links_up(&self) -> u32 {
        self.links.iter().filter(|l| l.up == Some(true)).count() as u32
    }
    /// Links that should be up and are not: the board has them, and the driver says down.
    pub fn links_down(&self) -> impl Iterator<Item = &NvLink> {
        self.links.iter().filter(|l| l.up == Some(false))
    }
}

fn sum_by_key<'a>(pairs: impl Iterator<Item = &'a (&'static str, u64)>) -> Vec<(&'static str, u64)> {
    let mut out: Vec<(&'static str, u64)> = Vec::new();
    for (key, n) in pairs {
        match out.iter_mut().find(|(k, _)| k == key) {
            Some((_, total)) => *total += n,
            None => out.push((key, *n)),
        }
    }
    out
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NvLink {
    pub link: u32,
    /// `None` where the driver does not say.
    pub up: Option<bool>,
    /// (type, count since the driver loaded): crc_flit, crc_data, replay, recovery; only the
    /// counters the link has.
    #[serde(serialize_with = "super::pairs_as_map")]
    pub errors: Vec<(&'static str, u64)>,
    /// (direction, bytes since the driver loaded): tx, rx; user data, without protocol overhead.
    #[serde(serialize_with = "super::pairs_as_map")]
    pub bytes: Vec<(&'static str, u64)>,
    /// The link's rate one way, bytes/s (NVML's NVLink speed; `nvidia-smi nvlink -s`);
    /// `None` where the driver does not say, or the link is down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed_bytes_per_second: Option<f64>,
}

impl NvLink {
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().map(|(_, n)| n).sum()
    }
}

crate::model::label::label_enum! {
    /// The fabric states NVML reports, in its order (the `state` label of
    /// `gpu_nvlink_fabric_state`).
    pub enum FabricState {
        NotStarted => "not_started",
        InProgress => "in_progress",
        Completed => "completed",
    }
}

/// Where the GPU stands with the NVLink fabric (NVSwitch systems; absent elsewhere).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fabric {
    pub state: FabricState,
    /// The fabric manager's verdict once registration is done: `None` for success, the NVML
    /// error in words otherwise.
    pub error: Option<String>,
    pub clique_id: u32,
}

impl Fabric {
    /// True when the GPU has not (yet, or at all) joined the fabric: its NVLinks to the
    /// other GPUs carry nothing, and NCCL falls back to PCIe or fails.
    pub fn degraded(&self) -> bool {
        self.state != FabricState::Completed || self.error.is_some()
    }
}

/// Whether nvidia-fabricmanager runs, on a node whose GPUs report an NVLink fabric
/// (`sources::fabric_manager`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FabricManager {
    pub running: bool,
    /// Its process, from its pid file.
    pub pid: Option<u32>,
    /// What was seen, for a person: "pid 1234 (nv-fabricmanager)", "no pid file at ...".
    pub detail: String,
}
