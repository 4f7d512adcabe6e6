//! The daemon's all-reduce across the node's GPUs (docs/probe.md, "The GPUs together"). After
//! the node's last pending validation passed (the idle node's sweep, or a validation after a
//! clear), when every NVIDIA GPU of the node is idle, a probe child runs `gpuwarden probe
//! --collective`. Its bus bandwidth is judged against what the path between the GPUs should
//! carry (NVLink: links x their rate; PCIe: generation x width where there is no NVLink) and
//! against the node's own earlier runs. Falling short is `collective_slow`, failing (an NCCL
//! error, a wrong sum, a hang) `collective_failed`: node findings (health/collective.rs) that
//! name the GPUs and the path. Where NCCL is not installed it is said once and skipped.
//!
//! It runs while the validation it follows is still pending, and its verdict is in the
//! snapshot before that validation's end: the node never looks ready in between.

use super::child::RunError;
use super::{ProbeError, precheck};
use crate::config::Collective;
use crate::config::settings::ChildSettings;
use crate::model::collective::{CollectiveRun, CollectiveVerdict};
use crate::model::health::{HealthState, RuleId};
use crate::model::probe::ProbeSnapshot;
use crate::model::probe::{CollectiveOutcome, Unit};
use crate::model::{DeviceSnapshot, Snapshot, Vendor};
use crate::service::stop::Stop;
use crate::service::versioned::Versioned;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long after a probe ends a poll's utilization no longer shows it: NVML's utilization is
/// the share of its last sample period (1/6 s to 1 s) a kernel ran, read during the round.
const UTILIZATION_FORGETS: Duration = Duration::from_secs(2);
/// The longest the all-reduce waits for such a poll (a daemon whose poll loop is stuck).
const MAX_SETTLE: Duration = Duration::from_secs(30);

/// The path between the GPUs and what it should carry one way.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Path {
    /// "NVLink, 18 links x 26.6 GB/s per GPU", "PCIe Gen5 x16".
    pub words: String,
    /// Bytes/s, the slowest GPU's; `None` where the driver does not say enough.
    pub bound: Option<f64>,
    /// The share of `bound` below which the bus bandwidth is slow.
    pub share: f64,
}

/// One PCIe lane's rate one way, bytes/s, by generation (after line coding: 8b/10b up to
/// Gen2, 128b/130b for Gen3 to Gen5, Gen6's FLIT mode 242/256).
fn pcie_lane_rate(generation: u32) -> Option<f64> {
    let (transfers, coding) = match generation {
        1 => (2.5e9, 0.8),
        2 => (5e9, 0.8),
        3 => (8e9, 128.0 / 130.0),
        4 => (16e9, 128.0 / 130.0),
        5 => (32e9, 128.0 / 130.0),
        6 => (64e9, 242.0 / 256.0),
        _ => return None,
    };
    Some(transfers * coding / 8.0)
}

/// The path between `gpus`: NVLink where every one has links, else PCIe.
pub(crate) fn path(gpus: &[&DeviceSnapshot], settings: &Collective) -> Path {
    let readings: Vec<(u32, &crate::model::DeviceReadings)> = gpus
        .iter()
        .filter_map(|d| Some((d.identity.index, d.readings.as_deref()?)))
        .collect();
    let nvlinks: Vec<(u32, &crate::model::links::NvLinks)> = readings
        .iter()
        .filter_map(|(i, r)| Some((*i, r.nvlinks.as_deref().filter(|n| n.board_links > 0)?)))
        .collect();
    if !nvlinks.is_empty() && nvlinks.len() == gpus.len() {
        nvlink_path(&readings, &nvlinks, settings.nvlink_share)
    } else {
        pcie_path(&readings, gpus.len(), settings.pcie_share)
    }
}

/// " (GPU 1 has 16 of 18 up; ...)", or nothing.
fn in_brackets(notes: Vec<String>) -> String {
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    }
}

