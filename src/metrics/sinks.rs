//! Event sink families (`gpuwarden_sink_*`): each sink's deliveries, failures and lag
//! (docs/journal.md, "Events out"); none without `events.sinks`.

use super::{Family, Kind, Read, Samples};
use crate::model::Snapshot;
use crate::model::sink::SinkState;

/// One sample per sink, labelled with its name, of what `value` reads from its state.
fn per_sink(snapshot: &Snapshot, s: &mut Samples, value: fn(&SinkState) -> f64) {
    for (sink, state) in snapshot.sinks.iter() {
        s.labelled(&[sink], value(state));
    }
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpuwarden_sink_delivered",
        kind: Kind::Counter,
        unit: "",
        help: "Journal rows the sink acknowledged (a 2xx answer) since the daemon started; a row sent again after a restart counts again.",
        labels: &["sink"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_sink(snapshot, s, |state| state.delivered as f64)),
    },
    Family {
        name: "gpuwarden_sink_failed",
        kind: Kind::Counter,
        unit: "",
        help: "Deliveries to the sink that failed (no connection, an answer other than 2xx, a redirect, the timeout); each retry counts.",
        labels: &["sink"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_sink(snapshot, s, |state| state.failed as f64)),
    },
    Family {
        name: "gpuwarden_sink_lag_rows",
        kind: Kind::Gauge,
        unit: "rows",
        help: "Journal rows written and not yet acknowledged by the sink.",
        labels: &["sink"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_sink(snapshot, s, |state| state.lag_rows as f64)),
    },
    Family {
        name: "gpuwarden_sink_lag_seconds",
        kind: Kind::Gauge,
        unit: "seconds",
        help: "How old the oldest row the sink has not acknowledged is; 0 when it has them all (GpuwardenSinkLagging).",
        labels: &["sink"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| per_sink(snapshot, s, |state| state.lag_seconds)),
    },
];
