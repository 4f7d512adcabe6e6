//! ROCm SMI (librocm_smi64), loaded at run time with libloading: the binary builds and
//! starts where ROCm is not installed. (The `rocm_smi_lib` crate links ROCm at build time,
//! which is why we load it ourselves.)
//!
//! The library's version is read first, then every function is looked up once at load and
//! kept as an `Option`: a function this ROCm lacks is a reading we leave out, never a crash.
//! ROCm SMI reads the same sysfs files the amdgpu backend does, through AMD's own code; what
//! it offers is used, and the amdgpu sysfs reading of the same GPU fills in the rest (clocks,
//! throttle reasons, link width from gpu_metrics and the PCI files).

use super::sysfs::SysfsDevicePoller;
use crate::backend::PollReport;
use crate::model::Sensor;
use crate::model::{DeviceIdentity, DeviceReadings, EccCount, Vendor};
use libloading::Library;
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(crate) const BACKEND: &str = "rocm_smi";

type Status = u32;
const SUCCESS: Status = 0;
const NOT_SUPPORTED: Status = 2;

#[repr(C)]
struct Version {
    major: u32,
    minor: u32,
    patch: u32,
    build: *const c_char,
}

/// rsmi_error_count_t; ROCm 6 appended `deferred_err`, so the room for it is always given.
#[repr(C)]
#[derive(Default)]
struct ErrorCount {
    correctable: u64,
    uncorrectable: u64,
    deferred: u64,
}

// rsmi_temperature_type_t and rsmi_temperature_metric_t.
const TEMP_EDGE: u32 = 0;
const TEMP_JUNCTION: u32 = 1;
const TEMP_MEMORY: u32 = 2;
const METRIC_CURRENT: u32 = 0;
const METRIC_CRITICAL: u32 = 5;
const METRIC_EMERGENCY: u32 = 7;
const MEM_VRAM: u32 = 0;
/// rsmi_gpu_block_t: UMC (HBM), SDMA, GFX, MMHUB, PCIE_BIF, XGMI_WAFL.
const ECC_BLOCKS: [u64; 6] = [0x1, 0x2, 0x4, 0x8, 0x20, 0x80];

macro_rules! symbols {
    ($($field:ident: fn($($arg:ty),*)),* $(,)?) => {
        /// Every ROCm SMI function gpuwarden calls, each `None` when this library lacks it.
        struct Symbols {
            $($field: Option<unsafe extern "C" fn($($arg),*) -> Status>,)*
        }
        impl Symbols {
            fn load(library: &'static Library) -> Symbols {
                Symbols {
                    // SAFETY: each name is looked up with the C signature rocm_smi.h gives it.
                    $($field: unsafe {
                        library
                            .get::<unsafe extern "C" fn($($arg),*) -> Status>(concat!(stringify!($field), "\0").as_bytes())
                            .ok()
                            .map(|symbol| *symbol)
                    },)*
                }
            }
            fn missing(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(if self.$field.is_none() { out.push(stringify!($field)); })*
                out
            }
        }
    };
}

symbols! {
    rsmi_version_get: fn(*mut Version),
    rsmi_init: fn(u64),
    rsmi_status_string: fn(Status, *mut *const c_char),
    rsmi_num_monitor_devices: fn(*mut u32),
    rsmi_dev_name_get: fn(u32, *mut c_char, usize),
    rsmi_dev_unique_id_get: fn(u32, *mut u64),
    rsmi_dev_pci_id_get: fn(u32, *mut u64),
    rsmi_dev_serial_number_get: fn(u32, *mut c_char, u32),
    rsmi_dev_temp_metric_get: fn(u32, u32, u32, *mut i64),
    rsmi_dev_power_ave_get: fn(u32, u32, *mut u64),
    rsmi_dev_power_cap_get: fn(u32, u32, *mut u64),
    rsmi_dev_energy_count_get: fn(u32, *mut u64, *mut f32, *mut u64),
    rsmi_dev_busy_percent_get: fn(u32, *mut u32),
    rsmi_dev_memory_busy_percent_get: fn(u32, *mut u32),
    rsmi_dev_memory_usage_get: fn(u32, u32, *mut u64),
    rsmi_dev_memory_total_get: fn(u32, u32, *mut u64),
    rsmi_dev_pci_replay_counter_get: fn(u32, *mut u64),
    rsmi_dev_ecc_count_get: fn(u32, u64, *mut ErrorCount),
}

