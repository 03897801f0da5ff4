//! Fetching serving graphs over bearer-authenticated HTTPS.
//!
//! [`GraphFetcher::fetch`] GETs `spec.graph.url` (https only) within one
//! deadline (DNS, connection, TLS, headers and body), with a size cap,
//! conditional requests (the last ETag per service is sent as
//! `If-None-Match`, and a `304 Not Modified` answers from the cache), at
//! most [`FetchOptions::per_namespace`] fetches of a namespace and
//! [`FetchOptions::in_flight`] in all at once (the others wait in line, first
//! come, first served: [`super::queue`]), a backoff per service after a
//! failed fetch, and at most one fetch per [`FetchOptions::refresh_interval`]
//! per service on a refresh ([`GraphFetcher::refresh_in`]). It connects only
//! to the addresses
//! [`super::destination`] checked, follows redirects only within the same
//! host and port, and sends no `Referer`. Tokens: [`super::token`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, AUTHORIZATION, ETAG, HeaderValue, IF_NONE_MATCH};
use reqwest::{StatusCode, Url};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tracing::debug;

use super::codec::decode;
use super::destination::{Checked, destination};
use super::error::GraphError;
use super::proto::ServingGraph;
use super::queue::{FetchLimits, Slot, SlotQueue};
use crate::engine::graph_source::{host_and_port, parse_graph_url};

pub use super::token::{BearerToken, TOKEN_HOSTS_ANNOTATION, token_from_secret};

/// One fetch: for which service, from where, with what.
#[derive(Clone, Copy, Debug)]
pub struct FetchRequest<'a> {
    /// The service, `namespace/name`: the key of its ETag cache entry and
    /// of its backoff.
    pub cache_key: &'a str,
    /// The service's namespace (fetches in flight are counted per namespace).
    pub namespace: &'a str,
    /// `spec.graph.url`.
    pub url: &'a str,
    /// The bearer token, when the Secret allowed this host.
    pub token: Option<&'a BearerToken>,
    /// An applicable policy lists the URL's host literally in
    /// `allowedGraphHosts`: internal addresses may be reached.
    pub internal_allowed: bool,
}

/// Where serving graphs come from. The reconciler resolves graphs through
/// this trait; [`GraphFetcher`] (HTTPS with an ETag cache) implements it.
pub trait GraphSource: Send + Sync {
    /// A slot to fetch in for the service `cache_key` of `namespace`, or
    /// its place in line ([`GraphError::Queued`]).
    fn slot(&self, cache_key: &str, namespace: &str) -> Result<Slot, GraphError>;
    /// Fetch and decode the graph `req` names, in `slot`.
    fn fetch_in(
        &self,
        slot: Slot,
        req: FetchRequest<'_>,
    ) -> impl std::future::Future<Output = Result<Fetched, GraphError>> + Send;
    /// Forget whatever was kept for `cache_key` (the service was deleted).
    fn forget(&self, cache_key: &str);
    /// Time until the service `cache_key` may fetch `url` again after a failure.
    fn retry_in(&self, cache_key: &str, url: &str) -> Option<Duration>;
    /// Time until a refresh of the service `cache_key` may fetch `url`.
    fn refresh_in(&self, cache_key: &str, url: &str) -> Option<Duration>;
    /// The graph the service `cache_key` last fetched from `url`, if that
    /// fetch (or its revalidation) is younger than `max_age` and no fetch
    /// of it failed since.
    fn fresh(&self, cache_key: &str, url: &str, max_age: Duration) -> Option<Fetched>;
}

impl GraphSource for GraphFetcher {
    fn slot(&self, cache_key: &str, namespace: &str) -> Result<Slot, GraphError> {
        GraphFetcher::slot(self, cache_key, namespace)
    }

    fn fetch_in(
        &self,
        slot: Slot,
        req: FetchRequest<'_>,
    ) -> impl std::future::Future<Output = Result<Fetched, GraphError>> + Send {
        GraphFetcher::fetch_in(self, slot, req)
    }

