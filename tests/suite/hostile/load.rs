//! Large bodies under load: many at once stay within the memory limit (or
//! are refused with `Retry-After`), one request peaks at most four times its
//! body, and small requests are not stalled by large conversions.

use crate::reviews;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{client_config, connect, send, send_with_headers};
use serde_json::Value;

use super::{MIB, Server, heavy, padded_admission, runtime};

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
