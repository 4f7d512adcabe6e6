//! What an operator's rule can read: the variables of each scope and the fields of each, with
//! their types and meaning. One table per scope is the whole of it: the values a rule sees,
//! what `config check` accepts, the dry run's sample and docs/health.md's language reference
//! (a test holds the docs equal to [`reference`]).
//!
//! A reading the GPU or driver does not give is left out of its map, never a fake 0: a rule
//! that reads it does not fire on that GPU (`has(gpu.memory_temperature_c)` asks first).

use crate::model::health::HealthState;
use crate::model::nic::PortCounter;
use crate::model::nic::{NicDevice, NicPort};
use crate::model::xid::XidCount;
use crate::model::{ClockDomain, Sensor};
use crate::model::{DeviceReadings, DeviceSnapshot, EccScope, EccType, Threshold};
use cel::Value;
use std::sync::Arc;

/// What a rule is about: it is evaluated once per GPU, per network port, or once per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    #[default]
    Gpu,
    Port,
    Node,
}

impl Scope {
    pub fn label(self) -> &'static str {
        match self {
            Scope::Gpu => "gpu",
            Scope::Port => "port",
            Scope::Node => "node",
        }
    }
}

/// A value's type, as the reference says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Int,
    Double,
    Bool,
    String,
    Strings,
}

impl Kind {
    #[cfg(test)]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Int => "int",
            Kind::Double => "double",
            Kind::Bool => "bool",
            Kind::String => "string",
            Kind::Strings => "list(string)",
        }
    }

    /// Whether windows (`increase`, `max_over`, ...) can be taken over it.
    pub(crate) fn numeric(self) -> bool {
        matches!(self, Kind::Int | Kind::Double)
    }

    /// A value of the kind for the dry run of `config check`.
    fn sample(self) -> Value {
        match self {
            Kind::Int => Value::Int(1),
            Kind::Double => Value::Float(1.0),
            Kind::Bool => Value::Bool(false),
            Kind::String => Value::String(Arc::new("x".into())),
            Kind::Strings => Value::List(Arc::new(vec![Value::String(Arc::new("x".into()))])),
        }
    }
}

/// One field of a map variable; `R` reads it from the scope's facts.
pub(crate) struct Field<R> {
    pub name: &'static str,
    pub kind: Kind,
    /// Read only by the test that holds docs/health.md equal to these tables.
    #[cfg_attr(not(test), allow(dead_code))]
    pub help: &'static str,
    pub read: R,
}

/// How each scope's fields are read (for any lifetime of the facts).
pub(crate) type GpuRead = fn(&GpuFacts<'_>) -> Option<Value>;
pub(crate) type PortRead = fn(&PortFacts<'_>) -> Option<Value>;
pub(crate) type NodeRead = fn(&NodeFacts<'_>) -> Option<Value>;
pub(crate) type ProbeRead = fn(&ProbeFigure) -> Option<Value>;

/// A field reader over facts of type `T`.
pub(crate) trait Read<T> {
    fn read(&self, facts: &T) -> Option<Value>;
}

impl<'a> Read<GpuFacts<'a>> for GpuRead {
    fn read(&self, facts: &GpuFacts<'a>) -> Option<Value> {
        self(facts)
    }
}
impl<'a> Read<PortFacts<'a>> for PortRead {
    fn read(&self, facts: &PortFacts<'a>) -> Option<Value> {
        self(facts)
    }
}
impl<'a> Read<NodeFacts<'a>> for NodeRead {
    fn read(&self, facts: &NodeFacts<'a>) -> Option<Value> {
        self(facts)
    }
}
impl Read<ProbeFigure> for ProbeRead {
    fn read(&self, facts: &ProbeFigure) -> Option<Value> {
        self(facts)
    }
}

/// One GPU, as a GPU rule (and a node rule's `gpus`) sees it.
pub(crate) struct GpuFacts<'a> {
    pub device: &'a DeviceSnapshot,
    /// The built-in rules' verdict, before the operator's rules.
    pub health: HealthState,
    /// The latest probe's figures, by test.
    pub probe: Vec<ProbeFigure>,
    /// The Slurm jobs and Kubernetes pods (`namespace/pod`) on it.
    pub jobs: &'a [String],
    pub pods: Vec<String>,
    /// Its XIDs since its last clear.
    pub xids: std::borrow::Cow<'a, [XidCount]>,
}

/// A probe test's latest figure on one GPU, beside what it is judged against.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProbeFigure {
    pub test: &'static str,
    pub figure: f64,
    pub expected: Option<f64>,
    /// The median of the GPU's own last probes (`probe.baseline_probes`).
    pub baseline: Option<f64>,
    /// The median of the node's GPUs of its model.
    pub node_median: Option<f64>,
}

/// One network port, as a port rule sees it.
pub(crate) struct PortFacts<'a> {
    pub device: &'a NicDevice,
    pub port: &'a NicPort,
}