/// NVLink: the board's links at their rate, the slowest GPU's; what is down or outside the
/// fabric is said.
fn nvlink_path(
    readings: &[(u32, &crate::model::DeviceReadings)],
    nvlinks: &[(u32, &crate::model::links::NvLinks)],
    share: f64,
) -> Path {
    let mut notes: Vec<String> = nvlinks
        .iter()
        .filter(|(_, n)| n.links_up() < n.board_links)
        .map(|(i, n)| format!("GPU {i} has {} of {} up", n.links_up(), n.board_links))
        .collect();
    notes.extend(
        readings
            .iter()
            .filter(|(_, r)| r.fabric.as_ref().is_some_and(|f| f.degraded()))
            .map(|(i, _)| format!("GPU {i} has not joined the NVLink fabric")),
    );
    let notes = in_brackets(notes);
    let per_gpu: Option<Vec<(u32, f64)>> = nvlinks
        .iter()
        .map(|(_, n)| Some((n.board_links, n.link_rate()?)))
        .collect();
    let slowest = per_gpu.and_then(|all| {
        all.into_iter()
            .min_by(|a, b| (f64::from(a.0) * a.1).total_cmp(&(f64::from(b.0) * b.1)))
    });
    match slowest {
        Some((links, rate)) => Path {
            words: format!(
                "NVLink, {links} links x {} per GPU{notes}",
                Unit::BytesPerSecond.human(rate)
            ),
            bound: Some(f64::from(links) * rate),
            share,
        },
        None => Path {
            words: format!("NVLink (the driver does not say its rate){notes}"),
            bound: None,
            share,
        },
    }
}

/// PCIe: each GPU's generation and width at their most, the slowest GPU's; a link trained
/// narrower now is said.
fn pcie_path(readings: &[(u32, &crate::model::DeviceReadings)], gpus: usize, share: f64) -> Path {
    let lanes: Option<Vec<(u32, u32, f64)>> = readings
        .iter()
        .map(|(_, r)| {
            let (generation, width) = (r.pcie.generation_max?, r.pcie.width_max?);
            Some((generation, width, pcie_lane_rate(generation)? * f64::from(width)))
        })
        .collect();
    let notes = in_brackets(
        readings
            .iter()
            .filter(|(_, r)| r.pcie.width_degraded() == Some(true))
            .map(|(i, r)| format!("GPU {i} at x{} now", r.pcie.width.unwrap_or(0)))
            .collect(),
    );
    match lanes
        .filter(|l| l.len() == gpus)
        .and_then(|l| l.into_iter().min_by(|a, b| a.2.total_cmp(&b.2)))
    {
        Some((generation, width, bound)) => Path {
            words: format!("PCIe Gen{generation} x{width}{notes}"),
            bound: Some(bound),
            share,
        },
        None => Path {
            words: format!("PCIe (the driver does not say its generation and width){notes}"),
            bound: None,
            share,
        },
    }
}

/// What the probe child's all-reduce came to, before it is judged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ran {
    /// It ran to the end (its sums may still be wrong).
    Measured(CollectiveOutcome),
    /// NCCL failed, the child died, or it hung: why, in words.
    Failed(String),
}

