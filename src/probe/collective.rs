//! The GPUs together (docs/probe.md, "The GPUs together"): an all-reduce across every GPU
//! given, through NCCL in one process (`ncclCommInitAll`), each GPU on its own stream, timed
//! with CUDA events on each. The bus bandwidth is what NCCL's own tests call busbw: the data
//! over the time, times 2(n-1)/n, the share of it each link carries in a ring; NCCL picks the
//! algorithm itself (NVLink SHARP where the NVSwitch fabric offers it).
//!
//! Before it is timed, a smaller all-reduce of known values is checked element by element on
//! the host: rank r sends r + 1, so every GPU must receive n(n + 1)/2, exact in fp32. A link
//! that corrupts what it carries is caught there, not only one that is slow.

use super::nccl::{self, Comm, Nccl};
use super::{ProbeError, windows};
use crate::model::probe::CollectiveOutcome;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use std::sync::Arc;
use std::time::Duration;

/// Each GPU's buffer: 256 MiB of fp32, large enough for the links' steady rate (NCCL's tests
/// reach their plateau from about 128 MiB).
pub(crate) const BYTES: u64 = 256 << 20;

/// The most timed all-reduces of one run, whatever the clock says: 2 s at 1 ms each.
const MAX_OPERATIONS: u32 = 2000;

/// All-reduces back to back in one timed window (about 30 ms of 256 MiB on an H200 pair, as
/// long as the other tests' windows). One at a time, each window also timed the host's launch
/// across the GPUs (a rank's kernel waits for its peers'): on a real H200 pair that read
/// 250 GB/s where PyTorch's back-to-back all-reduces read 299, and 8 at a time 285.
const PER_WINDOW: u32 = 32;

/// The checked all-reduce's elements per GPU: 4 MiB, a few milliseconds to copy back.
const CHECK_COUNT: usize = 1 << 20;

struct Buffers {
    send: CudaSlice<f32>,
    recv: CudaSlice<f32>,
}

struct Rank {
    stream: Arc<CudaStream>,
    timed: Buffers,
    check: Buffers,
}

fn cuda<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> ProbeError + '_ {
    move |e| ProbeError::Cuda(format!("{what}: {e:?}"))
}

/// All-reduces across the CUDA devices `ordinals` (at least two) for about `duration`.
pub(crate) fn all_reduce(nccl: &Nccl, ordinals: &[usize], duration: Duration) -> Result<CollectiveOutcome, ProbeError> {
    let count = (BYTES / 4) as usize;
    let mut ranks = Vec::new();
    for (rank, &ordinal) in ordinals.iter().enumerate() {
        let ctx = CudaContext::new(ordinal).map_err(cuda("creating a CUDA context"))?;
        let stream = ctx.new_stream().map_err(cuda("cuStreamCreate"))?;
        let timed = Buffers {
            send: stream.alloc_zeros::<f32>(count).map_err(cuda("alloc"))?,
            recv: stream.alloc_zeros::<f32>(count).map_err(cuda("alloc"))?,
        };
        let check = Buffers {
            send: stream
                .clone_htod(&vec![(rank + 1) as f32; CHECK_COUNT])
                .map_err(cuda("copy the checked all-reduce's input"))?,
            recv: stream.alloc_zeros::<f32>(CHECK_COUNT).map_err(cuda("alloc"))?,
        };
        ranks.push(Rank { stream, timed, check });
    }
    let devices: Vec<i32> = ordinals.iter().map(|o| *o as i32).collect();
    let mut comms: Vec<Comm> = vec![std::ptr::null_mut(); devices.len()];
    // SAFETY: one communicator slot per device, as ncclCommInitAll asks.
    let init = unsafe { (nccl.comm_init_all)(comms.as_mut_ptr(), devices.len() as i32, devices.as_ptr()) };
    nccl.check("ncclCommInitAll", init)?;
    let result = checked(nccl, &comms, &mut ranks, ordinals)
        .and_then(|wrong| Ok((wrong, timed(nccl, &comms, &mut ranks, count, duration)?)));
    for comm in comms {
        // SAFETY: made by ncclCommInitAll above, destroyed once.
        let _ = unsafe { (nccl.comm_destroy)(comm) };
    }
    let (wrong_sum, (windows, seconds)) = result?;
    let n = ordinals.len() as f64;
    let rates = windows::summarize(&windows);
    let algbw = BYTES as f64 / seconds;
    Ok(CollectiveOutcome {
        gpus: ordinals.len() as u32,
        bytes: BYTES,
        nccl: nccl::version_text(nccl.version()?),
        bus_bandwidth: rates.map_or(algbw * 2.0 * (n - 1.0) / n, |r| r.sustained),
        burst: rates.map(|r| r.burst),
        wrong_sum,
    })
}

