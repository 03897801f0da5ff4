//! The Gateway API Inference Extension InferencePool
//! (`inference.networking.k8s.io/v1`) of each track, for
//! `routing.backendKind: InferencePool`, and the few InferencePool types
//! infergate sets or reads.
//!
//! Only the fields infergate writes or reads are modelled; the end-to-end
//! tests install the published CRD, and `tests/suite/upstream_schema.rs` checks
//! every field written here against it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::deployment::engine_port;
use super::error::BuildError;
use super::meta::{Track, child_meta, child_name, selector_labels};
use crate::api::v1beta1::InferenceService;
use crate::api::{BackendKind, EndpointPickerMode, FailureMode};
use crate::engine::names::epp_name;

/// API group of the InferencePool.
pub const GROUP: &str = "inference.networking.k8s.io";
/// The API version the reconciler writes.
pub const API_VERSION: &str = "inference.networking.k8s.io/v1";
/// The resource name discovery lists for InferencePool.
pub const PLURAL: &str = "inferencepools";
/// The CRD a user installs for InferencePool routing.
pub const CRD_NAME: &str = "inferencepools.inference.networking.k8s.io";
/// The endpoint picker's gRPC (ext-proc) port, named in `endpointPickerRef`.
pub const EPP_GRPC_PORT: i32 = 9002;

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

/// Whether the (defaulted) service routes through InferencePools.
#[must_use]
pub fn routes_through_pools(svc: &InferenceService) -> bool {
    svc.spec.routing.as_ref().and_then(|r| r.backend_kind) == Some(BackendKind::InferencePool)
}

/// The InferencePool of a track, named like the track's Service: that
/// track's pods (service and track labels, which no endpoint picker pod
/// carries) on the engine port, with the owned picker's Service as its
/// `endpointPickerRef` (none with `endpointPicker.mode: None`).
pub fn inference_pool(svc: &InferenceService, track: Track) -> Result<InferencePool, BuildError> {
    if track == Track::Canary && svc.spec.canary.is_none() {
        return Err(BuildError::NoCanary);
    }
    let name = child_name(svc, track);
    let picker = svc
        .spec
        .routing
        .as_ref()
        .and_then(|r| r.endpoint_picker.as_ref());
    let owned = picker.and_then(|p| p.mode).unwrap_or_default() == EndpointPickerMode::Owned;
    let mut pool = InferencePool::new(
        &name,
        InferencePoolSpec {
            selector: PoolSelector {
                match_labels: selector_labels(svc, track),
            },
            target_ports: vec![PoolPort {
                number: engine_port(svc),
            }],
            endpoint_picker_ref: owned.then(|| EndpointPickerRef {
                name: epp_name(&name),
                port: PoolPort {
                    number: EPP_GRPC_PORT,
                },
                failure_mode: Some(picker.and_then(|p| p.failure_mode).unwrap_or_default()),
            }),
        },
    );
    pool.metadata = child_meta(svc, name, track)?;
    Ok(pool)
}

/// The parents' complaints about the pool (`Accepted` or `ResolvedRefs`
/// not `True`), and whether any parent reported at all.
#[must_use]
pub fn parent_report(pool: &InferencePool) -> (bool, Vec<String>) {
    let parents = pool
        .status
        .as_ref()
        .map(|s| s.parents.as_slice())
        .unwrap_or_default();
    let complaints = parents
        .iter()
        .flat_map(|p| {
            p.conditions
                .iter()
                .filter(|c| {
                    matches!(c.type_.as_str(), "Accepted" | "ResolvedRefs") && c.status != "True"
                })
                .map(move |c| {
                    format!(
                        "{} on Gateway {}: {}: {}",
                        c.type_, p.parent_ref.name, c.reason, c.message
                    )
                })
        })
        .collect();
    (!parents.is_empty(), complaints)
}
