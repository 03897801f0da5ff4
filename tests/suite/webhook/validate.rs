//! `/validate`: field errors all at once, immutable fields, deletes,
//! policies that warn or deny, routes another service owns, a new version
//! mid-rollout, and the answer of the common review as the typed steps
//! give it.

use infergate::api::ClusterInferencePolicy;
use infergate::api::v1beta1::InferenceService;
use infergate::engine::PolicySnapshot;
use infergate::state::ClusterState;
use serde_json::{Value, json};

use crate::support::{
    ENGINE_IMAGE, causes, review, review_fixture, webhook_state, webhook_state_with,
};

/// `/validate` answers the common review (a v1beta1 InferenceService
/// CREATE or UPDATE) as the typed steps do, byte for byte: allowed, denied
/// with field errors, an UPDATE against the stored object, and without a
/// request namespace.
#[test]
fn validation_answers_like_decode_validate_encode() {
    let st = webhook_state();
    let admission = &st.admission;
    let invalid = review_fixture("validate-create-invalid.json");
    let mut valid = review_fixture("mutate-create-minimal.json");
    valid["request"]["object"]["spec"]["engine"]["image"] = json!("registry.example.com/vllm:0.9");
    let mut update = review_fixture("validate-update-backend.json");
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

#[tokio::test]
async fn validate_reports_every_field_error_at_once() {
    let st = webhook_state();
    let req = review_fixture("validate-create-invalid.json");
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
    let st = webhook_state();
    let req = review_fixture("validate-update-backend.json");
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
    let st = webhook_state();
    let resp = review(&st, "/validate", &review_fixture("validate-delete.json")).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp.get("patch").is_none());
    let resp = review(&st, "/mutate", &review_fixture("validate-delete.json")).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    assert!(resp.get("patch").is_none());
}

#[tokio::test]
async fn validate_denies_inconsistent_cluster_policy() {
    let st = webhook_state();
    let resp = review(
        &st,
        "/validate",
        &review_fixture("validate-cluster-policy-invalid.json"),
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
    let st = webhook_state_with(ClusterState::new(PolicySnapshot {
        cluster: vec![warn.clone()],
        namespaced: vec![],
    }));
    let mut req = review_fixture("validate-create-invalid.json");
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
    let st = webhook_state_with(cache);
    let mut req = review_fixture("validate-create-invalid.json");
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

/// Editing the version while a rollout of another one is under way is
/// admitted with a warning that it restarts from the first step.
#[tokio::test]
async fn a_new_version_mid_rollout_is_admitted_with_a_restart_warning() {
    let st = webhook_state();
    let spec = |model: &str| {
        json!({
            "model": {"ref": model},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "backend": "Deployment",
            "rollout": {"strategy": "Canary", "steps": [10, 30, 60], "interval": "5m"}
        })
    };
    let version = |model: &str| json!({"model": {"ref": model}, "engineImage": "registry.example.com/vllm:0.9"});
    let mut req = review_fixture("validate-update-backend.json");
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

/// A service write that adds a reference to a Secret waits for its access
/// review, through the router as the API server calls it: a server without
/// an API server to ask denies it (fails closed) with the field named, and
/// only after every other rule passed; the same service without the
/// reference is admitted without a review.
#[tokio::test]
async fn a_reference_the_server_cannot_review_is_denied_with_its_field() {
    let st = webhook_state();
    let mut req = review_fixture("mutate-create-minimal.json");
    req["request"]["userInfo"] = json!({"username": "alice", "groups": ["team-a"]});
    let object = &mut req["request"]["object"]["spec"];
    object["engine"]["image"] = json!(ENGINE_IMAGE);
    let plain = req.clone();
    req["request"]["object"]["spec"]["engine"]["env"] = json!([
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    ]);
    let resp = review(&st, "/validate", &req).await;
    assert_eq!(resp["allowed"], false, "{resp}");
    assert_eq!(resp["status"]["code"], 422, "{resp}");
    assert_eq!(
        causes(&resp),
        ["spec.engine.env[0].valueFrom.secretKeyRef.name"]
    );
    let message = resp["status"]["message"].as_str().unwrap();
    assert!(
        message
            .contains("could not check whether user \"alice\" may get secrets for Secret \"hf\"")
            && message.contains("infergate fails closed"),
        "{message}"
    );
    assert_eq!(
        resp["status"]["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );
    let resp = review(&st, "/validate", &plain).await;
    assert_eq!(resp["allowed"], true, "{resp}");
}
