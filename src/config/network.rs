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
    /// How often the ports' states, rate and `link_downed` are read (a few small sysfs files
    /// a port).
    #[serde(deserialize_with = "network_interval", serialize_with = "write_duration")]
    pub interval: Duration,
    /// How often every error counter is read (a dozen files a port, and mlx5 asks its
    /// firmware for each `hw_counters/` one); the hourly windows sample once a minute.
    #[serde(deserialize_with = "network_counters_interval", serialize_with = "write_duration")]
    pub counters_interval: Duration,
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
            counters_interval: Duration::from_secs(60),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("net.yaml"))
    }

    #[test]
    fn every_key_reads_and_bad_values_say_where_and_what_to_write() {
        let c = parse(
            "network:\n  interval: 30s\n  expected_ports: 8\n  expected_rate_gbps: {infiniband: 400}\n  \
             flaps: 5\n  flap_window: 15m\n  symbol_errors_per_hour: 10\n  ignore: [mlx5_4]\n",
        )
        .unwrap();
        let n = &c.network;
        assert_eq!(
            (n.interval, n.expected_ports, n.flaps),
            (Duration::from_secs(30), Some(8), 5)
        );
        assert_eq!(
            (n.expected_rate_gbps.infiniband, n.expected_rate_gbps.ethernet),
            (Some(400.0), None)
        );
        assert_eq!(
            (n.flap_window, n.symbol_errors_per_hour),
            (Duration::from_secs(900), 10)
        );
        assert_eq!(n.ignore, ["mlx5_4"]);
        for (text, says, line) in [
            ("network:\n  interval: 0s\n", "network.interval is 0s", 2),
            ("network:\n  flaps: 0\n", "network.flaps is 0", 2),
            (
                "network:\n  expected_rate_gbps: {infiniband: -1}\n",
                "expected_rate_gbps.infiniband",
                2,
            ),
            ("network:\n  expected_rate_gbps: {omnipath: 100}\n", "omnipath", 2),
            ("network:\n\n  flap_window: 1s\n", "network.flap_window is 1s", 3),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.message.contains(says), "{text:?}: {}", e.message);
            assert_eq!(e.line, Some(line), "{text:?}: {e:?}");
        }
    }
}
