//! The engine's children of a `backend: Deployment` service: each track's
//! Deployment and Service, and the primary's HPA.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;

use super::deployment::deployment;
use super::error::BuildError;
use super::hpa::hpa;
use super::meta::Track;
use super::service::service;
use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;

/// The children of one service, except the HTTPRoute (which depends on
/// observed canary readiness, see [`http_route`](super::routing::http_route)).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// Deployment `S`.
    pub primary: Deployment,
    /// Service `S`.
    pub primary_service: Service,
    /// Deployment `S-canary` and Service `S-canary` when `spec.canary` is set.
    pub canary: Option<(Deployment, Service)>,
    /// HorizontalPodAutoscaler `S` when `spec.autoscaling` is set.
    pub hpa: Option<HorizontalPodAutoscaler>,
}

/// Build every child but the route, the engine pods on the nodes of `class`.
pub fn desired(
    svc: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
) -> Result<Desired, BuildError> {
    let canary = if svc.spec.canary.is_some() {
        Some((
            deployment(svc, Track::Canary, class)?,
            service(svc, Track::Canary)?,
        ))
    } else {
        None
    };
    Ok(Desired {
        primary: deployment(svc, Track::Primary, class)?,
        primary_service: service(svc, Track::Primary)?,
        canary,
        hpa: hpa(svc)?,
    })
}
