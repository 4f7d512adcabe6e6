//! The consumers that answer requests: the HTTP server (`/metrics`, the status page, the APIs),
//! the local API's Unix socket, and what only they need (the history rings, the charts, HTML
//! escaping). None of them calls a vendor library or waits on one: they read the published
//! snapshot.

pub mod history;
pub mod html;
pub mod http;
pub mod keep_alive;
pub mod local_api;
pub mod slots;
pub mod sparkline;
pub mod status_network;
pub mod status_page;
pub mod status_probe;
