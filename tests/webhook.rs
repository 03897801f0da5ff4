//! The webhook server without a cluster: AdmissionReview and ConversionReview
//! fixtures sent through the router in process, the probe endpoints, and the
//! TLS listener over 127.0.0.1 with rcgen certificates, including rotation
//! under load and graceful shutdown.

#[path = "../benches/common/reviews.rs"]
mod reviews;
mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use http_body_util::BodyExt;
use infergate::api::v1beta1::InferenceService;
use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::{PolicySnapshot, ServerDefaults};
use infergate::state::ClusterState;
use infergate::state::files::load_policies;
use infergate::webhook::listener;
use infergate::webhook::server::{self, AppState};
use infergate::webhook::tls::certs::{self, PemPair};
use infergate::webhook::tls::{self, CertResolver};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use support::{
    Serve, binary, client_config, connect, free_port, http_get, install_crypto_provider, pki,
    read_fixture, send, send_with_headers, wait_readyz, write_pair,
};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const ENGINE_IMAGE: &str = "registry.example.com/vllm:0.9";

fn fixture(name: &str) -> Value {
    let bytes = read_fixture(&format!("webhook/{name}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("webhook/{name}: {e}"))
}

fn state_with(cache: ClusterState) -> Arc<AppState> {
    support::app_state(
        cache,
        ServerDefaults {
            engine_image: Some(ENGINE_IMAGE.to_owned()),
            replicas: None,
        },
    )
}

fn state() -> Arc<AppState> {
    state_with(ClusterState::default())
}

async fn post_raw(state: &Arc<AppState>, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
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

async fn post(state: &Arc<AppState>, path: &str, body: &Value) -> (StatusCode, Value) {
    post_raw(state, path, serde_json::to_vec(body).unwrap()).await
}

/// The response of an AdmissionReview answered with HTTP 200.
async fn review(state: &Arc<AppState>, path: &str, body: &Value) -> Value {
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

fn decode_patch(response: &Value) -> Option<json_patch::Patch> {
    let b64 = response.get("patch")?.as_str()?;
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("patch is base64");
    Some(serde_json::from_slice(&bytes).expect("patch is a JSONPatch"))
}

fn apply(mut object: Value, patch: &json_patch::Patch) -> Value {
    json_patch::patch(&mut object, patch).expect("patch applies to the object sent");
    object
}

fn with_object(mut review: Value, object: Value) -> Value {
    review["request"]["object"] = object;
    review
}

fn causes(response: &Value) -> Vec<String> {
    response["status"]["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["field"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------- mutate

#[tokio::test]
async fn mutate_fills_every_default_with_provenance() {
    let st = state();
    let req = fixture("mutate-create-minimal.json");
    let resp = review(&st, "/mutate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    let patch = decode_patch(&resp).expect("a minimal service gets a patch");
    let out = apply(req["request"]["object"].clone(), &patch);
    let spec = &out["spec"];
    assert_eq!(spec["engine"]["image"], ENGINE_IMAGE, "{out}");
    assert_eq!(spec["engine"]["port"], 8000, "{out}");
    assert_eq!(spec["backend"], "Deployment", "{out}");
    assert_eq!(spec["replicas"], 1, "{out}");
    assert_eq!(spec["healthCheck"]["path"], "/healthz", "{out}");
    assert_eq!(spec["routing"]["requestTimeout"], "5m", "{out}");
    assert_eq!(
        spec["routing"]["pathTemplate"], "/{.metadata.namespace}/{.metadata.name}",
        "{out}"
    );
    // The object is otherwise untouched (the patch never removes anything).
    assert_eq!(out["metadata"]["name"], "chat");
    assert!(
        patch
            .0
            .iter()
            .all(|op| !matches!(op, json_patch::PatchOperation::Remove(_))),
        "{patch:?}"
    );
    let annotation = out["metadata"]["annotations"]["infergate.dev/defaulted-from"]
        .as_str()
        .expect("provenance annotation");
    let provenance: BTreeMap<String, String> = serde_json::from_str(annotation).unwrap();
    assert_eq!(
        provenance.get("spec.engine.image").map(String::as_str),
        Some("flag")
    );
    assert_eq!(
        provenance.get("spec.engine.port").map(String::as_str),
        Some("built-in")
    );

    // Idempotent: the defaulted object gets no patch (reinvocationPolicy: IfNeeded).
    let again = review(&st, "/mutate", &with_object(req, out)).await;
    assert_eq!(again["allowed"], true);
    assert!(
        decode_patch(&again).is_none_or(|p| p.0.is_empty()),
        "{again}"
    );
}

/// A kubectl-shaped object: managed fields, owner references, finalizers,
/// an empty `args` list, an existing annotation. The patch only adds what
/// defaulting filled in; everything else comes back byte-for-byte.
#[tokio::test]
async fn mutate_patch_only_adds_and_leaves_the_rest_of_the_object_alone() {
    let st = state();
    let object = json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {
            "name": "chat", "namespace": "team-a", "generation": 1,
            "labels": {"team": "a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"model\":{\"ref\":\"m\"}}}"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "0000-1111"}],
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": "infergate.dev/v1beta1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {".": {}, "f:model": {}, "f:engine": {}}}}]
        },
        "spec": {"model": {"ref": "m"}, "engine": {"args": [], "env": []}, "replicas": 2}
    });
    let req = with_object(fixture("mutate-create-minimal.json"), object.clone());
    let resp = review(&st, "/mutate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    let patch = decode_patch(&resp).expect("defaults are filled");
    assert!(
        patch
            .0
            .iter()
            .all(|op| matches!(op, json_patch::PatchOperation::Add(_))),
        "only adds: {patch:?}"
    );
    let out = apply(object.clone(), &patch);
    for key in ["managedFields", "ownerReferences", "finalizers", "labels"] {
        assert_eq!(out["metadata"][key], object["metadata"][key], "{key}");
    }
    assert_eq!(
        out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
        object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    );
    assert!(out["metadata"]["annotations"]["infergate.dev/defaulted-from"].is_string());
    assert_eq!(out["spec"]["engine"]["args"], json!([]), "{out}");
    assert_eq!(out["spec"]["engine"]["image"], ENGINE_IMAGE, "{out}");
    assert_eq!(out["spec"]["replicas"], 2, "the user's value stays: {out}");
}

/// `handle` answers the common request (a v1beta1 InferenceService CREATE
/// or UPDATE) as the typed steps do: decode, mutate, encode.
#[test]
fn mutation_answers_like_decode_mutate_encode() {
    let st = state();
    let admission = &st.admission;
    let minimal = fixture("mutate-create-minimal.json");
    let mut update = minimal.clone();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = minimal["request"]["object"].clone();
    let mut no_namespace = minimal.clone();
    no_namespace["request"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    for review in [minimal, update, no_namespace] {
        let body = serde_json::to_vec(&review).unwrap();
        let fast = admission
            .handle(infergate::metrics::Webhook::Mutate, &body)
            .unwrap();
        let req = infergate::webhook::review::decode(&body).unwrap();
        let general = infergate::webhook::review::encode(&admission.mutate(&req)).unwrap();
        assert!(fast.mutated, "{review}");
        assert_eq!(
            String::from_utf8(fast.to_json().unwrap()).unwrap(),
            String::from_utf8(general).unwrap(),
            "{review}"
        );
    }
}

/// `/validate` answers the common review (a v1beta1 InferenceService
/// CREATE or UPDATE) as the typed steps do, byte for byte: allowed, denied
/// with field errors, an UPDATE against the stored object, and without a
/// request namespace.
#[test]
fn validation_answers_like_decode_validate_encode() {
    let st = state();
    let admission = &st.admission;
    let invalid = fixture("validate-create-invalid.json");
    let mut valid = fixture("mutate-create-minimal.json");
    valid["request"]["object"]["spec"]["engine"]["image"] = json!("registry.example.com/vllm:0.9");
    let mut update = fixture("validate-update-backend.json");
    update["request"]["dryRun"] = json!(true);
    let mut no_namespace = invalid.clone();
    no_namespace["request"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let mut answers = Vec::new();
    for review in [valid, invalid, update, no_namespace] {
        let body = serde_json::to_vec(&review).unwrap();
        let fast = admission
            .handle(infergate::metrics::Webhook::Validate, &body)
            .unwrap();
        let req = infergate::webhook::review::decode(&body).unwrap();
        let general = infergate::webhook::review::encode(&admission.validate(&req)).unwrap();
        assert_eq!(
            String::from_utf8(fast.to_json().unwrap()).unwrap(),
            String::from_utf8(general).unwrap(),
            "{review}"
        );
        answers.push(fast.allowed);
    }
    // The cases cover both verdicts.
    assert!(
        answers.contains(&true) && answers.contains(&false),
        "{answers:?}"
    );
}

// ---------------------------------------------------------------- recorded answers

/// A review as kubectl's client-side apply makes the API server send it: a
/// last-applied annotation full of escapes, managed fields, an annotation
/// with control characters and non-ASCII text, the user and the options.
fn kubectl_shaped(mut review: Value) -> Value {
    let object = review["request"]["object"].clone();
    let meta = &mut review["request"]["object"]["metadata"];
    meta["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": object.to_string(),
        "note": "tab\there, quote \" and unicode \u{00e9}\u{1F600}",
    });
    meta["labels"] = json!({"app.kubernetes.io/part-of": "chat", "team": "a"});
    meta["uid"] = json!("6f1e2a3b-0000-4000-8000-000000000000");
    meta["resourceVersion"] = json!("1000");
    meta["generation"] = json!(1);
    meta["managedFields"] = json!([{"manager": "kubectl-client-side-apply",
        "operation": "Update", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:annotations": {".": {}}}, "f:spec": {".": {}, "f:model": {}}}}]);
    review["request"]["userInfo"] =
        json!({"username": "alice", "groups": ["system:authenticated"], "extra": {"k": ["v"]}});
    review
}

/// The cluster and namespace policies the benches run with (they default
/// and limit), and a cluster policy that only warns.
fn layered_policies() -> PolicySnapshot {
    let mut policies = reviews::policies();
    let soft: ClusterInferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "soft"},
        "spec": {"enforcement": "Warn", "limits": {"maxReplicas": 1}}
    }))
    .unwrap();
    policies.cluster.push(soft);
    policies
}

/// The reviews whose answers are recorded, each with the webhook it goes
/// to and whether it is answered with [`layered_policies`] (else with the
/// engine-image flag alone).
#[allow(clippy::too_many_lines)]
fn recorded_cases() -> Vec<(&'static str, &'static str, bool, Vec<u8>)> {
    let minimal = fixture("mutate-create-minimal.json");
    let invalid = fixture("validate-create-invalid.json");
    let backend = fixture("validate-update-backend.json");
    let cluster_policy = fixture("validate-cluster-policy-invalid.json");
    let delete = fixture("validate-delete.json");
    let set = |mut review: Value, pointer: &str, value: Value| {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let key = key.replace("~1", "/").replace("~0", "~");
        review
            .pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert(key, value);
        review
    };
    let without = |mut review: Value, pointer: &str| {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        review
            .pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(key);
        review
    };
    let update = |review: Value| {
        let old = review["request"]["object"].clone();
        set(
            set(review, "/request/operation", json!("UPDATE")),
            "/request/oldObject",
            old,
        )
    };
    // The benches' kubectl-shaped spec, with escapes and control characters
    // in an engine argument.
    let mut full_spec = reviews::service_object(0, false)["spec"].clone();
    full_spec["engine"]["args"] = json!([
        "--max-model-len=8192",
        "--served-name=\"chat\"\t\u{e9}\u{1}"
    ]);
    let kubectl = kubectl_shaped(set(minimal.clone(), "/request/object/spec", full_spec));
    let defaulted = json!({
        "model": {"ref": "m"},
        "engine": {"image": ENGINE_IMAGE, "port": 8000}, "backend": "Deployment", "replicas": 1,
        "accelerator": {"type": "none"}, "parallelism": {"tensor": 1, "pipeline": 1},
        "healthCheck": {"path": "/healthz", "interval": "10s", "timeout": "1s"},
        "routing": {"pathTemplate": "/{.metadata.namespace}/{.metadata.name}", "requestTimeout": "5m", "backendKind": "Service"},
        "metrics": {"port": 8000, "path": "/metrics", "interval": "30s"}
    });
    let valid = set(
        minimal.clone(),
        "/request/object/spec/engine",
        json!({"image": ENGINE_IMAGE}),
    );
    let alpha_kind =
        json!({"group": "infergate.dev", "version": "v1alpha1", "kind": "InferenceService"});
    let alpha = set(
        set(
            set(minimal.clone(), "/request/kind", alpha_kind.clone()),
            "/request/requestKind",
            alpha_kind,
        ),
        "/request/object",
        json!({"apiVersion": "infergate.dev/v1alpha1", "kind": "InferenceService",
               "metadata": {"name": "chat", "namespace": "team-a"},
               "spec": {"modelRef": "llama3-8b-q4", "image": ENGINE_IMAGE, "replicas": 2, "minReplicas": 1, "maxReplicas": 4}}),
    );
    let namespaced_policy = |limits: Value| {
        set(
            set(
                set(
                    without(cluster_policy.clone(), "/request/name"),
                    "/request/kind/kind",
                    json!("InferencePolicy"),
                ),
                "/request/object",
                json!({"apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
                       "metadata": {"name": "defaults", "namespace": "team-a"},
                       "spec": {"defaults": {"replicas": 2}, "limits": limits}}),
            ),
            "/request/resource/resource",
            json!("inferencepolicies"),
        )
    };
    let wrong_shape = set(
        minimal.clone(),
        "/request/object/spec",
        json!({"model": "not-an-object", "replicas": "many"}),
    );
    let foreign = set(
        minimal.clone(),
        "/request/kind",
        json!({"group": "apps", "version": "v1", "kind": "Deployment"}),
    );
    let provenance = set(
        kubectl.clone(),
        "/request/object/metadata/annotations/infergate.dev~1defaulted-from",
        json!(r#"{"spec.replicas":"built-in"}"#),
    );
    let with_image = set(
        kubectl.clone(),
        "/request/object/spec/engine/image",
        json!(ENGINE_IMAGE),
    );
    let mutate = vec![
        ("mutate minimal", minimal.clone()),
        ("mutate minimal update", update(minimal.clone())),
        (
            "mutate without request namespace",
            without(minimal.clone(), "/request/namespace"),
        ),
        ("mutate kubectl-shaped", kubectl.clone()),
        ("mutate with provenance", provenance),
        (
            "mutate defaulted",
            set(minimal.clone(), "/request/object/spec", defaulted),
        ),
        (
            "mutate through v1alpha1",
            set(
                minimal.clone(),
                "/request/requestKind/version",
                json!("v1alpha1"),
            ),
        ),
        ("mutate a v1alpha1 object", alpha.clone()),
        ("mutate a policy", cluster_policy.clone()),
        ("mutate delete", delete.clone()),
        ("mutate wrong shape", wrong_shape.clone()),
        (
            "mutate no object",
            set(minimal.clone(), "/request/object", Value::Null),
        ),
        ("mutate another group", foreign.clone()),
    ];
    let validate = vec![
        ("validate valid", valid.clone()),
        ("validate invalid", invalid.clone()),
        ("validate backend change through v1alpha1", backend.clone()),
        (
            "validate dry-run update",
            set(backend.clone(), "/request/dryRun", json!(true)),
        ),
        (
            "validate without request namespace",
            without(invalid.clone(), "/request/namespace"),
        ),
        ("validate cluster policy", cluster_policy.clone()),
        (
            "validate namespace policy",
            namespaced_policy(json!({"maxReplicas": 4})),
        ),
        (
            "validate loosening namespace policy",
            namespaced_policy(json!({"maxReplicas": 40, "maxCanaryWeight": 90})),
        ),
        ("validate delete", delete.clone()),
        ("validate wrong shape", wrong_shape.clone()),
        ("validate a v1alpha1 object", alpha.clone()),
        (
            "validate a malformed v1alpha1 object",
            set(alpha.clone(), "/request/object/spec/replicas", json!("two")),
        ),
        (
            "validate no object",
            set(valid.clone(), "/request/object", Value::Null),
        ),
        (
            "validate malformed old object",
            set(
                update(valid.clone()),
                "/request/oldObject/spec/replicas",
                json!("two"),
            ),
        ),
        (
            "validate create ignores the old object",
            set(valid.clone(), "/request/oldObject", json!({"spec": 5})),
        ),
        ("validate kubectl-shaped", kubectl.clone()),
        ("validate kubectl-shaped update", update(kubectl.clone())),
        ("validate kubectl-shaped with an image", with_image.clone()),
        (
            "validate kubectl-shaped update with an image",
            update(with_image),
        ),
        ("validate another group", foreign),
    ];
    let mut cases = Vec::new();
    for layered in [false, true] {
        for (webhook, list) in [("mutate", &mutate), ("validate", &validate)] {
            for (name, review) in list {
                cases.push((*name, webhook, layered, serde_json::to_vec(review).unwrap()));
            }
        }
    }
    for (name, body) in [
        ("not json", b"not json at all".to_vec()),
        ("empty object", b"{}".to_vec()),
        (
            "no request",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
        ),
        (
            "v1beta1 review",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
                .to_vec(),
        ),
        (
            "uid not a string",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}"#
                .to_vec(),
        ),
        (
            "no resource",
            serde_json::to_vec(&without(minimal.clone(), "/request/resource")).unwrap(),
        ),
        (
            "bad operation",
            serde_json::to_vec(&set(minimal.clone(), "/request/operation", json!("PATCH")))
                .unwrap(),
        ),
        ("truncated", {
            let body = serde_json::to_vec(&minimal).unwrap();
            body[..body.len() - 1].to_vec()
        }),
        ("empty", Vec::new()),
    ] {
        cases.push((name, "mutate", false, body.clone()));
        cases.push((name, "validate", false, body));
    }
    cases
}

/// Every answer, byte for byte, as recorded in
/// `tests/fixtures/webhook/answers.json`: denials with their causes,
/// warnings, patches (base64), and the errors of bodies that are not
/// reviews. `INFERGATE_BLESS=1` rewrites the file.
#[test]
fn answers_are_the_recorded_bytes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/webhook/answers.json");
    let plain = state();
    let layered = state_with(ClusterState::new(layered_policies()));
    let mut answers = BTreeMap::new();
    for (name, webhook, with_policies, body) in recorded_cases() {
        let st = if with_policies { &layered } else { &plain };
        let hook = match webhook {
            "mutate" => infergate::metrics::Webhook::Mutate,
            _ => infergate::metrics::Webhook::Validate,
        };
        let answer = match st.admission.handle(hook, &body) {
            Ok(a) => String::from_utf8(a.to_json().unwrap()).unwrap(),
            Err(e) => format!("400 {e}"),
        };
        let key = format!(
            "{webhook}: {name}{}",
            if with_policies { " (policies)" } else { "" }
        );
        assert!(answers.insert(key.clone(), answer).is_none(), "{key} twice");
    }
    if std::env::var_os("INFERGATE_BLESS").is_some() {
        let mut text = serde_json::to_string_pretty(&answers).unwrap();
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let recorded: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
    for (key, answer) in &answers {
        assert_eq!(Some(answer), recorded.get(key), "{key}");
    }
    assert_eq!(answers.len(), recorded.len(), "cases no longer run");
}

#[tokio::test]
async fn mutate_takes_policy_defaults_and_sees_policy_changes_without_restart() {
    let st = state();
    let policy: InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "defaults", "namespace": "team-a"},
        "spec": {"defaults": {"replicas": 3}}
    }))
    .unwrap();
    let req = fixture("mutate-create-minimal.json");

    let before = review(&st, "/mutate", &req).await;
    let out = apply(
        req["request"]["object"].clone(),
        &decode_patch(&before).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 1);

    st.admission.state.set_policies(PolicySnapshot {
        cluster: vec![],
        namespaced: vec![policy],
    });
    let after = review(&st, "/mutate", &req).await;
    let out = apply(
        req["request"]["object"].clone(),
        &decode_patch(&after).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 3, "{out}");
    let annotation = out["metadata"]["annotations"]["infergate.dev/defaulted-from"]
        .as_str()
        .unwrap();
    assert!(
        annotation.contains("InferencePolicy/team-a/defaults"),
        "{annotation}"
    );
}

