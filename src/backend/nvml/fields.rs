//! `nvmlDeviceGetFieldValues` with scope ids: one driver call answers many (field, scope)
//! pairs, such as a counter of each NVLink. nvml-wrapper's `field_values_for` cannot set the
//! scope, so this makes the call itself.

use nvml_wrapper::Device;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper_sys::bindings::*;

/// The value of each requested (field, scope) pair, in order; `None` where the driver
/// answered that pair with an error (not supported on this GPU or link, most often).
pub(super) fn scoped_field_values(
    device: &Device<'static>,
    requests: &[(u32, u32)],
) -> Result<Vec<Option<f64>>, NvmlError> {
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetFieldValues.as_ref())?;
    let mut values: Vec<nvmlFieldValue_t> = requests
        .iter()
        .map(|(field, scope)| {
            // SAFETY: nvmlFieldValue_t is plain data; all-zero is a valid value of it.
            let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
            v.fieldId = *field;
            v.scopeId = *scope;
            v
        })
        .collect();
    // SAFETY: a valid device handle and an array of `values.len()` entries, as nvml.h asks.
    nvml_try(unsafe { sym(device.handle(), values.len() as i32, values.as_mut_ptr()) })?;
    Ok(values.iter().map(value_of).collect())
}

// The constants are bindgen's names for nvml.h's enum members.
#[allow(non_upper_case_globals)]
fn value_of(v: &nvmlFieldValue_t) -> Option<f64> {
    if v.nvmlReturn != nvmlReturn_enum_NVML_SUCCESS {
        return None;
    }
    // SAFETY: the driver says which member of the union it wrote.
    let value = unsafe {
        match v.valueType {
            nvmlValueType_enum_NVML_VALUE_TYPE_DOUBLE => v.value.dVal,
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_INT => v.value.uiVal as f64,
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG => v.value.ulVal as f64,
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => v.value.ullVal as f64,
            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_LONG_LONG => v.value.sllVal as f64,
            nvmlValueType_enum_NVML_VALUE_TYPE_SIGNED_INT => v.value.siVal as f64,
            nvmlValueType_enum_NVML_VALUE_TYPE_UNSIGNED_SHORT => v.value.usVal as f64,
            _ => return None,
        }
    };
    value.is_finite().then_some(value)
}
