//! `remediation`: what gpuwarden advises, or does, about an unhealthy GPU (docs/health.md,
//! "Remediation"). Reloadable: `mode` and `paused` apply at the next look, so one reload
//! pauses automatic resets.

use super::*;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Remediation {
    /// `off` (the default): nothing; `advise`: each GPU's next step in the verdict, the metrics
    /// (`gpu_remediation_next_step`) and the journal; `auto`: advise, and reset a GPU by
    /// itself when every guard holds (docs/health.md, "Remediation").
    pub mode: RemediationMode,
    /// The GPU reset, `{pci_bus_id}` replaced by the GPU's address. Split into words like a
    /// shell does (quotes group), run without a shell.
    #[serde(deserialize_with = "command_line")]
    pub reset_command: CommandLine,
    /// Run before the reset when the GPU's persistence mode is on (a GPU in persistence mode
    /// cannot be reset); empty: none.
    #[serde(deserialize_with = "optional_command_line")]
    pub persistence_off_command: Option<CommandLine>,
    /// Run after the reset, whatever it came to, when persistence mode was on before; empty:
    /// none.
    #[serde(deserialize_with = "optional_command_line")]
    pub persistence_on_command: Option<CommandLine>,
    /// How long each command may run; it is killed (its whole process group) after that.
    #[serde(deserialize_with = "remediation_timeout")]
    pub timeout: Duration,
    /// `auto` resets one GPU at most this many times in 24 hours; then the step is a reboot.
    #[serde(deserialize_with = "resets_per_day")]
    pub max_resets_per_day: u32,
    /// Pause `auto` (advice goes on): set it on every node and reload to stop automatic
    /// resets fleet-wide.
    pub paused: bool,
    /// While this file exists, `auto` is paused, as with `paused: true`.
    pub pause_file: PathBuf,
    /// Written (with the reason) when the node needs a reboot: a reset failed, or the driver
    /// asks for one. Removed at the next boot (/run is a tmpfs). Empty: none.
    pub reboot_marker: PathBuf,
    /// Run once when the node is found to need a reboot (to open a ticket, or to reboot it
    /// through your own tooling); empty, the default: none. gpuwarden never reboots by itself.
    #[serde(deserialize_with = "optional_command_line")]
    pub reboot_command: Option<CommandLine>,
}

impl Default for Remediation {
    fn default() -> Self {
        Remediation {
            mode: RemediationMode::Off,
            reset_command: CommandLine::of(&["nvidia-smi", "--gpu-reset", "-i", "{pci_bus_id}"]),
            persistence_off_command: Some(CommandLine::of(&["nvidia-smi", "-i", "{pci_bus_id}", "-pm", "0"])),
            persistence_on_command: Some(CommandLine::of(&["nvidia-smi", "-i", "{pci_bus_id}", "-pm", "1"])),
            timeout: Duration::from_secs(120),
            max_resets_per_day: 1,
            paused: false,
            pause_file: PathBuf::from("/etc/gpuwarden/remediation-paused"),
            reboot_marker: PathBuf::from("/run/gpuwarden/reboot-required"),
            reboot_command: None,
        }
    }
}

/// `remediation.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemediationMode {
    #[default]
    Off,
    Advise,
    Auto,
}

impl RemediationMode {
    /// Whether the ladder's advice is computed (advise and auto).
    pub fn advises(self) -> bool {
        self != RemediationMode::Off
    }
}

/// A command as its words, split when the config is read: `{pci_bus_id}` is replaced inside a
/// word, so an address can never become two words or a shell's syntax.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandLine(pub Vec<String>);

impl CommandLine {
    pub fn of(words: &[&str]) -> CommandLine {
        CommandLine(words.iter().map(|w| w.to_string()).collect())
    }

    /// The words with `{pci_bus_id}` replaced.
    pub fn for_gpu(&self, pci_bus_id: &str) -> Vec<String> {
        self.0.iter().map(|w| w.replace("{pci_bus_id}", pci_bus_id)).collect()
    }

    /// For a person: the words joined, quoted where needed.
    pub fn display_for(&self, pci_bus_id: &str) -> String {
        let words = self.for_gpu(pci_bus_id);
        shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
    }
}

fn split_command<E: serde::de::Error>(text: &str) -> Result<Option<CommandLine>, E> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match shlex::split(text) {
        Some(words) if !words.is_empty() => Ok(Some(CommandLine(words))),
        _ => Err(E::custom(format!(
            "{text:?} is not a command line (an unclosed quote?); write it as a shell would, \
             e.g. nvidia-smi --gpu-reset -i {{pci_bus_id}}"
        ))),
    }
}

fn command_line<'de, D: Deserializer<'de>>(d: D) -> Result<CommandLine, D::Error> {
    let text = String::deserialize(d)?;
    split_command(&text)?.ok_or_else(|| serde::de::Error::custom("the command is empty; name the program to run"))
}

fn optional_command_line<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CommandLine>, D::Error> {
    let text = String::deserialize(d)?;
    split_command(&text)
}

fn resets_per_day<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if !(1..=24).contains(&n) {
        return Err(serde::de::Error::custom(format!(
            "remediation.max_resets_per_day is {n}; write 1 to 24 (to stop automatic resets, set mode: advise or paused: true)"
        )));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.yaml"))
    }

    #[test]
    fn commands_are_split_like_a_shell_and_the_address_stays_one_word() {
        let c = parse(
            "remediation:\n  mode: auto\n  reset_command: \"/usr/local/sbin/gpu-reset --bus '{pci_bus_id}' --note 'a b'\"\n  persistence_off_command: ''\n",
        )
        .unwrap();
        assert_eq!(c.remediation.mode, RemediationMode::Auto);
        assert_eq!(
            c.remediation.reset_command.for_gpu("0000:19:00.0; reboot"),
            [
                "/usr/local/sbin/gpu-reset",
                "--bus",
                "0000:19:00.0; reboot",
                "--note",
                "a b"
            ]
        );
        assert_eq!(c.remediation.persistence_off_command, None);
        assert!(c.remediation.persistence_on_command.is_some(), "the default stays");
    }

    #[test]
    fn a_bad_command_or_budget_is_refused_with_its_place() {
        let e = parse("remediation:\n  reset_command: \"nvidia-smi 'unclosed\"\n").unwrap_err();
        assert!(e.message.contains("not a command line"), "{e}");
        assert_eq!(e.line, Some(2));
        let e = parse("remediation:\n  reset_command: \"  \"\n").unwrap_err();
        assert!(e.message.contains("empty"), "{e}");
        let e = parse("remediation:\n  max_resets_per_day: 0\n").unwrap_err();
        assert!(e.message.contains("1 to 24"), "{e}");
    }
}
