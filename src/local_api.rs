//! The local API: a Unix socket (config `local_api.socket`, mode 0600) where `gpuwarden
//! health`, Slurm's health check and node-problem-detector ask the running daemon for its
//! verdict, instead of polling the GPUs a second time. Never on the network: the file's
//! mode and the peer's credentials (root or gpuwarden's own user, `SO_PEERCRED`) are its
//! authentication, so it needs no TLS or password.
//!
//! Hostile shapes: a file, link or directory at the path is left alone (only a stale socket
//! is replaced); a peer of another user is closed at once and counted in the log (rate
//! limited); at most [`MAX_CONNECTIONS`] at once, each with the HTTP server's header timeout
//! and size limit (`http::connection_builder`).

use crate::http::AppState;
use axum::Router;
use axum::routing::get;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::Semaphore;

/// Local clients at once: a health check every few seconds needs one.
pub const MAX_CONNECTIONS: usize = 16;

/// What the socket answers.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/v1/health", get(crate::http::health))
        .with_state(state)
}

/// Why the socket was not opened; the daemon goes on without it.
#[derive(Debug, thiserror::Error)]
pub enum LocalApiError {
    #[error("{} exists and is not a socket; remove it or set local_api.socket", .0.display())]
    NotASocket(PathBuf),
    #[error("cannot listen on {}: {source}; create its directory (systemd: RuntimeDirectory=gpuwarden) or set local_api.socket", .path.display())]
    Bind { path: PathBuf, source: std::io::Error },
}

/// Binds the socket: a stale one (a daemon that was killed) is replaced, anything else at
/// the path is refused.
pub fn bind(path: &Path) -> Result<UnixListener, LocalApiError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(LocalApiError::NotASocket(path.to_path_buf()));
        }
        let _ = std::fs::remove_file(path);
    }
    let bind_error = |source| LocalApiError::Bind {
        path: path.to_path_buf(),
        source,
    };
    let listener = UnixListener::bind(path).map_err(bind_error)?;
    // Others' requests are refused by credentials too; the mode keeps them from connecting.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    Ok(listener)
}

/// Serves until `stop`, then removes the socket.
pub async fn serve(listener: UnixListener, path: PathBuf, app: Router, stop: crate::stop::Stop) {
    let builder = crate::http::connection_builder();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut refused = crate::logging::RateLimiter::new(Duration::from_secs(60));
    let own_uid = own_uid();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stop.stopped() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.stopped() => break,
        };
        let uid = stream.peer_cred().map(|c| c.uid()).ok();
        if !uid.is_some_and(|uid| uid == 0 || uid == own_uid) {
            if let Some(skipped) = refused.allow("peer") {
                log::warn!(
                    "local API {}: refused a client of uid {uid:?} (only root and gpuwarden's user \
                     are answered){}",
                    path.display(),
                    crate::logging::held_back_suffix(skipped)
                );
            }
            continue;
        }
        let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = std::fs::remove_file(&path);
}

fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
