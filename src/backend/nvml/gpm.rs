//! GPM (GPU performance monitoring, Hopper and newer): SM, tensor, DRAM and pipe activity and
//! PCIe/NVLink bandwidth, computed by the driver from two samples of the GPU's counters.
//!
//! Every `poll.gpm_interval` a poll takes one sample and computes the metrics against the
//! previous one, so the values are averages over that interval and the poll never sleeps; the
//! second sample comes [`FIRST_INTERVAL`] after the first, so values appear a second after
//! start.
//! (Measured on an H200: 2.3 ms of driver CPU per sample and computation, whatever the number
//! of metrics: too much for every second.) The first sample has nothing to compare against
//! and gives nothing. A GPU that says it has no GPM (Ampere and older, or a driver that
//! refuses) is asked once and never again.

use super::calls::CallErrors;
use crate::model::activity::Activity;
use nvml_wrapper::Device;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use std::sync::Mutex;

/// The second sample's wait after the first (at start, and after a GPU comes back): the
/// first values, a one-second average, appear a second after start instead of a whole
/// `poll.gpm_interval` later, at one more sample's cost (2.3 ms of driver CPU) per start.
pub(super) const FIRST_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// What each metric becomes. Percentages turn into ratios; bandwidths into bytes per second.
#[derive(Clone, Copy)]
enum Target {
    GraphicsActive,
    SmActive,
    SmOccupancy,
    TensorActive,
    DramActive,
    Pipe(&'static str),
    Pcie(&'static str),
    Nvlink(&'static str),
}

const METRICS: [(GpmMetricId, Target); 16] = [
    (GpmMetricId::GraphicsUtil, Target::GraphicsActive),
    (GpmMetricId::SmUtil, Target::SmActive),
    (GpmMetricId::SmOccupancy, Target::SmOccupancy),
    (GpmMetricId::AnyTensorUtil, Target::TensorActive),
    (GpmMetricId::DramBwUtil, Target::DramActive),
    (GpmMetricId::Fp64Util, Target::Pipe("fp64")),
    (GpmMetricId::Fp32Util, Target::Pipe("fp32")),
    (GpmMetricId::Fp16Util, Target::Pipe("fp16")),
    (GpmMetricId::HmmaTensorUtil, Target::Pipe("hmma")),
    (GpmMetricId::ImmaTensorUtil, Target::Pipe("imma")),
    (GpmMetricId::DfmaTensorUtil, Target::Pipe("dfma")),
    (GpmMetricId::PcieTxPerSec, Target::Pcie("tx")),
    (GpmMetricId::PcieRxPerSec, Target::Pcie("rx")),
    (GpmMetricId::NvlinkTotalTxPerSec, Target::Nvlink("tx")),
    (GpmMetricId::NvlinkTotalRxPerSec, Target::Nvlink("rx")),
    (GpmMetricId::IntegerUtil, Target::Pipe("integer")),
];

/// Serialises GPM calls across the daemon's per-GPU threads. Public reports tell of crashes
/// when several threads sample GPM on different GPUs at once (two threads on two H200s did
/// not crash in 2000 rounds, docs/validation.md); a sample and computation take about 2.3 ms
/// once every `poll.gpm_interval` (docs/performance.md), so taking turns delays a GPU's poll
/// by a few milliseconds once per interval at most: cheap insurance.
static GPM_CALLS: Mutex<()> = Mutex::new(());

#[derive(Default)]
pub(super) struct GpmSampler {
    /// `Some(false)` once the GPU said it has no GPM.
    supported: Option<bool>,
    previous: Option<GpmSample<'static>>,
    /// The previous sample of each MIG GPU instance, by its id.
    previous_mig: std::collections::BTreeMap<u32, GpmSample<'static>>,
}

impl GpmSampler {
    /// Samples the GPU and returns its activity since the previous call, if there was one.
    pub(super) fn read(&mut self, device: &Device<'static>, calls: &mut CallErrors) -> Option<Activity> {
        if !self.supported(device, calls) {
            return None;
        }
        let _turn = GPM_CALLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sample = calls.read("nvmlGpmSampleGet", || device.gpm_sample())?;
        let previous = self.previous.replace(sample)?;
        activity(device, calls, &previous, self.previous.as_ref()?)
    }

    /// The activity of each MIG GPU instance in `instances` since the previous call
    /// (`nvmlGpmMigSampleGet`); instances that went away are forgotten.
    pub(super) fn read_mig(
        &mut self,
        device: &Device<'static>,
        instances: &[u32],
        calls: &mut CallErrors,
    ) -> std::collections::BTreeMap<u32, Activity> {
        let mut out = std::collections::BTreeMap::new();
        self.previous_mig.retain(|gi, _| instances.contains(gi));
        if instances.is_empty() || !self.supported(device, calls) {
            return out;
        }
        let _turn = GPM_CALLS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for &gi in instances {
            let Some(sample) = calls.read("nvmlGpmMigSampleGet", || device.gpm_mig_sample(gi)) else {
                continue;
            };
            if let Some(previous) = self.previous_mig.insert(gi, sample)
                && let Some(current) = self.previous_mig.get(&gi)
                && let Some(a) = activity(device, calls, &previous, current)
            {
                out.insert(gi, a);
            }
        }
        out
    }

    fn supported(&mut self, device: &Device<'static>, calls: &mut CallErrors) -> bool {
        if self.supported.is_none() {
            self.supported = Some(
                calls
                    .read("nvmlGpmQueryDeviceSupport", || device.gpm_support())
                    .unwrap_or(false),
            );
        }
        self.supported == Some(true)
    }
}

/// The driver's metrics between two samples, as an [`Activity`]; `None` when it gives none.
fn activity(
    device: &Device<'static>,
    calls: &mut CallErrors,
    previous: &GpmSample<'static>,
    current: &GpmSample<'static>,
) -> Option<Activity> {
    let ids: Vec<GpmMetricId> = METRICS.iter().map(|(id, _)| *id).collect();
    let results = calls.read("nvmlGpmMetricsGet", || {
        gpm_metrics_get(device.nvml(), previous, current, &ids)
    })?;
    let mut activity = Activity::default();
    for ((_, target), result) in METRICS.iter().zip(results) {
        // A metric this GPU does not have answers for itself; the others still count.
        let Ok(result) = result else { continue };
        if !result.value.is_finite() {
            continue;
        }
        let ratio = (result.value / 100.0).clamp(0.0, 1.0);
        match *target {
            Target::GraphicsActive => activity.graphics_active = Some(ratio),
            Target::SmActive => activity.sm_active = Some(ratio),
            Target::SmOccupancy => activity.sm_occupancy = Some(ratio),
            Target::TensorActive => activity.tensor_active = Some(ratio),
            Target::DramActive => activity.dram_active = Some(ratio),
            Target::Pipe(pipe) => activity.pipes.push((pipe, ratio)),
            Target::Pcie(direction) => {
                if let Some(rate) = bytes_per_second(result.value, &result.metric_info.unit) {
                    activity.pcie_bytes_per_second.push((direction, rate));
                }
            }
            Target::Nvlink(direction) => {
                if let Some(rate) = bytes_per_second(result.value, &result.metric_info.unit) {
                    activity.nvlink_bytes_per_second.push((direction, rate));
                }
            }
        }
    }
    (!activity.is_empty()).then_some(activity)
}

/// A bandwidth in the unit the driver names (nvml.h documents MiB/sec for the PCIe and
/// NVLink metrics) as bytes per second. An unknown unit is left out rather than guessed.
fn bytes_per_second(value: f64, unit: &str) -> Option<f64> {
    let unit = unit.trim().to_ascii_lowercase().replace("/sec", "/s");
    let scale = match unit.as_str() {
        "" | "mib/s" => 1024.0 * 1024.0,
        "mb/s" => 1e6,
        "kib/s" => 1024.0,
        "kb/s" => 1e3,
        "b/s" | "bytes/s" => 1.0,
        "gib/s" => 1024.0 * 1024.0 * 1024.0,
        "gb/s" => 1e9,
        _ => return None,
    };
    Some(value.max(0.0) * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_units() {
        assert_eq!(bytes_per_second(2.0, "MiB/sec"), Some(2.0 * 1048576.0));
        assert_eq!(bytes_per_second(2.0, "MB/s"), Some(2e6));
        assert_eq!(bytes_per_second(1.0, "furlongs"), None);
    }
}
