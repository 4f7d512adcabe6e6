//! `health.custom_rules` and `health.custom_rules_dir`: the operator's own rules, CEL
//! expressions compiled and checked when the config is read (docs/health.md, "Rules as
//! code"). An error names the file, and the line and column inside the expression; a reload
//! with one bad rule keeps every old rule (the config is swapped whole or not at all).

use super::*;
use crate::custom_rules::{Compiled, Scope};
use crate::model::health::{CustomName, HealthState, RuleId};
use std::sync::Arc;

/// The most rules the config and its directory hold together.
pub const MAX_CUSTOM_RULES: usize = 256;
/// The most rule files read from `health.custom_rules_dir`.
pub(super) const MAX_RULE_FILES: usize = 64;
/// The most entries of any kind looked at in it (a directory of other things is a mistake).
const MAX_DIR_ENTRIES: usize = 1024;

/// One operator rule.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustomRule {
    /// Its `reason` label: lowercase letters, digits and `_`, not a built-in rule's.
    #[serde(deserialize_with = "rule_name")]
    pub name: String,
    /// Evaluated per `gpu` (the default), per network `port`, or once per `node`.
    #[serde(default)]
    pub on: Scope,
    /// The expression: true makes the finding.
    pub when: serde_saphyr::Spanned<String>,
    /// `notice`, `degraded` (the default) or `unhealthy`.
    #[serde(default = "degraded", deserialize_with = "severity")]
    pub severity: HealthState,
    #[serde(default, deserialize_with = "debounce")]
    pub debounce: Debounce,
    #[serde(default, deserialize_with = "rule_hold")]
    pub hold: Duration,
    /// What to do, for the person paged: the finding's message starts with it.
    pub advice: String,
    /// Set once the whole config is read ([`compile_all`]).
    #[serde(skip)]
    pub compiled: Option<Arc<Compiled>>,
}

impl CustomRule {
    /// Its reason and its compiled expression, once compiled.
    pub fn ready(&self) -> Option<(CustomName, &Arc<Compiled>)> {
        Some((CustomName::intern(&self.name)?, self.compiled.as_ref()?))
    }

    /// Its debounce and hold, as the built-in rules' policies are written.
    pub fn policy(&self) -> RulePolicy {
        RulePolicy {
            debounce: self.debounce,
            hold: self.hold,
        }
    }
}

fn degraded() -> HealthState {
    HealthState::Degraded
}

fn severity<'de, D: Deserializer<'de>>(d: D) -> Result<HealthState, D::Error> {
    let word = String::deserialize(d)?;
    match word.as_str() {
        "notice" => Ok(HealthState::Ok),
        "degraded" => Ok(HealthState::Degraded),
        "unhealthy" => Ok(HealthState::Unhealthy),
        other => Err(serde::de::Error::custom(format!(
            "severity {other:?}: write notice, degraded or unhealthy"
        ))),
    }
}

fn rule_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    let shaped = name.len() <= 48
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !shaped {
        return Err(serde::de::Error::custom(format!(
            "rule name {name:?}: write lowercase letters, digits and _, starting with a letter, at most 48 (it is the reason label)"
        )));
    }
    if RuleId::from_label(&name).is_some() {
        return Err(serde::de::Error::custom(format!(
            "rule name {name:?} is a built-in rule's; choose another (health.rules.{name} sets the built-in's debounce and hold)"
        )));
    }
    Ok(name)
}

/// A file of `health.custom_rules_dir`: `rules:` and a list of rules.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rules: Vec<CustomRule>,
}

