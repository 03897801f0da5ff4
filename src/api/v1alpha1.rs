//! `InferenceService` at `infergate.dev/v1alpha1`: the legacy flat shape,
//! served (deprecated) and converted to and from `v1beta1` by the webhook.
// kube-derive's repeated `printcolumn(...)` lists look like duplicated
// attributes to clippy; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::common::{HealthCheckSpec, ResourcesSpec};

/// The desired state of an inference service (legacy shape).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "infergate.dev",
    version = "v1alpha1",
    kind = "InferenceService",
    namespaced,
    shortname = "infsvc",
    category = "infergate",
    status = "InferenceServiceStatus",
    derive = "PartialEq",
    derive = "Default",
    deprecated = "infergate.dev/v1alpha1 InferenceService is deprecated; use infergate.dev/v1beta1",
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.modelRef"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready"),
    printcolumn(name = "Canary", type_ = "integer", json_path = ".spec.canary.weight"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas == 0 || self.minReplicas <= self.maxReplicas").message("spec.minReplicas must be less than or equal to spec.maxReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct InferenceServiceSpec {
    /// Name of the model the engine serves.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("size(self) >= 1 && !self.matches('\\\\s')").message("spec.modelRef must be 1 to 253 characters without whitespace"))]
    pub model_ref: String,
    /// Replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.replicas must be at least 0"))]
    pub replicas: Option<i32>,
    /// Autoscaling lower bound; 0 means no autoscaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.minReplicas must be at least 0"))]
    pub min_replicas: Option<i32>,
    /// Autoscaling upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.maxReplicas must be at least 0"))]
    pub max_replicas: Option<i32>,
    /// CPU, memory and GPU memory per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesSpec>,
    /// A canary model with a traffic weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
    /// Liveness and readiness probing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheckSpec>,
}

/// The legacy canary.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// Canary model name.
    #[schemars(length(max = 253))]
    pub model_ref: String,
    /// Share of traffic in percent, 0..100.
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message("spec.canary.weight must be between 0 and 100"))]
    pub weight: i32,
}

/// The legacy status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServiceStatus {
    /// Whether the service is ready (the v1beta1 Ready condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The Ready condition's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
