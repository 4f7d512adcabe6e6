//! What the operator's rules (`health.custom_rules`) cost per snapshot: `cargo bench --bench
//! custom_rules`.
//!
//! Runs the shipped rules (deploy/rules/: seven operators' asks and three built-ins written
//! as rules, ten in all, GPU, port and node rules, windows among them) over the demo's eight
//! GPUs as the daemon reads them, and prints the median time of one snapshot's evaluation
//! with no rules, one rule and all ten, per snapshot and per rule per GPU. Then the costliest
//! rules `config check` accepts (custom_rules::cost, at its MAX_WORK): literal lists two
//! macros deep, `+` inside a macro, every GPU against every other, and long string scans,
//! each per snapshot and per evaluation, and what one bound step costs.

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

/// A rule of `on` whose expression is `when`, compiled as the config would.
fn rule(name: &str, on: &str, when: &str) -> CustomRule {
    let text = format!(
        "health:\n  custom_rules:\n    - name: {name}\n      on: {on}\n      when: '{when}'\n      advice: x\n"
    );
    let config = Config::parse(&text, Path::new("bench.yaml")).unwrap_or_else(|e| panic!("{name}: {e}"));
    config.health.custom_rules.into_iter().next().expect("one rule")
}

/// The longest list of `n` small numbers written out.
fn literal(n: usize) -> String {
    format!(
        "[{}]",
        (0..n).map(|i| (i % 10).to_string()).collect::<Vec<_>>().join(",")
    )
}

/// The largest `n` for which `make(n)` is still accepted.
fn largest_accepted(make: impl Fn(usize) -> String, on: &str) -> (usize, String) {
    let mut n = 1;
    while {
        let text = format!(
            "health:\n  custom_rules:\n    - name: r\n      on: {on}\n      when: '{}'\n      advice: x\n",
            make(n + 1)
        );
        Config::parse(&text, Path::new("bench.yaml")).is_ok()
    } {
        n += 1;
    }
    (n, make(n))
}

/// A rule's expression for a size `n`.
type RuleOfSize = Box<dyn Fn(usize) -> String>;

fn worst_accepted(demo: &gpuwarden::model::Snapshot) {
    let gpus = demo.devices.len() as u32;
    println!(
        "\nthe costliest rules config check accepts (cost::MAX_WORK {}), over the demo's {gpus} GPUs:",
        gpuwarden::custom_rules::cost::MAX_WORK
    );
    let shapes: Vec<(&str, &str, RuleOfSize)> = vec![
        (
            "two macros over lists written out",
            "gpu",
            Box::new(|n| format!("{l}.exists(a, {l}.exists(b, a == b + 10))", l = literal(n))),
        ),
        (
            "`+` inside a macro",
            "gpu",
            Box::new(|n| format!("{l}.map(a, {l} + {l}).size() == 0", l = literal(n))),
        ),
        (
            "a long string scanned in a macro",
            "gpu",
            Box::new(|n| format!("{}.exists(a, \"{}\".contains(string(a)))", literal(n), "x".repeat(3000))),
        ),
        // Not grown: its cost is the GPUs' bound, whatever is written; n is only a threshold.
        (
            "every GPU against every other",
            "node",
            Box::new(|_| {
                "gpus.exists(a, gpus.exists(b, a.index != b.index && a.temperature_c - b.temperature_c > 20))"
                    .to_string()
            }),
        ),
    ];
    for (what, on, make) in shapes {
        let (n, when) = if on == "node" {
            (0, make(0))
        } else {
            largest_accepted(&make, on)
        };
        let program = gpuwarden::custom_rules::compile(
            &when,
            if on == "node" {
                gpuwarden::custom_rules::Scope::Node
            } else {
                gpuwarden::custom_rules::Scope::Gpu
            },
        )
        .expect("accepted");
        let steps = program.cost().work;
        let rules = vec![rule("worst", on, &when)];
        let mut runner = CustomRuleRunner::default();
        let start = Instant::now();
        let mut copies: Vec<_> = (0..200).map(|_| demo.clone()).collect();
        let mut samples = Vec::with_capacity(copies.len());
        for (i, snapshot) in copies.iter_mut().enumerate() {
            let now = start + Duration::from_secs(i as u64);
            let t = Instant::now();
            runner.apply(black_box(snapshot), &rules, now);
            samples.push(t.elapsed());
        }
        let m = median(samples).as_secs_f64();
        let evaluations = if on == "node" { 1.0 } else { f64::from(gpus) };
        println!(
            "  {what:36} (n = {n:4}, {steps:6} steps) {:9.1} us per snapshot, {:8.1} us per evaluation, {:.3} us per step",
            m * 1e6,
            m * 1e6 / evaluations,
            m * 1e6 / evaluations / steps as f64
        );
    }
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
    worst_accepted(&demo);
}
