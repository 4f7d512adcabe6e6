//! The vGPU guest's licence (`nvmlDeviceGetGridLicensableFeatures_v4`): inside a VM on a
//! vGPU, the guest driver must check a licence out from the licence server, and once the
//! grace period ends an unlicensed vGPU runs degraded. A GPU that needs no licence (bare
//! metal, passthrough) answers with licensing unsupported, as an H200 in passthrough does
//! (docs/results/nvml-call-cost-2026-11-24-h200.txt), and gets no series.

use super::calls::CallErrors;
use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper_sys::bindings::*;

/// `Some(true)` when a licensable feature the guest has enabled is licensed, `Some(false)`
/// when none is; `None` where the GPU needs no licence.
pub(super) fn read(device: &Device<'static>, calls: &mut CallErrors) -> Option<bool> {
    let features = calls.read("nvmlDeviceGetGridLicensableFeatures_v4", || licensable_features(device))?;
    licensed(&features)
}

fn licensed(features: &nvmlGridLicensableFeatures_t) -> Option<bool> {
    if features.isGridLicenseSupported == 0 {
        return None;
    }
    // The driver fills at most the array's length; a larger count is not trusted.
    let count = (features.licensableFeaturesCount as usize).min(features.gridLicensableFeatures.len());
    Some(
        features.gridLicensableFeatures[..count]
            .iter()
            .any(|f| f.featureEnabled != 0 && f.featureState != 0),
    )
}

fn licensable_features(device: &Device<'static>) -> Result<nvmlGridLicensableFeatures_t, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetGridLicensableFeatures_v4.as_ref())?;
    // SAFETY: plain data; all-zero is valid (the struct has no version word).
    let mut features: nvmlGridLicensableFeatures_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid device handle and a struct of the size nvml.h declares.
    nvml_try(unsafe { sym(device.handle(), &mut features) })?;
    Ok(features)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(supported: i32, count: u32, states: &[(u32, u32)]) -> nvmlGridLicensableFeatures_t {
        // SAFETY: plain data; all-zero is valid.
        let mut f: nvmlGridLicensableFeatures_t = unsafe { std::mem::zeroed() };
        f.isGridLicenseSupported = supported;
        f.licensableFeaturesCount = count;
        for (slot, (enabled, state)) in f.gridLicensableFeatures.iter_mut().zip(states) {
            slot.featureEnabled = *enabled;
            slot.featureState = *state;
        }
        f
    }

    #[test]
    fn a_gpu_without_licensing_has_no_reading() {
        assert_eq!(licensed(&features(0, 0, &[])), None);
    }

    #[test]
    fn an_enabled_licensed_feature_is_licensed_and_a_disabled_one_is_not() {
        assert_eq!(licensed(&features(1, 1, &[(1, 1)])), Some(true));
        assert_eq!(licensed(&features(1, 1, &[(1, 0)])), Some(false));
        assert_eq!(licensed(&features(1, 1, &[(0, 1)])), Some(false));
        assert_eq!(licensed(&features(1, 0, &[])), Some(false));
    }

    #[test]
    fn a_count_past_the_array_reads_only_the_array() {
        assert_eq!(licensed(&features(1, u32::MAX, &[(0, 0), (0, 0), (1, 1)])), Some(true));
        assert_eq!(licensed(&features(1, 2, &[(0, 0), (0, 0), (1, 1)])), Some(false));
    }
}
