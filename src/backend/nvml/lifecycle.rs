//! NVML's life in the daemon: loading and initialising the library with a doubling back-off
//! while it is missing (no driver yet), the XID event thread, and starting over after a
//! driver reload. The poller sees only the [`Backend`] trait.

use super::{BACKEND, NvmlBackend};
use crate::backend::{Backend, BackendState, DevicePoller, XidEvents};
use crate::config::Nvml;
use crate::config::settings::{BackendSettings, LiveSwitches};
use crate::service::stop::Stop;
use std::time::{Duration, Instant};

enum State {
    Waiting {
        next_try: Instant,
        delay: Duration,
        failures: u32,
    },
    Ready,
}

pub struct NvmlLifecycle {
    config: Nvml,
    poll_options: super::PollOptions,
    state: State,
    /// Where XID events go (the daemon listens; a one-shot `check` does not).
    xid_events: Option<XidEvents>,
    /// Ends the current event thread (on a driver reload, or when this goes); the daemon's
    /// stop ends it too.
    event_thread_stop: Option<Stop>,
}

impl NvmlLifecycle {
    pub fn new(settings: &BackendSettings, live: &LiveSwitches, xid_events: Option<XidEvents>) -> NvmlLifecycle {
        NvmlLifecycle {
            config: settings.nvml.clone(),
            poll_options: super::PollOptions {
                enable_persistence: settings.persistence_enable,
                slow_interval: settings.slow_interval,
                topology_interval: settings.topology_interval,
                gpm_interval: settings.gpm_interval,
                live: live.clone(),
            },
            state: State::Waiting {
                next_try: Instant::now(),
                delay: settings.nvml.retry_initial,
                failures: 0,
            },
            xid_events,
            event_thread_stop: None,
        }
    }

    fn start_event_thread(&mut self, backend: &NvmlBackend, gpus: Vec<(u32, String)>) {
        self.stop_event_thread();
        let Some(events) = &self.xid_events else {
            return;
        };
        let stop = events.stop.child("xid-nvml-events");
        let thread_stop = stop.handle("xid-nvml-events");
        self.event_thread_stop = Some(stop);
        if let Err(e) = super::events::spawn(backend.nvml(), gpus, events.store.clone(), thread_stop) {
            log::error!("cannot start the NVML XID event thread: {e}");
        }
    }

    fn stop_event_thread(&mut self) {
        if let Some(stop) = self.event_thread_stop.take() {
            stop.stop_child();
        }
    }
}

impl Drop for NvmlLifecycle {
    fn drop(&mut self) {
        self.stop_event_thread();
    }
}

impl Backend for NvmlLifecycle {
    fn status(&self) -> Vec<BackendState> {
        let up = matches!(self.state, State::Ready);
        vec![BackendState {
            name: BACKEND,
            up,
            note: (!up).then(|| "NVML is not loaded or not initialised (no NVIDIA driver?)".to_string()),
            absent: false,
        }]
    }

    fn discover(&mut self) -> Option<Vec<Box<dyn DevicePoller>>> {
        let State::Waiting {
            next_try,
            delay,
            failures,
        } = self.state
        else {
            return None;
        };
        if Instant::now() < next_try {
            return None;
        }
        let loaded = NvmlBackend::load(&self.config).and_then(|backend| {
            let pollers = backend.device_pollers(&self.poll_options)?;
            Ok((backend, pollers))
        });
        match loaded {
            Ok((backend, pollers)) => {
                let driver = backend.driver_version().unwrap_or_default();
                log::info!("NVML ready (driver {driver}): {} NVIDIA GPU(s)", pollers.len());
                if self.xid_events.is_some() {
                    let gpus = pollers
                        .iter()
                        .map(|p| (p.identity().index, p.identity().pci_bus_id.clone()))
                        .collect();
                    self.start_event_thread(&backend, gpus);
                }
                self.state = State::Ready;
                Some(
                    pollers
                        .into_iter()
                        .map(|p| Box::new(p) as Box<dyn DevicePoller>)
                        .collect(),
                )
            }
            Err(e) => {
                if failures == 0 {
                    // A one-shot command (`check`) does not try again: it must not say it will.
                    let again = if self.config.one_shot {
                        String::new()
                    } else {
                        format!(
                            "; trying again every {} or less",
                            humantime::format_duration(self.config.retry_max)
                        )
                    };
                    log::warn!(
                        "NVML is not available ({e}) from {:?}: no NVIDIA GPU metrics{again}. \
                         On a node without NVIDIA GPUs set nvml.enabled: false",
                        self.config.library_path,
                    );
                } else {
                    log::debug!("NVML still not available: {e}");
                }
                self.state = State::Waiting {
                    next_try: Instant::now() + delay,
                    delay: (delay * 2).min(self.config.retry_max),
                    failures: failures + 1,
                };
                None
            }
        }
    }

    fn library_gone(&mut self) {
        log::warn!(
            "NVML stopped answering on every GPU (not initialised / driver not loaded): the driver was unloaded or \
             reloaded; initialising NVML again"
        );
        self.stop_event_thread();
        self.state = State::Waiting {
            next_try: Instant::now(),
            delay: self.config.retry_initial,
            failures: 0,
        };
    }

    fn waiting_for(&self) -> Option<String> {
        match self.state {
            State::Waiting { .. } => Some("NVML not available: serving gpuwarden's own metrics".to_string()),
            State::Ready => None,
        }
    }
}
