use serde_json::{Value, json};

use super::*;

/// A Deployment as the API server sends it, with everything the watch
/// does not keep.
fn deployment_json(generation: i64, status: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
            "generation": generation, "creationTimestamp": "2026-11-25T10:00:00Z",
            "labels": {"app.kubernetes.io/managed-by": "infergate"},
            "annotations": {ANNOTATION_APPLIED: "d1", "deployment.kubernetes.io/revision": "2"},
            "finalizers": ["x/y"],
            "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                 "name": "chat", "uid": "svc-uid", "controller": true}],
            "managedFields": [{"manager": "infergate", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "chat"}},
            "template": {"metadata": {"labels": {"app": "chat"}},
                         "spec": {"containers": [{"name": "engine", "image": "vllm"}]}}
        },
        "status": status
    })
}

fn kept_metadata_json() -> Value {
    json!({
        "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
        "generation": 3,
        "annotations": {ANNOTATION_APPLIED: "d1"},
        "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                             "name": "chat", "uid": "svc-uid", "controller": true}]
    })
}

#[test]
fn a_watched_deployment_keeps_its_metadata_replicas_and_counts_only() {
    let full = deployment_json(
        3,
        json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
               "readyReplicas": 1, "availableReplicas": 1,
               "conditions": [{"type": "Available", "status": "False"}]}),
    );
    let w: WatchedDeployment = serde_json::from_value(full.clone()).expect("decodes");
    let metadata: ObjectMeta = serde_json::from_value(kept_metadata_json()).expect("meta");
    assert_eq!(
        w,
        WatchedDeployment {
            metadata,
            spec: Some(DeploymentSpecKept {
                replicas: Some(2),
                engine: Some(engine_fingerprint(Some("vllm"), None)),
            }),
            status: Some(DeploymentCounts {
                observed_generation: Some(3),
                replicas: Some(2),
                updated_replicas: Some(2),
                ready_replicas: Some(1),
            }),
        }
    );
    // An apply's answer becomes the same as the watch's decode.
    let d: Deployment = serde_json::from_value(full).expect("deployment");
    assert_eq!(WatchedDeployment::of(&d), w);
    assert_eq!(watched_of::<_, WatchedDeployment>(&d).expect("watched"), w);
    assert_eq!(
        (w.desired(), w.ready(), w.updated(), w.total()),
        (2, 1, 2, 2)
    );
    assert!(w.observed() && !w.complete());
}

#[test]
fn a_watched_deployment_knows_which_engine_it_runs_without_its_template() {
    let full = deployment_json(1, Value::Null);
    let w: WatchedDeployment = serde_json::from_value(full.clone()).expect("decodes");
    let d: Deployment = serde_json::from_value(full).expect("deployment");
    assert!(w.runs(&d), "the same template");
    let with = |image: &str, args: Option<Vec<&str>>| {
        let mut other = d.clone();
        let c = &mut other
            .spec
            .as_mut()
            .expect("spec")
            .template
            .spec
            .as_mut()
            .expect("pod")
            .containers[0];
        c.image = Some(image.to_owned());
        c.args = args.map(|a| a.into_iter().map(str::to_owned).collect());
        other
    };
    assert!(w.runs(&with("vllm", None)));
    assert!(!w.runs(&with("vllm:0.10", None)), "another image");
    assert!(
        !w.runs(&with("vllm", Some(vec!["--model", "b"]))),
        "other arguments"
    );
    let args = with("vllm", Some(vec!["--model", "a"]));
    assert!(WatchedDeployment::of(&args).runs(&args));
    assert!(!WatchedDeployment::of(&args).runs(&with("vllm", Some(vec!["--model", "b"]))));
    // Without containers nothing is known to run, not even "nothing".
    let mut empty = d.clone();
    empty.spec.as_mut().expect("spec").template.spec = None;
    assert!(!WatchedDeployment::of(&empty).runs(&empty));
    let decoded: WatchedDeployment =
        serde_json::from_value(serde_json::to_value(&empty).expect("json")).expect("decodes");
    assert!(!decoded.runs(&empty));
}