#[tokio::test]
async fn mutate_leaves_policies_and_deletes_alone() {
    let st = state();
    let mut policy = fixture("validate-cluster-policy-invalid.json");
    let resp = review(&st, "/mutate", &policy).await;
    assert_eq!(resp["allowed"], true);
    assert!(resp.get("patch").is_none());
    policy["request"]["operation"] = json!("DELETE");
    let resp = review(&st, "/validate", &policy).await;
    assert_eq!(resp["allowed"], true);
}

// ---------------------------------------------------------------- validate

#[tokio::test]
async fn validate_reports_every_field_error_at_once() {
    let st = state();
    let req = fixture("validate-create-invalid.json");
    // dryRun: true in the fixture: same answer, no side effects.
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], false, "{resp}");
    assert_eq!(resp["status"]["code"], 422, "{resp}");
    assert_eq!(resp["status"]["reason"], "Invalid", "{resp}");
    let message = resp["status"]["message"].as_str().unwrap();
    let name = req["request"]["name"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "InferenceService.infergate.dev \"{name}\" is invalid: ["
        )),
        "{message}"
    );
    let fields = causes(&resp);
    for field in [
        "spec.canary.weight",
        "spec.healthCheck.timeout",
        "spec.routing.requestTimeout",
    ] {
        assert!(message.contains(field), "{field} missing in {message}");
        assert!(
            fields.iter().any(|f| f == field),
            "{field} missing in {fields:?}"
        );
    }
    assert!(
        message.contains("120"),
        "the offending value is named: {message}"
    );
    for cause in resp["status"]["details"]["causes"].as_array().unwrap() {
        assert!(
            cause["reason"].as_str().unwrap().starts_with("FieldValue"),
            "{cause}"
        );
    }
}