/// The node, as a node rule sees it.
pub(crate) struct NodeFacts<'a> {
    pub hostname: &'a str,
    pub gpus: &'a [GpuFacts<'a>],
    /// GPUs on the PCI bus that no backend shows.
    pub gpus_missing: usize,
    pub ports: &'a [PortFacts<'a>],
    /// Whether nvidia-fabricmanager runs, where it is checked.
    pub fabric_manager_running: Option<bool>,
}

fn int(v: impl TryInto<i64>) -> Option<Value> {
    v.try_into().ok().map(Value::Int)
}
fn double(v: f64) -> Option<Value> {
    Some(Value::Float(v))
}
fn text(s: &str) -> Option<Value> {
    Some(Value::String(Arc::new(s.to_string())))
}
fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> Option<Value> {
    let list = items
        .into_iter()
        .map(|s| Value::String(Arc::new(s.to_string())))
        .collect();
    Some(Value::List(Arc::new(list)))
}
/// A reading of a GPU that answered its last poll.
fn reading<T>(g: &GpuFacts, read: impl FnOnce(&DeviceReadings) -> Option<T>) -> Option<T> {
    g.device.answered().and_then(read)
}

/// The fields of `gpu` (and of each of a node rule's `gpus`).
pub(crate) const GPU_FIELDS: &[Field<GpuRead>] = &[
    Field {
        name: "index",
        kind: Kind::Int,
        help: "the GPU's index",
        read: |g| int(g.device.identity.index),
    },
    Field {
        name: "uuid",
        kind: Kind::String,
        help: "the GPU's UUID",
        read: |g| text(&g.device.identity.uuid),
    },
    Field {
        name: "name",
        kind: Kind::String,
        help: "the model, as the driver names it",
        read: |g| text(&g.device.identity.name),
    },
    Field {
        name: "pci_bus_id",
        kind: Kind::String,
        help: "its PCI address",
        read: |g| text(&g.device.identity.pci_bus_id),
    },
    Field {
        name: "vendor",
        kind: Kind::String,
        help: "`nvidia` or `amd`",
        read: |g| text(g.device.identity.vendor.label()),
    },
    Field {
        name: "up",
        kind: Kind::Bool,
        help: "whether its last poll answered in time",
        read: |g| Some(Value::Bool(g.device.up)),
    },
    Field {
        name: "health",
        kind: Kind::String,
        help: "the built-in rules' verdict: `ok`, `degraded` or `unhealthy`",
        read: |g| text(g.health.label()),
    },
    Field {
        name: "temperature_c",
        kind: Kind::Double,
        help: "the die's temperature",
        read: |g| reading(g, |r| r.die_temperature()).and_then(double),
    },
    Field {
        name: "memory_temperature_c",
        kind: Kind::Double,
        help: "the memory's (HBM) temperature",
        read: |g| {
            reading(g, |r| {
                r.temperature(Sensor::Memory).or_else(|| r.temperature(Sensor::Hbm))
            })
            .and_then(double)
        },
    },
    Field {
        name: "slowdown_temperature_c",
        kind: Kind::Double,
        help: "where the driver slows the clocks",
        read: |g| reading(g, |r| r.threshold(Threshold::Slowdown)).and_then(double),
    },
    Field {
        name: "shutdown_temperature_c",
        kind: Kind::Double,
        help: "where the driver shuts the GPU down",
        read: |g| reading(g, |r| r.threshold(Threshold::Shutdown)).and_then(double),
    },
    Field {
        name: "power_w",
        kind: Kind::Double,
        help: "power draw",
        read: |g| reading(g, |r| r.power_watts).and_then(double),
    },
    Field {
        name: "power_limit_w",
        kind: Kind::Double,
        help: "the enforced power limit",
        read: |g| reading(g, |r| r.power_limit_watts).and_then(double),
    },
    Field {
        name: "utilization",
        kind: Kind::Double,
        help: "the share of time a kernel ran, 0 to 1",
        read: |g| reading(g, |r| r.utilization_ratio).and_then(double),
    },
    Field {
        name: "memory_used_bytes",
        kind: Kind::Int,
        help: "framebuffer memory in use",
        read: |g| reading(g, |r| r.memory_used_bytes).and_then(int),
    },
    Field {
        name: "memory_total_bytes",
        kind: Kind::Int,
        help: "framebuffer memory in all",
        read: |g| reading(g, |r| r.memory_total_bytes).and_then(int),
    },
    Field {
        name: "sm_clock_hz",
        kind: Kind::Double,
        help: "the SM clock",
        read: |g| reading(g, |r| r.clock(ClockDomain::Sm)).and_then(double),
    },
    Field {
        name: "memory_clock_hz",
        kind: Kind::Double,
        help: "the memory clock",
        read: |g| reading(g, |r| r.clock(ClockDomain::Memory)).and_then(double),
    },
    Field {
        name: "fan_speed",
        kind: Kind::Double,
        help: "the fan's speed, 0 to 1 of its maximum",
        read: |g| reading(g, |r| r.fan_speed_ratio).and_then(double),
    },
    Field {
        name: "pcie_generation",
        kind: Kind::Int,
        help: "the PCIe link's generation now",
        read: |g| reading(g, |r| r.pcie.generation).and_then(int),
    },
    Field {
        name: "pcie_generation_max",
        kind: Kind::Int,
        help: "the most the link can run at",
        read: |g| reading(g, |r| r.pcie.generation_max).and_then(int),
    },
    Field {
        name: "pcie_width",
        kind: Kind::Int,
        help: "the PCIe link's lanes now",
        read: |g| reading(g, |r| r.pcie.width).and_then(int),
    },
    Field {
        name: "pcie_width_max",
        kind: Kind::Int,
        help: "the most lanes the link has",
        read: |g| reading(g, |r| r.pcie.width_max).and_then(int),
    },
    Field {
        name: "pcie_replay_errors",
        kind: Kind::Int,
        help: "PCIe replays since the driver loaded (a counter)",
        read: |g| reading(g, |r| r.pcie.replay_errors).and_then(int),
    },
    Field {
        name: "ecc_corrected",
        kind: Kind::Int,
        help: "corrected ECC errors since the driver loaded (a counter)",
        read: |g| reading(g, |r| r.ecc_count(EccType::Corrected, EccScope::Volatile)).and_then(int),
    },
    Field {
        name: "ecc_uncorrected",
        kind: Kind::Int,
        help: "uncorrected ECC errors since the driver loaded (a counter)",
        read: |g| reading(g, |r| r.ecc_count(EccType::Uncorrected, EccScope::Volatile)).and_then(int),
    },
    Field {
        name: "remapped_rows_uncorrectable",
        kind: Kind::Int,
        help: "rows remapped for uncorrectable errors",
        read: |g| reading(g, |r| r.remapped_rows.uncorrectable).and_then(int),
    },
    Field {
        name: "row_remap_pending",
        kind: Kind::Bool,
        help: "a row remap waits for a GPU reset",
        read: |g| reading(g, |r| r.remapped_rows.pending).map(Value::Bool),
    },
    Field {
        name: "row_remap_failed",
        kind: Kind::Bool,
        help: "a row remap failed",
        read: |g| reading(g, |r| r.remapped_rows.failed).map(Value::Bool),
    },
    Field {
        name: "persistence_mode",
        kind: Kind::Bool,
        help: "whether persistence mode is on",
        read: |g| reading(g, |r| r.persistence_mode).map(Value::Bool),
    },
    Field {
        name: "clock_events",
        kind: Kind::Strings,
        help: "the active clock-event (throttle) reasons, as `gpu_clock_event_active` names them",
        read: |g| {
            reading(g, |r| {
                strings(r.clock_events.iter().filter(|e| e.active).map(|e| e.reason.label()))
            })
        },
    },
    Field {
        name: "nvlink_errors",
        kind: Kind::Int,
        help: "NVLink errors of every link and kind (a counter)",
        read: |g| {
            reading(g, |r| {
                r.nvlinks
                    .as_ref()
                    .map(|l| l.links.iter().map(|l| l.errors_total()).sum::<u64>())
            })
            .and_then(int)
        },
    },
    Field {
        name: "nvlinks_down",
        kind: Kind::Int,
        help: "the board's NVLinks that are down",
        read: |g| {
            reading(g, |r| {
                r.nvlinks
                    .as_ref()
                    .map(|l| l.links.iter().filter(|l| l.up == Some(false)).count())
            })
            .and_then(int)
        },
    },
    Field {
        name: "processes",
        kind: Kind::Int,
        help: "the processes on it, where the driver lists them",
        read: |g| reading(g, |r| r.processes.as_ref().map(Vec::len)).and_then(int),
    },
    Field {
        name: "recovery_action",
        kind: Kind::String,
        help: "what the driver asks for: `none`, `gpu_reset`, `node_reboot`, `drain_p2p`, `drain_and_reset`",
        read: |g| reading(g, |r| r.recovery_action).and_then(|a| text(a.label())),
    },
];

