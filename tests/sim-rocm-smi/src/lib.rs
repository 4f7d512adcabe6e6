//! A simulated ROCm SMI (librocm_smi64) for gpuwarden's tests.
//!
//! Exports the rsmi_* functions gpuwarden calls, answering from a YAML scenario named by
//! `GPUWARDEN_SIM_ROCM_SMI_SCENARIO` (re-read when it changes, like the simulated NVML). A
//! value left out of a device is "not supported" (RSMI_STATUS_NOT_SUPPORTED, 2); `fail`
//! makes a call return a status. Built with `old-rocm` (tests/sim-rocm-smi-old) it lacks
//! rsmi_dev_energy_count_get and rsmi_dev_memory_busy_percent_get, as an older ROCm might.
//! Format in docs/testing.md.

#![allow(clippy::missing_safety_doc)]

use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::c_char;

type Status = u32;
const SUCCESS: Status = 0;
const INVALID_ARGS: Status = 1;
const NOT_SUPPORTED: Status = 2;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    #[serde(default = "default_version")]
    version: [u32; 3],
    /// rsmi_init returns this status (8: RSMI_STATUS_INIT_ERROR, as with no AMD driver).
    #[serde(default)]
    init_error: Option<u32>,
    #[serde(default)]
    devices: Vec<Device>,
}

fn default_version() -> [u32; 3] {
    [6, 2, 0]
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "old-rocm", allow(dead_code))]
struct Device {
    pci_bus_id: String,
    name: Option<String>,
    unique_id: Option<u64>,
    serial: Option<String>,
    /// Millidegrees by sensor: edge, junction, memory.
    #[serde(default)]
    temperature: BTreeMap<String, i64>,
    #[serde(default)]
    critical: BTreeMap<String, i64>,
    #[serde(default)]
    emergency: BTreeMap<String, i64>,
    power_uw: Option<u64>,
    power_cap_uw: Option<u64>,
    /// (counter, resolution in microjoules)
    energy: Option<(u64, f32)>,
    busy_percent: Option<u32>,
    memory_busy_percent: Option<u32>,
    vram_used: Option<u64>,
    vram_total: Option<u64>,
    pcie_replays: Option<u64>,
    /// Block name (umc, sdma, gfx, mmhub, pcie_bif, xgmi_wafl) -> [correctable, uncorrectable].
    #[serde(default)]
    ecc: BTreeMap<String, [u64; 2]>,
    /// Function name -> status it returns.
    #[serde(default)]
    fail: BTreeMap<String, u32>,
}

fn scenario() -> Scenario {
    let Some(path) = std::env::var_os("GPUWARDEN_SIM_ROCM_SMI_SCENARIO") else {
        return Scenario::default();
    };
    match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_saphyr::from_str::<Scenario>(&t).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sim-rocm-smi: {path:?}: {e}");
            Scenario::default()
        }
    }
}

/// Runs one device call: the device, its `fail` entry, then `answer`.
fn device_call(index: u32, call: &str, answer: impl FnOnce(&Device) -> Status) -> Status {
    let s = scenario();
    let Some(d) = s.devices.get(index as usize) else {
        return INVALID_ARGS;
    };
    if let Some(status) = d.fail.get(call) {
        return *status;
    }
    answer(d)
}

unsafe fn put<T>(out: *mut T, value: Option<T>) -> Status {
    match value {
        None => NOT_SUPPORTED,
        Some(_) if out.is_null() => INVALID_ARGS,
        Some(v) => {
            // SAFETY: not null (checked above), and the caller's, valid for writes.
            unsafe { out.write(v) };
            SUCCESS
        }
    }
}

unsafe fn put_string(out: *mut c_char, len: usize, value: Option<&str>) -> Status {
    let Some(value) = value else {
        return NOT_SUPPORTED;
    };
    if out.is_null() || len == 0 {
        return INVALID_ARGS;
    }
    let bytes = value.as_bytes();
    let n = bytes.len().min(len - 1);
    for (i, b) in bytes[..n].iter().enumerate() {
        // SAFETY: i < n < len: inside the caller's buffer of `len` bytes.
        unsafe { *out.add(i) = *b as c_char };
    }
    // SAFETY: n <= len - 1: inside the caller's buffer of `len` bytes.
    unsafe { *out.add(n) = 0 };
    SUCCESS
}

