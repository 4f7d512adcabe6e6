//! What the journal remembers of each GPU between snapshots (and restarts: the `gpu_facts`
//! table), and the events that a change in it makes. Pure: a snapshot and the last facts
//! in, events and new facts out.

use crate::journal::event::{Event, GpuRef, Kind};
use crate::model::clock_events::ClockReason;
use crate::model::health::HealthState;
use crate::model::probe::{ProbeErrorNote, ProbeReport};
use crate::model::{DeviceReadings, DeviceSnapshot, EccScope, EccType, Inventory, Snapshot};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

/// A slowdown episode ends when its reason has been clear this long: a reason that flickers
/// every poll is one episode, not one row a second.
pub(crate) const EPISODE_GAP: f64 = 30.0;

/// The clock-event reasons whose episodes are recorded: heat and the board's power brake.
pub(crate) const EPISODE_REASONS: [ClockReason; 4] = [
    ClockReason::SwThermalSlowdown,
    ClockReason::HwThermalSlowdown,
    ClockReason::HwSlowdown,
    ClockReason::HwPowerBrakeSlowdown,
];

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FindingFact {
    pub reason: String,
    pub severity: String,
    pub message: String,
}

/// One GPU as last seen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    pub index: u32,
    pub uuid: String,
    pub serial: Option<String>,
    pub pci_bus_id: String,
    pub name: String,
    pub driver_version: String,
    #[serde(default)]
    pub inventory: Inventory,
    pub verdict: String,
    pub findings: Vec<FindingFact>,
    pub lost: bool,
    pub ecc_uncorrectable: Option<u64>,
    pub remap_pending: Option<bool>,
    pub remap_failed: Option<bool>,
    pub remapped_rows: Option<u64>,
    /// The driver's recovery action as last read (`none`, `gpu_reset`, ...).
    #[serde(default)]
    pub recovery_action: Option<String>,
    pub nvlink_errors: Option<u64>,
    pub nvlinks_down: Option<Vec<u32>>,
    /// The PCIe replay counter, as last read: recorded at first sight and at each start,
    /// never as a change (a marginal link counts up all the time).
    #[serde(default)]
    pub pcie_replays: Option<u64>,
    /// When the latest probe started (Unix seconds).
    pub probe_started: Option<f64>,
    /// The last "probe could not run" the journal wrote: (Unix seconds, why).
    #[serde(default)]
    pub probe_error: Option<(f64, String)>,
    /// Slowdown reasons in an episode now: (started, last seen active).
    #[serde(default)]
    pub episodes: BTreeMap<String, (f64, f64)>,
}

impl GpuFacts {
    /// Whether `other` would store the same facts: everything counts but the findings'
    /// wording (which carries live values), when an episode's reason was last seen, and the
    /// PCIe replay counter, so that a steady GPU costs no write at all. Compared in place, as
    /// it runs for every GPU every round; the destructuring makes a new field a compile error
    /// here until someone decides whether it counts.
    pub fn same_stored_facts(&self, other: &GpuFacts) -> bool {
        let GpuFacts {
            index,
            uuid,
            serial,
            pci_bus_id,
            name,
            driver_version,
            inventory,
            verdict,
            findings,
            lost,
            ecc_uncorrectable,
            remap_pending,
            remap_failed,
            remapped_rows,
            recovery_action,
            nvlink_errors,
            nvlinks_down,
            pcie_replays: _,
            probe_started,
            probe_error,
            episodes,
        } = self;
        *index == other.index
            && *uuid == other.uuid
            && *serial == other.serial
            && *pci_bus_id == other.pci_bus_id
            && *name == other.name
            && *driver_version == other.driver_version
            && *inventory == other.inventory
            && *verdict == other.verdict
            && findings.len() == other.findings.len()
            && findings
                .iter()
                .zip(&other.findings)
                .all(|(a, b)| a.reason == b.reason && a.severity == b.severity)
            && *lost == other.lost
            && *ecc_uncorrectable == other.ecc_uncorrectable
            && *remap_pending == other.remap_pending
            && *remap_failed == other.remap_failed
            && *remapped_rows == other.remapped_rows
            && *recovery_action == other.recovery_action
            && *nvlink_errors == other.nvlink_errors
            && *nvlinks_down == other.nvlinks_down
            && *probe_started == other.probe_started
            && *probe_error == other.probe_error
            && episodes.len() == other.episodes.len()
            && episodes.iter().zip(&other.episodes).all(
                |((reason, (started, _)), (other_reason, (other_started, _)))| {
                    reason == other_reason && started == other_started
                },
            )
    }