/// The fields of each test's entry in `probe` (`probe.gemm_bf16.figure`).
pub(crate) const PROBE_FIELDS: &[Field<ProbeRead>] = &[
    Field {
        name: "figure",
        kind: Kind::Double,
        help: "the latest figure, in base units (FLOP/s, bytes/s)",
        read: |p| double(p.figure),
    },
    Field {
        name: "expected",
        kind: Kind::Double,
        help: "what the model should reach",
        read: |p| p.expected.and_then(double),
    },
    Field {
        name: "baseline",
        kind: Kind::Double,
        help: "the median of this GPU's last probes",
        read: |p| p.baseline.and_then(double),
    },
    Field {
        name: "node_median",
        kind: Kind::Double,
        help: "the median of the node's GPUs of its model",
        read: |p| p.node_median.and_then(double),
    },
];

/// The fields of `port`.
pub(crate) const PORT_FIELDS: &[Field<PortRead>] = &[
    Field {
        name: "device",
        kind: Kind::String,
        help: "the adapter (`mlx5_0`)",
        read: |p| text(&p.device.name),
    },
    Field {
        name: "port",
        kind: Kind::Int,
        help: "the port's number",
        read: |p| int(p.port.port),
    },
    Field {
        name: "link_layer",
        kind: Kind::String,
        help: "`infiniband` or `ethernet`",
        read: |p| text(&p.port.link_layer),
    },
    Field {
        name: "up",
        kind: Kind::Bool,
        help: "active and its physical link up",
        read: |p| p.port.up().map(Value::Bool),
    },
    Field {
        name: "rate_gbps",
        kind: Kind::Double,
        help: "the link's rate",
        read: |p| p.port.rate_gbps.and_then(double),
    },
    Field {
        name: "symbol_errors",
        kind: Kind::Int,
        help: "symbol errors (a counter)",
        read: |p| p.port.counter(PortCounter::SymbolError).and_then(int),
    },
    Field {
        name: "link_downed",
        kind: Kind::Int,
        help: "times the link went down (a counter)",
        read: |p| p.port.counter(PortCounter::LinkDowned).and_then(int),
    },
    Field {
        name: "link_error_recovery",
        kind: Kind::Int,
        help: "link error recoveries (a counter)",
        read: |p| p.port.counter(PortCounter::LinkErrorRecovery).and_then(int),
    },
    Field {
        name: "port_rcv_errors",
        kind: Kind::Int,
        help: "received packets with errors (a counter)",
        read: |p| p.port.counter(PortCounter::PortRcvErrors).and_then(int),
    },
    Field {
        name: "near_gpus",
        kind: Kind::Strings,
        help: "the UUIDs of the GPUs nearest the adapter",
        read: |p| strings(p.device.near_gpus.iter().map(String::as_str)),
    },
];

