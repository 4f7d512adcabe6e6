//! dcgm-exporter's names for the same readings (`compat.dcgm_exporter: true`, off by default):
//! `DCGM_FI_*` families with dcgm-exporter's labels and units, beside gpuwarden's own, so
//! Grafana dashboard 12239 and alert rules written for dcgm-exporter work unchanged.
//! docs/metrics.md has the mapping, and what has no equivalent.
//!
//! A name with a native row is that row's `dcgm` column ([`super::DcgmTwin`], in device.rs and
//! activity.rs), per GPU instance under MIG where dcgm-exporter splits it so (the profiling
//! fields, the framebuffer): the reading and its dcgm-exporter name are written once, side by
//! side. This file holds the rest (the XID and clock-event windows, P2P, health) and the
//! labels and helpers the twins use.
//!
//! dcgm-exporter declares some of these as counters but names them without `_total`; they are
//! `counter` in the text format as it serves them, and `unknown` in OpenMetrics, which has no
//! counter without `_total` (`Kind::CounterAsNamed`): the names are exactly its names either
//! way. tests/all/dcgm_compat.rs checks every row of its field lists (tests/fixtures/dcgm-exporter).
//! NVIDIA GPUs only; one series per GPU, except the profiling (GPM) fields of a GPU in MIG
//! mode, which have one series per GPU instance with `GPU_I_ID` and `GPU_I_PROFILE` set, as
//! dcgm-exporter serves them.

use super::{Family, Kind, Read, Samples};
use crate::model::health::RuleId;
use crate::model::{DeviceReadings, DeviceSnapshot, Snapshot, Vendor};

/// dcgm-exporter's labels, in order.
pub(super) const LABELS: &[&str] = &BASE_LABELS;
const BASE_LABELS: [&str; 12] = [
    "gpu",
    "UUID",
    "device",
    "modelName",
    "Hostname",
    "pci_bus_id",
    "DCGM_FI_DRIVER_VERSION",
    "GPU_I_ID",
    "GPU_I_PROFILE",
    "namespace",
    "pod",
    "container",
];

/// [`LABELS`] followed by a family's own; `N` must be 12 more than `M` (a const item that gets
/// it wrong does not compile).
const fn with_own<const M: usize, const N: usize>(own: [&'static str; M]) -> [&'static str; N] {
    assert!(N == BASE_LABELS.len() + M);
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < BASE_LABELS.len() {
            BASE_LABELS[i]
        } else {
            own[i - BASE_LABELS.len()]
        };
        i += 1;
    }
    out
}

/// The NVIDIA GPUs that answered their last poll, with their readings.
fn answering(snapshot: &Snapshot) -> impl Iterator<Item = (&DeviceSnapshot, &DeviceReadings)> {
    snapshot
        .devices
        .iter()
        .filter(|d| d.identity.vendor == Vendor::Nvidia)
        .filter_map(|d| Some((d, d.answered()?)))
}

/// [`LABELS`] and `DCGM_FI_DEV_XID_ERRORS`'s own (dcgm-exporter 3.3.6 and later).
const XID_LABELS: &[&str] = &with_own::<2, 14>(["err_code", "err_msg"]);

/// [`LABELS`] and the XID code (`DCGM_EXP_XID_ERRORS_TOTAL`).
const XID_TOTAL_LABELS: &[&str] = &with_own::<1, 13>(["xid"]);

/// [`LABELS`], the XID code and the window (`DCGM_EXP_XID_ERRORS_COUNT`).
const XID_COUNT_LABELS: &[&str] = &with_own::<2, 14>(["xid", "window_size_in_ms"]);

/// [`LABELS`] and the reason (`DCGM_EXP_CLOCK_EVENTS_TOTAL`).
const CLOCK_EVENT_LABELS: &[&str] = &with_own::<1, 13>(["clock_event"]);

/// [`LABELS`], the reason and the window (`DCGM_EXP_CLOCK_EVENTS_COUNT`).
const CLOCK_EVENT_COUNT_LABELS: &[&str] = &with_own::<2, 14>(["clock_event", "window_size_in_ms"]);

/// [`LABELS`], the peer and its status in words (`DCGM_EXP_P2P_STATUS`).
const P2P_LABELS: &[&str] = &with_own::<2, 14>(["peer_gpu", "link_status"]);

/// [`LABELS`] and the health watch and its failure code (`DCGM_EXP_GPU_HEALTH_STATUS`).
const HEALTH_LABELS: &[&str] = &with_own::<2, 14>(["health_watch", "health_error_code"]);

