//! Derived child names (API.md section 8).

use kube::ResourceExt;

use crate::api::v1beta1::InferenceService;

/// Name of the primary children (Deployment, Service, HPA, HTTPRoute, RayService): `S`.
#[must_use]
pub fn primary_name(svc: &InferenceService) -> String {
    svc.name_any()
}

/// Name of the canary children (Deployment, Service): `S-canary`.
#[must_use]
pub fn canary_name(svc: &InferenceService) -> String {
    format!("{}-canary", svc.name_any())
}
