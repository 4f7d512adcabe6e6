//! The journal's file: its schema and how it is opened, kept and pruned ([`db`]), the queries
//! that read it ([`read`]), and the child process that does both for the daemon ([`worker`]).

pub mod db;
pub mod read;
pub mod worker;
