//! The webhook transport:
//!
//! - [`listener`]: TLS and probe listeners, limits, timeouts, drain;
//! - [`server`]: the routers and the thin handlers;
//! - [`admission`] and [`conversion`]: what the handlers do;
//! - [`tls`]: the serving certificate (resolver, files, rcgen, the
//!   self-signed Secret and caBundle injection).

pub mod admission;
pub mod conversion;
pub mod listener;
pub mod server;
pub mod tls;