/// A run's verdict: failed (NCCL's error, a hang, a wrong sum), slow (below the path's share
/// or `regression_pct` below the baseline), or passed.
pub(crate) fn judge(
    result: Ran,
    path: &Path,
    baseline: Option<(f64, usize)>,
    regression_pct: f64,
) -> (CollectiveVerdict, String, Option<CollectiveOutcome>) {
    let gb = |v: f64| Unit::BytesPerSecond.human(v);
    let outcome = match result {
        Ran::Failed(why) => return (CollectiveVerdict::Failed, why, None),
        Ran::Measured(outcome) => outcome,
    };
    if let Some(wrong) = &outcome.wrong_sum {
        return (
            CollectiveVerdict::Failed,
            format!("the all-reduce gave wrong sums: {wrong}"),
            Some(outcome),
        );
    }
    let busbw = outcome.bus_bandwidth;
    let mut short = Vec::new();
    if let Some(bound) = path.bound.filter(|b| busbw < path.share * b) {
        short.push(format!(
            "{} is {:.0}% of what the path carries one way ({}; probe.collective shares {:.2})",
            gb(busbw),
            100.0 * busbw / bound,
            gb(bound),
            path.share
        ));
    }
    if let Some((median, runs)) = baseline.filter(|(m, _)| busbw < m * (1.0 - regression_pct / 100.0)) {
        short.push(format!(
            "{} is {:.1}% below the node's median of {runs} earlier runs ({}; probe.regression_pct {regression_pct})",
            gb(busbw),
            crate::health::baseline::percent_below(busbw, median),
            gb(median)
        ));
    }
    if short.is_empty() {
        let detail = format!("bus bandwidth {} (NCCL {})", gb(busbw), outcome.nccl);
        (CollectiveVerdict::Passed, detail, Some(outcome))
    } else {
        (CollectiveVerdict::Slow, short.join("; "), Some(outcome))
    }
}

/// What the probe child printed for `--collective`.
#[derive(Deserialize)]
#[serde(untagged)]
enum ChildOutput {
    Outcome(CollectiveOutcome),
    Error { error: ProbeError },
}

/// Whether "NCCL is not installed" was said since the daemon started (or since NCCL last
/// loaded): it is said once, not at every validation.
static SAID_NO_NCCL: AtomicBool = AtomicBool::new(false);

/// Why the all-reduce does not run now, if it does not: `Some(None)` when it is not due (off,
/// fewer than two NVIDIA GPUs, another validation still to come), `Some(why)` when it cannot
/// (work on the node, something unhealthy, a GPU busy).
fn not_now(snapshot: &Snapshot, settings: &ChildSettings) -> Option<Option<String>> {
    let nvidia: Vec<&DeviceSnapshot> = snapshot
        .devices
        .iter()
        .filter(|d| d.identity.vendor == Vendor::Nvidia)
        .collect();
    let pending = nvidia
        .iter()
        .filter(|d| snapshot.validations.get(&d.identity.uuid).is_some_and(|v| v.pending()))
        .count();
    // The validation this follows is pending still; any other runs it when it ends.
    if !settings.probe.collective.run || nvidia.len() < 2 || pending > 1 {
        return Some(None);
    }
    if let Some(work) = super::sweep::work_on_node(snapshot) {
        return Some(Some(work));
    }
    // A GPU held for something else would fail it for that: its finding says enough.
    let unhealthy = snapshot
        .devices
        .iter()
        .flat_map(|d| d.health.findings.iter().map(move |f| (Some(d.identity.index), f)))
        .chain(snapshot.node_findings.iter().map(|f| (None, f)))
        .find(|(_, f)| f.severity == HealthState::Unhealthy && f.reason != RuleId::Validating);
    if let Some((gpu, finding)) = unhealthy {
        let whose = gpu.map_or("the node".to_string(), |i| format!("GPU {i}"));
        return Some(Some(format!("{whose} is unhealthy ({})", finding.reason.label())));
    }
    nvidia
        .iter()
        .find_map(|d| precheck(d, &settings.probe).map(|(_, why)| Some(format!("GPU {}: {why}", d.identity.index))))
}

