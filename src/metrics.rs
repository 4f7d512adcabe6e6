//! The metric families: how a [`Snapshot`] becomes Prometheus series.
//!
//! A prometheus-client `Collector` over one snapshot builds every family from it at encode
//! time; nothing here holds live metric objects. Every device series carries `gpu`, `uuid`
//! and `vendor`; descriptive labels live on `gpu_info` only, to be joined with
//! `* on(uuid) group_left(name) gpu_info`. A family with no samples is left out entirely.
//! docs/metrics.md documents each family; keep the two in step.

use crate::health::{self, HealthState};
use crate::model::{DeviceReadings, DeviceSnapshot, DurationHistogram, Snapshot, unix_seconds};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::Arc;

type Labels = Vec<(&'static str, String)>;

/// One family's samples, collected before anything is written so empty families vanish.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(Labels, f64)>,
}

impl Family {
    fn new(name: &'static str, kind: MetricType, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: Labels, value: f64) {
        self.samples.push((labels, value));
    }

    fn add_opt(&mut self, labels: Labels, value: Option<f64>) {
        if let Some(v) = value {
            self.add(labels, v);
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.samples.is_empty() {
            return Ok(());
        }
        let mut metric = encoder.encode_descriptor(self.name, self.help, None, self.kind)?;
        for (labels, value) in &self.samples {
            let mut sample = metric.encode_family(labels)?;
            match self.kind {
                MetricType::Counter => {
                    sample.encode_counter::<NoLabelSet, f64, f64>(value, None)?;
                }
                _ => sample.encode_gauge(value)?,
            }
        }
        Ok(())
    }
}

fn device_labels(d: &DeviceSnapshot) -> Labels {
    vec![
        ("gpu", d.identity.index.to_string()),
        ("uuid", d.identity.uuid.clone()),
        ("vendor", d.identity.vendor.label().to_string()),
    ]
}

fn with(base: &Labels, extra: &[(&'static str, &str)]) -> Labels {
    let mut labels = base.clone();
    labels.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    labels
}

fn bool_value(b: Option<bool>) -> Option<f64> {
    b.map(|b| if b { 1.0 } else { 0.0 })
}

/// Encodes every family of one snapshot.
#[derive(Debug)]
pub struct SnapshotCollector {
    snapshot: Arc<Snapshot>,
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for family in families(&self.snapshot) {
            family.encode(&mut encoder)?;
        }
        encode_self_metrics(&self.snapshot, &mut encoder)
    }
}

/// A registry holding only this snapshot's collector, ready to encode.
pub fn registry_for(snapshot: Arc<Snapshot>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SnapshotCollector { snapshot }));
    registry
}

