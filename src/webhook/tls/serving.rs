//! The served certificate: a resolver that swaps it without a lock, the
//! rustls server configuration, and the reloader for `--tls-cert-file`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

use crate::metrics::{CertificateKind, Metrics};

/// Errors while loading certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The PEM holds no certificate.
    #[error("no certificate found in PEM input")]
    NoCertificate,
    /// The PEM could not be decoded.
    #[error("invalid PEM: {0}")]
    Pem(String),
    /// The key does not fit the certificate or is not supported.
    #[error("invalid certificate or key: {0}")]
    Key(#[from] rustls::Error),
    /// The certificate does not parse as X.509.
    #[error("invalid certificate: {0}")]
    X509(String),
}

/// A parsed serving certificate with its expiry.
#[derive(Clone, Debug)]
pub struct ServingCert {
    /// The certificate chain and signing key rustls serves.
    pub key: Arc<CertifiedKey>,
    /// notAfter of the leaf, Unix seconds.
    pub not_after: i64,
}

/// Parse a PEM certificate chain and PEM private key into a [`ServingCert`].
pub fn parse_pem_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServingCert, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    let leaf = chain.first().ok_or(TlsError::NoCertificate)?;
    let not_after = not_after_unix(leaf)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem(e.to_string()))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = CertifiedKey::from_der(chain, key, &provider)?;
    Ok(ServingCert {
        key: Arc::new(certified),
        not_after,
    })
}

/// notAfter of a DER certificate, Unix seconds.
pub fn not_after_unix(der: &[u8]) -> Result<i64, TlsError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| TlsError::X509(e.to_string()))?;
    Ok(cert.validity().not_after.timestamp())
}

/// notBefore and notAfter of the first certificate in a PEM, Unix seconds.
pub fn pem_validity(cert_pem: &[u8]) -> Result<(i64, i64), TlsError> {
    let der = CertificateDer::pem_slice_iter(cert_pem)
        .next()
        .ok_or(TlsError::NoCertificate)?
        .map_err(|e| TlsError::Pem(e.to_string()))?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| TlsError::X509(e.to_string()))?;
    Ok((
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    ))
}

/// Serves whatever certificate was stored last; swapping is lock-free and
/// affects only handshakes that start afterwards (open connections keep going).
#[derive(Debug, Default)]
pub struct CertResolver {
    current: ArcSwapOption<CertifiedKey>,
}

impl CertResolver {
    /// An empty resolver (handshakes fail until [`CertResolver::set`]).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Serve `key` from the next handshake on.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        self.current.store(Some(key));
    }

    /// Whether a certificate is loaded.
    #[must_use]
    pub fn is_loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// The certificate served now.
    #[must_use]
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

/// The rustls server configuration: TLS 1.2 and 1.3 only, ALPN `h2` and
/// `http/1.1`, certificates from `resolver`.
pub fn server_config(resolver: Arc<CertResolver>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Contents of the pair; `None` while either file is missing. Contents, not
/// mtimes, decide: mtime granularity is coarse on some file systems and
/// Kubernetes Secret volumes swap a symlink.
fn read_pair(cert: &Path, key: &Path) -> Option<(Vec<u8>, Vec<u8>)> {
    let c = std::fs::read(cert).ok()?;
    let k = std::fs::read(key).ok()?;
    Some((c, k))
}

/// Load `cert`/`key` from disk now.
pub fn load_files(cert: &Path, key: &Path) -> Result<ServingCert, TlsError> {
    let c = std::fs::read(cert).map_err(|source| TlsError::Read {
        path: cert.to_owned(),
        source,
    })?;
    let k = std::fs::read(key).map_err(|source| TlsError::Read {
        path: key.to_owned(),
        source,
    })?;
    parse_pem_pair(&c, &k)
}

/// Poll `cert`/`key` every `interval` (portable: no inotify) and swap the
/// served certificate when the contents change and the new pair parses.
/// A half-written or mismatched pair is logged and retried at the next tick.
pub async fn watch_files(
    cert: PathBuf,
    key: PathBuf,
    resolver: Arc<CertResolver>,
    metrics: Metrics,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut last = read_pair(&cert, &key);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let now = read_pair(&cert, &key);
        if now.is_none() || now == last {
            continue;
        }
        let Some((c, k)) = now.as_ref() else { continue };
        match parse_pem_pair(c, k) {
            Ok(sc) => {
                resolver.set(sc.key);
                metrics.set_certificate_expiry(CertificateKind::Serving, sc.not_after);
                tracing::info!(cert = %cert.display(), not_after = sc.not_after, "reloaded serving certificate");
                last = now;
            }
            Err(e) => {
                // Half-written or mismatched pair: retried at the next tick.
                tracing::warn!(cert = %cert.display(), error = %e, "serving certificate files changed but do not parse; keeping the current certificate");
            }
        }
    }
}
