//! Conversion cases the properties cannot say on their own: kubectl-shaped
//! metadata, the streaming path reading metadata when a stash may be
//! involved (escaped names, an empty map), v1alpha1 autoscaling and Ready,
//! edits through the old version, a stale stash, what cannot be converted,
//! unknown metadata kept verbatim, and the full-pool fields.

use infergate::api::conversion::{self, V1ALPHA1, V1BETA1};
use infergate::api::rollout::{
    CanaryOnFullPool, RolloutCanarySpec, RolloutOnFullPool, RolloutSpec, RolloutStrategy,
};
use infergate::api::v1beta1::{AcceleratorSpec, AutoscalingSpec, CanarySpec, ModelSpec};
use infergate::api::{AcceleratorType, CONVERSION_DATA_ANNOTATION, v1alpha1};

use super::valid_service;

/// A kubectl-shaped object (managed fields, last-applied configuration,
/// owner references, finalizers) converts down and up with its metadata
/// intact, the conversion annotation aside, and round-trips exactly.
#[test]
fn kubectl_shaped_metadata_survives_conversion() {
    let object = serde_json::json!({
        "apiVersion": V1BETA1, "kind": "InferenceService",
        "metadata": {
            "name": "chat", "namespace": "team-a", "uid": "0000-1111", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-11-21T12:00:00Z",
            "labels": {"team": "a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"model\":{\"ref\":\"m\"}}}"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "2222"}],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": V1BETA1,
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:model": {}}}}]
        },
        "spec": {"model": {"ref": "m", "image": "registry.example.com/w:1"}, "replicas": 2,
                 "canary": {"model": {"ref": "c"}, "weight": 10, "engineImage": "registry.example.com/e:2"},
                 "routing": {"requestTimeout": "10m"}}
    });
    let down = conversion::convert(object.clone(), V1ALPHA1).unwrap();
    assert_eq!(down["apiVersion"], V1ALPHA1);
    let mut meta = down["metadata"].clone();
    let annotations = meta["annotations"].as_object_mut().unwrap();
    assert!(
        annotations
            .remove(infergate::api::CONVERSION_DATA_ANNOTATION)
            .is_some(),
        "v1alpha1 cannot say everything: {down}"
    );
    assert_eq!(meta, object["metadata"], "metadata kept verbatim");
    let up = conversion::convert(down, V1BETA1).unwrap();
    assert_eq!(up, object);
}

