//! The metric families: each one a row of data (name, type, unit, HELP, labels, and how to
//! read it from a snapshot), grouped by concern in this folder:
//!
//! | file | families |
//! | --- | --- |
//! | `device.rs` | what a poll reads from each GPU, its identity and health (`gpu_*`) |
//! | `activity.rs` | GPM activity: SM, tensor, DRAM, pipes, PCIe/NVLink bandwidth |
//! | `links.rs` | NVLink per link, and NVSwitch fabric registration |
//! | `mig.rs` | MIG mode and MIG devices |
//! | `xid.rs` | XID counts per GPU, and the XID sources' own series |
//! | `network.rs` | the node's InfiniBand and RoCE ports (`nic_*`), and the node's own findings |
//! | `probe.rs` | the scheduled CUDA probe (`gpu_probe_*`) |
//! | `attribution.rs` | which pod, job and process uses each GPU |
//! | `self_metrics.rs` | gpuwarden itself (`gpuwarden_*`): build, backends, polls |
//! | `dcgm_compat.rs` | dcgm-exporter's names for the same readings (`compat.dcgm_exporter`) |
//!
//! A prometheus-client `Collector` over one snapshot builds every family from it at encode
//! time; nothing here holds live metric objects. Every device series carries `gpu`, `uuid`
//! and `vendor`; descriptive labels live on `gpu_info` only, to be joined with
//! `* on(uuid) group_left(name) gpu_info`. A family with no samples is left out entirely,
//! and a reading a GPU does not support adds no sample (never a made-up 0).
//!
//! Adding a family is one row in the group it belongs to, plus the reading it shows
//! (docs/architecture.md walks through it). docs/metrics.md documents every row; a test
//! checks the two against each other.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `activity.rs` | GPM activity families (Hopper and newer): how busy the GPU's engines, SMs, tensor cores and memory were over the last `poll.gpm_interval` (30 s by default:... |
//! | `attribution.rs` | Attribution families: which job (or, later, pod) uses each GPU, as info series to join on, never as labels copied onto every family (that is what makes... |
//! | `custom_rules.rs` | The operator's rules' families (`gpuwarden_custom_rule_*`): whether each runs, and what it costs (docs/health.md, "Rules as code"); none without... |
//! | `dcgm_compat.rs` | dcgm-exporter's names for the same readings (`compat.dcgm_exporter: true`, off by default): `DCGM_FI_*` families with dcgm-exporter's labels and units,... |
//! | `device.rs` | Device families: each GPU's identity, whether it answered, its health verdict, and what a poll reads from it |
//! | `exposition.rs` | Turning the latest snapshot into the bytes a scrape gets, once per snapshot |
//! | `links.rs` | NVLink and fabric families: links up against links the board has, errors and bytes per GPU (and per link with `nvlink.per_link`), and NVSwitch fabric... |
//! | `mig.rs` | MIG families: the mode, and each MIG device (GPU instance and compute instance) with its profile and memory |
//! | `network.rs` | The node's InfiniBand and RoCE ports (`nic_*`), and the node's own findings (`gpu_node_health_reason`) |
//! | `probe.rs` | Probe families (`gpu_probe_*`): the latest scheduled probe of each GPU, and the run and skip counters |
//! | `remediation.rs` | Automatic remediation's families (`remediation.mode: auto`; model/remediation.rs): what it did, what holds it back, and whether the node needs a reboot |
//! | `scheduler.rs` | The scheduler side's families (`gpuwarden_drain_guard_*`): the Slurm health check's fleet drain guard as it last reported about this node (model/scheduler.rs) |
//! | `self_metrics.rs` | gpuwarden's own families (`gpuwarden_*`): its build, its backends, its polls |
//! | `sinks.rs` | Event sink families (`gpuwarden_sink_*`): each sink's deliveries, failures and lag (docs/journal.md, "Events out"); none without `events.sinks` |
//! | `xid.rs` | XID families: counts per GPU and code, and the XID sources' own series |
//! <!-- /files -->

