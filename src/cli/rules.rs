//! `gpuwarden rules test FILE`: the operator's rules, tested before they reach a fleet.
//!
//! FILE is one of two kinds:
//! - a rule file (`rules:` and a list, as `health.custom_rules_dir` holds): its rules are run
//!   once over a snapshot of this node (or the demo's, with `--demo`), and every rule's outcome
//!   on every GPU, port or the node is printed;
//! - a test file (`rule_files:` and `tests:`, cli/rules_scenario.rs): its rules are run over
//!   scenarios of readings step by step, with windows, debounce and hold, and the findings
//!   are compared with what each test expects, as promtool tests alert rules.
//!
//! Exit 0 when every rule ran (and every expectation held), 1 when one failed at run time
//! (or an expectation did not hold), 78 when a rule does not compile.

use crate::config::{Config, CustomRule};
use crate::model::Snapshot;
use crate::service::exit::{CliError, CliResult, Exit};
use std::path::Path;

/// What the file holds, by its top-level keys.
enum Kind {
    Rules,
    Tests,
}

fn kind_of(file: &Path) -> Result<Kind, CliError> {
    let text = crate::config::read_config_file(file, "rule file")
        .map_err(|e| CliError::new(Exit::CONFIG, format!("{}: {e}", file.display())))?;
    let has = |key: &str| text.lines().any(|l| l.starts_with(&format!("{key}:")));
    match (has("rules"), has("tests")) {
        (_, true) => Ok(Kind::Tests),
        (true, false) => Ok(Kind::Rules),
        (false, false) => Err(CliError::new(
            Exit::CONFIG,
            format!(
                "{}: neither a rule file (`rules:`) nor a test file (`rule_files:` and `tests:`)",
                file.display()
            ),
        )),
    }
}

/// Runs the test; `config` is this node's (for the live snapshot).
pub fn test(config: Config, file: &Path) -> CliResult {
    match kind_of(file)? {
        Kind::Tests => super::rules_scenario::run(file),
        Kind::Rules => {
            let rules = Config::read_rule_file(file).map_err(|e| CliError::new(Exit::CONFIG, e.to_string()))?;
            over_this_node(config, rules)
        }
    }
}

/// The rules over one snapshot of this node.
fn over_this_node(mut config: Config, mut rules: Vec<CustomRule>) -> CliResult {
    // One look: a rule's debounce would hide a condition that holds now.
    for rule in &mut rules {
        rule.debounce = crate::config::Debounce::None;
    }
    config.health.custom_rules = rules;
    config.persistence.enable = false;
    config.nvml.one_shot = true;
    let snapshot = super::check::poll_once(config);
    print!("{}", outcomes(&snapshot));
    let failed = snapshot.custom_rules.iter().any(|r| r.disabled.is_some());
    Ok(if failed { Exit::FAILURE } else { Exit::SUCCESS })
}

/// Each rule: where it fired (with its message), or that it did not, or why it failed.
pub fn outcomes(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    for rule in snapshot.custom_rules.iter() {
        let mine = |f: &&crate::model::health::Finding| f.reason.label() == rule.name;
        let mut fired: Vec<String> = Vec::new();
        for device in &snapshot.devices {
            for f in device.health.findings.iter().filter(mine) {
                fired.push(format!(
                    "  GPU {} {}: {} {}",
                    device.identity.index,
                    device.identity.uuid,
                    f.severity.finding_label(),
                    f.message
                ));
            }
        }
        for f in snapshot.node_findings.iter().filter(mine) {
            let subject = f.subject.as_deref().unwrap_or("node");
            fired.push(format!("  {subject}: {} {}", f.severity.finding_label(), f.message));
        }
        let state = match (&rule.disabled, fired.len()) {
            (Some(why), _) => format!("FAILED, disabled: {why}"),
            (None, 0) => "does not fire".to_string(),
            (None, n) => format!("fires on {n}"),
        };
        out.push_str(&format!("{} (on: {}): {state}\n", rule.name, rule.scope));
        for line in fired {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