    fn forget(&self, cache_key: &str) {
        GraphFetcher::forget(self, cache_key);
    }

    fn retry_in(&self, cache_key: &str, url: &str) -> Option<Duration> {
        GraphFetcher::retry_in(self, cache_key, url)
    }

    fn refresh_in(&self, cache_key: &str, url: &str) -> Option<Duration> {
        GraphFetcher::refresh_in(self, cache_key, url)
    }

    fn fresh(&self, cache_key: &str, url: &str, max_age: Duration) -> Option<Fetched> {
        GraphFetcher::fresh(self, cache_key, url, max_age)
    }
}

/// FetchLimits of fetching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchOptions {
    /// One deadline for a whole fetch: DNS, connection, TLS, headers, body.
    pub deadline: Duration,
    /// Largest accepted body in bytes.
    pub max_bytes: u64,
    /// Fetches in flight per namespace; more wait in line, first come,
    /// first served.
    pub per_namespace: usize,
    /// Fetches in flight in all (below the reconciler's concurrency, so
    /// services without graphs always find a worker).
    pub in_flight: usize,
    /// A service that has waited in line longer than this says so
    /// (`GraphReady=Unknown`, reason `FetchQueued`).
    pub queued_after: Duration,
    /// Wait after a service's first failed fetch; doubles with each further one.
    pub backoff: Duration,
    /// Longest wait between a service's fetches while they fail.
    pub max_backoff: Duration,
    /// A refresh (`infergate.dev/graph-refresh`) fetches only this long
    /// after the service's last fetch ended, and never within a backoff.
    pub refresh_interval: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(10),
            max_bytes: 4 * 1024 * 1024,
            per_namespace: 2,
            in_flight: 8,
            queued_after: Duration::from_secs(10),
            backoff: Duration::from_secs(5),
            max_backoff: Duration::from_secs(300),
            refresh_interval: REFRESH_INTERVAL,
        }
    }
}

/// The shipped [`FetchOptions::refresh_interval`]: a refresh fetches at
/// most once per 30 s per service.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);

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
    /// `sha256:<hex>` of the graph's bytes as the server sent them.
    pub digest: String,
}

