//! The snapshot stage: the poll round and the sources' values put together by a pure
//! `assemble` (the publisher), and the store that holds the latest whole snapshot for every
//! consumer.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `publisher.rs` | Putting a whole snapshot together and publishing it |
//! | `store.rs` | The snapshot store: the one place pollers write and renderers read |
//! <!-- /files -->

pub(crate) mod publisher;
pub(crate) mod store;
