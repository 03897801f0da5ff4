//! The built-in defaults: the value a field takes when neither the service,
//! a policy nor a server flag sets it. Defaulting writes them into the
//! object (with the provenance `built-in`); validation and the reconciler's
//! children read the same values for a field a stored object still lacks
//! (an object stored before defaulting ran, or with the webhook off).

use crate::api::AcceleratorType;
use crate::api::v1beta1::Backend;

/// `spec.engine.port`.
pub const DEFAULT_PORT: i32 = 8000;
/// `spec.backend`.
pub const DEFAULT_BACKEND: Backend = Backend::Deployment;
/// `spec.replicas`.
pub const DEFAULT_REPLICAS: i32 = 1;
/// `spec.autoscaling.targetCPUUtilizationPercent`.
pub const DEFAULT_TARGET_CPU: i32 = 80;
/// `spec.accelerator.type`.
pub const DEFAULT_ACCELERATOR: AcceleratorType = AcceleratorType::None;
/// `spec.parallelism.tensor` and `spec.parallelism.pipeline`.
pub const DEFAULT_PARALLELISM: i32 = 1;
/// `spec.healthCheck.path`.
pub const DEFAULT_HEALTH_PATH: &str = "/healthz";
/// `spec.healthCheck.interval`.
pub const DEFAULT_HEALTH_INTERVAL: &str = "10s";
/// `spec.healthCheck.timeout`.
pub const DEFAULT_HEALTH_TIMEOUT: &str = "1s";
/// `spec.metrics.path`.
pub const DEFAULT_METRICS_PATH: &str = "/metrics";
/// `spec.metrics.interval` (a GEP-2257 duration).
pub const DEFAULT_METRICS_INTERVAL: &str = "30s";
/// `spec.routing.pathTemplate`.
pub const DEFAULT_PATH_TEMPLATE: &str = "/{.metadata.namespace}/{.metadata.name}";
/// `spec.routing.requestTimeout` (a GEP-2257 duration).
pub const DEFAULT_REQUEST_TIMEOUT: &str = "5m";
/// `spec.engine.shmSize` when GPUs per replica > 1 and no policy sets one.
pub const DEFAULT_SHM_SIZE: &str = "2Gi";
/// `spec.engine.gpuMemoryUtilization` on GPUs (the engine's own default).
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;