/// The all-reduce of known values, checked on the host: where a GPU's sum came out wrong.
fn checked(nccl: &Nccl, comms: &[Comm], ranks: &mut [Rank], ordinals: &[usize]) -> Result<Option<String>, ProbeError> {
    enqueue(nccl, comms, ranks, CHECK_COUNT, |r| &mut r.check)?;
    let n = ranks.len();
    let expected = (n * (n + 1) / 2) as f32;
    for (rank, ordinal) in ranks.iter().zip(ordinals) {
        let got = rank
            .stream
            .clone_dtoh(&rank.check.recv)
            .map_err(cuda("copy the checked all-reduce's result back"))?;
        let wrong: Vec<(usize, f32)> = got
            .iter()
            .enumerate()
            .filter(|(_, v)| v.to_bits() != expected.to_bits())
            .map(|(i, v)| (i, *v))
            .collect();
        if let Some((first, value)) = wrong.first() {
            return Ok(Some(format!(
                "CUDA device {ordinal} received {} wrong sum(s) of {CHECK_COUNT}: the first at element {first}, {value} \
                 where {expected} was sent",
                wrong.len()
            )));
        }
    }
    Ok(None)
}

/// One grouped all-reduce on every rank, of the buffers `pick` chooses.
fn enqueue(
    nccl: &Nccl,
    comms: &[Comm],
    ranks: &mut [Rank],
    count: usize,
    pick: fn(&mut Rank) -> &mut Buffers,
) -> Result<(), ProbeError> {
    // SAFETY: no arguments; paired with the group end below.
    nccl.check("ncclGroupStart", unsafe { (nccl.group_start)() })?;
    for (comm, rank) in comms.iter().zip(ranks.iter_mut()) {
        let stream = rank.stream.clone();
        let buffers = pick(rank);
        let (send, _s) = buffers.send.device_ptr(&stream);
        let (recv, _r) = buffers.recv.device_ptr_mut(&stream);
        // SAFETY: both buffers hold `count` floats on this rank's device, its own stream.
        let result = unsafe {
            (nccl.all_reduce)(
                send as *const _,
                recv as *mut _,
                count,
                nccl::NCCL_FLOAT32,
                nccl::NCCL_SUM,
                *comm,
                stream.cu_stream() as *mut _,
            )
        };
        nccl.check("ncclAllReduce", result)?;
    }
    // SAFETY: closes the group opened above.
    nccl.check("ncclGroupEnd", unsafe { (nccl.group_end)() })
}

/// A warm-up, then windows of [`PER_WINDOW`] all-reduces until `duration` of GPU time: each
/// window's bus bandwidth (the slowest rank's time), and the mean time of one all-reduce.
fn timed(
    nccl: &Nccl,
    comms: &[Comm],
    ranks: &mut [Rank],
    count: usize,
    duration: Duration,
) -> Result<(Vec<windows::Window>, f64), ProbeError> {
    let n = ranks.len() as f64;
    let flags = Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC);
    enqueue(nccl, comms, ranks, count, |r| &mut r.timed)?;
    let mut events = Vec::new();
    for rank in ranks.iter() {
        rank.stream.synchronize().map_err(cuda("cuStreamSynchronize"))?;
        let ctx = rank.stream.context();
        events.push((
            ctx.new_event(flags).map_err(cuda("cuEventCreate"))?,
            ctx.new_event(flags).map_err(cuda("cuEventCreate"))?,
        ));
    }
    let mut out = Vec::new();
    let (mut elapsed, mut operations) = (0.0, 0u32);
    // A clock that does not move (an event timer that reads 0) must not hold the GPUs for good.
    while elapsed < duration.as_secs_f64() && operations < MAX_OPERATIONS {
        for (rank, (start, _)) in ranks.iter().zip(&events) {
            start.record(&rank.stream).map_err(cuda("cuEventRecord"))?;
        }
        for _ in 0..PER_WINDOW {
            enqueue(nccl, comms, ranks, count, |r| &mut r.timed)?;
        }
        let mut seconds: f64 = 0.0;
        for (rank, (start, end)) in ranks.iter().zip(&events) {
            end.record(&rank.stream).map_err(cuda("cuEventRecord"))?;
            end.synchronize().map_err(cuda("cuEventSynchronize"))?;
            let ms = start.elapsed_ms(end).map_err(cuda("cuEventElapsedTime"))?;
            seconds = seconds.max(f64::from(ms) / 1000.0);
        }
        // Bus bytes: what each link carries, so a figure comparable across GPU counts.
        out.push(windows::Window {
            start: elapsed,
            seconds,
            units: f64::from(PER_WINDOW) * BYTES as f64 * 2.0 * (n - 1.0) / n,
        });
        elapsed += seconds;
        operations += PER_WINDOW;
    }
    Ok((out, elapsed / f64::from(operations.max(1))))
}
