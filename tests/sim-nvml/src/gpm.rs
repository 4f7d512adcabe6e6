//! GPM and per-process utilisation of the simulated library. A GPM sample remembers which
//! device it was taken on; `nvmlGpmMetricsGet` answers the scenario's `gpm` values for that
//! device, whatever the time between the two samples.

use crate::*;

struct SimSample {
    /// Device index + 1, 0 before `nvmlGpmSampleGet` filled it.
    device: usize,
    /// The GPU instance a `nvmlGpmMigSampleGet` sample is of.
    gpu_instance: Option<u32>,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(out: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    if out.is_null() {
        return INVALID_ARGUMENT;
    }
    let sample = Box::into_raw(Box::new(SimSample {
        device: 0,
        gpu_instance: None,
    }));
    // SAFETY: not null (checked above), and the caller's, valid for writes.
    unsafe { out.write(sample as nvmlGpmSample_t) };
    SUCCESS
}

/// Exported even by the old-driver build: nvml-wrapper's GpmSample drop calls it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: nvmlGpmSample_t) -> nvmlReturn_t {
    if !sample.is_null() {
        // SAFETY: allocated by nvmlGpmSampleAlloc above, freed once (NVML's contract).
        drop(unsafe { Box::from_raw(sample as *mut SimSample) });
    }
    SUCCESS
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(device: nvmlDevice_t, out: *mut nvmlGpmSupport_t) -> nvmlReturn_t {
    device_call(device, "nvmlGpmQueryDeviceSupport", |_, d| {
        if out.is_null() {
            return INVALID_ARGUMENT;
        }
        // SAFETY: not null (checked above), and the caller's struct, valid for writes.
        unsafe { (*out).isSupportedDevice = d.gpm.is_some() as c_uint };
        SUCCESS
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleGet(device: nvmlDevice_t, sample: nvmlGpmSample_t) -> nvmlReturn_t {
    device_call(device, "nvmlGpmSampleGet", |i, d| {
        if sample.is_null() {
            return INVALID_ARGUMENT;
        }
        if d.gpm.is_none() {
            return NOT_SUPPORTED;
        }
        // SAFETY: not null (checked above), and a sample nvmlGpmSampleAlloc made.
        unsafe { (*(sample as *mut SimSample)).device = i + 1 };
        SUCCESS
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance: c_uint,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    device_call(device, "nvmlGpmMigSampleGet", |i, d| {
        if sample.is_null() {
            return INVALID_ARGUMENT;
        }
        let Some(mig) = d.mig.as_ref().filter(|m| m.enabled) else {
            return NOT_SUPPORTED;
        };
        if !mig.devices.iter().any(|m| m.gpu_instance == gpu_instance) {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        // SAFETY: not null (checked above), and a sample nvmlGpmSampleAlloc made.
        unsafe {
            let s = &mut *(sample as *mut SimSample);
            s.device = i + 1;
            s.gpu_instance = Some(gpu_instance);
        }
        SUCCESS
    })
}

#[cfg(not(feature = "old-driver"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    if request.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: the caller passes a filled request (NVML's contract).
    let request = unsafe { &mut *request };
    if request.sample1.is_null() || request.sample2.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: both not null (checked above), and samples nvmlGpmSampleAlloc made.
    let (first, second, instance) = unsafe {
        let (a, b) = (
            &*(request.sample1 as *mut SimSample),
            &*(request.sample2 as *mut SimSample),
        );
        if a.gpu_instance != b.gpu_instance {
            return INVALID_ARGUMENT;
        }
        (a.device, b.device, b.gpu_instance)
    };
    if first == 0 || first != second {
        return INVALID_ARGUMENT;
    }
    let handle = second as nvmlDevice_t;
    device_call(handle, "nvmlGpmMetricsGet", |_, d| {
        let gpm = match instance {
            Some(gi) => d
                .mig
                .as_ref()
                .and_then(|m| m.devices.iter().find(|m| m.gpu_instance == gi))
                .and_then(|m| m.gpm.as_ref()),
            None => d.gpm.as_ref(),
        };
        let Some(gpm) = gpm else { return NOT_SUPPORTED };
        let count = (request.numMetrics as usize).min(request.metrics.len());
        for metric in request.metrics.iter_mut().take(count) {
            let (value, unit) = match metric.metricId {
                nvmlGpmMetricId_t_NVML_GPM_METRIC_GRAPHICS_UTIL => (gpm.graphics, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL => (gpm.sm, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY => (gpm.sm_occupancy, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_INTEGER_UTIL => (gpm.integer, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_ANY_TENSOR_UTIL => (gpm.tensor, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_DFMA_TENSOR_UTIL => (gpm.dfma, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_HMMA_TENSOR_UTIL => (gpm.hmma, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_IMMA_TENSOR_UTIL => (gpm.imma, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_DRAM_BW_UTIL => (gpm.dram, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_FP64_UTIL => (gpm.fp64, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_FP32_UTIL => (gpm.fp32, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_FP16_UTIL => (gpm.fp16, PERCENT),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_PCIE_TX_PER_SEC => (gpm.pcie_tx_mib, MIB_PER_SEC),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_PCIE_RX_PER_SEC => (gpm.pcie_rx_mib, MIB_PER_SEC),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC => (gpm.nvlink_tx_mib, MIB_PER_SEC),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC => (gpm.nvlink_rx_mib, MIB_PER_SEC),
                _ => (None, PERCENT),
            };
            metric.metricInfo.shortName = c"sim".as_ptr() as *mut c_char;
            metric.metricInfo.longName = c"simulated GPM metric".as_ptr() as *mut c_char;
            metric.metricInfo.unit = unit.as_ptr() as *mut c_char;
            match value {
                Some(v) => {
                    metric.value = v;
                    metric.nvmlReturn = SUCCESS;
                }
                None => metric.nvmlReturn = NOT_SUPPORTED,
            }
        }
        SUCCESS
    })
}

const PERCENT: &std::ffi::CStr = c"%";
const MIB_PER_SEC: &std::ffi::CStr = c"MiB/sec";

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    _last_seen_timestamp: c_ulonglong,
) -> nvmlReturn_t {
    device_call(device, "nvmlDeviceGetProcessUtilization", |_, d| {
        if count.is_null() {
            return INVALID_ARGUMENT;
        }
        let processes = d.processes.as_deref().unwrap_or_default();
        if processes
            .iter()
            .all(|p| p.sm_percent.is_none() && p.memory_percent.is_none())
        {
            return NOT_SUPPORTED;
        }
        let busy: Vec<_> = processes
            .iter()
            .filter(|p| p.sm_percent.unwrap_or(0) > 0 || p.memory_percent.unwrap_or(0) > 0)
            .collect();
        if busy.is_empty() {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        // SAFETY: the caller passes room for *count samples (NVML's contract).
        unsafe {
            let room = *count as usize;
            *count = busy.len() as c_uint;
            if samples.is_null() || room < busy.len() {
                return INSUFFICIENT_SIZE;
            }
            for (i, p) in busy.iter().enumerate() {
                let s = &mut *samples.add(i);
                s.pid = p.pid;
                s.timeStamp = now_us;
                s.smUtil = p.sm_percent.unwrap_or(0);
                s.memUtil = p.memory_percent.unwrap_or(0);
                s.encUtil = 0;
                s.decUtil = 0;
            }
        }
        SUCCESS
    })
}