/// A sample with dcgm-exporter's labels: the GPU's, the GPU instance's where `instance` is
/// set (id, profile), and the first pod holding the GPU or that instance, where the kubelet
/// says (dcgm-exporter labels with one pod too).
fn sample(snapshot: &Snapshot, s: &mut Samples, d: &DeviceSnapshot, instance: Option<(u32, &str)>, v: f64) {
    sample_with(snapshot, s, d, instance, &[], v);
}

/// [`sample`] with the family's own labels after dcgm-exporter's.
fn sample_with(
    snapshot: &Snapshot,
    s: &mut Samples,
    d: &DeviceSnapshot,
    instance: Option<(u32, &str)>,
    extra: &[&str],
    v: f64,
) {
    let id = &d.identity;
    let pod = snapshot
        .pods
        .get(&id.uuid)
        .and_then(|p| p.iter().find(|h| h.gpu_instance == instance.map(|(gi, _)| gi)));
    let (index, bus, gi) = (
        id.index.to_string(),
        nvml_bus_id(&id.pci_bus_id),
        instance.map(|(gi, _)| gi.to_string()).unwrap_or_default(),
    );
    let device = format!("nvidia{}", id.index);
    let mut values: Vec<&str> = vec![
        &index,
        &id.uuid,
        &device,
        &id.name,
        &snapshot.hostname,
        &bus,
        &id.driver_version,
        &gi,
        instance.map(|(_, profile)| profile).unwrap_or(""),
        pod.map(|p| p.namespace.as_str()).unwrap_or(""),
        pod.map(|p| p.pod.as_str()).unwrap_or(""),
        pod.map(|p| p.container.as_str()).unwrap_or(""),
    ];
    values.extend_from_slice(extra);
    s.labelled(&values, v);
}

/// A twin's samples: one per NVIDIA GPU that answered, or, where the twin has an instance's
/// value, one per GPU instance of a GPU in MIG mode (`GPU_I_ID` and `GPU_I_PROFILE` set), as
/// dcgm-exporter serves the fields a GPU instance has of its own.
pub(super) fn per_gpu(
    snapshot: &Snapshot,
    s: &mut Samples,
    value: super::TwinValue,
    per_instance: Option<super::InstanceValue>,
) {
    for (d, r) in answering(snapshot) {
        match (r.mig.as_ref().filter(|m| m.enabled), per_instance) {
            (Some(mig), Some(instance)) => {
                for i in mig.gpu_instances() {
                    if let Some(v) = instance(i) {
                        sample(snapshot, s, d, Some((i.gpu_instance, &i.profile)), v);
                    }
                }
            }
            _ => {
                if let Some(v) = value(r) {
                    sample(snapshot, s, d, None, v);
                }
            }
        }
    }
}

/// NVML's clock-event bit mask of the reasons active now, rebuilt from the decoded reasons;
/// absent when the driver gave none.
pub(super) fn clock_event_mask(r: &DeviceReadings) -> Option<f64> {
    if r.clock_events.is_empty() {
        return None;
    }
    let mask: u64 = crate::model::clock_events::NVIDIA_REASONS
        .iter()
        .filter(|(_, reason)| r.clock_event_active(*reason))
        .map(|(bit, _)| bit)
        .sum();
    Some(mask as f64)
}

/// `0000:19:00.0` -> `00000000:19:00.0`, NVML's form, which dcgm-exporter shows.
fn nvml_bus_id(bus: &str) -> String {
    match bus.split_once(':') {
        Some((domain, rest)) if domain.len() == 4 => format!("0000{}:{}", domain, rest).to_ascii_uppercase(),
        _ => bus.to_ascii_uppercase(),
    }
}

