//! Probe families (`gpu_probe_*`): the latest scheduled probe of each GPU, and the run and
//! skip counters. Compute and bandwidth have families of their own so each carries its unit.

use super::{Family, Kind, Read, Samples};
use crate::model::probe::{ProbeReport, TestResult, Unit};
use crate::model::{DeviceSnapshot, Snapshot};

/// Calls `read` for each test of the GPU's latest probe report, with the test's name.
fn each_test(snapshot: &Snapshot, d: &DeviceSnapshot, s: &mut Samples, read: fn(&TestResult, &str, &mut Samples)) {
    if let Some(report) = latest(snapshot, d) {
        for t in &report.tests {
            read(t, t.test.name(), s);
        }
    }
}

fn latest<'a>(snapshot: &'a Snapshot, d: &DeviceSnapshot) -> Option<&'a ProbeReport> {
    snapshot.probe.reports.get(&d.identity.uuid)
}

/// The burst and sustained figures of the tests measured in `unit`.
fn figures(t: &TestResult, test: &str, unit: Unit, s: &mut Samples) {
    if t.test.unit() == unit {
        s.labelled_opt(&[test, "burst"], t.burst);
        s.labelled_opt(&[test, "sustained"], t.sustained);
    }
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "gpu_probe_flops_per_second",
        kind: Kind::Gauge,
        unit: "flops_per_second",
        help: "Compute throughput the last probe measured (figure: burst, sustained).",
        labels: &["test", "figure"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| figures(t, test, Unit::FlopsPerSecond, s))
        }),
    },
    Family {
        name: "gpu_probe_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes_per_second",
        help: "Bandwidth the last probe measured (figure: burst, sustained); hbm_copy counts bytes read plus written.",
        labels: &["test", "figure"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| figures(t, test, Unit::BytesPerSecond, s))
        }),
    },
    Family {
        name: "gpu_probe_expected_flops_per_second",
        kind: Kind::Gauge,
        unit: "flops_per_second",
        help: "Sustained compute throughput this GPU model should reach.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                if t.test.unit() == Unit::FlopsPerSecond {
                    s.labelled_opt(&[test], t.expected)
                }
            })
        }),
    },
    Family {
        name: "gpu_probe_expected_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes_per_second",
        help: "Sustained bandwidth this GPU model should reach.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                if t.test.unit() == Unit::BytesPerSecond {
                    s.labelled_opt(&[test], t.expected)
                }
            })
        }),
    },
    Family {
        name: "gpu_probe_ratio",
        kind: Kind::Gauge,
        unit: "ratio",
        help: "Sustained figure of the last probe divided by the expected value.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                let ratio = t
                    .sustained
                    .zip(t.expected)
                    .filter(|(_, e)| *e > 0.0)
                    .map(|(v, e)| v / e);
                s.labelled_opt(&[test], ratio)
            })
        }),
    },
    Family {
        name: "gpu_probe_pass",
        kind: Kind::Gauge,
        unit: "",
        help: "1 when the test reached probe.pass_fraction of its expected value in the last probe, 0 when not; for sdc, 1 when every result the GPU gave on its own was right.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                s.labelled_opt(&[test], t.pass.map(super::one_if))
            })
        }),
    },
    Family {
        name: "gpu_probe_duration_seconds",
        kind: Kind::Gauge,
        unit: "seconds",
        help: "How long the test ran in the last probe.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                if t.skipped.is_none() {
                    s.labelled(&[test], t.duration_seconds)
                }
            })
        }),
    },
    Family {
        name: "gpu_probe_last_run_timestamp_seconds",
        kind: Kind::Gauge,
        unit: "seconds",
        help: "Unix time the last probe of the GPU started.",
        labels: &[],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| s.opt(latest(snapshot, d).map(|r| r.started))),
    },
    Family {
        name: "gpu_probe_peak_temperature_celsius",
        kind: Kind::Gauge,
        unit: "celsius",
        help: "Highest GPU temperature while the test ran.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                s.labelled_opt(&[test], t.under_load.peak_temperature_celsius)
            })
        }),
    },
    Family {
        name: "gpu_probe_mean_sm_clock_hertz",
        kind: Kind::Gauge,
        unit: "hertz",
        help: "Mean SM clock while the test ran.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                s.labelled_opt(&[test], t.under_load.mean_sm_clock_hertz)
            })
        }),
    },
    Family {
        name: "gpu_probe_mean_power_watts",
        kind: Kind::Gauge,
        unit: "watts",
        help: "Mean power draw while the test ran.",
        labels: &["test"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                s.labelled_opt(&[test], t.under_load.mean_power_watts)
            })
        }),
    },
    Family {
        name: "gpu_probe_clock_event_seconds",
        kind: Kind::Gauge,
        unit: "seconds",
        help: "Seconds a clock-event (throttle) reason was active while the test ran.",
        labels: &["test", "reason"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            each_test(snapshot, d, s, |t, test, s| {
                for (reason, seconds) in &t.under_load.clock_event_seconds {
                    s.labelled(&[test, reason], *seconds);
                }
            })
        }),
    },
    Family {
        name: "gpu_probe_runs",
        kind: Kind::Counter,
        unit: "",
        help: "Scheduled probes by result: pass, fail, no_verdict, error, timeout.",
        labels: &["result"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            for ((uuid, result), n) in &snapshot.probe.runs {
                if *uuid == d.identity.uuid {
                    s.labelled(&[result], *n as f64);
                }
            }
        }),
    },
    Family {
        name: "gpu_probe_skipped",
        kind: Kind::Counter,
        unit: "",
        help: "Scheduled probes not run because the GPU was busy or down, by reason.",
        labels: &["reason"],
        dcgm: &[],
        read: Read::Device(|snapshot, d, s| {
            for ((uuid, reason), n) in &snapshot.probe.skipped {
                if *uuid == d.identity.uuid {
                    s.labelled(&[reason], *n as f64);
                }
            }
        }),
    },
    Family {
        name: "gpuwarden_collective_bus_bandwidth_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes_per_second",
        help: "Bus bandwidth of the latest all-reduce across the node's NVIDIA GPUs (docs/probe.md, \"The GPUs together\"), as NCCL's tests count it; absent until one ran to the end.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| s.opt(snapshot.probe.collective.as_ref().and_then(|c| c.bus_bandwidth))),
    },
    Family {
        name: "gpuwarden_collective_bound_bytes_per_second",
        kind: Kind::Gauge,
        unit: "bytes_per_second",
        help: "What the path between the node's GPUs carries one way, the slowest GPU's (NVLink links x rate, else PCIe generation x width): what the all-reduce's bus bandwidth is judged against; absent where the driver does not say.",
        labels: &[],
        dcgm: &[],
        read: Read::Node(|snapshot, s| s.opt(snapshot.probe.collective.as_ref().and_then(|c| c.bound))),
    },
    Family {
        name: "gpuwarden_collective_runs",
        kind: Kind::Counter,
        unit: "",
        help: "The daemon's all-reduces across the node's GPUs by result: passed, slow (collective_slow), failed (collective_failed), skipped (NCCL not installed, a GPU busy, something unhealthy).",
        labels: &["result"],
        dcgm: &[],
        read: Read::Node(|snapshot, s| {
            for (result, n) in &snapshot.probe.collective_runs {
                s.labelled(&[result], *n as f64);
            }
        }),
    },
];
