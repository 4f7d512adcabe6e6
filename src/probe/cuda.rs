//! The probe's GPU side, on cudarc with the driver loaded at run time: the binary builds and
//! starts where there is no CUDA at all, and `driver_present` says so before anything else.
//!
//! Each test enqueues its operation in windows of about 25 ms, timed with CUDA events, so
//! what is measured is the GPU's own time; see `windows` for burst and sustained figures.

use super::windows::{self, Window};
use super::{ProbeError, Test};
use crate::config::ProbeDurations;
use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{
    self, CudaContext, CudaFunction, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The PTX of kernels.cu, made by scripts/gen/gen-probe-ptx.sh; the driver compiles it for
/// whatever GPU it finds.
const KERNELS_PTX: &str = include_str!("kernels.ptx");

/// FLOPs one thread of `fma_fp32` does per loop iteration: 8 chains x 16 unrolled x 2.
const FMA_FLOPS_PER_ITERATION: f64 = 256.0;
const FMA_ITERATIONS: i32 = 2048;
pub(super) const THREADS_PER_BLOCK: u32 = 256;
/// 256-thread blocks: on an H200 the same kernel moved 4273 GB/s with them against 4123 with
/// 1024-thread blocks (scripts/gpu/hbm-copy-sweep.cu, docs/probe.md).
const COPY_THREADS_PER_BLOCK: u32 = 256;
const MIB: u64 = 1 << 20;

/// What a test measured, before it is compared with what the model should do.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    pub params: BTreeMap<String, u64>,
    pub rates: Option<windows::Rates>,
    pub skipped: Option<String>,
    /// The GPU failed the test (a CUDA or cuBLAS error), as opposed to a test that could not
    /// start for want of a library: a failure counts against the GPU.
    pub failed: bool,
    /// The correctness canary's evidence (`sdc` only).
    pub sdc: Option<crate::model::probe::SdcOutcome>,
    /// The HBM pattern test's evidence (`memtest` only).
    pub memtest: Option<crate::model::probe::MemtestOutcome>,
}

impl Measured {
    /// A test's windows, or the failure that ended it (which counts against the GPU).
    pub(super) fn of(params: BTreeMap<String, u64>, result: Result<Vec<Window>, ProbeError>) -> Measured {
        match result {
            Ok(w) => Measured {
                params,
                rates: windows::summarize(&w),
                skipped: None,
                failed: false,
                sdc: None,
                memtest: None,
            },
            Err(e) => Measured {
                failed: true,
                ..Measured::skipped(params, format!("failed: {e}"))
            },
        }
    }

    pub(super) fn skipped(params: BTreeMap<String, u64>, why: String) -> Measured {
        Measured {
            params,
            rates: None,
            skipped: Some(why),
            failed: false,
            sdc: None,
            memtest: None,
        }
    }
}

/// Buffer sizes from the memory cap, so that every test of a probe fits under it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sizes {
    /// Square GEMM side; three n x n bf16 matrices.
    pub gemm_n: u64,
    /// Each of the two copy buffers.
    pub hbm_copy_bytes: u64,
    /// The device buffer and the pinned host buffer of the PCIe tests.
    pub pcie_bytes: u64,
    /// The HBM pattern test's share of the free memory, and its most bytes.
    pub memtest_share: f64,
    pub memtest_max_bytes: u64,
}

impl Sizes {
    /// The largest sizes that still measure the steady rate, shrunk to fit `cap_mib`: an
    /// 8192 GEMM (384 MiB), 512 MiB copy buffers (ten times any L2 cache), 256 MiB transfers.
    pub(crate) fn for_cap(cap_mib: u64) -> Sizes {
        let cap = cap_mib * MIB;
        let gemm_n = if 3 * 8192 * 8192 * 2 <= cap / 2 { 8192 } else { 4096 };
        let round = |bytes: u64| (bytes / (16 * MIB)).max(1) * 16 * MIB;
        Sizes {
            gemm_n,
            hbm_copy_bytes: round((cap / 4).min(512 * MIB)),
            pcie_bytes: round((cap / 4).min(256 * MIB)),
            memtest_share: 0.5,
            memtest_max_bytes: 64 << 30,
        }
    }
}