pub(super) const MIB: f64 = 1024.0 * 1024.0;

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "DCGM_FI_DEV_XID_ERRORS",
        kind: Kind::Gauge,
        unit: "",
        help: "Value of the last XID error encountered; 0 with err_msg \"No Error\" before the first.",
        labels: XID_LABELS,
        dcgm: &[],
        read: Read::Node(last_xid),
    },
    Family {
        name: "DCGM_EXP_P2P_STATUS",
        kind: Kind::Gauge,
        unit: "",
        help: "Current NVLink P2P status per peer link (NVML's nvmlGpuP2PStatus_t: 0 OK).",
        labels: P2P_LABELS,
        dcgm: &[],
        read: Read::Node(p2p_status),
    },
    Family {
        name: "DCGM_EXP_XID_ERRORS_TOTAL",
        kind: Kind::CounterAsNamed,
        unit: "",
        help: "XID errors by code on the GPU since boot (gpuwarden_xid: each event once, kept across restarts by the journal).",
        labels: XID_TOTAL_LABELS,
        dcgm: &[],
        read: Read::Node(xid_totals),
    },
    Family {
        name: "DCGM_EXP_XID_ERRORS_COUNT",
        kind: Kind::Gauge,
        unit: "",
        help: "XID errors by code on the GPU within the last window_size_in_ms (5 minutes).",
        labels: XID_COUNT_LABELS,
        dcgm: &[],
        read: Read::Node(xid_recent),
    },
    Family {
        name: "DCGM_EXP_CLOCK_EVENTS_TOTAL",
        kind: Kind::CounterAsNamed,
        unit: "",
        help: "Times each clock-event reason became active since gpuwarden started, poll to poll (edge-counted).",
        labels: CLOCK_EVENT_LABELS,
        dcgm: &[],
        read: Read::Node(|snapshot, s| clock_event_starts(snapshot, s, false)),
    },
    Family {
        name: "DCGM_EXP_CLOCK_EVENTS_COUNT",
        kind: Kind::Gauge,
        unit: "",
        help: "Times each clock-event reason became active within the last window_size_in_ms (5 minutes).",
        labels: CLOCK_EVENT_COUNT_LABELS,
        dcgm: &[],
        read: Read::Node(|snapshot, s| clock_event_starts(snapshot, s, true)),
    },
    Family {
        name: "DCGM_EXP_GPU_HEALTH_STATUS",
        kind: Kind::Gauge,
        unit: "",
        help: "Health per watch as DCGM reports it: 0 pass, 10 warn (degraded), 20 fail (unhealthy), from gpuwarden's findings; only the watches gpuwarden judges.",
        labels: HEALTH_LABELS,
        dcgm: &[],
        read: Read::Node(health_status),
    },
];

/// `DCGM_FI_DEV_XID_ERRORS`: the code of the XID seen last on each NVIDIA GPU that answered,
/// with its catalog name; 0, "No Error", before the first (dcgm-exporter serves it so too).
fn last_xid(snapshot: &Snapshot, s: &mut Samples) {
    for (d, _) in answering(snapshot) {
        let last = snapshot
            .xid
            .for_bus(&d.identity.pci_bus_id)
            .iter()
            .filter(|x| x.xid != crate::model::xid::OTHER_CODES)
            .max_by_key(|x| x.last_seen);
        let (code, message) = match last {
            Some(x) => (x.xid, crate::xid::catalog::lookup(x.xid).map(|e| e.name).unwrap_or("")),
            None => (0, "No Error"),
        };
        sample_with(snapshot, s, d, None, &[&code.to_string(), message], code as f64);
    }
}

/// `DCGM_EXP_P2P_STATUS`: per NVIDIA GPU and peer, NVML's status number and dcgm-exporter's
/// word for it.
fn p2p_status(snapshot: &Snapshot, s: &mut Samples) {
    for (d, r) in answering(snapshot) {
        for (peer, status) in &r.nvlink_p2p {
            let word = match status {
                0 => "OK",
                1 => "ChipsetNotSupported",
                2 => "GPUNotSupported",
                3 => "TopologyNotSupported",
                4 => "DisabledByRegKey",
                5 => "NotSupported",
                _ => "Unknown",
            };
            sample_with(snapshot, s, d, None, &[&peer.to_string(), word], *status as f64);
        }
    }
}

/// `DCGM_EXP_XID_ERRORS_TOTAL`: each XID code's count on each NVIDIA GPU that answered.
fn xid_totals(snapshot: &Snapshot, s: &mut Samples) {
    for (d, _) in answering(snapshot) {
        for x in snapshot.xid.for_bus(&d.identity.pci_bus_id) {
            sample_with(snapshot, s, d, None, &[&x.code()], x.count as f64);
        }
    }
}

/// The window of the `*_COUNT` families, as their `window_size_in_ms` label says it.
fn window_ms() -> String {
    crate::model::xid::RECENT_WINDOW.as_millis().to_string()
}

/// `DCGM_EXP_XID_ERRORS_COUNT`: each XID code seen within the window on each NVIDIA GPU.
fn xid_recent(snapshot: &Snapshot, s: &mut Samples) {
    let window = window_ms();
    for (d, _) in answering(snapshot) {
        for x in snapshot
            .xid
            .for_bus(&d.identity.pci_bus_id)
            .iter()
            .filter(|x| x.recent > 0)
        {
            sample_with(snapshot, s, d, None, &[&x.code(), &window], x.recent as f64);
        }
    }
}

