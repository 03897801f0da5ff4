//! The webhook's router in process, without a listener: review fixtures,
//! requests through the router and the probe router, answers read and
//! patches applied.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use http_body_util::BodyExt;
use infergate::engine::ServerDefaults;
use infergate::state::ClusterState;
use infergate::webhook::server::{self, AppState};
use serde_json::Value;
use tower::ServiceExt;

use super::app::app_state;
use super::fixtures::read_fixture;

/// The engine image the webhook defaults to (its `--engine-image` flag).
pub const ENGINE_IMAGE: &str = "registry.example.com/vllm:0.9";

/// The review `tests/fixtures/webhook/<name>`.
pub fn review_fixture(name: &str) -> Value {
    let bytes = read_fixture(&format!("webhook/{name}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("webhook/{name}: {e}"))
}

/// The webhook's state over `cache` with [`ENGINE_IMAGE`] as the flag's
/// engine image.
pub fn webhook_state_with(cache: ClusterState) -> Arc<AppState> {
    app_state(
        cache,
        ServerDefaults {
            engine_image: Some(ENGINE_IMAGE.to_owned()),
            replicas: None,
        },
    )
}

/// [`webhook_state_with`] over an empty cluster.
pub fn webhook_state() -> Arc<AppState> {
    webhook_state_with(ClusterState::default())
}

/// POST `body` as JSON to `path` of the router; the status and the answer
/// (which must be JSON).
pub async fn post_raw(state: &Arc<AppState>, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let req = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let resp = server::router(Arc::clone(state))
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "response is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, value)
}

/// [`post_raw`] of `body` serialised.
pub async fn post(state: &Arc<AppState>, path: &str, body: &Value) -> (StatusCode, Value) {
    post_raw(state, path, serde_json::to_vec(body).unwrap()).await
}

/// The response of an AdmissionReview answered with HTTP 200.
pub async fn review(state: &Arc<AppState>, path: &str, body: &Value) -> Value {
    let (status, v) = post(state, path, body).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    assert_eq!(
        v["response"]["uid"], body["request"]["uid"],
        "uid must be echoed: {v}"
    );
    v["response"].clone()
}

/// The JSONPatch of an admission response, if it has one.
pub fn decode_patch(response: &Value) -> Option<json_patch::Patch> {
    let b64 = response.get("patch")?.as_str()?;
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("patch is base64");
    Some(serde_json::from_slice(&bytes).expect("patch is a JSONPatch"))
}

/// `object` with `patch` applied.
pub fn apply_patch(mut object: Value, patch: &json_patch::Patch) -> Value {
    json_patch::patch(&mut object, patch).expect("patch applies to the object sent");
    object
}

/// `review` with `object` as its request's object.
pub fn with_object(mut review: Value, object: Value) -> Value {
    review["request"]["object"] = object;
    review
}

/// The fields of a denial's causes.
pub fn causes(response: &Value) -> Vec<String> {
    response["status"]["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["field"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// GET `path` of the probe router; the status and the body as text.
pub async fn get_probe(st: &Arc<AppState>, path: &str) -> (StatusCode, String) {
    let resp = server::probe_router(Arc::clone(st))
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}
