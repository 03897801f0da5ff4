//! Fetching serving graphs over bearer-authenticated HTTPS.
//!
//! [`GraphFetcher::fetch`] GETs `spec.graph.url` (https only, also across
//! redirects) with `Authorization: Bearer <token>`, connect and total
//! timeouts, a size cap, retries with exponential backoff for transient
//! failures (connection errors, timeouts, 5xx, 429), and conditional requests:
//! the last ETag per service is sent as `If-None-Match`, and a `304 Not
//! Modified` answers from the cache without downloading the graph again.
//!
//! The token is a [`BearerToken`]: its `Debug` and `Display` print
//! `[redacted]`, its header value is marked sensitive, and no error message
//! or tracing field carries it.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use reqwest::header::{ACCEPT, AUTHORIZATION, ETAG, HeaderValue, IF_NONE_MATCH};
use reqwest::{StatusCode, Url};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tracing::debug;

use super::proto::ServingGraph;
use super::{GraphError, decode};
use crate::api::v1beta1::SecretKeyRef;

/// A bearer token read from a Secret, kept as its sensitive
/// `Authorization` header value. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(HeaderValue);

impl BearerToken {
    /// A token from the Secret's bytes: UTF-8, surrounding whitespace (a
    /// trailing newline from `echo`) trimmed, not empty, valid in a header.
    pub fn new(raw: &[u8]) -> Result<Self, &'static str> {
        let s = std::str::from_utf8(raw).map_err(|_| "the value is not UTF-8")?;
        let s = s.trim();
        if s.is_empty() {
            return Err("the value is empty");
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the value contains characters not allowed in an HTTP header");
        }
        let mut v = HeaderValue::from_str(&format!("Bearer {s}"))
            .map_err(|_| "the value contains characters not allowed in an HTTP header")?;
        v.set_sensitive(true);
        Ok(Self(v))
    }

    /// The `Authorization` header value, marked sensitive.
    fn header_value(&self) -> HeaderValue {
        self.0.clone()
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken([redacted])")
    }
}

impl fmt::Display for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// The token under `r.key` of `secret` (in `namespace`, for messages).
pub fn token_from_secret(
    secret: &Secret,
    namespace: &str,
    r: &SecretKeyRef,
) -> Result<BearerToken, GraphError> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|b| b.0.as_slice())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(&r.key))
                .map(String::as_bytes)
        })
        .ok_or_else(|| GraphError::SecretKeyMissing {
            namespace: namespace.to_owned(),
            name: r.name.clone(),
            key: r.key.clone(),
        })?;
    BearerToken::new(bytes).map_err(|why| GraphError::SecretInvalid {
        namespace: namespace.to_owned(),
        name: r.name.clone(),
        key: r.key.clone(),
        why,
    })
}

/// Where serving graphs come from. The reconciler resolves graphs through
/// this trait; [`GraphFetcher`] (HTTPS with an ETag cache) implements it.
pub trait GraphSource: Send + Sync {
    /// Fetch and decode the graph at `url` for the service `cache_key`
    /// (`namespace/name`), with `token` as bearer credentials.
    fn fetch(
        &self,
        cache_key: &str,
        url: &str,
        token: Option<&BearerToken>,
    ) -> impl std::future::Future<Output = Result<Fetched, GraphError>> + Send;
    /// Forget whatever was kept for `cache_key` (the service was deleted).
    fn forget(&self, cache_key: &str);
}

impl GraphSource for GraphFetcher {
    fn fetch(
        &self,
        cache_key: &str,
        url: &str,
        token: Option<&BearerToken>,
    ) -> impl std::future::Future<Output = Result<Fetched, GraphError>> + Send {
        GraphFetcher::fetch(self, cache_key, url, token)
    }

    fn forget(&self, cache_key: &str) {
        GraphFetcher::forget(self, cache_key);
    }
}