/// `sha256:<hex>` of `bytes`.
#[must_use]
pub fn digest_of(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let sum = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in sum.as_ref() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[derive(Clone, Debug)]
struct CacheEntry {
    url: String,
    etag: Option<String>,
    digest: String,
    graph: Arc<ServingGraph>,
    /// When the server last sent or confirmed this graph.
    checked: Instant,
}

/// A service's failing fetches.
#[derive(Clone, Debug)]
struct Failing {
    url: String,
    failures: u32,
    next: Instant,
}

/// An HTTPS client for serving graphs: per-service ETag cache and backoff,
/// fetches in flight bounded per namespace and in all, the others waiting
/// in line.
#[derive(Debug)]
pub struct GraphFetcher {
    tls: rustls::ClientConfig,
    options: FetchOptions,
    cache: Mutex<HashMap<String, CacheEntry>>,
    failing: Mutex<HashMap<String, Failing>>,
    /// When each service's last fetch ended, whatever it gave.
    ended: Mutex<HashMap<String, Instant>>,
    slots: Arc<SlotQueue>,
}

/// A place in line not asked about again for this long is given up (a
/// waiting service's reconcile asks again well within it).
pub const QUEUE_STALE: Duration = Duration::from_secs(120);

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

/// A TLS client configuration trusting the platform's roots plus
/// `extra_roots`, on the ring crypto provider, offering HTTP/2 and HTTP/1.1.
pub fn platform_tls(
    extra_roots: Vec<CertificateDer<'static>>,
) -> Result<rustls::ClientConfig, FetcherError> {
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
    Ok(tls)
}

impl GraphFetcher {
    /// A fetcher trusting the platform's roots plus `extra_roots`, on the
    /// ring crypto provider.
    pub fn new(
        options: FetchOptions,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> Result<Self, FetcherError> {
        let tls = platform_tls(extra_roots)?;
        let slots = SlotQueue::new(FetchLimits {
            per_namespace: options.per_namespace,
            total: options.in_flight,
            hold: options.deadline,
            stale: QUEUE_STALE,
        });
        Ok(Self {
            tls,
            options,
            cache: Mutex::new(HashMap::new()),
            failing: Mutex::new(HashMap::new()),
            ended: Mutex::new(HashMap::new()),
            slots,
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

    /// Send the cache key of each waiting service whose turn has come to
    /// `tx` (replacing the channel given before): a slot is held for it for
    /// one deadline.
    pub fn notify_turns(&self, tx: tokio::sync::mpsc::UnboundedSender<String>) {
        self.slots.notify_to(tx);
    }

    /// A slot for a fetch of the service `cache_key` of `namespace`: the
    /// one held for it, or a free one if no service of its namespace waits;
    /// otherwise its place in line ([`GraphError::Queued`]), kept while it
    /// asks again.
    pub fn slot(&self, cache_key: &str, namespace: &str) -> Result<Slot, GraphError> {
        self.slots.enter(cache_key, namespace)
    }

    /// Drop the cached graph, backoff and place in line of `cache_key`
    /// (the service was deleted).
    pub fn forget(&self, cache_key: &str) {
        self.slots.leave(cache_key);
        if let Ok(mut c) = self.cache.lock() {
            c.remove(cache_key);
        }
        if let Ok(mut f) = self.failing.lock() {
            f.remove(cache_key);
        }
        if let Ok(mut e) = self.ended.lock() {
            e.remove(cache_key);
        }
    }

    /// Time until `cache_key` may fetch `url` again, while its fetches of
    /// it fail (a new URL starts afresh).
    #[must_use]
    pub fn retry_in(&self, cache_key: &str, url: &str) -> Option<Duration> {
        let f = self.failing.lock().ok()?;
        let entry = f.get(cache_key).filter(|e| e.url == url)?;
        entry.next.checked_duration_since(Instant::now())
    }

    /// Time until a refresh of `cache_key` may fetch `url`: a
    /// [`FetchOptions::refresh_interval`] after its last fetch ended, and
    /// not before its backoff ends. A refresh asked for sooner waits for
    /// it, so asking again and again fetches no more often than that.
    #[must_use]
    pub fn refresh_in(&self, cache_key: &str, url: &str) -> Option<Duration> {
        let interval = self
            .ended
            .lock()
            .ok()
            .and_then(|e| e.get(cache_key).copied())
            .and_then(|at| {
                self.options
                    .refresh_interval
                    .checked_sub(at.elapsed())
                    .filter(|d| !d.is_zero())
            });
        match (interval, self.retry_in(cache_key, url)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The graph `cache_key` last fetched from `url`, if the server sent
    /// or confirmed it less than `max_age` ago and no fetch of it failed
    /// since: a reconcile in between reuses it instead of asking the
    /// server again. (A service whose fetch failed is retried after its
    /// backoff, and says it failed meanwhile.)
    #[must_use]
    pub fn fresh(&self, cache_key: &str, url: &str, max_age: Duration) -> Option<Fetched> {
        let failed = self
            .failing
            .lock()
            .ok()
            .is_some_and(|f| f.get(cache_key).is_some_and(|e| e.url == url));
        if failed {
            return None;
        }
        let c = self.cached(cache_key, url)?;
        (c.checked.elapsed() < max_age).then_some(Fetched {
            graph: c.graph,
            etag: c.etag,
            not_modified: true,
            digest: c.digest,
        })
    }

    /// Mark `cache_key`'s graph as confirmed by the server now.
    fn confirmed(&self, cache_key: &str) {
        if let Ok(mut c) = self.cache.lock()
            && let Some(e) = c.get_mut(cache_key)
        {
            e.checked = Instant::now();
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

    /// Whether `req`'s service must wait (its last fetch of the same URL
    /// failed and the backoff has not passed).
    fn backing_off(&self, req: &FetchRequest<'_>) -> Option<Duration> {
        let mut f = self.failing.lock().ok()?;
        let entry = f.get(req.cache_key)?;
        if entry.url != req.url {
            // A new URL starts afresh.
            f.remove(req.cache_key);
            return None;
        }
        entry.next.checked_duration_since(Instant::now())
    }

    fn record(&self, req: &FetchRequest<'_>, failed: bool) {
        let Ok(mut f) = self.failing.lock() else {
            return;
        };
        if !failed {
            f.remove(req.cache_key);
            return;
        }
        let entry = f
            .entry(req.cache_key.to_owned())
            .or_insert_with(|| Failing {
                url: req.url.to_owned(),
                failures: 0,
                next: Instant::now(),
            });
        entry.url = req.url.to_owned();
        entry.failures = entry.failures.saturating_add(1);
        let wait = self
            .options
            .backoff
            .saturating_mul(1u32 << entry.failures.saturating_sub(1).min(16))
            .min(self.options.max_backoff);
        entry.next = Instant::now() + wait;
    }

    /// Fetch and decode the graph `req` names, within one deadline: a
    /// service whose last fetch failed waits out its backoff
    /// ([`GraphError::BackingOff`]), then takes a slot or its place in line
    /// ([`GraphFetcher::slot`]).
    pub async fn fetch(&self, req: FetchRequest<'_>) -> Result<Fetched, GraphError> {
        check_url(req.url)?;
        if let Some(retry_in) = self.backing_off(&req) {
            return Err(GraphError::BackingOff { retry_in });
        }
        let slot = self.slot(req.cache_key, req.namespace)?;
        self.fetch_in(slot, req).await
    }

    /// Fetch and decode the graph `req` names in `slot` (given back when
    /// the fetch ends), within one deadline.
    pub async fn fetch_in(&self, slot: Slot, req: FetchRequest<'_>) -> Result<Fetched, GraphError> {
        let _slot = slot;
        let parsed = check_url(req.url)?;
        let cached = self.cached(req.cache_key, req.url);
        let deadline = self.options.deadline;
        let result = match tokio::time::timeout(
            deadline,
            self.attempt(&parsed, &req, cached.as_ref()),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(GraphError::Timeout {
                url: req.url.to_owned(),
                timeout_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            }),
        };
        if let Ok(mut e) = self.ended.lock() {
            e.insert(req.cache_key.to_owned(), Instant::now());
        }
        match result {
            Ok((fetched, entry)) => {
                if fetched.not_modified {
                    self.confirmed(req.cache_key);
                } else {
                    self.store(req.cache_key, entry);
                }
                self.record(&req, false);
                Ok(fetched)
            }
            Err(e) => {
                debug!(url = req.url, reason = e.reason().as_str(), error = %e, "graph fetch failed");
                self.record(&req, e.is_fetch_failure());
                Err(e)
            }
        }
    }

    async fn attempt(
        &self,
        parsed: &Url,
        req: &FetchRequest<'_>,
        cached: Option<&CacheEntry>,
    ) -> Result<(Fetched, Option<CacheEntry>), GraphError> {
        let url = req.url;
        let addrs = destination(parsed, req.internal_allowed).await?;
        let client = self.client(parsed, addrs)?;
        let mut get = client.get(parsed.clone()).header(
            ACCEPT,
            "application/x-protobuf, application/octet-stream;q=0.9",
        );
        if let Some(t) = req.token {
            get = get.header(AUTHORIZATION, t.header_value());
        }
        if let Some(etag) = cached.and_then(|c| c.etag.as_deref())
            && let Ok(v) = HeaderValue::from_str(etag)
        {
            get = get.header(IF_NONE_MATCH, v);
        }
        let resp = get
            .send()
            .await
            .map_err(|e| transport_error(url, &e, self.options.deadline))?;
        let status = resp.status();
        let http = |detail: &'static str| GraphError::HttpStatus {
            url: url.to_owned(),
            status: status.as_u16(),
            detail,
        };
        match status {
            StatusCode::NOT_MODIFIED => match cached.filter(|c| c.etag.is_some()) {
                Some(c) => Ok((
                    Fetched {
                        graph: c.graph.clone(),
                        etag: c.etag.clone(),
                        not_modified: true,
                        digest: c.digest.clone(),
                    },
                    None,
                )),
                None => Err(http(": Not Modified to a request without If-None-Match")),
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(http(
                ": the bearer token was refused (check spec.graph.bearerTokenSecretRef)",
            )),
            StatusCode::NOT_FOUND | StatusCode::GONE => Err(http(": no graph at this URL")),
            s if s.is_redirection() => Err(http(
                ": a redirect to another host, port or scheme is not followed",
            )),
            s if s.is_success() => {
                let etag = resp
                    .headers()
                    .get(ETAG)
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| v.len() <= 256)
                    .map(str::to_owned);
                let body = self.read_capped(url, resp).await?;
                let digest = digest_of(&body);
                let graph = Arc::new(decode(&body).map_err(|e| match e {
                    GraphError::Undecodable { message } => GraphError::Undecodable {
                        message: format!("{url}: {message}"),
                    },
                    other => other,
                })?);
                let entry = Some(CacheEntry {
                    url: url.to_owned(),
                    etag: etag.clone(),
                    digest: digest.clone(),
                    graph: graph.clone(),
                    checked: Instant::now(),
                });
                Ok((
                    Fetched {
                        graph,
                        etag,
                        not_modified: false,
                        digest,
                    },
                    entry,
                ))
            }
            _ => Err(http("")),
        }
    }

    /// A client for one fetch: it connects only to `addrs` (checked), sends
    /// no `Referer`, uses no proxy, and follows redirects only to the same
    /// https host and port.
    fn client(&self, url: &Url, addrs: Vec<SocketAddr>) -> Result<reqwest::Client, GraphError> {
        let (host, port) = host_and_port(url);
        let origin = (host.to_owned(), port);
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            let next = attempt.url();
            let same = next.scheme() == "https"
                && next.host_str() == Some(origin.0.as_str())
                && next.port_or_known_default() == Some(origin.1);
            if !same {
                attempt.stop()
            } else if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else {
                attempt.follow()
            }
        });
        reqwest::Client::builder()
            .tls_backend_preconfigured(self.tls.clone())
            .https_only(true)
            .no_proxy()
            .referer(false)
            .redirect(redirects)
            .dns_resolver(Arc::new(Checked {
                host: host.to_owned(),
                addrs,
            }))
            .pool_max_idle_per_host(0)
            .connect_timeout(self.options.deadline)
            .timeout(self.options.deadline)
            .user_agent(concat!("infergate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| GraphError::Connect {
                url: url.to_string(),
                message: format!("cannot build the HTTP client: {e}"),
            })
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
            .map_err(|e| transport_error(url, &e, self.options.deadline))?
        {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Redirects followed within the same host.
const MAX_REDIRECTS: usize = 5;

/// `url` is https, has a host, no credentials and no fragment.
pub fn check_url(url: &str) -> Result<Url, GraphError> {
    parse_graph_url(url).map_err(|message| GraphError::InvalidUrl {
        url: url.to_owned(),
        message,
    })
}

fn transport_error(url: &str, e: &reqwest::Error, deadline: Duration) -> GraphError {
    if e.is_timeout() {
        return GraphError::Timeout {
            url: url.to_owned(),
            timeout_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
        };
    }
    if let Some(tls) = tls_cause(e) {
        return GraphError::Tls {
            url: url.to_owned(),
            message: tls.to_string(),
        };
    }
    GraphError::Connect {
        url: url.to_owned(),
        message: error_chain(e),
    }
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

    use super::*;

    #[test]
    fn only_https_urls_without_credentials() {
        assert!(check_url("https://graphs.example.com/v1/g").is_ok());
        for (url, why) in [
            ("http://graphs.example.com/g", "https"),
            ("graphs.example.com/g", "relative URL"),
            ("https://user:pw@graphs.example.com/g", "credentials"),
            ("https://graphs.example.com/g#x", "fragment"),
        ] {
            let e = check_url(url).unwrap_err();
            assert_eq!(e.reason(), "DestinationNotAllowed");
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
