//! What the exposition serves beyond the defaults: `compat` (dcgm-exporter's names), `nvlink`
//! (per-link series) and `web` (TLS and basic auth, in a file of their own). Reloadable:
//! families are chosen at each render.

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

/// TLS and basic auth for the HTTP server.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Web {
    /// A web config file in the Prometheus exporter-toolkit format (tls_server_config,
    /// basic_auth_users); empty: plain HTTP without auth.
    pub config_file: PathBuf,
}
