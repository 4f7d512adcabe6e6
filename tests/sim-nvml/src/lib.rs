//! A simulated `libnvidia-ml.so` for gpuwarden's tests and its demo mode.
//!
//! It exports the NVML C symbols the daemon calls, with the struct layouts of
//! nvml-wrapper-sys, so the daemon under test goes through the same dlopen, the same symbol
//! look-ups and the same FFI calls as on a real node. What each call answers comes from a
//! scenario file (see `scenario.rs`) that the test can rewrite while the daemon runs.
//!
//! Built with the `old-driver` feature (tests/sim-nvml-old) it leaves out the symbols that
//! older drivers lack, for the tests of a partial NVML.
//!
//! Device handles are not pointers to anything: handle `i + 1` is device `i`, so a handle can
//! be turned back into an index without any shared table.

#![allow(non_snake_case)]
#![allow(non_upper_case_globals)] // bindgen names the NVML enum constants after the C ones
#![allow(clippy::missing_safety_doc)]
// Built as an old driver, the helpers of the symbols it leaves out go unused.
#![cfg_attr(feature = "old-driver", allow(dead_code))]

mod gpm;
mod scenario;
mod topology;

use nvml_wrapper_sys::bindings::field_id::*;
use nvml_wrapper_sys::bindings::*;
use scenario::Scenario;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const SUCCESS: nvmlReturn_t = nvmlReturn_enum_NVML_SUCCESS;
const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const INVALID_ARGUMENT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const INSUFFICIENT_SIZE: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const NO_PERMISSION: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
const GPU_IS_LOST: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
const UNINITIALIZED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;

/// The scenario in force and what identifies the file it was read from.
struct Loaded {
    scenario: Arc<Scenario>,
    file_identity: Option<(u64, u64, i64, i64)>,
    /// Persistence mode as set through `nvmlDeviceSetPersistenceMode`, by device index;
    /// cleared when the scenario file changes, so a test can turn it off again. Kept beside
    /// the scenario too (`<scenario>.persistence`), as the driver keeps it for every process:
    /// another process reading the same scenario (`gpuwarden check --demo` beside the
    /// running demo) sees what the first one set.
    persistence_set: HashMap<usize, bool>,
}

fn state() -> &'static Mutex<Loaded> {
    static STATE: OnceLock<Mutex<Loaded>> = OnceLock::new();
    STATE.get_or_init(|| {
        Mutex::new(Loaded {
            scenario: Arc::new(Scenario::default()),
            file_identity: None,
            persistence_set: HashMap::new(),
        })
    })
}

/// Returns the current scenario, re-reading the file first if it changed since last time.
fn current() -> Arc<Scenario> {
    let mut loaded = match state().lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let Some(path) = std::env::var_os("GPUWARDEN_SIM_NVML_SCENARIO") else {
        return loaded.scenario.clone();
    };
    let identity = std::fs::metadata(&path)
        .ok()
        .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()));
    if identity.is_some() && identity != loaded.file_identity {
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| Scenario::parse(&text))
        {
            Ok(mut scenario) => {
                let mut resets = path.clone();
                resets.push(".resets");
                if let Ok(text) = std::fs::read_to_string(&resets) {
                    scenario.apply_resets(&text);
                }
                loaded.scenario = Arc::new(scenario);
                loaded.persistence_set = persistence_kept(&path, identity);
            }
            Err(e) => eprintln!("sim-nvml: keeping the previous scenario: {path:?}: {e}"),
        }
        loaded.file_identity = identity;
    }
    loaded.scenario.clone()
}

/// The persistence modes another process set on this very scenario file (its identity on the
/// side file's first line); none when the scenario changed since.
fn persistence_kept(path: &std::ffi::OsStr, identity: Option<(u64, u64, i64, i64)>) -> HashMap<usize, bool> {
    let mut side = path.to_os_string();
    side.push(".persistence");
    let Ok(text) = std::fs::read_to_string(&side) else {
        return HashMap::new();
    };
    let mut lines = text.lines();
    if lines.next() != Some(format!("{identity:?}").as_str()) {
        return HashMap::new();
    }
    lines
        .filter_map(|line| {
            let (index, on) = line.split_once(' ')?;
            Some((index.parse().ok()?, on == "1"))
        })
        .collect()
}

