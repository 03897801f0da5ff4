//! Connections that hold the server without asking it anything: silent,
//! slow and half-open ones are cut (TCP alone, TLS alone, half an HTTP/2
//! preface, unfinished headers, a dripping body), idle keep-alive ones
//! outlive the API server's idle timeout, and thousands of idle ones at a
//! low open-files limit leave room for a real client.

use std::time::{Duration, Instant};

use crate::support::send;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Server, heavy, padded_admission, runtime, status_of};

/// How long a silent connection may live: the first-request timeout (10 s)
/// plus slack for a loaded machine.
const CUT_WITHIN: Duration = Duration::from_secs(14);

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
