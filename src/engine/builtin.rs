//! The built-in defaults: the value a field takes when neither the service,
//! a policy nor a server flag sets it. Defaulting writes them into the
//! object (with the provenance `built-in`); validation and the reconciler's
//! children read the same values for a field a stored object still lacks
//! (an object stored before defaulting ran, or with the webhook off).

use crate::api::AcceleratorType;
use crate::api::rollout::{CanaryOnFullPool, RolloutOnFullPool};
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
/// `spec.rollout.onFullPool`.
pub const DEFAULT_ON_FULL_POOL: RolloutOnFullPool = RolloutOnFullPool::Replace;
/// `spec.rollout.maxUnavailable`.
pub const DEFAULT_MAX_UNAVAILABLE: i32 = 1;
/// `spec.canary.onFullPool`, and `spec.rollout.canary.onFullPool` under strategy `Canary`.
pub const DEFAULT_CANARY_ON_FULL_POOL: CanaryOnFullPool = CanaryOnFullPool::Wait;
/// `spec.engine.shmSize` when GPUs per replica > 1 and no policy sets one.
pub const DEFAULT_SHM_SIZE: &str = "2Gi";
/// `spec.engine.gpuMemoryUtilization` on GPUs (the engine's own default).
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;
/// `spec.routing.endpointPicker.replicas`.
pub const DEFAULT_PICKER_REPLICAS: i32 = 1;
/// `spec.routing.endpointPicker.resources.requests.cpu`: a floor the
/// scheduler keeps for the picker (it scores a pool's pods per request and
/// scrapes their metrics), not a cap.
pub const DEFAULT_PICKER_CPU_REQUEST: &str = "100m";
/// `spec.routing.endpointPicker.resources.requests.memory`: a Go process
/// holding its pool's pods, their latest metrics and its prefix index.
pub const DEFAULT_PICKER_MEMORY_REQUEST: &str = "256Mi";
/// `spec.routing.endpointPicker.resources.limits.memory`: four times the
/// request, room for bursts and a bound on a leak. There is no built-in
/// CPU limit: a throttled picker delays every request of its pool.
pub const DEFAULT_PICKER_MEMORY_LIMIT: &str = "1Gi";