pub(crate) mod activity;
pub(crate) mod attribution;
pub(crate) mod custom_rules;
pub(crate) mod dcgm_compat;
pub(crate) mod device;
pub mod exposition;
pub(crate) mod links;
pub(crate) mod mig;
pub(crate) mod network;
pub(crate) mod probe;
pub(crate) mod remediation;
pub(crate) mod scheduler;
pub(crate) mod self_metrics;
pub(crate) mod sinks;
pub(crate) mod xid;

use crate::model::{DeviceReadings, DeviceSnapshot, DurationHistogram, Snapshot};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// A series' labels, names with values.
pub type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// A counter; its samples are named with `_total`.
    Counter,
    /// A counter named without `_total`, as dcgm-exporter names its counters: OpenMetrics
    /// has no such thing, so it is `unknown` there (the name stays as queries write it), and
    /// `counter` in the text format 0.0.4, as dcgm-exporter serves it.
    CounterAsNamed,
    Histogram,
}

impl Kind {
    /// How docs/metrics.md writes it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter | Kind::CounterAsNamed => "counter",
            Kind::Histogram => "histogram",
        }
    }

    fn metric_type(self) -> MetricType {
        match self {
            Kind::Gauge => MetricType::Gauge,
            Kind::Counter => MetricType::Counter,
            Kind::CounterAsNamed => MetricType::Unknown,
            Kind::Histogram => MetricType::Histogram,
        }
    }
}

/// (label values, histogram) pairs of a histogram family.
pub type ReadHistograms = fn(&Snapshot) -> Vec<(Vec<String>, &DurationHistogram)>;

/// Where a family's samples come from.
pub enum Read {
    /// Once per GPU whose last poll answered, from what it read. A GPU that did not answer
    /// has none of these series: a dashboard shows a gap, not a frozen value.
    Readings(fn(&DeviceReadings, &mut Samples)),
    /// Once per GPU whatever its state, with the whole snapshot at hand (XIDs, probes).
    Device(fn(&Snapshot, &DeviceSnapshot, &mut Samples)),
    /// Once per snapshot, with no device labels: gpuwarden's own series.
    Node(fn(&Snapshot, &mut Samples)),
    /// Histograms, once per snapshot.
    Histograms(ReadHistograms),
    /// A dcgm-exporter twin of a native row ([`DcgmTwin`]): one series per NVIDIA GPU that
    /// answered, with dcgm-exporter's labels; per GPU instance of a GPU in MIG mode where the
    /// twin has an instance's value.
    DcgmTwin(TwinValue, Option<InstanceValue>),
}

/// What a dcgm-exporter twin reads from one GPU's readings, in dcgm-exporter's unit.
pub type TwinValue = fn(&DeviceReadings) -> Option<f64>;

/// What a dcgm-exporter twin reads from one GPU instance of a GPU in MIG mode.
pub type InstanceValue = fn(&crate::model::mig::MigDevice) -> Option<f64>;

/// dcgm-exporter's name for what a native row reads: the row's `dcgm` column, so a reading
/// and its dcgm-exporter name are written once, side by side. Served (with `compat.dcgm_exporter`
/// on) after the native families, with dcgm-exporter's labels and units; docs/metrics.md's
/// dcgm-exporter table documents it. dcgm_compat.rs keeps only the names with no native row of
/// their own (per GPU instance under MIG, the XID and clock-event windows, health).
pub struct DcgmTwin {
    pub name: &'static str,
    /// `Gauge`, or `CounterAsNamed` for a counter dcgm-exporter names without `_total`.
    pub kind: Kind,
    pub help: &'static str,
    pub value: TwinValue,
    /// The names dcgm-exporter serves per GPU instance under MIG (the profiling fields, the
    /// framebuffer): each instance's value, with `GPU_I_ID` and `GPU_I_PROFILE` set; None:
    /// one series per GPU whatever its mode.
    pub per_instance: Option<InstanceValue>,
}

