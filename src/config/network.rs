//! `network`: the node's InfiniBand and RoCE ports (docs/health.md, "Network ports"): how
//! often they are read and the thresholds of their rules. Reloadable: the next read and the
//! next snapshot use it.

use super::*;

/// The RDMA ports under `/sys/class/infiniband` (read from `amd.sysfs_root`'s /sys, like the
/// PCI census). Each threshold's default and where it comes from is in docs/health.md.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Network {
    /// Read the ports; a node without RDMA hardware has none to show either way.
    pub enabled: bool,
    /// How often the ports are read (a few dozen small sysfs files each).
    #[serde(deserialize_with = "network_interval", serialize_with = "write_duration")]
    pub interval: Duration,
    /// How many ports must be Active/LinkUp (8 on an HGX H100 node's compute fabric); unset:
    /// not checked.
    pub expected_ports: Option<u32>,
    /// The rate a port should run at, in Gb/s, per link layer (`infiniband`, `ethernet`);
    /// unset for a layer: the highest rate among the node's ports of that layer.
    #[serde(deserialize_with = "expected_rates")]
    pub expected_rate_gbps: ExpectedRates,
    /// A port that went down this many times within `flap_window` is flapping.
    #[serde(deserialize_with = "network_flaps")]
    pub flaps: u32,
    #[serde(deserialize_with = "network_flap_window", serialize_with = "write_duration")]
    pub flap_window: Duration,
    /// More symbol errors than this within the last hour make a port degraded.
    pub symbol_errors_per_hour: u64,
    /// RDMA devices not judged (a management port, a storage adapter): names like `mlx5_4`.
    /// Their series are still served.
    pub ignore: Vec<String>,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            enabled: true,
            interval: Duration::from_secs(10),
            expected_ports: None,
            expected_rate_gbps: ExpectedRates::default(),
            flaps: 3,
            flap_window: Duration::from_secs(600),
            symbol_errors_per_hour: 120,
            ignore: Vec::new(),
        }
    }
}

pub use crate::model::nic::ExpectedRates;

pub(super) fn expected_rates<'de, D: Deserializer<'de>>(d: D) -> Result<ExpectedRates, D::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Written {
        #[serde(default)]
        infiniband: Option<f64>,
        #[serde(default)]
        ethernet: Option<f64>,
    }
    let written = Written::deserialize(d)?;
    for (key, value) in [("infiniband", written.infiniband), ("ethernet", written.ethernet)] {
        if value.is_some_and(|v| !(v.is_finite() && v > 0.0 && v <= 100_000.0)) {
            return Err(serde::de::Error::custom(format!(
                "network.expected_rate_gbps.{key} must be a rate in Gb/s above 0 (400 for NDR, 200 for HDR)"
            )));
        }
    }
    Ok(ExpectedRates {
        infiniband: written.infiniband,
        ethernet: written.ethernet,
    })
}

pub(super) fn network_flaps<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let value = u32::deserialize(d)?;
    if !(1..=1000).contains(&value) {
        return Err(serde::de::Error::custom(format!(
            "network.flaps is {value}; write how many downs within network.flap_window make a port flapping (1 to 1000)"
        )));
    }
    Ok(value)
}
