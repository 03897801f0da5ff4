//! The Gateway API Inference Extension InferencePool
//! (`inference.networking.k8s.io/v1`) of each track, for
//! `routing.backendKind: InferencePool`; its wire types are the API's
//! ([`crate::api::upstream::inference_extension`]).

use super::deployment::engine_port;
use super::error::BuildError;
use super::meta::{Track, child_meta, child_name, selector_labels};
use crate::api::v1beta1::InferenceService;
use crate::api::{BackendKind, EndpointPickerMode};
use crate::engine::names::epp_name;

pub use crate::api::upstream::inference_extension::{
    API_VERSION, CRD_NAME, EndpointPickerRef, GROUP, InferencePool, InferencePoolSpec,
    InferencePoolStatus, PLURAL, PoolParentRef, PoolParentStatus, PoolPort, PoolSelector,
};

/// The endpoint picker's gRPC (ext-proc) port, named in `endpointPickerRef`.
pub const EPP_GRPC_PORT: i32 = 9002;

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
