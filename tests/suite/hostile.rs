//! Hostile input over real TLS against the `infergate` binary: oversized,
//! slow, idle and malformed traffic, many connections at a low open-files
//! limit, many large bodies at once, deep and wide JSON, huge strings.
//! Each test starts its own `infergate serve` (policies from a file, no
//! cluster) and checks that it stays up, answers with the right status,
//! and stays within its memory limit (read from `/proc`).

use crate::reviews;
use crate::support;

use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{
    binary, client_config, connect, free_port, http_get, install_crypto_provider, pki,
    readyz_within, send, send_with_headers, write_pair,
};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use infergate::webhook::tls::certs::PemPair;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;
/// The memory limit the server is told it has (as `deploy/` gives it).
const MEMORY_LIMIT: u64 = 256 * MIB;
/// How long a silent connection may live: the first-request timeout (10 s)
/// plus slack for a loaded machine.
const CUT_WITHIN: Duration = Duration::from_secs(14);

/// Held by the tests that load the CPU or time answers, so no two of them
/// run at once (the idle ones run beside them).
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One `infergate serve` process.
struct Server {
    child: Child,
    port: u16,
    probe: u16,
    ca: PemPair,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Start `infergate serve` with `open_files` as its hard and soft
    /// `RLIMIT_NOFILE` (none: inherited), and wait until it is ready.
    fn start(open_files: Option<u64>) -> Server {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let (ca, leaf) = pki("hostile-ca");
        write_pair(dir.path(), &leaf);
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: platform}\nspec: {defaults: {engine: {image: registry.example.com/vllm:0.9}}}\n",
        )
        .unwrap();
        let (port, probe) = (free_port().unwrap(), free_port().unwrap());
        let mut cmd = match open_files {
            Some(n) => {
                let mut c = std::process::Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(binary());
                c
            }
            None => std::process::Command::new(binary()),
        };
        let serve = support::serve_command_line(port, probe, dir.path(), &policy);
        cmd.args(serve)
            .arg("--memory-limit")
            .arg(MEMORY_LIMIT.to_string())
            .args(["--drain-period", "0s"])
            .env("RUST_LOG", "info");
        let log = dir.path().join("serve.log");
        let child = support::spawn_logged(cmd, &log).unwrap();
        let server = Server {
            child,
            port,
            probe,
            ca,
            log,
            _dir: dir,
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        let ready = rt.block_on(readyz_within(probe, Duration::from_secs(10)));
        assert!(ready, "not ready: {}", server.log());
        server
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A field of `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`).
    fn memory(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("{field} not in /proc status"));
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap();
        kib * 1024
    }

    /// The server is still running and answers its probes within 1 s.
    async fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "the server exited: {}",
            self.log()
        );
        for path in ["/healthz", "/readyz"] {
            let started = Instant::now();
            let answer =
                tokio::time::timeout(Duration::from_secs(1), http_get(self.probe, path)).await;
            assert!(
                matches!(answer, Ok(Ok((200, _)))),
                "{path} did not answer 200 within 1 s ({:?}): {answer:?}",
                started.elapsed()
            );
        }
    }

    fn assert_within_memory_limit(&self) {
        let peak = self.memory("VmHWM");
        assert!(
            peak < MEMORY_LIMIT,
            "peak RSS {} MiB is over the {} MiB limit",
            peak / MIB,
            MEMORY_LIMIT / MIB
        );
    }

    /// A TLS stream to the webhook port with `alpn`.
    async fn tls(&self, alpn: &[u8]) -> tokio_rustls::client::TlsStream<TcpStream> {
        tls_to(self.port, &self.ca, alpn).await
    }

    async fn http1(&self) -> support::Conn {
        connect(
            ([127, 0, 0, 1], self.port).into(),
            client_config(&[&self.ca], &[b"http/1.1"], false),
        )
        .await
        .unwrap()
        .0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read what the server sends until it closes the connection (or `within`
/// passes: `None`); the bytes read.
async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok()?;
    Some(out)
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An AdmissionReview of an InferenceService carrying an annotation of
/// `pad` bytes.
fn padded_admission(pad: usize) -> Vec<u8> {
    let mut object = reviews::service_object(0, false);
    object["metadata"]["annotations"]["example.com/pad"] = json!("p".repeat(pad));
    reviews::admission_review(object)
}

/// The server's bounds on reading a refused body away: 64 MiB, 5 s
/// (`limits::DISCARD_LIMIT`, `limits::DISCARD_TIMEOUT`).
const DISCARD_LIMIT: u64 = 64 * MIB;
const DISCARD_TIMEOUT: Duration = Duration::from_secs(5);

/// Read everything the server sends until it closes the connection cleanly
/// (within `within`); a reset, or no close in time, is an error.
async fn read_to_close<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return Err(format!("{e} ({:?})", e.kind())),
            }
        }
    };
    match tokio::time::timeout(within, read).await {
        Ok(Ok(())) => Ok(out),
        Ok(Err(e)) => Err(format!(
            "{e} after {} bytes: {}",
            out.len(),
            String::from_utf8_lossy(&out)
        )),
        Err(_) => Err(format!(
            "still open after {within:?}: {}",
            String::from_utf8_lossy(&out)
        )),
    }
}

