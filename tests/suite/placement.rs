//! Placement (the AcceleratorClass section of `docs/gpu-node-pools.md`) without a cluster: what defaulting fills
//! in from an AcceleratorClass and the policies, what validation denies,
//! and what the engine pods carry (both tracks of a Deployment-backed
//! service, the Ray head and workers, never the endpoint picker).
//!
//! The classes, the services and admission in process are here; the tests,
//! a module per concern:
//!
//! - [`admission`]: what defaulting fills in from a class and the policies
//!   (the type, `/dev/shm`, the class's placement), what validation denies,
//!   and the class and policy objects themselves judged.
//! - [`pods`]: what the pods carry: both tracks the class then the
//!   placement, a class's resource name, the Ray head the placement only,
//!   the picker nothing, and no template change past one replica.
//! - [`limits`]: what the policies' limits allow: a GPU service has a class
//!   where classes or cost are limited, `placement` cannot reach a
//!   disallowed class's pool, priority classes bounded by every policy.
//! - [`multi_node`]: replicas that span nodes under `maxNodesPerReplica`.

#[path = "placement/admission.rs"]
mod admission;
#[path = "placement/limits.rs"]
mod limits;
#[path = "placement/multi_node.rs"]
mod multi_node;
#[path = "placement/pods.rs"]
mod pods;

use std::collections::BTreeMap;

use crate::support::classes::h100;
use infergate::api::v1beta1::InferenceService;
use infergate::api::{AcceleratorClassSpec, ClusterInferencePolicy, InferencePolicy};
use infergate::engine::{
    self, AcceleratorClasses, Context, NoRoutes, PolicySnapshot, ServerDefaults, Verdict,
};
use serde_json::{Value, json};

fn mig() -> AcceleratorClassSpec {
    serde_json::from_value(json!({
        "vendor": "nvidia", "resourceName": "nvidia.com/mig-3g.40gb",
        "memoryPerDevice": "40Gi", "devicesPerNode": 2
    }))
    .expect("class")
}

fn classes() -> AcceleratorClasses {
    AcceleratorClasses::from([("h100-80gb".to_owned(), h100()), ("mig".to_owned(), mig())])
}

fn service(spec: Value) -> InferenceService {
    let mut spec = spec;
    spec["model"] = json!({"ref": "llama3-70b"});
    spec["engine"]["image"] = json!("registry.example.com/vllm:0.9");
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1"},
        "spec": spec,
    }))
    .expect("service")
}

fn with<R>(policies: &PolicySnapshot, f: impl FnOnce(&Context) -> R) -> R {
    with_classes(policies, &classes(), f)
}

fn with_classes<R>(
    policies: &PolicySnapshot,
    classes: &AcceleratorClasses,
    f: impl FnOnce(&Context) -> R,
) -> R {
    let labels = BTreeMap::new();
    f(&Context {
        namespace: "team-a",
        namespace_labels: &labels,
        policies,
        classes,
        profiles: &infergate::engine::ModelProfiles::default(),
        server: &ServerDefaults::default(),
        routes: &NoRoutes,
    })
}

/// Default, then validate, as admission does.
fn admit(svc: &InferenceService, policies: &PolicySnapshot) -> (InferenceService, Verdict) {
    admit_among(svc, policies, &classes())
}

/// [`admit`] with the AcceleratorClasses `classes` in the watch cache.
fn admit_among(
    svc: &InferenceService,
    policies: &PolicySnapshot,
    classes: &AcceleratorClasses,
) -> (InferenceService, Verdict) {
    with_classes(policies, classes, |ctx| {
        let d = engine::default_service(svc, ctx).object;
        let v = engine::validate_service(&d, None, ctx);
        (d, v)
    })
}

fn errors(v: &Verdict) -> Vec<String> {
    v.errors.iter().map(ToString::to_string).collect()
}

fn cluster_policy(spec: Value) -> ClusterInferencePolicy {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "platform"}, "spec": spec
    }))
    .expect("policy")
}

fn namespace_policy(spec: Value) -> InferencePolicy {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "gpus", "namespace": "team-a"}, "spec": spec
    }))
    .expect("policy")
}
