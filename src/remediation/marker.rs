//! The reboot marker (`remediation.reboot_marker`, `/run/gpuwarden/reboot-required` by
//! default), in the manner of Debian's `/run/reboot-required`: a file whose presence says the
//! node needs a reboot, holding why. Written whole (a new file renamed over the old), never
//! through a link someone left in its place.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `why` (one line) to `path`.
pub fn write(path: &Path, why: &str) -> std::io::Result<()> {
    let Some(name) = path.file_name() else {
        return Err(std::io::Error::other("the marker path names no file"));
    };
    let tmp = path.with_file_name(format!(".{}.{}", name.to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(&tmp)?;
    let line = crate::input::printable(why);
    file.write_all(format!("{line}\n").as_bytes())?;
    drop(file);
    // rename() replaces a link at `path` itself, never the file it points at.
    std::fs::rename(&tmp, path)
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
}
