//! `fabric_manager`: how gpuwarden tells whether nvidia-fabricmanager runs on a node whose
//! GPUs report an NVLink fabric (NVSwitch systems). Reloadable.

use super::*;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FabricManager {
    /// Check it where a GPU reports an NVLink fabric (elsewhere there is nothing to check).
    pub check: bool,
    /// Its pid file, as its systemd unit writes it (`PIDFile=`).
    pub pid_file: PathBuf,
    /// The process name (`/proc/PID/comm`) the pid must belong to.
    pub process: String,
}

impl Default for FabricManager {
    fn default() -> Self {
        FabricManager {
            check: true,
            pid_file: PathBuf::from("/var/run/nvidia-fabricmanager/nv-fabricmanager.pid"),
            process: "nv-fabricmanager".to_string(),
        }
    }
}
