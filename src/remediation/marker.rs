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
