//! What the exposition serves beyond the defaults: `compat` (dcgm-exporter's names), `nvlink`
//! (per-link series), `metrics` (gpuwarden's timing of its own polls, which a large fleet
//! turns off) and `web` (TLS and basic auth, in a file of their own). Reloadable: families are
//! chosen at each render.

use super::*;

/// Metric names of other exporters, served beside gpuwarden's own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Compat {
    /// dcgm-exporter's `DCGM_FI_*` families, labels and units (docs/metrics.md).
    pub dcgm_exporter: bool,
}

/// NVLink series.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Nvlink {
    /// Series per link (state, errors, bytes: 108 per H200) beside the per-GPU totals; off by
    /// default, as dcgm-exporter's default fields are per GPU too.
    pub per_link: bool,
}

/// gpuwarden's series about itself.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    /// The time spent in each vendor library call (`gpuwarden_vendor_call_seconds_total`, one
    /// series per NVML call name) and the poll histograms (`gpuwarden_poll_duration_seconds`,
    /// `gpuwarden_poll_round_duration_seconds`): about 70 series a node that no shipped rule or
    /// dashboard reads. On by default, to see on the node why a poll is slow; a large fleet
    /// turns them off (docs/fleet.md, "The large-fleet profile").
    pub poll_timing: bool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics { poll_timing: true }
    }
}

/// TLS and basic auth for the HTTP server.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Web {
    /// A web config file in the Prometheus exporter-toolkit format (tls_server_config,
    /// basic_auth_users); empty: plain HTTP without auth.
    pub config_file: PathBuf,
}
