//! Being a well-behaved system service: one stop signal for every thread and task, blocking
//! calls held to a deadline, logging
//! with rate limits, telling systemd how the daemon is doing, and giving back the heap a
//! burst of work grew.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `cadence.rs` | "Read this every N seconds": one type for every tier and source that keeps a reading between reads (the NVML slow, GPM and topology tiers, the job... |
//! | `clock.rs` | The boot's own clock (CLOCK_BOOTTIME: seconds since boot, suspend included), for spans that the wall clock must not stretch or shrink: a wall clock set... |
//! | `deadline.rs` | A blocking call that must not hold its caller past a deadline (a connect to a socket whose daemon is stopped, a read from a peer that never answers): it... |
//! | `exit.rs` | How a command of the CLI ends: the exit code of what it found (`Exit`), or the error that stopped it (`CliError`), which `main` prints once |
//! | `http_client.rs` | One HTTP/1.1 request to a server the config names, for the two clients gpuwarden has (a sink's POST, journal/sinks/webhook.rs; the Kubernetes API,... |
//! | `logging.rs` | Logging set-up, and a limiter so a failing call logs once, not once a second |
//! | `notify.rs` | Telling systemd how the daemon is doing (sd_notify): READY, WATCHDOG, STATUS, RELOADING, STOPPING |
//! | `residency.rs` | Giving back the pages of gpuwarden's own code that only start-up ran |
//! | `stop.rs` | One stop signal for every thread and task of the daemon |
//! | `versioned.rs` | A value that a source replaces whole, with a counter that moves on every change (`Versioned`), and the "something changed" signal (`Changed`) that sources... |
//! <!-- /files -->

pub(crate) mod cadence;
pub(crate) mod clock;
pub(crate) mod deadline;
pub mod exit;
pub(crate) mod http_client;
pub mod logging;
pub(crate) mod notify;
pub(crate) mod residency;
pub(crate) mod stop;
pub(crate) mod versioned;
