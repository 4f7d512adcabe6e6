//! `gpuwarden copy-binary DIR`: put this very binary at DIR/gpuwarden. The Kubernetes
//! node-problem-detector component runs it as an init container to hand gpuwarden to NPD's
//! container (deploy/kubernetes/components/node-problem-detector), because gpuwarden's image
//! holds no shell and no `cp` to do it with.

use crate::service::exit::{CliError, CliResult, Exit};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Copies the running executable to `dir/gpuwarden`, mode 0755. Written beside the target and
/// renamed into place, so a reader of `dir` sees the old binary or the whole new one. The
/// partial file is made new (`O_CREAT|O_EXCL`, no link followed) and its mode set through
/// its descriptor: whatever stood at its name (a link planted there) is removed, never
/// written through.
pub fn run(dir: &Path) -> CliResult {
    let failed = |what: &str, e: std::io::Error| {
        CliError::new(
            Exit::FAILURE,
            format!("gpuwarden copy-binary: {what} {}: {e}", dir.display()),
        )
    };
    let source = std::env::current_exe().map_err(|e| failed("cannot find its own binary to copy to", e))?;
    let target = dir.join("gpuwarden");
    let partial = dir.join(".gpuwarden.partial");
    write_new(&source, &partial).map_err(|e| failed("cannot write into", e))?;
    std::fs::rename(&partial, &target).map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        failed("cannot put the binary in", e)
    })?;
    println!("{}", target.display());
    Ok(Exit::SUCCESS)
}

/// Copies `source` into a file made new at `partial`, 0755.
fn write_new(source: &Path, partial: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // unlink never follows a link: a planted one goes, its target stays as it was.
    match std::fs::remove_file(partial) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut from = std::fs::File::open(source)?;
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .custom_flags(libc::O_NOFOLLOW)
        .open(partial)?;
    let result = std::io::copy(&mut from, &mut to)
        .and_then(|_| to.set_permissions(std::fs::Permissions::from_mode(0o755)))
        .and_then(|()| to.sync_all());
    if result.is_err() {
        let _ = std::fs::remove_file(partial);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_at_the_partial_name_is_replaced_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let precious = dir.path().join("shadow");
        std::fs::write(&precious, b"root:secret").unwrap();
        std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o600)).unwrap();
        let partial = dir.path().join(".gpuwarden.partial");
        std::os::unix::fs::symlink(&precious, &partial).unwrap();
        let source = dir.path().join("binary");
        std::fs::write(&source, b"\x7fELF...").unwrap();
        write_new(&source, &partial).unwrap();
        assert_eq!(std::fs::read(&precious).unwrap(), b"root:secret");
        let mode = std::fs::metadata(&precious).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600, "the link's target keeps its mode");
        assert!(!partial.is_symlink());
        assert_eq!(std::fs::read(&partial).unwrap(), b"\x7fELF...");
        assert_eq!(
            std::fs::metadata(&partial).unwrap().permissions().mode() & 0o7777,
            0o755
        );
    }
}