    pub fn gpu_ref(&self) -> GpuRef {
        GpuRef {
            uuid: self.uuid.clone(),
            serial: self.serial.clone(),
            pci_bus_id: self.pci_bus_id.clone(),
            index: Some(self.index),
        }
    }
}

/// The facts of `device` now; readings the GPU did not give this time keep their last value
/// (a GPU that stops answering has not had its ECC count reset).
pub(crate) fn facts_of(device: &DeviceSnapshot, snapshot: &Snapshot, last: Option<&GpuFacts>, now: f64) -> GpuFacts {
    let id = &device.identity;
    // Only what carries over is copied from `last`: the rest is read from the device anew.
    let mut f = GpuFacts {
        index: id.index,
        uuid: id.uuid.clone(),
        serial: id.serial.clone(),
        pci_bus_id: id.pci_bus_id.clone(),
        name: id.name.clone(),
        driver_version: id.driver_version.clone(),
        inventory: id.inventory.clone(),
        verdict: device.health.state.label().to_string(),
        findings: device
            .health
            .findings
            .iter()
            .map(|f| FindingFact {
                reason: f.reason.to_string(),
                severity: f.severity.label().to_string(),
                message: f.message.clone(),
            })
            .collect(),
        lost: device.lost,
        probe_started: snapshot
            .probe
            .reports
            .get(&id.uuid)
            .map(|r| r.started)
            .or(last.and_then(|l| l.probe_started)),
        probe_error: last.and_then(|l| l.probe_error.clone()),
        ecc_uncorrectable: last.and_then(|l| l.ecc_uncorrectable),
        remap_pending: last.and_then(|l| l.remap_pending),
        remap_failed: last.and_then(|l| l.remap_failed),
        remapped_rows: last.and_then(|l| l.remapped_rows),
        recovery_action: last.and_then(|l| l.recovery_action.clone()),
        nvlink_errors: last.and_then(|l| l.nvlink_errors),
        nvlinks_down: last.and_then(|l| l.nvlinks_down.clone()),
        pcie_replays: last.and_then(|l| l.pcie_replays),
        episodes: last.map(|l| l.episodes.clone()).unwrap_or_default(),
    };
    if let Some(r) = device.answered() {
        f.ecc_uncorrectable = uncorrectable_ecc(r).or(f.ecc_uncorrectable);
        f.pcie_replays = r.pcie.replay_errors.or(f.pcie_replays);
        f.remap_pending = r.remapped_rows.pending.or(f.remap_pending);
        f.remap_failed = r.remapped_rows.failed.or(f.remap_failed);
        f.recovery_action = r
            .recovery_action
            .map(|a| a.label().to_string())
            .or(f.recovery_action.take());
        if let (Some(c), Some(u)) = (r.remapped_rows.correctable, r.remapped_rows.uncorrectable) {
            f.remapped_rows = Some(c + u);
        }
        if let Some(links) = &r.nvlinks {
            f.nvlink_errors = Some(links.links.iter().map(|l| l.errors_total()).sum());
            f.nvlinks_down = Some(links.links_down().map(|l| l.link).collect());
        }
        for reason in EPISODE_REASONS {
            if r.clock_event_active(reason) {
                f.episodes
                    .entry(reason.to_string())
                    .and_modify(|e| e.1 = now)
                    .or_insert((now, now));
            }
        }
    }
    f
}

