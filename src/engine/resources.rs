//! GPUs and replica arithmetic: GPUs per replica are `tensor * pipeline` unless
//! the accelerator is `none`; a canary without replicas gets
//! `ceil(base * weight / 100)`, at least 1 when its weight is above 0.

use crate::api::{
    AcceleratorType,
    v1beta1::{InferenceService, InferenceServiceSpec},
};

use super::builtin::{DEFAULT_PARALLELISM, DEFAULT_REPLICAS};

/// GPUs per replica: tensor*pipeline when accelerator != none, else 0.
#[must_use]
pub fn gpus_per_replica(svc: &InferenceService) -> i32 {
    gpus_of(&svc.spec)
}

/// [`gpus_per_replica`] of a spec (defaulting works on the spec alone).
#[must_use]
pub fn gpus_of(spec: &InferenceServiceSpec) -> i32 {
    let accel = spec
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .unwrap_or_default();
    if accel == AcceleratorType::None {
        return 0;
    }
    let p = spec.parallelism.as_ref();
    let tensor = p.and_then(|p| p.tensor).unwrap_or(DEFAULT_PARALLELISM);
    let pipeline = p.and_then(|p| p.pipeline).unwrap_or(DEFAULT_PARALLELISM);
    tensor.saturating_mul(pipeline)
}

/// Canary replicas: spec.canary.replicas or ceil(base*weight/100), >= 1 when weight > 0.
#[must_use]
pub fn canary_replicas(svc: &InferenceService) -> i32 {
    let Some(canary) = svc.spec.canary.as_ref() else {
        return 0;
    };
    canary_replicas_at(&svc.spec, canary.weight, canary.replicas)
}

/// The replicas of a canary at `weight`: `replicas` when set, else
/// ceil(base*weight/100), at least 1 when the weight is above 0 (base:
/// `autoscaling.minReplicas`, else `replicas`).
#[must_use]
pub fn canary_replicas_at(spec: &InferenceServiceSpec, weight: i32, replicas: Option<i32>) -> i32 {
    if let Some(r) = replicas {
        return r;
    }
    let base = match spec.autoscaling.as_ref() {
        Some(a) => a.min_replicas,
        None => spec.replicas.unwrap_or(DEFAULT_REPLICAS),
    };
    let weight = i64::from(weight.clamp(0, 100));
    if weight == 0 {
        return 0;
    }
    let base = i64::from(base.max(0));
    let n = (base * weight + 99) / 100;
    i32::try_from(n.max(1)).unwrap_or(i32::MAX)
}
