//! `kubernetes.api`, `kubernetes.node` and `kubernetes.devices`: the verdict written to the
//! node's own objects in the API server, directly (docs/health.md, "Kubernetes"). Off by
//! default; the node-problem-detector sidecar stays for those who prefer it. Read at start; a
//! reload that changes them is said in the log and takes effect at the next start.

use super::*;

/// How gpuwarden reaches the API server: in a pod, the service account's mounted token and
/// CA and the `KUBERNETES_SERVICE_*` address (all defaults); outside one, a server and files.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeApi {
    /// `https://host:port`; "" takes `KUBERNETES_SERVICE_HOST` and `_PORT` (in a pod).
    pub server: String,
    /// The bearer token, re-read at every request (a projected token is rotated in place).
    pub token_file: PathBuf,
    /// PEM certificates the API server's chain must end in.
    pub ca_file: PathBuf,
    /// One request, connection to answer, within this.
    #[serde(deserialize_with = "kubernetes_api_timeout")]
    pub timeout: Duration,
}

/// Where a pod's service account token and CA are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

impl Default for KubeApi {
    fn default() -> Self {
        KubeApi {
            server: String::new(),
            token_file: Path::new(SERVICE_ACCOUNT_DIR).join("token"),
            ca_file: Path::new(SERVICE_ACCOUNT_DIR).join("ca.crt"),
            timeout: Duration::from_secs(5),
        }
    }
}

/// The node's condition, its Events and its taint.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeNode {
    /// Writes the node's condition and Events (and the taint, below); off by default.
    pub enabled: bool,
    /// The Node's name; "" takes `NODE_NAME` (the DaemonSet sets it from `spec.nodeName`),
    /// else the host name.
    pub name: String,
    /// The condition's type: True while the node's verdict is unhealthy (node-problem-detector's
    /// convention: True is a problem). The same as the sidecar's, so what watches one watches both.
    #[serde(deserialize_with = "condition_type")]
    pub condition: String,
    /// A `NoSchedule` taint `gpuwarden/unhealthy` while the verdict is unhealthy, lifted only
    /// once it is not (after a clear and a passed validation).
    pub taint: bool,
    /// The most nodes gpuwarden's taint may be on at once, counted from the API: a count (`3`)
    /// or a share of the nodes `fleet_selector` selects (`10%`, at least one node).
    pub max_tainted: MaxTainted,
    /// The label selector of the nodes `max_tainted` counts among (`nvidia.com/gpu.present=true`);
    /// "" counts all nodes.
    pub fleet_selector: String,
}

impl Default for KubeNode {
    fn default() -> Self {
        KubeNode {
            enabled: false,
            name: String::new(),
            condition: "GpuUnhealthy".into(),
            taint: true,
            max_tainted: MaxTainted::Percent(10),
            fleet_selector: String::new(),
        }
    }
}

/// `max_tainted`: a number of nodes or a share of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTainted {
    Nodes(u32),
    Percent(u32),
}

impl MaxTainted {
    /// The cap among `fleet` nodes: a share rounds down, and is at least one node.
    pub fn of(self, fleet: usize) -> usize {
        match self {
            MaxTainted::Nodes(n) => n as usize,
            MaxTainted::Percent(p) => (fleet * p as usize / 100).max(1),
        }
    }
}

impl std::fmt::Display for MaxTainted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxTainted::Nodes(n) => write!(f, "{n}"),
            MaxTainted::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl<'de> Deserialize<'de> for MaxTainted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MaxTainted, D::Error> {
        let text = String::deserialize(d)?;
        let bad = || {
            serde::de::Error::custom(format!(
                "kubernetes.node.max_tainted is {text:?}; write a number of nodes (3) or a share of the fleet from 1% to 100% (10%)"
            ))
        };
        match text.trim().strip_suffix('%') {
            Some(p) => match p.trim().parse::<u32>() {
                Ok(p) if (1..=100).contains(&p) => Ok(MaxTainted::Percent(p)),
                _ => Err(bad()),
            },
            None => text.trim().parse::<u32>().map(MaxTainted::Nodes).map_err(|_| bad()),
        }
    }
}

/// A condition type as the API takes it: a name of letters, digits, `-`, `_` and `.`.
fn condition_type<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    let good = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > 63 || !name.chars().all(good) {
        return Err(serde::de::Error::custom(format!(
            "kubernetes.node.condition {name:?} is not a condition type; write 1 to 63 letters, digits, -, _ or . (GpuUnhealthy)"
        )));
    }
    Ok(name)
}

/// Each unhealthy GPU's device, where the cluster runs a DRA driver: a `DeviceTaintRule`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeDevices {
    /// Writes a `DeviceTaintRule` (resource.k8s.io/v1) for each GPU that is not ok, matched
    /// through its ResourceSlice by UUID; off by default. Needs `kubernetes.node.enabled`.
    pub taint_rules: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("config.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_node_settings_are_off_by_default_and_read_with_their_bounds() {
        let c = Config::default();
        assert!(!c.kubernetes.node.enabled && !c.kubernetes.devices.taint_rules);
        assert_eq!(c.kubernetes.node.max_tainted, MaxTainted::Percent(10));
        let c = read(
            "kubernetes:\n  node:\n    enabled: true\n    max_tainted: 2\n  api:\n    server: https://127.0.0.1:6443\n    timeout: 2s\n",
        )
        .unwrap();
        assert!(c.kubernetes.node.enabled);
        assert_eq!(c.kubernetes.node.max_tainted, MaxTainted::Nodes(2));
        assert_eq!(c.kubernetes.api.timeout, Duration::from_secs(2));
        assert_eq!(
            read("kubernetes:\n  node:\n    max_tainted: 25%\n")
                .unwrap()
                .kubernetes
                .node
                .max_tainted,
            MaxTainted::Percent(25)
        );
        for bad in ["0%", "101%", "many", "-1"] {
            let e = read(&format!("kubernetes:\n  node:\n    max_tainted: \"{bad}\"\n")).unwrap_err();
            assert!(e.contains("max_tainted") && e.contains("config.yaml:3:"), "{bad}: {e}");
        }
        let e = read("kubernetes:\n  node:\n    condition: \"Gpu Unhealthy\"\n").unwrap_err();
        assert!(e.contains("not a condition type"), "{e}");
        let e = read("kubernetes:\n  api:\n    timeout: 5m\n").unwrap_err();
        assert!(e.contains("kubernetes.api.timeout"), "{e}");
    }

    #[test]
    fn a_share_of_the_fleet_is_at_least_one_node() {
        assert_eq!(MaxTainted::Percent(10).of(3), 1);
        assert_eq!(MaxTainted::Percent(10).of(100), 10);
        assert_eq!(MaxTainted::Percent(50).of(3), 1);
        assert_eq!(MaxTainted::Nodes(0).of(100), 0);
    }
}
