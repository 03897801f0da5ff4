//! Hostile content in well-formed requests: deep and wide JSON, a 1 MiB
//! `apiVersion`, invalid UTF-8 and forged log lines get clear, bounded
//! answers; rollout gate queries far past their bounds are denied at once,
//! naming the field, and the server answers on.

use crate::reviews;
use crate::support;

use std::time::{Duration, Instant};

use crate::support::send;
use serde_json::{Value, json};

use super::{Server, heavy, runtime};

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
