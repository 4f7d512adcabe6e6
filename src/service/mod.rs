//! Being a well-behaved system service: one stop signal for every thread and task, blocking
//! calls held to a deadline, logging
//! with rate limits, telling systemd how the daemon is doing, and giving back the heap a
//! burst of work grew.

pub mod cadence;
pub mod clock;
pub mod deadline;
pub mod exit;
pub mod logging;
pub mod notify;
pub mod residency;
pub mod stop;
pub mod versioned;
