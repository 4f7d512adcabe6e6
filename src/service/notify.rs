//! Telling systemd how the daemon is doing (sd_notify): READY, WATCHDOG, STATUS, RELOADING,
//! STOPPING. Every call is a no-op when systemd did not start us (no NOTIFY_SOCKET), and a
//! failed send is logged at debug level only: systemd being away is no reason to stop.

use sd_notify::NotifyState;
use std::time::Duration;

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        log::debug!("sd_notify failed: {e}");
    }
}

/// The listener is bound and the first poll round is done.
pub(crate) fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub(crate) fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// Sent from the poll loop, so a poll loop that stops turning stops the pings.
pub(crate) fn watchdog() {
    send(&[NotifyState::Watchdog]);
}

/// Reloading the config; `MONOTONIC_USEC` lets systemd (>= 253) match it to ExecReload.
pub(crate) fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

pub(crate) fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// How often to ping: half of WatchdogSec, or None when the watchdog is off.
pub(crate) fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|period| period / 2)
}
