//! Servers and clients on 127.0.0.1: free ports, rcgen certificates, a TLS
//! acceptor and client, HTTP/1.1 over TLS, plain-HTTP probes, an HTTPS
//! server on a thread of its own, and the HTTPS serving-graph server (bearer
//! check, ETag, failure modes).

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use infergate::api::v1beta1::{
    AcceleratorSpec, AcceleratorType, GraphSpec, InferenceService, ParallelismSpec, SecretKeyRef,
};

use infergate::graph::fetch::{FetchOptions, GraphFetcher};
use infergate::webhook::tls::certs::{self, PemPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_util::sync::CancellationToken;

use super::crds::llama_service;

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

// ------------------------------------------------------------ certificates

/// How long test certificates are valid.
const VALIDITY: Duration = Duration::from_secs(3600);

/// A fresh CA named `ca_name` and a serving certificate it signed for
/// `localhost` and 127.0.0.1.
pub fn pki(ca_name: &str) -> (PemPair, PemPair) {
    let ca = certs::generate_ca(ca_name, VALIDITY).expect("test CA");
    let leaf = serving_pair(&ca);
    (ca, leaf)
}

/// A new serving certificate from `ca` for `localhost` and 127.0.0.1.
pub fn serving_pair(ca: &PemPair) -> PemPair {
    certs::issue_serving(
        ca,
        &["localhost".to_owned()],
        &[IpAddr::V4(Ipv4Addr::LOCALHOST)],
        VALIDITY,
    )
    .expect("test serving certificate")
}

/// Write `pair` as `tls.key` and `tls.crt` in `dir`: key first, certificate
/// second (a file watcher only swaps a pair that parses).
pub fn write_pair(dir: &Path, pair: &PemPair) {
    std::fs::write(dir.join("tls.key"), &pair.key).expect("writing tls.key");
    std::fs::write(dir.join("tls.crt"), &pair.cert).expect("writing tls.crt");
}

// --------------------------------------------------------------------- TLS

/// Make ring the process's rustls provider, as `main` does (once per process).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A TLS acceptor for a test HTTPS server on 127.0.0.1: a fresh CA (returned as
/// PEM, for clients to trust) and a serving certificate for `localhost` and
/// 127.0.0.1, ALPN h2 and http/1.1, ring as the provider.
pub fn loopback_tls_acceptor(ca_name: &str) -> (String, tokio_rustls::TlsAcceptor) {
    let (ca, leaf) = pki(ca_name);
    let chain = CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("certificate chain");
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).expect("private key");
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (ca.cert, tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A client configuration trusting `cas`, offering `alpn`, TLS 1.2 only or
/// 1.3 and 1.2, ring as the provider.
pub fn client_config(
    cas: &[&PemPair],
    alpn: &[&[u8]],
    tls12_only: bool,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots
            .add(CertificateDer::from_pem_slice(ca.cert.as_bytes()).expect("CA PEM"))
            .expect("CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(cfg)
}

/// The sending half of an HTTP/1.1 connection.
pub type Conn = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Any error of a client call.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Open an HTTP/1.1 keep-alive connection over TLS (server name 127.0.0.1,
/// TCP_NODELAY); returns the sender and the served leaf certificate (DER).
pub async fn connect(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
) -> Result<(Conn, Vec<u8>), BoxError> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("127.0.0.1")?, tcp)
        .await?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(conn);
    Ok((sender, leaf))
}

/// POST `body` as JSON to `path`; the status and the whole answer.
pub async fn send(
    conn: &mut Conn,
    path: &str,
    body: &[u8],
) -> Result<(StatusCode, Vec<u8>), BoxError> {
    send_with_headers(conn, path, body)
        .await
        .map(|(status, _, bytes)| (status, bytes))
}

/// POST `body` as JSON to `path`; the status, the headers and the whole answer.
pub async fn send_with_headers(
    conn: &mut Conn,
    path: &str,
    body: &[u8],
) -> Result<(StatusCode, hyper::HeaderMap, Vec<u8>), BoxError> {
    conn.ready().await?;
    let req = Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body)))?;
    let resp = conn.send_request(req).await?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok((status, headers, bytes.to_vec()))
}