/// A loaded and initialised ROCm SMI. Leaked on purpose, like NVML: the device pollers
/// borrow it for the daemon's lifetime.
pub(crate) struct RocmSmi {
    symbols: Symbols,
    pub version: String,
    pub devices: u32,
}

impl RocmSmi {
    fn status_text(&self, status: Status) -> String {
        let mut text: *const c_char = std::ptr::null();
        if let Some(f) = self.symbols.rsmi_status_string
            // SAFETY: rsmi_status_string writes a pointer to a static string.
            && unsafe { f(status, &mut text) } == SUCCESS
            && !text.is_null()
        {
            // SAFETY: a NUL-terminated static string from the library, checked for null above.
            let message = unsafe { std::ffi::CStr::from_ptr(text) };
            return format!("{} ({status})", message.to_string_lossy());
        }
        format!("ROCm SMI status {status}")
    }
}

/// Why ROCm SMI cannot be used: not installed, not ROCm SMI, or no AMD GPU / driver.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    #[error("cannot load {}: {source}", .path.display())]
    Library { path: PathBuf, source: libloading::Error },
    #[error("{} has no {symbol}: not ROCm SMI", .path.display())]
    NotRocmSmi { path: PathBuf, symbol: &'static str },
    #[error("{call} failed: {status}")]
    Call { call: &'static str, status: String },
}

/// Loads the library, reads its version, initialises it and counts its GPUs. Err says why
/// not, for a log line.
pub(crate) fn load(path: &Path) -> Result<&'static RocmSmi, LoadError> {
    // SAFETY: loading a shared library runs its initialisers; ROCm SMI's only set up state.
    let library = unsafe { Library::new(path) }.map_err(|source| LoadError::Library {
        path: path.to_path_buf(),
        source,
    })?;
    let library: &'static Library = Box::leak(Box::new(library));
    let symbols = Symbols::load(library);
    let version_get = symbols.rsmi_version_get.ok_or_else(|| LoadError::NotRocmSmi {
        path: path.to_path_buf(),
        symbol: "rsmi_version_get",
    })?;
    let mut v = Version {
        major: 0,
        minor: 0,
        patch: 0,
        build: std::ptr::null(),
    };
    // SAFETY: rsmi_version_get fills the struct it is given.
    let version = if unsafe { version_get(&mut v) } == SUCCESS {
        format!("{}.{}.{}", v.major, v.minor, v.patch)
    } else {
        "unknown".to_string()
    };
    let missing = symbols.missing();
    if !missing.is_empty() {
        log::info!(
            "ROCm SMI {version} lacks {}: those readings are left out",
            missing.join(", ")
        );
    }
    let smi = Box::leak(Box::new(RocmSmi {
        symbols,
        version,
        devices: 0,
    }));
    let init = smi.symbols.rsmi_init.ok_or_else(|| LoadError::NotRocmSmi {
        path: path.to_path_buf(),
        symbol: "rsmi_init",
    })?;
    // SAFETY: no flags; ROCm SMI may be initialised more than once (it counts).
    let status = unsafe { init(0) };
    if status != SUCCESS {
        return Err(LoadError::Call {
            call: "rsmi_init",
            status: smi.status_text(status),
        });
    }
    let mut count = 0u32;
    if let Some(f) = smi.symbols.rsmi_num_monitor_devices {
        // SAFETY: writes one u32.
        let status = unsafe { f(&mut count) };
        if status != SUCCESS {
            return Err(LoadError::Call {
                call: "rsmi_num_monitor_devices",
                status: smi.status_text(status),
            });
        }
    }
    smi.devices = count;
    Ok(smi)
}

/// What one call came to: a value, "not supported" (left out), or an error (recorded).
struct Calls<'a> {
    smi: &'a RocmSmi,
    errors: Vec<(&'static str, String)>,
}

impl Calls<'_> {
    fn read<T>(&mut self, name: &'static str, call: impl FnOnce() -> Option<(Status, T)>) -> Option<T> {
        let (status, value) = call()?;
        match status {
            SUCCESS => Some(value),
            NOT_SUPPORTED => None,
            other => {
                self.errors.push((name, self.smi.status_text(other)));
                None
            }
        }
    }
}

