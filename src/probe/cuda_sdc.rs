//! The correctness canary's GPU side (`sdc`): the exact GEMMs in bf16, fp16 and fp32, the
//! FMA chains, and the agreement GEMM run again and again with its digest taken on the GPU.
//! cuBLAS is pinned to what its reproducibility guarantee names (docs/probe.md, "Silent data
//! corruption"): one stream, a workspace of our own of a fixed size, atomics not allowed, the
//! default math mode and algorithm; then the same inputs give the same bits on every GPU of
//! the same architecture and SM count, with the same cuBLAS.

use super::ProbeError;
use super::cuda::{CudaGpu, Measured, cuda_error};
use super::sdc::{self, SdcSizes};
use super::windows::Window;
use crate::model::probe::{ExactCheck, SdcKey, SdcOutcome};
use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use std::collections::BTreeMap;
use std::time::Duration;

/// cuBLAS's workspace, set by us so it is the same on every run (its size steers which
/// kernel the heuristics pick).
const WORKSPACE_BYTES: usize = 32 << 20;

/// A cuBLAS handle pinned for reproducible results, with the workspace it uses.
struct PinnedBlas {
    blas: CudaBlas,
    _workspace: CudaSlice<u8>,
    version: i32,
}

/// cuBLAS's data types the canary uses (cudaDataType_t).
#[derive(Clone, Copy)]
enum Element {
    Bf16,
    Fp16,
    Fp32,
}

impl Element {
    fn cuda(self) -> cublas::sys::cudaDataType_t {
        match self {
            Element::Bf16 => cublas::sys::cudaDataType_t::CUDA_R_16BF,
            Element::Fp16 => cublas::sys::cudaDataType_t::CUDA_R_16F,
            Element::Fp32 => cublas::sys::cudaDataType_t::CUDA_R_32F,
        }
    }

    fn check_name(self) -> &'static str {
        match self {
            Element::Bf16 => "gemm_bf16_exact",
            Element::Fp16 => "gemm_fp16_exact",
            Element::Fp32 => "gemm_fp32_exact",
        }
    }
}

/// Device pointers of one GEMM: C (m x n, fp32) = A (m x k) B (k x n), column-major.
struct Gemm {
    m: i32,
    n: i32,
    k: i32,
    a: u64,
    b: u64,
    c: u64,
    inputs: Element,
}

impl CudaGpu {
    /// The canary: `budget` bounds the agreement GEMM's repeats. `model` and `driver` name
    /// the GPU for the digest's key.
    pub(super) fn sdc(&self, budget: Duration, model: &str, driver: &str, load_started: &dyn Fn()) -> Measured {
        let sizes = SdcSizes::for_sms(self.sms);
        let mut params = BTreeMap::new();
        params.insert("exact_side".to_string(), sizes.exact_side);
        params.insert("side".to_string(), sizes.agreement_side);
        if !self.cublas {
            return Measured::skipped(
                params,
                "cuBLAS (libcublas.so.13 or .12) not found; install it or set probe.cublas_library".into(),
            );
        }
        let mut outcome = None;
        let result = self
            .sdc_run(sizes, budget, model, driver, load_started)
            .map(|(windows, found)| {
                outcome = Some(found);
                windows
            });
        Measured {
            sdc: outcome,
            ..Measured::of(params, result)
        }
    }

    fn sdc_run(
        &self,
        sizes: SdcSizes,
        budget: Duration,
        model: &str,
        driver: &str,
        load_started: &dyn Fn(),
    ) -> Result<(Vec<Window>, SdcOutcome), ProbeError> {
        let pinned = self.pinned_blas()?;
        let mut exact = Vec::new();
        for element in [Element::Bf16, Element::Fp16, Element::Fp32] {
            exact.push(self.exact_gemm(&pinned.blas, element, sizes.exact_side)?);
        }
        exact.push(self.fma_chains()?);
        let key = SdcKey {
            model: model.to_string(),
            sms: self.sms,
            driver: driver.to_string(),
            cublas: pinned.version.to_string(),
            canary: sdc::CANARY_VERSION,
        };
        let (windows, runs) = self.agreement(&pinned.blas, sizes.agreement_side, budget, load_started)?;
        let first = runs.first().cloned().unwrap_or_default();
        let outcome = SdcOutcome {
            exact,
            side: sizes.agreement_side,
            key,
            digest: sdc::hex(sdc::digest_of(&first)),
            parts: first.iter().map(|p| sdc::hex(*p)).collect(),
            repeats: runs.len() as u32,
            repeats_differing: runs.iter().filter(|r| **r != first).count() as u32,
        };
        Ok((windows, outcome))
    }

