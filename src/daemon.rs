//! `gpuwarden run`: the poll loop, the HTTP server, and an orderly stop.
//!
//! Start-up order matters: the listener is bound first (a taken port is a start-up error,
//! not something to find out later), then the first poll round runs, so the first scrape
//! already has data. SIGTERM or SIGINT closes the listener, lets scrapes in flight finish
//! and stops the poll loop.

use crate::config::Config;
use crate::exposition::RenderCache;
use crate::http::{self, AppState};
use crate::poller::PollLoop;
use crate::store::Store;
use crate::xid::{kmsg, store::XidStore};
use std::sync::Arc;
use std::time::Duration;

pub fn run(config: Config) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log::error!("cannot start the async runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(serve(config))
}

fn bind_error_message(config: &Config, e: &std::io::Error) -> String {
    let mut message = format!(
        "cannot listen on {} (config key `listen`, or --listen): {e}",
        config.listen
    );
    if e.kind() == std::io::ErrorKind::AddrInUse {
        message.push_str(". Another program holds the port");
        if config.listen.port() == 9100 {
            message
                .push_str(" (9100 is node_exporter's default port too; if it runs here, give gpuwarden another one)");
        }
    }
    message
}

async fn serve(config: Config) -> i32 {
    let listener = match tokio::net::TcpListener::bind(config.listen).await {
        Ok(l) => l,
        Err(e) => {
            log::error!("{}", bind_error_message(&config, &e));
            return 1;
        }
    };
    let store = Arc::new(Store::new());
    let xids = Arc::new(XidStore::new(config.xid.dedup_window));
    if config.xid.read_kernel_log
        && let Err(e) = kmsg::spawn_follower(config.xid.kernel_log_path.clone(), xids.clone())
    {
        log::error!("cannot start the kernel-log XID reader: {e}");
    }
    // The poll loop's first round runs here, on a blocking thread, before we serve.
    let poll_config = config.clone();
    let poll_store = store.clone();
    let poll_loop = match tokio::task::spawn_blocking(move || PollLoop::start(poll_config, poll_store, xids)).await {
        Ok(Ok(poll_loop)) => poll_loop,
        Ok(Err(e)) => {
            log::error!("cannot start the poll thread: {e}");
            return 1;
        }
        Err(e) => {
            log::error!("the first poll round failed: {e}");
            return 1;
        }
    };
    let devices = store.latest().devices.len();
    let stale_after = (config.poll.interval * 3).max(Duration::from_secs(5));
    let app = http::router(AppState {
        store,
        cache: Arc::new(RenderCache::default()),
        stale_after,
    });
    // The bound address, not the configured one: with port 0 the kernel picks the port.
    let bound = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| config.listen.to_string());
    log::info!("serving metrics on http://{bound}/metrics ({devices} GPU(s))");

    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await;
    tokio::task::spawn_blocking(move || poll_loop.stop()).await.ok();
    match served {
        Ok(()) => {
            log::info!("stopped");
            0
        }
        Err(e) => {
            log::error!("the HTTP server failed: {e}");
            1
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            log::error!("cannot install signal handlers; stop gpuwarden with SIGKILL");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => log::info!("SIGTERM: stopping"),
        _ = int.recv() => log::info!("SIGINT: stopping"),
    }
}