/// Runs the all-reduce after a validation passed, if it is due, and keeps its verdict in
/// `state`; what the validation's detail should add ("the all-reduce ... passed", or why it
/// did not run). `None`: nothing to add (it is not due, or the daemon stops).
pub(crate) fn after_validation(
    store: &crate::snapshot::store::Store,
    settings: &ChildSettings,
    state: &Versioned<ProbeSnapshot>,
    stop: &Stop,
) -> Option<String> {
    // The validation's own probe just ended: a poll from before it forgot it would find the
    // last GPU busy with it (on a real H200 pair every sweep's all-reduce was skipped so).
    let snapshot = settled(store, Instant::now() + UTILIZATION_FORGETS, MAX_SETTLE, stop)?;
    // Counted and said in the validation's note.
    let skipped = |why: &str| {
        state.update(|s| *s.collective_runs.entry("skipped").or_default() += 1);
        Some(format!("the all-reduce across the node's GPUs did not run: {why}"))
    };
    if let Some(why) = not_now(&snapshot, settings) {
        return skipped(&why?);
    }
    let gpus: Vec<&DeviceSnapshot> = snapshot
        .devices
        .iter()
        .filter(|d| d.identity.vendor == Vendor::Nvidia)
        .collect();
    let at = crate::model::unix_now();
    log::info!(
        "the all-reduce across the node's {} NVIDIA GPUs starts (after the node's last validation)",
        gpus.len()
    );
    let result = match super::child::run_process(&["--collective"], settings, stop) {
        _ if stop.is_stopped() => return None,
        Ok((stdout, status)) => match serde_json::from_str::<ChildOutput>(stdout.trim()) {
            Ok(ChildOutput::Outcome(outcome)) => Ran::Measured(outcome),
            Ok(ChildOutput::Error {
                error: ProbeError::Busy { message, .. },
            }) => return skipped(&message),
            Ok(ChildOutput::Error {
                error: ProbeError::NoDriver(why),
            }) => {
                if !SAID_NO_NCCL.swap(true, Ordering::Relaxed) {
                    log::warn!("the all-reduce across the node's GPUs does not run: {why} (said once)");
                }
                return skipped(&why);
            }
            Ok(ChildOutput::Error { error }) => Ran::Failed(error.to_string()),
            Err(_) => Ran::Failed(format!(
                "the probe process ended with {} and printed no result",
                status.map_or("a signal".to_string(), |c| format!("exit status {c}"))
            )),
        },
        Err((RunError::Timeout, why)) => Ran::Failed(format!("it hung: {why}")),
        Err((RunError::Error, why)) => Ran::Failed(why),
    };
    SAID_NO_NCCL.store(false, Ordering::Relaxed);
    Some(keep(state, &gpus, at, result, &settings.probe))
}

/// The snapshot of the first poll round published at or after `after`, waiting at most
/// `max_wait` (then the latest, which a stuck poll loop leaves); `None` when the daemon stops.
fn settled(
    store: &crate::snapshot::store::Store,
    after: Instant,
    max_wait: Duration,
    stop: &Stop,
) -> Option<Arc<Snapshot>> {
    let deadline = Instant::now() + max_wait;
    while store.published_at().is_none_or(|at| at < after) && Instant::now() < deadline {
        if stop.sleep(Duration::from_millis(100)) {
            return None;
        }
    }
    Some(store.latest())
}

