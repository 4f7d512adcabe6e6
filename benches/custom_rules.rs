//! What the operator's rules (`health.custom_rules`) cost per snapshot: `cargo bench --bench
//! custom_rules`.
//!
//! Runs the shipped rules (deploy/rules/: seven operators' asks and three built-ins written
//! as rules, ten in all, GPU, port and node rules, windows among them) over the demo's eight
//! GPUs as the daemon reads them, and prints the median time of one snapshot's evaluation
//! with no rules, one rule and all ten, per snapshot and per rule per GPU.

use gpuwarden::config::{Config, CustomRule};
use gpuwarden::health::custom::CustomRuleRunner;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

mod common;
use common::{demo_snapshot, median};

fn shipped_rules() -> Vec<CustomRule> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/rules");
    let mut taken = Vec::new();
    let mut rules = Vec::new();
    for file in ["operator-examples.yaml", "builtins-as-rules.yaml"] {
        rules.extend(Config::read_rule_file_into(&dir.join(file), &mut taken).expect("the shipped rules compile"));
    }
    rules
}

fn main() {
    let demo = demo_snapshot();
    let all = shipped_rules();
    assert_eq!(all.len(), 10);
    let gpus = demo.devices.len() as u32;
    println!("operator rules over the demo's {gpus} GPUs, one snapshot's evaluation (median of 2000):");
    let mut cases: Vec<(String, &[CustomRule])> = vec![("no rules".into(), &all[..0])];
    cases.extend((0..all.len()).map(|i| (all[i].name.clone(), &all[i..i + 1])));
    cases.push(("10 rules".into(), &all[..]));
    for (what, rules) in cases {
        let mut runner = CustomRuleRunner::default();
        let start = Instant::now();
        // The snapshots are cloned before the clock starts: the clone is the publisher's anyway.
        let mut copies: Vec<_> = (0..2000).map(|_| demo.clone()).collect();
        let mut samples = Vec::with_capacity(copies.len());
        for (i, snapshot) in copies.iter_mut().enumerate() {
            // A second apart, as polls are: the windows fill as they would.
            let now = start + Duration::from_secs(i as u64);
            let t = Instant::now();
            runner.apply(black_box(snapshot), rules, now);
            samples.push(t.elapsed());
        }
        let m = median(samples);
        let per = if rules.is_empty() {
            String::new()
        } else {
            format!(
                ", {:.2} us per rule per GPU",
                m.as_secs_f64() * 1e6 / (rules.len() as f64 * f64::from(gpus))
            )
        };
        println!("  {what:22} {:8.1} us per snapshot{per}", m.as_secs_f64() * 1e6);
    }
}