#[test]
fn a_deployment_signals_readiness_not_the_controllers_bookkeeping() {
    let watched = |generation, status| -> WatchedDeployment {
        serde_json::from_value(deployment_json(generation, status)).expect("decodes")
    };
    // Just created: no status yet.
    let created = watched(1, Value::Null);
    assert_eq!(created.signal(), (2, 0, false));
    assert!(!created.observed());
    // The controller has seen it and made the pods: nothing new.
    let seen = watched(
        1,
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
               "unavailableReplicas": 2}),
    );
    assert_eq!(seen.signal(), created.signal());
    // A pod is ready: news.
    let one = watched(
        1,
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}),
    );
    assert_ne!(one.signal(), seen.signal());
    // Both ready: complete.
    let all = watched(
        1,
        json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}),
    );
    assert_eq!(all.signal(), (2, 2, true));
    // Ready pods of an older template left: not complete.
    let old_left = watched(
        1,
        json!({"observedGeneration": 1, "replicas": 3, "updatedReplicas": 2, "readyReplicas": 2}),
    );
    assert_eq!(old_left.signal(), (2, 2, false));
}

#[test]
fn metadata_only_kinds_keep_what_the_reconciler_reads() {
    use k8s_openapi::api::core::v1::Service;
    let w: WatchedMeta<Service> = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": deployment_json(3, Value::Null)["metadata"].clone(),
        "spec": {"ports": [{"port": 80}]}
    }))
    .expect("decodes");
    assert_eq!(
        serde_json::to_value(&w.metadata).expect("json"),
        kept_metadata_json()
    );
    assert_eq!(WatchedMeta::<Service>::kind(&()), "Service");
    assert_eq!(WatchedMeta::<Service>::plural(&()), "services");
    // A child without the annotation keeps no empty map.
    let bare: WatchedMeta<Service> =
        serde_json::from_value(json!({"metadata": {"name": "x", "annotations": {"a": "b"}}}))
            .expect("decodes");
    assert_eq!(bare.metadata.annotations, None);
}

#[test]
fn trimming_metadata_keeps_what_the_reconciler_reads() {
    let mut meta: ObjectMeta =
        serde_json::from_value(deployment_json(3, Value::Null)["metadata"].clone())
            .expect("metadata");
    meta.deletion_timestamp = serde_json::from_value(json!("2026-11-25T11:00:00Z")).ok();
    keep_what_the_reconciler_reads(&mut meta);
    let mut want = kept_metadata_json();
    want["deletionTimestamp"] = json!("2026-11-25T11:00:00Z");
    assert_eq!(serde_json::to_value(&meta).expect("json"), want);
}

#[test]
fn a_route_is_kept_without_its_spec_and_signals_its_status() {
    let route = |accepted: &str| -> HTTPRoute {
        let mut r: HTTPRoute = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": deployment_json(1, Value::Null)["metadata"].clone(),
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "chat", "port": 8000}]}]},
            "status": {"parents": [{"parentRef": {"name": "gw"}, "controllerName": "example.com/gw",
                         "conditions": [{"type": "Accepted", "status": accepted, "reason": "R",
                                         "message": "m", "lastTransitionTime": "2026-11-25T10:00:00Z"}]}]}
        }))
        .expect("route");
        r.trim();
        r
    };
    let accepted = route("True");
    assert_eq!(accepted.spec, Default::default());
    assert!(accepted.metadata.managed_fields.is_none() && accepted.metadata.labels.is_none());
    assert_eq!(accepted.status.as_ref().map(|s| s.parents.len()), Some(1));
    assert_ne!(accepted.signal(), route("False").signal());
    assert_eq!(accepted.signal(), route("True").signal());
}