/// Writes the persistence modes set in this process beside the scenario (see `Loaded`).
fn keep_persistence(loaded: &Loaded) {
    let Some(path) = std::env::var_os("GPUWARDEN_SIM_NVML_SCENARIO") else {
        return;
    };
    let mut text = format!("{:?}\n", loaded.file_identity);
    for (index, on) in &loaded.persistence_set {
        text.push_str(&format!("{index} {}\n", u8::from(*on)));
    }
    let mut side = path;
    side.push(".persistence");
    let mut partial = side.clone();
    partial.push(".partial");
    if std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, &side))
        .is_err()
    {
        eprintln!("sim-nvml: cannot keep the persistence modes beside the scenario");
    }
}

fn error_code(name: &str) -> nvmlReturn_t {
    match name {
        "uninitialized" => UNINITIALIZED,
        "invalid_argument" => INVALID_ARGUMENT,
        "not_supported" => NOT_SUPPORTED,
        "no_permission" => NO_PERMISSION,
        "not_found" => nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
        "driver_not_loaded" => nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        "timeout" => nvmlReturn_enum_NVML_ERROR_TIMEOUT,
        "library_not_found" => nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND,
        "gpu_is_lost" => GPU_IS_LOST,
        "reset_required" => nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED,
        _ => nvmlReturn_enum_NVML_ERROR_UNKNOWN,
    }
}

/// Runs one device call: finds the device behind `handle`, honours the scenario's `hang`,
/// `lost` and `fail` entries for `call`, and otherwise lets `answer` fill the outputs.
fn device_call(
    handle: nvmlDevice_t,
    call: &str,
    answer: impl FnOnce(usize, &scenario::Device) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let scenario = current();
    if scenario.uninitialized {
        return UNINITIALIZED;
    }
    let index = (handle as usize).wrapping_sub(1);
    let Some(device) = scenario.devices.get(index) else {
        return INVALID_ARGUMENT;
    };
    if let Some(seconds) = device.hang.get(call) {
        // Sleep in slices, re-reading the scenario, so a test can end a hang by rewriting it.
        let until = std::time::Instant::now() + Duration::from_secs_f64(*seconds);
        while std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
            let now = current();
            if now.devices.get(index).is_none_or(|d| !d.hang.contains_key(call)) {
                break;
            }
        }
    }
    if device.lost {
        return GPU_IS_LOST;
    }
    if let Some(error) = device.fail.get(call) {
        return error_code(error);
    }
    answer(index, device)
}

unsafe fn put<T>(out: *mut T, value: Option<T>) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    match value {
        Some(v) => {
            // SAFETY: not null (checked above), and the caller's, valid for writes.
            unsafe { out.write(v) };
            SUCCESS
        }
        None => NOT_SUPPORTED,
    }
}

unsafe fn put_string(out: *mut c_char, length: c_uint, value: Option<&str>) -> nvmlReturn_t {
    let Some(value) = value else {
        return NOT_SUPPORTED;
    };
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    let bytes = value.as_bytes();
    if bytes.len() + 1 > length as usize {
        return INSUFFICIENT_SIZE;
    }
    // SAFETY: not null, and the caller's buffer of `length` bytes, which holds the text and
    // its NUL (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len());
        *out.add(bytes.len()) = 0;
    }
    SUCCESS
}

// ---- library and system ----------------------------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    if let Some(seconds) = current().init_hang {
        let until = std::time::Instant::now() + Duration::from_secs_f64(seconds);
        while std::time::Instant::now() < until && current().init_hang.is_some() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    match &current().init_error {
        Some(error) => error_code(error),
        None => {
            open_handles(1);
            SUCCESS
        }
    }
}

