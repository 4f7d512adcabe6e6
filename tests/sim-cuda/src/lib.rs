//! A simulated CUDA driver (libcuda.so.1) and cuBLAS (libcublas.so.13) for the probe's tests.
//!
//! It exports the C symbols the probe reaches through cudarc, and nothing runs: every
//! operation advances a virtual GPU clock by the time it would take at the rates the
//! scenario gives the device (`cuda:` in the simulated NVML's scenario file, named by
//! `GPUWARDEN_SIM_NVML_SCENARIO`), and CUDA events read that clock. So a test decides what
//! the probe measures (a healthy H100, one at half its HBM bandwidth) and checks that the
//! figures, verdicts, metrics and alerts follow. Devices are those of the scenario that have
//! a `cuda:` section, in order; their uuids are parsed from the NVML uuid strings.

#![allow(clippy::missing_safety_doc)]

#[path = "../../sim-nvml/src/scenario.rs"]
#[allow(dead_code)] // the NVML half of the scenario is the other library's
mod scenario;

mod compute;
mod memory;
mod patterns;

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

type CUresult = c_uint;
const SUCCESS: CUresult = 0;
const INVALID_VALUE: CUresult = 1;
const INVALID_DEVICE: CUresult = 101;
const NOT_FOUND: CUresult = 500;
const LAUNCH_FAILED: CUresult = 719;

const ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: c_int = 39;

const FMA_FUNCTION: usize = 1;
const COPY_FUNCTION: usize = 2;
const FMA_CHAIN_FUNCTION: usize = 3;
const DIGEST_FUNCTION: usize = 4;
const MEM_FILL_FUNCTION: usize = 5;
const MEM_CHECK_FUNCTION: usize = 6;
const MEM_INVERT_FUNCTION: usize = 7;
/// Free device memory as cuMemGetInfo says it: the pattern test takes a share of it (its
/// region's contents are a formula here, so its size costs nothing).
const FREE_BYTES: usize = 2 << 30;
/// The SM count when the scenario names none: small, since the canary's GEMMs are sized by
/// it and computed here for real.
const DEFAULT_SMS: u32 = 2;

/// The simulated machine: which device is current, its virtual clock, recorded events.
#[derive(Default)]
struct Machine {
    current: usize,
    /// The current device's rates, read once when its context is made: reading the scenario
    /// on every launch would make the probe's thousands of launches slow.
    rates: Option<scenario::Cuda>,
    clock_seconds: f64,
    events: HashMap<usize, f64>,
    next_handle: usize,
    memory: memory::Memory,
    /// By result pointer: the inputs (pointers and versions) and shape of the last GEMM
    /// computed into it, so a repeat of the same GEMM is not computed again.
    last_gemm: HashMap<u64, [u64; 8]>,
    /// The last digest computed: (words pointer, its version, count, per part) and the sums,
    /// so the canary's repeats of the same result cost one digest.
    last_digest: Option<([u64; 4], Vec<u64>)>,
    /// The pattern test's region by pointer: what every word holds, as (pattern, mode).
    patterns: HashMap<u64, (u32, i32)>,
}

fn machine() -> std::sync::MutexGuard<'static, Machine> {
    static MACHINE: OnceLock<Mutex<Machine>> = OnceLock::new();
    let m = MACHINE.get_or_init(|| {
        Mutex::new(Machine {
            next_handle: 0x1000,
            ..Machine::default()
        })
    });
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The devices CUDA sees: (uuid bytes, rates).
fn devices() -> Vec<([u8; 16], scenario::Cuda)> {
    let Some(path) = std::env::var_os("GPUWARDEN_SIM_NVML_SCENARIO") else {
        return Vec::new();
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(s) = scenario::Scenario::parse(&text) else {
        return Vec::new();
    };
    s.devices
        .iter()
        .filter_map(|d| Some((uuid_bytes(&d.uuid), d.cuda.clone()?)))
        .collect()
}

fn uuid_bytes(uuid: &str) -> [u8; 16] {
    let hex: Vec<u8> = uuid
        .trim_start_matches("GPU-")
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .collect();
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        let text = std::str::from_utf8(pair).unwrap_or("0");
        out[i] = u8::from_str_radix(text, 16).unwrap_or(0);
    }
    out
}

