//! `gpuwarden copy-binary DIR`: put this very binary at DIR/gpuwarden. The Kubernetes
//! node-problem-detector component runs it as an init container to hand gpuwarden to NPD's
//! container (deploy/kubernetes/components/node-problem-detector), because gpuwarden's image
//! holds no shell and no `cp` to do it with.

use crate::service::exit::{CliError, CliResult, Exit};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Copies the running executable to `dir/gpuwarden`, mode 0755. Written beside the target and
/// renamed into place, so a reader of `dir` sees the old binary or the whole new one.
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
    std::fs::copy(&source, &partial).map_err(|e| failed("cannot write into", e))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
        .and_then(|()| std::fs::rename(&partial, &target))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            failed("cannot put the binary in", e)
        })?;
    println!("{}", target.display());
    Ok(Exit::SUCCESS)
}