/// True when the CUDA driver library can be loaded. Nothing else in this module may be
/// called when it is false: cudarc panics on a library it cannot find.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library by its usual names.
    unsafe { driver::sys::is_culib_present() }
}

/// Loads `path` (when given) so that cudarc's own lookup by soname finds this cuBLAS, then
/// says whether a cuBLAS can be loaded at all.
pub(crate) fn cublas_present(path: &Path) -> Result<bool, ProbeError> {
    if !path.as_os_str().is_empty() {
        // SAFETY: loading a shared library runs its initialisers; cuBLAS's are benign.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|e| ProbeError::Cuda(format!("probe.cublas_library {}: {e}", path.display())))?;
        // Kept loaded for the life of the process, which is what cudarc expects.
        std::mem::forget(library);
    }
    // SAFETY: as for driver_present.
    Ok(unsafe { cublas::sys::is_culib_present() })
}

/// One GPU opened for probing.
pub(crate) struct CudaGpu {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    kernels_fma: CudaFunction,
    kernels_copy: CudaFunction,
    pub(super) kernels_fma_chain: CudaFunction,
    pub(super) kernels_digest: CudaFunction,
    pub(super) kernels_mem_fill: CudaFunction,
    pub(super) kernels_mem_check: CudaFunction,
    pub(super) kernels_mem_invert: CudaFunction,
    /// Blocks that fill every SM at THREADS_PER_BLOCK.
    pub(super) full_grid: u32,
    pub(super) sms: u32,
    pub(super) cublas: bool,
    /// The model's name and the driver's version, for the canary's digest key.
    model: String,
    driver: String,
}

/// A failed CUDA, cuBLAS or driver call as the probe's error, naming the call.
pub(super) fn cuda_error<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> ProbeError + '_ {
    move |e| ProbeError::Cuda(format!("{what}: {e:?}"))
}

/// Formats a CUDA uuid the way NVML does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
pub(crate) fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

