//! Bodies over the limit: announced over it (refused before a byte of the
//! body is read, `100 Continue` never sent), written whole before the
//! answer is read, read away only within their bounds (time and bytes),
//! and posted by hyper and reqwest over HTTP/1.1 and HTTP/2: each client
//! reads the 413, and on HTTP/2 only the refused stream ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::client_config;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use infergate::webhook::tls::certs::PemPair;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{MIB, Server, heavy, padded_admission, runtime, status_of, tls_to};

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