/// An HTTP/1.1 answer read off the wire: its status, whether it closes the
/// connection, and its body as JSON.
fn parse_answer(answer: &[u8]) -> (u16, bool, Value) {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let closes = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("connection: close"));
    let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status_of(answer), closes, json)
}

/// The 413's JSON: an error naming the limit.
fn assert_too_large(what: &str, json: &Value) {
    let error = json["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("larger than") && error.contains("bytes this endpoint accepts"),
        "{what}: {json}"
    );
}

/// A request head for `path`: `Content-Length` when `length` is given,
/// else chunked; `extra` header lines after it.
fn head(path: &str, length: Option<u64>, extra: &str) -> String {
    let framing = match length {
        Some(n) => format!("Content-Length: {n}"),
        None => "Transfer-Encoding: chunked".to_owned(),
    };
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{framing}\r\n{extra}\r\n"
    )
}

/// Write `total` bytes of body to `stream` (chunked in 1 MiB chunks ending
/// with the last chunk when `chunked`).
async fn write_body<S: tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    total: u64,
    chunked: bool,
) -> std::io::Result<()> {
    let chunk = vec![b' '; MIB as usize];
    let mut left = total;
    while left > 0 {
        let n = left.min(MIB) as usize;
        if chunked {
            stream.write_all(format!("{n:x}\r\n").as_bytes()).await?;
        }
        stream.write_all(&chunk[..n]).await?;
        if chunked {
            stream.write_all(b"\r\n").await?;
        }
        left -= n as u64;
    }
    if chunked {
        stream.write_all(b"0\r\n\r\n").await?;
    }
    stream.flush().await
}

#[test]
fn a_body_announced_over_the_limit_is_refused_before_it_is_read() {
    let _heavy = heavy();
    let mut server = Server::start(None);
    runtime().block_on(async {
        for (path, length) in [
            ("/validate", 9 * MIB),
            ("/mutate", 9 * MIB),
            ("/convert", 33 * MIB),
            ("/validate", 100 * MIB),
        ] {
            let mut tls = server.tls(b"http/1.1").await;
            tls.write_all(head(path, Some(length), "").as_bytes())
                .await
                .unwrap();
            let started = Instant::now();
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(2), tls.read(&mut buf))
                .await
                .expect("answered before any body byte was sent")
                .unwrap();
            let (status, closes, json) = parse_answer(&buf[..n]);
            assert_eq!(status, 413, "{path}: {json}");
            assert!(closes, "{path}: the refusal closes the connection");
            assert_too_large(path, &json);
            assert!(started.elapsed() < Duration::from_secs(2));
            // Announced longer than the server reads away: closed at once.
            // Otherwise the server waits for the body (to read it away)
            // until its deadline.
            let closed = read_to_close(&mut tls, DISCARD_TIMEOUT + Duration::from_secs(3)).await;
            let after = started.elapsed();
            if length > DISCARD_LIMIT {
                assert!(
                    closed.is_ok() && after < Duration::from_secs(2),
                    "{path}: {closed:?} after {after:?}"
                );
            } else {
                assert!(closed.is_ok(), "{path}: {closed:?}");
                assert!(
                    after >= DISCARD_TIMEOUT - Duration::from_millis(500),
                    "{path}: closed after {after:?}"
                );
            }
        }
        // A client waiting for `100 Continue`: refused without it, closed at once.
        let mut tls = server.tls(b"http/1.1").await;
        tls.write_all(head("/validate", Some(9 * MIB), "Expect: 100-continue\r\n").as_bytes())
            .await
            .unwrap();
        let answer = read_to_close(&mut tls, Duration::from_secs(2))
            .await
            .unwrap();
        let (status, closes, json) = parse_answer(&answer);
        assert_eq!((status, closes), (413, true), "{json}");
        assert!(!String::from_utf8_lossy(&answer).contains("100 Continue"));
        server.assert_alive().await;
    });
}

