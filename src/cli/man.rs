//! `gpuwarden man DIR`: the man pages, gpuwarden(1) and one per command, made by clap_mangen
//! from the command definitions, with the sections an operator looks for that clap does not
//! know: EXIT STATUS (from [`Exit`]'s codes, per command), FILES, ENVIRONMENT and EXAMPLES.

use crate::service::exit::{CliError, CliResult, Exit};
use std::io::Write;
use std::path::Path;

/// What each exit code means, per command, by its man page's name (the rest: 0 done).
const EXIT_STATUS: &[(&str, &[(Exit, &str)])] = &[
    (
        "gpuwarden",
        &[
            (Exit::SUCCESS, "done, nothing found: healthy, passed, written"),
            (
                Exit::FOUND,
                "something found: a GPU or the node unhealthy, a probe test failed, a finding whose condition still holds after a clear, no such GPU in the journal; or the daemon failed to run",
            ),
            (
                Exit::UNKNOWN,
                "no answer: the daemon does not answer, the journal cannot be read, no GPU could be read, the probe could not run (never read it as healthy)",
            ),
            (
                Exit::VALIDATING,
                "`health`: the idle node's scheduled validation runs; `probe`: the GPU is busy",
            ),
            (Exit::UNAVAILABLE, "`run`: the listen port stays taken (EX_UNAVAILABLE)"),
            (
                Exit::CONFIG,
                "a config that `config check` or a start refuses (EX_CONFIG)",
            ),
        ],
    ),
    (
        "gpuwarden-run",
        &[
            (Exit::SUCCESS, "stopped by SIGTERM or SIGINT, cleanly"),
            (
                Exit::FAILURE,
                "the daemon failed to run (its runtime, signal handlers, HTTP server)",
            ),
            (Exit::UNAVAILABLE, "the listen port stayed taken for 5 seconds"),
            (Exit::CONFIG, "the config was refused (file, line and column on stderr)"),
        ],
    ),
    (
        "gpuwarden-check",
        &[
            (Exit::SUCCESS, "every GPU healthy"),
            (Exit::FOUND, "findings"),
            (Exit::UNKNOWN, "no GPU could be read"),
            (Exit::CONFIG, "the config was refused"),
        ],
    ),
    (
        "gpuwarden-probe",
        &[
            (Exit::SUCCESS, "passed (or no expected values for this model)"),
            (Exit::FOUND, "a test failed"),
            (Exit::UNKNOWN, "the probe could not run"),
            (Exit::BUSY, "the GPU is busy: not probed"),
        ],
    ),
    (
        "gpuwarden-health",
        &[
            (Exit::SUCCESS, "no GPU unhealthy"),
            (Exit::FOUND, "a GPU or the node is unhealthy"),
            (Exit::UNKNOWN, "unknown: the daemon does not answer"),
            (
                Exit::VALIDATING,
                "the idle node's scheduled validation runs (keep new work off it; nothing is wrong)",
            ),
        ],
    ),
    (
        "gpuwarden-health-clear",
        &[
            (Exit::SUCCESS, "cleared, no finding left"),
            (
                Exit::FOUND,
                "cleared, but a finding is still present (its condition holds)",
            ),
            (Exit::UNKNOWN, "not cleared: the daemon did not answer, or refused"),
        ],
    ),
    (
        "gpuwarden-events",
        &[
            (Exit::SUCCESS, "the rows were printed (also when there are none)"),
            (Exit::UNKNOWN, "the journal cannot be read"),
        ],
    ),
    (
        "gpuwarden-report",
        &[
            (Exit::SUCCESS, "the report was printed"),
            (Exit::FOUND, "no such GPU or adapter in the journal"),
            (Exit::UNKNOWN, "the journal cannot be read"),
        ],
    ),
    (
        "gpuwarden-config-check",
        &[
            (Exit::SUCCESS, "the config is valid"),
            (Exit::CONFIG, "it is not (file, line and column on stderr)"),
        ],
    ),
    (
        "gpuwarden-xid-explain",
        &[
            (Exit::SUCCESS, "the code is in the catalog"),
            (Exit::FOUND, "it is not"),
        ],
    ),
    (
        "gpuwarden-demo-inject",
        &[
            (Exit::SUCCESS, "injected"),
            (Exit::FAILURE, "the demo's files could not be written"),
            (Exit::UNKNOWN, "no demo runs (or none as that pid)"),
        ],
    ),
];

/// The exit codes of a page's command, with EX_USAGE, which every command can give.
fn exit_status(page: &str) -> Vec<(Exit, &'static str)> {
    let mut codes: Vec<(Exit, &str)> = EXIT_STATUS
        .iter()
        .find(|(name, _)| *name == page)
        .map_or(vec![(Exit::SUCCESS, "done")], |(_, codes)| codes.to_vec());
    codes.push((Exit::USAGE, "the command line was wrong (EX_USAGE)"));
    codes.sort_by_key(|(exit, _)| exit.code());
    codes
}

