//! Realistic request bodies shared by the load and engine benches: an
//! InferenceService as kubectl sends it (last-applied annotation, managed
//! fields), wrapped in an AdmissionReview or a 100-object ConversionReview,
//! and a cluster plus a namespace policy.

#![allow(dead_code)]

use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::PolicySnapshot;
use serde_json::{Value, json};

/// A service as kubectl sends it: last-applied annotation, managed fields, labels.
pub fn service_object(i: usize, defaulted: bool) -> Value {
    let mut spec = json!({
        "model": {"ref": "llama3-8b-instruct-q4", "image": "registry.example.com/models/llama3:8b-q4"},
        "replicas": 2,
        "autoscaling": {"minReplicas": 2, "maxReplicas": 8},
        "resources": {"cpu": "4", "memory": "16Gi", "gpuMemory": "24Gi"},
        "accelerator": {"type": "nvidia"},
        "parallelism": {"tensor": 2},
        "canary": {"model": {"ref": "llama3-8b-instruct-q5"}, "weight": 10},
        "engine": {"args": ["--max-model-len=8192", "--enable-prefix-caching"], "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]}
    });
    if defaulted {
        spec["engine"]["image"] = json!("registry.example.com/vllm:0.9");
        spec["engine"]["port"] = json!(8000);
        spec["backend"] = json!("Deployment");
        spec["parallelism"]["pipeline"] = json!(1);
        spec["autoscaling"]["targetCPUUtilizationPercent"] = json!(70);
        spec["healthCheck"] = json!({"path": "/healthz", "interval": "10s", "timeout": "1s"});
        spec["routing"] = json!({"pathTemplate": "/{.metadata.namespace}/{.metadata.name}", "requestTimeout": "10m", "gateway": {"name": "inference-gw", "namespace": "gateways"}});
    }
    let spec_fields = json!({".": {}, "f:model": {}, "f:replicas": {}, "f:autoscaling": {}, "f:resources": {}, "f:canary": {}});
    as_kubectl_sends(i, "infergate.dev/v1beta1", spec, spec_fields)
}

/// The service `chat-{i}` of `api_version` with `spec` as kubectl sends it:
/// the last-applied annotation, labels, and managed fields that own the
/// `spec_fields`.
fn as_kubectl_sends(i: usize, api_version: &str, spec: Value, spec_fields: Value) -> Value {
    let name = format!("chat-{i}");
    let last_applied = json!({"apiVersion": api_version, "kind": "InferenceService",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec.clone()})
    .to_string();
    json!({
        "apiVersion": api_version,
        "kind": "InferenceService",
        "metadata": {
            "name": name, "namespace": "team-a",
            "uid": format!("6f1e2a3b-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i), "generation": 1,
            "creationTimestamp": "2026-11-21T12:00:00Z",
            "labels": {"app.kubernetes.io/part-of": "chat", "team": "a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied},
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": api_version, "time": "2026-11-21T12:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}, "f:labels": {}},
                             "f:spec": spec_fields}}]
        },
        "spec": spec
    })
}

pub fn admission_review(object: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "infergate.dev", "version": "v1beta1", "kind": "InferenceService"},
            "resource": {"group": "infergate.dev", "version": "v1beta1", "resource": "inferenceservices"},
            "requestKind": {"group": "infergate.dev", "version": "v1beta1", "kind": "InferenceService"},
            "requestResource": {"group": "infergate.dev", "version": "v1beta1", "resource": "inferenceservices"},
            "name": "chat-0", "namespace": "team-a", "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated", "team-a"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-client-side-apply"}
        }
    }))
    .expect("review serializes")
}

pub fn conversion_review(n: usize) -> Vec<u8> {
    let objects: Vec<Value> = (0..n)
        .map(|i| {
            let mut o = service_object(i, true);
            o["status"] = json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2,
                "routePath": format!("/team-a/chat-{i}"), "requestTimeout": "10m",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Available", "message": "2/2 replicas ready",
                                "lastTransitionTime": "2026-11-21T12:01:00Z", "observedGeneration": 1}]});
            o
        })
        .collect();
    review_of(
        "0000c0de-0000-4000-8000-000000000005",
        "infergate.dev/v1alpha1",
        &objects,
    )
}

/// A ConversionReview as the API server writes it: `uid` and
/// `desiredAPIVersion` before `objects`.
fn review_of(uid: &str, desired: &str, objects: &[Value]) -> Vec<u8> {
    let mut out = format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"{uid}","desiredAPIVersion":"{desired}","objects":"#
    )
    .into_bytes();
    serde_json::to_writer(&mut out, objects).expect("objects serialize");
    out.extend_from_slice(b"}}");
    out
}

pub fn policies() -> PolicySnapshot {
    let cluster: ClusterInferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "platform"},
        "spec": {"defaults": {"engine": {"image": "registry.example.com/vllm:0.9", "port": 8000},
                              "healthCheck": {"path": "/healthz", "interval": "10s", "timeout": "1s"},
                              "routing": {"requestTimeout": "5m", "gateway": {"name": "inference-gw", "namespace": "gateways"}}},
                 "limits": {"maxReplicas": 16, "maxCanaryWeight": 50, "maxGPUsPerReplica": 8, "maxRequestTimeout": "30m",
                            "allowedImageRegistries": ["registry.example.com/"], "allowedAccelerators": ["nvidia", "amd"]}}
    }))
    .expect("policy");
    let ns: InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "defaults", "namespace": "team-a"},
        "spec": {"priority": 10, "defaults": {"replicas": 2, "autoscaling": {"targetCPUUtilizationPercent": 70}, "routing": {"requestTimeout": "10m"}},
                 "limits": {"maxReplicas": 8, "maxCanaryWeight": 25}}
    }))
    .expect("policy");
    PolicySnapshot {
        cluster: vec![cluster],
        namespaced: vec![ns],
    }
}

/// A v1alpha1 service as kubectl sends it (last-applied annotation, managed
/// fields, labels), with the status the reconciler writes.
pub fn alpha_service_object(i: usize) -> Value {
    let spec = json!({
        "modelRef": "llama3-8b-instruct-q4", "replicas": 2, "minReplicas": 2, "maxReplicas": 8,
        "resources": {"cpu": "4", "memory": "16Gi", "gpuMemory": "24Gi"},
        "canary": {"modelRef": "llama3-8b-instruct-q5", "weight": 10},
        "healthCheck": {"path": "/healthz", "interval": "10s", "timeout": "1s"}
    });
    let spec_fields = json!({".": {}, "f:modelRef": {}, "f:replicas": {}, "f:minReplicas": {}, "f:maxReplicas": {},
                             "f:resources": {}, "f:canary": {}, "f:healthCheck": {}});
    let mut object = as_kubectl_sends(i, "infergate.dev/v1alpha1", spec, spec_fields);
    object["status"] = json!({"ready": true, "replicas": 2, "message": "2/2 replicas ready"});
    object
}

/// A ConversionReview of `n` [`alpha_service_object`]s to v1beta1.
pub fn alpha_conversion_review(n: usize) -> Vec<u8> {
    let objects: Vec<Value> = (0..n).map(alpha_service_object).collect();
    review_of(
        "0000c0de-0000-4000-8000-000000000006",
        "infergate.dev/v1beta1",
        &objects,
    )
}