impl CudaGpu {
    /// Opens the CUDA device whose uuid is `uuid` (NVML's form). CUDA numbers devices its
    /// own way (fastest first, and CUDA_VISIBLE_DEVICES renumbers them), so the uuid is the
    /// only safe link to the GPU NVML calls `gpu="N"`.
    pub(crate) fn open(identity: &crate::model::DeviceIdentity, cublas: bool) -> Result<CudaGpu, ProbeError> {
        let uuid = identity.uuid.as_str();
        driver::result::init().map_err(cuda_error("cuInit"))?;
        let count = CudaContext::device_count().map_err(cuda_error("cuDeviceGetCount"))?;
        let mut ordinal = None;
        for i in 0..count {
            let dev = driver::result::device::get(i).map_err(cuda_error("cuDeviceGet"))?;
            let id = driver::result::device::get_uuid(dev).map_err(cuda_error("cuDeviceGetUuid"))?;
            let bytes: [u8; 16] = id.bytes.map(|b| b as u8);
            if format_uuid(&bytes).eq_ignore_ascii_case(uuid) {
                ordinal = Some(i as usize);
            }
        }
        let ordinal = ordinal.ok_or_else(|| {
            ProbeError::NoSuchGpu(format!(
                "CUDA does not see {uuid} (is CUDA_VISIBLE_DEVICES hiding it, or is it in MIG mode?)"
            ))
        })?;
        let ctx = CudaContext::new(ordinal).map_err(cuda_error("creating a CUDA context"))?;
        // SAFETY: the probe uses one stream and synchronises on events itself; cudarc's
        // per-buffer event tracking would only add work to every launch.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(cuda_error("cuStreamCreate"))?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(KERNELS_PTX))
            .map_err(cuda_error("loading the probe's PTX kernels"))?;
        let kernels_fma = module.load_function("fma_fp32").map_err(cuda_error("fma_fp32"))?;
        let kernels_copy = module.load_function("hbm_copy").map_err(cuda_error("hbm_copy"))?;
        let kernels_fma_chain = module.load_function("fma_chain").map_err(cuda_error("fma_chain"))?;
        let kernels_digest = module
            .load_function("digest_words")
            .map_err(cuda_error("digest_words"))?;
        let kernels_mem_fill = module.load_function("mem_fill").map_err(cuda_error("mem_fill"))?;
        let kernels_mem_check = module.load_function("mem_check").map_err(cuda_error("mem_check"))?;
        let kernels_mem_invert = module.load_function("mem_invert").map_err(cuda_error("mem_invert"))?;
        let sms = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda_error("SM count"))?;
        let threads_per_sm = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
            .map_err(cuda_error("threads per SM"))?;
        let full_grid = (sms.max(1) as u32) * (threads_per_sm.max(THREADS_PER_BLOCK as i32) as u32 / THREADS_PER_BLOCK);
        Ok(CudaGpu {
            ctx,
            stream,
            kernels_fma,
            kernels_copy,
            kernels_fma_chain,
            kernels_digest,
            kernels_mem_fill,
            kernels_mem_check,
            kernels_mem_invert,
            full_grid,
            sms: sms.max(1) as u32,
            cublas,
            model: identity.name.clone(),
            driver: identity.driver_version.clone(),
        })
    }

    /// Runs one test for `duration` of GPU time. A failure inside a test is reported as that
    /// test's `skipped` reason; the other tests still run. `load_started` is called once the
    /// set-up and warm-up are done, just before the first timed window.
    pub(crate) fn run(
        &self,
        test: Test,
        durations: &ProbeDurations,
        sizes: Sizes,
        load_started: &dyn Fn(),
    ) -> Measured {
        let duration = durations.of(test);
        let mut params = BTreeMap::new();
        let result = match test {
            Test::GemmBf16 => {
                params.insert("n".to_string(), sizes.gemm_n);
                if !self.cublas {
                    return Measured::skipped(
                        params,
                        "cuBLAS (libcublas.so.13 or .12) not found; install it or set probe.cublas_library".into(),
                    );
                }
                self.gemm_bf16(sizes.gemm_n, duration, load_started)
            }
            Test::FmaFp32 => {
                params.insert("iterations".to_string(), FMA_ITERATIONS as u64);
                self.fma_fp32(duration, load_started)
            }
            Test::HbmCopy => {
                params.insert("bytes".to_string(), sizes.hbm_copy_bytes);
                self.hbm_copy(sizes.hbm_copy_bytes, duration, load_started)
            }
            Test::PcieH2d | Test::PcieD2h => {
                params.insert("bytes".to_string(), sizes.pcie_bytes);
                self.pcie(test == Test::PcieH2d, sizes.pcie_bytes, duration, load_started)
            }
            Test::Sdc => return self.sdc(duration, &self.model, &self.driver, load_started),
            Test::Memtest => return self.memtest(duration, sizes, load_started),
        };
        Measured::of(params, result)
    }

    /// Runs `enqueue(k)` (k operations) in windows until `duration` of GPU time has passed,
    /// after one warm-up operation and one timed operation that sizes the windows.
    fn timed_windows(
        &self,
        duration: Duration,
        units_per_op: f64,
        load_started: &dyn Fn(),
        mut enqueue: impl FnMut(u32) -> Result<(), ProbeError>,
    ) -> Result<Vec<Window>, ProbeError> {
        // Blocking sync: the probe's CPU thread sleeps while the GPU works instead of spinning.
        let flags = Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC);
        let start = self.ctx.new_event(flags).map_err(cuda_error("cuEventCreate"))?;
        let end = self.ctx.new_event(flags).map_err(cuda_error("cuEventCreate"))?;
        let mut timed = |ops: u32| -> Result<f64, ProbeError> {
            start.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            enqueue(ops)?;
            end.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            end.synchronize().map_err(cuda_error("cuEventSynchronize"))?;
            let ms = start.elapsed_ms(&end).map_err(cuda_error("cuEventElapsedTime"))?;
            Ok(f64::from(ms) / 1000.0)
        };
        timed(1)?; // warm-up: JIT, cuBLAS heuristics, first-touch
        let ops = windows::ops_per_window(timed(1)?);
        load_started();
        let target = duration.as_secs_f64();
        let mut out = Vec::new();
        let mut elapsed = 0.0;
        while elapsed < target {
            let seconds = timed(ops)?;
            out.push(Window {
                start: elapsed,
                seconds,
                units: ops as f64 * units_per_op,
            });
            elapsed += seconds;
        }
        Ok(out)
    }

    fn gemm_bf16(&self, n: u64, duration: Duration, load_started: &dyn Fn()) -> Result<Vec<Window>, ProbeError> {
        let blas = CudaBlas::new(self.stream.clone()).map_err(cuda_error("cublasCreate"))?;
        let elements = (n * n) as usize;
        // Random values, not zeros: a tensor core multiplying zeros draws far less power, and
        // a power-capped board would look faster than it is under a real workload.
        let a = self
            .stream
            .clone_htod(&random_bf16(elements, 1))
            .map_err(cuda_error("copy A"))?;
        let b = self
            .stream
            .clone_htod(&random_bf16(elements, 2))
            .map_err(cuda_error("copy B"))?;
        let mut c = self
            .stream
            .alloc_zeros::<u16>(elements)
            .map_err(cuda_error("alloc C"))?;
        let (a_ptr, _a) = a.device_ptr(&self.stream);
        let (b_ptr, _b) = b.device_ptr(&self.stream);
        let (c_ptr, _c) = c.device_ptr_mut(&self.stream);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let dim = n as i32;
        let handle = *blas.handle();
        self.timed_windows(duration, 2.0 * (n as f64).powi(3), load_started, |k| {
            for _ in 0..k {
                // SAFETY: the three buffers hold n*n bf16 values each and outlive the call
                // (the windows synchronise before returning).
                unsafe {
                    cublas::result::gemm_ex(
                        handle,
                        cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                        cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                        dim,
                        dim,
                        dim,
                        (&alpha) as *const f32 as *const _,
                        a_ptr as *const _,
                        cublas::sys::cudaDataType_t::CUDA_R_16BF,
                        dim,
                        b_ptr as *const _,
                        cublas::sys::cudaDataType_t::CUDA_R_16BF,
                        dim,
                        (&beta) as *const f32 as *const _,
                        c_ptr as *mut _,
                        cublas::sys::cudaDataType_t::CUDA_R_16BF,
                        dim,
                        cublas::sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
                .map_err(cuda_error("cublasGemmEx"))?;
            }
            Ok(())
        })
    }

    fn fma_fp32(&self, duration: Duration, load_started: &dyn Fn()) -> Result<Vec<Window>, ProbeError> {
        let threads = self.full_grid * THREADS_PER_BLOCK;
        let mut out = self
            .stream
            .alloc_zeros::<f32>(threads as usize)
            .map_err(cuda_error("alloc"))?;
        let config = LaunchConfig {
            grid_dim: (self.full_grid, 1, 1),
            block_dim: (THREADS_PER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // a < 1 and a small b keep the chains finite and away from denormals.
        let (iterations, a, b) = (FMA_ITERATIONS, 0.999_f32, 0.001_f32);
        let flops = threads as f64 * iterations as f64 * FMA_FLOPS_PER_ITERATION;
        self.timed_windows(duration, flops, load_started, |k| {
            for _ in 0..k {
                let mut launch = self.stream.launch_builder(&self.kernels_fma);
                launch.arg(&mut out).arg(&iterations).arg(&a).arg(&b);
                // SAFETY: the arguments match fma_fp32(float*, int, float, float) and `out`
                // has one float per thread.
                unsafe { launch.launch(config) }.map_err(cuda_error("launching fma_fp32"))?;
            }
            Ok(())
        })
    }

    fn hbm_copy(&self, bytes: u64, duration: Duration, load_started: &dyn Fn()) -> Result<Vec<Window>, ProbeError> {
        let src = self
            .stream
            .alloc_zeros::<u8>(bytes as usize)
            .map_err(cuda_error("alloc"))?;
        let mut dst = self
            .stream
            .alloc_zeros::<u8>(bytes as usize)
            .map_err(cuda_error("alloc"))?;
        let words = bytes / 16;
        // One word per thread over the whole buffer (see kernels.cu for why).
        let config = LaunchConfig {
            grid_dim: (
                words.div_ceil(COPY_THREADS_PER_BLOCK as u64).min(i32::MAX as u64) as u32,
                1,
                1,
            ),
            block_dim: (COPY_THREADS_PER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // Every byte is read once and written once.
        self.timed_windows(duration, 2.0 * bytes as f64, load_started, |k| {
            for _ in 0..k {
                let mut launch = self.stream.launch_builder(&self.kernels_copy);
                launch.arg(&src).arg(&mut dst).arg(&words);
                // SAFETY: both buffers hold `words` 16-byte words (bytes is a multiple of 16 MiB).
                unsafe { launch.launch(config) }.map_err(cuda_error("launching hbm_copy"))?;
            }
            Ok(())
        })
    }

    fn pcie(
        &self,
        to_device: bool,
        bytes: u64,
        duration: Duration,
        load_started: &dyn Fn(),
    ) -> Result<Vec<Window>, ProbeError> {
        let host = PinnedBuffer::new(&self.ctx, bytes as usize)?;
        let device = self
            .stream
            .alloc_zeros::<u8>(bytes as usize)
            .map_err(cuda_error("alloc"))?;
        let (device_ptr, _guard) = device.device_ptr(&self.stream);
        let stream = self.stream.cu_stream();
        self.timed_windows(duration, bytes as f64, load_started, |k| {
            for _ in 0..k {
                // SAFETY: both sides hold `bytes` bytes; the host side is pinned, so the copy
                // is a DMA the stream orders like any other work.
                let result = unsafe {
                    if to_device {
                        driver::sys::cuMemcpyHtoDAsync_v2(device_ptr, host.ptr, bytes as usize, stream).result()
                    } else {
                        driver::sys::cuMemcpyDtoHAsync_v2(host.ptr, device_ptr, bytes as usize, stream).result()
                    }
                };
                result.map_err(cuda_error("cuMemcpyAsync"))?;
            }
            Ok(())
        })
    }
}

/// Page-locked host memory, freed on drop.
struct PinnedBuffer {
    ptr: *mut std::ffi::c_void,
}

impl PinnedBuffer {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<PinnedBuffer, ProbeError> {
        ctx.bind_to_thread().map_err(cuda_error("binding the context"))?;
        // SAFETY: a plain cuMemHostAlloc; the pointer is freed exactly once, in drop.
        let ptr = unsafe { driver::result::malloc_host(bytes, 0) }
            .map_err(|e| ProbeError::Cuda(format!("cuMemHostAlloc of {bytes} bytes of pinned memory: {e:?}")))?;
        // SAFETY: the allocation is `bytes` long; touching it now keeps page faults out of
        // the measurement.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0x5a, bytes) };
        Ok(PinnedBuffer { ptr })
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in new(), freed once.
        let _ = unsafe { driver::result::free_host(self.ptr) };
    }
}

/// Normally distributed-looking bf16 values in about [-2, 2] (sum of two uniforms), from the
/// canary's xorshift generator (probe::sdc): cheap to make and different from zero.
fn random_bf16(count: usize, seed: u64) -> Vec<u16> {
    // One mebi-value block, repeated: as random to a tensor core as a full stream, and the
    // probe does not spend a second of its 20 making numbers.
    let values = super::sdc::fixed_bf16(count.min(1 << 20), seed);
    values.iter().copied().cycle().take(count).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_formatted_like_nvml() {
        let bytes = [
            0x5e, 0x0b, 0x3a, 0x9c, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc,
        ];
        assert_eq!(format_uuid(&bytes), "GPU-5e0b3a9c-1122-3344-5566-778899aabbcc");
    }

    #[test]
    fn sizes_fit_the_cap() {
        let default = Sizes::for_cap(4096);
        assert_eq!(default.gemm_n, 8192);
        assert_eq!(default.hbm_copy_bytes, 512 * MIB);
        assert_eq!(default.pcie_bytes, 256 * MIB);
        let small = Sizes::for_cap(256);
        assert_eq!(small.gemm_n, 4096);
        // Two copy buffers within the cap.
        assert!(2 * small.hbm_copy_bytes <= 256 * MIB);
        assert_eq!(small.pcie_bytes, 64 * MIB);
    }

    #[test]
    fn random_values_are_not_zero_and_not_all_equal() {
        let v = random_bf16(1000, 1);
        let zeros = v.iter().filter(|b| (**b & 0x7fff) == 0).count();
        assert!(zeros < 10, "{zeros} zeros");
        let distinct: std::collections::BTreeSet<_> = v.iter().collect();
        assert!(distinct.len() > 100);
        // All finite and within [-2, 2].
        assert!(v.iter().all(|b| f32::from_bits((*b as u32) << 16).abs() <= 2.0));
    }
}