/// Stands for the device files a real NVML keeps open while initialised, which keep a GPU
/// reset from running: `<scenario>.nvml-open.<pid>` exists from the first nvmlInit to the
/// last nvmlShutdown of this process (tests/fixtures/fake-gpu-reset.sh refuses while one of a
/// live process exists, as `nvidia-smi --gpu-reset` does: "in use by another client").
fn open_handles(change: i32) {
    static INITS: Mutex<i32> = Mutex::new(0);
    let mut inits = match INITS.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let before = *inits;
    *inits = (before + change).max(0);
    let Some(path) = std::env::var_os("GPUWARDEN_SIM_NVML_SCENARIO") else {
        return;
    };
    let mut marker = path;
    marker.push(format!(".nvml-open.{}", std::process::id()));
    if before == 0 && *inits > 0 {
        let _ = std::fs::write(&marker, "");
    } else if before > 0 && *inits == 0 {
        let _ = std::fs::remove_file(&marker);
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    nvmlInit_v2()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    open_handles(-1);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(_result: nvmlReturn_t) -> *const c_char {
    c"simulated NVML error".as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(out: *mut c_char, length: c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put_string(out, length, Some(&current().driver_version)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(out: *mut c_char, length: c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put_string(out, length, Some(&current().nvml_version)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(out: *mut c_int) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, Some(current().cuda_driver_version)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(out: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, Some(current().devices.len() as c_uint)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut nvmlDevice_t) -> nvmlReturn_t {
    let scenario = current();
    match scenario.devices.get(index as usize) {
        // A lost GPU can still be enumerated; its calls fail. That is what the driver does.
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        Some(_) => unsafe { put(out, Some((index as usize + 1) as nvmlDevice_t)) },
        None => INVALID_ARGUMENT,
    }
}

// ---- identity ----------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetIndex", |i, _| unsafe {
        put(out, Some(i as c_uint))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, out: *mut c_char, length: c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    if let Some(answer) = topology::mig_call(device, |parent, mig| unsafe {
        put_string(out, length, Some(&format!("{} MIG {}", parent.name, mig.profile)))
    }) {
        return answer;
    }
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetName", |_, d| unsafe {
        put_string(out, length, Some(&d.name))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, out: *mut c_char, length: c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    if let Some(answer) = topology::mig_call(device, |_, mig| unsafe { put_string(out, length, Some(&mig.uuid)) }) {
        return answer;
    }
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetUUID", |_, d| unsafe {
        put_string(out, length, Some(&d.uuid))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSerial(device: nvmlDevice_t, out: *mut c_char, length: c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetSerial", |_, d| unsafe {
        put_string(out, length, d.serial.as_deref())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetVbiosVersion(
    device: nvmlDevice_t,
    out: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetVbiosVersion", |_, d| unsafe {
        put_string(out, length, d.vbios.as_deref())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetBoardPartNumber(
    device: nvmlDevice_t,
    out: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetBoardPartNumber", |_, d| unsafe {
        put_string(out, length, d.board_part_number.as_deref())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetInforomImageVersion(
    device: nvmlDevice_t,
    out: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetInforomImageVersion", |_, d| unsafe {
        put_string(out, length, d.inforom_image.as_deref())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, out: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPciInfo_v3", |_, d| {
        if out.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: nvmlPciInfo_t is plain old data; all zeroes is a valid value.
        let mut info: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        let bus_id = d.pci_bus_id.as_bytes();
        for (slot, byte) in info.busId.iter_mut().zip(bus_id.iter().take(31)) {
            *slot = *byte as c_char;
        }
        for (slot, byte) in info.busIdLegacy.iter_mut().zip(bus_id.iter().skip(4).take(15)) {
            *slot = *byte as c_char;
        }
        // "00000000:19:00.0": domain, bus, device.
        let parts: Vec<&str> = d.pci_bus_id.split([':', '.']).collect();
        if parts.len() == 4 {
            info.domain = u32::from_str_radix(parts[0], 16).unwrap_or(0);
            info.bus = u32::from_str_radix(parts[1], 16).unwrap_or(0);
            info.device = u32::from_str_radix(parts[2], 16).unwrap_or(0);
        }
        info.pciDeviceId = 0x233510de;
        info.pciSubSystemId = 0x18b010de;
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(info)) }
    })
}

// ---- thermals ----------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: nvmlTemperatureSensors_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetTemperature", |_, d| {
        if sensor != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return INVALID_ARGUMENT;
        }
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, d.temperature) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureThreshold(
    device: nvmlDevice_t,
    threshold: nvmlTemperatureThresholds_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetTemperatureThreshold", |_, d| {
        let t = &d.thresholds;
        let value = match threshold {
            nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_SHUTDOWN => t.shutdown,
            nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_SLOWDOWN => t.slowdown,
            nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_MEM_MAX => t.memory_max,
            nvmlTemperatureThresholds_enum_NVML_TEMPERATURE_THRESHOLD_GPU_MAX => t.gpu_max,
            _ => None,
        };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, value) }
    })
}

// ---- field values ------------------------------------------------------------------------

