//! "Did you mean": the command's own flag nearest an unknown one, for the typos clap's own
//! suggestion does not catch. clap compares by Jaro similarity, which sees no likeness in two
//! letters swapped in a short name (`--xdi` for `--xid`: 0.56, under its 0.7); an edit distance
//! that counts a swap as one edit (optimal string alignment) does.

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// The most edits (a swap of neighbours counting one) between an unknown flag and a suggestion.
const MAX_EDITS: usize = 2;

/// `error`, with a suggestion added where it is an unknown `--flag` and clap made none: the
/// long flag of the (sub)command `args` named nearest to it, within [`MAX_EDITS`].
pub fn with_suggestion(mut error: clap::Error, command: &clap::Command, args: &[String]) -> clap::Error {
    if error.kind() != ErrorKind::UnknownArgument || error.get(ContextKind::SuggestedArg).is_some() {
        return error;
    }
    let Some(ContextValue::String(unknown)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let Some(typed) = unknown.strip_prefix("--") else {
        return error;
    };
    let typed = typed.split('=').next().unwrap_or(typed).to_string();
    let nearest = named_command(command, args)
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(clap::Arg::get_long)
        .map(|long| (strsim::osa_distance(&typed, long), long))
        .filter(|(edits, _)| *edits <= MAX_EDITS)
        .min_by_key(|(edits, _)| *edits);
    if let Some((_, long)) = nearest {
        error.insert(ContextKind::SuggestedArg, ContextValue::String(format!("--{long}")));
    }
    error
}

/// The subcommand the words of `args` name (`gpuwarden demo inject ...`: `inject`).
fn named_command<'a>(command: &'a clap::Command, args: &[String]) -> &'a clap::Command {
    let mut current = command;
    for word in args.iter().skip(1) {
        if let Some(sub) = current.find_subcommand(word) {
            current = sub;
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn cli() -> Command {
        Command::new("gpuwarden").subcommand(
            Command::new("demo").subcommand(
                Command::new("inject")
                    .arg(Arg::new("xid").long("xid"))
                    .arg(Arg::new("hot").long("hot").num_args(0))
                    .arg(Arg::new("gpu").long("gpu")),
            ),
        )
    }

    fn suggested(args: &[&str]) -> Option<String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let error = cli().try_get_matches_from(&args).unwrap_err();
        let error = with_suggestion(error, &cli(), &args);
        match error.get(ContextKind::SuggestedArg) {
            Some(ContextValue::String(s)) => Some(s.clone()),
            _ => None,
        }
    }

    #[test]
    fn two_letters_swapped_get_the_flag_they_meant() {
        assert_eq!(
            suggested(&["gpuwarden", "demo", "inject", "--xdi", "79"]).as_deref(),
            Some("--xid")
        );
        assert_eq!(
            suggested(&["gpuwarden", "demo", "inject", "--gpu", "0", "--hto"]).as_deref(),
            Some("--hot")
        );
        assert_eq!(
            suggested(&["gpuwarden", "demo", "inject", "--xdi=79"]).as_deref(),
            Some("--xid")
        );
        // Nothing near: no guess.
        assert_eq!(suggested(&["gpuwarden", "demo", "inject", "--temperature"]), None);
    }
}
