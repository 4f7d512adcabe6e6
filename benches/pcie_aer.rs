//! What one read of the GPUs' PCIe AER totals costs (`source-pcie-aer`, every 30 s): three
//! small files per GPU, over the demo's tree of eight GPUs. `cargo bench --bench pcie_aer`
//!
//! Over fixture files on a local file system: on a host, sysfs answers from the kernel's
//! memory without asking the device (the totals are counters the AER driver keeps).

use gpuwarden::sources::pcie_aer::read_counts;
use std::hint::black_box;
use std::time::{Duration, Instant};

fn main() {
    let demo = std::env::temp_dir().join(format!("gpuwarden-bench-aer-{}", std::process::id()));
    if let Err(e) = gpuwarden::cli::demo_fabric::write_tree(&demo) {
        eprintln!("could not write the demo's tree: {e}");
        return;
    }
    let owned: Vec<String> = gpuwarden::cli::demo_fabric::gpu_addresses().collect();
    let addresses: Vec<&str> = owned.iter().map(String::as_str).collect();
    let found = read_counts(&demo, &addresses).len();
    let mut samples: Vec<Duration> = (0..300)
        .map(|_| {
            let t = Instant::now();
            black_box(read_counts(black_box(&demo), &addresses));
            t.elapsed()
        })
        .collect();
    samples.sort();
    println!(
        "demo (8 GPUs, {found} with AER files) {:>7.1} us a read (median of 300)",
        samples[samples.len() / 2].as_secs_f64() * 1e6
    );
    let _ = std::fs::remove_dir_all(&demo);
}
