//! Each event sink's delivery as /metrics shows it (journal/sinks/mod.rs keeps it).

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SinkState {
    /// Events the sink acknowledged since the daemon started.
    pub delivered: u64,
    /// Deliveries that failed (each retry counts).
    pub failed: u64,
    /// Rows after the sink's cursor, and how old the oldest of them is (seconds).
    pub lag_rows: u64,
    pub lag_seconds: f64,
    /// The last failure, for a person.
    pub last_error: Option<String>,
}

/// By sink name.
pub(crate) type SinkStates = BTreeMap<String, SinkState>;