/// What one field id asks for, under the driver's numbering.
fn field_value(scenario: &Scenario, d: &scenario::Device, field_id: u32, scope: u32) -> Option<nvmlFieldValue_t> {
    // SAFETY: plain old data.
    let mut value: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
    value.fieldId = field_id;
    let v13u1 = scenario.uses_v13u1_field_ids();
    let counter = |name: &str| d.clock_event_ns.get(name).copied();
    let (u64_value, u32_value): (Option<u64>, Option<u32>) = match field_id {
        NVML_FI_DEV_MEMORY_TEMP => (None, d.memory_temperature),
        NVML_FI_DEV_GET_GPU_RECOVERY_ACTION => (None, d.recovery_action),
        NVML_FI_DEV_REMAPPED_COR => (None, d.remapped_rows.as_ref().map(|r| r.correctable)),
        NVML_FI_DEV_REMAPPED_UNC => (None, d.remapped_rows.as_ref().map(|r| r.uncorrectable)),
        NVML_FI_DEV_REMAPPED_PENDING => (None, d.remapped_rows.as_ref().map(|r| r.pending as u32)),
        NVML_FI_DEV_REMAPPED_FAILURE => (None, d.remapped_rows.as_ref().map(|r| r.failed as u32)),
        NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP => (counter("sw_power_cap"), None),
        NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST => (counter("sync_boost"), None),
        251 if !v13u1 => (counter("sw_thermal_slowdown"), None),
        252 if !v13u1 => (counter("hw_thermal_slowdown"), None),
        253 if !v13u1 => (counter("hw_power_brake_slowdown"), None),
        269 if v13u1 => (counter("sw_thermal_slowdown"), None),
        270 if v13u1 => (counter("hw_thermal_slowdown"), None),
        271 if v13u1 => (counter("hw_power_brake_slowdown"), None),
        _ => match topology::nvlink_field(d, field_id, scope) {
            Some(v) => (Some(v), None),
            None => (None, None),
        },
    };
    if let Some(v) = u64_value {
        value.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        value.value.ullVal = v;
    } else if let Some(v) = u32_value {
        value.valueType = nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT;
        value.value.uiVal = v;
    } else {
        value.nvmlReturn = NOT_SUPPORTED;
        return Some(value);
    }
    value.nvmlReturn = SUCCESS;
    Some(value)
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    let scenario = current();
    device_call(device, "nvmlDeviceGetFieldValues", |_, d| {
        if values.is_null() || count < 0 {
            return INVALID_ARGUMENT;
        }
        // SAFETY: the caller passes `count` initialised entries whose fieldId it set.
        let slice = unsafe { std::slice::from_raw_parts_mut(values, count as usize) };
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        for entry in slice.iter_mut() {
            if let Some(mut filled) = field_value(&scenario, d, entry.fieldId, entry.scopeId) {
                filled.scopeId = entry.scopeId;
                filled.timestamp = now_us;
                *entry = filled;
            }
        }
        SUCCESS
    })
}

// ---- clock events --------------------------------------------------------------------------

fn clock_events(device: nvmlDevice_t, call: &str, out: *mut c_ulonglong, supported: bool) -> nvmlReturn_t {
    device_call(device, call, |_, d| {
        let value = d
            .clock_events
            .as_ref()
            .map(|c| if supported { c.supported } else { c.active });
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, value) }
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_events(device, "nvmlDeviceGetCurrentClocksEventReasons", out, false)
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedClocksEventReasons(
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_events(device, "nvmlDeviceGetSupportedClocksEventReasons", out, true)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_events(device, "nvmlDeviceGetCurrentClocksThrottleReasons", out, false)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedClocksThrottleReasons(
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    clock_events(device, "nvmlDeviceGetSupportedClocksThrottleReasons", out, true)
}

// ---- power, clocks, utilisation, memory ----------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetPowerUsage", |_, d| unsafe {
        put(out, d.power_mw)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetEnforcedPowerLimit", |_, d| unsafe {
        put(out, d.power_limit_mw)
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetTotalEnergyConsumption", |_, d| unsafe {
        put(out, d.energy_mj)
    })
}