#[test]
fn a_client_that_writes_its_whole_body_before_reading_gets_the_413() {
    let _heavy = heavy();
    let mut server = Server::start(None);
    runtime().block_on(async {
        for (path, length, chunked) in [
            ("/validate", 9 * MIB, false),
            ("/convert", 33 * MIB, false),
            ("/convert", DISCARD_LIMIT, false),
            ("/mutate", 9 * MIB, true),
            ("/convert", 40 * MIB, true),
        ] {
            let what = format!(
                "{path} {} MiB {}",
                length / MIB,
                if chunked { "chunked" } else { "announced" }
            );
            let mut tls = server.tls(b"http/1.1").await;
            let started = Instant::now();
            tls.write_all(head(path, (!chunked).then_some(length), "").as_bytes())
                .await
                .unwrap();
            write_body(&mut tls, length, chunked)
                .await
                .unwrap_or_else(|e| panic!("{what}: writing the body failed: {e}"));
            let answer = read_to_close(&mut tls, Duration::from_secs(10))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let (status, closes, json) = parse_answer(&answer);
            assert_eq!((status, closes), (413, true), "{what}: {json}");
            assert_too_large(&what, &json);
            eprintln!(
                "{what}: written and answered 413 in {:?}",
                started.elapsed()
            );
        }
        server.assert_alive().await;
    });
}

#[test]
fn a_refused_body_is_read_away_only_within_its_bounds() {
    let _heavy = heavy();
    let mut server = Server::start(None);
    runtime().block_on(async {
        // Time: part of the body, then nothing. The 413 comes at once, the
        // close at the deadline.
        let mut tls = server.tls(b"http/1.1").await;
        tls.write_all(head("/validate", Some(9 * MIB), "").as_bytes())
            .await
            .unwrap();
        let started = Instant::now();
        write_body(&mut tls, MIB, false).await.unwrap();
        let answer = read_to_close(&mut tls, DISCARD_TIMEOUT + Duration::from_secs(3))
            .await
            .unwrap();
        let closed = started.elapsed();
        let (status, _, json) = parse_answer(&answer);
        assert_eq!(status, 413, "{json}");
        assert!(
            closed >= DISCARD_TIMEOUT - Duration::from_millis(500),
            "closed after {closed:?}, before the deadline"
        );
        // Bytes: a chunked body that never ends. The 413 comes once the
        // limit is passed; past the limit and the bound, the server stops
        // reading and closes, and the writes fail.
        let tls = server.tls(b"http/1.1").await;
        let (mut reader, mut writer) = tokio::io::split(tls);
        writer
            .write_all(head("/validate", None, "").as_bytes())
            .await
            .unwrap();
        let writing = tokio::spawn(async move {
            let chunk = vec![b' '; MIB as usize];
            let mut written = 0u64;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                let wrote = async {
                    writer
                        .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                        .await?;
                    writer.write_all(&chunk).await?;
                    writer.write_all(b"\r\n").await
                };
                if wrote.await.is_err() {
                    return Some(written);
                }
                written += MIB;
            }
            None
        });
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") || !answer.ends_with(b"}") {
            let n = tokio::time::timeout(Duration::from_secs(10), reader.read(&mut buf))
                .await
                .expect("the 413 within 10 s")
                .expect("the 413 before any reset");
            assert!(n > 0, "closed before the answer");
            answer.extend_from_slice(&buf[..n]);
        }
        let (status, _, json) = parse_answer(&answer);
        assert_eq!(status, 413, "{json}");
        let written = writing
            .await
            .unwrap()
            .expect("the server stopped reading an endless body");
        // What the server read, plus what the sockets buffer on the way.
        let bound = 8 * MIB + DISCARD_LIMIT + 16 * MIB;
        eprintln!("an endless body: writes failed after {} MiB", written / MIB);
        assert!(written <= bound, "{written} bytes written before the close");
        server.assert_alive().await;
    });
}

/// A TLS stream to `port` trusting `ca`, offering `alpn`.
async fn tls_to(
    port: u16,
    ca: &PemPair,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio_rustls::TlsConnector::from(client_config(&[ca], &[alpn], false))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}

