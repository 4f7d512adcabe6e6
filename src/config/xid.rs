//! `xid`: where XIDs are read from (the kernel log, NVML events), their de-duplication and
//! how long a critical one holds. Reloadable; a moved kernel log is re-opened.

use super::*;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Xid {
    /// Count XIDs from the kernel log.
    pub read_kernel_log: bool,
    /// The kernel log: /dev/kmsg, or a regular file that carries kernel-log records (a FIFO,
    /// socket or directory is refused by the reader, and `config check` says so).
    pub kernel_log_path: PathBuf,
    /// Count XIDs from NVML's event set.
    pub nvml_events: bool,
    /// Reports of the same XID on the same GPU from different sources within this window
    /// are one event.
    #[serde(deserialize_with = "xid_dedup_window", serialize_with = "write_duration")]
    pub dedup_window: Duration,
    /// How long a critical XID keeps its GPU `degraded`. Fatal XIDs keep it `unhealthy`
    /// until the daemon restarts (normally: until the node reboots).
    #[serde(deserialize_with = "xid_critical_hold", serialize_with = "write_duration")]
    pub critical_hold: Duration,
}

impl Default for Xid {
    fn default() -> Self {
        Xid {
            read_kernel_log: true,
            kernel_log_path: PathBuf::from("/dev/kmsg"),
            nvml_events: true,
            dedup_window: Duration::from_secs(10),
            critical_hold: Duration::from_secs(3600),
        }
    }
}
