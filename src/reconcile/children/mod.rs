//! The children of an InferenceService as pure functions: Deployment,
//! Service, HorizontalPodAutoscaler, (in [`httproute`]) HTTPRoute, (in
//! [`inferencepool`] and [`endpoint_picker`]) InferencePools and their
//! endpoint pickers, and (in [`podmonitor`]) PodMonitor for `backend:
//! Deployment`; the RayService (in [`rayservice`]) for `backend: RayService`,
//! whose running cluster [`raycluster`] scales.
//!
//! Every function takes a defaulted
//! [`InferenceService`](crate::api::v1beta1::InferenceService) (as the mutating
//! webhook stores it, or as the reconciler defaults it in memory) and returns
//! plain Kubernetes objects ready for server-side apply. No I/O.

mod deployment;
mod desired;
pub mod endpoint_picker;
mod error;
mod hpa;
pub mod httproute;
pub mod inferencepool;
pub mod lws;
#[cfg(test)]
mod lws_tests;
mod meta;
pub mod pod;
pub mod podmonitor;
pub mod raycluster;
pub mod rayservice;
mod routing;
mod service;

pub use deployment::{
    CONTAINER_NAME, MODEL_MOUNT_PATH, MODEL_VOLUME, PORT_NAME, STARTUP_GRACE_SECONDS, deployment,
    engine_args, engine_args_counted, engine_port, probes, resources,
};
pub use desired::{Desired, Workload, desired, workload};
pub use error::BuildError;
pub use hpa::hpa;
pub use meta::{
    ANNOTATION_APPLIED, ANNOTATION_LENT, ANNOTATION_ROLL_PLAN, ANNOTATION_TEMPLATE,
    LABEL_GPU_MEMORY, LABEL_MANAGED_BY, LABEL_NAME, LABEL_SERVICE, LABEL_TRACK, Track, child_name,
    digest_of, labels, owner_reference, sanitize_label_value, selector_labels,
};
pub use routing::{
    gateway, gateway_display, http_route, names_backend, ray_http_route, rejection,
    request_timeout, routed_canary_weight, serve_route_prefix,
};
pub use service::service;

#[cfg(test)]
mod tests;