/// A dcgm-exporter gauge twin: `twin!("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |r| ...)`;
/// `twin!(counter "NAME", ...)` for a counter named without `_total`; `twin!(per_instance
/// "NAME", "help", |r| ..., |instance| ...)` for a name served per GPU instance under MIG.
macro_rules! twin {
    (counter $name:literal, $help:literal, $value:expr) => {
        $crate::metrics::DcgmTwin {
            name: $name,
            kind: $crate::metrics::Kind::CounterAsNamed,
            help: $help,
            value: $value,
            per_instance: None,
        }
    };
    (per_instance $name:literal, $help:literal, $value:expr, $instance:expr) => {
        $crate::metrics::DcgmTwin {
            name: $name,
            kind: $crate::metrics::Kind::Gauge,
            help: $help,
            value: $value,
            per_instance: Some($instance),
        }
    };
    ($name:literal, $help:literal, $value:expr) => {
        $crate::metrics::DcgmTwin {
            name: $name,
            kind: $crate::metrics::Kind::Gauge,
            help: $help,
            value: $value,
            per_instance: None,
        }
    };
}
pub(crate) use twin;

/// One metric family: what docs/metrics.md documents and what /metrics serves.
pub struct Family {
    /// The name; counters without `_total` (the text format adds it, OpenMetrics puts it on
    /// the samples).
    pub name: &'static str,
    pub kind: Kind,
    /// The base unit of the value (celsius, watts, bytes, seconds, ...); "" for counts,
    /// flags and identities. Documentation: names end with it where Prometheus' conventions
    /// ask for that, and `# UNIT` lines are not written.
    pub unit: &'static str,
    /// The HELP text: what the value means, for every vendor that serves it.
    pub help: &'static str,
    /// Labels beyond gpu/uuid/vendor for device families; all labels for the others. In
    /// the order [`Samples`] methods take their values.
    pub labels: &'static [&'static str],
    pub read: Read,
    /// dcgm-exporter's names for what this row reads ([`DcgmTwin`]); empty for most.
    pub dcgm: &'static [DcgmTwin],
}

impl Family {
    /// True for families whose series carry gpu/uuid/vendor.
    pub fn per_device(&self) -> bool {
        matches!(self.read, Read::Readings(_) | Read::Device(_))
    }
}

pub use crate::config::settings::Selection;

/// What turns a table of families on.
#[derive(Debug, Clone, Copy)]
enum Gate {
    Always,
    /// `nvlink.per_link`.
    NvlinkPerLink,
    /// `compat.dcgm_exporter`.
    DcgmCompat,
}

impl Gate {
    fn on(self, selection: Selection) -> bool {
        match self {
            Gate::Always => true,
            Gate::NvlinkPerLink => selection.nvlink_per_link,
            Gate::DcgmCompat => selection.dcgm_compat,
        }
    }
}

/// Every table of families, in the order they are served, with what turns it on: a family
/// is served by being a row of one of these, and a new file of families is one entry here.
const TABLES: &[(&[Family], Gate)] = &[
    (device::FAMILIES, Gate::Always),
    (activity::FAMILIES, Gate::Always),
    (links::FAMILIES, Gate::Always),
    (links::PER_LINK_FAMILIES, Gate::NvlinkPerLink),
    (mig::FAMILIES, Gate::Always),
    (xid::FAMILIES, Gate::Always),
    (network::FAMILIES, Gate::Always),
    (probe::FAMILIES, Gate::Always),
    (attribution::FAMILIES, Gate::Always),
    (self_metrics::FAMILIES, Gate::Always),
    (scheduler::FAMILIES, Gate::Always),
    (remediation::FAMILIES, Gate::Always),
    (sinks::FAMILIES, Gate::Always),
    (custom_rules::FAMILIES, Gate::Always),
    (dcgm_compat::FAMILIES, Gate::DcgmCompat),
];

/// The families served with `selection`, in the order they are served: the tables', then
/// (with dcgm-exporter's names on) the twins of the rows of every table always served.
pub fn served(selection: Selection) -> impl Iterator<Item = &'static Family> {
    let twins = selection.dcgm_compat.then(twin_families).into_iter().flatten();
    TABLES
        .iter()
        .filter(move |(_, gate)| gate.on(selection))
        .flat_map(|(families, _)| families.iter())
        // `metrics.poll_timing: false` leaves out three rows of the always-served table of
        // gpuwarden's own families, in place, so the order of the rest does not move.
        .filter(move |family| selection.poll_timing || !self_metrics::POLL_TIMING.contains(&family.name))
        .chain(twins)
}

