//! What one read of the network ports costs (`source-nics`, every `network.interval`: what
//! changes), what finding the adapters costs and the look at where the GPUs sit (both every
//! 5 minutes), over the fixture of four NDR ports and the demo's eight. `cargo bench --bench
//! nic_read`
//!
//! Over fixture files on a local file system: on a host, sysfs answers from the kernel, and
//! mlx5 asks the adapter's firmware for `hw_counters/` (not measured here: no RDMA adapter on
//! the machines this ran on; docs/performance.md says so).

use gpuwarden::input::infiniband::{discover, gpu_places, read};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn measure(name: &str, root: &Path) {
    let places = gpu_places(root);
    let adapters = discover(root, &places);
    let full = read(&adapters, None).0;
    let ports = full.ports().count();
    let (mut reads, mut fulls, mut finds, mut looks) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..300 {
        let t = Instant::now();
        black_box(read(black_box(&adapters), Some(&full)));
        reads.push(t.elapsed());
        let t = Instant::now();
        black_box(read(black_box(&adapters), None));
        fulls.push(t.elapsed());
        let t = Instant::now();
        black_box(discover(black_box(root), &places));
        finds.push(t.elapsed());
        let t = Instant::now();
        black_box(gpu_places(black_box(root)));
        looks.push(t.elapsed());
    }
    let us = |samples| median(samples).as_secs_f64() * 1e6;
    println!(
        "{name:<24} {ports:>3} ports {:>7.1} us a read {:>7.1} us with every counter {:>7.1} us finding the adapters {:>7.1} us the GPUs' places",
        us(reads),
        us(fulls),
        us(finds),
        us(looks)
    );
}

fn main() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/ndr-ib");
    measure("fixture ndr-ib", &fixture);
    let demo = std::env::temp_dir().join(format!("gpuwarden-bench-nics-{}", std::process::id()));
    if gpuwarden::cli::demo_fabric::write_tree(&demo).is_ok() {
        measure("demo (8 ports, 8 GPUs)", &demo);
    }
    let _ = std::fs::remove_dir_all(&demo);
}
