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
            first_few(&suspect.faults),
        )
        .into(),
    )
}

/// The evidence a finding lists: at most [`FAULTS_LISTED`] of it, and how many more the
/// report has (a stuck bit fails every one of the 32 walking-ones passes: a finding of 1,500
/// characters on one line).
fn first_few(faults: &[String]) -> String {
    let listed = faults
        .iter()
        .take(FAULTS_LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    match faults.len().saturating_sub(FAULTS_LISTED) {
        0 => listed,
        more => format!("{listed}; and {more} more (the report lists them all)"),
    }
}

/// How many faults a finding names.
const FAULTS_LISTED: usize = 3;

/// Memory that read back wrong is sticky, as wrong results are.
pub(super) fn hbm_pattern_errors(seen: &Seen) -> Option<Hit> {
    let suspect = seen
        .hbm_suspect
        .filter(|s| seen.after_clear(crate::model::from_unix_seconds(s.at)))?;
    Some(
        format!(
            "its memory read back wrong in the probe's HBM pattern test at {}: {}",
            crate::model::utc_seconds(suspect.at),
            first_few(&suspect.faults),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stuck bit fails all 32 walking-ones passes: the finding names three and says how
    /// many more, on a line a person reads.
    #[test]
    fn a_finding_names_a_few_faults_and_counts_the_rest() {
        let faults: Vec<String> = (0..32)
            .map(|pass| format!("walking ones pass {pass}: word 1000 (offset 0xfa0) read 0x00000008, wrote 0x00000000"))
            .collect();
        let said = first_few(&faults);
        assert!(said.ends_with("; and 29 more (the report lists them all)"), "{said}");
        assert!(said.len() < 400, "{} characters", said.len());
        assert_eq!(first_few(&faults[..2]), faults[..2].join("; "));
    }
}
