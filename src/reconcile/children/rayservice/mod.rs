//! The KubeRay `ray.io/v1` RayService types infergate sets and reads, and
//! the pure builder [`desired_rayservice`] for `backend: RayService`.
//!
//! Written here rather than taken from a KubeRay crate: only the fields
//! infergate writes or reads are modelled. The end-to-end tests install
//! KubeRay's published CRDs (and run its operator), and
//! `tests/suite/upstream_schema.rs` checks every field written here against them.
//!
//! - `types`: the RayService's wire types, as KubeRay defines them;
//! - `build`: the RayService a service wants ([`desired_rayservice`]);
//! - `observe`: what its status says ([`observe`]).

mod build;
mod observe;
mod types;

pub use build::{
    ENV_MODEL_PATH, ENV_MODEL_REF, HEAD_CONTAINER, HEAD_CPU, HEAD_MEMORY, MAX_SERVE_CONFIG_BYTES,
    RayServiceError, WORKER_CONTAINER, WORKER_GROUP, desired_rayservice, serve_service_name,
    worker_scale,
};
pub use observe::{Observed, observe};
pub use types::{
    API_VERSION, AppStatus, HeadGroupSpec, PLURAL, RayClusterSpec, RayService,
    RayServiceClusterStatus, RayServiceSpec, RayServiceStatus, SERVE_PORT, SERVE_PORT_NAME,
    WorkerGroupSpec,
};

#[cfg(test)]
mod tests;