    /// A cuBLAS handle on the probe's one stream, with our workspace, no atomics and the
    /// default math mode.
    fn pinned_blas(&self) -> Result<PinnedBlas, ProbeError> {
        let blas = CudaBlas::new(self.stream.clone()).map_err(cuda_error("cublasCreate"))?;
        let mut workspace = self
            .stream
            .alloc_zeros::<u8>(WORKSPACE_BYTES)
            .map_err(cuda_error("alloc the cuBLAS workspace"))?;
        let handle = *blas.handle();
        let mut version = 0;
        {
            let (ptr, _guard) = workspace.device_ptr_mut(&self.stream);
            // SAFETY: a live handle; the workspace outlives it (both in PinnedBlas, the handle
            // dropped first as the field declared first).
            unsafe {
                cublas::sys::cublasSetWorkspace_v2(handle, ptr as *mut _, WORKSPACE_BYTES)
                    .result()
                    .map_err(cuda_error("cublasSetWorkspace"))?;
                cublas::sys::cublasSetAtomicsMode(handle, cublas::sys::cublasAtomicsMode_t::CUBLAS_ATOMICS_NOT_ALLOWED)
                    .result()
                    .map_err(cuda_error("cublasSetAtomicsMode"))?;
                cublas::sys::cublasSetMathMode(handle, cublas::sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
                    .result()
                    .map_err(cuda_error("cublasSetMathMode"))?;
                cublas::sys::cublasGetVersion_v2(handle, &mut version)
                    .result()
                    .map_err(cuda_error("cublasGetVersion"))?;
            }
        }
        Ok(PinnedBlas {
            blas,
            _workspace: workspace,
            version,
        })
    }

    fn gemm(&self, blas: &CudaBlas, g: &Gemm) -> Result<(), ProbeError> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the pointers hold m x k, k x n and m x n elements of their types (the
        // callers allocate them so) and outlive the call, which the stream orders.
        unsafe {
            cublas::result::gemm_ex(
                *blas.handle(),
                cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                g.m,
                g.n,
                g.k,
                (&alpha) as *const f32 as *const _,
                g.a as *const _,
                g.inputs.cuda(),
                g.m,
                g.b as *const _,
                g.inputs.cuda(),
                g.k,
                (&beta) as *const f32 as *const _,
                g.c as *mut _,
                cublas::sys::cudaDataType_t::CUDA_R_32F,
                g.m,
                cublas::sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(cuda_error("cublasGemmEx"))
    }

    /// The exact GEMM with `element` inputs, every element of its result checked.
    fn exact_gemm(&self, blas: &CudaBlas, element: Element, side: u64) -> Result<ExactCheck, ProbeError> {
        let (a, b) = sdc::exact_inputs(side);
        let upload = |values: &[f32]| -> Result<CudaSlice<u8>, ProbeError> {
            let bytes: Vec<u8> = match element {
                Element::Bf16 => values.iter().flat_map(|v| sdc::to_bf16(*v).to_le_bytes()).collect(),
                Element::Fp16 => values.iter().flat_map(|v| sdc::to_f16(*v).to_le_bytes()).collect(),
                Element::Fp32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            };
            self.stream
                .clone_htod(&bytes)
                .map_err(cuda_error("copy the exact GEMM's inputs"))
        };
        let (a, b) = (upload(&a)?, upload(&b)?);
        let mut c = self
            .stream
            .alloc_zeros::<f32>((side * side) as usize)
            .map_err(cuda_error("alloc the exact GEMM's result"))?;
        {
            let (a_ptr, _a) = a.device_ptr(&self.stream);
            let (b_ptr, _b) = b.device_ptr(&self.stream);
            let (c_ptr, _c) = c.device_ptr_mut(&self.stream);
            let g = Gemm {
                m: side as i32,
                n: side as i32,
                k: sdc::EXACT_DEPTH as i32,
                a: a_ptr,
                b: b_ptr,
                c: c_ptr,
                inputs: element,
            };
            self.gemm(blas, &g)?;
        }
        let got = self.read_back(&c)?;
        Ok(sdc::check_exact(element.check_name(), side, &got))
    }

    /// Every thread of a full grid runs its FMA chain; each result checked.
    fn fma_chains(&self) -> Result<ExactCheck, ProbeError> {
        let threads = self.full_grid * super::cuda::THREADS_PER_BLOCK;
        let mut out = self
            .stream
            .alloc_zeros::<f32>(threads as usize)
            .map_err(cuda_error("alloc"))?;
        let config = LaunchConfig {
            grid_dim: (self.full_grid, 1, 1),
            block_dim: (super::cuda::THREADS_PER_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let (steps, a, b) = (sdc::FMA_STEPS, sdc::FMA_A, sdc::FMA_B);
        let mut launch = self.stream.launch_builder(&self.kernels_fma_chain);
        launch.arg(&mut out).arg(&steps).arg(&a).arg(&b);
        // SAFETY: the arguments match fma_chain(float*, int, float, float); `out` has one
        // float per thread.
        unsafe { launch.launch(config) }.map_err(cuda_error("launching fma_chain"))?;
        let got = self.read_back(&out)?;
        Ok(sdc::check_fma_chains(&got))
    }

    /// The agreement GEMM, run until `budget` has passed (at most MAX_REPEATS times), each
    /// run's digest parts read back: the windows for its rate, and every run's parts.
    fn agreement(
        &self,
        blas: &CudaBlas,
        side: u64,
        budget: Duration,
        load_started: &dyn Fn(),
    ) -> Result<(Vec<Window>, Vec<Vec<u64>>), ProbeError> {
        let (a, b) = sdc::agreement_inputs(side);
        let a = self.stream.clone_htod(&a).map_err(cuda_error("copy A"))?;
        let b = self.stream.clone_htod(&b).map_err(cuda_error("copy B"))?;
        let words = side * side;
        let mut c = self
            .stream
            .alloc_zeros::<u32>(words as usize)
            .map_err(cuda_error("alloc the agreement GEMM's result"))?;
        let mut parts = self
            .stream
            .alloc_zeros::<u64>(sdc::DIGEST_PARTS as usize)
            .map_err(cuda_error("alloc the digest"))?;
        let span = u64::from(sdc::DIGEST_THREADS) * 16;
        let digest_config = LaunchConfig {
            grid_dim: ((words / span).clamp(1, u64::from(self.full_grid)) as u32, 1, 1),
            block_dim: (sdc::DIGEST_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let per_part = words / sdc::DIGEST_PARTS;
        let flags = Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC);
        let start = self.ctx.new_event(flags).map_err(cuda_error("cuEventCreate"))?;
        let end = self.ctx.new_event(flags).map_err(cuda_error("cuEventCreate"))?;
        let flops = 2.0 * (side as f64).powi(3);
        let mut windows = Vec::new();
        let mut runs = Vec::new();
        let mut elapsed = 0.0;
        load_started();
        while runs.len() < sdc::MAX_REPEATS as usize && (runs.is_empty() || elapsed < budget.as_secs_f64()) {
            self.stream
                .memset_zeros(&mut parts)
                .map_err(cuda_error("cuMemsetD8Async"))?;
            start.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            {
                let (a_ptr, _a) = a.device_ptr(&self.stream);
                let (b_ptr, _b) = b.device_ptr(&self.stream);
                let (c_ptr, _c) = c.device_ptr_mut(&self.stream);
                let g = Gemm {
                    m: side as i32,
                    n: side as i32,
                    k: side as i32,
                    a: a_ptr,
                    b: b_ptr,
                    c: c_ptr,
                    inputs: Element::Bf16,
                };
                self.gemm(blas, &g)?;
            }
            end.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            let mut launch = self.stream.launch_builder(&self.kernels_digest);
            launch.arg(&c).arg(&words).arg(&per_part).arg(&mut parts);
            // SAFETY: the arguments match digest_words(const unsigned*, u64, u64, u64*); `c`
            // holds `words` words and `parts` DIGEST_PARTS sums; per_part is a whole number
            // of spans (SdcSizes).
            unsafe { launch.launch(digest_config) }.map_err(cuda_error("launching digest_words"))?;
            let run = self.read_back(&parts)?;
            let seconds = f64::from(start.elapsed_ms(&end).map_err(cuda_error("cuEventElapsedTime"))?) / 1000.0;
            windows.push(Window {
                start: elapsed,
                seconds,
                units: flops,
            });
            elapsed += seconds;
            runs.push(run);
        }
        Ok((windows, runs))
    }

    /// A device buffer's contents, once the stream has finished with it.
    pub(super) fn read_back<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        buffer: &CudaSlice<T>,
    ) -> Result<Vec<T>, ProbeError> {
        let mut host = vec![T::default(); buffer.len()];
        self.stream
            .memcpy_dtoh(buffer, &mut host)
            .map_err(cuda_error("cuMemcpyDtoH"))?;
        self.stream.synchronize().map_err(cuda_error("cuStreamSynchronize"))?;
        Ok(host)
    }
}
