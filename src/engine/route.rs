//! Route path templates (API.md section 5).

use crate::api::{GatewayRef, v1beta1::InferenceService};

use super::FieldError;

/// Render `spec.routing.pathTemplate` (API.md section 5) for this service.
pub fn render_route_path(svc: &InferenceService) -> Result<String, FieldError> {
    let _ = svc;
    Err(FieldError::required(
        "spec.routing.pathTemplate",
        "not implemented",
    ))
}

/// The (gateway with namespace resolved, rendered path) a service claims, if it has a gateway.
#[must_use]
pub fn route_claim(svc: &InferenceService) -> Option<(GatewayRef, String)> {
    let _ = svc;
    None
}
