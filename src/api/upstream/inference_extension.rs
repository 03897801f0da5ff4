//! The few Gateway API Inference Extension InferencePool
//! (`inference.networking.k8s.io/v1`) types infergate sets or reads
//! (built in `reconcile::children::inferencepool`).
//!
//! Only the fields infergate writes or reads are modelled; the end-to-end
//! tests install the published CRD, and `tests/suite/upstream_schema.rs` checks
//! every field written here against it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::FailureMode;

/// API group of the InferencePool.
pub const GROUP: &str = "inference.networking.k8s.io";
/// The API version the reconciler writes.
pub const API_VERSION: &str = "inference.networking.k8s.io/v1";
/// The resource name discovery lists for InferencePool.
pub const PLURAL: &str = "inferencepools";
/// The CRD a user installs for InferencePool routing.
pub const CRD_NAME: &str = "inferencepools.inference.networking.k8s.io";

/// Desired state of an InferencePool.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "inference.networking.k8s.io",
    version = "v1",
    kind = "InferencePool",
    plural = "inferencepools",
    namespaced,
    status = "InferencePoolStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolSpec {
    /// The model server pods of the pool.
    pub selector: PoolSelector,
    /// The ports the model servers listen on.
    pub target_ports: Vec<PoolPort>,
    /// The endpoint picker's Service; absent when the gateway picks itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker_ref: Option<EndpointPickerRef>,
}

/// A label selector (`matchLabels` only, as upstream allows).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSelector {
    /// Labels every pod of the pool carries.
    pub match_labels: BTreeMap<String, String>,
}

/// A port number.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PoolPort {
    /// The number.
    pub number: i32,
}

/// The Service of the pool's endpoint picker.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerRef {
    /// Service name (in the pool's namespace).
    pub name: String,
    /// Service port of the picker's gRPC server.
    pub port: PoolPort,
    /// What the gateway does when the picker does not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<FailureMode>,
}

/// What gateways report about the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct InferencePoolStatus {
    /// One entry per parent (Gateway) whose controller reports on the pool.
    #[serde(default)]
    pub parents: Vec<PoolParentStatus>,
}

/// One parent's report.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolParentStatus {
    /// The parent (Gateway).
    #[serde(default)]
    pub parent_ref: PoolParentRef,
    /// `Accepted`, `ResolvedRefs`, ...
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A parent reference in the pool's status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PoolParentRef {
    /// Parent name.
    #[serde(default)]
    pub name: String,
    /// Parent namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}