/// A request body of `len` bytes, announced (`Content-Length`) or streamed
/// in 64 KiB pieces without a length (chunked on HTTP/1.1).
fn client_body(len: usize, announced: bool) -> BoxBody<Bytes, std::convert::Infallible> {
    let bytes = Bytes::from(vec![b' '; len]);
    if announced {
        return Full::new(bytes).boxed();
    }
    let pieces: Vec<_> = (0..len)
        .step_by(64 * 1024)
        .map(|at| Ok(Frame::data(bytes.slice(at..(at + 64 * 1024).min(len)))))
        .collect();
    StreamBody::new(futures::stream::iter(pieces)).boxed()
}

/// POST `body` to `path` with hyper's client over TLS, HTTP/1.1 or HTTP/2:
/// the status and the answer as JSON.
async fn hyper_post(
    port: u16,
    ca: &PemPair,
    h2: bool,
    path: &str,
    body: BoxBody<Bytes, std::convert::Infallible>,
) -> Result<(u16, Value), String> {
    // HTTP/2 takes the authority from the URI, HTTP/1.1 from `Host`.
    let uri = if h2 {
        format!("https://127.0.0.1:{port}{path}")
    } else {
        path.to_owned()
    };
    let request = hyper::Request::post(uri)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let response = if h2 {
        let io = TokioIo::new(tls_to(port, ca, b"h2").await);
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(request).await
    } else {
        let io = TokioIo::new(tls_to(port, ca, b"http/1.1").await);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        sender.send_request(request).await
    }
    .map_err(|e| format!("{e} ({e:?})"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e} ({e:?})"))?
        .to_bytes();
    let json = serde_json::from_slice(&bytes)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))?;
    Ok((status, json))
}

/// POST `len` bytes to `path` with reqwest over TLS, HTTP/1.1 or HTTP/2:
/// the status and the answer as JSON.
async fn reqwest_post(
    port: u16,
    ca: &PemPair,
    h2: bool,
    path: &str,
    len: usize,
) -> Result<(u16, Value), String> {
    let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
    let tls = Arc::unwrap_or_clone(client_config(&[ca], &[alpn], false));
    let builder = reqwest::Client::builder().tls_backend_preconfigured(tls);
    let client = if h2 {
        builder.http2_prior_knowledge()
    } else {
        builder.http1_only()
    }
    .build()
    .map_err(|e| e.to_string())?;
    let response = client
        .post(format!("https://127.0.0.1:{port}{path}"))
        .header("content-type", "application/json")
        .body(vec![b' '; len])
        .send()
        .await
        .map_err(|e| format!("{e} ({e:?})"))?;
    let status = response.status().as_u16();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| format!("reading the answer: {e} ({e:?})"))?;
    let json = serde_json::from_slice(&bytes)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))?;
    Ok((status, json))
}

#[test]
fn http_clients_posting_bodies_over_the_limit_read_the_413() {
    let _heavy = heavy();
    let mut server = Server::start(None);
    runtime().block_on(async {
        let (port, ca) = (server.port, server.ca.clone());
        for h2 in [false, true] {
            let protocol = if h2 { "HTTP/2" } else { "HTTP/1.1" };
            for (path, len, announced) in [
                ("/validate", 9 * MIB, true),
                ("/validate", 9 * MIB, false),
                ("/convert", 33 * MIB, true),
                ("/convert", 40 * MIB, false),
            ] {
                let what = format!(
                    "hyper {protocol} {path} {} MiB {}",
                    len / MIB,
                    if announced { "announced" } else { "streamed" }
                );
                let answer =
                    hyper_post(port, &ca, h2, path, client_body(len as usize, announced)).await;
                let (status, json) = answer.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(status, 413, "{what}: {json}");
                assert_too_large(&what, &json);
            }
            for (path, len) in [("/mutate", 9 * MIB), ("/convert", 40 * MIB)] {
                let what = format!("reqwest {protocol} {path} {} MiB", len / MIB);
                let answer = reqwest_post(port, &ca, h2, path, len as usize).await;
                let (status, json) = answer.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(status, 413, "{what}: {json}");
                assert_too_large(&what, &json);
            }
        }
        // On HTTP/2 only the refused stream ends: the connection serves on.
        let io = TokioIo::new(tls_to(port, &ca, b"h2").await);
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        for (body, want) in [
            (client_body(40 * MIB as usize, false), 413),
            (Full::new(Bytes::from(padded_admission(0))).boxed(), 200),
        ] {
            let request = hyper::Request::post(format!("https://127.0.0.1:{port}/validate"))
                .header("content-type", "application/json")
                .body(body)
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.status().as_u16(), want);
            response.into_body().collect().await.unwrap();
        }
        server.assert_alive().await;
    });
}

