//! How a command of the CLI ends: the exit code of what it found ([`Exit`]), or the error that
//! stopped it ([`CliError`]), which `main` prints once. Every exit code gpuwarden uses is here;
//! the commands' `--help` says which each one gives.

/// An exit code, by what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(u8);

impl Exit {
    /// Done, and nothing found: healthy, passed, written.
    pub const SUCCESS: Exit = Exit(0);
    /// Something was found: a GPU or the node unhealthy (`health`, `check`), a failed probe
    /// test, a finding whose condition still holds after a clear (not the validation the clear
    /// started), no such GPU in the journal.
    pub const FOUND: Exit = Exit(1);
    /// The daemon failed to run (its runtime, its signal handlers, its HTTP server).
    pub const FAILURE: Exit = Exit(1);
    /// No answer: the daemon does not answer, the journal cannot be read, no GPU could be
    /// read, the probe could not run, a clear or report the daemon did not take. Slurm's
    /// check and node-problem-detector read it as "unknown", never as healthy.
    pub const UNKNOWN: Exit = Exit(2);
    /// `health`: the idle node's scheduled validation runs (keep new work off it).
    pub const VALIDATING: Exit = Exit(3);
    /// `probe`: the GPU is busy; not probed.
    pub const BUSY: Exit = Exit(3);
    /// sysexits.h EX_USAGE: the command line was wrong (a mistyped flag, a bad value). Never
    /// 2, which `health` and `check` give for a result.
    pub const USAGE: Exit = Exit(64);
    /// sysexits.h EX_UNAVAILABLE: the daemon could not start serving (the port is taken).
    pub const UNAVAILABLE: Exit = Exit(69);
    /// sysexits.h EX_CONFIG: a config that `config check` or a start refuses.
    pub const CONFIG: Exit = Exit(78);

    pub fn code(self) -> u8 {
        self.0
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> std::process::ExitCode {
        std::process::ExitCode::from(exit.0)
    }
}

/// What stopped a command: the line `main` prints on stderr, and the code it exits with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
}

impl CliError {
    pub fn new(exit: Exit, message: impl Into<String>) -> CliError {
        CliError {
            exit,
            message: message.into(),
        }
    }

    /// An error already said elsewhere (the log): only its code.
    pub fn quiet(exit: Exit) -> CliError {
        CliError::new(exit, "")
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// What every command gives back.
pub type CliResult = Result<Exit, CliError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes scripts rely on (Slurm's HealthCheckProgram, node-problem-detector, systemd's
    /// RestartPreventExitStatus=78) stay what the docs say.
    #[test]
    fn the_codes_are_the_documented_ones() {
        let codes = [
            (Exit::SUCCESS, 0),
            (Exit::FOUND, 1),
            (Exit::UNKNOWN, 2),
            (Exit::VALIDATING, 3),
            (Exit::BUSY, 3),
            (Exit::USAGE, 64),
            (Exit::UNAVAILABLE, 69),
            (Exit::CONFIG, 78),
        ];
        for (exit, code) in codes {
            assert_eq!(exit.code(), code);
        }
    }
}