fn c_string(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Formats rsmi's BDF id (domain << 32 | bus << 8 | device << 3 | function).
pub(crate) fn bus_id_from_bdfid(bdfid: u64) -> String {
    format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        (bdfid >> 32) & 0xffff,
        (bdfid >> 8) & 0xff,
        (bdfid >> 3) & 0x1f,
        bdfid & 0x7
    )
}

pub(crate) struct RocmDevicePoller {
    smi: &'static RocmSmi,
    device: u32,
    identity: DeviceIdentity,
    /// The same GPU in sysfs, for what ROCm SMI does not give; None when not found.
    sysfs: Option<SysfsDevicePoller>,
}

/// One poller per ROCm SMI device, each paired with the sysfs poller of the same PCI
/// address out of `sysfs` (which this takes from).
pub(crate) fn device_pollers(
    smi: &'static RocmSmi,
    sysfs: &mut Vec<SysfsDevicePoller>,
    driver_version: &str,
) -> Vec<RocmDevicePoller> {
    (0..smi.devices)
        .map(|device| {
            let mut calls = Calls {
                smi,
                errors: Vec::new(),
            };
            let s = &smi.symbols;
            let bus_id = calls
                .read("rsmi_dev_pci_id_get", || {
                    let mut id = 0u64;
                    // SAFETY: writes one u64.
                    s.rsmi_dev_pci_id_get.map(|f| (unsafe { f(device, &mut id) }, id))
                })
                .map(bus_id_from_bdfid)
                .unwrap_or_default();
            let mut name = [0 as c_char; 256];
            let name = calls
                .read("rsmi_dev_name_get", || {
                    // SAFETY: the buffer and its length.
                    s.rsmi_dev_name_get
                        .map(|f| (unsafe { f(device, name.as_mut_ptr(), name.len()) }, ()))
                })
                .map(|_| c_string(&name))
                .filter(|n| !n.is_empty());
            let unique_id = calls.read("rsmi_dev_unique_id_get", || {
                let mut id = 0u64;
                // SAFETY: writes one u64.
                s.rsmi_dev_unique_id_get.map(|f| (unsafe { f(device, &mut id) }, id))
            });
            let mut serial = [0 as c_char; 64];
            let serial = calls
                .read("rsmi_dev_serial_number_get", || {
                    // SAFETY: the buffer and its length.
                    s.rsmi_dev_serial_number_get
                        .map(|f| (unsafe { f(device, serial.as_mut_ptr(), serial.len() as u32) }, ()))
                })
                .map(|_| c_string(&serial))
                .filter(|n| !n.is_empty());
            let position = sysfs.iter().position(|p| p.identity().pci_bus_id == bus_id);
            let sysfs_twin = position.map(|i| sysfs.remove(i));
            let twin_identity = sysfs_twin.as_ref().map(|p| p.identity().clone());
            let identity = DeviceIdentity {
                // The sysfs card order when the twin is known, so an AMD GPU keeps its number
                // whichever backend reads it.
                index: twin_identity.as_ref().map_or(device, |i| i.index),
                uuid: unique_id
                    .map(|id| format!("AMD-{id:016x}"))
                    .or_else(|| twin_identity.as_ref().map(|i| i.uuid.clone()))
                    .unwrap_or_else(|| format!("AMD-{bus_id}")),
                vendor: Vendor::Amd,
                name: twin_identity
                    .as_ref()
                    .map(|i| i.name.clone())
                    .filter(|n| !n.starts_with("AMD GPU "))
                    .or(name)
                    .unwrap_or_else(|| "AMD GPU".to_string()),
                pci_bus_id: bus_id,
                driver_version: driver_version.to_string(),
                inventory: twin_identity.as_ref().map(|i| i.inventory.clone()).unwrap_or_default(),
                serial: serial.or_else(|| twin_identity.and_then(|i| i.serial)),
            };
            RocmDevicePoller {
                smi,
                device,
                identity,
                sysfs: sysfs_twin,
            }
        })
        .collect()
}

impl RocmDevicePoller {
    pub(crate) fn identity(&self) -> &DeviceIdentity {
        &self.identity
    }