#[test]
fn silent_slow_and_half_open_connections_are_cut() {
    let mut server = Server::start(None);
    runtime().block_on(async {
        let port = server.port;
        let started = Instant::now();
        // TCP only, never a TLS handshake.
        let tcp = async {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            read_until_closed(&mut s, CUT_WITHIN)
                .await
                .map(|_| started.elapsed())
        };
        // A TLS handshake, then silence.
        let tls_idle = async {
            let mut s = server.tls(b"http/1.1").await;
            read_until_closed(&mut s, CUT_WITHIN)
                .await
                .map(|_| started.elapsed())
        };
        // HTTP/2 by ALPN, and half of its preface.
        let h2_preface = async {
            let mut s = server.tls(b"h2").await;
            s.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
            read_until_closed(&mut s, CUT_WITHIN)
                .await
                .map(|_| started.elapsed())
        };
        // Request headers that never end.
        let headers = async {
            let mut s = server.tls(b"http/1.1").await;
            s.write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                .await
                .unwrap();
            read_until_closed(&mut s, CUT_WITHIN)
                .await
                .map(|_| started.elapsed())
        };
        // A served request, then the next one's headers, unfinished.
        let later_headers = async {
            let mut s = server.tls(b"http/1.1").await;
            let body = padded_admission(0);
            let head = format!(
                "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(&body).await.unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert_eq!(status_of(&buf[..n]), 200);
            // Idle a while (kept alive), then start a request and stall.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let stalled = Instant::now();
            s.write_all(b"POST /validate HTTP/1.1\r\nHost:").await.unwrap();
            read_until_closed(&mut s, CUT_WITHIN).await.map(|_| stalled.elapsed())
        };
        // A body dripping one byte a second.
        let drip = async {
            let mut s = server.tls(b"http/1.1").await;
            s.write_all(
                b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n",
            )
            .await
            .unwrap();
            let mut answer = Vec::new();
            let deadline = Instant::now() + CUT_WITHIN;
            while Instant::now() < deadline {
                if s.write_all(b" ").await.is_err() {
                    break;
                }
                let mut buf = [0u8; 1024];
                match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => break,
                    Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
                    Err(_) => {}
                }
                if !answer.is_empty() {
                    break;
                }
            }
            (started.elapsed(), answer)
        };
        let (tcp, tls_idle, h2_preface, headers, later_headers, (dripped, answer)) =
            tokio::join!(tcp, tls_idle, h2_preface, headers, later_headers, drip);
        for (what, cut) in [
            ("idle TCP", tcp),
            ("idle TLS", tls_idle),
            ("half an HTTP/2 preface", h2_preface),
            ("unfinished headers", headers),
            ("unfinished headers of a later request", later_headers),
        ] {
            let cut = cut.unwrap_or_else(|| panic!("{what}: still open after {CUT_WITHIN:?}"));
            assert!(
                cut >= Duration::from_secs(4),
                "{what}: cut after {cut:?}, too early"
            );
        }
        assert!(
            dripped < CUT_WITHIN,
            "dripping body still open after {dripped:?}"
        );
        assert_eq!(
            status_of(&answer),
            408,
            "{}",
            String::from_utf8_lossy(&answer)
        );
        server.assert_alive().await;
    });
}

#[test]
fn idle_keep_alive_connections_outlive_the_api_servers_idle_timeout() {
    let mut server = Server::start(None);
    let body = padded_admission(0);
    runtime().block_on(async {
        let mut conn = server.http1().await;
        let (status, _) = send(&mut conn, "/validate", &body).await.unwrap();
        assert_eq!(status, 200);
        // Go clients (the API server) drop idle connections after 90 s;
        // the server must not close one first.
        tokio::time::sleep(Duration::from_secs(95)).await;
        let (status, _) = send(&mut conn, "/validate", &body)
            .await
            .expect("the kept-alive connection is still open after 95 s idle");
        assert_eq!(status, 200);
        server.assert_alive().await;
    });
}

