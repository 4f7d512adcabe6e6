//! The probe: a failed test, and figures below the GPU's baseline or its neighbours'.

use super::*;

pub(super) fn probe_failed(seen: &Seen) -> Option<Hit> {
    if let Some((validation, detail)) = seen.validation.and_then(|v| Some((v, v.failed()?))) {
        return Some(Hit::said(
            format!(
                "{detail} (its validation after {}); it stays out of service until it is repaired and cleared again \
                 (`gpuwarden health clear`)",
                validation.why
            ),
            Some(Unhealthy),
        ));
    }
    let report = seen
        .probe
        .filter(|r| seen.after_clear(crate::model::from_unix_seconds(r.started)))?;
    // The probe of a validation still pending is that validation's to judge: its report is
    // published a moment before the validation's outcome (two states, one publish apart), and
    // is no finding of its own meanwhile.
    if seen
        .validation
        .is_some_and(|v| v.pending() && report.started >= v.since)
    {
        return None;
    }
    let failed = report.shortfalls();
    (!failed.is_empty()).then(|| format!("failed the probe: {}", failed.join(", ")).into())
}

/// Wrong results are sticky: a later probe that happens to compute right does not make the
/// GPU trustworthy again; a person's clear (after a repair or a swap) does.
pub(super) fn sdc_suspect(seen: &Seen) -> Option<Hit> {
    let suspect = seen
        .sdc_suspect
        .filter(|s| seen.after_clear(crate::model::from_unix_seconds(s.at)))?;
    Some(
        format!(
            "computed wrong results in the probe's correctness canary at {} (silent data corruption suspected): {}",
            crate::model::utc_seconds(suspect.at),
            suspect.faults.join("; "),
        )
        .into(),
    )
}

/// Memory that read back wrong is sticky, as wrong results are.
pub(super) fn hbm_pattern_errors(seen: &Seen) -> Option<Hit> {
    let suspect = seen
        .hbm_suspect
        .filter(|s| seen.after_clear(crate::model::from_unix_seconds(s.at)))?;
    Some(
        format!(
            "its memory read back wrong in the probe's HBM pattern test at {}: {}",
            crate::model::utc_seconds(suspect.at),
            suspect.faults.join("; "),
        )
        .into(),
    )
}

pub(super) fn probe_regressed(seen: &Seen) -> Option<Hit> {
    use crate::health::baseline::percent_below;
    let regressed: Vec<String> = seen
        .probe_comparisons
        .iter()
        .filter(|c| c.regressed())
        .map(|c| {
            let unit = c.test.unit();
            let reference = |r: Option<(f64, usize)>, what: &str, counted: &str| match r {
                Some((value, n)) => format!(
                    "{:.1}% below {what} {} ({n} {counted})",
                    percent_below(c.figure, value),
                    unit.human(value)
                ),
                None => format!("{what}: none yet"),
            };
            format!(
                "{} sustained {}: {}, {}",
                c.test.name(),
                unit.human(c.figure),
                reference(c.own, "its own baseline", "earlier probes"),
                reference(c.node, "the node's median for its model", "other GPUs")
            )
        })
        .collect();
    (!regressed.is_empty()).then(|| {
        format!(
            "slower than it was or than its neighbours: {}; a synchronous job runs at its slowest GPU's pace",
            regressed.join("; "),
        )
        .into()
    })
}