/// Each `dcgm` column entry of the always-served tables as a family of its own, made once.
fn twin_families() -> &'static [Family] {
    static TWINS: std::sync::OnceLock<Vec<Family>> = std::sync::OnceLock::new();
    TWINS.get_or_init(|| {
        TABLES
            .iter()
            .filter(|(_, gate)| matches!(gate, Gate::Always))
            .flat_map(|(families, _)| families.iter())
            .flat_map(|family| family.dcgm.iter())
            .map(|twin| Family {
                name: twin.name,
                kind: twin.kind,
                unit: "",
                help: twin.help,
                labels: dcgm_compat::LABELS,
                read: Read::DcgmTwin(twin.value, twin.per_instance),
                dcgm: &[],
            })
            .collect()
    })
}

/// Every family gpuwarden can serve.
pub fn all() -> impl Iterator<Item = &'static Family> {
    served(Selection::ALL)
}

/// The samples of one family being read: device labels first, then the family's own.
pub struct Samples<'a> {
    base: &'a Labels,
    names: &'static [&'static str],
    out: &'a mut Vec<(Labels, f64)>,
}

impl Samples<'_> {
    /// A sample whose own label values are `values`, in the order of the family's labels.
    pub fn labelled(&mut self, values: &[&str], value: f64) {
        debug_assert_eq!(values.len(), self.names.len(), "label values for {:?}", self.names);
        let mut labels = Labels::with_capacity(self.base.len() + values.len());
        labels.extend(self.base.iter().cloned());
        labels.extend(self.names.iter().copied().zip(values.iter().map(|v| v.to_string())));
        self.out.push((labels, value));
    }

    /// One sample per (label value, value) pair of a reading kept as such a list (sensors,
    /// thresholds, clock domains), for a family with one label.
    pub fn each<K: crate::model::label::Label>(&mut self, pairs: &[(K, f64)]) {
        for (label, value) in pairs {
            self.labelled(&[label.label()], *value);
        }
    }

    /// A sample with label values, when there is a value.
    pub fn labelled_opt(&mut self, values: &[&str], value: Option<f64>) {
        if let Some(v) = value {
            self.labelled(values, v);
        }
    }

    /// A sample with no labels of its own.
    pub fn value(&mut self, value: f64) {
        self.labelled(&[], value);
    }

    /// A sample with no labels of its own, when there is a value: an unsupported reading
    /// adds nothing.
    pub fn opt(&mut self, value: Option<f64>) {
        if let Some(v) = value {
            self.value(v);
        }
    }

    /// 1 for true, 0 for false, nothing when unknown.
    pub fn flag(&mut self, value: Option<bool>) {
        self.opt(value.map(one_if));
    }

    /// A count as a float sample, when there is one.
    pub fn count(&mut self, value: Option<u64>) {
        self.opt(value.map(|n| n as f64));
    }
}

/// A 0/1 sample value: 1 for true.
pub fn one_if(condition: bool) -> f64 {
    if condition { 1.0 } else { 0.0 }
}

/// The labels every device series carries.
fn device_labels(d: &DeviceSnapshot) -> Labels {
    vec![
        ("gpu", d.identity.index.to_string()),
        ("uuid", d.identity.uuid.clone()),
        ("vendor", d.identity.vendor.label().to_string()),
    ]
}