#[repr(C)]
pub struct Version {
    major: u32,
    minor: u32,
    patch: u32,
    build: *const c_char,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_version_get(out: *mut Version) -> Status {
    let [major, minor, patch] = scenario().version;
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; put refuses null.
    unsafe {
        put(
            out,
            Some(Version {
                major,
                minor,
                patch,
                build: c"sim".as_ptr(),
            }),
        )
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn rsmi_init(_flags: u64) -> Status {
    scenario().init_error.unwrap_or(SUCCESS)
}

#[unsafe(no_mangle)]
pub extern "C" fn rsmi_shut_down() -> Status {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_status_string(status: Status, out: *mut *const c_char) -> Status {
    let text = match status {
        8 => c"RSMI_STATUS_INIT_ERROR: simulated",
        _ => c"simulated ROCm SMI error",
    };
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, Some(text.as_ptr())) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_num_monitor_devices(out: *mut u32) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, Some(scenario().devices.len() as u32)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_name_get(dv: u32, out: *mut c_char, len: usize) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_name_get", |d| unsafe {
        put_string(out, len, d.name.as_deref())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_serial_number_get(dv: u32, out: *mut c_char, len: u32) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_serial_number_get", |d| unsafe {
        put_string(out, len as usize, d.serial.as_deref())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_unique_id_get(dv: u32, out: *mut u64) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_unique_id_get", |d| unsafe { put(out, d.unique_id) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_pci_id_get(dv: u32, out: *mut u64) -> Status {
    device_call(dv, "rsmi_dev_pci_id_get", |d| {
        // "0000:c1:00.0" -> domain << 32 | bus << 8 | device << 3 | function
        let parts: Vec<u64> = d
            .pci_bus_id
            .split([':', '.'])
            .map(|p| u64::from_str_radix(p, 16).unwrap_or(0))
            .collect();
        let bdf = match parts.as_slice() {
            [domain, bus, device, function] => domain << 32 | bus << 8 | device << 3 | function,
            _ => return INVALID_ARGS,
        };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, Some(bdf)) }
    })
}

fn sensor_name(sensor: u32) -> &'static str {
    match sensor {
        0 => "edge",
        1 => "junction",
        2 => "memory",
        _ => "",
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_temp_metric_get(dv: u32, sensor: u32, metric: u32, out: *mut i64) -> Status {
    device_call(dv, "rsmi_dev_temp_metric_get", |d| {
        let table = match metric {
            0 => &d.temperature,
            5 => &d.critical,
            7 => &d.emergency,
            _ => return NOT_SUPPORTED,
        };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        unsafe { put(out, table.get(sensor_name(sensor)).copied()) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_power_ave_get(dv: u32, _sensor: u32, out: *mut u64) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_power_ave_get", |d| unsafe { put(out, d.power_uw) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_power_cap_get(dv: u32, _sensor: u32, out: *mut u64) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_power_cap_get", |d| unsafe { put(out, d.power_cap_uw) })
}

#[cfg(not(feature = "old-rocm"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_energy_count_get(
    dv: u32,
    counter: *mut u64,
    resolution: *mut f32,
    timestamp: *mut u64,
) -> Status {
    device_call(dv, "rsmi_dev_energy_count_get", |d| {
        let Some((c, r)) = d.energy else {
            return NOT_SUPPORTED;
        };
        // SAFETY: the three pointers are the caller's, valid for writes or null as the C API
        // allows; put refuses null.
        unsafe {
            put(counter, Some(c));
            put(resolution, Some(r));
            put(timestamp, Some(0))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_busy_percent_get(dv: u32, out: *mut u32) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_busy_percent_get", |d| unsafe { put(out, d.busy_percent) })
}

#[cfg(not(feature = "old-rocm"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_memory_busy_percent_get(dv: u32, out: *mut u32) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_memory_busy_percent_get", |d| unsafe {
        put(out, d.memory_busy_percent)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_memory_usage_get(dv: u32, kind: u32, out: *mut u64) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_memory_usage_get", |d| unsafe {
        put(out, if kind == 0 { d.vram_used } else { None })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_memory_total_get(dv: u32, kind: u32, out: *mut u64) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_memory_total_get", |d| unsafe {
        put(out, if kind == 0 { d.vram_total } else { None })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_pci_replay_counter_get(dv: u32, out: *mut u64) -> Status {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    device_call(dv, "rsmi_dev_pci_replay_counter_get", |d| unsafe {
        put(out, d.pcie_replays)
    })
}

/// rsmi_error_count_t as ROCm 5 has it (two counters); ROCm 6 appends a third.
#[repr(C)]
pub struct ErrorCount {
    correctable: u64,
    uncorrectable: u64,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsmi_dev_ecc_count_get(dv: u32, block: u64, out: *mut ErrorCount) -> Status {
    device_call(dv, "rsmi_dev_ecc_count_get", |d| {
        let name = match block {
            0x1 => "umc",
            0x2 => "sdma",
            0x4 => "gfx",
            0x8 => "mmhub",
            0x20 => "pcie_bif",
            0x80 => "xgmi_wafl",
            _ => return INVALID_ARGS,
        };
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; put refuses null.
        unsafe {
            put(
                out,
                d.ecc.get(name).map(|[c, u]| ErrorCount {
                    correctable: *c,
                    uncorrectable: *u,
                }),
            )
        }
    })
}

/// What this library is: gpuwarden refuses a library that exports this where no simulation
/// scenario is given (src/config/simulated.rs), so a mistyped `library_path` on a real node
/// cannot serve invented GPUs.
#[unsafe(no_mangle)]
pub extern "C" fn gpuwarden_simulated_library() {}
