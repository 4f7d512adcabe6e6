//! `local_api`: the Unix socket where `gpuwarden health` and the scheduler hooks ask the
//! running daemon. Needs a restart to change.

use super::*;

/// The local API (docs/health.md, "The verdict for schedulers"): `gpuwarden health` and the
/// scheduler hooks ask the running daemon here, never over the network.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalApi {
    /// A Unix socket, mode 0600, answering only root and gpuwarden's own user; "" turns it off.
    pub socket: PathBuf,
}

/// Where the local API listens by default; systemd's `RuntimeDirectory=gpuwarden` makes the
/// directory.
pub const LOCAL_SOCKET: &str = "/run/gpuwarden/gpuwarden.sock";

impl Default for LocalApi {
    fn default() -> Self {
        LocalApi {
            socket: PathBuf::from(LOCAL_SOCKET),
        }
    }
}