/// Encodes every family of one snapshot.
#[derive(Debug)]
pub struct SnapshotCollector {
    snapshot: Arc<Snapshot>,
    selection: Selection,
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = &self.snapshot;
        let families: Vec<&Family> = served(self.selection).collect();
        let mut samples: Vec<Vec<(Labels, f64)>> = families.iter().map(|_| Vec::new()).collect();
        // Device by device, each GPU's data is read while it is in the cache.
        for d in &snapshot.devices {
            let base = device_labels(d);
            let readings = d.answered();
            for (family, out) in families.iter().zip(samples.iter_mut()) {
                let names = family.labels;
                match family.read {
                    Read::Readings(read) => {
                        if let Some(r) = readings {
                            read(
                                r,
                                &mut Samples {
                                    base: &base,
                                    names,
                                    out,
                                },
                            );
                        }
                    }
                    Read::Device(read) => read(
                        snapshot,
                        d,
                        &mut Samples {
                            base: &base,
                            names,
                            out,
                        },
                    ),
                    Read::Node(_) | Read::Histograms(_) | Read::DcgmTwin(..) => {}
                }
            }
        }
        let no_labels = Labels::new();
        for (family, out) in families.iter().zip(samples.iter_mut()) {
            match family.read {
                Read::Node(read) => read(
                    snapshot,
                    &mut Samples {
                        base: &no_labels,
                        names: family.labels,
                        out,
                    },
                ),
                Read::DcgmTwin(value, instance) => dcgm_compat::per_gpu(
                    snapshot,
                    &mut Samples {
                        base: &no_labels,
                        names: family.labels,
                        out,
                    },
                    value,
                    instance,
                ),
                Read::Histograms(read) => {
                    encode_histograms(&mut encoder, family, &read(snapshot))?;
                    continue;
                }
                Read::Readings(_) | Read::Device(_) => {}
            }
            encode_samples(&mut encoder, family, out)?;
        }
        Ok(())
    }
}

fn encode_samples(
    encoder: &mut DescriptorEncoder,
    family: &Family,
    samples: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    if samples.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(family.name, family.help, None, family.kind.metric_type())?;
    let write = |sample: &mut MetricEncoder, value: &f64| match family.kind {
        Kind::Counter => sample.encode_counter::<NoLabelSet, f64, f64>(value, None),
        _ => sample.encode_gauge(value),
    };
    for (labels, value) in samples {
        // No labels: no braces (encode_family writes `{}` even for an empty list).
        if labels.is_empty() {
            write(&mut metric, value)?;
        } else {
            write(&mut metric.encode_family(labels)?, value)?;
        }
    }
    Ok(())
}

/// One histogram family; histograms that observed nothing yet are left out, and so is the
/// family when they all are.
fn encode_histograms(
    encoder: &mut DescriptorEncoder,
    family: &Family,
    histograms: &[(Vec<String>, &DurationHistogram)],
) -> Result<(), std::fmt::Error> {
    let observed: Vec<_> = histograms.iter().filter(|(_, h)| h.count > 0).collect();
    if observed.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(family.name, family.help, None, MetricType::Histogram)?;
    for (values, h) in observed {
        let labels: Labels = family.labels.iter().copied().zip(values.iter().cloned()).collect();
        // Sums of many float durations carry noise in the last digits
        // (0.0014033599999999998): nanoseconds are all the precision there is.
        let sum = (h.sum * 1e9).round() / 1e9;
        if labels.is_empty() {
            metric.encode_histogram::<NoLabelSet>(sum, h.count, &h.buckets(), None)?;
        } else {
            let mut sample = metric.encode_family(&labels)?;
            sample.encode_histogram::<NoLabelSet>(sum, h.count, &h.buckets(), None)?;
        }
    }
    Ok(())
}

