//! The settings that name something the daemon loads, runs or trusts as root: checked with
//! input::trust when the config file is read (`config check`, the start, every reload), so
//! a library, rule file or secret that someone else could write is refused with the file,
//! line and column of the setting, and a reload that names one keeps the old config.

use super::*;
use crate::input::trust;

impl Config {
    /// Refuses a setting whose path anyone but root (or the daemon's own user) could write.
    pub(super) fn check_trusted_paths(&self, text: &str, file: &Path) -> Result<(), ConfigError> {
        let at = |section: &str, key: &str, path: &Path, e: trust::Untrusted| {
            let place = value_position(text, key, path).or_else(|| key_position(text, section, key));
            ConfigError {
                file: file.to_path_buf(),
                line: place.map(|(line, _)| line),
                column: place.map(|(_, column)| column),
                message: e.to_string(),
                snippet: None,
            }
        };
        let libraries = [
            ("nvml", "library_path", &self.nvml.library_path, "nvml.library_path"),
            (
                "amd",
                "library_path",
                &self.amd.rocm_smi.library_path,
                "amd.rocm_smi.library_path",
            ),
            (
                "probe",
                "cublas_library",
                &self.probe.cublas_library,
                "probe.cublas_library",
            ),
            ("probe", "nccl_library", &self.probe.nccl_library, "probe.nccl_library"),
        ];
        for (section, key, path, what) in libraries {
            if trust::is_a_path(path) {
                trust::check(path, what, "loads").map_err(|e| at(section, key, path, e))?;
            }
        }
        let rules = &self.health.custom_rules_dir;
        if !rules.as_os_str().is_empty() {
            let refuse = |e| at("health", "custom_rules_dir", rules, e);
            trust::check(rules, "health.custom_rules_dir", "runs the rules of").map_err(refuse)?;
            for rule_file in custom_rules::rule_files(rules).unwrap_or_default() {
                trust::check(&rule_file, "a rule file of health.custom_rules_dir", "runs").map_err(refuse)?;
            }
        }
        for sink in &self.events.sinks {
            let files = [
                sink.webhook
                    .as_ref()
                    .map(|w| ("secret_file", &w.secret_file, "signs events with")),
                sink.webhook.as_ref().map(|w| ("ca_file", &w.ca_file, "trusts")),
                sink.otlp.as_ref().map(|o| ("ca_file", &o.ca_file, "trusts")),
            ];
            for (key, path, does) in files.into_iter().flatten() {
                if !path.as_os_str().is_empty() {
                    let what = if key == "secret_file" {
                        "events.sinks.webhook.secret_file"
                    } else {
                        "events.sinks ca_file"
                    };
                    trust::check(path, what, does).map_err(|e| at("events", key, path, e))?;
                }
            }
        }
        let kube = &self.kubernetes;
        if kube.node.enabled {
            let files = [
                (
                    "token_file",
                    &kube.api.token_file,
                    "kubernetes.api.token_file",
                    "sends the token of",
                ),
                ("ca_file", &kube.api.ca_file, "kubernetes.api.ca_file", "trusts"),
            ];
            // A file not there yet (the in-pod defaults outside a pod) is the client's to say.
            for (key, path, what, does) in files {
                if !path.as_os_str().is_empty() && path.exists() {
                    trust::check(path, what, does).map_err(|e| at("kubernetes", key, path, e))?;
                }
            }
        }
        Ok(())
    }
}

/// Where `key: value` is written (the value plain or quoted), as (line, column) of the key:
/// the setting among several of the same key (a sink's secret_file of many).
pub(super) fn value_position(text: &str, key: &str, value: &Path) -> Option<(u64, u64)> {
    let value = value.to_str()?;
    text.lines().enumerate().find_map(|(index, line)| {
        let trimmed = line.trim_start().trim_start_matches("- ");
        let rest = trimmed.strip_prefix(key)?.strip_prefix(':')?.trim();
        let rest = rest.split(" #").next().unwrap_or(rest).trim();
        let unquoted = rest.trim_matches(|c| c == '"' || c == '\'');
        (unquoted == value).then(|| {
            let column = line.find(key).unwrap_or(0) as u64 + 1;
            (index as u64 + 1, column)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_library_rule_dir_or_secret_others_can_write_is_refused_at_its_setting() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let lib = open.join("libnccl.so.2");
        std::fs::write(&lib, b"").unwrap();
        let secret = open.join("hmac");
        std::fs::write(&secret, b"k").unwrap();
        let file = dir.path().join("gpuwarden.yaml");
        let cases = [
            (
                format!("probe:\n  nccl_library: {}\n", lib.display()),
                2,
                3,
                "probe.nccl_library",
            ),
            (
                format!("probe:\n  cublas_library: \"{}\"\n", lib.display()),
                2,
                3,
                "probe.cublas_library",
            ),
            (
                format!("health:\n  custom_rules_dir: {}\n", open.display()),
                2,
                3,
                "health.custom_rules_dir",
            ),
            (
                format!(
                    "events:\n  sinks:\n    - name: a\n      webhook: {{url: \"http://x/\"}}\n    - name: b\n      webhook:\n        \
                     url: http://y/\n        secret_file: {}\n",
                    secret.display()
                ),
                8,
                9,
                "secret_file",
            ),
        ];
        for (text, line, column, says) in cases {
            std::fs::write(&file, &text).unwrap();
            let e = Config::load(&file).unwrap_err();
            assert_eq!((e.line, e.column), (Some(line), Some(column)), "{text}: {e}");
            let message = e.to_string();
            assert!(message.contains(says), "{message}");
            assert!(message.contains("is writable by every user (mode 0777)"), "{message}");
            assert!(message.contains("chmod go-w"), "{message}");
        }
        // The same, closed: accepted.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(&file, format!("probe:\n  nccl_library: {}\n", lib.display())).unwrap();
        Config::load(&file).unwrap();
        // A rule file that others can write, in a directory that is closed.
        let rules = dir.path().join("rules");
        std::fs::create_dir(&rules).unwrap();
        std::fs::write(rules.join("mine.yaml"), "rules: []\n").unwrap();
        std::fs::set_permissions(rules.join("mine.yaml"), std::fs::Permissions::from_mode(0o666)).unwrap();
        std::fs::write(&file, format!("health:\n  custom_rules_dir: {}\n", rules.display())).unwrap();
        let e = Config::load(&file).unwrap_err().to_string();
        assert!(e.contains("mine.yaml is writable by every user"), "{e}");
    }
}
