//! The HBM pattern test's GPU side (`memtest`): one region of a share of the free memory, the
//! passes of probe::memtest run over it until the time budget is spent, every word checked on
//! the GPU, the words that read back wrong counted and the first ones kept.

use super::ProbeError;
use super::cuda::{CudaGpu, Measured, Sizes, cuda_error};
use super::memtest::{self, Fill, Pass};
use super::windows::Window;
use crate::model::probe::{BadWord, MemtestOutcome, MemtestPass};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use std::collections::BTreeMap;
use std::time::Duration;

/// The region's threads: 256 per block, blocks to fill every SM a few times over.
const THREADS: u32 = 256;

impl CudaGpu {
    /// The pattern test, stopping once `budget` of GPU time is spent.
    pub(super) fn memtest(&self, budget: Duration, sizes: Sizes, load_started: &dyn Fn()) -> Measured {
        let mut params = BTreeMap::new();
        let free = match self.ctx.mem_get_info() {
            Ok((free, _)) => free as u64,
            Err(e) => {
                return Measured {
                    failed: true,
                    ..Measured::skipped(params, format!("failed: cuMemGetInfo: {e:?}"))
                };
            }
        };
        let bytes = memtest::region_bytes(free, sizes.memtest_share, sizes.memtest_max_bytes);
        params.insert("bytes".to_string(), bytes);
        if bytes == 0 {
            return Measured::skipped(params, format!("only {} MiB of memory is free", free >> 20));
        }
        let mut outcome = None;
        let result = self.memtest_run(bytes, budget, load_started).map(|(windows, found)| {
            outcome = Some(found);
            windows
        });
        Measured {
            memtest: outcome,
            ..Measured::of(params, result)
        }
    }

    fn memtest_run(
        &self,
        bytes: u64,
        budget: Duration,
        load_started: &dyn Fn(),
    ) -> Result<(Vec<Window>, MemtestOutcome), ProbeError> {
        let words = bytes / 4;
        let mut region = self
            .stream
            .alloc_zeros::<u32>(words as usize)
            .map_err(cuda_error("alloc the memtest region"))?;
        let mut errors = self.stream.alloc_zeros::<u64>(1).map_err(cuda_error("alloc"))?;
        let mut bad = self
            .stream
            .alloc_zeros::<u64>(3 * memtest::KEPT_BAD)
            .map_err(cuda_error("alloc"))?;
        let base = {
            let (ptr, _guard) = region.device_ptr(&self.stream);
            ptr
        };
        let flags = Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC);
        let start = self.ctx.new_event(flags).map_err(cuda_error("cuEventCreate"))?;
        let end = self.ctx.new_event(flags).map_err(cuda_error("cuEventCreate"))?;
        let plan = memtest::plan();
        let mut passes = Vec::new();
        let mut kept = Vec::new();
        let mut windows = Vec::new();
        let mut elapsed = 0.0;
        load_started();
        for pass in &plan {
            if elapsed >= budget.as_secs_f64() {
                break;
            }
            self.stream
                .memset_zeros(&mut errors)
                .map_err(cuda_error("cuMemsetD8Async"))?;
            start.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            match pass {
                Pass::FillCheck { fill, .. } => {
                    self.mem_fill(&mut region, words, *fill)?;
                    self.mem_check(&region, words, *fill, &mut errors, &mut bad)?;
                }
                Pass::MovingInversions { pattern, .. } => {
                    self.mem_fill(&mut region, words, Fill::Pattern(*pattern))?;
                    self.mem_invert(&mut region, words, *pattern, false, &mut errors, &mut bad)?;
                    self.mem_invert(&mut region, words, !*pattern, true, &mut errors, &mut bad)?;
                    self.mem_check(&region, words, Fill::Pattern(*pattern), &mut errors, &mut bad)?;
                }
            }
            end.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            let found = self.read_back(&errors)?.first().copied().unwrap_or(0);
            let seconds = f64::from(start.elapsed_ms(&end).map_err(cuda_error("cuEventElapsedTime"))?) / 1000.0;
            windows.push(Window {
                start: elapsed,
                seconds,
                units: (pass.traversals() * bytes) as f64,
            });
            elapsed += seconds;
            if found > 0 {
                let words_kept = self.read_back(&bad)?;
                for slot in words_kept.chunks(3).take((found as usize).min(memtest::KEPT_BAD)) {
                    if kept.len() < memtest::KEPT_BAD {
                        kept.push(BadWord {
                            pass: pass.name().to_string(),
                            offset: slot[0] * 4,
                            address: format!("{:#x}", base + slot[0] * 4),
                            expected: format!("{:08x}", slot[1]),
                            got: format!("{:08x}", slot[2]),
                        });
                    }
                }
                self.stream
                    .memset_zeros(&mut bad)
                    .map_err(cuda_error("cuMemsetD8Async"))?;
            }
            passes.push(MemtestPass {
                name: pass.name().to_string(),
                errors: found,
            });
        }
        let outcome = MemtestOutcome {
            bytes,
            complete: passes.len() == plan.len(),
            seconds: elapsed,
            errors: passes.iter().map(|p| p.errors).sum(),
            passes,
            bad: kept,
        };
        Ok((windows, outcome))
    }

    fn sweep_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.full_grid.max(1), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    fn mem_fill(&self, region: &mut CudaSlice<u32>, words: u64, fill: Fill) -> Result<(), ProbeError> {
        let (pattern, mode) = fill.args();
        let mut launch = self.stream.launch_builder(&self.kernels_mem_fill);
        launch.arg(region).arg(&words).arg(&pattern).arg(&mode);
        // SAFETY: the arguments match mem_fill(unsigned*, u64, unsigned, int); the region
        // holds `words` words.
        unsafe { launch.launch(self.sweep_config()) }
            .map(|_| ())
            .map_err(cuda_error("launching mem_fill"))
    }

    fn mem_check(
        &self,
        region: &CudaSlice<u32>,
        words: u64,
        fill: Fill,
        errors: &mut CudaSlice<u64>,
        bad: &mut CudaSlice<u64>,
    ) -> Result<(), ProbeError> {
        let (pattern, mode) = fill.args();
        let mut launch = self.stream.launch_builder(&self.kernels_mem_check);
        launch
            .arg(region)
            .arg(&words)
            .arg(&pattern)
            .arg(&mode)
            .arg(errors)
            .arg(bad);
        // SAFETY: the arguments match mem_check(const unsigned*, u64, unsigned, int, u64*,
        // u64*); the region holds `words` words, `errors` one and `bad` 3 x KEPT_BAD.
        unsafe { launch.launch(self.sweep_config()) }
            .map(|_| ())
            .map_err(cuda_error("launching mem_check"))
    }

    fn mem_invert(
        &self,
        region: &mut CudaSlice<u32>,
        words: u64,
        expect: u32,
        descending: bool,
        errors: &mut CudaSlice<u64>,
        bad: &mut CudaSlice<u64>,
    ) -> Result<(), ProbeError> {
        let descending = i32::from(descending);
        let mut launch = self.stream.launch_builder(&self.kernels_mem_invert);
        launch
            .arg(region)
            .arg(&words)
            .arg(&expect)
            .arg(&descending)
            .arg(errors)
            .arg(bad);
        // SAFETY: the arguments match mem_invert(unsigned*, u64, unsigned, int, u64*, u64*);
        // the buffers' sizes as for mem_check.
        unsafe { launch.launch(self.sweep_config()) }
            .map(|_| ())
            .map_err(cuda_error("launching mem_invert"))
    }
}