/// Judges a run, keeps it in `state` (the verdict the findings read, the node's figures),
/// says it in the log; the validation's note.
fn keep(
    state: &Versioned<ProbeSnapshot>,
    gpus: &[&DeviceSnapshot],
    at: f64,
    result: Ran,
    settings: &crate::config::Probe,
) -> String {
    let path = path(gpus, &settings.collective);
    let uuids: Vec<String> = gpus.iter().map(|d| d.identity.uuid.clone()).collect();
    let baseline = state
        .get()
        .collective_history
        .baseline(&uuids.join(","), settings.baseline_probes);
    let (verdict, detail, outcome) = judge(result, &path, baseline, settings.regression_pct);
    let run = CollectiveRun {
        at,
        gpus: gpus.iter().map(|d| d.identity.index).collect(),
        uuids,
        path: path.words,
        bound: path.bound,
        baseline,
        bus_bandwidth: outcome.as_ref().map(|o| o.bus_bandwidth),
        nccl: outcome.map(|o| o.nccl),
        verdict,
        detail,
    };
    let note = format!(
        "the all-reduce across {} over {} {}: {}",
        run.gpu_list(),
        run.path,
        verdict.label(),
        run.detail
    );
    match verdict {
        CollectiveVerdict::Passed => log::info!("{note}"),
        CollectiveVerdict::Slow => log::warn!("{note}"),
        CollectiveVerdict::Failed => log::error!("{note}"),
    }
    state.update(|s| {
        s.collective_history.keep(&run);
        *s.collective_runs.entry(verdict.label()).or_default() += 1;
        s.collective = Some(run);
    });
    note
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::links::{NvLink, NvLinks};
    use crate::model::{DeviceReadings, Pcie};
    use std::sync::Arc;

    fn gpu(index: u32, readings: DeviceReadings) -> DeviceSnapshot {
        DeviceSnapshot::for_test(
            index,
            Vendor::Nvidia,
            &format!("0000:{:02x}:00.0", 0x19 + index),
            readings,
        )
    }

    fn nvlinked(index: u32, up: u32, rate: Option<f64>) -> DeviceSnapshot {
        let links = (0..18)
            .map(|link| NvLink {
                link,
                up: Some(link < up),
                speed_bytes_per_second: rate.filter(|_| link < up),
                ..Default::default()
            })
            .collect();
        gpu(
            index,
            DeviceReadings {
                nvlinks: Some(Arc::new(NvLinks { board_links: 18, links })),
                ..Default::default()
            },
        )
    }

    fn pcie(index: u32, generation: u32, width: u32, width_now: u32) -> DeviceSnapshot {
        gpu(
            index,
            DeviceReadings {
                pcie: Pcie {
                    generation: Some(generation),
                    generation_max: Some(generation),
                    width: Some(width_now),
                    width_max: Some(width),
                    replay_errors: None,
                },
                ..Default::default()
            },
        )
    }

    fn outcome(busbw: f64) -> CollectiveOutcome {
        CollectiveOutcome {
            gpus: 2,
            bytes: 256 << 20,
            nccl: "2.27.3".into(),
            bus_bandwidth: busbw,
            burst: None,
            wrong_sum: None,
        }
    }

    #[test]
    fn nvlink_carries_its_links_at_their_rate_and_says_which_are_down() {
        let settings = Collective::default();
        let (a, b) = (nvlinked(0, 18, Some(26.562e9)), nvlinked(1, 16, Some(26.562e9)));
        let p = path(&[&a, &b], &settings);
        assert_eq!(p.words, "NVLink, 18 links x 26.6 GB/s per GPU (GPU 1 has 16 of 18 up)");
        // What the board should carry: a link that is down counts, so the run falls short.
        assert!((p.bound.unwrap() - 18.0 * 26.562e9).abs() < 1.0);
        assert_eq!(p.share, 0.5);
        let unsaid = nvlinked(1, 18, None);
        let p = path(&[&a, &unsaid], &settings);
        assert_eq!(
            (p.words.as_str(), p.bound),
            ("NVLink (the driver does not say its rate)", None)
        );
    }

    #[test]
    fn pcie_carries_generation_times_width_of_the_slowest_gpu() {
        let settings = Collective::default();
        let (a, b) = (pcie(0, 5, 16, 16), pcie(1, 4, 16, 8));
        let p = path(&[&a, &b], &settings);
        assert_eq!(p.words, "PCIe Gen4 x16 (GPU 1 at x8 now)");
        assert!((p.bound.unwrap() - 16e9 * 128.0 / 130.0 / 8.0 * 16.0).abs() < 1.0);
        assert_eq!(p.share, 0.25);
        // A GPU with NVLink beside one without: the all-reduce goes over PCIe.
        let c = nvlinked(2, 18, Some(26.562e9));
        assert!(path(&[&a, &c], &settings).words.starts_with("PCIe"));
        assert_eq!(pcie_lane_rate(7), None);
    }

    #[test]
    fn the_all_reduce_judges_a_poll_that_no_longer_shows_the_probe() {
        let store = Arc::new(crate::snapshot::store::Store::new());
        let busy = |utilization: f64, generation: u64| Snapshot {
            generation,
            devices: vec![gpu(
                1,
                DeviceReadings {
                    utilization_ratio: Some(utilization),
                    ..Default::default()
                },
            )],
            ..Default::default()
        };
        // The poll during the validation's probe, then one after it.
        store.publish(busy(1.0, 1));
        let later = store.clone();
        let poller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            later.publish(busy(0.0, 2));
        });
        let shutdown = crate::service::stop::Shutdown::new();
        let stop = shutdown.handle("test");
        let after = Instant::now() + Duration::from_millis(200);
        let seen = settled(&store, after, Duration::from_secs(10), &stop).unwrap();
        assert_eq!(
            seen.generation, 2,
            "the poll from before the probe was forgotten is not judged"
        );
        let _ = poller.join();
        // A poll loop that publishes nothing more: the latest, after the wait.
        let started = Instant::now();
        let seen = settled(
            &store,
            Instant::now() + Duration::from_secs(60),
            Duration::from_millis(300),
            &stop,
        )
        .unwrap();
        assert_eq!(seen.generation, 2);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // The daemon stops: nothing.
        shutdown.stop();
        assert!(
            settled(
                &store,
                Instant::now() + Duration::from_secs(60),
                Duration::from_secs(60),
                &stop
            )
            .is_none()
        );
    }

    #[test]
    fn a_run_is_failed_slow_against_the_path_or_the_baseline_or_passed() {
        let p = Path {
            words: "NVLink".into(),
            bound: Some(478e9),
            share: 0.5,
        };
        let (verdict, detail, _) = judge(
            Ran::Failed("ncclAllReduce: unhandled system error".into()),
            &p,
            None,
            7.0,
        );
        assert_eq!(
            (verdict, detail.as_str()),
            (CollectiveVerdict::Failed, "ncclAllReduce: unhandled system error")
        );
        let wrong = CollectiveOutcome {
            wrong_sum: Some("CUDA device 1 received 1 wrong sum(s)".into()),
            ..outcome(400e9)
        };
        let (verdict, detail, _) = judge(Ran::Measured(wrong), &p, None, 7.0);
        assert_eq!(verdict, CollectiveVerdict::Failed, "a wrong sum fails however fast");
        assert!(detail.contains("wrong sums: CUDA device 1"), "{detail}");
        let (verdict, detail, _) = judge(Ran::Measured(outcome(200e9)), &p, None, 7.0);
        assert_eq!(verdict, CollectiveVerdict::Slow);
        assert!(
            detail.starts_with("200.0 GB/s is 42% of what the path carries one way (478.0 GB/s"),
            "{detail}"
        );
        let (verdict, detail, _) = judge(Ran::Measured(outcome(300e9)), &p, Some((360e9, 5)), 7.0);
        assert_eq!(verdict, CollectiveVerdict::Slow);
        assert!(
            detail.contains("16.7% below the node's median of 5 earlier runs (360.0 GB/s"),
            "{detail}"
        );
        let (verdict, detail, _) = judge(Ran::Measured(outcome(350e9)), &p, Some((360e9, 5)), 7.0);
        assert_eq!(
            (verdict, detail.as_str()),
            (CollectiveVerdict::Passed, "bus bandwidth 350.0 GB/s (NCCL 2.27.3)")
        );
        let unknown = Path { bound: None, ..p };
        assert_eq!(
            judge(Ran::Measured(outcome(1e9)), &unknown, None, 7.0).0,
            CollectiveVerdict::Passed,
            "nothing to judge by"
        );
    }
}
