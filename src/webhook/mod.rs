//! Transport: the TLS server, admission and conversion handlers, certificates.

pub mod admission;
pub mod certs;
pub mod conversion;
pub mod listener;
pub mod selfsigned;
pub mod server;
pub mod tls;
