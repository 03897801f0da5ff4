//! The listeners: the accept loops, the connection workers, the limits and
//! deadlines every connection lives under, graceful drain, and the shutdown
//! signal. What is served on them is in [`super::server`].
//!
//! Every connection has a bound on its time and the process a bound on their
//! number (see [`Limits`]): the TLS handshake, the protocol preface and the
//! first request's headers must arrive within
//! [`Limits::first_request_timeout`] of the accept (hyper's own header
//! timeout starts only after the preface, and hyper-util's protocol
//! detection has none); later request headers within
//! [`Limits::header_read_timeout`]; an idle keep-alive connection is closed
//! after [`Limits::idle_timeout`] (longer than the 90 s Go clients, the API
//! server among them, keep theirs, so the client always closes first and
//! never writes into a connection being closed). At
//! [`Limits::max_connections`] the connection idle the longest is shed for a
//! new one; when none is idle, the new one is refused. Request bodies and
//! whole requests have deadlines of their own in [`super::limits`].

mod accept;
mod bounds;
mod connections;
mod serve;
mod shutdown;
mod workers;

pub use accept::{bind, default_workers, serve_plain, serve_tls, serve_tls_with};
pub use bounds::{FD_RESERVE, Limits, raise_open_files_limit};
pub use shutdown::{DRAIN_TIMEOUT, Drain, signal_shutdown};
