//! The GPU backends' own sections: `nvml`, `persistence`, `amd` (and its `rocm_smi`). A reload
//! that changes one makes its backend anew (counters carry on).

use super::*;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Nvml {
    /// Set to false on nodes without NVIDIA GPUs to skip even looking for the library.
    pub enabled: bool,
    /// The NVML library to load: a file name searched the usual way, or a path.
    pub library_path: PathBuf,
    /// How long to wait before trying again when NVML cannot be loaded or initialised
    /// (no driver yet, or a driver reload); doubles up to `retry_max`.
    #[serde(deserialize_with = "nvml_retry", serialize_with = "write_duration")]
    pub retry_initial: Duration,
    #[serde(deserialize_with = "nvml_retry", serialize_with = "write_duration")]
    pub retry_max: Duration,
    /// Not from the file: the command polls once and exits (`check`), so it never tries again.
    #[serde(skip)]
    pub one_shot: bool,
}

impl Default for Nvml {
    fn default() -> Self {
        Nvml {
            enabled: true,
            // The unversioned libnvidia-ml.so comes only with development packages.
            library_path: PathBuf::from("libnvidia-ml.so.1"),
            retry_initial: Duration::from_secs(5),
            retry_max: Duration::from_secs(300),
            one_shot: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Persistence {
    /// Turn persistence mode on wherever a poll finds it off. gpuwarden never turns it off.
    pub enable: bool,
}

impl Default for Persistence {
    fn default() -> Self {
        Persistence { enable: true }
    }
}

/// AMD GPUs, read from amdgpu's sysfs files.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Amd {
    /// Set to false on nodes without AMD GPUs to skip even looking.
    pub enabled: bool,
    /// Where sysfs is: `/` on a host; a copy of the tree for tests, or a container that
    /// mounts the host's /sys elsewhere.
    pub sysfs_root: PathBuf,
    pub rocm_smi: RocmSmi,
}

impl Default for Amd {
    fn default() -> Self {
        Amd {
            enabled: true,
            sysfs_root: PathBuf::from("/"),
            rocm_smi: RocmSmi::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RocmSmi {
    /// Read AMD GPUs through ROCm SMI when it is installed; sysfs alone otherwise.
    pub enabled: bool,
    /// The library: a file name searched the usual way, or a path.
    pub library_path: PathBuf,
}

impl Default for RocmSmi {
    fn default() -> Self {
        RocmSmi {
            enabled: true,
            library_path: PathBuf::from("librocm_smi64.so.1"),
        }
    }
}
