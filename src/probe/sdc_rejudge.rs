//! When a key's reference digest is replaced (a majority of the node's GPUs now agrees on
//! another digest), every verdict judged against the old one is judged again: a suspect
//! whose digest agrees with the new reference is lifted, with a journal row that says why,
//! and a GPU whose latest clean digest differs from it becomes a suspect. Without this a
//! fresh node whose first probed GPU is the bad one would keep blaming the healthy GPUs and
//! never look at the bad one again (docs/probe.md, "Silent data corruption").

use crate::model::probe::{SdcKey, SdcLift, SdcOutcome, SdcReference, SdcSuspect};
use std::collections::BTreeMap;

/// What judging the key's GPUs again against a new reference changes.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Rejudgement {
    /// Suspects lifted, by uuid.
    pub lifted: Vec<(String, SdcLift)>,
    /// GPUs that now differ from the reference, by uuid.
    pub suspected: Vec<(String, SdcSuspect)>,
}

/// Judges the latest outcomes `latest` (uuid, GPU index, outcome) of `key` again against
/// `reference`, which replaced `old` (None when the key had none). `suspects` are the
/// current suspects; `skip` is the GPU just judged by the caller (its verdict is its own).
/// Only a suspicion that rested on the digest alone is lifted: one whose own results were
/// wrong (an exact check, runs that differ) stays, whatever any reference says.
pub(crate) fn rejudge(
    key: &SdcKey,
    reference: &SdcReference,
    old: Option<&SdcReference>,
    latest: &[(String, u32, SdcOutcome)],
    suspects: &BTreeMap<String, SdcSuspect>,
    skip: &str,
    now: f64,
) -> Rejudgement {
    let mut out = Rejudgement::default();
    let gave = gpu_list(reference, latest);
    for (uuid, index, outcome) in latest {
        if uuid == skip || &outcome.key != key || !outcome.clean() {
            continue;
        }
        match suspects.get(uuid).filter(|s| &s.key == key) {
            Some(suspect) if outcome.digest == reference.digest && suspect.digest == outcome.digest => {
                let why = format!(
                    "its digest {} agrees with the new reference of {}, which GPUs {} gave{}; it was \
                     suspected against a reference that a majority does not share",
                    outcome.digest,
                    key.describe(),
                    gave,
                    old.map_or(String::new(), |o| format!(" (it replaced {})", o.digest))
                );
                log::warn!(gpu_uuid = uuid; "GPU {index}: the suspicion of wrong results is lifted: {why}");
                out.lifted.push((
                    uuid.clone(),
                    SdcLift {
                        at: now,
                        gpu: *index,
                        why,
                        key: key.clone(),
                        digest: outcome.digest.clone(),
                    },
                ));
            }
            None if outcome.digest != reference.digest => {
                let fault = format!(
                    "its digest {} differs from {}, which GPUs {} of the same model gave (judged again when \
                     that became the node's reference)",
                    outcome.digest, reference.digest, gave
                );
                log::error!(gpu_uuid = uuid; "GPU {index} gave wrong results (silent data corruption suspected): {fault}");
                out.suspected.push((
                    uuid.clone(),
                    SdcSuspect {
                        at: now,
                        gpu: *index,
                        faults: vec![fault],
                        key: key.clone(),
                        digest: outcome.digest.clone(),
                    },
                ));
            }
            _ => {}
        }
    }
    out
}