/// Compiles every rule of `rules`, written in `file` (whose text is `text`), and checks that
/// no name is taken twice, counting `taken` (name, file) from files read before.
pub(super) fn compile_all(
    rules: &mut [CustomRule],
    text: &str,
    file: &Path,
    taken: &mut Vec<(String, PathBuf)>,
) -> Result<(), ConfigError> {
    for rule in rules.iter_mut() {
        let at = |line: u64, column: u64, message: String| ConfigError {
            file: file.to_path_buf(),
            line: Some(line),
            column: Some(column),
            message,
            snippet: None,
        };
        let (line, column) = (rule.when.referenced.line(), rule.when.referenced.column());
        if let Some((_, first)) = taken.iter().find(|(name, _)| *name == rule.name) {
            return Err(at(
                line,
                column,
                format!(
                    "rule {:?} is defined twice (first in {}); names are unique",
                    rule.name,
                    first.display()
                ),
            ));
        }
        if taken.len() >= MAX_CUSTOM_RULES {
            return Err(at(
                line,
                column,
                format!("more than {MAX_CUSTOM_RULES} rules; merge some"),
            ));
        }
        if CustomName::intern(&rule.name).is_none() {
            return Err(at(
                line,
                column,
                "this run has taken too many distinct rule names; restart the daemon to take new ones".into(),
            ));
        }
        taken.push((rule.name.clone(), file.to_path_buf()));
        let compiled = crate::custom_rules::compile(&rule.when.value, rule.on).map_err(|e| {
            let (line, column) = in_file(text, line, column, e.line as u64, e.column as u64);
            at(
                line,
                column,
                format!("health rule {:?} (on: {}): {}", rule.name, rule.on.label(), e.message),
            )
        })?;
        rule.compiled = Some(Arc::new(compiled));
    }
    Ok(())
}

/// Where a place within an expression is in the file, from where the expression's scalar
/// starts: on its line past an opening quote, or for a block scalar (`|`, `>`) on the lines
/// of its content, past their indentation. (A plain scalar over several lines is folded
/// into one before CEL sees it: its errors point into its first line.)
fn in_file(text: &str, line: u64, column: u64, expr_line: u64, expr_column: u64) -> (u64, u64) {
    let start_line = text.lines().nth(line.saturating_sub(1) as usize).unwrap_or("");
    let rest = start_line.get(column.saturating_sub(1) as usize..).unwrap_or("");
    if rest.starts_with('|') || rest.starts_with('>') {
        // The block's indentation is its first line's; CEL columns count from there.
        let first = text.lines().nth(line as usize).unwrap_or("");
        let indent = (first.len() - first.trim_start().len()) as u64;
        return (line + expr_line, indent + expr_column);
    }
    let quote = u64::from(rest.starts_with('"') || rest.starts_with('\''));
    if expr_line == 1 {
        (line, column + quote + expr_column - 1)
    } else {
        // A block scalar's content, where the parser places it: its lines keep their column.
        (line + expr_line - 1, column - 1 + expr_column)
    }
}

/// Reads and compiles the rules of every `*.yaml`/`*.yml` file in `dir` (but `*.test.yaml`,
/// a `gpuwarden rules test` file), in name order.
pub(super) fn read_dir(dir: &Path, taken: &mut Vec<(String, PathBuf)>) -> Result<Vec<CustomRule>, ConfigError> {
    let files = rule_files(dir)?;
    let mut rules = Vec::new();
    for file in files {
        rules.extend(read_file(&file, taken)?);
    }
    Ok(rules)
}

/// The rule files of `dir` in name order (`*.yaml`, `*.yml`, but not `*.test.yaml`), or what
/// is wrong with the directory.
pub(super) fn rule_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let refuse = |message: String| ConfigError {
        file: dir.to_path_buf(),
        line: None,
        column: None,
        message,
        snippet: None,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| {
        refuse(format!(
            "cannot read health.custom_rules_dir: {e}; point it at a directory of rule files"
        ))
    })?;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut seen = 0;
    for entry in entries.flatten() {
        seen += 1;
        if seen > MAX_DIR_ENTRIES {
            return Err(refuse(format!(
                "more than {MAX_DIR_ENTRIES} entries in health.custom_rules_dir; point it at a directory of rule files"
            )));
        }
        let path = entry.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // A test file kept beside its rules (`rules.test.yaml`, as promtool's) is not a rule file.
        let test_file = name.ends_with(".test.yaml") || name.ends_with(".test.yml");
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") && !test_file {
            files.push(path);
        }
    }
    if files.len() > MAX_RULE_FILES {
        return Err(refuse(format!(
            "more than {MAX_RULE_FILES} rule files; merge some (each file holds a list of rules)"
        )));
    }
    files.sort();
    Ok(files)
}