/// The streaming path copies metadata without reading it only when no key
/// can be the conversion annotation: a stash under a `\u`-escaped name, or
/// one to add to an empty `annotations` map, is handled as the typed path
/// handles it; metadata with nothing to stash comes back byte for byte.
#[test]
fn the_streaming_path_reads_metadata_whenever_a_stash_may_be_involved() {
    use infergate::webhook::conversion::convert_object;
    let beta = serde_json::json!({
        "apiVersion": V1BETA1, "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "annotations": {}},
        "spec": {"model": {"ref": "m", "image": "registry.example.com/w:1"}}
    });
    // v1alpha1 cannot hold the image: a stash is added to the empty map.
    let expected = conversion::convert(beta.clone(), V1ALPHA1).unwrap();
    let streamed = convert_object(&beta.to_string(), V1ALPHA1).unwrap();
    let streamed: serde_json::Value = serde_json::from_slice(&streamed).unwrap();
    assert_eq!(streamed, expected);
    let back = convert_object(&streamed.to_string(), V1BETA1).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(back, beta, "the empty map survives the round trip");

    // The stash under an escaped spelling of its name is still found.
    let stashed = streamed.to_string();
    let escaped = stashed.replace(
        "\"infergate.dev/conversion-data\"",
        "\"\\u0069nfergate.dev\\/conversion-data\"",
    );
    assert_ne!(escaped, stashed);
    let back = convert_object(&escaped, V1BETA1).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(back, beta);
    // Also when no byte of the metadata spells the name as it is.
    let hidden = stashed.replace(
        "\"infergate.dev/conversion-data\"",
        "\"infergate.dev/conversion\\u002ddata\"",
    );
    assert!(!hidden.contains("conversion-data"), "{hidden}");
    let back = convert_object(&hidden, V1BETA1).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(back, beta);

    // Nothing to stash: metadata is copied as it was written.
    let text = r#"{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","metadata": { "name" : "chat","labels":{"a\/b":"c"} },"spec":{"modelRef":"m"}}"#;
    let up = convert_object(text, V1BETA1).unwrap();
    let up = String::from_utf8(up).unwrap();
    assert!(
        up.contains(r#""metadata":{ "name" : "chat","labels":{"a\/b":"c"} }"#),
        "{up}"
    );
}

#[test]
fn alpha_autoscaling_and_ready_mapping() {
    let mut a = v1alpha1::InferenceService::new(
        "chat",
        v1alpha1::InferenceServiceSpec {
            model_ref: "m".to_owned(),
            replicas: Some(2),
            min_replicas: Some(1),
            max_replicas: Some(8),
            canary: Some(v1alpha1::CanarySpec {
                model_ref: "c".to_owned(),
                weight: 10,
            }),
            ..Default::default()
        },
    );
    a.status = Some(v1alpha1::InferenceServiceStatus {
        ready: Some(true),
        replicas: Some(2),
        message: Some("all replicas ready".to_owned()),
    });
    let b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(
        b.spec.autoscaling,
        Some(AutoscalingSpec {
            min_replicas: 1,
            max_replicas: 8,
            target_cpu_utilization_percent: None
        })
    );
    assert_eq!(b.spec.model.r#ref, "m");
    assert_eq!(b.spec.canary.as_ref().map(|c| c.weight), Some(10));
    let st = b.status.as_ref().unwrap();
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.message, "all replicas ready");
    // Everything v1alpha1 says, v1beta1 can say: no annotation needed.
    assert!(b.metadata.annotations.is_none());

    // minReplicas 0 means no autoscaling; the values survive in the annotation.
    a.spec.min_replicas = Some(0);
    let b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(b.spec.autoscaling, None);
    assert!(
        b.metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(CONVERSION_DATA_ANNOTATION)
    );
    assert_eq!(conversion::to_v1alpha1(&b).unwrap(), a);
}

#[test]
fn edits_through_the_old_version_are_kept() {
    let mut b = valid_service();
    b.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "c".to_owned(),
            image: Some("registry.example.com/c:1".to_owned()),
            ..Default::default()
        },
        engine_image: Some("registry.example.com/e:2".to_owned()),
        weight: 10,
        replicas: Some(2),
        on_full_pool: Some(CanaryOnFullPool::Borrow),
    });
    b.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::Nvidia),
        class: None,
    });
    let mut a = conversion::to_v1alpha1(&b).unwrap();
    // a v1alpha1 client changes the weight and the model
    if let Some(c) = a.spec.canary.as_mut() {
        c.weight = 30;
    }
    a.spec.model_ref = "new-model".to_owned();
    let up = conversion::to_v1beta1(&a).unwrap();
    let c = up.spec.canary.as_ref().unwrap();
    assert_eq!(c.weight, 30, "the edit is kept");
    assert_eq!(up.spec.model.r#ref, "new-model");
    assert_eq!(c.engine_image, b.spec.canary.as_ref().unwrap().engine_image);
    assert_eq!(c.replicas, Some(2));
    assert_eq!(c.on_full_pool, Some(CanaryOnFullPool::Borrow));
    assert_eq!(up.spec.accelerator, b.spec.accelerator);
    assert!(up.metadata.annotations.is_none());
    // a v1alpha1 client removes the canary: nothing of it comes back
    let mut a = conversion::to_v1alpha1(&b).unwrap();
    a.spec.canary = None;
    let up = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(up.spec.canary, None);
}

#[test]
fn stale_stash_does_not_override_an_edit() {
    // v1alpha1 minReplicas 0 / maxReplicas 5 cannot be said in v1beta1 ...
    let a = v1alpha1::InferenceService::new(
        "chat",
        v1alpha1::InferenceServiceSpec {
            model_ref: "m".to_owned(),
            min_replicas: Some(0),
            max_replicas: Some(5),
            ..Default::default()
        },
    );
    let mut b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(b.spec.autoscaling, None);
    // ... then a v1beta1 client turns autoscaling on:
    b.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 2,
        max_replicas: 3,
        target_cpu_utilization_percent: None,
    });
    let down = conversion::to_v1alpha1(&b).unwrap();
    assert_eq!(
        down.spec.min_replicas,
        Some(2),
        "the edit wins over the stash"
    );
    assert_eq!(down.spec.max_replicas, Some(3));
    // without the edit the stash restores the original
    let b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(conversion::to_v1alpha1(&b).unwrap(), a);
}