/// The indexes of the GPUs that gave the reference, where their latest outcomes know them
/// ("1, 2"); the count otherwise.
fn gpu_list(reference: &SdcReference, latest: &[(String, u32, SdcOutcome)]) -> String {
    let mut indexes: Vec<u32> = latest
        .iter()
        .filter(|(uuid, _, _)| reference.gpus.contains(uuid))
        .map(|(_, index, _)| *index)
        .collect();
    indexes.sort_unstable();
    indexes.dedup();
    if indexes.len() == reference.gpus.len() {
        indexes.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    } else {
        format!("({} of them)", reference.gpus.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::sdc::{CANARY_VERSION, judge};

    fn key() -> SdcKey {
        SdcKey {
            model: "NVIDIA H200".into(),
            sms: 132,
            driver: "580.159.04".into(),
            cublas: "130100".into(),
            canary: CANARY_VERSION,
        }
    }

    fn outcome(digest: &str) -> SdcOutcome {
        SdcOutcome {
            exact: vec![],
            side: 512,
            key: key(),
            digest: digest.into(),
            parts: vec![digest.into()],
            repeats: 200,
            repeats_differing: 0,
        }
    }

    /// The fresh node of the field report: GPU 0 computes wrong and is probed first; GPUs 1
    /// and 2 are right. Judged one after the other as the scheduler does, GPU 1 is never a
    /// suspect, and GPU 0 becomes one once 1 and 2 agree.
    #[test]
    fn on_a_fresh_node_the_bad_gpu_probed_first_is_found_and_no_good_one_is_blamed() {
        let mut latest: Vec<(String, u32, SdcOutcome)> = Vec::new();
        let mut reference: Option<SdcReference> = None;
        let mut suspects: BTreeMap<String, SdcSuspect> = BTreeMap::new();
        for (uuid, index, digest) in [("GPU-0", 0, "bad0"), ("GPU-1", 1, "good"), ("GPU-2", 2, "good")] {
            let mine = outcome(digest);
            let j = judge(uuid, &mine, &latest, reference.as_ref(), 10.0 + f64::from(index));
            if !j.faults.is_empty() {
                suspects.insert(
                    uuid.into(),
                    SdcSuspect {
                        at: 10.0,
                        gpu: index,
                        faults: j.faults.clone(),
                        key: key(),
                        digest: digest.into(),
                    },
                );
            }
            if index == 1 {
                assert!(j.faults.is_empty(), "GPU 1 against GPU 0's word alone: {j:?}");
                assert!(
                    j.undecided.as_deref().is_some_and(|u| u.contains("only one other GPU")),
                    "{j:?}"
                );
            }
            latest.retain(|(u, _, _)| u != uuid);
            latest.push((uuid.to_string(), index, mine));
            if let Some(new) = j.reference {
                if reference.as_ref().is_none_or(|r| r.digest != new.digest) {
                    let again = rejudge(&key(), &new, reference.as_ref(), &latest, &suspects, uuid, 20.0);
                    for (u, s) in again.suspected {
                        suspects.insert(u, s);
                    }
                    for (u, _) in again.lifted {
                        suspects.remove(&u);
                    }
                }
                reference = Some(new);
            }
        }
        assert_eq!(suspects.keys().collect::<Vec<_>>(), ["GPU-0"]);
        assert!(
            suspects["GPU-0"].faults[0].contains("differs from good, which GPUs 1, 2"),
            "{suspects:?}"
        );
        assert_eq!(reference.unwrap().digest, "good");
    }

    #[test]
    fn a_suspect_that_agrees_with_the_new_reference_is_lifted_and_one_wrong_on_its_own_is_not() {
        let old = SdcReference {
            digest: "bad0".into(),
            parts: vec![],
            since: 1.0,
            gpus: vec!["GPU-0".into(), "GPU-9".into()],
        };
        let new = SdcReference {
            digest: "good".into(),
            parts: vec![],
            since: 5.0,
            gpus: vec!["GPU-2".into(), "GPU-3".into()],
        };
        let suspect = |gpu: u32, digest: &str| SdcSuspect {
            at: 2.0,
            gpu,
            faults: vec!["its digest differs".into()],
            key: key(),
            digest: digest.into(),
        };
        let mut wrong_alone = outcome("good");
        wrong_alone.repeats_differing = 2;
        let latest = vec![
            ("GPU-0".to_string(), 0, outcome("bad0")),
            ("GPU-1".to_string(), 1, outcome("good")),
            ("GPU-2".to_string(), 2, outcome("good")),
            ("GPU-3".to_string(), 3, outcome("good")),
            ("GPU-4".to_string(), 4, wrong_alone),
        ];
        let suspects: BTreeMap<String, SdcSuspect> = [
            ("GPU-1".to_string(), suspect(1, "good")),
            ("GPU-4".to_string(), suspect(4, "good")),
        ]
        .into();
        let again = rejudge(&key(), &new, Some(&old), &latest, &suspects, "GPU-3", 9.0);
        let lifted: Vec<&str> = again.lifted.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(lifted, ["GPU-1"], "GPU 4's own runs differ: it stays a suspect");
        let why = &again.lifted[0].1.why;
        assert!(
            why.contains("agrees with the new reference") && why.contains("GPUs 2, 3 gave"),
            "{why}"
        );
        assert!(why.contains("it replaced bad0"), "{why}");
        let suspected: Vec<&str> = again.suspected.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(suspected, ["GPU-0"]);
        // Another key's GPUs are not judged against this reference.
        let mut other = outcome("zzzz");
        other.key.model = "NVIDIA H100".into();
        let again = rejudge(
            &key(),
            &new,
            None,
            &[("GPU-7".into(), 7, other)],
            &BTreeMap::new(),
            "",
            9.0,
        );
        assert_eq!(again, Rejudgement::default());
    }
}
