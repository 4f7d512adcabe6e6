//! The operator's own rules (`health.custom_rules`, docs/health.md "Rules as code"), end to
//! end: a rule's finding in the verdict, /metrics, `gpuwarden health` and the journal; a
//! reload with a bad rule keeping the old rules; a rule failing at run time disabled alone;
//! `config check` and `rules test` with the errors and exits a user sees.

use crate::common;
use common::*;
use std::process::Command;

/// The demo's GPU 2 runs its HBM at 94 C; the others are cooler.
const MEMORY_HOT: &str = "health:\n  custom_rules:\n    - name: memory_hot\n      when: gpu.memory_temperature_c > 90\n      \
                          severity: unhealthy\n      advice: the HBM runs hot; check the airflow\n";

fn rule_up(m: &Metrics, rule: &str) -> Option<f64> {
    m.value("gpuwarden_custom_rule_up", &[("rule", rule), ("on", "gpu")])
}

fn memory_hot_on(m: &Metrics, gpu: &str) -> bool {
    m.value("gpu_health_reason", &[("gpu", gpu), ("reason", "memory_hot")]) == Some(1.0)
}

#[test]
fn an_operator_rule_makes_a_finding_like_any_other_and_a_bad_reload_keeps_it() {
    let config = test_config(&sim_library(), MEMORY_HOT);
    let d = Daemon::start_with(DEMO_SCENARIO, &config);
    let m = d.scrape_until("GPU 2 unhealthy by memory_hot", |m| {
        memory_hot_on(m, "2") && m.value("gpu_health", &[("gpu", "2"), ("state", "unhealthy")]) == Some(1.0)
    });
    for gpu in ["0", "1", "3"] {
        assert!(!memory_hot_on(&m, gpu), "GPU {gpu} is not hot");
    }
    assert_eq!(rule_up(&m, "memory_hot"), Some(1.0));
    assert!(
        m.value("gpuwarden_custom_rule_evaluations_total", &[("rule", "memory_hot")])
            .unwrap_or(0.0)
            >= 8.0
    );
    // What the Slurm check and a person read.
    let (code, health) = d.health(false);
    assert_ne!(code, 0, "{health}");
    assert!(
        health.contains("memory_hot") && health.contains("gpu.memory_temperature_c = 94"),
        "{health}"
    );
    // The journal recorded the verdict with the rule's name.
    eventually(
        "the journal's health row naming memory_hot",
        std::time::Duration::from_secs(10),
        || {
            let events = events_json(&d.state_path(), &[]).to_string();
            events.contains("memory_hot").then_some(())
        },
    );

    // A reload with a typo is refused whole: the old rule goes on.
    let config_before = std::fs::read_to_string(d.config_path()).unwrap();
    std::fs::write(
        d.config_path(),
        config_before.replace("gpu.memory_temperature_c > 90", "gpu.memory_temprature_c > 90"),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_for_log(
        "`gpu` has no field `memory_temprature_c`",
        1,
        std::time::Duration::from_secs(10),
    );
    holds_for("the old rule still runs", std::time::Duration::from_millis(500), || {
        memory_hot_on(&d.scrape(), "2")
            .then_some(())
            .ok_or_else(|| "no finding".to_string())
    });
    std::fs::write(d.config_path(), &config_before).unwrap();

    // A rule that fails at run time (the framebuffer's bytes times 10^12 overflow, which the
    // check's sample of 1 does not) is disabled alone.
    reload(&d, |c| {
        format!(
            "{c}    - name: overflows\n      when: gpu.memory_total_bytes * 1000000000000 > 0\n      advice: never\n"
        )
    });
    let m = d.scrape_until("overflows disabled", |m| rule_up(m, "overflows") == Some(0.0));
    assert_eq!(rule_up(&m, "memory_hot"), Some(1.0));
    assert!(memory_hot_on(&m, "2"));
    assert!(
        d.log_text().contains("health rule overflows is disabled: Overflow"),
        "{}",
        d.log_text()
    );
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `config check` reads the rule directory: a typo in a rule file is refused with the file,
/// the line and column of the field inside the expression, and the fields that exist.
#[test]
fn config_check_names_the_rule_file_line_and_column_and_the_fields() {
    let dir = temp_dir();
    let rules = dir.path().join("rules.d");
    std::fs::create_dir(&rules).unwrap();
    std::fs::write(
        rules.join("10-good.yaml"),
        "rules:\n  - name: hbm_hot\n    when: gpu.memory_temperature_c > 90\n    advice: a\n",
    )
    .unwrap();
    std::fs::write(rules.join("README"), "not a rule file").unwrap();
    std::fs::write(
        rules.join("10-good.test.yaml"),
        "rule_files: [10-good.yaml]\ntests: []\n",
    )
    .unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("health:\n  custom_rules_dir: {}\n", rules.display())).unwrap();
    let (code, out, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");

    let bad = rules.join("20-bad.yaml");
    std::fs::write(
        &bad,
        "rules:\n  - name: ecc\n    advice: a\n    when: increase('ecc_corected', '10m') > 5 && gpu.up\n",
    )
    .unwrap();
    let (code, _, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains(&format!("{}:4:20: health rule \"ecc\"", bad.display())),
        "{err}"
    );
    assert!(err.contains("`ecc_corected` is not a number of `gpu`"), "{err}");

    std::fs::write(&bad, "rules:\n  - name: hbm_hot\n    advice: a\n    when: gpu.up\n").unwrap();
    let (code, _, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains("defined twice (first in") && err.contains("10-good.yaml"),
        "{err}"
    );

    // A rule directory or rule file others can write: anyone could drain the node with a
    // rule of her own. Refused at the config's line and column, and accepted once closed.
    std::fs::remove_file(&bad).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, _, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains(&format!("{}:2:3: health.custom_rules_dir", config.display()))
            && err.contains("is writable by every user (mode 0777)"),
        "{err}"
    );
    std::fs::set_permissions(&rules, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(rules.join("10-good.yaml"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("10-good.yaml is writable by every user"), "{err}");
    std::fs::set_permissions(rules.join("10-good.yaml"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out, err) = run(&["config", "check", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

/// The shipped examples pass their own test file; a test whose expectation is wrong fails
/// with exit 1 and says what fired instead.
#[test]
fn rules_test_runs_the_examples_and_fails_a_wrong_expectation() {
    let examples = format!(
        "{}/deploy/rules/operator-examples.test.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let (code, out, err) = run(&["rules", "test", &examples]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("8 tests, all passed"), "{out}");

    let dir = temp_dir();
    std::fs::copy(
        format!("{}/deploy/rules/operator-examples.yaml", env!("CARGO_MANIFEST_DIR")),
        dir.path().join("rules.yaml"),
    )
    .unwrap();
    let test = dir.path().join("wrong.test.yaml");
    std::fs::write(
        &test,
        "rule_files: [rules.yaml]\ntests:\n  - name: not yet\n    gpus:\n      - memory_temperature_c: 95\n    \
         expect:\n      - {at: 2m, gpu: 0, firing: [hbm_hot]}\n",
    )
    .unwrap();
    let (code, out, _) = run(&["rules", "test", test.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAILED: at 2m gpu 0 firing [], expected [hbm_hot]"),
        "{out}"
    );

    // More GPUs than the rules' cost bound assumes (and than the daemon's): refused, not run
    // for a minute (300 GPUs once ran 59 s and died at a 4 GB limit).
    let many = dir.path().join("many.test.yaml");
    let gpus = "      - memory_temperature_c: 95\n".repeat(17);
    std::fs::write(
        &many,
        format!("rule_files: [rules.yaml]\ntests:\n  - name: many\n    gpus:\n{gpus}    expect: []\n"),
    )
    .unwrap();
    let (code, out, err) = run(&["rules", "test", many.to_str().unwrap()]);
    assert_eq!(code, 78, "{out}{err}");
    assert!(err.contains("17 GPUs in one test, over 16"), "{err}");
}

/// A rule file over the demo's snapshot: which rule fires where, with what it read.
#[test]
fn rules_test_over_the_demo_says_where_each_rule_fires() {
    let rules = format!("{}/deploy/rules/operator-examples.yaml", env!("CARGO_MANIFEST_DIR"));
    let (code, out, err) = run(&["rules", "test", &rules, "--demo"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("hbm_hot (on: gpu): fires on 1"), "{out}");
    assert!(out.contains("gpu.memory_temperature_c = 94"), "{out}");
    assert!(out.contains("cooling_node (on: node): does not fire"), "{out}");
}

/// Rules within the old limits (4 KiB, macros two deep) that cost seconds of CPU or gigabytes
/// per evaluation: four literal lists of 240 two macros deep, and nested `map`s over a list
/// written out. `config check` refuses each at once (before any dry run), at the macro's line
/// and column, saying what to change; a reload with one keeps the old rules.
#[test]
fn rules_that_would_cost_seconds_are_refused_before_they_run() {
    let dir = temp_dir();
    let list = |n: usize| {
        format!(
            "[{}]",
            (0..n).map(|i| (i % 10).to_string()).collect::<Vec<_>>().join(",")
        )
    };
    let l = list(230);
    let two_deep = format!("{l}.exists(a, {l}.exists(b, a == b + 10)) || {l}.exists(c, {l}.exists(d, c == d + 11))");
    let m = list(150);
    let maps = format!("{m}.map(a, {m}.map(b, {m} + {m})).size() == 0");
    assert!(maps.len() < 4096 && two_deep.len() < 4096);
    for (name, when) in [("lists", &two_deep), ("maps", &maps)] {
        let config = dir.path().join(format!("{name}.yaml"));
        std::fs::write(
            &config,
            format!("health:\n  custom_rules:\n    - name: {name}\n      advice: a\n      when: '{when}'\n"),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let (code, _, err) = run(&["config", "check", config.to_str().unwrap()]);
        let took = started.elapsed();
        assert_eq!(code, 78, "{err}");
        assert!(took < std::time::Duration::from_secs(2), "config check took {took:?}");
        assert!(err.contains(&format!("{}:5:", config.display())), "{err}");
        assert!(err.contains("one evaluation could take up to"), "{err}");
        assert!(err.contains("shorten the lists"), "{err}");
    }
}