/// A registry holding only this snapshot's collector over the selected families, ready to
/// encode.
pub fn registry_for(snapshot: Arc<Snapshot>, selection: Selection) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector { snapshot, selection }));
    registry
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const DOCS: &str = include_str!("../../docs/metrics.md");

    /// `metrics.poll_timing: false` takes out the three families it names, every one of which
    /// exists (a renamed family would otherwise stay served), and moves nothing else.
    #[test]
    fn poll_timing_off_leaves_out_its_families_and_keeps_the_order_of_the_rest() {
        let names = |selection| served(selection).map(|f| f.name).collect::<Vec<_>>();
        let on = names(Selection::default());
        let off = names(Selection {
            poll_timing: false,
            ..Selection::default()
        });
        for name in self_metrics::POLL_TIMING {
            assert!(on.contains(name) && !off.contains(name), "{name}");
        }
        let expected: Vec<_> = on
            .iter()
            .copied()
            .filter(|n| !self_metrics::POLL_TIMING.contains(n))
            .collect();
        assert_eq!(off, expected);
    }

    /// The cells of docs/metrics.md's table rows whose second cell is a metric type:
    /// (names in the first cell, type, the labels cell).
    fn documented() -> Vec<(Vec<String>, String, String)> {
        DOCS.lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.strip_prefix('|')?.split('|').map(str::trim).collect();
                let kind = *cells.get(1)?;
                if !["gauge", "counter", "histogram"].contains(&kind) {
                    return None;
                }
                let names = cells[0]
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(|n| n.strip_suffix("_total").unwrap_or(n).to_string())
                    .collect();
                Some((names, kind.to_string(), cells.get(2).unwrap_or(&"").to_string()))
            })
            .collect()
    }

    #[test]
    fn every_family_is_documented_with_its_type_and_labels() {
        let docs = documented();
        for family in all() {
            let Some((_, kind, labels)) = docs.iter().find(|(names, _, _)| names.iter().any(|n| n == family.name))
            else {
                panic!("{} has no row in docs/metrics.md", family.name);
            };
            assert_eq!(kind, family.kind.name(), "{}: type in docs/metrics.md", family.name);
            for label in family.labels {
                assert!(
                    labels.contains(&format!("`{label}`")),
                    "{}: docs/metrics.md does not name its label `{label}`",
                    family.name
                );
            }
        }
    }

    #[test]
    fn every_documented_family_exists() {
        let names: BTreeSet<&str> = all().map(|f| f.name).collect();
        for (documented, _, _) in documented() {
            for name in documented {
                assert!(
                    names.contains(name.as_str()),
                    "docs/metrics.md documents {name}, which no row serves"
                );
            }
        }
    }

    #[test]
    fn dcgm_twins_come_from_the_native_rows_and_only_with_dcgm_names_on() {
        let names = |selection| served(selection).map(|f| f.name).collect::<Vec<_>>();
        assert!(!names(Selection::default()).iter().any(|n| n.starts_with("DCGM_")));
        let all = names(Selection::ALL);
        // A twin is its native row's column, not a row of dcgm_compat.rs.
        for twin in [
            "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_DEC_UTIL",
            "DCGM_FI_PROF_NVLINK_RX_BYTES",
        ] {
            assert!(all.contains(&twin), "{twin}");
            assert!(!dcgm_compat::FAMILIES.iter().any(|f| f.name == twin), "{twin}");
        }
        let temperature = all_rows().find(|f| f.name == "gpu_temperature_celsius").unwrap();
        let twins: Vec<&str> = temperature.dcgm.iter().map(|t| t.name).collect();
        assert_eq!(twins, ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"]);
        // Served after every native family, as dcgm-exporter's names always were.
        let first_twin = all.iter().position(|n| n.starts_with("DCGM_")).unwrap();
        assert!(all[first_twin..].iter().all(|n| n.starts_with("DCGM_")));
    }

    /// Every row of every table, gated or not (no twins).
    fn all_rows() -> impl Iterator<Item = &'static Family> {
        TABLES.iter().flat_map(|(families, _)| families.iter())
    }

    #[test]
    fn rows_are_well_formed() {
        let mut seen = BTreeSet::new();
        for family in all() {
            assert!(seen.insert(family.name), "{} is defined twice", family.name);
            assert!(
                family.name.starts_with("gpu_")
                    || family.name.starts_with("gpuwarden_")
                    // The node's network ports: not GPUs, not gpuwarden itself.
                    || (family.name.starts_with("nic_") && network::FAMILIES.iter().any(|f| f.name == family.name))
                    // dcgm-exporter's own names, served only with compat.dcgm_exporter.
                    || dcgm_compat::FAMILIES.iter().any(|f| f.name == family.name)
                    || twin_families().iter().any(|f| f.name == family.name),
                "{}",
                family.name
            );
            assert!(
                !family.name.ends_with("_total"),
                "{}: counters are named without _total",
                family.name
            );
            assert!(
                family.unit.is_empty() || family.name.contains(family.unit),
                "{}: the name should carry its unit {}",
                family.name,
                family.unit
            );
            assert!(family.help.ends_with('.'), "{}: HELP is a sentence", family.name);
            for label in family.labels {
                assert!(
                    !["gpu", "uuid", "vendor"].contains(label) || !family.per_device(),
                    "{}: device labels are added for every device family",
                    family.name
                );
            }
        }
    }
}
