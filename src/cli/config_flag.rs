//! The global `--config` where a command reads no config (`xid`, `config check`, `man`,
//! `completions`, `demo`): hidden from that command's help, man page and completions, so
//! nobody is led to think it matters there, and still accepted, so a wrapper that passes
//! `--config` to every call keeps working.
//!
//! clap gives a global argument to every subcommand that has none of the same name; each of
//! these is given a hidden one of its own first.

use clap::{Arg, Command};

/// The commands that read no config, each as its path of subcommand names.
pub const READ_NONE: &[&[&str]] = &[
    &["xid", "explain"],
    &["xid", "scan"],
    &["config", "check"],
    &["man"],
    &["completions"],
    &["demo"],
    &["demo", "inject"],
];

/// `command` (the whole command line's definition) with `--config` hidden where it is unread.
pub fn hidden_where_unread(mut command: Command) -> Command {
    for path in READ_NONE {
        command = hide_in(command, path);
    }
    command
}

fn hide_in(command: Command, path: &[&str]) -> Command {
    let Some((first, rest)) = path.split_first() else {
        return command.arg(unread_config());
    };
    // A name not defined is left alone: the architecture's CLI test names each.
    if command.find_subcommand(first).is_none() {
        return command;
    }
    command.mut_subcommand(*first, |sub| hide_in(sub, rest))
}

fn unread_config() -> Arg {
    Arg::new("config")
        .long("config")
        .value_name("FILE")
        .value_parser(clap::value_parser!(std::path::PathBuf))
        .hide(true)
}