    /// The sysfs twin's readings, with what ROCm SMI gives put over them.
    pub(crate) fn poll(&mut self) -> PollReport {
        let started = Instant::now();
        // The sysfs twin first: ROCm SMI's own values then replace what it read.
        let mut report = match self.sysfs.as_mut().map(|p| p.poll()) {
            // The twin found the card gone from sysfs: the GPU left the bus.
            Some(PollReport { readings: None, .. }) => {
                return PollReport {
                    call_seconds: started.elapsed().as_secs_f64(),
                    ..PollReport::default()
                };
            }
            Some(report) => report,
            None => PollReport::default(),
        };
        let mut r = report.readings.take().unwrap_or_default();
        let mut reader = Reader {
            s: &self.smi.symbols,
            device: self.device,
            calls: Calls {
                smi: self.smi,
                errors: Vec::new(),
            },
        };
        reader.temperatures(&mut r);
        reader.power_and_energy(&mut r);
        reader.utilization_and_memory(&mut r);
        reader.ecc(&mut r);
        report.errors.extend(reader.calls.errors);
        report.readings = Some(r);
        report.call_seconds = started.elapsed().as_secs_f64();
        report
    }
}

type U64Getter = Option<unsafe extern "C" fn(u32, *mut u64) -> Status>;
type U32Getter = Option<unsafe extern "C" fn(u32, *mut u32) -> Status>;
type IndexedU64Getter = Option<unsafe extern "C" fn(u32, u32, *mut u64) -> Status>;

/// One poll's calls into ROCm SMI for one GPU. A value ROCm SMI gives replaces the sysfs
/// twin's; one it does not give leaves the twin's.
struct Reader<'a> {
    s: &'a Symbols,
    device: u32,
    calls: Calls<'a>,
}