/// One clock domain of `clocks` into `out`; an unknown domain is an invalid argument.
///
/// # Safety
/// `out` is valid for writes or null (refused by `put`).
unsafe fn put_clock(clocks: &scenario::Clocks, clock: nvmlClockType_t, out: *mut c_uint) -> nvmlReturn_t {
    let value = match clock {
        nvmlClockType_enum_NVML_CLOCK_GRAPHICS => clocks.graphics,
        nvmlClockType_enum_NVML_CLOCK_SM => clocks.sm,
        nvmlClockType_enum_NVML_CLOCK_MEM => clocks.memory,
        nvmlClockType_enum_NVML_CLOCK_VIDEO => clocks.video,
        _ => return INVALID_ARGUMENT,
    };
    // SAFETY: as the caller promised.
    unsafe { put(out, value) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    clock: nvmlClockType_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetMaxClockInfo", |_, d| {
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows.
        unsafe { put_clock(&d.clocks_max_mhz, clock, out) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock: nvmlClockType_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetClockInfo", |_, d| {
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows.
        unsafe { put_clock(&d.clocks_mhz, clock, out) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    out: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetUtilizationRates", |_, d| unsafe {
        put(
            out,
            d.utilization.as_ref().map(|u| nvmlUtilization_t {
                gpu: u.gpu,
                memory: u.memory,
            }),
        )
    })
}

/// The encoder's and decoder's busy percentage over a sampling period (fixed at 167 ms, what
/// an H100 reports for its decoder).
fn video_utilization(
    device: nvmlDevice_t,
    call: &str,
    percent: fn(&scenario::Device) -> Option<u32>,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> nvmlReturn_t {
    device_call(device, call, |_, d| {
        if sampling_period_us.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: checked for null above; the caller passes a pointer to one c_uint.
        unsafe { sampling_period_us.write(167_000) };
        // SAFETY: `put` checks for null; the caller passes a pointer to one c_uint.
        unsafe { put(utilization, percent(d)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> nvmlReturn_t {
    video_utilization(
        device,
        "nvmlDeviceGetEncoderUtilization",
        |d| d.encoder_percent,
        utilization,
        sampling_period_us,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: nvmlDevice_t,
    utilization: *mut c_uint,
    sampling_period_us: *mut c_uint,
) -> nvmlReturn_t {
    video_utilization(
        device,
        "nvmlDeviceGetDecoderUtilization",
        |d| d.decoder_percent,
        utilization,
        sampling_period_us,
    )
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, out: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    if let Some(answer) = topology::mig_call(device, |_, mig| unsafe { memory_info(mig.memory.as_ref(), out) }) {
        return answer;
    }
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetMemoryInfo_v2", |_, d| unsafe {
        memory_info(d.memory.as_ref(), out)
    })
}

#[cfg(not(feature = "old-driver"))]
unsafe fn memory_info(memory: Option<&scenario::Memory>, out: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    {
        let Some(m) = memory else {
            return NOT_SUPPORTED;
        };
        if out.is_null() {
            return INVALID_ARGUMENT;
        }
        // The caller sets `version`; keep it and fill the rest.
        // SAFETY: not null (checked above), and the caller's struct, valid for reads.
        let version = unsafe { (*out).version };
        let value = nvmlMemory_v2_t {
            version,
            total: m.total,
            reserved: m.reserved,
            used: m.used,
            free: m.total.saturating_sub(m.used + m.reserved),
        };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(value)) }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(device: nvmlDevice_t, out: *mut nvmlPstates_t) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetPerformanceState", |_, d| unsafe {
        put(out, d.performance_state.map(|p| p as nvmlPstates_t))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetComputeRunningProcesses_v3", |_, d| {
        if count.is_null() {
            return INVALID_ARGUMENT;
        }
        let processes: Vec<(c_uint, u64, u32)> = match &d.processes {
            // NVML_VALUE_NOT_AVAILABLE where the driver does not know the memory; u32::MAX
            // (0xFFFFFFFF) as the instance outside MIG.
            Some(list) => list
                .iter()
                .map(|p| {
                    (
                        p.pid,
                        p.used_memory.unwrap_or(u64::MAX),
                        p.gpu_instance.unwrap_or(u32::MAX),
                    )
                })
                .collect(),
            None => (0..d.compute_processes)
                .map(|i| (1000 + i, 1 << 30, u32::MAX))
                .collect(),
        };
        let n = processes.len() as c_uint;
        // SAFETY: the caller passes room for *count entries (NVML's contract).
        unsafe {
            let room = *count;
            *count = n;
            if n > room || infos.is_null() {
                return if n == 0 { SUCCESS } else { INSUFFICIENT_SIZE };
            }
            for (i, (pid, memory, gpu_instance)) in processes.into_iter().enumerate() {
                let info = &mut *infos.add(i);
                info.pid = pid;
                info.usedGpuMemory = memory;
                info.gpuInstanceId = gpu_instance;
                info.computeInstanceId = u32::MAX;
            }
        }
        SUCCESS
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(device: nvmlDevice_t, fan: c_uint, out: *mut c_uint) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetFanSpeed_v2", |_, d| {
        // Like a real fanless H200: there is no fan 0, so the index is an invalid argument
        // (not NOT_SUPPORTED). Callers must ask nvmlDeviceGetNumFans first.
        if d.fan_speed_percent.is_none() || fan != 0 {
            return INVALID_ARGUMENT;
        }
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, d.fan_speed_percent) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(device, "nvmlDeviceGetNumFans", |_, d| unsafe {
        put(out, Some(d.fan_speed_percent.is_some() as c_uint))
    })
}

// ---- PCIe --------------------------------------------------------------------------------

macro_rules! pcie_getter {
    ($symbol:ident, $field:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $symbol(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
            // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
            device_call(device, stringify!($symbol), |_, d| unsafe {
                put(out, d.pcie.$field)
            })
        }
    };
}

pcie_getter!(nvmlDeviceGetCurrPcieLinkGeneration, generation);
pcie_getter!(nvmlDeviceGetMaxPcieLinkGeneration, generation_max);
pcie_getter!(nvmlDeviceGetCurrPcieLinkWidth, width);
pcie_getter!(nvmlDeviceGetMaxPcieLinkWidth, width_max);
pcie_getter!(nvmlDeviceGetPcieReplayCounter, replay_counter);

// ---- ECC ---------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetEccMode", |_, d| {
        let Some(ecc) = d.ecc.as_ref() else {
            return NOT_SUPPORTED;
        };
        let state = ecc.enabled as nvmlEnableState_t;
        // SAFETY: `current` and `pending` are the caller's, valid for writes or null as the C
        // API allows; put refuses null.
        unsafe {
            let r = put(current, Some(state));
            if r != SUCCESS {
                return r;
            }
            put(pending, Some(state))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter_type: nvmlEccCounterType_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetTotalEccErrors", |_, d| {
        let Some(ecc) = d.ecc.as_ref().filter(|e| e.enabled) else {
            return NOT_SUPPORTED;
        };
        let counts = match counter_type {
            nvmlEccCounterType_enum_NVML_VOLATILE_ECC => &ecc.volatile,
            nvmlEccCounterType_enum_NVML_AGGREGATE_ECC => &ecc.aggregate,
            _ => return INVALID_ARGUMENT,
        };
        let value = match error_type {
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED => counts.corrected,
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED => counts.uncorrected,
            _ => return INVALID_ARGUMENT,
        };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(value)) }
    })
}