fn families(snapshot: &Snapshot) -> Vec<Family> {
    use MetricType::{Counter, Gauge};
    let mut info = Family::new(
        "gpu_info",
        Gauge,
        "GPU identity; always 1. Join on uuid for the name, PCI bus id, driver and serial.",
    );
    let mut up = Family::new(
        "gpu_up",
        Gauge,
        "1 when the last poll reached the GPU within poll.timeout, 0 when it did not or the GPU is lost.",
    );
    let mut last_poll = Family::new(
        "gpu_last_poll_timestamp_seconds",
        Gauge,
        "Unix time of the last poll that reached the GPU.",
    );
    let mut health_state = Family::new(
        "gpu_health",
        Gauge,
        "Health verdict, one-hot over state (ok, degraded, unhealthy); see docs/health.md.",
    );
    let mut health_reason = Family::new(
        "gpu_health_reason",
        Gauge,
        "1 for each finding behind a degraded or unhealthy verdict.",
    );
    let mut temperature = Family::new("gpu_temperature_celsius", Gauge, "Temperature by sensor (gpu, memory).");
    let mut threshold = Family::new(
        "gpu_temperature_threshold_celsius",
        Gauge,
        "Temperature thresholds: slowdown, shutdown, gpu_max, memory_max.",
    );
    let mut event_active = Family::new(
        "gpu_clock_event_active",
        Gauge,
        "1 while a clock-event (throttle) reason holds the clocks down; one series per reason the GPU supports.",
    );
    let mut event_seconds = Family::new(
        "gpu_clock_event_seconds",
        Counter,
        "Cumulative time the clocks were held down by each reason, from the driver's own counters.",
    );
    let mut power = Family::new("gpu_power_watts", Gauge, "Power draw.");
    let mut power_limit = Family::new("gpu_power_limit_watts", Gauge, "Enforced power limit.");
    let mut energy = Family::new("gpu_energy_joules", Counter, "Energy used since the driver loaded.");
    let mut clock = Family::new(
        "gpu_clock_hertz",
        Gauge,
        "Current clock by domain (sm, memory, graphics).",
    );
    let mut utilization = Family::new(
        "gpu_utilization_ratio",
        Gauge,
        "Fraction of the last sample period in which a kernel ran.",
    );
    let mut copy_utilization = Family::new(
        "gpu_memory_copy_utilization_ratio",
        Gauge,
        "Fraction of the last sample period in which device memory was read or written.",
    );
    let mut memory_used = Family::new("gpu_memory_used_bytes", Gauge, "Device memory in use.");
    let mut memory_total = Family::new("gpu_memory_total_bytes", Gauge, "Device memory in all.");
    let mut pcie_gen = Family::new(
        "gpu_pcie_link_generation",
        Gauge,
        "Current PCIe link generation (idle GPUs lower it to save power).",
    );
    let mut pcie_gen_max = Family::new(
        "gpu_pcie_link_generation_max",
        Gauge,
        "Highest PCIe link generation the GPU supports.",
    );
    let mut pcie_width = Family::new("gpu_pcie_link_width_lanes", Gauge, "Current PCIe link width.");
    let mut pcie_width_max = Family::new(
        "gpu_pcie_link_width_max_lanes",
        Gauge,
        "Widest PCIe link the GPU supports.",
    );
    let mut pcie_degraded = Family::new(
        "gpu_pcie_link_width_degraded",
        Gauge,
        "1 when the PCIe link is narrower than the GPU supports.",
    );
    let mut pcie_replay = Family::new(
        "gpu_pcie_replay_errors",
        Counter,
        "PCIe replays (retransmitted packets) since the driver loaded.",
    );
    let mut ecc_mode = Family::new("gpu_ecc_mode", Gauge, "1 when ECC is enabled.");
    let mut ecc = Family::new(
        "gpu_ecc_errors",
        Counter,
        "ECC errors by type (corrected, uncorrected) and scope (volatile: since the driver loaded; aggregate: lifetime).",
    );
    let mut remapped = Family::new(
        "gpu_remapped_rows",
        Gauge,
        "Memory rows remapped, by cause (correctable, uncorrectable).",
    );
    let mut remap_pending = Family::new(
        "gpu_row_remap_pending",
        Gauge,
        "1 when a row remap waits for a GPU reset.",
    );
    let mut remap_failed = Family::new(
        "gpu_row_remap_failed",
        Gauge,
        "1 when a row remap failed: the GPU is out of spare rows.",
    );
    let mut persistence = Family::new("gpu_persistence_mode", Gauge, "1 when persistence mode is on.");
    let mut pstate = Family::new(
        "gpu_performance_state",
        Gauge,
        "Performance state: 0 (P0, fastest) to 15.",
    );
    let mut fan = Family::new("gpu_fan_speed_ratio", Gauge, "Fan speed as a fraction of its maximum.");
    let mut xid_errors = Family::new(
        "gpu_xid_errors",
        Counter,
        "XID errors by code and severity, from NVML events and the kernel log, each event counted once.",
    );
    let mut xid_last_seen = Family::new(
        "gpu_xid_last_seen_timestamp_seconds",
        Gauge,
        "Unix time an XID code was last seen on the GPU.",
    );

    for d in &snapshot.devices {
        let base = device_labels(d);
        info.add(
            with(
                &base,
                &[
                    ("name", &d.identity.name),
                    ("pci_bus_id", &d.identity.pci_bus_id),
                    ("driver_version", &d.identity.driver_version),
                    ("serial", d.identity.serial.as_deref().unwrap_or("")),
                ],
            ),
            1.0,
        );
        up.add(base.clone(), if d.up { 1.0 } else { 0.0 });
        last_poll.add_opt(base.clone(), d.last_good_poll.map(unix_seconds));

        let xids = snapshot.xid.for_bus(&d.identity.pci_bus_id);
        for x in xids {
            let code = x.xid.to_string();
            xid_errors.add(
                with(&base, &[("xid", &code), ("severity", x.severity.label())]),
                x.count as f64,
            );
            xid_last_seen.add(with(&base, &[("xid", &code)]), unix_seconds(x.last_seen));
        }
        let findings = health::device_findings(snapshot, d);
        let verdict = health::state(&findings);
        for state in HealthState::ALL {
            health_state.add(
                with(&base, &[("state", state.label())]),
                if state == verdict { 1.0 } else { 0.0 },
            );
        }
        for finding in &findings {
            health_reason.add(with(&base, &[("reason", finding.reason)]), 1.0);
        }

        let Some(r) = d.readings.as_ref().filter(|_| d.up) else {
            continue;
        };
        let DeviceReadings {
            pcie, remapped_rows, ..
        } = r;
        for (sensor, t) in &r.temperatures {
            temperature.add(with(&base, &[("sensor", sensor)]), *t);
        }
        for (name, t) in &r.temperature_thresholds {
            threshold.add(with(&base, &[("threshold", name)]), *t);
        }
        for e in &r.clock_events {
            event_active.add(with(&base, &[("reason", e.reason)]), if e.active { 1.0 } else { 0.0 });
        }
        for (reason, seconds) in &r.clock_event_seconds {
            event_seconds.add(with(&base, &[("reason", reason)]), *seconds);
        }
        power.add_opt(base.clone(), r.power_watts);
        power_limit.add_opt(base.clone(), r.power_limit_watts);
        energy.add_opt(base.clone(), r.energy_joules);
        for (name, hz) in &r.clocks_hertz {
            clock.add(with(&base, &[("clock", name)]), *hz);
        }
        utilization.add_opt(base.clone(), r.utilization_ratio);
        copy_utilization.add_opt(base.clone(), r.memory_copy_utilization_ratio);
        memory_used.add_opt(base.clone(), r.memory_used_bytes.map(|b| b as f64));
        memory_total.add_opt(base.clone(), r.memory_total_bytes.map(|b| b as f64));
        pcie_gen.add_opt(base.clone(), pcie.generation.map(f64::from));
        pcie_gen_max.add_opt(base.clone(), pcie.generation_max.map(f64::from));
        pcie_width.add_opt(base.clone(), pcie.width.map(f64::from));
        pcie_width_max.add_opt(base.clone(), pcie.width_max.map(f64::from));
        pcie_degraded.add_opt(base.clone(), bool_value(pcie.width_degraded()));
        pcie_replay.add_opt(base.clone(), pcie.replay_errors.map(|n| n as f64));
        ecc_mode.add_opt(base.clone(), bool_value(r.ecc_enabled));
        for e in &r.ecc_errors {
            ecc.add(
                with(&base, &[("type", e.error_type.label()), ("scope", e.scope.label())]),
                e.count as f64,
            );
        }
        remapped.add_opt(
            with(&base, &[("cause", "correctable")]),
            remapped_rows.correctable.map(|n| n as f64),
        );
        remapped.add_opt(
            with(&base, &[("cause", "uncorrectable")]),
            remapped_rows.uncorrectable.map(|n| n as f64),
        );
        remap_pending.add_opt(base.clone(), bool_value(remapped_rows.pending));
        remap_failed.add_opt(base.clone(), bool_value(remapped_rows.failed));
        persistence.add_opt(base.clone(), bool_value(r.persistence_mode));
        pstate.add_opt(base.clone(), r.performance_state.map(f64::from));
        fan.add_opt(base.clone(), r.fan_speed_ratio);
    }

    vec![
        info,
        up,
        last_poll,
        health_state,
        health_reason,
        temperature,
        threshold,
        event_active,
        event_seconds,
        power,
        power_limit,
        energy,
        clock,
        utilization,
        copy_utilization,
        memory_used,
        memory_total,
        pcie_gen,
        pcie_gen_max,
        pcie_width,
        pcie_width_max,
        pcie_degraded,
        pcie_replay,
        ecc_mode,
        ecc,
        remapped,
        remap_pending,
        remap_failed,
        persistence,
        pstate,
        fan,
        xid_errors,
        xid_last_seen,
    ]
    .into_iter()
    .chain(probe_families(snapshot))
    .collect()
}

