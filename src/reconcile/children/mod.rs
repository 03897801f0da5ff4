//! The children of an InferenceService as pure functions: Deployment,
//! Service, HorizontalPodAutoscaler, (in [`httproute`]) HTTPRoute and (in
//! [`podmonitor`]) PodMonitor for `backend: Deployment`; the RayService (in
//! [`rayservice`]) for `backend: RayService`.
//!
//! Every function takes a defaulted [`InferenceService`] (as the mutating
//! webhook stores it, or as the reconciler defaults it in memory) and returns
//! plain Kubernetes objects ready for server-side apply. No I/O.

mod deployment;
pub mod endpoint_picker;
mod hpa;
pub mod httproute;
pub mod inferencepool;
pub mod podmonitor;
pub mod raycluster;
pub mod rayservice;
mod routing;
mod service;

pub use deployment::{deployment, engine_args, probes, resources};
pub use hpa::hpa;
pub use routing::{gateway, http_route, request_timeout, routed_canary_weight};
pub use service::service;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, HTTPGetAction, ImageVolumeSource, PodSpec, PodTemplateSpec,
    Probe, ResourceRequirements, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use self::httproute::{
    GATEWAY_GROUP, HTTPBackendRef, HTTPPathMatch, HTTPPathModifier, HTTPRoute, HTTPRouteFilter,
    HTTPRouteMatch, HTTPRouteRule, HTTPRouteSpec, HTTPRouteTimeouts, HTTPURLRewriteFilter,
    ParentReference,
};
use crate::api::v1beta1::InferenceService;
use crate::api::{AcceleratorType, GatewayRef, MANAGER};
use crate::engine;
use crate::engine::builtin::{
    DEFAULT_HEALTH_INTERVAL, DEFAULT_HEALTH_PATH, DEFAULT_HEALTH_TIMEOUT, DEFAULT_PARALLELISM,
    DEFAULT_PORT, DEFAULT_REPLICAS, DEFAULT_REQUEST_TIMEOUT, DEFAULT_TARGET_CPU,
};

/// `app.kubernetes.io/name: S` on every child.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/managed-by: infergate` on every child.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `infergate.dev/service: S` on every child.
pub const LABEL_SERVICE: &str = "infergate.dev/service";
/// `infergate.dev/track: primary|canary` on every child.
pub const LABEL_TRACK: &str = "infergate.dev/track";
/// Annotation on every child: a digest of the object infergate last applied
/// (the desired object without this annotation). A child whose digest
/// matches what the service wants now is not written again.
pub const ANNOTATION_APPLIED: &str = "infergate.dev/applied-digest";
/// Pod label recording `spec.resources.gpuMemory` (sanitised) for scheduling policies.
pub const LABEL_GPU_MEMORY: &str = "infergate.dev/gpu-memory";
/// Name of the engine container.
pub const CONTAINER_NAME: &str = "engine";
/// Name of the engine's container and Service port.
pub const PORT_NAME: &str = "http";
/// Name of the image volume holding the model weights (`spec.model.image`).
pub const MODEL_VOLUME: &str = "model";
/// Where the model image volume is mounted in the engine container.
pub const MODEL_MOUNT_PATH: &str = "/model";
/// How long the startup probe lets an engine load its model before liveness applies.
pub const STARTUP_GRACE_SECONDS: i32 = 1800;

/// Which track a child belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Track {
    /// The primary model.
    Primary,
    /// The canary model.
    Canary,
}

impl Track {
    /// The `infergate.dev/track` label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Canary => "canary",
        }
    }
}

/// Why desired state could not be built (the validator normally catches these first).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The object has no name or uid, so no owner reference can point at it.
    #[error("object has no name or uid to own children")]
    NoOwner,
    /// No engine image after defaulting.
    #[error("spec.engine.image is not set: set it, a policy default, or --default-engine-image")]
    MissingEngineImage,
    /// The canary section is missing where a canary child was asked for.
    #[error("spec.canary is not set")]
    NoCanary,
    /// A health check duration does not parse.
    #[error("{field}: {message}")]
    Duration {
        /// The field path.
        field: &'static str,
        /// The parse error.
        message: String,
    },
    /// The route path does not render.
    #[error("{0}")]
    Route(String),
    /// No endpoint picker image after defaulting (`endpointPicker.mode: Owned`).
    #[error(
        "spec.routing.endpointPicker.image is not set: set it, a policy default, or endpointPicker.mode: None"
    )]
    MissingEndpointPickerImage,
}

/// The children of one service, except the HTTPRoute (which depends on
/// observed canary readiness, see [`http_route`]).
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

/// Build every child but the route.
pub fn desired(svc: &InferenceService) -> Result<Desired, BuildError> {
    let canary = if svc.spec.canary.is_some() {
        Some((
            deployment(svc, Track::Canary)?,
            service(svc, Track::Canary)?,
        ))
    } else {
        None
    };
    Ok(Desired {
        primary: deployment(svc, Track::Primary)?,
        primary_service: service(svc, Track::Primary)?,
        canary,
        hpa: hpa(svc)?,
    })
}

/// The name of a track's Deployment and Service.
#[must_use]
pub fn child_name(svc: &InferenceService, track: Track) -> String {
    match track {
        Track::Primary => engine::primary_name(svc),
        Track::Canary => engine::canary_name(svc),
    }
}

/// The four labels every child carries.
#[must_use]
pub fn labels(svc: &InferenceService, track: Track) -> BTreeMap<String, String> {
    let name = svc.name_any();
    BTreeMap::from([
        (LABEL_NAME.to_owned(), name.clone()),
        (LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (LABEL_SERVICE.to_owned(), name),
        (LABEL_TRACK.to_owned(), track.as_str().to_owned()),
    ])
}

/// The pod selector of a track (a stable subset of [`labels`]).
#[must_use]
pub fn selector_labels(svc: &InferenceService, track: Track) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_SERVICE.to_owned(), svc.name_any()),
        (LABEL_TRACK.to_owned(), track.as_str().to_owned()),
    ])
}

/// The controller owner reference to the service.
pub fn owner_reference(svc: &InferenceService) -> Result<OwnerReference, BuildError> {
    let mut owner = svc.controller_owner_ref(&()).ok_or(BuildError::NoOwner)?;
    // Foreground deletion of the service waits for its children.
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}

fn child_meta(
    svc: &InferenceService,
    name: String,
    track: Track,
) -> Result<ObjectMeta, BuildError> {
    Ok(ObjectMeta {
        name: Some(name),
        namespace: svc.namespace(),
        labels: Some(labels(svc, track)),
        owner_references: Some(vec![owner_reference(svc)?]),
        ..ObjectMeta::default()
    })
}

/// The engine port after defaulting.
#[must_use]
pub fn engine_port(svc: &InferenceService) -> i32 {
    svc.spec
        .engine
        .as_ref()
        .and_then(|e| e.port)
        .unwrap_or(DEFAULT_PORT)
}

/// Turn a quantity into a label value: characters outside `[A-Za-z0-9._-]`
/// become `-`, the ends are alphanumeric, at most 63 characters.
#[must_use]
pub fn sanitize_label_value(raw: &str) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests;