/// The files a page's command reads or writes.
fn files(page: &str) -> &'static [(&'static str, &'static str)] {
    const ALL: &[(&str, &str)] = &[
        (
            "/etc/gpuwarden/config.yaml",
            "the config, read when --config is not given and it exists; `systemctl reload gpuwarden` re-reads it",
        ),
        (
            "/var/lib/gpuwarden/state.db",
            "the health journal (state.path): SQLite, read by `events` and `report`, also while the daemon runs",
        ),
        (
            "/run/gpuwarden/gpuwarden.sock",
            "the local API (local_api.socket) that `health` asks; mode 0600",
        ),
        (
            "/dev/kmsg",
            "the kernel log XIDs and SXIDs are read from (xid.kernel_log_path)",
        ),
        (
            "/usr/share/gpuwarden/",
            "the alert and recording rules, Alertmanager config, dashboards and Slurm scripts",
        ),
        (
            "/usr/lib/gpuwarden/",
            "the simulated NVML and CUDA libraries `run --demo` and `check --demo` run over",
        ),
    ];
    match page {
        "gpuwarden" | "gpuwarden-run" => ALL,
        "gpuwarden-health" | "gpuwarden-health-clear" | "gpuwarden-health-scheduler-report" => &ALL[2..3],
        "gpuwarden-events" | "gpuwarden-report" => &ALL[1..2],
        "gpuwarden-config-check" | "gpuwarden-check" | "gpuwarden-probe" => &ALL[0..1],
        _ => &[],
    }
}

/// The environment variables gpuwarden reads.
const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "RUST_LOG",
        "the log level (error, warn, info, debug); the daemon logs at info, a command at warn",
    ),
    (
        "TMPDIR",
        "where `run --demo` puts its files and where `--demo` looks for a running demo",
    ),
    (
        "LD_LIBRARY_PATH",
        "where the probe finds libcuda.so.1 and libcublas (the demo puts its simulated CUDA first)",
    ),
];

/// A few command lines, for the pages where one helps.
fn examples(page: &str) -> &'static [(&'static str, &'static str)] {
    match page {
        "gpuwarden" => &[
            (
                "gpuwarden run --demo",
                "the daemon over eight simulated GPUs, no GPU needed",
            ),
            ("gpuwarden health", "the running daemon's verdict: exit 0, 1, 2 or 3"),
            ("gpuwarden xid explain 79", "what Xid 79 means and what to do"),
            (
                "gpuwarden report --gpu 0 --markdown",
                "GPU 0's evidence for a ticket or an RMA",
            ),
        ],
        "gpuwarden-health" => &[
            ("gpuwarden health", "the verdict, worst first"),
            ("gpuwarden health --json", "the same, for a script"),
            (
                "sudo gpuwarden health clear --gpu 0 --reason \"reseated\"",
                "after a repair: count GPU 0 healthy again once a probe passes",
            ),
        ],
        "gpuwarden-events" => &[
            ("gpuwarden events --since 1d", "the last day's rows"),
            (
                "gpuwarden events --gpu 5 --kind xid,health",
                "GPU 5's XIDs and verdicts",
            ),
            (
                "gpuwarden events --all --json",
                "every row, baselines included, as JSON",
            ),
        ],
        "gpuwarden-report" => &[("gpuwarden report --gpu 0 --markdown", "GPU 0's evidence packet")],
        "gpuwarden-demo-inject" => &[
            ("gpuwarden demo inject --gpu 0 --xid 79", "GPU 0 falls off the bus"),
            (
                "gpuwarden demo inject --undo",
                "the demo's GPUs and ports as it started",
            ),
        ],
        "gpuwarden-config-check" => &[(
            "gpuwarden config check /etc/gpuwarden/config.yaml",
            "before `systemctl reload gpuwarden`",
        )],
        _ => &[],
    }
}

/// Text for roff: backslashes and hyphens escaped, no line starting with a control character.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.starts_with(['.', '\'']) {
        true => format!("\\&{escaped}"),
        false => escaped,
    }
}

/// One section of `.TP` entries: a term in bold, its text under it.
fn section(title: &str, entries: &[(String, &str)]) -> String {
    let mut out = format!(".SH \"{title}\"\n");
    for (term, text) in entries {
        out.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff_text(term), roff_text(text)));
    }
    out
}