#[tokio::test]
async fn validate_enforces_immutable_backend_and_warns_for_v1alpha1() {
    let st = state();
    let req = fixture("validate-update-backend.json");
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], false, "{resp}");
    assert!(causes(&resp).iter().any(|f| f == "spec.backend"), "{resp}");
    let warnings = resp["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("v1alpha1")
                && w.as_str().unwrap().contains("v1beta1")),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn validate_allows_delete_untouched() {
    let st = state();
    let resp = review(&st, "/validate", &fixture("validate-delete.json")).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp.get("patch").is_none());
    let resp = review(&st, "/mutate", &fixture("validate-delete.json")).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp.get("patch").is_none());
}

#[tokio::test]
async fn validate_denies_inconsistent_cluster_policy() {
    let st = state();
    let resp = review(
        &st,
        "/validate",
        &fixture("validate-cluster-policy-invalid.json"),
    )
    .await;
    assert_eq!(resp["allowed"], false, "{resp}");
    let message = resp["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.defaults"), "{message}");
}

#[tokio::test]
async fn warn_policy_admits_with_warnings_deny_policy_rejects() {
    let warn: ClusterInferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "soft"},
        "spec": {"enforcement": "Warn", "limits": {"maxReplicas": 1}}
    }))
    .unwrap();
    let st = state_with(ClusterState::new(PolicySnapshot {
        cluster: vec![warn.clone()],
        namespaced: vec![],
    }));
    let mut req = fixture("validate-create-invalid.json");
    req["request"]["object"]["spec"] = json!({
        "model": {"ref": "llama3-8b-q4"},
        "engine": {"image": ENGINE_IMAGE},
        "replicas": 2
    });
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    let warnings = resp["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("spec.replicas")),
        "{warnings:?}"
    );

    let mut deny = warn;
    deny.spec.enforcement = infergate::api::policy::Enforcement::Deny;
    st.admission.state.set_policies(PolicySnapshot {
        cluster: vec![deny],
        namespaced: vec![],
    });
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], false, "{resp}");
    assert!(causes(&resp).iter().any(|f| f == "spec.replicas"), "{resp}");
}

