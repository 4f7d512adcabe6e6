//! GPU memory: uncorrectable and corrected ECC, and row remapping.

use super::*;

pub(super) fn ecc_uncorrectable(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    let n = r
        .ecc_count(EccType::Uncorrected, EccScope::Volatile)
        .filter(|n| *n > 0)?;
    let plural = if n == 1 { "" } else { "s" };
    Some(format!("{n} uncorrectable ECC error{plural} since the driver loaded").into())
}

pub(super) fn ecc_corrected_rate(seen: &Seen, _: &DeviceReadings) -> Option<Hit> {
    error_rate(seen, ErrorCounter::EccCorrected, "corrected ECC errors")
}

pub(super) fn row_remap_pending(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    (r.remapped_rows.pending == Some(true)).then(|| "a memory row remap is pending".to_string().into())
}

pub(super) fn row_remap_failed(_: &Seen, r: &DeviceReadings) -> Option<Hit> {
    (r.remapped_rows.failed == Some(true)).then(|| {
        "a memory row remap failed: the GPU has run out of spare rows"
            .to_string()
            .into()
    })
}
