//! Backends: one per vendor, each turning vendor calls into vendor-neutral readings.
//!
//! A [`Backend`] finds its GPUs and hands out one [`DevicePoller`] per GPU; the poller
//! (poller.rs) runs each on a thread of its own and knows nothing about vendors. What is
//! particular to a vendor stays here: loading and initialising its library with a back-off,
//! starting again after a driver reload (NVML), pairing two sources of one GPU (ROCm SMI and
//! amdgpu's sysfs files). A poll returns a [`PollReport`]: the readings, the calls that
//! failed, and what happened to persistence mode.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `amd/` | AMD GPUs |
//! | `nvml/` | NVIDIA backend: NVML through nvml-wrapper, one `NvmlDevicePoller` per GPU |
//! <!-- /files -->

pub mod amd;
pub(crate) mod nvml;

use crate::config::settings::{BackendSettings, LiveSwitches};
use crate::model::{DeviceIdentity, DeviceReadings};
use crate::service::stop::Stop;
use crate::xid::store::XidStore;
use std::sync::Arc;

/// One vendor's way to find GPUs. The poller calls [`Backend::discover`] before every round;
/// everything else it learns from the reports of the backend's pollers.
pub trait Backend: Send {
    /// The `backend` label values this backend reports, each with its `gpuwarden_backend_up`
    /// state (one backend may read through two sources, as AMD's does).
    fn status(&self) -> Vec<BackendState>;

    /// New device pollers, when there are any: at the first discovery, and again after the
    /// library was initialised anew. They replace every poller this backend handed out
    /// before. `None`: nothing new (the usual answer, and cheap).
    fn discover(&mut self) -> Option<Vec<Box<dyn DevicePoller>>>;

    /// Every GPU of this backend answered [`PollReport::library_gone`] in one round: the
    /// driver was unloaded (a driver upgrade). Let the old handles go and initialise again
    /// from the next `discover`, with the usual back-off.
    fn library_gone(&mut self) {}

    /// Let go of the library while a GPU reset runs (a reset needs every handle on the GPU
    /// closed, the daemon's own included): end the event thread and hand out no pollers until
    /// [`Backend::resume`]. True when this backend has something to let go of (NVML).
    fn hold(&mut self) -> bool {
        false
    }

    /// While held, once every poller's thread has ended: whether everything else that used
    /// the library has ended too and the library was shut down (its device files closed).
    fn shut_down_held(&mut self) -> bool {
        true
    }

    /// The hold is over: initialise the library again at the next `discover`.
    fn resume(&mut self) {}

    /// Why this backend has no GPUs yet, for systemd's STATUS line when the node shows none
    /// ("NVML not available: ..."); `None` when it is not waiting for anything.
    fn waiting_for(&self) -> Option<String> {
        None
    }
}

/// One `backend` label's state: up or not, and why not, for the status page.
#[derive(Debug, Clone)]
pub struct BackendState {
    pub name: &'static str,
    pub up: bool,
    /// Why it reads nothing, in words ("no amdgpu driver is loaded").
    pub note: Option<&'static str>,
    /// The vendor is simply not on this node (no amdgpu driver): not a backend that is down,
    /// so no `gpuwarden_backend_up` series and no notice on the status page. (A GPU of that
    /// vendor on the PCI bus that nothing reads is still found by the PCI census.)
    pub absent: bool,
}

/// The GPU reset's request that the daemon let go of NVML (remediation/auto.rs asks, the
/// poller does it between rounds and says when it is done). Shared; cheap to clone.
#[derive(Clone, Default)]
pub struct LibraryHold(Arc<HoldFlags>);

#[derive(Default)]
struct HoldFlags {
    requested: std::sync::atomic::AtomicBool,
    released: std::sync::atomic::AtomicBool,
}

impl LibraryHold {
    /// Asks for the hold; [`LibraryHold::released`] says when NVML is let go of.
    pub fn request(&self) {
        self.0.requested.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Ends the hold: the poller initialises NVML again at its next round.
    pub fn lift(&self) {
        self.0.requested.store(false, std::sync::atomic::Ordering::SeqCst);
        self.0.released.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn requested(&self) -> bool {
        self.0.requested.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every poll thread and the event thread have ended and NVML is shut down.
    pub fn released(&self) -> bool {
        self.0.released.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn set_released(&self) {
        self.0.released.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Where a backend that can report XID events (NVML's event set) sends them, and the stop
/// signal its event thread ends with. The daemon gives one; a one-shot `check` does not
/// listen for events.
#[derive(Clone)]
pub struct XidEvents {
    pub store: Arc<XidStore>,
    pub stop: Arc<Stop>,
}

/// Every backend the settings enable, in the order their GPUs are first listed (AMD's sysfs
/// enumeration is instant; NVML may be waiting for its driver). `live`: the switches the
/// pollers read at every poll.
pub fn from_settings(
    settings: &BackendSettings,
    live: &LiveSwitches,
    xid_events: Option<&XidEvents>,
) -> Vec<Box<dyn Backend>> {
    let mut backends: Vec<Box<dyn Backend>> = Vec::new();
    if settings.amd.enabled {
        backends.push(Box::new(amd::AmdBackend::new(&settings.amd)));
    }
    if settings.nvml.enabled {
        backends.push(Box::new(nvml::lifecycle::NvmlLifecycle::new(
            settings,
            live,
            xid_events.filter(|_| settings.nvml_events).cloned(),
        )));
    }
    backends
}

/// One GPU of one backend, polled on a thread of its own.
pub trait DevicePoller: Send {
    fn identity(&self) -> &DeviceIdentity;
    /// The `backend` label its poll durations and errors are counted under.
    fn backend_name(&self) -> &'static str;
    /// Reads every supported value once. Never panics and never blocks the caller for long
    /// on purpose; a vendor call that hangs is what the poller's deadline is for.
    fn poll(&mut self) -> PollReport;
}

pub use crate::model::PersistenceOutcome;

/// The result of one poll of one device.
#[derive(Debug, Default)]
pub struct PollReport {
    /// `None` when the device could not be reached at all (lost, fallen off the bus).
    pub readings: Option<DeviceReadings>,
    /// (call, error) for every call that failed. "Not supported" is not a failure.
    pub errors: Vec<(&'static str, String)>,
    pub persistence: Option<PersistenceOutcome>,
    /// The vendor library says it is no longer initialised or the driver is not loaded: the
    /// driver went away under us (an unload for an upgrade); the handles are no good now.
    /// Not the GPU's fault: when every GPU of a backend says so, see [`Backend::library_gone`].
    pub library_gone: bool,
    /// Time spent inside vendor calls during this poll: the floor under the poll's wall time.
    pub call_seconds: f64,
    /// The same time by call name, where the backend keeps it (NVML); empty otherwise.
    pub call_times: Vec<(&'static str, f64)>,
}