#[tokio::test]
async fn validate_rejects_a_route_another_service_owns() {
    let other: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "other", "namespace": "team-a"},
        "spec": {"model": {"ref": "m"}, "engine": {"image": ENGINE_IMAGE},
                 "routing": {"pathTemplate": "/shared", "gateway": {"name": "gw", "namespace": "gateways"}}}
    }))
    .unwrap();
    let cache = ClusterState::default();
    cache.apply_service(&other);
    let st = state_with(cache);
    let mut req = fixture("validate-create-invalid.json");
    req["request"]["object"]["spec"] = json!({
        "model": {"ref": "llama3-8b-q4"},
        "engine": {"image": ENGINE_IMAGE},
        "routing": {"pathTemplate": "/shared", "gateway": {"name": "gw", "namespace": "gateways"}}
    });
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], false, "{resp}");
    let message = resp["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("other"),
        "names the other service: {message}"
    );

    // The same service updating itself is no collision.
    req["request"]["object"]["metadata"]["name"] = json!("other");
    req["request"]["name"] = json!("other");
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
}

#[tokio::test]
async fn namespace_labels_select_cluster_policies() {
    let selective: ClusterInferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "prod"},
        "spec": {"namespaceSelector": {"matchLabels": {"tier": "prod"}}, "defaults": {"replicas": 5}}
    }))
    .unwrap();
    let cache = ClusterState::new(PolicySnapshot {
        cluster: vec![selective],
        namespaced: vec![],
    });
    let st = state_with(cache);
    let req = fixture("mutate-create-minimal.json");
    let resp = review(&st, "/mutate", &req).await;
    let out = apply(
        req["request"]["object"].clone(),
        &decode_patch(&resp).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 1, "team-a is not prod yet");
    st.admission.state.set_namespace_labels(
        "team-a",
        BTreeMap::from([("tier".to_owned(), "prod".to_owned())]),
    );
    let resp = review(&st, "/mutate", &req).await;
    let out = apply(
        req["request"]["object"].clone(),
        &decode_patch(&resp).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 5, "{out}");
}

// ---------------------------------------------------------------- bad input

#[tokio::test]
async fn bodies_that_are_not_admission_reviews_get_400_json() {
    let st = state();
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
    let st = state();
    let mut req = fixture("mutate-create-minimal.json");
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
    let st = state();
    let req = fixture("validate-create-invalid.json");
    let resp = review(&st, "/validate?timeout=10s", &req).await;
    assert_eq!(resp["allowed"], false);
    let resp = review(
        &st,
        "/mutate?timeout=10s",
        &fixture("mutate-create-minimal.json"),
    )
    .await;
    assert_eq!(resp["allowed"], true);
}

