//! `/mutate`: defaults filled with their provenance, a patch that only
//! adds, policies' defaults and their namespace selectors, and the answer
//! of the common request as the typed steps give it.

use std::collections::BTreeMap;

use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::PolicySnapshot;
use infergate::state::ClusterState;
use serde_json::json;

use crate::support::{
    ENGINE_IMAGE, apply_patch, decode_patch, review, review_fixture, webhook_state,
    webhook_state_with, with_object,
};

#[tokio::test]
async fn mutate_fills_every_default_with_provenance() {
    let st = webhook_state();
    let req = review_fixture("mutate-create-minimal.json");
    let resp = review(&st, "/mutate", &req).await;
    assert_eq!(resp["allowed"], true, "{resp}");
    let patch = decode_patch(&resp).expect("a minimal service gets a patch");
    let out = apply_patch(req["request"]["object"].clone(), &patch);
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
    let st = webhook_state();
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
    let req = with_object(review_fixture("mutate-create-minimal.json"), object.clone());
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
    let out = apply_patch(object.clone(), &patch);
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
    let st = webhook_state();
    let admission = &st.admission;
    let minimal = review_fixture("mutate-create-minimal.json");
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

#[tokio::test]
async fn mutate_takes_policy_defaults_and_sees_policy_changes_without_restart() {
    let st = webhook_state();
    let policy: InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "defaults", "namespace": "team-a"},
        "spec": {"defaults": {"replicas": 3}}
    }))
    .unwrap();
    let req = review_fixture("mutate-create-minimal.json");

    let before = review(&st, "/mutate", &req).await;
    let out = apply_patch(
        req["request"]["object"].clone(),
        &decode_patch(&before).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 1);

    st.admission.state.set_policies(PolicySnapshot {
        cluster: vec![],
        namespaced: vec![policy],
    });
    let after = review(&st, "/mutate", &req).await;
    let out = apply_patch(
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
    let st = webhook_state();
    let mut policy = review_fixture("validate-cluster-policy-invalid.json");
    let resp = review(&st, "/mutate", &policy).await;
    assert_eq!(resp["allowed"], true);
    assert!(resp.get("patch").is_none());
    policy["request"]["operation"] = json!("DELETE");
    let resp = review(&st, "/validate", &policy).await;
    assert_eq!(resp["allowed"], true);
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
    let st = webhook_state_with(cache);
    let req = review_fixture("mutate-create-minimal.json");
    let resp = review(&st, "/mutate", &req).await;
    let out = apply_patch(
        req["request"]["object"].clone(),
        &decode_patch(&resp).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 1, "team-a is not prod yet");
    st.admission.state.set_namespace_labels(
        "team-a",
        BTreeMap::from([("tier".to_owned(), "prod".to_owned())]),
    );
    let resp = review(&st, "/mutate", &req).await;
    let out = apply_patch(
        req["request"]["object"].clone(),
        &decode_patch(&resp).unwrap(),
    );
    assert_eq!(out["spec"]["replicas"], 5, "{out}");
}
