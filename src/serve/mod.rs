//! The consumers that answer requests: the HTTP server (`/metrics`, the status page, the APIs),
//! the local API's Unix socket, and what only they need (the history rings, the charts, HTML
//! escaping). None of them calls a vendor library or waits on one: they read the published
//! snapshot.
//!
//! <!-- files -->
//!
//! | file | what |
//! | --- | --- |
//! | `history.rs` | Each GPU's recent past, for the status page's trends and `GET /api/v1/history`: a few readings per GPU kept in two bounded rings, one point every 10 s for... |
//! | `html.rs` | HTML text escaping for the server-rendered pages (the status page and its charts) |
//! | `http.rs` | The HTTP server: `/metrics`, `/healthz` and `/` |
//! | `keep_alive.rs` | Two limits on a kept-alive HTTP/1 connection, as Go's server has them and hyper does not: a client gets `HEADER_READ_TIMEOUT` to send a request head (from... |
//! | `local_api.rs` | The local API: a Unix socket (config `local_api.socket`, mode 0600) where `gpuwarden health`, Slurm's health check and node-problem-detector ask the running... |
//! | `slots.rs` | The HTTP server's connection slots, and who gives one up when they run out |
//! | `sparkline.rs` | Small inline SVG charts for the status page: a GPU's last hour of one reading, with a dashed reference (its slowdown threshold, its power limit) and the... |
//! | `status_network.rs` | The status page's network section: one row per InfiniBand or RoCE port, with its state, rate, flaps, the error counters that are not 0, the GPUs behind its... |
//! | `status_page.rs` | The status page at `/`: each GPU with its health, temperature, active clock-event reasons and XIDs, for a person who opens the node's address in a browser |
//! | `status_probe.rs` | The status page's probe trend: one small chart per GPU of a test's sustained figure over the probes the daemon knows (its journal's history and every probe... |
//! <!-- /files -->

pub(crate) mod history;
pub(crate) mod html;
pub(crate) mod http;
pub(crate) mod keep_alive;
pub(crate) mod local_api;
pub(crate) mod slots;
pub(crate) mod sparkline;
pub(crate) mod status_network;
pub(crate) mod status_page;
pub(crate) mod status_probe;