#[tokio::test]
async fn an_update_of_two_large_objects_fits_and_beyond_the_limit_is_413() {
    let st = state();
    // Two ~3 MiB objects (object and oldObject) in one UPDATE review.
    let filler = "x".repeat(3 * 1024 * 1024 - 4096);
    let mut req = fixture("validate-update-backend.json");
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

// ---------------------------------------------------------------- convert

#[tokio::test]
async fn convert_keeps_order_and_round_trips() {
    let st = state();
    let req = fixture("convert-alpha-to-beta.json");
    let (status, v) = post(&st, "/convert", &req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["kind"], "ConversionReview");
    let resp = &v["response"];
    assert_eq!(resp["uid"], req["request"]["uid"]);
    assert_eq!(resp["result"]["status"], "Success", "{v}");
    let objects = resp["convertedObjects"].as_array().unwrap();
    assert_eq!(objects.len(), 3);
    let names: Vec<&str> = objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "second", "third"]);
    for o in objects {
        assert_eq!(o["apiVersion"], "infergate.dev/v1beta1");
    }
    assert_eq!(objects[0]["spec"]["model"]["ref"], "llama3-8b-q4");
    assert_eq!(objects[0]["spec"]["autoscaling"]["maxReplicas"], 4);
    assert_eq!(objects[0]["metadata"]["labels"]["a"], "b");
    assert_eq!(objects[0]["metadata"]["resourceVersion"], "10");
    assert_eq!(objects[2]["spec"]["replicas"], 0);

    // And back: the v1alpha1 originals come out identical.
    let mut back = req.clone();
    back["request"]["desiredAPIVersion"] = json!("infergate.dev/v1alpha1");
    back["request"]["objects"] = json!([objects[0].clone(), objects[2].clone()]);
    let (_, v) = post(&st, "/convert", &back).await;
    let objects = v["response"]["convertedObjects"].as_array().unwrap();
    assert_eq!(objects[0], req["request"]["objects"][0]);
    assert_eq!(objects[1], req["request"]["objects"][2]);
}

/// The message of a ConversionReview answer that failed (asserted).
fn failure_message(answer: &Value) -> &str {
    assert_eq!(
        answer["response"]["result"]["status"], "Failure",
        "{answer}"
    );
    answer["response"]["result"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("a failure without a message: {answer}"))
}

#[tokio::test]
async fn unconvertible_or_malformed_reviews_fail_with_a_message() {
    let st = state();
    let mut req = fixture("convert-alpha-to-beta.json");
    req["request"]["desiredAPIVersion"] = json!("infergate.dev/v9");
    let (status, v) = post(&st, "/convert", &req).await;
    assert_eq!(status, StatusCode::OK);
    assert!(failure_message(&v).contains("v9"), "{v}");
    assert_eq!(v["response"]["uid"], req["request"]["uid"]);

    // No desired version (or objects before it, read on a second pass):
    // every object fails to convert to "", never an empty success.
    let mut req = fixture("convert-alpha-to-beta.json");
    req["request"]
        .as_object_mut()
        .unwrap()
        .remove("desiredAPIVersion");
    let (_, v) = post(&st, "/convert", &req).await;
    assert_eq!(v["response"]["result"]["status"], "Failure", "{v}");
    // Bytes that are not UTF-8 (a lone continuation byte inside a name):
    // refused as a whole, saying where the bytes stop being text.
    let mut bytes = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","metadata":{"name":"x"},"spec":{"modelRef":"m"}}]}}"#.to_vec();
    let at = bytes.iter().position(|&b| b == b'x').unwrap();
    bytes[at] = 0x80;
    let (status, v) = post_raw(&st, "/convert", bytes).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        failure_message(&v).contains(&format!(
            "invalid utf-8 sequence of 1 bytes from index {at}"
        )),
        "{v}"
    );
    // A repeated field of the envelope: refused, whichever copy a reader keeps.
    let repeated = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[],"objects":[0]}}"#;
    let (_, v) = post_raw(&st, "/convert", repeated.to_vec()).await;
    assert!(
        failure_message(&v).contains("duplicate field `objects`"),
        "{v}"
    );

    // A spec that does not decode in its version: the object is named,
    // with its version and the field.
    let mut req = fixture("convert-alpha-to-beta.json");
    req["request"]["objects"][2]["spec"]["replicas"] = json!("two");
    let (_, v) = post(&st, "/convert", &req).await;
    let message = failure_message(&v);
    let name = req["request"]["objects"][2]["metadata"]["name"]
        .as_str()
        .unwrap();
    assert!(
        message.starts_with(&format!(
            "failed to convert object 2 (\"{name}\") from \"infergate.dev/v1alpha1\""
        )) && message.contains("spec: invalid type"),
        "{message}"
    );
    // An object repeating its apiVersion: refused, whichever copy counts.
    let twice = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","apiVersion":"infergate.dev/v1beta1","spec":{"modelRef":"m"}}]}}"#;
    let (_, v) = post_raw(&st, "/convert", twice.to_vec()).await;
    assert!(
        failure_message(&v).contains("duplicate field `apiVersion`"),
        "{v}"
    );
    // `spec` and `status` before `apiVersion` (read as slices, decoded
    // once the version is known): converted all the same.
    let late = br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{"spec":{"modelRef":"m","replicas":2},"status":{"ready":true,"replicas":2},"kind":"InferenceService","apiVersion":"infergate.dev/v1alpha1","metadata":{"name":"late"}}]}}"#;
    let (_, v) = post_raw(&st, "/convert", late.to_vec()).await;
    assert_eq!(v["response"]["result"]["status"], "Success", "{v}");
    let converted = &v["response"]["convertedObjects"][0];
    assert_eq!(converted["spec"]["model"]["ref"], "m", "{v}");
    assert_eq!(
        converted["status"]["conditions"][0]["status"], "True",
        "{v}"
    );

    for body in [b"garbage".to_vec(), b"{}".to_vec()] {
        let (status, v) = post_raw(&st, "/convert", body).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!failure_message(&v).is_empty(), "{v}");
    }
}