/// Limits of one fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchOptions {
    /// Time to establish the TCP and TLS connection.
    pub connect_timeout: Duration,
    /// Time for one whole attempt, body included.
    pub timeout: Duration,
    /// Largest accepted body in bytes.
    pub max_bytes: u64,
    /// Attempts for transient failures (at least 1).
    pub attempts: u32,
    /// Delay before the second attempt; doubles for each further one.
    pub backoff: Duration,
    /// Longest delay between attempts.
    pub max_backoff: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(15),
            // serveConfigV2 lands in a RayService object, which etcd caps at 1.5 MiB.
            max_bytes: 1024 * 1024,
            attempts: 3,
            backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(4),
        }
    }
}

/// Why a [`GraphFetcher`] could not be built (a start-up error of `serve`).
#[derive(Debug, thiserror::Error)]
pub enum FetcherError {
    /// `--graph-ca-file` could not be read.
    #[error("cannot read graph CA file {path}: {source}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `--graph-ca-file` holds no usable PEM certificate.
    #[error("graph CA file {path} holds no usable PEM certificate: {message}")]
    CaPem {
        /// The file.
        path: PathBuf,
        /// The PEM or certificate error.
        message: String,
    },
    /// The TLS verifier could not be set up (no roots at all, bad extra root).
    #[error("cannot set up TLS for graph fetching: {0}")]
    Tls(String),
    /// The HTTP client could not be built.
    #[error("cannot build the graph HTTP client: {0}")]
    Client(String),
}

/// What a fetch produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Fetched {
    /// The decoded graph (not yet validated).
    pub graph: Arc<ServingGraph>,
    /// The ETag the server sent with it, if any.
    pub etag: Option<String>,
    /// `true` when the server answered 304 and the cached graph was reused.
    pub not_modified: bool,
}

#[derive(Clone, Debug)]
struct CacheEntry {
    url: String,
    etag: String,
    graph: Arc<ServingGraph>,
}

/// An HTTPS client for serving graphs with a per-service ETag cache.
#[derive(Debug)]
pub struct GraphFetcher {
    client: reqwest::Client,
    options: FetchOptions,
    cache: Mutex<HashMap<String, CacheEntry>>,
}