impl Reader<'_> {
    fn temperature(&mut self, sensor: u32, metric: u32) -> Option<f64> {
        let (s, device) = (self.s, self.device);
        self.calls
            .read("rsmi_dev_temp_metric_get", || {
                let mut t = 0i64;
                // SAFETY: writes one i64.
                s.rsmi_dev_temp_metric_get
                    .map(|f| (unsafe { f(device, sensor, metric, &mut t) }, t))
            })
            .map(|t| t as f64 / 1000.0)
    }

    fn u64_value(&mut self, name: &'static str, f: U64Getter) -> Option<u64> {
        let device = self.device;
        self.calls.read(name, || {
            let mut v = 0u64;
            // SAFETY: writes one u64.
            f.map(|f| (unsafe { f(device, &mut v) }, v))
        })
    }

    fn u32_value(&mut self, name: &'static str, f: U32Getter) -> Option<u32> {
        let device = self.device;
        self.calls.read(name, || {
            let mut v = 0u32;
            // SAFETY: writes one u32.
            f.map(|f| (unsafe { f(device, &mut v) }, v))
        })
    }

    /// A getter with an index: sensor 0 for power, the memory type for VRAM.
    fn indexed_u64(&mut self, name: &'static str, index: u32, f: IndexedU64Getter) -> Option<u64> {
        let device = self.device;
        self.calls.read(name, || {
            let mut v = 0u64;
            // SAFETY: a sensor or memory-type index; writes one u64.
            f.map(|f| (unsafe { f(device, index, &mut v) }, v))
        })
    }

    fn temperatures(&mut self, r: &mut DeviceReadings) {
        for (sensor, label) in [
            (TEMP_EDGE, Sensor::Edge),
            (TEMP_JUNCTION, Sensor::Junction),
            (TEMP_MEMORY, Sensor::Hbm),
        ] {
            if let Some(t) = self.temperature(sensor, METRIC_CURRENT) {
                r.temperatures.retain(|(s, _)| *s != label);
                r.temperatures.push((label, t));
            }
        }
        for (sensor, metric, threshold) in [
            (TEMP_JUNCTION, METRIC_CRITICAL, crate::model::Threshold::Slowdown),
            (TEMP_JUNCTION, METRIC_EMERGENCY, crate::model::Threshold::Shutdown),
            (TEMP_MEMORY, METRIC_CRITICAL, crate::model::Threshold::MemoryMax),
        ] {
            if let Some(t) = self.temperature(sensor, metric) {
                r.temperature_thresholds.retain(|(n, _)| *n != threshold);
                r.temperature_thresholds.push((threshold, t));
            }
        }
    }

    fn power_and_energy(&mut self, r: &mut DeviceReadings) {
        let s = self.s;
        if let Some(uw) = self.indexed_u64("rsmi_dev_power_ave_get", 0, s.rsmi_dev_power_ave_get) {
            r.power_watts = Some(uw as f64 / 1e6);
        }
        if let Some(uw) = self.indexed_u64("rsmi_dev_power_cap_get", 0, s.rsmi_dev_power_cap_get) {
            r.power_limit_watts = Some(uw as f64 / 1e6);
        }
        let device = self.device;
        if let Some((counter, resolution)) = self.calls.read("rsmi_dev_energy_count_get", || {
            let (mut counter, mut resolution, mut timestamp) = (0u64, 0f32, 0u64);
            s.rsmi_dev_energy_count_get.map(|f| {
                (
                    // SAFETY: writes a u64, an f32 and a u64, all live locals.
                    unsafe { f(device, &mut counter, &mut resolution, &mut timestamp) },
                    (counter, resolution),
                )
            })
        }) {
            // counter x resolution is in microjoules.
            r.energy_joules = Some(counter as f64 * f64::from(resolution) / 1e6);
        }
        if let Some(n) = self.u64_value("rsmi_dev_pci_replay_counter_get", s.rsmi_dev_pci_replay_counter_get) {
            r.pcie.replay_errors = Some(n);
        }
    }

    fn utilization_and_memory(&mut self, r: &mut DeviceReadings) {
        let s = self.s;
        if let Some(p) = self.u32_value("rsmi_dev_busy_percent_get", s.rsmi_dev_busy_percent_get) {
            r.utilization_ratio = Some(f64::from(p.min(100)) / 100.0);
        }
        if let Some(p) = self.u32_value("rsmi_dev_memory_busy_percent_get", s.rsmi_dev_memory_busy_percent_get) {
            r.memory_copy_utilization_ratio = Some(f64::from(p.min(100)) / 100.0);
        }
        if let Some(b) = self.indexed_u64("rsmi_dev_memory_usage_get", MEM_VRAM, s.rsmi_dev_memory_usage_get) {
            r.memory_used_bytes = Some(b);
        }
        if let Some(b) = self.indexed_u64("rsmi_dev_memory_total_get", MEM_VRAM, s.rsmi_dev_memory_total_get) {
            r.memory_total_bytes = Some(b);
        }
    }

    /// ECC counts summed over the RAS blocks that answer.
    fn ecc(&mut self, r: &mut DeviceReadings) {
        let (s, device) = (self.s, self.device);
        let (mut corrected, mut uncorrected, mut any) = (0u64, 0u64, false);
        for block in ECC_BLOCKS {
            if let Some(count) = self.calls.read("rsmi_dev_ecc_count_get", || {
                let mut count = ErrorCount::default();
                s.rsmi_dev_ecc_count_get.map(|f| {
                    (
                        // SAFETY: fills an rsmi_error_count_t (with room for ROCm 6's third field).
                        unsafe { f(device, block, &mut count) },
                        (count.correctable, count.uncorrectable),
                    )
                })
            }) {
                corrected += count.0;
                uncorrected += count.1;
                any = true;
            }
        }
        if any {
            r.ecc_enabled = Some(true);
            r.ecc_errors = EccCount::volatile_pair(corrected, uncorrected);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_ids_are_formatted_like_sysfs() {
        // domain 0, bus 0xc1, device 0, function 0
        assert_eq!(bus_id_from_bdfid(0xc1 << 8), "0000:c1:00.0");
        assert_eq!(
            bus_id_from_bdfid((1 << 32) | (0x0c << 8) | (3 << 3) | 1),
            "0001:0c:03.1"
        );
    }

    #[test]
    fn a_library_that_is_not_rocm_smi_is_refused_clearly() {
        let e = match load(Path::new("/nonexistent/librocm_smi64.so.1")) {
            Err(e) => e,
            Ok(_) => panic!("loaded a library that does not exist"),
        };
        assert!(
            e.to_string().contains("cannot load /nonexistent/librocm_smi64.so.1"),
            "{e}"
        );
    }
}