/// A plain-HTTP GET on 127.0.0.1 (the probe port); the status code and body.
pub async fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Serve HTTPS (h2 and HTTP/1.1 through `acceptor`) on the non-blocking
/// `listener` from a thread `name` with a runtime of its own (it outlives the
/// runtime of any one test or bench) until `stop` is cancelled, each request
/// answered by `handle`, each connection with TCP_NODELAY. Returns the
/// thread's id (its CPU time is in `/proc/self/task/ID/stat`).
pub fn serve_https<H, F, B>(
    name: &str,
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    stop: CancellationToken,
    handle: H,
) -> i32
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() });
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("HTTPS server runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let tcp = tokio::select! {
                        () = stop.cancelled() => return,
                        accepted = listener.accept() => match accepted {
                            Ok((tcp, _)) => tcp,
                            Err(_) => continue,
                        },
                    };
                    let _ = tcp.set_nodelay(true);
                    let (acceptor, handle) = (acceptor.clone(), handle.clone());
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper::service::service_fn(move |req| {
                            let answer = handle(req);
                            async move { Ok::<_, Infallible>(answer.await) }
                        });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            });
        })
        .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
    tid_rx.recv().expect("the HTTPS server thread's id")
}

// ------------------------------------------------------------ graph server

/// The bearer token the graph server accepts.
pub const GRAPH_TOKEN: &str = "tok-3f9a1c77e2";

/// What the graph server serves, and what it counted.
pub struct GraphState {
    /// The graph at `/graph` and its ETag.
    body: Mutex<(Vec<u8>, String)>,
    /// Every request.
    pub requests: AtomicUsize,
    /// `/graph` answered in full.
    pub full: AtomicUsize,
    /// `/graph` answered 304 Not Modified.
    pub not_modified: AtomicUsize,
    /// How many more `/flaky` requests fail with 503.
    pub flaky_failures: AtomicUsize,
    /// Requests over HTTP/2.
    pub h2: AtomicUsize,
    /// Requests that carried a `Referer`.
    pub referer: AtomicUsize,
    /// Requests for `/graph` through the name `localhost` (not 127.0.0.1).
    pub via_localhost: AtomicUsize,
}

/// An HTTPS serving-graph server on 127.0.0.1, on its own thread and runtime
/// (it outlives the runtime of any one test); stops when dropped.
///
/// Paths: `/graph` (bearer check, ETag), `/flaky` (503 while
/// `flaky_failures` lasts), `/slow` (5 s), `/large` (2 MiB),
/// `/large-chunked` (4 MiB without Content-Length), `/garbage` (not a
/// graph), `/redirect-http` (a redirect to plain HTTP, before the bearer
/// check), `/redirect-same` (to `/graph` on the same host and port),
/// `/redirect-other` (to `/graph` through the name `localhost`: another
/// host); anything else is 404.
pub struct GraphServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its CA (DER), for clients to trust.
    pub ca: CertificateDer<'static>,
    /// Its CA (PEM).
    pub ca_pem: String,
    /// What it serves and counted.
    pub state: Arc<GraphState>,
    stop: CancellationToken,
}

impl GraphServer {
    /// Start the server with an empty graph.
    pub fn start() -> Self {
        let (ca_pem, acceptor) = loopback_tls_acceptor("graph-test-ca");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(GraphState {
            body: Mutex::new((Vec::new(), String::new())),
            requests: AtomicUsize::new(0),
            full: AtomicUsize::new(0),
            not_modified: AtomicUsize::new(0),
            flaky_failures: AtomicUsize::new(0),
            h2: AtomicUsize::new(0),
            referer: AtomicUsize::new(0),
            via_localhost: AtomicUsize::new(0),
        });
        let stop = CancellationToken::new();
        let st = Arc::clone(&state);
        serve_https(
            "graph-server",
            listener,
            acceptor,
            stop.clone(),
            move |req| {
                let st = Arc::clone(&st);
                async move { handle(&st, addr, req).await }
            },
        );
        GraphServer {
            addr,
            ca: CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA DER"),
            ca_pem,
            state,
            stop,
        }
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    /// The service `name` with `backend: RayService` whose graph is this
    /// server's `/graph`, read with the token in Secret `graph-token`, key `token`.
    pub fn service(&self, name: &str) -> InferenceService {
        let graph = GraphSpec {
            url: self.url("/graph"),
            bearer_token_secret_ref: Some(SecretKeyRef {
                name: "graph-token".into(),
                key: "token".into(),
            }),
        };
        let mut svc = llama_service(name, "registry.example.com/ray-vllm:2.40", Some(graph));
        // 8 GPUs per worker: the generator of graph/rag.pb asks 8.
        svc.spec.accelerator = Some(AcceleratorSpec {
            r#type: Some(AcceleratorType::Nvidia),
            class: None,
        });
        svc.spec.parallelism = Some(ParallelismSpec {
            tensor: Some(8),
            pipeline: Some(1),
        });
        svc
    }

    /// A graph fetcher trusting this server's CA, with deadlines, backoffs
    /// and the interval between a service's refreshes short enough for tests.
    pub fn fetcher(&self) -> Arc<GraphFetcher> {
        self.fetcher_with(FetchOptions {
            deadline: Duration::from_secs(3),
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(1),
            refresh_interval: Duration::from_millis(500),
            ..FetchOptions::default()
        })
    }

    /// A graph fetcher trusting this server's CA, with `options`.
    pub fn fetcher_with(&self, options: FetchOptions) -> Arc<GraphFetcher> {
        Arc::new(GraphFetcher::new(options, vec![self.ca.clone()]).expect("graph fetcher"))
    }

    /// Serve `bytes` at `/graph` with ETag `etag`.
    pub fn set_graph(&self, bytes: Vec<u8>, etag: &str) {
        *self.state.body.lock().expect("lock") = (bytes, etag.to_owned());
    }
}

impl Drop for GraphServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r
}