/// The sections clap_mangen does not write, for the page `name` (`gpuwarden-health`).
pub fn extra_sections(name: &str) -> String {
    let mut out = String::new();
    let codes: Vec<(String, &str)> = exit_status(name)
        .into_iter()
        .map(|(exit, meaning)| (exit.code().to_string(), meaning))
        .collect();
    out.push_str(&section("EXIT STATUS", &codes));
    let files: Vec<(String, &str)> = files(name).iter().map(|(f, t)| (f.to_string(), *t)).collect();
    if !files.is_empty() {
        out.push_str(&section("FILES", &files));
    }
    if matches!(name, "gpuwarden" | "gpuwarden-run") {
        let env: Vec<(String, &str)> = ENVIRONMENT.iter().map(|(v, t)| (v.to_string(), *t)).collect();
        out.push_str(&section("ENVIRONMENT", &env));
    }
    let examples: Vec<(String, &str)> = examples(name).iter().map(|(c, t)| (c.to_string(), *t)).collect();
    if !examples.is_empty() {
        out.push_str(&section("EXAMPLES", &examples));
    }
    if name == "gpuwarden" {
        let docs =
            "the README and docs/: metrics, health rules and what to do for each, the journal, the probe, alerts";
        out.push_str(&section("SEE ALSO", &[("/usr/share/doc/gpuwarden/".to_string(), docs)]));
    }
    out
}

/// Writes every page of `command` (and its visible subcommands) into `dir`.
pub fn write_pages(command: clap::Command, dir: &Path) -> CliResult {
    let failed = |e: std::io::Error| {
        CliError::new(
            Exit::FAILURE,
            format!("gpuwarden: cannot write the man pages into {}: {e}", dir.display()),
        )
    };
    let mut command = command.disable_help_subcommand(true);
    command.build();
    write_page(command, dir).map_err(failed)?;
    Ok(Exit::SUCCESS)
}

fn write_page(command: clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        write_page(sub, dir)?;
    }
    let command = with_short_name_line(command);
    let has_options = command.get_arguments().any(|a| !a.is_hide_set());
    let has_subcommands = command.get_subcommands().any(|s| !s.is_hide_set());
    let has_version = command.get_version().or(command.get_long_version()).is_some();
    let man = clap_mangen::Man::new(command);
    let name = man.get_filename();
    let page = name.strip_suffix(".1").unwrap_or(&name).to_string();
    let mut text: Vec<u8> = Vec::new();
    // What `Man::render` writes, with our sections before VERSION.
    man.render_title(&mut text)?;
    man.render_name_section(&mut text)?;
    man.render_synopsis_section(&mut text)?;
    man.render_description_section(&mut text)?;
    if has_options {
        man.render_options_section(&mut text)?;
    }
    if has_subcommands {
        man.render_subcommands_section(&mut text)?;
    }
    text.extend_from_slice(extra_sections(&page).as_bytes());
    if has_version {
        man.render_version_section(&mut text)?;
    }
    let mut file = std::fs::File::create(dir.join(&name))?;
    file.write_all(&text)?;
    file.flush()
}

/// NAME is one line (`gpuwarden-check - Poll every GPU once and print what needs attention`),
/// as whatis(1) and apropos(1) list it: the about's first sentence; the whole text stays the
/// DESCRIPTION.
fn with_short_name_line(command: clap::Command) -> clap::Command {
    let Some(about) = command.get_about().map(|a| a.to_string()) else {
        return command;
    };
    let first = first_sentence(&about);
    if first == about {
        return command;
    }
    let long = command.get_long_about().map(|a| a.to_string()).unwrap_or(about);
    command.about(first).long_about(long)
}

/// The text up to the end of its first clause (". ", ": ", "; " or " ("), without the stop.
fn first_sentence(text: &str) -> String {
    let end = [". ", ": ", "; ", " ("]
        .iter()
        .filter_map(|stop| text.find(stop))
        .min()
        .unwrap_or(text.len());
    text[..end].trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_code_the_cli_uses_is_on_gpuwarden_1() {
        let codes: Vec<u8> = exit_status("gpuwarden").iter().map(|(e, _)| e.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 64, 69, 78]);
    }

    #[test]
    fn a_name_line_is_the_first_sentence() {
        assert_eq!(
            first_sentence("Poll every GPU once and print what needs attention. Exit 0: healthy; 1: findings"),
            "Poll every GPU once and print what needs attention"
        );
        assert_eq!(first_sentence("Print the version."), "Print the version");
        let command = with_short_name_line(clap::Command::new("check").about("Poll once. Exit 0: healthy"));
        assert_eq!(command.get_about().map(|a| a.to_string()).as_deref(), Some("Poll once"));
        assert_eq!(
            command.get_long_about().map(|a| a.to_string()).as_deref(),
            Some("Poll once. Exit 0: healthy")
        );
    }

    #[test]
    fn roff_text_cannot_start_a_request_or_lose_a_hyphen() {
        assert_eq!(roff_text(".hidden"), "\\&.hidden");
        assert_eq!(roff_text("--demo"), "\\-\\-demo");
        assert_eq!(roff_text("a\\b"), "a\\eb");
    }
}