#[test]
fn thousands_of_idle_connections_at_a_low_open_files_limit() {
    let _heavy = heavy();
    // The test process needs room for its own side of them.
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let mut server = Server::start(Some(1024));
    runtime().block_on(async {
        let port = server.port;
        let mut idle = Vec::new();
        for i in 0..2000 {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            if i % 2 == 0 {
                // Slowloris: the first bytes of a TLS ClientHello, then nothing.
                let _ = s.write_all(&[0x16, 0x03, 0x01]).await;
            }
            idle.push(s);
        }
        server.assert_alive().await;
        // A real client still gets served (the longest-idle are shed for it).
        let mut conn = server.http1().await;
        let (status, _) = send(&mut conn, "/validate", &padded_admission(0))
            .await
            .unwrap();
        assert_eq!(status, 200);
        // And the probe port resists the same.
        let mut probe_idle = Vec::new();
        for _ in 0..500 {
            probe_idle.push(
                TcpStream::connect(("127.0.0.1", server.probe))
                    .await
                    .unwrap(),
            );
        }
        server.assert_alive().await;
        drop(idle);
        drop(probe_idle);
    });
    assert!(
        server.log().contains("max_connections=896"),
        "the limit in force is logged: {}",
        server.log()
    );
}

#[test]
fn many_large_bodies_at_once_stay_within_the_memory_limit() {
    let _heavy = heavy();
    let mut server = Server::start(None);
    let admission = Arc::new(padded_admission(7 * MIB as usize));
    let tiny_objects = {
        let mut body = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1alpha1","objects":["#.to_vec();
        while body.len() < 31 * MIB as usize {
            body.extend_from_slice(br#"{"a":0},"#);
        }
        body.extend_from_slice(br#"{"a":0}]}}"#);
        Arc::new(body)
    };
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for i in 0..24 {
            let (body, path) = if i % 6 == 5 {
                (Arc::clone(&tiny_objects), "/convert")
            } else {
                (
                    Arc::clone(&admission),
                    if i % 2 == 0 { "/validate" } else { "/mutate" },
                )
            };
            let mut conn = server.http1().await;
            tasks.push(tokio::spawn(async move {
                send_with_headers(&mut conn, path, &body)
                    .await
                    .map(|(status, headers, answer)| (path, status, headers, answer))
            }));
        }
        let mut served = 0;
        for task in tasks {
            let (path, status, headers, answer) = task.await.unwrap().unwrap();
            match status.as_u16() {
                200 => {
                    served += 1;
                    let v: Value = serde_json::from_slice(&answer).unwrap();
                    if path == "/convert" {
                        assert_eq!(v["response"]["result"]["status"], "Failure", "{v}");
                    } else {
                        assert!(v["response"]["allowed"].is_boolean(), "{path}: {v}");
                    }
                }
                503 => assert_eq!(
                    headers.get("retry-after").map(|h| h.to_str().unwrap()),
                    Some("1"),
                    "a refusal says when to retry"
                ),
                other => panic!("{path}: {other} {}", String::from_utf8_lossy(&answer)),
            }
        }
        assert!(served > 0, "some of the requests were served");
        server.assert_alive().await;
        server.assert_within_memory_limit();
    });
}

#[test]
fn one_request_peaks_at_most_four_times_its_body() {
    let _heavy = heavy();
    for (path, body) in [
        ("/convert", reviews::conversion_review(10_000)),
        ("/validate", padded_admission(7 * MIB as usize)),
    ] {
        let mut server = Server::start(None);
        runtime().block_on(async {
            let mut conn = server.http1().await;
            // Warm up: the first request allocates the connection's buffers.
            let (status, _) = send(&mut conn, "/validate", &padded_admission(0))
                .await
                .unwrap();
            assert_eq!(status, 200);
            let before = server.memory("VmRSS").max(server.memory("VmHWM"));
            let (status, answer) = send(&mut conn, path, &body).await.unwrap();
            assert_eq!(
                status,
                200,
                "{}",
                String::from_utf8_lossy(&answer[..answer.len().min(500)])
            );
            let grown = server.memory("VmHWM").saturating_sub(before);
            let allowed = 4 * body.len() as u64;
            eprintln!(
                "{path}: body {} MiB, peak grew {} MiB (allowed {} MiB)",
                body.len() as u64 / MIB,
                grown / MIB,
                allowed / MIB
            );
            assert!(
                grown <= allowed,
                "{path}: peak grew {grown} bytes for a {}-byte body",
                body.len()
            );
            server.assert_alive().await;
        });
    }
}

