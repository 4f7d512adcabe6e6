//! The journal's file: its schema and how it is opened, kept and pruned ([`db`]), the queries
//! that read it ([`read`]), and the child process that does both for the daemon ([`worker`]).
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `batch.rs` | A batch: what one write transaction of the journal holds (rows in the order they happened, another source's report joined to an XID row, a row's fields... |
//! | `db.rs` | The database file: opening it for the writer (and what to do when it is corrupt, locked, read-only or on a full disk), its schema, and opening it read-only... |
//! | `read.rs` | Reading the journal: the rows `gpuwarden events`, `/api/v1/events` and the status page show, the facts and counts the writer starts from, and what a restart... |
//! | `worker.rs` | The journal's database work runs in a short-lived child process, `gpuwarden journal-worker` (the daemon's own binary, `/proc/self/exe`), one request on its... |
//! <!-- /files -->

pub(crate) mod batch;
pub(crate) mod db;
pub(crate) mod read;
pub mod worker;
