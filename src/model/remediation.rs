//! What automatic remediation (`remediation.mode: auto`, docs/health.md "Remediation") did
//! and holds: each GPU reset it ran, with its output, exit and duration; the guard that holds a
//! GPU's reset back now; the reset running now; and the node's "reboot required" mark. The
//! executor (remediation/auto.rs) keeps it, the journal records and seeds it, the ladder reads
//! what was tried, the health rules make the node finding, the metrics serve it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How far back resets count against `remediation.max_resets_per_day`.
pub(crate) const RESET_WINDOW_SECONDS: f64 = 24.0 * 3600.0;
/// The most attempts kept (the last day's on a node with many GPUs fits easily).
pub(crate) const MAX_ATTEMPTS: usize = 256;
/// The most bytes of a step's output kept (stdout and stderr together).
pub(crate) const MAX_OUTPUT: usize = 4096;

/// One step the executor ran for one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub uuid: String,
    pub index: u32,
    pub pci_bus_id: String,
    /// `gpu_reset`.
    pub step: crate::model::health::Step,
    /// Why it ran: the ladder's reason ("Xid 94: NVIDIA's catalog says RESET_GPU").
    pub why: String,
    /// Unix seconds when it started.
    pub started: f64,
    pub duration_seconds: f64,
    pub outcome: AttemptOutcome,
    /// The commands' output, at most [`MAX_OUTPUT`] bytes, lossily decoded.
    pub output: String,
    /// Whether it ran in this boot (a restart's seed says; a new one is).
    #[serde(default = "this_boot")]
    pub this_boot: bool,
    /// The boot's clock when it started (seconds since boot): within a boot the day's budget
    /// is counted on it, so a wall clock set forward does not free the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_boot: Option<f64>,
}

/// The time a budget is counted at: the wall clock (Unix seconds) and, where it can be read,
/// the boot's (seconds since boot).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Now {
    pub wall: f64,
    pub boot: Option<f64>,
}

impl Attempt {
    /// A GPU reset of `uuid` (at 0000:19:00.0) for the tests of what reads attempts.
    #[cfg(test)]
    pub(crate) fn for_test(uuid: &str, started: f64, outcome: AttemptOutcome, this_boot: bool) -> Attempt {
        Attempt {
            uuid: uuid.into(),
            index: 0,
            pci_bus_id: "0000:19:00.0".into(),
            step: crate::model::health::Step::GpuReset,
            why: "Xid 94".into(),
            started,
            duration_seconds: 1.0,
            outcome,
            output: String::new(),
            this_boot,
            started_boot: None,
        }
    }

    /// Whether it started within the day before `now`: by the boot's clock for an attempt of
    /// this boot that has it, by the wall clock otherwise (an earlier boot's).
    pub fn within_a_day(&self, now: Now) -> bool {
        match (self.this_boot, self.started_boot, now.boot) {
            (true, Some(started), Some(boot)) => boot - started < RESET_WINDOW_SECONDS,
            _ => now.wall - self.started < RESET_WINDOW_SECONDS,
        }
    }
}

fn this_boot() -> bool {
    true
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The command exited 0.
    Succeeded,
    /// It exited non-zero, was killed at its deadline, or could not start; `why` says which.
    Failed { why: String },
    /// The daemon stopped (or died) while it ran: no one knows how the GPU came out of it. Not
    /// a failure (the node is not marked for a reboot); it counts against the day's budget,
    /// and the GPU keeps its findings, so the next run looks at it again.
    Interrupted { why: String },
}

/// Why an attempt found in the journal has no outcome: its start was recorded, its end not.
pub(crate) const NO_OUTCOME: &str = "no outcome was recorded: the daemon stopped or died while it ran";

impl AttemptOutcome {
    pub fn label(&self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed { .. } => "failed",
            AttemptOutcome::Interrupted { .. } => "interrupted",
        }
    }

    /// Every label, in the order the metric serves them.
    pub const LABELS: [&'static str; 3] = ["succeeded", "failed", "interrupted"];
}