/// A review of one v1alpha1 object whose `metadata` is `metadata`.
fn review_with_metadata(metadata: &str) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"u","desiredAPIVersion":"infergate.dev/v1beta1","objects":[{{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","metadata":{metadata},"spec":{{"modelRef":"m"}}}}]}}}}"#
    )
    .into_bytes()
}

#[tokio::test]
async fn metadata_is_checked_as_json_before_it_is_copied() {
    let st = state();
    // Copied as it came (the scanner checked it): escapes, nesting (as
    // deep as this test's own reader reads), text beyond ASCII.
    let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    let metadata = format!(
        r#"{{"name":"x","annotations":{{"a":"q\"uote\\d \u00e9 漢"}},"labels":{{"deep":{deep}}}}}"#
    );
    let (status, v) = post_raw(&st, "/convert", review_with_metadata(&metadata)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["response"]["result"]["status"], "Success", "{v}");
    let copied = &v["response"]["convertedObjects"][0]["metadata"];
    assert_eq!(copied["annotations"]["a"], "q\"uote\\d é 漢");
    assert_eq!(copied["name"], "x");
    // Not JSON, or deeper than the API server could have sent: refused,
    // saying what and where.
    for (metadata, says) in [
        (
            r#"{"name":"x","a":"\q"}"#.to_owned(),
            "invalid escape in a string at byte",
        ),
        (
            "{\"name\":\"x\u{1}\"}".to_owned(),
            "control character in a string at byte",
        ),
        (
            r#"{"name":"x",}"#.to_owned(),
            "expected a string key at byte",
        ),
        (r#"{"name":01}"#.to_owned(), "at byte"),
        ("[".repeat(20_000), "nested too deeply at byte"),
    ] {
        let (status, v) = post_raw(&st, "/convert", review_with_metadata(&metadata)).await;
        assert_eq!(status, StatusCode::OK);
        let message = failure_message(&v);
        assert!(
            message.starts_with(
                "failed to convert object 0 to \"infergate.dev/v1beta1\": invalid object: "
            ) && message.contains(says),
            "{message}"
        );
    }
}

// ---------------------------------------------------------------- probes

async fn get_probe(st: &Arc<AppState>, path: &str) -> (StatusCode, String) {
    let resp = server::probe_router(Arc::clone(st))
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn readiness_waits_for_tls_and_certificates_and_metrics_count_requests() {
    install_crypto_provider();
    let st = state();
    assert_eq!(get_probe(&st, "/healthz").await.0, StatusCode::OK);
    assert_eq!(
        get_probe(&st, "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    st.tls_bound.store(true, Ordering::Release);
    let (status, why) = get_probe(&st, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(why.contains("certificate"), "{why}");
    let (ca, leaf) = pki("test-ca");
    let _ = ca;
    st.resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .unwrap()
            .key,
    );
    assert_eq!(get_probe(&st, "/readyz").await.0, StatusCode::OK);

    review(&st, "/validate", &fixture("validate-create-invalid.json")).await;
    review(&st, "/mutate", &fixture("mutate-create-minimal.json")).await;
    post(&st, "/convert", &fixture("convert-alpha-to-beta.json")).await;
    let (status, text) = get_probe(&st, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for needle in [
        r#"infergate_admission_requests_total{webhook="validate",operation="CREATE",allowed="false"} 1"#,
        r#"infergate_admission_requests_total{webhook="mutate",operation="CREATE",allowed="true"} 1"#,
        r#"infergate_admission_duration_seconds_bucket{le="#,
        r#"infergate_conversion_objects_total{from="v1alpha1",to="v1beta1",result="success"} 2"#,
        r#"infergate_conversion_objects_total{from="v1beta1",to="v1beta1",result="success"} 1"#,
        r#"infergate_reconcile_total{result="success"} 0"#,
        "# TYPE infergate_reconcile_duration_seconds histogram",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

#[test]
fn policy_files_load_both_kinds_and_reject_other_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("policies.yaml");
    std::fs::write(
        &good,
        "apiVersion: infergate.dev/v1beta1\nkind: ClusterInferencePolicy\nmetadata: {name: platform}\nspec: {priority: 1}\n---\napiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata: {name: d, namespace: team-a}\nspec: {defaults: {replicas: 2}}\n",
    )
    .unwrap();
    let policies = load_policies(std::slice::from_ref(&good)).unwrap();
    assert_eq!(policies.cluster.len(), 1);
    assert_eq!(policies.namespaced.len(), 1);
    assert!(ClusterState::new(policies).is_synced());

    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .unwrap();
    let err = load_policies(&[bad]).unwrap_err().to_string();
    assert!(err.contains("ConfigMap"), "{err}");
    assert!(load_policies(&[dir.path().join("missing.yaml")]).is_err());
}

// ---------------------------------------------------------------- real TLS

struct Running {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start_tls(router: axum::Router, resolver: Arc<CertResolver>) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let cfg = tls::server_config(resolver).unwrap();
    let task = tokio::spawn(listener::serve_tls(
        listener,
        cfg,
        router,
        shutdown.clone(),
        Duration::from_secs(5),
        2,
    ));
    Running {
        addr,
        shutdown,
        task,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http1_and_h2_with_tls12_and_13() {
    install_crypto_provider();
    let (ca, leaf) = pki("test-ca");
    let st = state();
    st.resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .unwrap()
            .key,
    );
    let run = start_tls(server::router(Arc::clone(&st)), Arc::clone(&st.resolver)).await;
    let body = serde_json::to_vec(&fixture("validate-create-invalid.json")).unwrap();

    for tls12 in [false, true] {
        let (mut conn, _) = connect(run.addr, client_config(&[&ca], &[b"http/1.1"], tls12))
            .await
            .unwrap();
        for _ in 0..3 {
            let (status, bytes) = send(&mut conn, "/validate?timeout=10s", &body)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK);
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["response"]["allowed"], false);
        }
    }

    // ALPN h2 is offered and negotiated.
    let tcp = TcpStream::connect(run.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_config(&[&ca], &[b"h2"], false))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    h2.ready().await.unwrap();
    let resp = h2
        .send_request(
            Request::post("https://127.0.0.1/mutate")
                .body(http_body_util::Full::new(axum::body::Bytes::from(
                    serde_json::to_vec(&fixture("mutate-create-minimal.json")).unwrap(),
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);

    // An untrusting client fails the handshake; the server keeps serving.
    let (other_ca, _) = pki("test-ca");
    assert!(
        connect(run.addr, client_config(&[&other_ca], &[], false))
            .await
            .is_err()
    );
    assert!(
        connect(run.addr, client_config(&[&ca], &[], false))
            .await
            .is_ok()
    );

    run.shutdown.cancel();
    run.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_files_rotate_under_load_without_losing_a_request() {
    install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let cert_path = dir.path().join("tls.crt");
    let key_path = dir.path().join("tls.key");
    let (ca1, leaf1) = pki("test-ca");
    let (ca2, leaf2) = pki("test-ca");
    std::fs::write(&cert_path, &leaf1.cert).unwrap();
    std::fs::write(&key_path, &leaf1.key).unwrap();

    let st = state();
    let initial = tls::load_files(&cert_path, &key_path).unwrap();
    st.resolver.set(initial.key);
    let run = start_tls(server::router(Arc::clone(&st)), Arc::clone(&st.resolver)).await;
    let watcher = tokio::spawn(tls::watch_files(
        cert_path.clone(),
        key_path.clone(),
        Arc::clone(&st.resolver),
        st.admission.metrics.clone(),
        Duration::from_millis(100),
        run.shutdown.clone(),
    ));

    let body = Arc::new(serde_json::to_vec(&fixture("mutate-create-minimal.json")).unwrap());
    let trust_both = client_config(&[&ca1, &ca2], &[b"http/1.1"], false);
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    // Long-lived keep-alive connections (as the apiserver holds them) and
    // short-lived ones that handshake again and again.
    for w in 0..6 {
        let (body, cfg, ok, failed, stop) = (
            Arc::clone(&body),
            Arc::clone(&trust_both),
            Arc::clone(&ok),
            Arc::clone(&failed),
            stop.clone(),
        );
        let addr = run.addr;
        workers.push(tokio::spawn(async move {
            let mut conn = None;
            while !stop.is_cancelled() {
                if conn.is_none() || w % 2 == 1 {
                    conn = match connect(addr, Arc::clone(&cfg)).await {
                        Ok((c, _)) => Some(c),
                        Err(e) => {
                            eprintln!("connect failed: {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                    };
                }
                let Some(c) = conn.as_mut() else { continue };
                match send(c, "/mutate", &body).await {
                    Ok((StatusCode::OK, _)) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        eprintln!("request failed: {other:?}");
                        failed.fetch_add(1, Ordering::Relaxed);
                        conn = None;
                    }
                }
            }
        }));
    }

    // A connection opened before the rotation.
    let (mut old_conn, served_before) =
        connect(run.addr, client_config(&[&ca1], &[b"http/1.1"], false))
            .await
            .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Rotate: key first, then certificate (a half-written pair must not be served).
    std::fs::write(&key_path, &leaf2.key).unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    std::fs::write(&cert_path, &leaf2.cert).unwrap();

    // New handshakes get the new certificate.
    let mut rotated = false;
    for _ in 0..50 {
        if let Ok((_, served)) = connect(run.addr, client_config(&[&ca2], &[], false)).await {
            assert_ne!(served, served_before);
            rotated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(rotated, "the new certificate was never served");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    for w in workers {
        w.await.unwrap();
    }
    // The connection from before the rotation still works.
    let (status, _) = send(&mut old_conn, "/mutate", &body).await.unwrap();
    assert_eq!(status, StatusCode::OK);

    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok > 50, "too few requests under load: {ok}");
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
    let metrics = st.admission.metrics.encode().unwrap();
    assert!(
        metrics.contains("infergate_certificate_expiry_timestamp_seconds{certificate=\"serving\"}"),
        "{metrics}"
    );
    run.shutdown.cancel();
    run.task.await.unwrap().unwrap();
    watcher.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_accepting_and_drains_in_flight_requests() {
    install_crypto_provider();
    let (ca, leaf) = pki("test-ca");
    let resolver = Arc::new(CertResolver::new());
    resolver.set(
        tls::parse_pem_pair(leaf.cert.as_bytes(), leaf.key.as_bytes())
            .unwrap()
            .key,
    );
    let started = Arc::new(tokio::sync::Notify::new());
    let notify = Arc::clone(&started);
    let router = axum::Router::new().route(
        "/slow",
        axum::routing::post(move || {
            let notify = Arc::clone(&notify);
            async move {
                notify.notify_one();
                tokio::time::sleep(Duration::from_millis(700)).await;
                "done"
            }
        }),
    );
    let run = start_tls(router, Arc::clone(&resolver)).await;
    let cfg = client_config(&[&ca], &[b"http/1.1"], false);
    let (mut conn, _) = connect(run.addr, Arc::clone(&cfg)).await.unwrap();
    let in_flight = tokio::spawn(async move { send(&mut conn, "/slow", b"").await });
    started.notified().await;
    run.shutdown.cancel();
    let (status, body) = in_flight
        .await
        .unwrap()
        .expect("in-flight request completes");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, b"done");
    tokio::time::timeout(Duration::from_secs(5), run.task)
        .await
        .expect("server exits after draining")
        .unwrap()
        .unwrap();
    assert!(connect(run.addr, cfg).await.is_err(), "no longer accepting");
}

#[test]
fn a_mismatched_key_is_refused() {
    install_crypto_provider();
    let (_, leaf1) = pki("test-ca");
    let (_, leaf2) = pki("test-ca");
    assert!(tls::parse_pem_pair(leaf1.cert.as_bytes(), leaf2.key.as_bytes()).is_err());
    assert!(tls::parse_pem_pair(b"", leaf1.key.as_bytes()).is_err());
    assert!(tls::parse_pem_pair(leaf1.cert.as_bytes(), b"garbage").is_err());
}

#[test]
fn certs_command_writes_a_usable_pair() {
    install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    certs::write_bundle(
        dir.path(),
        &["infergate.infergate-system.svc".to_owned()],
        &["127.0.0.1".parse().unwrap()],
        Duration::from_secs(86400),
        false,
    )
    .unwrap();
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    assert!(
        !dir.path().join("ca.key").exists(),
        "the CA key is written only when asked"
    );
    let sc = tls::load_files(&dir.path().join("tls.crt"), &dir.path().join("tls.key")).unwrap();
    assert!(sc.not_after > jiff::Timestamp::now().as_second());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |f: &str| {
            std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(
            mode("tls.key"),
            0o600,
            "private keys are not world-readable"
        );
        // Files that existed world-readable become 0600 too.
        let again = tempfile::tempdir().unwrap();
        for f in ["tls.key", "ca.key"] {
            std::fs::write(again.path().join(f), "old").unwrap();
            std::fs::set_permissions(again.path().join(f), std::fs::Permissions::from_mode(0o644))
                .unwrap();
        }
        certs::write_bundle(
            again.path(),
            &["a.svc".to_owned()],
            &[],
            Duration::from_secs(86400),
            true,
        )
        .unwrap();
        for f in ["tls.key", "ca.key"] {
            let m = std::fs::metadata(again.path().join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(m, 0o600, "{f}");
            assert!(
                std::fs::read_to_string(again.path().join(f))
                    .unwrap()
                    .contains("PRIVATE KEY")
            );
        }
    }
}

// ---------------------------------------------------------------- registrations

#[test]
fn registrations_are_scoped_and_explicit() {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
        WebhookClientConfig,
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("webhooks");
    let m: MutatingWebhookConfiguration =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("mutating.yaml")).unwrap())
            .unwrap();
    let v: ValidatingWebhookConfiguration =
        serde_saphyr::from_str(&std::fs::read_to_string(dir.join("validating.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        m.metadata.name.as_deref(),
        Some(infergate::webhook::tls::selfsigned::MUTATING_WEBHOOK_CONFIGURATION)
    );
    assert_eq!(
        v.metadata.name.as_deref(),
        Some(infergate::webhook::tls::selfsigned::VALIDATING_WEBHOOK_CONFIGURATION)
    );

    let check = |name: &str,
                 versions: &[String],
                 side: &str,
                 timeout: Option<i32>,
                 failure: Option<&str>,
                 matching: Option<&str>,
                 cc: &WebhookClientConfig,
                 rules: &[RuleWithOperations],
                 path: &str| {
        assert_eq!(versions, ["v1"], "{name}");
        assert_eq!(side, "None", "{name}");
        assert!(
            timeout.is_some_and(|t| (1..=10).contains(&t)),
            "{name}: explicit timeoutSeconds"
        );
        assert_eq!(failure, Some("Fail"), "{name}");
        assert_eq!(matching, Some("Equivalent"), "{name}");
        let svc = cc.service.as_ref().expect("service reference");
        assert_eq!(svc.path.as_deref(), Some(path), "{name}");
        assert_eq!(svc.name, infergate::crdgen::SERVICE_NAME);
        assert_eq!(svc.namespace, infergate::crdgen::SERVICE_NAMESPACE);
        assert!(!rules.is_empty());
        for r in rules {
            assert_eq!(
                r.api_groups.as_deref(),
                Some(&["infergate.dev".to_owned()][..]),
                "{name}"
            );
            assert_eq!(
                r.api_versions.as_deref(),
                Some(&["v1beta1".to_owned()][..]),
                "{name}"
            );
            let ops = r.operations.clone().unwrap_or_default();
            assert_eq!(ops, ["CREATE", "UPDATE"], "{name}");
            for res in r.resources.iter().flatten() {
                assert!(
                    [
                        "inferenceservices",
                        "clusterinferencepolicies",
                        "inferencepolicies"
                    ]
                    .contains(&res.as_str()),
                    "{name}: {res} is not an infergate kind"
                );
            }
        }
    };
    // Mutating and validating webhooks share these fields but no type.
    macro_rules! check {
        ($w:expr, $path:expr) => {
            check(
                &$w.name,
                &$w.admission_review_versions,
                &$w.side_effects,
                $w.timeout_seconds,
                $w.failure_policy.as_deref(),
                $w.match_policy.as_deref(),
                &$w.client_config,
                $w.rules.as_deref().unwrap_or_default(),
                $path,
            )
        };
    }
    let mw = m.webhooks.unwrap();
    assert_eq!(mw.len(), 1);
    for w in &mw {
        assert_eq!(w.reinvocation_policy.as_deref(), Some("IfNeeded"));
        check!(w, "/mutate");
    }
    let vw = v.webhooks.unwrap();
    let mut resources: Vec<String> = vw
        .iter()
        .flat_map(|w| {
            w.rules
                .iter()
                .flatten()
                .flat_map(|r| r.resources.clone().unwrap_or_default())
        })
        .collect();
    resources.sort();
    assert_eq!(
        resources,
        [
            "clusterinferencepolicies",
            "inferencepolicies",
            "inferenceservices"
        ]
    );
    for w in &vw {
        check!(w, "/validate");
    }
}

// ---------------------------------------------------------------- serve without a cluster

/// Files for `serve` in `dir`: a fresh certificate pair and `policy.yaml`
/// with defaults for team-a; returns the CA.
fn write_serve_files(dir: &Path) -> PemPair {
    let (ca, leaf) = pki("test-ca");
    write_pair(dir, &leaf);
    std::fs::write(
        dir.join("policy.yaml"),
        format!(
            "apiVersion: infergate.dev/v1beta1\nkind: InferencePolicy\nmetadata: {{name: defaults, namespace: team-a}}\nspec: {{defaults: {{replicas: 4, engine: {{image: {ENGINE_IMAGE}}}}}}}\n"
        ),
    )
    .unwrap();
    ca
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_without_a_cluster_from_policy_files() {
    install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let (port, probe) = (free_port().unwrap(), free_port().unwrap());
    let ca = write_serve_files(dir.path());
    let cert = std::fs::read(dir.path().join("tls.crt")).unwrap();
    let policy = dir.path().join("policy.yaml");
    let server = Serve::start(
        support::serve_args(port, probe, dir.path(), vec![policy]),
        None,
    );
    wait_readyz(probe, Duration::from_secs(5)).await;

    // Admission over TLS with the defaults of the policy file.
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (mut conn, _) = connect(addr, client_config(&[&ca], &[b"http/1.1"], false))
        .await
        .unwrap();
    let req = fixture("mutate-create-minimal.json");
    let (status, body) = send(
        &mut conn,
        "/mutate?timeout=10s",
        &serde_json::to_vec(&req).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let out = apply(
        req["request"]["object"].clone(),
        &decode_patch(&v["response"]).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 4, "{out}");
    assert_eq!(out["spec"]["engine"]["image"], ENGINE_IMAGE, "{out}");

    // The certificate from the files is exported.
    let (_, metrics) = http_get(probe, "/metrics").await.unwrap();
    assert!(
        metrics.contains("infergate_certificate_expiry_timestamp_seconds{certificate=\"serving\"}"),
        "{metrics}"
    );
    let not_after = tls::pem_validity(&cert).unwrap().1;
    assert!(metrics.contains(&not_after.to_string()), "{metrics}");

    let result = server
        .stop(Duration::from_secs(10))
        .await
        .expect("serve returns after shutdown");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        http_get(probe, "/healthz").await.is_err(),
        "probe listener closed"
    );
}

#[test]
fn the_binary_drains_and_exits_zero_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (port, probe) = (free_port().unwrap(), free_port().unwrap());
    let ca = write_serve_files(dir.path());
    let mut child = std::process::Command::new(binary())
        .args(["serve", "--no-reconcile", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--probe-listen")
        .arg(format!("127.0.0.1:{probe}"))
        .arg("--tls-cert-file")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.path().join("tls.key"))
        .arg("--policy-file")
        .arg(dir.path().join("policy.yaml"))
        .args(["--drain-period", "2s"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ready = rt.block_on(async {
        for _ in 0..200 {
            if let Ok((200, _)) = http_get(probe, "/readyz").await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    if !ready {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!("not ready: {}", String::from_utf8_lossy(&out.stderr));
    }
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // Draining: not ready at once, the webhooks still answer (HTTP/1.1
    // with `Connection: close`), then the process exits.
    let signalled = std::time::Instant::now();
    rt.block_on(async {
        let mut not_ready = false;
        for _ in 0..40 {
            if let Ok((503, why)) = http_get(probe, "/readyz").await {
                assert!(why.contains("shutting down"), "{why}");
                not_ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(not_ready, "/readyz still 200 after SIGTERM");
        let body = serde_json::to_vec(&fixture("validate-create-invalid.json")).unwrap();
        let (mut conn, _) = connect(
            ([127, 0, 0, 1], port).into(),
            client_config(&[&ca], &[b"http/1.1"], false),
        )
        .await
        .unwrap();
        let (status, headers, answer) = send_with_headers(&mut conn, "/validate", &body)
            .await
            .unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
        assert_eq!(
            headers.get("connection").map(|v| v.to_str().unwrap()),
            Some("close"),
            "draining answers close HTTP/1.1 connections"
        );
        assert!(signalled.elapsed() < Duration::from_secs(2));
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let log = String::from_utf8_lossy(&out.stderr);
            assert!(code.success(), "exit {code}: {log}");
            assert!(log.contains("SIGTERM"), "{log}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Editing the version while a rollout of another one is under way is
/// admitted with a warning that it restarts from the first step.
#[tokio::test]
async fn a_new_version_mid_rollout_is_admitted_with_a_restart_warning() {
    let st = state();
    let spec = |model: &str| {
        json!({
            "model": {"ref": model},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "backend": "Deployment",
            "rollout": {"strategy": "Canary", "steps": [10, 30, 60], "interval": "5m"}
        })
    };
    let version = |model: &str| json!({"model": {"ref": model}, "engineImage": "registry.example.com/vllm:0.9"});
    let mut req = fixture("validate-update-backend.json");
    req["request"]["requestKind"] = req["request"]["kind"].clone();
    req["request"]["object"]["spec"] = spec("v3");
    req["request"]["oldObject"]["spec"] = spec("v2");
    req["request"]["oldObject"]["status"] = json!({"rollout": {
        "phase": "Progressing", "step": 1, "weight": 30,
        "stable": version("v1"), "target": version("v2")}});
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    let warnings: Vec<&str> = resp["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("restarts from the first step")
                && w.contains("\"v2\" (step 2 of 3)")
                && w.contains("\"v3\"")),
        "{warnings:?}"
    );
    // Finishing the same target: no warning.
    req["request"]["object"]["spec"] = spec("v2");
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp["warnings"].is_null(), "{resp}");
}
