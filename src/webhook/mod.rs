//! Transport: the TLS server, admission and conversion handlers, certificates.

pub mod certs;
pub mod serve;