#[test]
fn convert_rejects_what_it_cannot_convert() {
    let b = serde_json::to_value(valid_service()).unwrap();
    assert!(conversion::convert(b.clone(), "infergate.dev/v2").is_err());
    let mut other = b.clone();
    other["kind"] = "ClusterInferencePolicy".into();
    assert!(conversion::convert(other, V1ALPHA1).is_err());
    let mut bad = b.clone();
    bad["metadata"]["annotations"] = serde_json::json!({ CONVERSION_DATA_ANNOTATION: "{not json" });
    assert!(conversion::convert(bad, V1ALPHA1).is_err());
    // same version: untouched
    assert_eq!(conversion::convert(b.clone(), V1BETA1).unwrap(), b);
}

#[test]
fn convert_keeps_unknown_metadata_verbatim() {
    let mut b = serde_json::to_value(valid_service()).unwrap();
    b["metadata"]["managedFields"] =
        serde_json::json!([{"manager": "kubectl", "operation": "Apply"}]);
    b["metadata"]["resourceVersion"] = "42".into();
    b["spec"]["accelerator"] = serde_json::json!({"type": "amd"});
    let a = conversion::convert(b.clone(), V1ALPHA1).unwrap();
    let mut meta = a["metadata"].clone();
    assert!(meta["annotations"][CONVERSION_DATA_ANNOTATION].is_string());
    meta.as_object_mut().unwrap().remove("annotations");
    assert_eq!(meta, b["metadata"]);
    assert_eq!(conversion::convert(a, V1BETA1).unwrap(), b);
}

/// The full-pool fields, which v1alpha1 cannot say, wait in the stash on
/// the way down and come back on the way up; a v1alpha1 edit of the canary
/// keeps its onFullPool, and removing the canary drops it.
#[test]
fn full_pool_fields_survive_the_old_version() {
    let mut b = valid_service();
    b.spec.replicas = Some(3);
    b.spec.rollout = Some(RolloutSpec {
        strategy: Some(RolloutStrategy::Immediate),
        on_full_pool: Some(RolloutOnFullPool::Wait),
        max_unavailable: Some(2),
        canary: Some(RolloutCanarySpec {
            on_full_pool: Some(CanaryOnFullPool::Borrow),
        }),
        ..RolloutSpec::default()
    });
    b.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "c".to_owned(),
            image: None,
            ..Default::default()
        },
        weight: 10,
        on_full_pool: Some(CanaryOnFullPool::Borrow),
        ..CanarySpec::default()
    });
    let a = conversion::to_v1alpha1(&b).unwrap();
    let stash = &a.metadata.annotations.as_ref().unwrap()[CONVERSION_DATA_ANNOTATION];
    for pointer in ["/spec/rollout", "/spec/canary/onFullPool"] {
        assert!(stash.contains(pointer), "{pointer} missing from {stash}");
    }
    assert_eq!(conversion::to_v1beta1(&a).unwrap(), b);
    // Through the JSON entry point the webhook uses, both ways.
    let json = serde_json::to_value(&b).unwrap();
    let down = conversion::convert(json.clone(), V1ALPHA1).unwrap();
    assert!(down["spec"].get("rollout").is_none());
    assert!(down["spec"]["canary"].get("onFullPool").is_none());
    assert_eq!(conversion::convert(down, V1BETA1).unwrap(), json);
    // A v1alpha1 client changes the canary's weight: its mode stays.
    let mut edited = a.clone();
    edited.spec.canary.as_mut().unwrap().weight = 20;
    let up = conversion::to_v1beta1(&edited).unwrap();
    let c = up.spec.canary.as_ref().unwrap();
    assert_eq!(
        (c.weight, c.on_full_pool),
        (20, Some(CanaryOnFullPool::Borrow))
    );
    assert_eq!(up.spec.rollout, b.spec.rollout);
    // It removes the canary: nothing of it comes back.
    let mut removed = a;
    removed.spec.canary = None;
    let up = conversion::to_v1beta1(&removed).unwrap();
    assert_eq!(up.spec.canary, None);
    assert_eq!(up.spec.rollout, b.spec.rollout);
}