async fn handle(state: &GraphState, addr: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    state.requests.fetch_add(1, Ordering::SeqCst);
    if req.version() == hyper::Version::HTTP_2 {
        state.h2.fetch_add(1, Ordering::SeqCst);
    }
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == format!("Bearer {GRAPH_TOKEN}").as_bytes());
    let path = req.uri().path().to_owned();
    if req.headers().contains_key(hyper::header::REFERER) {
        state.referer.fetch_add(1, Ordering::SeqCst);
    }
    let host = req
        .uri()
        .host()
        .map(str::to_owned)
        .or_else(|| {
            req.headers()
                .get(hyper::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    if host.starts_with("localhost") {
        state.via_localhost.fetch_add(1, Ordering::SeqCst);
    }
    let redirect = |to: String| {
        let mut r = full(StatusCode::FOUND, "");
        r.headers_mut()
            .insert(hyper::header::LOCATION, to.parse().expect("location"));
        r
    };
    if path == "/redirect-same" {
        return redirect("/graph".to_owned());
    }
    if path == "/redirect-other" {
        return redirect(format!("https://localhost:{}/graph", addr.port()));
    }
    if path == "/redirect-http" {
        let mut r = full(StatusCode::FOUND, "");
        r.headers_mut().insert(
            hyper::header::LOCATION,
            format!("http://{addr}/graph").parse().expect("location"),
        );
        return r;
    }
    if !authorized {
        return full(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    match path.as_str() {
        "/graph" => {
            let (body, etag) = state.body.lock().expect("lock").clone();
            let inm = req
                .headers()
                .get(hyper::header::IF_NONE_MATCH)
                .and_then(|v| v.to_str().ok());
            let mut r = if inm == Some(etag.as_str()) {
                state.not_modified.fetch_add(1, Ordering::SeqCst);
                full(StatusCode::NOT_MODIFIED, "")
            } else {
                state.full.fetch_add(1, Ordering::SeqCst);
                full(StatusCode::OK, body)
            };
            r.headers_mut()
                .insert(hyper::header::ETAG, etag.parse().expect("etag"));
            r
        }
        "/flaky" => {
            if state
                .flaky_failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return full(StatusCode::SERVICE_UNAVAILABLE, "try later");
            }
            full(StatusCode::OK, state.body.lock().expect("lock").0.clone())
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            full(StatusCode::OK, state.body.lock().expect("lock").0.clone())
        }
        "/large" => full(StatusCode::OK, vec![0u8; 2 * 1024 * 1024]),
        "/large-chunked" => {
            // No Content-Length: the cap must hold while streaming.
            let chunks = (0..64)
                .map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![0x0a; 64 * 1024]))));
            let mut r = Response::new(BodyExt::boxed(StreamBody::new(futures::stream::iter(
                chunks,
            ))));
            *r.status_mut() = StatusCode::OK;
            r
        }
        "/garbage" => full(StatusCode::OK, &b"\x0a\xff\xff\xff\xff\xff"[..]),
        _ => full(StatusCode::NOT_FOUND, "no such graph"),
    }
}
