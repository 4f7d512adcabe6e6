//! gpuwarden's own families (`gpuwarden_*`): its build, its backends, its polls.

use super::{Family, Kind, Read};

/// The families `metrics.poll_timing: false` turns off: the time of each vendor call and the
/// poll histograms, about 70 series a node that no shipped rule or dashboard reads.
pub(crate) const POLL_TIMING: &[&str] = &[
    "gpuwarden_vendor_call_seconds",
    "gpuwarden_poll_duration_seconds",
    "gpuwarden_poll_round_duration_seconds",
];

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpuwarden_build_info",
        kind: Kind::Gauge,
        unit: "",
        help: "gpuwarden's version and git revision; always 1.",
        labels: &["version", "revision"],
        dcgm: &[],
        read: Read::Node(|_, s| s.labelled(&[env!("CARGO_PKG_VERSION"), env!("GPUWARDEN_REVISION")], 1.0)),
    },
    Family {
        name: "gpuwarden_backend_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the vendor library is loaded and initialised; absent for a vendor that is not on the node (no amdgpu driver).",
        labels: &["backend"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (name, status) in snapshot.backends.iter().filter(|(_, status)| !status.absent) {
                s.labelled(&[name], super::one_if(status.up));
            }
        }),
    },
    Family {
        name: "gpuwarden_collector_errors",
        kind: Kind::Counter,
        unit: "",
        help: "Vendor library calls that failed, by backend and call. Unsupported readings are not errors.",
        labels: &["backend", "call"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (name, status) in snapshot.backends.iter() {
                for (call, n) in status.errors.iter() {
                    s.labelled(&[name, call], n as f64);
                }
            }
        }),
    },
    Family {
        name: "gpuwarden_vendor_call_seconds",
        kind: Kind::Counter,
        unit: "seconds",
        help: "Time spent inside vendor library calls, by backend and call (NVML calls by name; other backends as call=\"all\"): sum by backend and compare with gpuwarden_poll_duration_seconds_sum for gpuwarden's own share of a poll.",
        labels: &["backend", "call"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (name, status) in snapshot.backends.iter() {
                if status.poll_duration.count > 0 {
                    for (call, seconds) in status.call_seconds_by_call.iter() {
                        // A sum of many float durations: nanoseconds are all the precision there is.
                        s.labelled(&[name, call], (seconds * 1e9).round() / 1e9);
                    }
                }
            }
        }),
    },
    Family {
        name: "gpuwarden_input_skipped",
        kind: Kind::Counter,
        unit: "",
        help: "Things skipped while reading inputs from outside (input: job_mapping, proc, sysfs, kernel_log, kubelet), by reason: symlink (not followed), not_regular_file (a FIFO, socket, device or directory), outside_root (a sysfs link leaving the sysfs root), too_large (read up to the bound), unreadable, name (a file that is not one gpuwarden reads), invalid_value, too_many (beyond a bound on entries or series). Counted at each read; the log names an example.",
        labels: &["input", "reason"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (input, reason, n) in &snapshot.input_skipped {
                s.labelled(&[input, reason], *n as f64);
            }
        }),
    },
    Family {
        name: "gpuwarden_persistence_enable_attempts",
        kind: Kind::Counter,
        unit: "",
        help: "Attempts to turn persistence mode on, by GPU and result (enabled, not_permitted, failed).",
        labels: &["gpu", "uuid", "result"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for ((uuid, result), n) in snapshot.persistence_attempts.iter() {
                let gpu = snapshot
                    .devices
                    .iter()
                    .find(|d| &d.identity.uuid == uuid)
                    .map(|d| d.identity.index.to_string())
                    .unwrap_or_default();
                s.labelled(&[&gpu, uuid, result.label()], *n as f64);
            }
        }),
    },
    Family {
        name: "gpuwarden_poll_duration_seconds",
        kind: Kind::Histogram,
        unit: "seconds",
        help: "Time one poll of one GPU took, by backend.",
        labels: &["backend"],
        dcgm: &[],
        read: Read::Histograms(|snapshot| {
            snapshot
                .backends
                .iter()
                .map(|(name, status)| (vec![name.to_string()], &status.poll_duration))
                .collect()
        }),
    },
    Family {
        name: "gpuwarden_poll_round_duration_seconds",
        kind: Kind::Histogram,
        unit: "seconds",
        help: "Wall time of one poll round over all GPUs, polled in parallel; at most poll.timeout.",
        labels: &[],
        dcgm: &[],
        read: Read::Histograms(|snapshot| vec![(Vec::new(), &snapshot.round_duration)]),
    },
    Family {
        name: "gpuwarden_journal_up",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the health journal (state.path) was opened and its last write succeeded; 0 when it cannot be written (locked, read-only, full disk; the log says what to do). Metrics and health go on either way. Absent when the journal is off.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(journal) = &snapshot.journal {
                s.value(super::one_if(journal.up));
            }
        }),
    },
    Family {
        name: "gpuwarden_journal_write_errors",
        kind: Kind::Counter,
        unit: "",
        help: "Journal opens and transactions that failed since start (while it cannot be written an open is tried after 1 s, backing off to every 30 s); their rows are kept in memory (up to 10,000) and written when the database can be written again.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(journal) = &snapshot.journal {
                s.value(journal.write_errors as f64);
            }
        }),
    },
    Family {
        name: "gpuwarden_journal_dropped",
        kind: Kind::Counter,
        unit: "",
        help: "Journal rows not written because its queue or its in-memory backlog was full (an XID storm while the database could not be written).",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(journal) = &snapshot.journal {
                s.value(journal.dropped as f64);
            }
        }),
    },
    Family {
        name: "gpuwarden_journal_rows_written",
        kind: Kind::Counter,
        unit: "",
        help: "Journal rows written since start.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(journal) = &snapshot.journal {
                s.value(journal.rows_written as f64);
            }
        }),
    },
    Family {
        name: "gpuwarden_journal_size_bytes",
        kind: Kind::Gauge,
        unit: "bytes",
        help: "The journal database's pages in use, checked every minute; rows past state.retention or beyond state.max_size_mib (oldest first) are deleted.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            if let Some(journal) = &snapshot.journal {
                s.value(journal.bytes as f64);
            }
        }),
    },
];
