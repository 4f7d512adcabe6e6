//! Render time per series: what a scrape costs when its snapshot is not cached yet (once per
//! poll round and format). `cargo bench --bench render`
//!
//! Builds snapshots of 8 and 64 GPUs with every reading present, renders each in both formats
//! many times and prints the median time per render and per series.

use gpuwarden::exposition::{openmetrics_to_text, render_openmetrics};
use gpuwarden::model::*;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

fn device(index: u32) -> DeviceSnapshot {
    let readings = DeviceReadings {
        temperatures: vec![("gpu", 61.0), ("memory", 67.0)],
        temperature_thresholds: vec![
            ("slowdown", 89.0),
            ("shutdown", 95.0),
            ("gpu_max", 87.0),
            ("memory_max", 95.0),
        ],
        clock_events: gpuwarden::clock_events::decode_nvidia(0x4, 511),
        clock_event_seconds: vec![
            ("sw_power_cap", 21.0),
            ("sync_boost", 0.0),
            ("sw_thermal_slowdown", 0.0),
            ("hw_thermal_slowdown", 0.0),
            ("hw_power_brake_slowdown", 0.0),
        ],
        power_watts: Some(690.0),
        power_limit_watts: Some(700.0),
        energy_joules: Some(9.1e7),
        clocks_hertz: vec![("sm", 1.44e9), ("memory", 3.201e9), ("graphics", 1.44e9)],
        utilization_ratio: Some(1.0),
        memory_copy_utilization_ratio: Some(0.5),
        memory_used_bytes: Some(120 << 30),
        memory_total_bytes: Some(150_754_820_096),
        pcie: Pcie {
            generation: Some(5),
            generation_max: Some(5),
            width: Some(16),
            width_max: Some(16),
            replay_errors: Some(0),
        },
        ecc_enabled: Some(true),
        ecc_errors: [EccType::Corrected, EccType::Uncorrected]
            .iter()
            .flat_map(|t| {
                [EccScope::Volatile, EccScope::Aggregate].map(|s| EccCount {
                    error_type: *t,
                    scope: s,
                    count: 0,
                })
            })
            .collect(),
        remapped_rows: RemappedRows {
            correctable: Some(0),
            uncorrectable: Some(0),
            pending: Some(false),
            failed: Some(false),
        },
        persistence_mode: Some(true),
        performance_state: Some(0),
        fan_speed_ratio: None,
    };
    DeviceSnapshot {
        identity: DeviceIdentity {
            index,
            uuid: format!("GPU-5f2c7a1e-0000-4d6b-9a0c-{index:012}"),
            vendor: Vendor::Nvidia,
            name: "NVIDIA H200".into(),
            pci_bus_id: format!("0000:{:02x}:00.0", index + 0x19),
            driver_version: "580.159.04".into(),
            serial: Some(format!("16530240{index:05}")),
        },
        up: true,
        lost: false,
        last_good_poll: Some(SystemTime::now()),
        readings: Some(readings),
        health: Default::default(),
    }
}

fn snapshot(gpus: u32) -> Arc<Snapshot> {
    let mut status = BackendStatus {
        up: true,
        ..Default::default()
    };
    for _ in 0..100 {
        status.poll_duration.observe(0.009);
    }
    let mut snapshot = Snapshot {
        generation: 1,
        backends: [("nvml", status)].into_iter().collect(),
        devices: (0..gpus).map(device).collect(),
        xid_critical_hold: Duration::from_secs(3600),
        ..Default::default()
    };
    gpuwarden::health::evaluate(&mut snapshot);
    Arc::new(snapshot)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    println!(
        "{:>5} {:>8} {:>14} {:>14} {:>16}",
        "GPUs", "series", "OpenMetrics", "text 0.0.4", "per series (OM)"
    );
    for gpus in [8, 64] {
        let snap = snapshot(gpus);
        let text = render_openmetrics(snap.clone());
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        let (mut om, mut plain) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            let t = Instant::now();
            let rendered = black_box(render_openmetrics(black_box(snap.clone())));
            om.push(t.elapsed());
            let t = Instant::now();
            black_box(openmetrics_to_text(&rendered));
            plain.push(t.elapsed() + *om.last().unwrap());
        }
        let (om, plain) = (median(om), median(plain));
        println!(
            "{gpus:>5} {series:>8} {:>11.1} us {:>11.1} us {:>13.0} ns",
            om.as_secs_f64() * 1e6,
            plain.as_secs_f64() * 1e6,
            om.as_secs_f64() * 1e9 / series as f64
        );
    }
}