#[test]
fn hostile_json_and_strings_get_clear_bounded_answers() {
    let _heavy = heavy();
    let mut server = Server::start(None);
    runtime().block_on(async {
        let mut conn = server.http1().await;
        // Deep nesting.
        let deep = "[".repeat(1 << 20);
        let (status, answer) = send(&mut conn, "/validate", deep.as_bytes()).await.unwrap();
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
        // A wide object.
        let mut wide = String::from("{");
        for i in 0..400_000 {
            wide.push_str(&format!("\"k{i}\":0,"));
        }
        wide.push_str("\"apiVersion\":\"x\"}");
        let (status, _) = send(&mut conn, "/validate", wide.as_bytes()).await.unwrap();
        assert_eq!(status, 400);
        // A 1 MiB apiVersion: refused, and neither answer nor log carries it whole.
        let huge = json!({"apiVersion": "v".repeat(1 << 20), "kind": "AdmissionReview\nlevel=ERROR forged", "request": {}});
        let (status, answer) = send(&mut conn, "/validate", &serde_json::to_vec(&huge).unwrap())
            .await
            .unwrap();
        assert_eq!(status, 400);
        assert!(answer.len() < 2048, "answer of {} bytes", answer.len());
        let (_, answer) = send(
            &mut conn,
            "/convert",
            &serde_json::to_vec(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "u", "desiredAPIVersion": "x".repeat(1 << 20),
                            "objects": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                         "metadata": {"name": "n\nlevel=ERROR forged"}, "spec": {"model": {"ref": "m"}}}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
        assert!(answer.len() < 4096, "conversion answer of {} bytes", answer.len());
        // Invalid UTF-8.
        let (status, _) = send(&mut conn, "/validate", b"{\"apiVersion\":\"\xff\xfe\"}").await.unwrap();
        assert_eq!(status, 400);
        server.assert_alive().await;
    });
    let log = server.log();
    for line in log.lines() {
        assert!(line.len() < 4096, "a log line of {} bytes", line.len());
        assert!(
            !line.starts_with("level=ERROR"),
            "a forged log line: {line}"
        );
    }
}

/// An AdmissionReview of a defaulted InferenceService whose rollout gate
/// runs `query`.
fn gated_review(query: &str) -> Vec<u8> {
    let mut object = reviews::service_object(0, true);
    let spec = object["spec"].as_object_mut().unwrap();
    spec.remove("canary");
    spec.insert(
        "rollout".into(),
        json!({"strategy": "Canary", "steps": [10], "interval": "5m",
               "analysis": {"prometheus": {"query": query, "threshold": {"max": 1.0}}}}),
    );
    reviews::admission_review(object)
}

/// Post `gated_review(query)` to `/validate`: the review's `response` and
/// how long the answer took.
async fn validate_query(
    server: &Server,
    conn: &mut support::Conn,
    what: &str,
    query: &str,
) -> (Value, Duration) {
    let body = gated_review(query);
    let started = Instant::now();
    let sent = tokio::time::timeout(Duration::from_secs(30), send(conn, "/validate", &body)).await;
    let took = started.elapsed();
    let (status, answer) = match sent {
        Ok(Ok(answer)) => answer,
        other => panic!(
            "{what}: no answer ({other:?}) after {took:?}: {}",
            server.log()
        ),
    };
    assert_eq!(status, 200, "{what}: {}", String::from_utf8_lossy(&answer));
    let review: Value = serde_json::from_slice(&answer).unwrap();
    (review["response"].clone(), took)
}

/// Rollout gate queries far past the bounds (4,096 bytes, 64 levels):
/// parsed, scoped, printed or dropped by recursion, such a tree overflows
/// the stack and aborts the process. Posted straight to `/validate`, each
/// is denied at once naming the field, and the server answers on.
#[test]
fn deep_rollout_queries_are_denied_at_once_and_the_server_lives() {
    const FIELD: &str = "spec.rollout.analysis.prometheus.query";
    let _heavy = heavy();
    let mut server = Server::start(None);
    runtime().block_on(async {
        let mut conn = server.http1().await;
        let (ok, _) =
            validate_query(&server, &mut conn, "a gate's query", "sum(rate(x[5m]))").await;
        assert_eq!(ok["allowed"], true, "{ok}");
        let nested =
            |open: &str, n: usize, close: &str| format!("{}x{}", open.repeat(n), close.repeat(n));
        for (what, query) in [
            ("100,000 nested parentheses", nested("(", 100_000, ")")),
            ("100,000 unary minus signs", nested("-", 100_000, "")),
            ("20,000 nested sum(", nested("sum(", 20_000, ")")),
            ("50,000 chained +", format!("x{}", " + x".repeat(50_000))),
            ("65 nested sum(", nested("sum(", 65, ")")),
            ("a 4 KiB unary chain", nested("-", 4_000, "")),
        ] {
            let (denied, took) = validate_query(&server, &mut conn, what, &query).await;
            assert_eq!(denied["allowed"], false, "{what}: {denied}");
            let message = denied["status"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(FIELD), "{what}: {message}");
            assert!(
                message.contains("may not be more than 4096 bytes")
                    || message.contains("may not nest more than 64 levels"),
                "{what}: {message}"
            );
            assert!(
                message.len() < 2048,
                "{what}: a message of {} bytes",
                message.len()
            );
            assert!(
                took < Duration::from_secs(2),
                "{what}: answered in {took:?}"
            );
            server.assert_alive().await;
        }
        // The same connection still answers.
        let (ok, _) = validate_query(
            &server,
            &mut conn,
            "a gate's query after",
            "sum(rate(x[5m]))",
        )
        .await;
        assert_eq!(ok["allowed"], true, "{ok}");
    });
}

/// The p99 of small admission requests while large conversions run.
const SMALL_P99_DURING_LARGE: Duration = Duration::from_millis(50);

/// Small `/validate` requests one after the other for `period` (at least
/// one), each on a fresh connection (placed on the next connection
/// worker), 20 ms apart: their latencies (connection included), sorted.
async fn small_requests(server: &Server, body: &[u8], period: Duration) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let until = Instant::now() + period;
    loop {
        let started = Instant::now();
        let mut conn = server.http1().await;
        let (status, _) = send(&mut conn, "/validate", body).await.unwrap();
        assert_eq!(status, 200);
        latencies.push(started.elapsed());
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    latencies.sort();
    latencies
}

/// The `q` quantile of sorted `latencies`.
fn quantile(latencies: &[Duration], q: f64) -> Duration {
    let at = ((latencies.len() as f64 * q) as usize).min(latencies.len() - 1);
    latencies[at]
}

#[test]
fn large_conversions_do_not_stall_small_requests() {
    let _heavy = heavy();
    let mut server = Server::start(None);
    let large = Arc::new(reviews::conversion_review(8_000));
    let small = Arc::new(padded_admission(0));
    runtime().block_on(async {
        // The baseline: small requests with nothing else running (after
        // one to warm up).
        small_requests(&server, &small, Duration::ZERO).await;
        let quiet = small_requests(&server, &small, Duration::from_secs(4)).await;
        // One large conversion alone: how long it holds a core.
        let mut conn = server.http1().await;
        let started = Instant::now();
        let (status, _) = send(&mut conn, "/convert", &large).await.unwrap();
        assert_eq!(status, 200);
        let alone = started.elapsed();
        // Back to back on two connections, while small requests come.
        let stop = tokio_util::sync::CancellationToken::new();
        let mut converting = Vec::new();
        for _ in 0..2 {
            let mut conn = server.http1().await;
            let large = Arc::clone(&large);
            let stop = stop.clone();
            let (port, ca) = (server.port, server.ca.clone());
            converting.push(tokio::spawn(async move {
                let mut done = 0;
                while !stop.is_cancelled() {
                    let (status, _) = send(&mut conn, "/convert", &large).await.unwrap();
                    assert!(status == 200 || status == 503, "{status}");
                    if status == 503 {
                        // Refused before its body was read: the server
                        // closes the connection after the refusal, so the
                        // next try opens one.
                        conn = connect(
                            ([127, 0, 0, 1], port).into(),
                            client_config(&[&ca], &[b"http/1.1"], false),
                        )
                        .await
                        .unwrap()
                        .0;
                    }
                    done += 1;
                }
                done
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let latencies =
            small_requests(&server, &small, (alone * 6).max(Duration::from_secs(4))).await;
        stop.cancel();
        let mut conversions = 0;
        for c in converting {
            conversions += c.await.unwrap();
        }
        let p99 = quantile(&latencies, 0.99);
        let quiet_p99 = quantile(&quiet, 0.99);
        eprintln!(
            "one large conversion alone {alone:?}; {conversions} conversions alongside {} small requests: p50 {:?}, p99 {p99:?}, max {:?}; alone before, {} small requests: p50 {:?}, p99 {quiet_p99:?}; p99 during / p99 alone {:.2}x",
            latencies.len(),
            quantile(&latencies, 0.5),
            latencies[latencies.len() - 1],
            quiet.len(),
            quantile(&quiet, 0.5),
            p99.as_secs_f64() / quiet_p99.as_secs_f64(),
        );
        assert!(conversions >= 2, "the conversions ran meanwhile");
        assert!(
            p99 <= SMALL_P99_DURING_LARGE,
            "small requests waited for large ones: p99 {p99:?} (bound {SMALL_P99_DURING_LARGE:?}) against {alone:?} for one conversion"
        );
        server.assert_alive().await;
    });
}
