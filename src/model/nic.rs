//! The node's network ports as /metrics and the health rules see them: the InfiniBand and
//! RoCE ports of its RDMA devices (`/sys/class/infiniband`, read by `sources::nics`), and
//! what the health memory remembers of each port between reads (flaps, error growth).

use super::health::Growth;

/// Most ports read on a node: an HGX node has 8 to 10 RDMA ports; a doctored tree of
/// 10,000 makes no more series than this.
pub(crate) const MAX_PORTS: usize = 64;

/// Where a watched counter lives under a port's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterDir {
    /// `counters/`: the InfiniBand performance-management (PMA) counters, kept by the core.
    Pma,
    /// `hw_counters/`: the driver's own (mlx5's "Q counters"), present when it has them.
    Hw,
}

impl CounterDir {
    pub(crate) fn dir(self) -> &'static str {
        match self {
            CounterDir::Pma => "counters",
            CounterDir::Hw => "hw_counters",
        }
    }
}

crate::model::label::label_enum! {
    /// The error counters read from each port, where the kernel shows them, in the order
    /// they are read and served: the `counter` label of `nic_port_errors`, the file's name.
    /// The PMA ones are in the kernel's `drivers/infiniband/core/sysfs.c`; the others in mlx5's
    /// `drivers/infiniband/hw/mlx5/counters.c` (docs/metrics.md, "Network ports", says what
    /// each counts).
    pub enum PortCounter {
        LinkDowned => "link_downed",
        SymbolError => "symbol_error",
        LinkErrorRecovery => "link_error_recovery",
        PortRcvErrors => "port_rcv_errors",
        PortXmitDiscards => "port_xmit_discards",
        LocalLinkIntegrityErrors => "local_link_integrity_errors",
        ExcessiveBufferOverrunErrors => "excessive_buffer_overrun_errors",
        PortRcvRemotePhysicalErrors => "port_rcv_remote_physical_errors",
        RnrNakRetryErr => "rnr_nak_retry_err",
        ReqTransportRetriesExceeded => "req_transport_retries_exceeded",
        LocalAckTimeoutErr => "local_ack_timeout_err",
        RoceSlowRestart => "roce_slow_restart",
    }
}

impl PortCounter {
    /// The directory of the port that holds it.
    pub(crate) fn dir(self) -> CounterDir {
        match self {
            PortCounter::RnrNakRetryErr
            | PortCounter::ReqTransportRetriesExceeded
            | PortCounter::LocalAckTimeoutErr
            | PortCounter::RoceSlowRestart => CounterDir::Hw,
            _ => CounterDir::Pma,
        }
    }
}

/// One read of every RDMA device on the node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NicScan {
    pub devices: Vec<NicDevice>,
}

impl NicScan {
    /// Every port with its device.
    pub fn ports(&self) -> impl Iterator<Item = (&NicDevice, &NicPort)> {
        self.devices.iter().flat_map(|d| d.ports.iter().map(move |p| (d, p)))
    }
}

/// One RDMA device (`mlx5_0`): a PCI function of a ConnectX adapter, with its ports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NicDevice {
    /// Its name under /sys/class/infiniband.
    pub name: String,
    pub fw_ver: Option<String>,
    pub board_id: Option<String>,
    pub hca_type: Option<String>,
    /// The PCI function it is, in the kernel's form.
    pub pci_bus_id: Option<String>,
    pub pcie: NicPcie,
    /// The PCI addresses of the GPUs behind the same PCIe switch (or root port): the GPUs
    /// whose traffic goes through this adapter. Empty where none shares one.
    pub near_gpus: Vec<String>,
    pub ports: Vec<NicPort>,
}

/// The adapter's own PCIe link; each part `None` where the kernel does not show it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NicPcie {
    /// GT/s per lane.
    pub speed_gts: Option<f64>,
    pub max_speed_gts: Option<f64>,
    pub width: Option<u32>,
    pub max_width: Option<u32>,
}

impl NicPcie {
    /// The link trained to fewer lanes than it has (a bad riser, a dirty slot): half the
    /// lanes, half the bandwidth. Speed is not judged: it may drop to save power.
    pub fn narrowed(&self) -> bool {
        matches!((self.width, self.max_width), (Some(now), Some(max)) if now < max)
    }
}