/// The node needs a reboot: a reset failed, or the driver asks for one. Kept for the boot (a
/// reboot ends it) or until the GPU it names is cleared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RebootRequired {
    /// Unix seconds.
    pub since: f64,
    /// The GPU that needs it.
    pub uuid: String,
    pub index: u32,
    /// For a person: "the GPU reset of GPU 0 failed: exit status 1".
    pub why: String,
}

/// Why a GPU's reset is held back now: which guard, and what it saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub guard: Guard,
    pub why: String,
}

/// A guard that can hold an automatic reset back (remediation/guards.rs, in the order they
/// are asked): the label set of `gpu_remediation_held_back{guard}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
// `fleet_guard` is the wire's label value (gpu_remediation_held_back{guard}), kept as it is.
#[allow(clippy::enum_variant_names)]
pub enum Guard {
    /// The node needs a reboot first.
    RebootRequired,
    /// The config key or the pause file.
    Paused,
    /// The fleet drain guard refused a drain.
    FleetGuard,
    /// The scheduler does not show the node (or the GPU) out of work.
    Scheduler,
    /// A process still holds the GPU.
    Processes,
    /// `remediation.max_resets_per_day` is spent.
    ResetBudget,
}

impl Guard {
    pub const ALL: [Guard; 6] = [
        Guard::RebootRequired,
        Guard::Paused,
        Guard::FleetGuard,
        Guard::Scheduler,
        Guard::Processes,
        Guard::ResetBudget,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Guard::RebootRequired => "reboot_required",
            Guard::Paused => "paused",
            Guard::FleetGuard => "fleet_guard",
            Guard::Scheduler => "scheduler",
            Guard::Processes => "processes",
            Guard::ResetBudget => "reset_budget",
        }
    }
}

impl std::fmt::Display for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Everything automatic remediation did and holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Remediations {
    /// Oldest first; the last day's and this boot's, at most [`MAX_ATTEMPTS`].
    pub attempts: Vec<Attempt>,
    /// The GPU (UUID) being reset now.
    pub running: Option<String>,
    /// Per GPU (UUID) that needs a reset: the guard that holds it back now.
    pub held_back: BTreeMap<String, Refusal>,
    pub reboot_required: Option<RebootRequired>,
}

impl Remediations {
    /// Resets of `uuid` that started within the last day before `now`.
    pub fn resets_within_a_day(&self, uuid: &str, now: Now) -> usize {
        self.attempts
            .iter()
            .filter(|a| a.uuid == uuid && a.step == crate::model::health::Step::GpuReset && a.within_a_day(now))
            .count()
    }

    /// The last reset of `uuid` in this boot.
    pub fn last_reset_this_boot(&self, uuid: &str) -> Option<&Attempt> {
        self.attempts
            .iter()
            .rev()
            .find(|a| a.uuid == uuid && a.step == crate::model::health::Step::GpuReset && a.this_boot)
    }

    /// Keeps `attempt`, dropping the oldest past [`MAX_ATTEMPTS`].
    pub fn keep(&mut self, attempt: Attempt) {
        self.attempts.push(attempt);
        let over = self.attempts.len().saturating_sub(MAX_ATTEMPTS);
        self.attempts.drain(..over);
    }

    /// Whether the last reset this boot of any GPU failed, or the node needs a reboot
    /// (`gpuwarden_remediation_failed`).
    pub fn failed(&self) -> bool {
        self.reboot_required.is_some()
            || self
                .attempts
                .iter()
                .filter(|a| a.this_boot)
                .fold(BTreeMap::new(), |mut last, a| {
                    last.insert(a.uuid.as_str(), a);
                    last
                })
                .values()
                .any(|a| matches!(a.outcome, AttemptOutcome::Failed { .. }))
    }
}

/// Cuts `text` to at most [`MAX_OUTPUT`] bytes at a character boundary, saying so.
pub(crate) fn bounded_output(text: &str) -> String {
    bounded_to(text, MAX_OUTPUT)
}

/// The share of [`MAX_OUTPUT`] each of a reset's three commands (persistence off, the reset,
/// persistence on) keeps: one that prints 100 MB does not crowd the others out.
pub(crate) const STEP_OUTPUT: usize = MAX_OUTPUT / 3;

