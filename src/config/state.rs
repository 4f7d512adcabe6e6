//! `state`: the health journal's file, its retention and size cap (docs/journal.md). A reload
//! that moves the file takes effect at the next batch.

use super::*;

/// The health journal (docs/journal.md): what happened to each GPU, kept on the node across
/// restarts and reboots.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct State {
    /// The SQLite database; "" turns the journal off.
    pub path: PathBuf,
    /// Rows older than this are deleted (hourly).
    #[serde(deserialize_with = "state_retention")]
    pub retention: Duration,
    /// The database's size cap in MiB: past it, the oldest rows go first.
    #[serde(deserialize_with = "state_max_size_mib")]
    pub max_size_mib: u64,
    /// Where the boot id is read: rows carry it, and a fatal XID holds its GPU for the rest of
    /// the boot it was seen in. Another file only for tests and chroots.
    pub boot_id_file: PathBuf,
}

/// Where the journal lives by default; systemd's `StateDirectory=gpuwarden` makes the directory.
pub const STATE_PATH: &str = "/var/lib/gpuwarden/state.db";

impl Default for State {
    fn default() -> Self {
        State {
            path: PathBuf::from(STATE_PATH),
            retention: Duration::from_secs(180 * 24 * 3600),
            max_size_mib: 64,
            boot_id_file: PathBuf::from("/proc/sys/kernel/random/boot_id"),
        }
    }
}

pub(super) fn state_max_size_mib<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let value = u64::deserialize(d)?;
    if !(1..=1024 * 1024).contains(&value) {
        return Err(serde::de::Error::custom(format!(
            "state.max_size_mib is {value}; it must be from 1 to 1048576 (a year of a busy node takes a few MiB)"
        )));
    }
    Ok(value)
}
