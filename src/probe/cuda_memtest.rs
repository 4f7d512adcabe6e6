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

/// The region under test and the buffers the kernels report into: the count of wrong words
/// and the first KEPT_BAD of them (index, expected, got).
struct Region {
    words: u64,
    data: CudaSlice<u32>,
    errors: CudaSlice<u64>,
    bad: CudaSlice<u64>,
    /// The region's device address, for the report.
    base: u64,
}

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
        let mut region = self.memtest_region(bytes)?;
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
                .memset_zeros(&mut region.errors)
                .map_err(cuda_error("cuMemsetD8Async"))?;
            start.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            self.run_pass(&mut region, pass)?;
            end.record(&self.stream).map_err(cuda_error("cuEventRecord"))?;
            let found = self.read_back(&region.errors)?.first().copied().unwrap_or(0);
            let seconds = f64::from(start.elapsed_ms(&end).map_err(cuda_error("cuEventElapsedTime"))?) / 1000.0;
            windows.push(Window {
                start: elapsed,
                seconds,
                units: (pass.traversals() * bytes) as f64,
            });
            elapsed += seconds;
            if found > 0 {
                self.keep_bad(&mut region, pass.name(), found, &mut kept)?;
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

    /// The region of `bytes` and the buffers the kernels report into.
    fn memtest_region(&self, bytes: u64) -> Result<Region, ProbeError> {
        let words = bytes / 4;
        let data = self
            .stream
            .alloc_zeros::<u32>(words as usize)
            .map_err(cuda_error("alloc the memtest region"))?;
        let base = {
            let (ptr, _guard) = data.device_ptr(&self.stream);
            ptr
        };
        Ok(Region {
            words,
            data,
            errors: self.stream.alloc_zeros::<u64>(1).map_err(cuda_error("alloc"))?,
            bad: self
                .stream
                .alloc_zeros::<u64>(3 * memtest::KEPT_BAD)
                .map_err(cuda_error("alloc"))?,
            base,
        })
    }

    /// One pass's kernels, enqueued.
    fn run_pass(&self, r: &mut Region, pass: &Pass) -> Result<(), ProbeError> {
        match pass {
            Pass::FillCheck { fill, .. } => {
                self.mem_fill(&mut r.data, r.words, *fill)?;
                self.mem_check(&r.data, r.words, *fill, &mut r.errors, &mut r.bad)
            }
            Pass::MovingInversions { pattern, .. } => {
                self.mem_fill(&mut r.data, r.words, Fill::Pattern(*pattern))?;
                self.mem_invert(&mut r.data, r.words, *pattern, false, &mut r.errors, &mut r.bad)?;
                self.mem_invert(&mut r.data, r.words, !*pattern, true, &mut r.errors, &mut r.bad)?;
                self.mem_check(&r.data, r.words, Fill::Pattern(*pattern), &mut r.errors, &mut r.bad)
            }
        }
    }

    /// The words a pass found wrong, into `kept` (at most KEPT_BAD in all), and the kernels'
    /// list emptied for the next pass.
    fn keep_bad(&self, r: &mut Region, pass: &str, found: u64, kept: &mut Vec<BadWord>) -> Result<(), ProbeError> {
        let slots = self.read_back(&r.bad)?;
        for slot in slots.chunks(3).take((found as usize).min(memtest::KEPT_BAD)) {
            if kept.len() < memtest::KEPT_BAD {
                kept.push(BadWord {
                    pass: pass.to_string(),
                    offset: slot[0] * 4,
                    address: format!("{:#x}", r.base + slot[0] * 4),
                    expected: format!("{:08x}", slot[1]),
                    got: format!("{:08x}", slot[2]),
                });
            }
        }
        self.stream
            .memset_zeros(&mut r.bad)
            .map_err(cuda_error("cuMemsetD8Async"))
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
