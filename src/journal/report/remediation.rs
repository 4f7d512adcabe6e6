//! The report's "Remediation" section: each step automatic remediation ran on the GPU (from
//! the `remediation` rows that carry an attempt) with its outcome, duration and the commands'
//! output, and the node's reboot marks naming it. The advice rows stay in "Other".

use crate::journal::store::read::Row;
use serde::Serialize;

/// One step as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Step {
    pub at: f64,
    /// `gpu_reset succeeded in 1.4 s`, `reboot required: ...`.
    pub summary: String,
    /// The commands' output as recorded (at most 4 KiB), empty for a reboot mark.
    pub output: String,
}

/// The steps among `rows` (the GPU's `remediation` rows), oldest first.
pub(crate) fn steps(rows: &[Row]) -> Vec<Step> {
    rows.iter()
        .filter(|r| r.is(crate::journal::event::Kind::Remediation))
        .filter(|r| r.details.get("attempt").is_some() || r.details.get("reboot_required").is_some())
        .map(|r| Step {
            at: r.at,
            summary: r.summary.clone(),
            output: r
                .details
                .get("attempt")
                .and_then(|a| a.get("output"))
                .and_then(|o| o.as_str())
                .map(crate::input::printable_lines)
                .unwrap_or_default(),
        })
        .collect()
}

/// Whether `row` belongs in the section (not in "Other").
pub(crate) fn is_step(row: &Row) -> bool {
    row.is(crate::journal::event::Kind::Remediation)
        && (row.details.get("attempt").is_some() || row.details.get("reboot_required").is_some())
}

/// The section as Markdown: a line per step, its output in a code block.
pub(crate) fn markdown(steps: &[Step]) -> String {
    if steps.is_empty() {
        return "None run (automatic remediation is `remediation.mode: auto`; what was advised is above).\n"
            .to_string();
    }
    let mut out = String::new();
    for step in steps {
        out.push_str(&format!("- {}: {}\n", crate::model::utc_seconds(step.at), step.summary));
        if !step.output.trim().is_empty() {
            // A fence longer than any run of backticks in the output.
            let fence = "`".repeat(3.max(longest_backtick_run(&step.output) + 1));
            out.push_str(&format!("\n{fence}\n{}\n{fence}\n\n", step.output.trim_end()));
        }
    }
    out
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(summary: &str, details: serde_json::Value) -> Row {
        Row {
            id: 1,
            at: 1_795_682_295.0,
            boot_id: "b".into(),
            host: "h".into(),
            kind: "remediation".into(),
            gpu_uuid: Some("GPU-a".into()),
            serial: None,
            pci_bus_id: None,
            summary: summary.into(),
            details,
        }
    }

    #[test]
    fn attempts_and_reboot_marks_with_their_output_and_the_advice_left_out() {
        let rows = [
            row("next step advised: gpu_reset", json!({"advice": {}})),
            row(
                "gpu_reset failed in 1.2 s: exit status 3",
                json!({"attempt": {"output": "$ reset\n```Unable to reset\u{1b}[0m\n[exit status 3]\n"}}),
            ),
            row(
                "reboot required: the GPU reset of GPU 0 failed",
                json!({"reboot_required": {}}),
            ),
        ];
        let steps = steps(&rows);
        assert_eq!(steps.len(), 2);
        assert!(!is_step(&rows[0]) && is_step(&rows[1]));
        let text = markdown(&steps);
        assert!(
            text.contains("- 2026-11-26T08:38:15Z: gpu_reset failed in 1.2 s: exit status 3\n"),
            "{text}"
        );
        assert!(
            text.contains("\n````\n$ reset\n```Unable to reset"),
            "a fence the output cannot close: {text}"
        );
        assert!(!text.contains('\u{1b}'), "control characters replaced: {text:?}");
        assert!(text.contains("- 2026-11-26T08:38:15Z: reboot required"), "{text}");
        assert!(markdown(&[]).starts_with("None run"));
    }
}