/// The `gpu_probe_*` families: the latest scheduled probe of each GPU, and the run and skip
/// counters. Compute and bandwidth have families of their own so each carries its unit.
fn probe_families(snapshot: &Snapshot) -> Vec<Family> {
    use crate::probe::Unit;
    use MetricType::{Counter, Gauge};
    let mut flops = Family::new(
        "gpu_probe_flops_per_second",
        Gauge,
        "Compute throughput the last probe measured (figure: burst, sustained).",
    );
    let mut bandwidth = Family::new(
        "gpu_probe_bytes_per_second",
        Gauge,
        "Bandwidth the last probe measured (figure: burst, sustained); hbm_copy counts bytes read plus written.",
    );
    let mut expected_flops = Family::new(
        "gpu_probe_expected_flops_per_second",
        Gauge,
        "Sustained compute throughput this GPU model should reach.",
    );
    let mut expected_bandwidth = Family::new(
        "gpu_probe_expected_bytes_per_second",
        Gauge,
        "Sustained bandwidth this GPU model should reach.",
    );
    let mut ratio = Family::new(
        "gpu_probe_ratio",
        Gauge,
        "Sustained figure of the last probe divided by the expected value.",
    );
    let mut pass = Family::new(
        "gpu_probe_pass",
        Gauge,
        "1 when the test reached probe.pass_fraction of its expected value in the last probe, 0 when not.",
    );
    let mut duration = Family::new(
        "gpu_probe_duration_seconds",
        Gauge,
        "How long the test ran in the last probe.",
    );
    let mut last_run = Family::new(
        "gpu_probe_last_run_timestamp_seconds",
        Gauge,
        "Unix time the last probe of the GPU started.",
    );
    let mut peak_temperature = Family::new(
        "gpu_probe_peak_temperature_celsius",
        Gauge,
        "Highest GPU temperature while the test ran.",
    );
    let mut mean_clock = Family::new(
        "gpu_probe_mean_sm_clock_hertz",
        Gauge,
        "Mean SM clock while the test ran.",
    );
    let mut mean_power = Family::new(
        "gpu_probe_mean_power_watts",
        Gauge,
        "Mean power draw while the test ran.",
    );
    let mut reason_seconds = Family::new(
        "gpu_probe_clock_event_seconds",
        Gauge,
        "Seconds a clock-event (throttle) reason was active while the test ran.",
    );
    let mut runs = Family::new(
        "gpu_probe_runs",
        Counter,
        "Scheduled probes by result: pass, fail, no_verdict, error, timeout.",
    );
    let mut skipped = Family::new(
        "gpu_probe_skipped",
        Counter,
        "Scheduled probes not run because the GPU was busy or down, by reason.",
    );

    let probe = &snapshot.probe;
    for d in &snapshot.devices {
        let base = device_labels(d);
        for ((uuid, result), n) in &probe.runs {
            if *uuid == d.identity.uuid {
                runs.add(with(&base, &[("result", result)]), *n as f64);
            }
        }
        for ((uuid, reason), n) in &probe.skipped {
            if *uuid == d.identity.uuid {
                skipped.add(with(&base, &[("reason", reason)]), *n as f64);
            }
        }
        let Some(report) = probe.reports.get(&d.identity.uuid) else {
            continue;
        };
        last_run.add(base.clone(), report.started);
        for t in &report.tests {
            let labels = with(&base, &[("test", t.test.name())]);
            let (measured, expected) = match t.test.unit() {
                Unit::FlopsPerSecond => (&mut flops, &mut expected_flops),
                Unit::BytesPerSecond => (&mut bandwidth, &mut expected_bandwidth),
            };
            measured.add_opt(with(&labels, &[("figure", "burst")]), t.burst);
            measured.add_opt(with(&labels, &[("figure", "sustained")]), t.sustained);
            expected.add_opt(labels.clone(), t.expected);
            ratio.add_opt(
                labels.clone(),
                t.sustained
                    .zip(t.expected)
                    .filter(|(_, e)| *e > 0.0)
                    .map(|(s, e)| s / e),
            );
            pass.add_opt(labels.clone(), bool_value(t.pass));
            if t.skipped.is_none() {
                duration.add(labels.clone(), t.duration_seconds);
            }
            let u = &t.under_load;
            peak_temperature.add_opt(labels.clone(), u.peak_temperature_celsius);
            mean_clock.add_opt(labels.clone(), u.mean_sm_clock_hertz);
            mean_power.add_opt(labels.clone(), u.mean_power_watts);
            for (reason, seconds) in &u.clock_event_seconds {
                reason_seconds.add(with(&labels, &[("reason", reason)]), *seconds);
            }
        }
    }
    vec![
        flops,
        bandwidth,
        expected_flops,
        expected_bandwidth,
        ratio,
        pass,
        duration,
        last_run,
        peak_temperature,
        mean_clock,
        mean_power,
        reason_seconds,
        runs,
        skipped,
    ]
}

