//! The operator's rules' families (`gpuwarden_custom_rule_*`): whether each runs, and what
//! it costs (docs/health.md, "Rules as code"); none without `health.custom_rules`.

use super::{Family, Kind, Read, Samples};
use crate::model::Snapshot;
use crate::model::health::CustomRuleStatus;

/// One sample per rule, labelled with its name and scope, of what `value` reads.
fn per_rule(snapshot: &Snapshot, s: &mut Samples, value: fn(&CustomRuleStatus) -> f64) {
    for rule in snapshot.custom_rules.iter() {
        s.labelled(&[&rule.name, rule.scope], value(rule));
    }
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpuwarden_custom_rule_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 while the operator's rule runs; 0 once it was disabled until the config changes it: it failed at run time, one evaluation took over 50 ms of CPU, it was over 20 ms of CPU a snapshot in 3 of its last 10, or the node's rules together were over their budget (GpuwardenCustomRuleDisabled; the log says why).",
        labels: &["rule", "on"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_rule(snapshot, s, |r| super::one_if(r.disabled.is_none()))),
    },
    Family {
        name: "gpuwarden_custom_rule_evaluations",
        kind: Kind::Counter,
        unit: "",
        help: "Evaluations of the operator's rule since the daemon started: one per GPU or port (or one for the node) per snapshot.",
        labels: &["rule", "on"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_rule(snapshot, s, |r| r.evaluations as f64)),
    },
    Family {
        name: "gpuwarden_custom_rule_evaluation_seconds",
        kind: Kind::Counter,
        unit: "seconds",
        help: "CPU time the operator's rule's evaluations took since the daemon started, on the snapshot thread.",
        labels: &["rule", "on"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_rule(snapshot, s, |r| r.seconds)),
    },
];
