//! Every admission answer byte for byte against the recorded ones in
//! `tests/fixtures/webhook/answers.json`.

use std::collections::BTreeMap;
use std::path::Path;

use infergate::api::ClusterInferencePolicy;
use infergate::engine::PolicySnapshot;
use infergate::state::ClusterState;
use serde_json::{Value, json};

use crate::reviews;
use crate::support::{ENGINE_IMAGE, review_fixture, webhook_state, webhook_state_with};

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
    let minimal = review_fixture("mutate-create-minimal.json");
    let invalid = review_fixture("validate-create-invalid.json");
    let backend = review_fixture("validate-update-backend.json");
    let cluster_policy = review_fixture("validate-cluster-policy-invalid.json");
    let delete = review_fixture("validate-delete.json");
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
        "metrics": {"port": 8000, "path": "/metrics", "interval": "30s"},
        "rollout": {"onFullPool": "Replace", "maxUnavailable": 1}
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
    let plain = webhook_state();
    let layered = webhook_state_with(ClusterState::new(layered_policies()));
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