/// The fields of `node`.
pub(crate) const NODE_FIELDS: &[Field<NodeRead>] = &[
    Field {
        name: "hostname",
        kind: Kind::String,
        help: "the node's name",
        read: |n| text(n.hostname),
    },
    Field {
        name: "gpus",
        kind: Kind::Int,
        help: "the GPUs a backend shows",
        read: |n| int(n.gpus.len()),
    },
    Field {
        name: "gpus_missing",
        kind: Kind::Int,
        help: "GPUs on the PCI bus that no backend shows",
        read: |n| int(n.gpus_missing),
    },
    Field {
        name: "gpus_unhealthy",
        kind: Kind::Int,
        help: "GPUs the built-in rules find unhealthy",
        read: |n| int(n.gpus.iter().filter(|g| g.health == HealthState::Unhealthy).count()),
    },
    Field {
        name: "gpus_degraded",
        kind: Kind::Int,
        help: "GPUs the built-in rules find degraded",
        read: |n| int(n.gpus.iter().filter(|g| g.health == HealthState::Degraded).count()),
    },
    Field {
        name: "ports",
        kind: Kind::Int,
        help: "the network ports seen",
        read: |n| int(n.ports.len()),
    },
    Field {
        name: "ports_down",
        kind: Kind::Int,
        help: "ports not up",
        read: |n| int(n.ports.iter().filter(|p| p.port.up() == Some(false)).count()),
    },
    Field {
        name: "fabric_manager_running",
        kind: Kind::Bool,
        help: "whether nvidia-fabricmanager runs (NVSwitch systems)",
        read: |n| n.fabric_manager_running.map(Value::Bool),
    },
];