/// PEM certificates of `--graph-ca-file`.
pub fn load_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, FetcherError> {
    let pem = std::fs::read(path).map_err(|source| FetcherError::CaFile {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| FetcherError::CaPem {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(FetcherError::CaPem {
            path: path.to_owned(),
            message: "no CERTIFICATE block".to_owned(),
        });
    }
    Ok(certs)
}

impl GraphFetcher {
    /// A fetcher trusting the platform's roots plus `extra_roots`, on the
    /// ring crypto provider.
    pub fn new(
        options: FetchOptions,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> Result<Self, FetcherError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls_platform_verifier::Verifier::new_with_extra_roots(extra_roots, provider.clone())
                .map_err(|e| FetcherError::Tls(e.to_string()))?;
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| FetcherError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .https_only(true)
            .redirect(reqwest::redirect::Policy::limited(5))
            .connect_timeout(options.connect_timeout)
            .timeout(options.timeout)
            .user_agent(concat!("infergate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetcherError::Client(e.to_string()))?;
        Ok(Self {
            client,
            options,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// A fetcher for `serve --graph-ca-file`.
    pub fn from_ca_file(
        options: FetchOptions,
        ca_file: Option<&Path>,
    ) -> Result<Self, FetcherError> {
        let roots = match ca_file {
            Some(p) => load_ca_file(p)?,
            None => Vec::new(),
        };
        Self::new(options, roots)
    }

    /// The limits in force.
    #[must_use]
    pub fn options(&self) -> &FetchOptions {
        &self.options
    }

    /// Drop the cached graph of `cache_key` (the service was deleted).
    pub fn forget(&self, cache_key: &str) {
        if let Ok(mut c) = self.cache.lock() {
            c.remove(cache_key);
        }
    }

    fn cached(&self, cache_key: &str, url: &str) -> Option<CacheEntry> {
        let c = self.cache.lock().ok()?;
        c.get(cache_key).filter(|e| e.url == url).cloned()
    }

    fn store(&self, cache_key: &str, entry: Option<CacheEntry>) {
        if let Ok(mut c) = self.cache.lock() {
            match entry {
                Some(e) => {
                    c.insert(cache_key.to_owned(), e);
                }
                None => {
                    c.remove(cache_key);
                }
            }
        }
    }

    /// Fetch and decode the graph at `url` for the service `cache_key`
    /// (`namespace/name`: the ETag cache is per service, so one service's
    /// cached graph never answers for another's credentials).
    pub async fn fetch(
        &self,
        cache_key: &str,
        url: &str,
        token: Option<&BearerToken>,
    ) -> Result<Fetched, GraphError> {
        let parsed = check_url(url)?;
        let attempts = self.options.attempts.max(1);
        let mut delay = self.options.backoff;
        let mut attempt = 1;
        loop {
            let cached = self.cached(cache_key, url);
            let result = self.attempt(&parsed, url, token, cached.as_ref()).await;
            match result {
                Ok((fetched, entry)) => {
                    if !fetched.not_modified {
                        self.store(cache_key, entry);
                    }
                    return Ok(fetched);
                }
                Err(e) if e.is_transient() && attempt < attempts => {
                    debug!(url, attempt, reason = e.reason(), error = %e, "graph fetch failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(self.options.max_backoff);
                    attempt += 1;
                }
                Err(GraphError::Timeout {
                    url, timeout_ms, ..
                }) => {
                    return Err(GraphError::Timeout {
                        url,
                        attempts: attempt,
                        timeout_ms,
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn attempt(
        &self,
        parsed: &Url,
        url: &str,
        token: Option<&BearerToken>,
        cached: Option<&CacheEntry>,
    ) -> Result<(Fetched, Option<CacheEntry>), GraphError> {
        let mut req = self.client.get(parsed.clone()).header(
            ACCEPT,
            "application/x-protobuf, application/octet-stream;q=0.9",
        );
        if let Some(t) = token {
            req = req.header(AUTHORIZATION, t.header_value());
        }
        if let Some(c) = cached
            && let Ok(v) = HeaderValue::from_str(&c.etag)
        {
            req = req.header(IF_NONE_MATCH, v);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.transport_error(url, &e))?;
        let status = resp.status();
        match status {
            StatusCode::NOT_MODIFIED => match cached {
                Some(c) => Ok((
                    Fetched {
                        graph: c.graph.clone(),
                        etag: Some(c.etag.clone()),
                        not_modified: true,
                    },
                    None,
                )),
                // A 304 to a request without If-None-Match.
                None => Err(GraphError::HttpStatus {
                    url: url.to_owned(),
                    status: status.as_u16(),
                }),
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(GraphError::Unauthorized {
                url: url.to_owned(),
                status: status.as_u16(),
            }),
            StatusCode::NOT_FOUND | StatusCode::GONE => Err(GraphError::NotFound {
                url: url.to_owned(),
                status: status.as_u16(),
            }),
            s if s.is_success() => {
                let etag = resp
                    .headers()
                    .get(ETAG)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let body = self.read_capped(url, resp).await?;
                let graph = Arc::new(decode(&body).map_err(|e| match e {
                    GraphError::Undecodable { message } => GraphError::Undecodable {
                        message: format!("{url}: {message}"),
                    },
                    other => other,
                })?);
                let entry = etag.clone().map(|etag| CacheEntry {
                    url: url.to_owned(),
                    etag,
                    graph: graph.clone(),
                });
                Ok((
                    Fetched {
                        graph,
                        etag,
                        not_modified: false,
                    },
                    entry,
                ))
            }
            s => Err(GraphError::HttpStatus {
                url: url.to_owned(),
                status: s.as_u16(),
            }),
        }
    }

    async fn read_capped(
        &self,
        url: &str,
        mut resp: reqwest::Response,
    ) -> Result<Vec<u8>, GraphError> {
        let limit = self.options.max_bytes;
        let too_large = || GraphError::TooLarge {
            url: url.to_owned(),
            limit,
        };
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| self.transport_error(url, &e))?
        {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn transport_error(&self, url: &str, e: &reqwest::Error) -> GraphError {
        if e.is_timeout() {
            return GraphError::Timeout {
                url: url.to_owned(),
                attempts: 1,
                timeout_ms: u64::try_from(self.options.timeout.as_millis()).unwrap_or(u64::MAX),
            };
        }
        if let Some(tls) = tls_cause(e) {
            return GraphError::Tls {
                url: url.to_owned(),
                message: tls.to_string(),
            };
        }
        GraphError::Unreachable {
            url: url.to_owned(),
            message: error_chain(e),
        }
    }
}

/// `url` is https, has a host and no credentials.
pub fn check_url(url: &str) -> Result<Url, GraphError> {
    let bad = |message: &str| GraphError::InvalidUrl {
        url: url.to_owned(),
        message: message.to_owned(),
    };
    let parsed = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if parsed.scheme() != "https" {
        return Err(bad("the scheme must be https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("the URL has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            "credentials in the URL are not allowed: use spec.graph.bearerTokenSecretRef",
        ));
    }
    Ok(parsed)
}

/// The rustls error behind a transport error, if the handshake failed.
/// `io::Error::source` skips the error it wraps (and TLS errors arrive
/// wrapped in one or more `io::Error`s), so look inside those too.
fn tls_cause(e: &reqwest::Error) -> Option<&rustls::Error> {
    fn inside<'a>(mut err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
        loop {
            if let Some(t) = err.downcast_ref::<rustls::Error>() {
                return Some(t);
            }
            let io = err.downcast_ref::<std::io::Error>()?;
            err = io.get_ref()?;
        }
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(t) = inside(s) {
            return Some(t);
        }
        source = s.source();
    }
    None
}

/// The causes of a transport error, most specific last, without the URL
/// (already in the message) and without repeats.
fn error_chain(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    if parts.is_empty() {
        if e.is_connect() {
            "connection failed".to_owned()
        } else {
            "request failed".to_owned()
        }
    } else {
        parts.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    fn key_ref() -> SecretKeyRef {
        SecretKeyRef {
            name: "graph-token".into(),
            key: "token".into(),
        }
    }

    #[test]
    fn token_is_never_printed() {
        let t = BearerToken::new(b"s3cr3t-value\n").expect("valid");
        assert_eq!(format!("{t}"), "[redacted]");
        assert!(!format!("{t:?}").contains("s3cr3t"));
        assert!(t.header_value().is_sensitive());
        assert_eq!(
            t.header_value().as_bytes(),
            b"Bearer s3cr3t-value",
            "trailing newline trimmed"
        );
    }

    #[test]
    fn token_from_secret_reasons() {
        let ok = token_from_secret(&secret(&[("token", b"abc")]), "team-a", &key_ref());
        assert!(ok.is_ok());
        let missing =
            token_from_secret(&secret(&[("other", b"abc")]), "team-a", &key_ref()).unwrap_err();
        assert_eq!(missing.reason(), "GraphSecretKeyMissing");
        assert!(
            missing
                .to_string()
                .contains("team-a/graph-token has no key \"token\"")
        );
        let empty =
            token_from_secret(&secret(&[("token", b" \n")]), "team-a", &key_ref()).unwrap_err();
        assert_eq!(empty.reason(), "GraphSecretInvalid");
        let bad =
            token_from_secret(&secret(&[("token", b"a b")]), "team-a", &key_ref()).unwrap_err();
        assert_eq!(bad.reason(), "GraphSecretInvalid");
        assert!(!bad.to_string().contains("a b"), "the value is not echoed");
        let no_data = token_from_secret(&Secret::default(), "team-a", &key_ref()).unwrap_err();
        assert_eq!(no_data.reason(), "GraphSecretKeyMissing");
    }

    #[test]
    fn only_https_urls_without_credentials() {
        assert!(check_url("https://graphs.example.com/v1/g").is_ok());
        for (url, why) in [
            ("http://graphs.example.com/g", "https"),
            ("graphs.example.com/g", "relative URL"),
            ("https://user:pw@graphs.example.com/g", "credentials"),
        ] {
            let e = check_url(url).unwrap_err();
            assert_eq!(e.reason(), "GraphURLInvalid");
            assert!(e.to_string().contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn ca_file_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        assert!(matches!(
            load_ca_file(&missing),
            Err(FetcherError::CaFile { .. })
        ));
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem").expect("write");
        assert!(matches!(
            load_ca_file(&empty),
            Err(FetcherError::CaPem { .. })
        ));
    }
}