fn rates() -> Option<scenario::Cuda> {
    machine().rates.clone()
}

fn advance(seconds: f64) {
    machine().clock_seconds += seconds;
}

fn new_handle() -> usize {
    let mut m = machine();
    m.next_handle += 1;
    m.next_handle
}

unsafe fn put<T>(out: *mut T, value: T) -> CUresult {
    if out.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: not null (checked above), and the caller's, valid for writes under CUDA's contract.
    unsafe { out.write(value) };
    SUCCESS
}

// ---- driver: initialisation, devices, contexts ------------------------------------------

#[unsafe(no_mangle)]
pub extern "C" fn cuInit(_flags: c_uint) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(out: *mut c_int) -> CUresult {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, 13000) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(out: *mut c_int) -> CUresult {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, devices().len() as c_int) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(out: *mut c_int, ordinal: c_int) -> CUresult {
    if ordinal < 0 || ordinal as usize >= devices().len() {
        return INVALID_DEVICE;
    }
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, ordinal) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(out: *mut [u8; 16], device: c_int) -> CUresult {
    match devices().get(device.max(0) as usize) {
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        Some((uuid, _)) => unsafe { put(out, *uuid) },
        None => INVALID_DEVICE,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(out: *mut [u8; 16], device: c_int) -> CUresult {
    // SAFETY: the same contract as the call it forwards to.
    unsafe { cuDeviceGetUuid(out, device) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(out: *mut c_int, attribute: c_int, device: c_int) -> CUresult {
    let sms = devices()
        .into_iter()
        .nth(device.max(0) as usize)
        .and_then(|(_, r)| r.sms)
        .unwrap_or(DEFAULT_SMS);
    let value = match attribute {
        ATTRIBUTE_MULTIPROCESSOR_COUNT => sms as c_int,
        ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => 2048,
        _ => 0, // memory pools and the rest: not supported
    };
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, value) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(out: *mut usize, device: c_int) -> CUresult {
    let rates = devices().into_iter().nth(device.max(0) as usize).map(|(_, r)| r);
    if let Some(hang) = rates.as_ref().map(|r| r.context_hang_seconds).filter(|s| *s > 0.0) {
        std::thread::sleep(std::time::Duration::from_secs_f64(hang));
    }
    let mut m = machine();
    m.current = device.max(0) as usize;
    m.rates = rates;
    drop(m);
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, 0x100 + device.max(0) as usize) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(_device: c_int) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease(_device: c_int) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(_ctx: usize) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(out: *mut usize) -> CUresult {
    let current = machine().current;
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, 0x100 + current) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(_error: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, c"simulated CUDA error".as_ptr()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(_error: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, c"CUDA_ERROR_SIMULATED".as_ptr()) }
}

// ---- streams and events -----------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(out: *mut usize, _flags: c_uint) -> CUresult {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, new_handle()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(out: *mut usize, _flags: c_uint, _priority: c_int) -> CUresult {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, new_handle()) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(_stream: usize) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(_stream: usize) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(_stream: usize, _event: usize, _flags: c_uint) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(out: *mut usize, _flags: c_uint) -> CUresult {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, new_handle()) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(event: usize, _stream: usize) -> CUresult {
    let mut m = machine();
    let now = m.clock_seconds;
    m.events.insert(event, now);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(_event: usize) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(_event: usize) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(out: *mut f32, start: usize, end: usize) -> CUresult {
    let m = machine();
    match (m.events.get(&start), m.events.get(&end)) {
        // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
        (Some(a), Some(b)) => unsafe { put(out, ((b - a) * 1000.0) as f32) },
        _ => INVALID_VALUE,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime_v2(out: *mut f32, start: usize, end: usize) -> CUresult {
    // SAFETY: the same contract as the call it forwards to.
    unsafe { cuEventElapsedTime(out, start, end) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(event: usize) -> CUresult {
    machine().events.remove(&event);
    SUCCESS
}

// ---- modules and kernels ----------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(out: *mut usize, image: *const c_void) -> CUresult {
    if image.is_null() {
        return INVALID_VALUE;
    }
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, new_handle()) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuModuleUnload(_module: usize) -> CUresult {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(out: *mut usize, _module: usize, name: *const c_char) -> CUresult {
    // SAFETY: CUDA's contract: `name` is a NUL-terminated string the caller keeps alive.
    let name = unsafe { CStr::from_ptr(name) };
    let function = match name.to_bytes() {
        b"fma_fp32" => FMA_FUNCTION,
        b"hbm_copy" => COPY_FUNCTION,
        b"fma_chain" => FMA_CHAIN_FUNCTION,
        b"digest_words" => DIGEST_FUNCTION,
        b"mem_fill" => MEM_FILL_FUNCTION,
        b"mem_check" => MEM_CHECK_FUNCTION,
        b"mem_invert" => MEM_INVERT_FUNCTION,
        _ => return NOT_FOUND,
    };
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, function) }
}

/// Kernel time from the kernel's own arguments: fma_fp32(out, iterations, a, b) does
/// threads x iterations x 256 FLOPs; hbm_copy(src, dst, words) moves 2 x 16 x words bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel(
    function: usize,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared: c_uint,
    _stream: usize,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CUresult {
    let Some(rates) = rates() else {
        return INVALID_DEVICE;
    };
    if rates.launch_fails {
        return LAUNCH_FAILED;
    }
    let threads = [grid_x, grid_y, grid_z, block_x, block_y, block_z]
        .iter()
        .map(|v| *v as f64)
        .product::<f64>();
    // SAFETY: cudarc passes one pointer per kernel argument.
    let seconds = unsafe {
        match function {
            FMA_FUNCTION => {
                let iterations = *(*params.add(1) as *const c_int) as f64;
                threads * iterations * 256.0 / (rates.fma_fp32_tflops * 1e12)
            }
            COPY_FUNCTION => {
                let words = *(*params.add(2) as *const u64) as f64;
                words * 32.0 / (rates.hbm_copy_gbps * 1e9)
            }
            FMA_CHAIN_FUNCTION => {
                let out = *(*params.add(0) as *const u64);
                let steps = *(*params.add(1) as *const c_int);
                let (a, b) = (*(*params.add(2) as *const f32), *(*params.add(3) as *const f32));
                let results = compute::fma_chain(threads as usize, steps, a, b);
                let bytes: Vec<u8> = results.iter().flat_map(|v| v.to_le_bytes()).collect();
                machine().memory.write(out, &bytes);
                threads * f64::from(steps) * 2.0 / (rates.fma_fp32_tflops * 1e12)
            }
            DIGEST_FUNCTION => {
                let words = *(*params.add(0) as *const u64);
                let count = *(*params.add(1) as *const u64);
                let per_part = *(*params.add(2) as *const u64);
                let parts_ptr = *(*params.add(3) as *const u64);
                let mut m = machine();
                let key = [words, m.memory.version(words), count, per_part];
                let sums = match &m.last_digest {
                    Some((k, sums)) if *k == key => sums.clone(),
                    _ => {
                        let data = m.memory.read(words, count as usize * 4);
                        let mut sums = vec![0u64; 64];
                        compute::digest(&data, count, per_part, &mut sums);
                        m.last_digest = Some((key, sums.clone()));
                        sums
                    }
                };
                let parts_bytes = m.memory.read(parts_ptr, 64 * 8);
                let mut parts: Vec<u64> = parts_bytes
                    .chunks(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect();
                for (part, sum) in parts.iter_mut().zip(&sums) {
                    *part = part.wrapping_add(*sum);
                }
                let out: Vec<u8> = parts.iter().flat_map(|p| p.to_le_bytes()).collect();
                m.memory.write(parts_ptr, &out);
                count as f64 * 4.0 / (rates.hbm_copy_gbps * 1e9)
            }
            MEM_FILL_FUNCTION | MEM_CHECK_FUNCTION | MEM_INVERT_FUNCTION => {
                let arg_u64 = |i: usize| *(*params.add(i) as *const u64);
                let arg_u32 = |i: usize| *(*params.add(i) as *const u32);
                let arg_i32 = |i: usize| *(*params.add(i) as *const c_int);
                let (buffer, words) = (arg_u64(0), arg_u64(1));
                let mut guard = machine();
                let m = &mut *guard;
                match function {
                    MEM_FILL_FUNCTION => {
                        m.patterns.insert(buffer, (arg_u32(2), arg_i32(3)));
                    }
                    _ => {
                        // mem_check wants what its arguments say; mem_invert the constant it
                        // reads, and leaves the inverse.
                        let invert = function == MEM_INVERT_FUNCTION;
                        let wanted = if invert {
                            (arg_u32(2), 0)
                        } else {
                            (arg_u32(2), arg_i32(3))
                        };
                        let held = m.patterns.get(&buffer).copied().unwrap_or((0, 0));
                        patterns::check(&mut m.memory, held, &rates, words, wanted, [arg_u64(4), arg_u64(5)]);
                        if invert {
                            m.patterns.insert(buffer, (!wanted.0, 0));
                        }
                    }
                }
                let traversals = if function == MEM_INVERT_FUNCTION { 2.0 } else { 1.0 };
                traversals * words as f64 * 4.0 / (rates.hbm_copy_gbps * 1e9)
            }
            _ => return INVALID_VALUE,
        }
    };
    advance(seconds);
    SUCCESS
}

// ---- memory -----------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    // SAFETY: both are the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe {
        let _ = put(total, 80 << 30);
        put(free, FREE_BYTES)
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(out: *mut u64, bytes: usize) -> CUresult {
    // Each allocation its own 4 GiB of address space; contents only where written (memory.rs).
    let handle = (new_handle() as u64) << 32;
    machine().memory.alloc(handle, bytes);
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, handle) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(ptr: u64) -> CUresult {
    machine().memory.free(ptr);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(ptr: u64, value: u8, count: usize, _stream: usize) -> CUresult {
    machine().memory.fill(ptr, value, count);
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2(ptr: u64, value: u8, count: usize) -> CUresult {
    cuMemsetD8Async(ptr, value, count, 0)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, bytes: usize, _stream: usize) -> CUresult {
    match rates() {
        Some(r) => {
            let mut m = machine();
            if !src.is_null() && m.memory.holds(dst, bytes) {
                // SAFETY: CUDA's contract: `src` holds `bytes` readable bytes.
                let data = unsafe { std::slice::from_raw_parts(src as *const u8, bytes) };
                m.memory.write(dst, data);
            }
            drop(m);
            advance(bytes as f64 / (r.pcie_h2d_gbps * 1e9));
            SUCCESS
        }
        None => INVALID_DEVICE,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, bytes: usize) -> CUresult {
    cuMemcpyHtoDAsync_v2(dst, src, bytes, 0)
}

#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, bytes: usize, _stream: usize) -> CUresult {
    match rates() {
        Some(r) => {
            let mut m = machine();
            if !dst.is_null() && m.memory.holds(src, bytes) {
                let data = m.memory.read(src, bytes);
                // SAFETY: CUDA's contract: `dst` holds `bytes` writable bytes.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, bytes) };
            }
            drop(m);
            advance(bytes as f64 / (r.pcie_d2h_gbps * 1e9));
            SUCCESS
        }
        None => INVALID_DEVICE,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(out: *mut *mut c_void, bytes: usize, _flags: c_uint) -> CUresult {
    // Real memory: the probe writes to its pinned buffers.
    let layout = match std::alloc::Layout::from_size_align(bytes.max(1), 4096) {
        Ok(l) => l,
        Err(_) => return INVALID_VALUE,
    };
    // SAFETY: a non-zero size; freed in cuMemFreeHost with the same layout.
    let ptr = unsafe { std::alloc::alloc(layout) };
    if ptr.is_null() {
        return 2; // CUDA_ERROR_OUT_OF_MEMORY
    }
    machine().events.insert(ptr as usize, bytes as f64);
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, ptr as *mut c_void) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(ptr: *mut c_void) -> CUresult {
    let Some(bytes) = machine().events.remove(&(ptr as usize)) else {
        return INVALID_VALUE;
    };
    if let Ok(layout) = std::alloc::Layout::from_size_align((bytes as usize).max(1), 4096) {
        // SAFETY: allocated in cuMemHostAlloc with this layout.
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
    }
    SUCCESS
}

// ---- cuBLAS -----------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasCreate_v2(out: *mut usize) -> c_uint {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, new_handle()) }
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasDestroy_v2(_handle: usize) -> c_uint {
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetStream_v2(_handle: usize, _stream: usize) -> c_uint {
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetWorkspace_v2(_handle: usize, _workspace: u64, _bytes: usize) -> c_uint {
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetAtomicsMode(_handle: usize, _mode: c_int) -> c_uint {
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasSetMathMode(_handle: usize, _mode: c_int) -> c_uint {
    0
}

/// cuBLAS 13.1.0, as the simulated driver is CUDA 13.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasGetVersion_v2(_handle: usize, out: *mut c_int) -> c_uint {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    unsafe { put(out, 130100) }
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cublasGemmEx(
    _handle: usize,
    _transa: c_int,
    _transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    _alpha: *const c_void,
    a: *const c_void,
    a_type: c_int,
    lda: c_int,
    b: *const c_void,
    b_type: c_int,
    ldb: c_int,
    _beta: *const c_void,
    c: *mut c_void,
    c_type: c_int,
    _ldc: c_int,
    _compute: c_int,
    _algo: c_int,
) -> c_uint {
    let Some(r) = rates() else {
        return 13; // CUBLAS_STATUS_EXECUTION_FAILED
    };
    let (m, n, k) = (m.max(0) as usize, n.max(0) as usize, k.max(0) as usize);
    if c_type == compute::CUDA_R_32F && (m * n * k) as u64 <= compute::MAX_COMPUTED {
        compute_gemm(
            &r,
            [m, n, k],
            (a as u64, a_type, lda),
            (b as u64, b_type, ldb),
            c as u64,
        );
    }
    advance(2.0 * m as f64 * n as f64 * k as f64 / (r.gemm_bf16_tflops * 1e12));
    0
}

/// Computes a GEMM whose buffers hold contents into C, unless C holds this very GEMM of
/// these inputs already; then flips the scenario's wrong element.
fn compute_gemm(r: &scenario::Cuda, [m, n, k]: [usize; 3], a: (u64, c_int, c_int), b: (u64, c_int, c_int), c: u64) {
    let mut machine = machine();
    let a_bytes = (a.2.max(0) as usize) * k * compute::element_bytes(a.1);
    let b_bytes = (b.2.max(0) as usize) * n * compute::element_bytes(b.1);
    let memory = &mut machine.memory;
    if !(memory.holds(a.0, a_bytes) && memory.holds(b.0, b_bytes) && memory.holds(c, m * n * 4)) {
        return;
    }
    let key = [
        a.0,
        memory.version(a.0),
        b.0,
        memory.version(b.0),
        m as u64,
        n as u64,
        k as u64,
        ((a.1 as u64) << 32) | b.1 as u64,
    ];
    if machine.last_gemm.get(&c) == Some(&key) {
        return;
    }
    let a_data = machine.memory.read(a.0, a_bytes);
    let b_data = machine.memory.read(b.0, b_bytes);
    let mut result = compute::gemm(m, n, k, &a_data, a.1, a.2 as usize, &b_data, b.1, b.2 as usize);
    if let Some(wrong) = r.sdc_wrong_element.and_then(|i| result.get_mut(i as usize)) {
        *wrong = f32::from_bits(wrong.to_bits() ^ 1);
    }
    let bytes: Vec<u8> = result.iter().flat_map(|v| v.to_le_bytes()).collect();
    machine.memory.write(c, &bytes);
    machine.last_gemm.insert(c, key);
}

// ---- NCCL (libnccl.so.2: tests link it to this library too) ------------------------------

/// The communicators ncclCommInitAll made and the all-reduces of the group in flight.
#[derive(Default)]
struct Nccl {
    /// Per rank: its GPU's knobs (rank r is the devlist's r-th CUDA device).
    ranks: Vec<scenario::Cuda>,
    /// Open ncclGroupStart calls.
    groups: u32,
    /// (rank, send, recv, count) of the all-reduces the open group holds.
    pending: Vec<(usize, u64, u64, usize)>,
}

static NCCL: Mutex<Option<Nccl>> = Mutex::new(None);

fn nccl() -> std::sync::MutexGuard<'static, Option<Nccl>> {
    NCCL.lock().unwrap_or_else(|p| p.into_inner())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(out: *mut c_int) -> c_int {
    // SAFETY: `out` is the caller's, valid for writes or null as the C API allows; the helper refuses null.
    (unsafe { put(out, 22703) }) as c_int
}

/// Rank r's communicator is the handle r + 1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(comms: *mut usize, ndev: c_int, devlist: *const c_int) -> c_int {
    if comms.is_null() || devlist.is_null() || ndev < 1 {
        return 4; // ncclInvalidArgument
    }
    let gpus = devices();
    let mut ranks = Vec::new();
    for rank in 0..ndev as usize {
        // SAFETY: NCCL's contract: `comms` and `devlist` hold `ndev` slots.
        let ordinal = unsafe { devlist.add(rank).read() };
        let Some((_, knobs)) = usize::try_from(ordinal).ok().and_then(|o| gpus.get(o)) else {
            return 4;
        };
        ranks.push(knobs.clone());
        // SAFETY: as above.
        unsafe { comms.add(rank).write(rank + 1) };
    }
    *nccl() = Some(Nccl {
        ranks,
        ..Nccl::default()
    });
    0
}

/// Held until the group ends (or at once outside a group): then every rank's result is the
/// sum of every rank's input, and the clock moves by the group's time at the slowest GPU's
/// `nccl_busbw_gbps` (every rank's events read the one clock).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    _datatype: c_int,
    _op: c_int,
    comm: usize,
    _stream: usize,
) -> c_int {
    let mut guard = nccl();
    let Some(state) = guard.as_mut() else {
        return 4;
    };
    let Some(knobs) = comm.checked_sub(1).and_then(|r| state.ranks.get(r)) else {
        return 4;
    };
    if state.ranks.iter().any(|r| r.nccl_fails) {
        return 2; // ncclSystemError
    }
    if knobs.nccl_hangs {
        drop(guard);
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    state.pending.push((comm - 1, send as u64, recv as u64, count));
    if state.groups == 0 {
        finish(state);
    }
    0
}

/// Computes the group's all-reduces: the sums, then the time.
fn finish(state: &mut Nccl) {
    let pending = std::mem::take(&mut state.pending);
    let Some(&(_, _, _, count)) = pending.first() else {
        return;
    };
    let bytes = count * 4;
    let mut m = machine();
    let mut sums = vec![0f32; count.min(memory::MAX_BACKED / 4)];
    if bytes <= memory::MAX_BACKED {
        for &(_, send, _, _) in &pending {
            let data = m.memory.read(send, bytes);
            for (sum, chunk) in sums.iter_mut().zip(data.chunks_exact(4)) {
                *sum += f32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            }
        }
        for &(rank, _, recv, _) in &pending {
            let mut result = sums.clone();
            if state.ranks[rank].nccl_wrong_sum
                && let Some(first) = result.first_mut()
            {
                *first = f32::from_bits(first.to_bits() ^ 1);
            }
            let out: Vec<u8> = result.iter().flat_map(|v| v.to_le_bytes()).collect();
            m.memory.write(recv, &out);
        }
    }
    let busbw = state
        .ranks
        .iter()
        .filter_map(|r| r.nccl_busbw_gbps)
        .fold(f64::INFINITY, f64::min);
    let busbw = if busbw.is_finite() { busbw } else { 360.0 };
    let n = state.ranks.len().max(1) as f64;
    // One rank alone copies its buffer (NCCL does that much): time passes there too.
    let moved = if n > 1.0 { 2.0 * (n - 1.0) / n } else { 1.0 };
    m.clock_seconds += bytes as f64 * moved / (busbw * 1e9);
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> c_int {
    if let Some(state) = nccl().as_mut() {
        state.groups += 1;
    }
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> c_int {
    if let Some(state) = nccl().as_mut() {
        state.groups = state.groups.saturating_sub(1);
        if state.groups == 0 {
            finish(state);
        }
    }
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(_comm: usize) -> c_int {
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(_result: c_int) -> *const c_char {
    c"simulated NCCL error".as_ptr()
}
