//! Whether a path the daemon loads, runs or trusts as root (a library, a rule file, a
//! secret) could have been written by someone else: the file, every directory above it and,
//! where links lead elsewhere, every directory above the target too, owned by root or the
//! daemon's own user and writable by no one else. A directory others may write is trusted
//! only with the sticky bit (as /tmp, or a Kubernetes Secret's volume), where nobody can
//! rename or replace another user's entry. The same rule the job mapping directory follows
//! (attribution/jobs.rs); refused with what to do, never warned about and used.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a path is not trusted: which component, and what about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{what} {path}: {component} {why}; anyone who can write there decides what the daemon {does} as root. \
     Keep it in a directory that root owns and others cannot write (chown root and chmod go-w each of them)"
)]
pub(crate) struct Untrusted {
    pub what: &'static str,
    pub does: &'static str,
    pub path: String,
    pub component: String,
    pub why: String,
}

/// Checks `path` (as written, and as its links resolve) for [`Untrusted`] parts. `what` names
/// the setting ("probe.cublas_library"), `does` what the daemon does with it ("loads").
/// A path that does not exist is not refused here (its reader says so when it reads it).
pub(crate) fn check(path: &Path, what: &'static str, does: &'static str) -> Result<(), Untrusted> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        match std::env::current_dir() {
            Ok(dir) => dir.join(path),
            Err(_) => return Ok(()),
        }
    };
    check_components(&absolute, path, what, does, me)?;
    if let Ok(real) = std::fs::canonicalize(&absolute)
        && real != absolute
    {
        check_components(&real, path, what, does, me)?;
    }
    Ok(())
}

/// Whether `path` names a file by path (it has a `/`), rather than a library name the
/// dynamic loader searches its own trusted paths for.
pub(crate) fn is_a_path(path: &Path) -> bool {
    path.as_os_str().as_encoded_bytes().contains(&b'/')
}

fn check_components(
    path: &Path,
    written: &Path,
    what: &'static str,
    does: &'static str,
    me: u32,
) -> Result<(), Untrusted> {
    let mut prefix = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir => prefix.push("/"),
            Component::Normal(part) => prefix.push(part),
            Component::ParentDir => {
                prefix.pop();
                continue;
            }
            Component::CurDir | Component::Prefix(_) => continue,
        }
        let Ok(meta) = std::fs::symlink_metadata(&prefix) else {
            // Not there (yet): nothing under it is either.
            return Ok(());
        };
        let refuse = |why: String| Untrusted {
            what,
            does,
            path: written.display().to_string(),
            component: prefix.display().to_string(),
            why,
        };
        if meta.uid() != 0 && meta.uid() != me {
            return Err(refuse(format!(
                "is owned by uid {}, not root or the daemon's user ({me})",
                meta.uid()
            )));
        }
        if meta.file_type().is_symlink() {
            // A link's own mode means nothing; its owner and its directory's do (checked).
            continue;
        }
        let mode = meta.permissions().mode();
        let others_write = mode & 0o022 != 0;
        let sticky_dir = meta.is_dir() && mode & 0o1000 != 0;
        if others_write && !sticky_dir {
            return Err(refuse(format!(
                "is writable by {} (mode {:04o})",
                if mode & 0o002 != 0 { "every user" } else { "its group" },
                mode & 0o7777
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_file_in_a_private_tree_is_trusted_and_each_writable_part_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib/libcublas.so.13");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"x").unwrap();
        chmod(&lib, 0o755);
        chmod(lib.parent().unwrap(), 0o755);
        check(&lib, "probe.cublas_library", "loads").unwrap();

        // The file writable by its group.
        chmod(&lib, 0o775);
        let e = check(&lib, "probe.cublas_library", "loads").unwrap_err();
        assert_eq!(e.component, lib.display().to_string());
        assert!(e.to_string().contains("writable by its group (mode 0775)"), "{e}");
        chmod(&lib, 0o755);

        // Its directory writable by everyone, without the sticky bit: anyone could swap it.
        chmod(lib.parent().unwrap(), 0o777);
        let e = check(&lib, "probe.cublas_library", "loads").unwrap_err();
        assert_eq!(e.component, lib.parent().unwrap().display().to_string());
        assert!(e.to_string().contains("writable by every user (mode 0777)"), "{e}");
        assert!(e.to_string().contains("loads as root"), "{e}");
        // With the sticky bit (as /tmp): nobody replaces another's entry.
        chmod(lib.parent().unwrap(), 0o1777);
        check(&lib, "probe.cublas_library", "loads").unwrap();
        chmod(lib.parent().unwrap(), 0o755);
    }

    #[test]
    fn a_link_is_judged_where_it_leads_too() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::write(open.join("secret"), b"k").unwrap();
        chmod(&open, 0o777);
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        symlink(open.join("secret"), closed.join("secret")).unwrap();
        let e = check(&closed.join("secret"), "events.sinks.webhook.secret_file", "signs with").unwrap_err();
        assert_eq!(e.component, open.canonicalize().unwrap().display().to_string());
    }

    #[test]
    fn a_file_owned_by_another_user_is_refused_and_a_bare_library_name_is_not_a_path() {
        // Only root can give a file away; as anyone else this part has nothing to show.
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("rules.yaml");
            std::fs::write(&file, b"rules: []").unwrap();
            std::os::unix::fs::chown(&file, Some(1000), Some(1000)).unwrap();
            let e = check(&file, "health.custom_rules_dir", "runs").unwrap_err();
            assert!(e.to_string().contains("is owned by uid 1000, not root"), "{e}");
        }
        assert!(!is_a_path(Path::new("libnccl.so.2")));
        assert!(is_a_path(Path::new("./libnccl.so.2")));
        // Not there: not refused here.
        check(Path::new("/nonexistent/lib.so"), "probe.nccl_library", "loads").unwrap();
    }
}