/// Cuts `text` to at most `max` bytes (at least 64) at a character boundary, saying so.
pub(crate) fn bounded_to(text: &str, max: usize) -> String {
    let max = max.max(64);
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max - 32;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[... {} bytes cut]", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step's and a guard's word is the same in the metrics' labels (`label`) as in the
    /// JSON and the journal (serde): one word each, never two spellings.
    #[test]
    fn steps_and_guards_say_one_word_on_every_wire() {
        use crate::model::health::Step;
        for step in Step::ALL {
            let json = serde_json::to_string(&step).unwrap();
            assert_eq!(json, format!("\"{step}\""));
            assert_eq!(serde_json::from_str::<Step>(&json).unwrap(), step);
        }
        for guard in Guard::ALL {
            let json = serde_json::to_string(&guard).unwrap();
            assert_eq!(json, format!("\"{guard}\""));
            assert_eq!(serde_json::from_str::<Guard>(&json).unwrap(), guard);
        }
    }

    fn attempt(uuid: &str, started: f64, outcome: AttemptOutcome, this_boot: bool) -> Attempt {
        Attempt::for_test(uuid, started, outcome, this_boot)
    }

    fn wall(now: f64) -> Now {
        Now { wall: now, boot: None }
    }

    /// A wall clock set forward (or back) does not move the budget of this boot's resets: it is
    /// counted on the boot's clock (issue #51, item 11).
    #[test]
    fn this_boots_budget_is_counted_on_the_boots_clock() {
        let mut r = Remediations::default();
        let mut reset = attempt("GPU-a", 1000.0, AttemptOutcome::Succeeded, true);
        reset.started_boot = Some(500.0);
        r.keep(reset);
        let jumped = Now {
            wall: 1000.0 + 2.0 * RESET_WINDOW_SECONDS,
            boot: Some(560.0),
        };
        assert_eq!(
            r.resets_within_a_day("GPU-a", jumped),
            1,
            "a minute later by the boot's clock"
        );
        let a_day_later = Now {
            wall: 1060.0,
            boot: Some(500.0 + RESET_WINDOW_SECONDS + 1.0),
        };
        assert_eq!(r.resets_within_a_day("GPU-a", a_day_later), 0);
        assert_eq!(
            r.resets_within_a_day("GPU-a", wall(1060.0)),
            1,
            "no boot clock: the wall's"
        );
    }

    #[test]
    fn resets_count_for_a_day_and_the_last_one_of_each_gpu_decides_failed() {
        let mut r = Remediations::default();
        r.keep(attempt(
            "GPU-a",
            1000.0,
            AttemptOutcome::Failed { why: "exit 1".into() },
            true,
        ));
        assert!(r.failed());
        r.keep(attempt("GPU-a", 2000.0, AttemptOutcome::Succeeded, true));
        assert!(!r.failed(), "a later reset of the same GPU succeeded");
        assert_eq!(r.resets_within_a_day("GPU-a", wall(2000.0 + 3600.0)), 2);
        assert_eq!(
            r.resets_within_a_day("GPU-a", wall(1000.0 + RESET_WINDOW_SECONDS + 1.0)),
            1
        );
        assert_eq!(r.resets_within_a_day("GPU-b", wall(2000.0)), 0);
        r.keep(attempt(
            "GPU-b",
            3000.0,
            AttemptOutcome::Failed { why: "x".into() },
            false,
        ));
        assert!(!r.failed(), "a failure of an earlier boot is not this boot's");
        assert_eq!(r.last_reset_this_boot("GPU-a").map(|a| a.started), Some(2000.0));
        assert_eq!(r.last_reset_this_boot("GPU-b"), None);
    }

    #[test]
    fn output_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_OUTPUT);
        let cut = bounded_output(&long);
        assert!(cut.len() <= MAX_OUTPUT + 40, "{}", cut.len());
        assert!(cut.ends_with("bytes cut]"));
        assert_eq!(bounded_output("short"), "short");
    }

    #[test]
    fn attempts_are_bounded() {
        let mut r = Remediations::default();
        for i in 0..MAX_ATTEMPTS + 10 {
            r.keep(attempt("GPU-a", i as f64, AttemptOutcome::Succeeded, true));
        }
        assert_eq!(r.attempts.len(), MAX_ATTEMPTS);
        assert_eq!(r.attempts[0].started, 10.0);
    }
}
