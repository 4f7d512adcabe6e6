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
    /// Let go of for a GPU reset (`Backend::hold`): no pollers until `resume`.
    Held,
}

pub(crate) struct NvmlLifecycle {
    config: Nvml,
    poll_options: super::PollOptions,
    state: State,
    /// Where XID events go (the daemon listens; a one-shot `check` does not).
    xid_events: Option<XidEvents>,
    /// Ends the current event thread (on a driver reload, or when this goes); the daemon's
    /// stop ends it too.
    event_thread_stop: Option<Stop>,
    /// Alive while the event thread runs.
    event_thread_alive: Option<std::sync::Weak<()>>,
    /// The library the current pollers use, to shut it down for a GPU reset.
    current: Option<&'static nvml_wrapper::Nvml>,
}

impl NvmlLifecycle {
    pub(crate) fn new(settings: &BackendSettings, live: &LiveSwitches, xid_events: Option<XidEvents>) -> NvmlLifecycle {
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
            event_thread_alive: None,
            current: None,
        }
    }

    fn start_event_thread(&mut self, backend: &NvmlBackend, gpus: Vec<(u32, String)>) {
        self.stop_event_thread();
        let Some(events) = &self.xid_events else {
            return;
        };
        let stop = events.stop.child("xid-nvml-events");
        // Not waited for at the daemon's stop: the thread sits in nvmlEventSetWait for up to a
        // second and has nothing to write; the process may end without it (a reset's hold
        // still waits for it to end: `event_thread_alive`).
        let thread_stop = stop.unawaited("xid-nvml-events");
        self.event_thread_stop = Some(stop);
        match super::events::spawn(backend.nvml(), gpus, events.store.clone(), thread_stop) {
            Ok(alive) => self.event_thread_alive = Some(alive),
            Err(e) => log::error!("cannot start the NVML XID event thread: {e}"),
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
            note: match self.state {
                State::Ready => None,
                State::Held => Some("NVML is let go of while a GPU reset runs"),
                State::Waiting { .. } => Some("NVML is not loaded or not initialised (no NVIDIA driver?)"),
            },
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
                self.current = Some(backend.nvml());
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
        self.current = None;
        self.state = State::Waiting {
            next_try: Instant::now(),
            delay: self.config.retry_initial,
            failures: 0,
        };
    }

    fn hold(&mut self) -> bool {
        log::info!("letting go of NVML for a GPU reset: every NVIDIA GPU reads as down until it is over");
        self.stop_event_thread();
        self.state = State::Held;
        true
    }

    fn shut_down_held(&mut self) -> bool {
        if self
            .event_thread_alive
            .as_ref()
            .is_some_and(|alive| alive.strong_count() > 0)
        {
            return false;
        }
        self.event_thread_alive = None;
        if let Some(nvml) = self.current.take() {
            // Every thread that used it has ended. The library was leaked to be 'static, so
            // its Drop never shuts it down: do it here, once, to close its device files.
            // SAFETY: nvmlShutdown takes no arguments; nothing calls through this library
            // any more (the next discover initialises a new one).
            let code = unsafe { nvml.lib().nvmlShutdown() };
            if let Err(e) = nvml_wrapper::error::nvml_try(code) {
                log::warn!("nvmlShutdown for the GPU reset failed: {e}");
            }
        }
        log::info!("NVML let go of: the GPU reset may run");
        true
    }

    fn resume(&mut self) {
        if matches!(self.state, State::Held) {
            self.state = State::Waiting {
                next_try: Instant::now(),
                delay: self.config.retry_initial,
                failures: 0,
            };
        }
    }

    fn waiting_for(&self) -> Option<String> {
        match self.state {
            State::Waiting { .. } => Some("NVML not available: serving gpuwarden's own metrics".to_string()),
            State::Held => Some("NVML let go of for a GPU reset".to_string()),
            State::Ready => None,
        }
    }
}
