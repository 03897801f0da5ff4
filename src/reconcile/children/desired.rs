//! The engine's children of a `backend: Deployment` service: each track's
//! Deployment (or, when a replica spans nodes, LeaderWorkerSet) and
//! Service, and the primary's HPA.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;

use super::deployment::{deployment, engine_args_counted};
use super::error::BuildError;
use super::hpa::hpa;
use super::lws::{LeaderWorkerSet, leader_worker_set};
use super::meta::Track;
use super::meta::child_name;
use super::service::service;
use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::engine::multi_node::{Group, group_of};

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
    /// The group each replica runs as when it spans nodes: each track's
    /// workload is then the LeaderWorkerSet built from its Deployment
    /// ([`workload`]).
    pub group: Option<Group>,
}

/// What runs a track: its Deployment, or (a replica that spans nodes) the
/// LeaderWorkerSet built from it.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Deployment `S` / `S-canary`.
    Deployment(Box<Deployment>),
    /// LeaderWorkerSet `S-lws` / `S-canary-lws`.
    Group(Box<LeaderWorkerSet>),
}

/// The workload of `track` of `svc` whose one-node form is `deployment`
/// (as built, and as the rollout and a full pool shaped it).
pub fn workload(
    svc: &InferenceService,
    track: Track,
    class: Option<&AcceleratorClassSpec>,
    group: Option<Group>,
    deployment: &Deployment,
) -> Result<Workload, BuildError> {
    Ok(match group {
        None => Workload::Deployment(Box::new(deployment.clone())),
        Some(g) => Workload::Group(Box::new(leader_worker_set(
            deployment,
            crate::engine::names::lws_name(&child_name(svc, track)),
            g,
            class,
            engine_args_counted(svc, track).1,
        )?)),
    })
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
    let group = group_of(svc, class);
    Ok(Desired {
        primary: deployment(svc, Track::Primary, class)?,
        primary_service: service(svc, Track::Primary)?,
        canary,
        hpa: hpa(svc, group.is_some())?,
        group,
    })
}