/// A top-level name a rule can use.
pub(crate) struct Variable {
    pub name: &'static str,
    /// Read only by the test that holds docs/health.md equal to these tables.
    #[cfg_attr(not(test), allow(dead_code))]
    pub help: &'static str,
}

/// The variables of each scope.
pub(crate) fn variables(scope: Scope) -> &'static [Variable] {
    match scope {
        Scope::Gpu => &[
            Variable {
                name: "gpu",
                help: "the GPU's readings (fields below)",
            },
            Variable {
                name: "probe",
                help: "its latest probe, by test (`probe.gemm_bf16.figure`); a test it did not run is absent",
            },
            Variable {
                name: "jobs",
                help: "the Slurm jobs on it (list of string)",
            },
            Variable {
                name: "pods",
                help: "the Kubernetes pods on it, `namespace/pod` (list of string)",
            },
        ],
        Scope::Port => &[Variable {
            name: "port",
            help: "the port's state and counters (fields below)",
        }],
        Scope::Node => &[
            Variable {
                name: "node",
                help: "the node (fields below)",
            },
            Variable {
                name: "gpus",
                help: "every GPU, each with the fields of `gpu` (list of map)",
            },
        ],
    }
}

/// A map of the fields of `facts` that `wanted` keeps (all of them: `None`). A field without
/// a value is left out.
pub(crate) fn map_of<T, R: Read<T>>(fields: &[Field<R>], facts: &T, wanted: Option<&[&str]>) -> Value {
    let mut map = std::collections::HashMap::with_capacity(wanted.map_or(fields.len(), <[_]>::len));
    for field in fields {
        if wanted.is_some_and(|w| !w.contains(&field.name)) {
            continue;
        }
        if let Some(value) = field.read.read(facts) {
            map.insert(field.name.to_string(), value);
        }
    }
    Value::from(map)
}

/// The probe's tests as a map of test to figures.
pub(crate) fn probe_map(figures: &[ProbeFigure]) -> Value {
    let map: std::collections::HashMap<String, Value> = figures
        .iter()
        .map(|f| (f.test.to_string(), map_of(PROBE_FIELDS, f, None)))
        .collect();
    Value::from(map)
}

/// A map with every field present, of its kind: what `config check`'s dry run evaluates.
pub(crate) fn sample_map<R>(fields: &[Field<R>]) -> Value {
    let map: std::collections::HashMap<String, Value> =
        fields.iter().map(|f| (f.name.to_string(), f.kind.sample())).collect();
    Value::from(map)
}

/// The sample of a variable, for the dry run: every field and every probe test present.
pub(crate) fn sample(variable: &str) -> Option<Value> {
    Some(match variable {
        "gpu" => sample_map(GPU_FIELDS),
        "probe" => {
            let tests: std::collections::HashMap<String, Value> = crate::model::probe::Test::ALL
                .iter()
                .map(|t| (t.name().to_string(), sample_map(PROBE_FIELDS)))
                .collect();
            Value::from(tests)
        }
        "jobs" | "pods" => Kind::Strings.sample(),
        "port" => sample_map(PORT_FIELDS),
        "node" => sample_map(NODE_FIELDS),
        "gpus" => Value::List(Arc::new(vec![sample_map(GPU_FIELDS)])),
        _ => return None,
    })
}

