//! The journal's `sdc` and `memtest` rows (docs/probe.md, "Silent data corruption"): each GPU the
//! correctness canary found computing wrong, with the evidence an RMA needs, and each key's
//! agreement digest as it was first given or replaced, each suspicion lifted when its reference
//! was replaced, and each GPU the HBM pattern test
//! found with memory that reads back wrong. A restart's seed reads them back
//! (journal/store/read.rs, `sdc`): a suspect stays one across restarts and reboots until a person
//! clears the GPU, and a single-GPU node keeps comparing with its earlier digest. And the
//! `collective` rows: each all-reduce across the node's GPUs the daemon ran, judged; the seed
//! takes back the node's figures (its baseline) and the latest verdict.

use crate::journal::event::{Event, GpuRef, Kind};
use crate::model::Snapshot;
use crate::model::collective::CollectiveRun;
use crate::model::probe::{HbmSuspect, SdcKey, SdcLift, SdcReference, SdcSuspect};
use serde_json::json;
use std::collections::BTreeMap;

/// What the journal last wrote of the canary's suspects and references.
#[derive(Debug, Default)]
pub(crate) struct SdcRows {
    suspects: BTreeMap<String, SdcSuspect>,
    references: BTreeMap<SdcKey, SdcReference>,
    /// Suspicions lifted (written once each).
    lifts: BTreeMap<String, SdcLift>,
    /// The HBM pattern test's memory errors (`memtest` rows), kept the same way.
    hbm: BTreeMap<String, HbmSuspect>,
    /// The latest all-reduce written (`collective` rows).
    collective: Option<CollectiveRun>,
}

impl SdcRows {
    /// Starts from what the seed gave the daemon: those rows are written already.
    pub(crate) fn from_seed(probes: &crate::model::probe::ProbeSnapshot) -> SdcRows {
        SdcRows {
            suspects: probes.sdc_suspects.clone(),
            references: probes.sdc_references.clone(),
            lifts: probes.sdc_lifts.clone(),
            hbm: probes.hbm_suspects.clone(),
            collective: probes.collective.clone(),
        }
    }

    /// The rows for what changed since the last look.
    pub(crate) fn look(&mut self, snapshot: &Snapshot, now: f64) -> Vec<Event> {
        let probe = &snapshot.probe;
        let mut rows = Vec::new();
        for (uuid, lift) in &probe.sdc_lifts {
            if self.lifts.get(uuid) != Some(lift) {
                rows.push(lift_row(snapshot, uuid, lift, now));
                self.lifts.insert(uuid.clone(), lift.clone());
                self.suspects.remove(uuid);
            }
        }
        for (uuid, suspect) in &probe.sdc_suspects {
            if self.suspects.get(uuid) != Some(suspect) {
                rows.push(suspect_row(snapshot, uuid, suspect, now));
                self.suspects.insert(uuid.clone(), suspect.clone());
            }
        }
        for (uuid, suspect) in &probe.hbm_suspects {
            if self.hbm.get(uuid) != Some(suspect) {
                rows.push(hbm_row(snapshot, uuid, suspect, now));
                self.hbm.insert(uuid.clone(), suspect.clone());
            }
        }
        if let Some(run) = probe
            .collective
            .as_ref()
            .filter(|run| self.collective.as_ref() != Some(*run))
        {
            rows.push(collective_row(run, now));
            self.collective = Some(run.clone());
        }
        for (key, reference) in &probe.sdc_references {
            if self.references.get(key) != Some(reference) {
                rows.push(reference_row(key, reference, now));
                self.references.insert(key.clone(), reference.clone());
            }
        }
        rows
    }
}

/// A GPU found computing wrong, with the evidence.
pub(crate) fn suspect_row(snapshot: &Snapshot, uuid: &str, suspect: &SdcSuspect, now: f64) -> Event {
    Event::new(
        now,
        Kind::Sdc,
        Some(GpuRef::in_snapshot(snapshot, uuid)),
        format!(
            "wrong results in the correctness canary (silent data corruption suspected): {} (agreement digest {}; {})",
            suspect.faults.join("; "),
            suspect.digest,
            suspect.key.describe()
        ),
        json!({"suspect": suspect}),
    )
}

/// A suspicion lifted because the reference it was judged against was replaced: the seed
/// reads it as the GPU's newest word, so the suspect does not come back after a restart.
pub(crate) fn lift_row(snapshot: &Snapshot, uuid: &str, lift: &SdcLift, now: f64) -> Event {
    Event::new(
        now,
        Kind::Sdc,
        Some(GpuRef::in_snapshot(snapshot, uuid)),
        format!("the suspicion of wrong results is lifted: {}", lift.why),
        json!({"lifted": lift}),
    )
}

/// A key's agreement digest: what later probes of GPUs with that key must give.
pub(crate) fn reference_row(key: &SdcKey, reference: &SdcReference, now: f64) -> Event {
    Event::new(
        now,
        Kind::Sdc,
        None,
        format!(
            "agreement digest {} for {} (from {} GPU(s))",
            reference.digest,
            key.describe(),
            reference.gpus.len()
        ),
        json!({"key": key, "reference": reference}),
    )
}

/// A GPU whose memory read back wrong, with the failing offsets.
pub(crate) fn hbm_row(snapshot: &Snapshot, uuid: &str, suspect: &HbmSuspect, now: f64) -> Event {
    Event::new(
        now,
        Kind::Memtest,
        Some(GpuRef::in_snapshot(snapshot, uuid)),
        format!(
            "memory read back wrong in the HBM pattern test: {}",
            suspect.faults.join("; ")
        ),
        json!({"suspect": suspect}),
    )
}

/// An all-reduce across the node's GPUs, judged: a node row (no one GPU is its subject).
pub(crate) fn collective_row(run: &CollectiveRun, now: f64) -> Event {
    Event::new(
        now,
        Kind::Collective,
        None,
        format!(
            "all-reduce across {} over {}: {} ({})",
            run.gpu_list(),
            run.path,
            run.verdict.label(),
            run.detail
        ),
        json!({"run": run}),
    )
}
