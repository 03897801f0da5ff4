//! The pure builder [`desired_rayservice`] of the KubeRay `ray.io/v1`
//! RayService for `backend: RayService`, and what its status says.
//!
//! The wire types are the API's ([`crate::api::upstream::kuberay`]).
//!
//! - `build`: the RayService a service wants ([`desired_rayservice`]);
//! - `observe`: what its status says ([`observe`]).

mod build;
mod observe;

pub use crate::api::upstream::kuberay::{
    API_VERSION, AppStatus, HeadGroupSpec, PLURAL, RayClusterSpec, RayService,
    RayServiceClusterStatus, RayServiceSpec, RayServiceStatus, SERVE_PORT, SERVE_PORT_NAME,
    WorkerGroupSpec,
};
pub use build::{
    ENV_MODEL_PATH, ENV_MODEL_REF, HEAD_CONTAINER, HEAD_CPU, HEAD_MEMORY, MAX_SERVE_CONFIG_BYTES,
    RayServiceError, WORKER_CONTAINER, WORKER_GROUP, desired_rayservice, serve_service_name,
    worker_scale,
};
pub use observe::{RayServiceObserved, observe};

#[cfg(test)]
mod tests;
