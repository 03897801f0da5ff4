//! A service's charge against its namespace's GPU budget: its worst case,
//! GPUs per replica x (max(replicas, autoscaling.maxReplicas) + the
//! canary's replicas, manual, or at the rollout's largest step); for a
//! RayService the GPUs per worker x its workers (the head holds none); the
//! endpoint picker holds none. Cost is the charge x the class's
//! `costPerDeviceHour`.

use std::str::FromStr;

use rust_decimal::Decimal;

use crate::api::v1beta1::{Backend, InferenceServiceSpec};

use super::super::builtin::DEFAULT_REPLICAS;
use super::super::context::AcceleratorClasses;
use super::super::resources::{canary_replicas_at, gpus_of};

/// What one service can hold at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charge {
    /// GPUs.
    pub gpus: i64,
    /// Cost per hour, when the service's AcceleratorClass has a price.
    pub cost: Option<Decimal>,
}

/// A decimal string (`"4.10"`) as a Decimal.
#[must_use]
pub fn decimal(s: &str) -> Option<Decimal> {
    Decimal::from_str(s.trim()).ok()
}

/// A cost with two decimals (`32.80`).
#[must_use]
pub fn money(d: Decimal) -> String {
    format!("{:.2}", d.round_dp(2))
}

/// The worst-case replicas the charge counts: `(primary, canary)`.
#[must_use]
pub fn charged_replicas(spec: &InferenceServiceSpec) -> (i64, i64) {
    let replicas = spec.replicas.unwrap_or(DEFAULT_REPLICAS).max(0);
    let max = spec
        .autoscaling
        .as_ref()
        .map_or(0, |a| a.max_replicas.max(0));
    let primary = i64::from(replicas.max(max));
    if spec.backend == Some(Backend::RayService) {
        return (primary, 0);
    }
    let manual = spec
        .canary
        .as_ref()
        .map_or(0, |c| canary_replicas_at(spec, c.weight, c.replicas));
    let stepped = spec
        .rollout
        .as_ref()
        .filter(|r| r.strategy == Some(crate::api::rollout::RolloutStrategy::Canary))
        .and_then(|r| r.steps.iter().copied().max())
        .map_or(0, |largest| canary_replicas_at(spec, largest, None));
    (primary, i64::from(manual.max(stepped).max(0)))
}

/// The charge of a (defaulted) spec.
#[must_use]
pub fn charge_of(spec: &InferenceServiceSpec, classes: &AcceleratorClasses) -> Charge {
    let per = i64::from(gpus_of(spec).max(0));
    let (primary, canary) = charged_replicas(spec);
    let gpus = per.saturating_mul(primary.saturating_add(canary));
    let cost = spec
        .accelerator
        .as_ref()
        .and_then(|a| a.class.as_deref())
        .and_then(|c| classes.get(c))
        .and_then(|c| c.cost_per_device_hour.as_deref())
        .and_then(decimal)
        .and_then(|price| price.checked_mul(Decimal::from(gpus)));
    Charge { gpus, cost }
}
