//! The snapshot stage: the poll round and the sources' values put together by a pure
//! `assemble` (the publisher), and the store that holds the latest whole snapshot for every
//! consumer.

pub mod publisher;
pub mod store;
