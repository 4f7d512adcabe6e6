//! The all-reduce across the node's GPUs as the daemon keeps it (docs/probe.md, "The GPUs
//! together"): each run's GPUs, the path between them, what it measured and the verdict, and
//! the node's earlier figures that make its baseline.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

crate::model::label::label_enum! {
    /// What a run of the all-reduce came to: the `result` label of
    /// `gpu_collective_runs_total`, the journal's word.
    pub enum CollectiveVerdict {
        Passed => "passed",
        /// Below what the path should carry, or below the node's own baseline.
        Slow => "slow",
        /// NCCL failed, a GPU gave a wrong sum, or it hung past `probe.timeout`.
        Failed => "failed",
    }
}

impl<'de> Deserialize<'de> for CollectiveVerdict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let word = String::deserialize(d)?;
        CollectiveVerdict::from_label(&word)
            .ok_or_else(|| serde::de::Error::custom(format!("{word:?} is not a collective verdict")))
    }
}

/// One run of the all-reduce, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRun {
    /// Unix seconds: when it started.
    pub at: f64,
    /// The GPUs in it, by index, and by uuid in the same order.
    pub gpus: Vec<u32>,
    pub uuids: Vec<String>,
    /// The path between them, in words: "NVLink, 18 links x 26.6 GB/s per GPU".
    pub path: String,
    /// What the path should carry one way (bytes/s), where the driver says enough to know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
    /// The node's earlier figure for these GPUs (median bytes/s) and how many runs made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<(f64, usize)>,
    /// Bus bandwidth (bytes/s) where it ran to the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_bandwidth: Option<f64>,
    /// NCCL's version, where it loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
    pub verdict: CollectiveVerdict,
    /// For a person: what fell short or failed, or what passed.
    pub detail: String,
}

impl CollectiveRun {
    /// The GPUs as a finding names them: "GPUs 0, 1, 2".
    pub fn gpu_list(&self) -> String {
        let list: Vec<String> = self.gpus.iter().map(u32::to_string).collect();
        format!("GPUs {}", list.join(", "))
    }

    /// The key the node's baseline is kept by: the same GPUs (a board swap starts afresh).
    pub fn key(&self) -> String {
        self.uuids.join(",")
    }
}

/// The node's earlier all-reduce figures, oldest first, at most [`MAX_FIGURES`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectiveHistory {
    pub figures: VecDeque<(String, f64)>,
}

/// How many earlier figures are kept: the baseline is the median of the latest of them.
pub(crate) const MAX_FIGURES: usize = 30;

impl CollectiveHistory {
    /// Keeps a run's figure (a run that measured something and did not fail).
    pub fn keep(&mut self, run: &CollectiveRun) {
        if let (Some(figure), false) = (run.bus_bandwidth, run.verdict == CollectiveVerdict::Failed) {
            self.figures.push_back((run.key(), figure));
            while self.figures.len() > MAX_FIGURES {
                self.figures.pop_front();
            }
        }
    }

    /// The median of the latest `count` figures of these GPUs, and how many there were;
    /// `None` below three (a median of fewer says little).
    pub fn baseline(&self, key: &str, count: usize) -> Option<(f64, usize)> {
        let mut recent: Vec<f64> = self
            .figures
            .iter()
            .rev()
            .filter(|(k, _)| k == key)
            .take(count)
            .map(|(_, f)| *f)
            .collect();
        if recent.len() < 3 {
            return None;
        }
        recent.sort_by(f64::total_cmp);
        let n = recent.len();
        let median = if n % 2 == 1 {
            recent[n / 2]
        } else {
            (recent[n / 2 - 1] + recent[n / 2]) / 2.0
        };
        Some((median, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(key: &str, figure: f64, verdict: CollectiveVerdict) -> CollectiveRun {
        CollectiveRun {
            at: 0.0,
            gpus: vec![0, 1],
            uuids: key.split(',').map(String::from).collect(),
            path: "NVLink".into(),
            bound: None,
            baseline: None,
            bus_bandwidth: Some(figure),
            nccl: None,
            verdict,
            detail: String::new(),
        }
    }

    #[test]
    fn the_baseline_is_the_median_of_the_same_gpus_latest_runs_that_did_not_fail() {
        let mut history = CollectiveHistory::default();
        history.keep(&run("A,B", 100.0, CollectiveVerdict::Passed));
        history.keep(&run("A,B", 300.0, CollectiveVerdict::Passed));
        assert_eq!(history.baseline("A,B", 10), None, "two runs are too few");
        history.keep(&run("A,B", 1.0, CollectiveVerdict::Failed));
        history.keep(&run("A,C", 50.0, CollectiveVerdict::Passed));
        assert_eq!(
            history.baseline("A,B", 10),
            None,
            "a failed run and other GPUs count for nothing"
        );
        history.keep(&run("A,B", 200.0, CollectiveVerdict::Slow));
        assert_eq!(history.baseline("A,B", 10), Some((200.0, 3)));
        history.keep(&run("A,B", 400.0, CollectiveVerdict::Passed));
        assert_eq!(history.baseline("A,B", 10), Some((250.0, 4)));
        assert_eq!(history.baseline("A,B", 3), Some((300.0, 3)), "the latest three");
        for _ in 0..MAX_FIGURES {
            history.keep(&run("A,C", 50.0, CollectiveVerdict::Passed));
        }
        assert_eq!(history.figures.len(), MAX_FIGURES);
        assert_eq!(history.baseline("A,B", 10), None, "the oldest go");
    }
}