// ---- persistence mode ----------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(
    device: nvmlDevice_t,
    out: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetPersistenceMode", |i, d| {
        let set = state().lock().ok().and_then(|s| s.persistence_set.get(&i).copied());
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, set.or(d.persistence_mode).map(|on| on as nvmlEnableState_t)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetPersistenceMode(device: nvmlDevice_t, mode: nvmlEnableState_t) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceSetPersistenceMode", |i, d| {
        if d.persistence_mode.is_none() {
            return NOT_SUPPORTED;
        }
        if !d.persistence_settable {
            return NO_PERMISSION;
        }
        let on = mode == nvmlEnableState_enum_NVML_FEATURE_ENABLED;
        if !on {
            // gpuwarden must never turn persistence mode off; leave a trace a test can find.
            eprintln!("sim-nvml: nvmlDeviceSetPersistenceMode(device {i}, DISABLED) was called");
        }
        if let Ok(mut s) = state().lock() {
            s.persistence_set.insert(i, on);
            keep_persistence(&s);
        }
        SUCCESS
    })
}

// ---- vGPU licence --------------------------------------------------------------------------

/// A GPU without `vgpu_licensed` answers as an H200 in passthrough does: success, licensing
/// unsupported, no features. With it, as a vGPU guest with one licensable feature (vCS).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGridLicensableFeatures_v4(
    device: nvmlDevice_t,
    out: *mut nvmlGridLicensableFeatures_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetGridLicensableFeatures_v4", |_, d| {
        // SAFETY: plain data; all-zero is valid.
        let mut features: nvmlGridLicensableFeatures_t = unsafe { std::mem::zeroed() };
        if let Some(licensed) = d.vgpu_licensed {
            features.isGridLicenseSupported = 1;
            features.licensableFeaturesCount = 1;
            let feature = &mut features.gridLicensableFeatures[0];
            feature.featureCode = nvmlGridLicenseFeatureCode_t_NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE;
            feature.featureEnabled = 1;
            feature.featureState = licensed as u32;
            for (slot, byte) in feature.productName.iter_mut().zip(b"NVIDIA Virtual Compute Server") {
                *slot = *byte as _;
            }
        }
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(features)) }
    })
}