fn encode_self_metrics(snapshot: &Snapshot, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    use MetricType::{Counter, Gauge};
    let mut build = Family::new(
        "gpuwarden_build_info",
        Gauge,
        "gpuwarden's version and git revision; always 1.",
    );
    build.add(
        vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("revision", env!("GPUWARDEN_REVISION").to_string()),
        ],
        1.0,
    );
    let mut backend_up = Family::new(
        "gpuwarden_backend_up",
        Gauge,
        "1 when the vendor library is loaded and initialised.",
    );
    let mut errors = Family::new(
        "gpuwarden_collector_errors",
        Counter,
        "Vendor library calls that failed, by backend and call. Unsupported readings are not errors.",
    );
    let mut persistence = Family::new(
        "gpuwarden_persistence_enable_attempts",
        Counter,
        "Attempts to turn persistence mode on, by GPU and result (enabled, not_permitted, failed).",
    );
    let mut call_seconds = Family::new(
        "gpuwarden_vendor_call_seconds",
        Counter,
        "Time spent inside vendor library calls, by backend: compare with gpuwarden_poll_duration_seconds_sum for gpuwarden's own share of a poll.",
    );
    for (name, status) in &snapshot.backends {
        if status.poll_duration.count > 0 {
            call_seconds.add(vec![("backend", name.to_string())], status.call_seconds);
        }
        backend_up.add(vec![("backend", name.to_string())], if status.up { 1.0 } else { 0.0 });
        for (call, n) in &status.errors {
            errors.add(
                vec![("backend", name.to_string()), ("call", call.to_string())],
                *n as f64,
            );
        }
    }
    for ((uuid, result), n) in &snapshot.persistence_attempts {
        let gpu = snapshot
            .devices
            .iter()
            .find(|d| &d.identity.uuid == uuid)
            .map(|d| d.identity.index.to_string())
            .unwrap_or_default();
        persistence.add(
            vec![("gpu", gpu), ("uuid", uuid.clone()), ("result", result.to_string())],
            *n as f64,
        );
    }
    let mut xid_source_up = Family::new(
        "gpuwarden_xid_source_up",
        Gauge,
        "1 while an XID source (kernel_log, nvml_events) is being read.",
    );
    for (source, up) in &snapshot.xid.sources {
        xid_source_up.add(vec![("source", source.to_string())], if *up { 1.0 } else { 0.0 });
    }
    let mut unattributed = Family::new(
        "gpuwarden_xid_unattributed",
        Counter,
        "XIDs on a PCI bus id that matches no GPU the backends enumerated (NVML down, or a GPU it cannot see).",
    );
    for (bus, counts) in &snapshot.xid.by_bus {
        if snapshot.devices.iter().any(|d| &d.identity.pci_bus_id == bus) {
            continue;
        }
        for x in counts {
            unattributed.add(
                vec![
                    ("pci_bus_id", bus.clone()),
                    ("xid", x.xid.to_string()),
                    ("severity", x.severity.label().to_string()),
                ],
                x.count as f64,
            );
        }
    }
    let mut reports = Family::new(
        "gpuwarden_xid_reports",
        Counter,
        "XID reports received from each source, before the same event from two sources is merged.",
    );
    for (source, n) in &snapshot.xid.reports {
        reports.add(vec![("source", source.to_string())], *n as f64);
    }
    for family in [
        build,
        backend_up,
        errors,
        call_seconds,
        persistence,
        xid_source_up,
        reports,
        unattributed,
    ] {
        family.encode(encoder)?;
    }

    let polls: Vec<(Labels, &DurationHistogram)> = snapshot
        .backends
        .iter()
        .map(|(name, status)| (vec![("backend", name.to_string())], &status.poll_duration))
        .collect();
    encode_histograms(
        encoder,
        "gpuwarden_poll_duration_seconds",
        "Time one poll of one GPU took, by backend.",
        &polls,
    )?;
    encode_histograms(
        encoder,
        "gpuwarden_poll_round_duration_seconds",
        "Wall time of one poll round over all GPUs, polled in parallel; at most poll.timeout.",
        &[(Vec::new(), &snapshot.round_duration)],
    )?;
    Ok(())
}

/// One histogram family; histograms that observed nothing yet are left out, and so is the
/// family when they all are.
fn encode_histograms(
    encoder: &mut DescriptorEncoder,
    name: &'static str,
    help: &'static str,
    histograms: &[(Labels, &DurationHistogram)],
) -> Result<(), std::fmt::Error> {
    let observed: Vec<_> = histograms.iter().filter(|(_, h)| h.count > 0).collect();
    if observed.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in observed {
        let mut sample = metric.encode_family(labels)?;
        sample.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets(), None)?;
    }
    Ok(())
}
