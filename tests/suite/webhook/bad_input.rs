//! Requests that are not what the admission webhooks expect: bodies that
//! are not reviews, objects of the wrong shape, query strings, and the body
//! size limit and how a refusal ends its connection (or stream).

use axum::http::StatusCode;
use infergate::webhook::server;
use serde_json::json;

use crate::support::{post_raw, review, review_fixture, webhook_state};

#[tokio::test]
async fn bodies_that_are_not_admission_reviews_get_400_json() {
    let st = webhook_state();
    for body in [
        b"not json at all".to_vec(),
        b"{}".to_vec(),
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
        br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
            .to_vec(),
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}"#
            .to_vec(),
        br#"[1,2,3]"#.to_vec(),
        Vec::new(),
    ] {
        for path in ["/mutate", "/validate"] {
            let (status, v) = post_raw(&st, path, body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {v}");
            assert!(v["error"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
        }
    }
}

#[tokio::test]
async fn an_object_of_the_wrong_shape_is_denied_not_a_panic() {
    let st = webhook_state();
    let mut req = review_fixture("mutate-create-minimal.json");
    req["request"]["object"]["spec"] = json!({"model": "not-an-object", "replicas": "many"});
    // Mutation runs before the API server's schema check: leave it untouched
    // so the user sees the schema's field error.
    let resp = review(&st, "/mutate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp.get("patch").is_none(), "{resp}");
    // Validation runs after it: whatever still does not decode is denied.
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], false, "{resp}");
    assert_eq!(resp["status"]["code"], 400, "{resp}");
}

#[tokio::test]
async fn query_strings_are_ignored() {
    let st = webhook_state();
    let req = review_fixture("validate-create-invalid.json");
    let resp = review(&st, "/validate?timeout=10s", &req).await;
    assert_eq!(resp["allowed"], false);
    let resp = review(
        &st,
        "/mutate?timeout=10s",
        &review_fixture("mutate-create-minimal.json"),
    )
    .await;
    assert_eq!(resp["allowed"], true);
}

#[tokio::test]
async fn an_update_of_two_large_objects_fits_and_beyond_the_limit_is_413() {
    let st = webhook_state();
    // Two ~3 MiB objects (object and oldObject) in one UPDATE review.
    let filler = "x".repeat(3 * 1024 * 1024 - 4096);
    let mut req = review_fixture("validate-update-backend.json");
    req["request"]["object"]["metadata"]["annotations"] = json!({"big": filler});
    req["request"]["oldObject"]["metadata"]["annotations"] = json!({"big": filler});
    let body = serde_json::to_vec(&req).unwrap();
    assert!(body.len() > 6 * 1024 * 1024 - 16 * 1024);
    let (status, v) = post_raw(&st, "/validate", body).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        &v.to_string()[..200.min(v.to_string().len())]
    );

    let huge = vec![b' '; server::ADMISSION_BODY_LIMIT + 1];
    let (status, v) = post_raw(&st, "/mutate", huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(v["error"].as_str().unwrap().contains("larger"), "{v}");
}

#[tokio::test]
async fn a_refusal_closes_an_http1_connection_and_only_the_stream_of_an_http2_one() {
    use axum::body::Body;
    use axum::http::{Request, Version};
    use tower::ServiceExt;

    let st = webhook_state();
    let limit = server::ADMISSION_BODY_LIMIT;
    for (version, closes) in [(Version::HTTP_11, true), (Version::HTTP_2, false)] {
        // Announced over the limit (refused unread), and grown over it.
        for (announced, body) in [(Some(limit + 1), Vec::new()), (None, vec![b' '; limit + 1])] {
            let mut request = Request::post("/validate").version(version);
            if let Some(n) = announced {
                request = request.header("content-length", n);
            }
            let response = server::router(std::sync::Arc::clone(&st))
                .oneshot(request.body(Body::from(body)).unwrap())
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
            let close = response
                .headers()
                .get("connection")
                .is_some_and(|v| v == "close");
            assert_eq!(close, closes, "{version:?} announced {announced:?}");
        }
    }
}