// ---- events --------------------------------------------------------------------------------

/// Event sets by id: which devices registered which event types.
struct EventSets {
    next_id: usize,
    registrations: HashMap<usize, Vec<(usize, u64)>>,
    /// How many of each device's `xid_events` have been delivered; survives scenario reloads
    /// so that appending one entry delivers just that one.
    delivered: HashMap<usize, usize>,
}

fn event_sets() -> &'static Mutex<EventSets> {
    static SETS: OnceLock<Mutex<EventSets>> = OnceLock::new();
    SETS.get_or_init(|| {
        Mutex::new(EventSets {
            next_id: 1,
            registrations: HashMap::new(),
            delivered: HashMap::new(),
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(out: *mut nvmlEventSet_t) -> nvmlReturn_t {
    let Ok(mut sets) = event_sets().lock() else {
        return nvmlReturn_enum_NVML_ERROR_UNKNOWN;
    };
    let id = sets.next_id;
    sets.next_id += 1;
    sets.registrations.insert(id, Vec::new());
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, Some(id as nvmlEventSet_t)) }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceRegisterEvents(device: nvmlDevice_t, types: u64, set: nvmlEventSet_t) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceRegisterEvents", |i, d| {
        if !d.events_supported {
            return NOT_SUPPORTED;
        }
        let Ok(mut sets) = event_sets().lock() else {
            return nvmlReturn_enum_NVML_ERROR_UNKNOWN;
        };
        // Events raised before registration are not delivered, as with the real driver.
        sets.delivered.insert(i, d.xid_events.len());
        match sets.registrations.get_mut(&(set as usize)) {
            Some(list) => {
                list.push((i, types));
                SUCCESS
            }
            None => INVALID_ARGUMENT,
        }
    })
}

/// The next undelivered XID of any device registered in `set`, marking it delivered.
fn next_event(set: usize) -> Option<(usize, u64)> {
    let scenario = current();
    let mut sets = event_sets().lock().ok()?;
    let registered = sets.registrations.get(&set)?.clone();
    for (device, types) in registered {
        if types & (nvmlEventTypeXidCriticalError as u64) == 0 {
            continue;
        }
        let Some(d) = scenario.devices.get(device) else {
            continue;
        };
        let delivered = sets.delivered.entry(device).or_insert(0);
        if *delivered > d.xid_events.len() {
            *delivered = d.xid_events.len(); // the list was rewritten shorter
        }
        if let Some(code) = d.xid_events.get(*delivered) {
            *delivered += 1;
            return Some((device, *code));
        }
    }
    None
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    out: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    let until = std::time::Instant::now() + Duration::from_millis(timeout_ms as u64);
    loop {
        if current().uninitialized {
            return UNINITIALIZED;
        }
        if let Some((device, code)) = next_event(set as usize) {
            let data = nvmlEventData_t {
                device: (device + 1) as nvmlDevice_t,
                eventType: nvmlEventTypeXidCriticalError as u64,
                eventData: code,
                gpuInstanceId: u32::MAX,
                computeInstanceId: u32::MAX,
            };
            // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
            return unsafe { put(out, Some(data)) };
        }
        if std::time::Instant::now() >= until {
            return nvmlReturn_enum_NVML_ERROR_TIMEOUT;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    if let Ok(mut sets) = event_sets().lock() {
        sets.registrations.remove(&(set as usize));
    }
    SUCCESS
}

/// What this library is: gpuwarden refuses a library that exports this where no simulation
/// scenario is given (src/config/simulated.rs), so a mistyped `library_path` on a real node
/// cannot serve invented GPUs.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwarden_simulated_library() {}
