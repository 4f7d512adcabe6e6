//! Render time per series: what a scrape costs when its snapshot is not cached yet (once per
//! poll round and format). `cargo bench --bench render`
//!
//! Builds snapshots of 8 and 64 GPUs from the demo's (every reading the demo has, its XIDs and
//! health findings), renders each in both formats many times and prints the median time per
//! render and per series.

use gpuwarden::metrics::Selection;
use gpuwarden::metrics::exposition::{openmetrics_to_text, render_openmetrics};
use gpuwarden::model::*;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

mod common;
use common::{demo_snapshot, median};

/// `gpus` GPUs: the demo's eight, repeated with new indices and uuids.
fn snapshot(demo: &Snapshot, gpus: u32) -> Arc<Snapshot> {
    let mut snapshot = demo.clone();
    snapshot.devices = (0..gpus)
        .map(|index| {
            let mut d = demo.devices[index as usize % demo.devices.len()].clone();
            let identity = Arc::make_mut(&mut d.identity);
            identity.index = index;
            identity.uuid = format!("{}-{index}", identity.uuid);
            d
        })
        .collect();
    gpuwarden::health::evaluate(&mut snapshot);
    Arc::new(snapshot)
}

fn main() {
    println!(
        "{:>5} {:>8} {:>14} {:>14} {:>16}",
        "GPUs", "series", "OpenMetrics", "text 0.0.4", "per series (OM)"
    );
    let demo = demo_snapshot();
    for gpus in [8, 64] {
        let snap = snapshot(&demo, gpus);
        let text = render_openmetrics(snap.clone(), Selection::default());
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        let (mut om, mut plain) = (Vec::new(), Vec::new());
        for _ in 0..200 {
            let t = Instant::now();
            let rendered = black_box(render_openmetrics(black_box(snap.clone()), Selection::default()));
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