/// One port of an RDMA device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NicPort {
    pub port: u32,
    /// `infiniband` or `ethernet` (RoCE), lower case as a label.
    pub link_layer: String,
    /// The logical state: `(4, "ACTIVE")` from `4: ACTIVE`.
    pub state: Option<(u8, String)>,
    /// The physical state: `(5, "LinkUp")` from `5: LinkUp`.
    pub phys_state: Option<(u8, String)>,
    /// Gb/s, from `400 Gb/sec (4X NDR)`.
    pub rate_gbps: Option<f64>,
    /// The watched counters the kernel shows for it, by name.
    pub counters: Vec<(PortCounter, u64)>,
    /// The network interface of a RoCE port.
    pub netdev: Option<Netdev>,
    /// What the health memory remembers of it (nothing in a one-shot `check`).
    pub trend: NicTrend,
}

/// The InfiniBand state codes (IBTA: 4 is ACTIVE) and physical state codes (5 is LinkUp).
pub(crate) const STATE_ACTIVE: u8 = 4;
pub(crate) const PHYS_LINK_UP: u8 = 5;

impl NicPort {
    /// Active and LinkUp: the port carries traffic. `None` where neither state is readable;
    /// with only one readable the port is not up, whatever that one says: a port whose
    /// logical state cannot be read is not shown carrying traffic.
    pub fn up(&self) -> Option<bool> {
        match (&self.state, &self.phys_state) {
            (None, None) => None,
            (Some((state, _)), Some((phys, _))) => Some(*state == STATE_ACTIVE && *phys == PHYS_LINK_UP),
            _ => Some(false),
        }
    }

    pub fn counter(&self, counter: PortCounter) -> Option<u64> {
        self.counters.iter().find(|(c, _)| *c == counter).map(|(_, v)| *v)
    }

    /// "ACTIVE/LinkUp", for messages.
    pub fn states(&self) -> String {
        let word = |s: &Option<(u8, String)>| s.as_ref().map(|(_, w)| w.clone()).unwrap_or_else(|| "?".into());
        format!("{}/{}", word(&self.state), word(&self.phys_state))
    }
}

/// A RoCE port's network interface (`/sys/class/net/<name>`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Netdev {
    pub name: String,
    /// Its operational state (`operstate`).
    pub operstate: Option<OperState>,
    /// Mb/s; `None` while the link is down (the kernel answers -1 or an error).
    pub speed_mbps: Option<u64>,
    pub carrier_changes: Option<u64>,
}

/// A network interface's operational state, as the kernel writes `operstate` (RFC 2863's
/// ifOperStatus); a word it does not know is kept as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperState {
    Up,
    Down,
    LowerLayerDown,
    Dormant,
    Testing,
    NotPresent,
    Unknown,
    Other(String),
}

impl OperState {
    pub fn parse(word: &str) -> OperState {
        match word {
            "up" => OperState::Up,
            "down" => OperState::Down,
            "lowerlayerdown" => OperState::LowerLayerDown,
            "dormant" => OperState::Dormant,
            "testing" => OperState::Testing,
            "notpresent" => OperState::NotPresent,
            "unknown" => OperState::Unknown,
            other => OperState::Other(other.to_string()),
        }
    }

    /// The kernel's word.
    pub fn as_str(&self) -> &str {
        match self {
            OperState::Up => "up",
            OperState::Down => "down",
            OperState::LowerLayerDown => "lowerlayerdown",
            OperState::Dormant => "dormant",
            OperState::Testing => "testing",
            OperState::NotPresent => "notpresent",
            OperState::Unknown => "unknown",
            OperState::Other(word) => word,
        }
    }

    pub fn is_up(&self) -> bool {
        *self == OperState::Up
    }
}

/// What the health memory knows of a port from earlier reads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NicTrend {
    /// Times the link went down within `network.flap_window` (its `link_downed` growth, or
    /// downs seen between reads where it has no such counter); `None` at the first look (a
    /// one-shot `check` knows nothing of flaps).
    pub flaps: Option<u64>,
    /// Growth within the last hour of the counters the rules judge.
    pub link_downed: Option<Growth>,
    pub local_link_integrity_errors: Option<Growth>,
    pub symbol_error: Option<Growth>,
}

pub use super::health::ExpectedRates;
pub(crate) use super::health::NetworkLimits;

#[cfg(test)]
mod tests {
    use super::OperState;

    #[test]
    fn an_operstate_reads_back_as_the_kernel_wrote_it_and_only_up_is_up() {
        for word in [
            "up",
            "down",
            "lowerlayerdown",
            "dormant",
            "testing",
            "notpresent",
            "unknown",
            "weird",
        ] {
            let state = OperState::parse(word);
            assert_eq!(state.as_str(), word);
            assert_eq!(state.is_up(), word == "up", "{word}");
        }
        assert_eq!(OperState::parse("weird"), OperState::Other("weird".into()));
    }
}
