//! The reboot marker (`remediation.reboot_marker`, `/run/gpuwarden/reboot-required` by
//! default), in the manner of Debian's `/run/reboot-required`: a file whose presence says the
//! node needs a reboot, holding why. Written whole (a new file renamed over the old), never
//! through a link someone left in its place, through a temporary file of an unpredictable
//! name made with O_EXCL (a name someone else made first is passed over, never used).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `why` (one line) to `path`.
pub fn write(path: &Path, why: &str) -> std::io::Result<()> {
    let Some(name) = path.file_name() else {
        return Err(std::io::Error::other("the marker path names no file"));
    };
    let (tmp, mut file) = new_temporary(path, &name.to_string_lossy())?;
    let line = crate::input::printable(why);
    file.write_all(format!("{line}{SIGNATURE}\n").as_bytes())?;
    drop(file);
    // rename() replaces a link at `path` itself, never the file it points at.
    std::fs::rename(&tmp, path)
}

/// How the marker's line ends: what tells a marker of gpuwarden's from a file someone else
/// keeps at the same path (Debian's `/run/reboot-required`, written by unattended-upgrades),
/// which gpuwarden never removes.
const SIGNATURE: &str = " (gpuwarden remediation)";

/// Whether the file at `path` is a marker gpuwarden wrote: a regular file (no link followed)
/// whose first line ends with [`SIGNATURE`].
pub fn is_ours(path: &Path) -> bool {
    use crate::input::{Links, read_bytes};
    match read_bytes(path, 4096, Links::Refuse) {
        Ok((bytes, _)) => String::from_utf8_lossy(&bytes)
            .lines()
            .next()
            .is_some_and(|line| line.ends_with(SIGNATURE)),
        Err(_) => false,
    }
}

/// Removes the marker at `path` if it is gpuwarden's; says why not otherwise.
pub fn remove_ours(path: &Path) -> std::io::Result<()> {
    if !is_ours(path) {
        return Err(std::io::Error::other(
            "the file there is not a marker gpuwarden wrote (someone else keeps it); left alone",
        ));
    }
    std::fs::remove_file(path)
}

/// At a start with the journal, makes the marker file say what the journal says: the mark of
/// this boot is written again if the file is gone, and a file the journal has no mark for (a
/// daemon stopped between the two, before the mark was written first to the journal) goes.
/// The journal is the record: the state, the marker and the journal never disagree.
pub fn agree_with_journal(path: &Path, mark: Option<&crate::model::remediation::RebootRequired>) {
    if path.as_os_str().is_empty() {
        return;
    }
    let present = std::fs::symlink_metadata(path).is_ok();
    match (mark, present) {
        (Some(mark), false) => match write(path, &mark.why) {
            Ok(()) => log::warn!(
                "the node still needs a reboot ({}): the marker {} is written again",
                mark.why,
                path.display()
            ),
            Err(e) => log::warn!("cannot write the reboot marker {}: {e}", path.display()),
        },
        (None, true) if !is_ours(path) => log::debug!(
            "{} is not a reboot marker of gpuwarden's (someone else keeps it there); left alone",
            path.display()
        ),
        (None, true) => match std::fs::remove_file(path) {
            Ok(()) => log::warn!(
                "the reboot marker {} was left by a run whose mark is not in the journal; removed",
                path.display()
            ),
            Err(e) => log::warn!("cannot remove the stale reboot marker {}: {e}", path.display()),
        },
        _ => {}
    }
}

/// A new file beside `path` whose name no one can guess (`.NAME.<16 random hex digits>`), made
/// with O_EXCL|O_NOFOLLOW: a name taken already (by anyone) is passed over for another.
fn new_temporary(path: &Path, name: &str) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    for _ in 0..16 {
        let mut random = [0u8; 8];
        // SAFETY: getrandom(2) writes at most `random.len()` bytes into the buffer we own.
        let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
        if got != random.len() as isize {
            return Err(std::io::Error::last_os_error());
        }
        let tmp = path.with_file_name(format!(".{name}.{:016x}", u64::from_ne_bytes(random)));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o644)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(
        "no free temporary name beside the marker after 16 tries",
    ))
}

/// What `gpuwarden config check` says about the marker's directory: one that others can
/// write lets them block or replace the marker (a file or link of theirs at its name).
pub fn caution(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty())?;
    let meta = std::fs::metadata(dir).ok()?;
    let others_write = meta.mode() & 0o002 != 0 || (meta.mode() & 0o020 != 0 && meta.gid() != 0) || meta.uid() != 0;
    others_write.then(|| {
        format!(
            "remediation.reboot_marker {}: its directory {} can be written by others than root (mode {:o}, owner uid {}); \
             they could put a file or link at the marker's name. Use a directory only root can write, such as \
             /run/gpuwarden (systemd: RuntimeDirectory=gpuwarden)",
            path.display(),
            dir.display(),
            meta.mode() & 0o7777,
            meta.uid()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_replaces_a_link_instead_of_writing_through_it() {
        let dir = std::env::temp_dir().join(format!("gpuwarden-marker-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep me").unwrap();
        let marker = dir.join("reboot-required");
        std::os::unix::fs::symlink(&victim, &marker).unwrap();
        write(&marker, "the GPU reset of GPU 0 failed:\nexit status 1").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        let text = std::fs::read_to_string(&marker).unwrap();
        assert!(text.starts_with("the GPU reset of GPU 0 failed:"), "{text}");
        assert_eq!(text.lines().count(), 1, "one line: {text:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A user who made `.reboot-required.<pid>` first (the old temporary name) does not block
    /// the marker: the temporary name cannot be guessed (issue #51, item 9).
    #[test]
    fn a_file_at_the_old_temporary_name_does_not_block_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("reboot-required");
        std::fs::create_dir(dir.path().join(format!(".reboot-required.{}", std::process::id()))).unwrap();
        write(&marker, "the GPU reset of GPU 0 failed").unwrap();
        assert!(std::fs::read_to_string(&marker).unwrap().starts_with("the GPU reset"));
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".reboot-required.") && !n.ends_with(&std::process::id().to_string()))
            .collect();
        assert!(left.is_empty(), "no temporary file left: {left:?}");
    }

    /// Debian's /run/reboot-required (unattended-upgrades) at the marker's path, with no mark
    /// in the journal: not gpuwarden's, so it stays; gpuwarden's own stale marker goes.
    #[test]
    fn only_a_marker_gpuwarden_wrote_is_ever_removed() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("reboot-required");
        std::fs::write(&marker, "*** System restart required ***\n").unwrap();
        agree_with_journal(&marker, None);
        assert!(marker.exists(), "someone else's file stays");
        assert!(remove_ours(&marker).is_err());
        assert!(marker.exists());
        write(&marker, "the GPU reset of GPU 0 failed").unwrap();
        assert!(is_ours(&marker));
        agree_with_journal(&marker, None);
        assert!(!marker.exists(), "a marker of ours the journal has no mark for goes");
        // A link to a file of ours is not ours: nothing is followed.
        let ours = dir.path().join("elsewhere");
        write(&ours, "x").unwrap();
        std::os::unix::fs::symlink(&ours, &marker).unwrap();
        assert!(!is_ours(&marker));
    }

    #[test]
    fn a_marker_directory_others_can_write_is_cautioned() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("reboot-required");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // SAFETY: geteuid(2) reads the process's own uid.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(caution(&marker), None, "root's, 0755");
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(caution(&marker).unwrap().contains("can be written by others than root"));
    }
}