/// Reads and compiles one rule file (`rules:` and a list), as `gpuwarden rules test` does.
pub(super) fn read_file(file: &Path, taken: &mut Vec<(String, PathBuf)>) -> Result<Vec<CustomRule>, ConfigError> {
    let text = read_config_file(file, "rule file").map_err(|e| ConfigError {
        file: file.to_path_buf(),
        line: None,
        column: None,
        message: e.to_string(),
        snippet: None,
    })?;
    let mut parsed: RuleFile = parse_yaml(&text, file)?;
    compile_all(&mut parsed.rules, &text, file, taken)?;
    Ok(parsed.rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.yaml"))
    }

    #[test]
    fn a_rule_is_read_and_compiled() {
        let config = parse(
            "health:\n  custom_rules:\n    - name: hbm_hot\n      when: gpu.memory_temperature_c > 90\n      \
             severity: unhealthy\n      debounce: 5m\n      hold: 10m\n      advice: check the HBM cooling\n",
        )
        .unwrap();
        let rule = &config.health.custom_rules[0];
        assert_eq!(rule.name, "hbm_hot");
        assert_eq!(rule.severity, HealthState::Unhealthy);
        assert_eq!(rule.debounce, Debounce::For(Duration::from_secs(300)));
        let (name, compiled) = rule.ready().unwrap();
        assert_eq!(name.as_str(), "hbm_hot");
        assert_eq!(compiled.fields, vec!["memory_temperature_c"]);
    }

    /// The error points into the expression: plain, quoted and block scalars.
    #[test]
    fn an_error_names_the_file_line_and_column_inside_the_expression() {
        let rule =
            |when: &str| format!("health:\n  custom_rules:\n    - name: r\n      advice: a\n      when: {when}\n");
        for (when, line, column) in [
            // At the `.` of `.temprature_c`.
            ("gpu.up && gpu.temprature_c > 90", 5, 26),
            ("\"gpu.up && gpu.temprature_c > 90\"", 5, 27),
            ("|\n        gpu.up &&\n          gpu.temprature_c > 90", 7, 14),
        ] {
            let e = parse(&rule(when)).unwrap_err();
            assert_eq!((e.line, e.column), (Some(line), Some(column)), "{when}: {e}");
            assert!(e.message.contains("`gpu` has no field `temprature_c`"), "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("test.yaml:{line}:{column}: health rule \"r\"")),
                "{e}"
            );
        }
    }

    #[test]
    fn names_severities_and_duplicates_are_checked() {
        for (text, says) in [
            ("- name: Hot\n      advice: a\n      when: gpu.up", "lowercase letters"),
            (
                "- name: xid_fatal\n      advice: a\n      when: gpu.up",
                "a built-in rule's",
            ),
            (
                "- name: a\n      advice: a\n      severity: fatal\n      when: gpu.up",
                "notice, degraded or unhealthy",
            ),
            ("- name: a\n      when: gpu.up", "advice"),
            (
                "- name: a\n      advice: a\n      when: gpu.up\n    - name: a\n      advice: b\n      when: gpu.up",
                "defined twice",
            ),
            (
                "- name: a\n      advice: a\n      on: switch\n      when: gpu.up",
                "switch",
            ),
        ] {
            let e = parse(&format!("health:\n  custom_rules:\n    {text}\n")).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }
}
