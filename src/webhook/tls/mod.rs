//! TLS: [`serving`] holds the served certificate (a resolver that swaps it
//! without a lock, the rustls server configuration, the reloader for
//! `--tls-cert-file`);
//! [`certs`] issues certificates with rcgen (`infergate certs`), and
//! [`selfsigned`] keeps them in a Secret and injects the CA (`--self-signed`).

pub mod certs;
pub mod rotation;
pub mod selfsigned;
pub mod serving;

pub use serving::{
    CertResolver, ServingCert, TlsError, load_files, not_after_unix, parse_pem_pair, pem_validity,
    server_config, watch_files,
};