/// `DCGM_EXP_CLOCK_EVENTS_TOTAL` (`recent` false) and `_COUNT` (true), by dcgm-exporter's
/// reason names.
fn clock_event_starts(snapshot: &Snapshot, s: &mut Samples, recent: bool) {
    let window = window_ms();
    for (d, _) in answering(snapshot) {
        for starts in &d.history.clock_event_starts {
            let Some(name) = starts.reason.dcgm_name() else {
                continue;
            };
            match recent {
                false => sample_with(snapshot, s, d, None, &[name], starts.total as f64),
                true if starts.recent > 0 => sample_with(snapshot, s, d, None, &[name, &window], starts.recent as f64),
                true => {}
            }
        }
    }
}

/// DCGM's health watches, in the order they are served; each rule of
/// `health::rules::RULES` names its own (`Rule::dcgm`).
const HEALTH_WATCHES: [&str; 6] = ["PCIE", "NVLINK", "MEM", "THERMAL", "POWER", "DRIVER"];

/// The DCGM watch and failure code of a finding's rule.
fn dcgm_watch(reason: RuleId) -> Option<(&'static str, &'static str)> {
    crate::health::rules::named(reason)?.dcgm
}

/// `DCGM_EXP_GPU_HEALTH_STATUS`: per NVIDIA GPU and watch, the worst finding of that watch
/// (0 pass, 10 warn, 20 fail, DCGM's `DCGM_HEALTH_RESULT_*`) and its failure code.
fn health_status(snapshot: &Snapshot, s: &mut Samples) {
    use crate::model::health::HealthState;
    for d in snapshot.devices.iter().filter(|d| d.identity.vendor == Vendor::Nvidia) {
        for watch in HEALTH_WATCHES {
            let worst = d
                .health
                .findings
                .iter()
                .filter_map(|f| {
                    let (of, code) = dcgm_watch(f.reason.rule()?)?;
                    (of == watch).then_some((f.severity, code))
                })
                .max_by_key(|(severity, _)| *severity);
            let (value, code) = match worst {
                Some((HealthState::Unhealthy, code)) => (20.0, code),
                Some((HealthState::Degraded, code)) => (10.0, code),
                _ => (0.0, "DCGM_FR_OK"),
            };
            sample_with(snapshot, s, d, None, &[watch, code], value);
        }
    }
}

pub(super) fn pipe(r: &DeviceReadings, name: &str) -> Option<f64> {
    r.activity
        .as_ref()?
        .pipes
        .iter()
        .find(|(p, _)| *p == name)
        .map(|(_, v)| *v)
}

pub(super) fn rate(pairs: &[(&'static str, f64)], direction: &str) -> Option<f64> {
    pairs.iter().find(|(d, _)| *d == direction).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bus_ids_in_nvml_form() {
        assert_eq!(super::nvml_bus_id("0000:3b:00.0"), "00000000:3B:00.0");
    }

    #[test]
    fn every_finding_but_the_probe_the_notice_and_the_licence_belongs_to_one_health_watch() {
        for rule in crate::health::rules::RULES
            .iter()
            .chain([&crate::health::rules::GPU_MISSING])
        {
            // DCGM has no watch for these: its diagnostics, not its health watches, run
            // workloads; a board swap is not a fault; vGPU licensing is not a watch of DCGM's;
            // a GPU missing from the bus has no GPU to report for; DCGM's health does not read
            // the driver's recovery action (DCGM #263: a GPU that needs a reset is Healthy);
            // a GPU awaiting its validation probe is a state of gpuwarden's, not a fault.
            let none = [
                "validating",
                "remediating",
                "probe_failed",
                "probe_regressed",
                "sdc_suspect",
                "board_replaced",
                "vgpu_unlicensed",
                "gpu_missing",
                "recovery_action",
            ];
            match rule.dcgm {
                Some((watch, code)) => {
                    assert!(!none.contains(&rule.reason.label()), "{}", rule.reason);
                    assert!(super::HEALTH_WATCHES.contains(&watch), "{}: {watch}", rule.reason);
                    assert!(code.starts_with("DCGM_FR_"), "{}: {code}", rule.reason);
                }
                None => assert!(none.contains(&rule.reason.label()), "{} has no DCGM watch", rule.reason),
            }
        }
    }
}
