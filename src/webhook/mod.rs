//! Transport: the TLS server, admission and conversion handlers, certificates.

pub mod admission;
pub mod cache;
pub mod certs;
pub mod conversion;
pub mod patch;
pub mod review;
pub mod selfsigned;
pub mod serve;
pub mod server;
pub mod tls;