/// The uncorrectable ECC errors (aggregate) `r` reports, summed; None where it reports none.
pub(crate) fn uncorrectable_ecc(r: &DeviceReadings) -> Option<u64> {
    r.ecc_errors
        .iter()
        .filter(|e| e.error_type == EccType::Uncorrected && e.scope == EccScope::Aggregate)
        .map(|e| e.count)
        .reduce(|a, b| a + b)
}

/// What the probe says of one GPU now: its latest report, and its last probe that could not
/// run (since that report).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProbeNow<'a> {
    pub report: Option<&'a ProbeReport>,
    pub error: Option<&'a ProbeErrorNote>,
}

impl<'a> ProbeNow<'a> {
    pub(crate) fn of(snapshot: &'a Snapshot, uuid: &str) -> ProbeNow<'a> {
        ProbeNow {
            report: snapshot.probe.reports.get(uuid),
            error: snapshot.probe.last_error.get(uuid),
        }
    }
}

/// A probe that could not run with the same reason is written again only after this long
/// (a node without CUDA retries its validation every minute; the row says how many tries).
pub(crate) const PROBE_ERROR_AGAIN: f64 = 3600.0;

/// The events between `old` (None: a GPU the journal has not seen) and `new`. Ends the
/// slowdown episodes that are over (removing them from `new`).
pub(crate) fn changes(old: Option<&GpuFacts>, new: &mut GpuFacts, probe: ProbeNow, now: f64) -> Vec<Event> {
    let mut out = match old {
        None => first_sight(new, probe.report, now),
        Some(old) => changes_since(old, new, probe.report, now),
    };
    if let Some(note) = probe.error {
        let due = match &new.probe_error {
            None => true,
            Some((at, why)) => *at != note.at && (*why != note.why || note.at - at >= PROBE_ERROR_AGAIN),
        };
        if due {
            new.probe_error = Some((note.at, note.why.clone()));
            out.push(Event::new(
                note.at,
                Kind::Probe,
                Some(new.gpu_ref()),
                format!(
                    "probe could not run: {} ({} attempt(s) in a row)",
                    note.why, note.attempts
                ),
                json!({"error": note.why, "attempts": note.attempts}),
            ));
        }
    }
    out
}

fn changes_since(old: &GpuFacts, new: &mut GpuFacts, probe: Option<&ProbeReport>, now: f64) -> Vec<Event> {
    // Made without the GPU's name, which is put in at the end: this runs for every GPU every
    // round, and a round almost always changes nothing.
    let gpu: Option<GpuRef> = None;
    let event = |kind, summary: String, details| Event::new(now, kind, gpu.clone(), summary, details);
    let mut out = Vec::new();
    if (&old.driver_version, &old.inventory) != (&new.driver_version, &new.inventory) {
        out.push(event(
            Kind::Inventory,
            inventory_change(old, new),
            json!({"before": inventory_details(old), "after": inventory_details(new)}),
        ));
    }
    if old.verdict != new.verdict {
        out.push(event(
            Kind::Health,
            format!("{} -> {}: {}", old.verdict, new.verdict, reasons(new)),
            health_details(&old.verdict, new),
        ));
    }
    match (old.lost, new.lost) {
        (false, true) => out.push(event(Kind::Lost, "the GPU stopped answering (lost)".into(), json!({}))),
        (true, false) => out.push(event(Kind::Back, "the GPU answers again".into(), json!({}))),
        _ => {}
    }
    if let (Some(a), Some(b)) = (old.ecc_uncorrectable, new.ecc_uncorrectable)
        && a != b
    {
        out.push(event(
            Kind::Ecc,
            format!("uncorrectable ECC errors (aggregate) {a} -> {b}"),
            json!({"uncorrectable_before": a, "uncorrectable": b}),
        ));
    }
    let remap = |f: &GpuFacts| (f.remap_pending, f.remap_failed, f.remapped_rows);
    if remap(old) != remap(new) && new.remapped_rows.is_some() {
        out.push(event(
            Kind::RowRemap,
            format!(
                "row remapping: pending {}, failed {}, remapped rows {}",
                yes_no(new.remap_pending),
                yes_no(new.remap_failed),
                new.remapped_rows.unwrap_or(0)
            ),
            json!({"pending": new.remap_pending, "failed": new.remap_failed, "remapped_rows": new.remapped_rows,
                   "remapped_rows_before": old.remapped_rows}),
        ));
    }
    out.extend(recovery_action_change(old, new, now, &gpu));
    if let Some(e) = nvlink_change(old, new, now, &gpu) {
        out.push(e);
    }
    if let Some(report) = probe.filter(|r| Some(r.started) != old.probe_started) {
        out.push(probe_event(report, gpu.clone()));
    }
    out.extend(ended_episodes(new, now, &gpu));
    if !out.is_empty() {
        let gpu = Some(new.gpu_ref());
        for row in &mut out {
            row.gpu = gpu.clone();
        }
    }
    out
}

/// The events of a GPU the journal has not seen: its inventory, a verdict other than ok, its
/// latest probe and its counters as read now.
fn first_sight(new: &GpuFacts, probe: Option<&ProbeReport>, now: f64) -> Vec<Event> {
    let gpu = Some(new.gpu_ref());
    let event = |kind, summary: String, details| Event::new(now, kind, gpu.clone(), summary, details);
    let mut out = Vec::new();
    out.push(event(
        Kind::Inventory,
        format!(
            "first seen: {} serial {}",
            new.name,
            new.serial.as_deref().unwrap_or("unknown")
        ),
        inventory_details(new),
    ));
    if new.verdict != HealthState::Ok.label() {
        out.push(event(
            Kind::Health,
            format!("ok -> {}: {}", new.verdict, reasons(new)),
            health_details("ok", new),
        ));
    }
    out.extend(probe.map(|r| probe_event(r, gpu.clone())));
    out.extend(first_readings(new, now, "at first sight"));
    out
}

/// The driver's recovery action changed (to one it reported: a driver that stops saying is
/// no change).
fn recovery_action_change(old: &GpuFacts, new: &GpuFacts, now: f64, gpu: &Option<GpuRef>) -> Option<Event> {
    let action = new
        .recovery_action
        .as_ref()
        .filter(|_| old.recovery_action != new.recovery_action)?;
    let before = old.recovery_action.as_deref().unwrap_or("unknown");
    Some(Event::new(
        now,
        Kind::RecoveryAction,
        gpu.clone(),
        format!("the driver's recovery action {before} -> {action}"),
        json!({"before": old.recovery_action, "action": action}),
    ))
}

/// The counters the report shows (uncorrectable ECC, row remapping, NVLink errors, PCIe
/// replays), as read now: at a GPU's first sight and at each start of the daemon. The journal otherwise records changes only, so a GPU that came with an
/// uncorrectable ECC error or a pending remap would show "none recorded" beside a verdict
/// that names them. `when`: "at first sight", "at start".
pub(crate) fn first_readings(f: &GpuFacts, now: f64, when: &str) -> Vec<Event> {
    let gpu = Some(f.gpu_ref());
    let event = |kind, summary: String, details| Event::new(now, kind, gpu.clone(), summary, details);
    let mut out = Vec::new();
    if let Some(n) = f.ecc_uncorrectable {
        out.push(event(
            Kind::Ecc,
            format!("uncorrectable ECC errors (aggregate) {n} {when}"),
            json!({"uncorrectable": n, "reading": when}),
        ));
    }
    if f.remapped_rows.is_some() || f.remap_pending.is_some() || f.remap_failed.is_some() {
        out.push(event(
            Kind::RowRemap,
            format!(
                "row remapping {when}: pending {}, failed {}, remapped rows {}",
                yes_no(f.remap_pending),
                yes_no(f.remap_failed),
                f.remapped_rows.map_or("unknown".to_string(), |n| n.to_string())
            ),
            json!({"pending": f.remap_pending, "failed": f.remap_failed, "remapped_rows": f.remapped_rows,
                   "reading": when}),
        ));
    }
    // Only one that asks for something: "none" at every start would be noise.
    if let Some(action) = f
        .recovery_action
        .as_deref()
        .filter(|a| *a != crate::model::RecoveryAction::None.label())
    {
        out.push(event(
            Kind::RecoveryAction,
            format!("the driver's recovery action {when}: {action}"),
            json!({"action": action, "reading": when}),
        ));
    }
    if let Some(n) = f.nvlink_errors {
        out.push(event(
            Kind::Nvlink,
            format!(
                "NVLink errors {n} {when}{}",
                match f.nvlinks_down.as_deref() {
                    Some([]) | None => String::new(),
                    Some(down) => format!(", links down: {down:?}"),
                }
            ),
            json!({"errors": n, "links_down": f.nvlinks_down, "reading": when}),
        ));
    }
    if let Some(n) = f.pcie_replays {
        out.push(event(
            Kind::Pcie,
            format!("PCIe replays {n} {when}"),
            json!({"replays": n, "reading": when}),
        ));
    }
    out
}

fn nvlink_change(old: &GpuFacts, new: &GpuFacts, now: f64, gpu: &Option<GpuRef>) -> Option<Event> {
    let grew = matches!((old.nvlink_errors, new.nvlink_errors), (Some(a), Some(b)) if b > a);
    let down_changed = old.nvlinks_down.is_some() && new.nvlinks_down.is_some() && old.nvlinks_down != new.nvlinks_down;
    if !grew && !down_changed {
        return None;
    }
    let down = new.nvlinks_down.clone().unwrap_or_default();
    Some(Event::new(
        now,
        Kind::Nvlink,
        gpu.clone(),
        format!(
            "NVLink errors {} -> {}, links down: {}",
            old.nvlink_errors.unwrap_or(0),
            new.nvlink_errors.unwrap_or(0),
            if down.is_empty() {
                "none".to_string()
            } else {
                down.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            }
        ),
        json!({"errors_before": old.nvlink_errors, "errors": new.nvlink_errors, "links_down": down,
               "links_down_before": old.nvlinks_down}),
    ))
}

/// Episodes whose reason has been clear for [`EPISODE_GAP`]: one row each, with its start
/// and length.
fn ended_episodes(new: &mut GpuFacts, now: f64, gpu: &Option<GpuRef>) -> Vec<Event> {
    let ended: Vec<String> = new
        .episodes
        .iter()
        .filter(|(_, (_, last))| now - last >= EPISODE_GAP)
        .map(|(reason, _)| reason.clone())
        .collect();
    ended
        .into_iter()
        .filter_map(|reason| {
            let (start, last) = new.episodes.remove(&reason)?;
            Some(episode_event(&reason, start, last, gpu))
        })
        .collect()
}

/// The row for one slowdown episode (also written at stop for one still going on).
pub(crate) fn episode_event(reason: &str, start: f64, last: f64, gpu: &Option<GpuRef>) -> Event {
    let seconds = (last - start).max(0.0);
    Event::new(
        start,
        Kind::Slowdown,
        gpu.clone(),
        format!("{reason} for {seconds:.0} s"),
        json!({"reason": reason, "started": start, "last_active": last, "seconds": seconds}),
    )
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

fn reasons(f: &GpuFacts) -> String {
    if f.findings.is_empty() {
        return "no findings".into();
    }
    f.findings
        .iter()
        .map(|x| x.reason.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn health_details(from: &str, new: &GpuFacts) -> serde_json::Value {
    json!({"from": from, "to": new.verdict, "findings": new.findings})
}

fn inventory_details(f: &GpuFacts) -> serde_json::Value {
    json!({
        "name": f.name, "serial": f.serial, "driver_version": f.driver_version,
        "vbios": f.inventory.vbios, "board_part_number": f.inventory.board_part_number,
        "inforom_image": f.inventory.inforom_image,
    })
}

fn inventory_change(old: &GpuFacts, new: &GpuFacts) -> String {
    let mut parts = Vec::new();
    let mut diff = |what: &str, a: Option<&str>, b: Option<&str>| {
        if a != b {
            parts.push(format!(
                "{what} {} -> {}",
                a.unwrap_or("unknown"),
                b.unwrap_or("unknown")
            ));
        }
    };
    diff("driver", Some(&old.driver_version), Some(&new.driver_version));
    diff("VBIOS", old.inventory.vbios.as_deref(), new.inventory.vbios.as_deref());
    diff(
        "board part number",
        old.inventory.board_part_number.as_deref(),
        new.inventory.board_part_number.as_deref(),
    );
    diff(
        "InfoROM",
        old.inventory.inforom_image.as_deref(),
        new.inventory.inforom_image.as_deref(),
    );
    parts.join(", ")
}

/// A GPU first seen at an address where another GPU (another UUID) was: the board was
/// swapped. The old GPU's rows keep its serial.
pub(crate) fn board_swap(previous: &GpuFacts, new: &GpuFacts, now: f64) -> Event {
    Event::new(
        now,
        Kind::BoardSwap,
        Some(new.gpu_ref()),
        format!(
            "a different GPU at {}: serial {} (was {}, {})",
            new.pci_bus_id,
            new.serial.as_deref().unwrap_or("unknown"),
            previous.serial.as_deref().unwrap_or("unknown"),
            previous.uuid
        ),
        json!({"previous_uuid": previous.uuid, "previous_serial": previous.serial,
               "uuid": new.uuid, "serial": new.serial}),
    )
}

/// A finished probe: every test's measured and expected value and whether it passed.
fn probe_event(report: &ProbeReport, gpu: Option<GpuRef>) -> Event {
    let verdict = match report.passed() {
        Some(true) => "passed",
        Some(false) => "FAILED",
        None => "no verdict (no expected values for this GPU)",
    };
    Event::new(
        report.started,
        Kind::Probe,
        gpu,
        format!("probe {verdict}"),
        serde_json::to_value(report).unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> GpuFacts {
        GpuFacts {
            uuid: "GPU-1".into(),
            verdict: "degraded".into(),
            findings: vec![FindingFact {
                reason: "thermal_slowdown".into(),
                severity: "warning".into(),
                message: "at 91 C".into(),
            }],
            pcie_replays: Some(3),
            episodes: BTreeMap::from([("hw_thermal_slowdown".to_string(), (100.0, 100.0))]),
            ..Default::default()
        }
    }

    #[test]
    fn live_values_do_not_make_the_stored_facts_stale() {
        let mut now = facts();
        now.findings[0].message = "at 93 C".into();
        now.pcie_replays = Some(40);
        now.episodes.insert("hw_thermal_slowdown".into(), (100.0, 160.0));
        assert!(facts().same_stored_facts(&now));
    }

    #[test]
    fn what_is_stored_makes_them_stale() {
        let changes: [fn(&mut GpuFacts); 6] = [
            |f| f.verdict = "healthy".into(),
            |f| f.findings[0].severity = "critical".into(),
            |f| f.findings.clear(),
            |f| {
                f.episodes
                    .insert("hw_thermal_slowdown".into(), (150.0, 150.0))
                    .map_or((), drop)
            },
            |f| f.remap_pending = Some(true),
            |f| f.serial = Some("1653".into()),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut now = facts();
            change(&mut now);
            assert!(!facts().same_stored_facts(&now), "change {i}");
        }
    }
}