/// The fields a map variable has, for an error that lists them.
pub(crate) fn field_names(variable: &str) -> Option<Vec<&'static str>> {
    fn names<R>(fields: &[Field<R>]) -> Vec<&'static str> {
        fields.iter().map(|f| f.name).collect()
    }
    Some(match variable {
        "gpu" => names(GPU_FIELDS),
        "port" => names(PORT_FIELDS),
        "node" => names(NODE_FIELDS),
        "probe" => crate::model::probe::Test::ALL.iter().map(|t| t.name()).collect(),
        _ => return None,
    })
}

/// The numeric fields a window can be taken over in `scope`, with their kinds.
pub(crate) fn window_kind(scope: Scope, series: &str) -> Option<Kind> {
    let kind = match scope {
        Scope::Gpu => GPU_FIELDS.iter().find(|f| f.name == series).map(|f| f.kind),
        Scope::Port => PORT_FIELDS.iter().find(|f| f.name == series).map(|f| f.kind),
        Scope::Node => NODE_FIELDS.iter().find(|f| f.name == series).map(|f| f.kind),
    }?;
    kind.numeric().then_some(kind)
}

/// The numeric value of a window's series now, for `scope`'s facts.
pub(crate) fn series_value<T, R: Read<T>>(fields: &[Field<R>], facts: &T, series: &str) -> Option<f64> {
    let field = fields.iter().find(|f| f.name == series)?;
    match field.read.read(facts)? {
        Value::Int(i) => Some(i as f64),
        Value::Float(f) => Some(f),
        _ => None,
    }
}

/// docs/health.md's language reference: every scope's variables and fields.
#[cfg(test)]
pub(crate) fn reference() -> String {
    fn table<R>(out: &mut String, title: &str, fields: &[Field<R>]) {
        out.push_str(&format!(
            "\n{title}\n\n| field | type | meaning |\n| --- | --- | --- |\n"
        ));
        for f in fields {
            out.push_str(&format!("| `{}` | {} | {} |\n", f.name, f.kind.label(), f.help));
        }
    }
    let mut out = String::new();
    for scope in [Scope::Gpu, Scope::Port, Scope::Node] {
        out.push_str(&format!("\n`on: {}` rules see:\n\n", scope.label()));
        for v in variables(scope) {
            out.push_str(&format!("- `{}`: {}\n", v.name, v.help));
        }
    }
    table(&mut out, "The fields of `gpu` (and of each of `gpus`):", GPU_FIELDS);
    table(&mut out, "The fields of each test of `probe`:", PROBE_FIELDS);
    table(&mut out, "The fields of `port`:", PORT_FIELDS);
    table(&mut out, "The fields of `node`:", NODE_FIELDS);
    out
}

#[cfg(test)]
mod tests {
    /// docs/health.md's language reference is this module's tables.
    #[test]
    fn the_docs_list_every_variable_and_field() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/health.md")).unwrap();
        let inside = doc
            .split("<!-- rule-reference -->")
            .nth(1)
            .and_then(|rest| rest.split("<!-- /rule-reference -->").next())
            .expect("docs/health.md has the rule reference markers");
        if std::env::var_os("GOLDEN_UPDATE").is_some() {
            // Between the markers only (an empty reference is "\n", which is everywhere).
            let (before, rest) = doc.split_once("<!-- rule-reference -->").unwrap();
            let (_, after) = rest.split_once("<!-- /rule-reference -->").unwrap();
            let updated = format!(
                "{before}<!-- rule-reference -->{}<!-- /rule-reference -->{after}",
                super::reference()
            );
            std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/health.md"), updated).unwrap();
            return;
        }
        assert_eq!(
            inside,
            super::reference(),
            "GOLDEN_UPDATE=1 cargo test --lib the_docs_list writes it"
        );
    }

    /// Every field has a sample of its kind for the dry run, and a name a map key can be.
    #[test]
    fn every_field_is_sampled() {
        for variable in ["gpu", "port", "node", "probe", "gpus", "jobs", "pods"] {
            assert!(super::sample(variable).is_some(), "{variable}");
        }
        for scope in [super::Scope::Gpu, super::Scope::Port, super::Scope::Node] {
            for v in super::variables(scope) {
                assert!(super::sample(v.name).is_some(), "{}", v.name);
            }
        }
    }
}
