//! What admission says about room on a full GPU pool (`docs/rollouts.md`):
//! a write that rolls the primary, adds a canary, or makes KubeRay build a
//! second RayCluster, on an AcceleratorClass whose free devices cannot
//! hold it, is admitted with a warning giving the class, the devices
//! needed and free, and what will happen (the mode). It is never denied:
//! room comes and goes. Free devices come from the watches of nodes and
//! pods ([`ClusterState::free_devices`]); where they are not known (the
//! namespaced install, before the first lists) nothing is said.

use crate::api::rollout::RolloutOnFullPool;
use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::engine::capacity::roll_plan;
use crate::engine::full_pool::{PoolChange, ServingFloor, pool_changes};
use crate::state::ClusterState;

/// The warnings of the write of `svc` (over `old` on UPDATE).
pub(super) fn warnings(
    state: &ClusterState,
    svc: &InferenceService,
    old: Option<&InferenceService>,
) -> Vec<String> {
    let per_replica = u64::try_from(engine::gpus_per_replica(svc)).unwrap_or(0);
    let class = svc
        .spec
        .accelerator
        .as_ref()
        .and_then(|a| a.class.as_deref());
    let Some(class) = class.filter(|_| per_replica > 0) else {
        return Vec::new();
    };
    let changes = pool_changes(svc, old);
    if changes.is_empty() {
        return Vec::new();
    }
    let Some(free) = state.free_devices(class) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for change in changes {
        match change {
            PoolChange::RollsPrimary(field) => {
                let replicas = ServingFloor::of(svc).replicas;
                let on_full_pool = svc
                    .spec
                    .rollout
                    .as_ref()
                    .and_then(|r| r.on_full_pool)
                    .unwrap_or(RolloutOnFullPool::Replace);
                let (plan, short) = roll_plan::plan(
                    on_full_pool,
                    engine::full_pool::max_unavailable(svc),
                    replicas,
                    per_replica,
                    per_replica,
                    class,
                    Some(&free),
                );
                if let Some(short) = short {
                    out.push(roll_plan::rollout_warning(field, &short, plan, replicas));
                }
            }
            PoolChange::AddsCanary { field, replicas } => {
                let adds = u64::try_from(replicas).unwrap_or(0);
                if let Some(short) = roll_plan::shortfall(class, &free, adds, per_replica) {
                    let manual = field == "spec.canary";
                    let mode = engine::full_pool::canary_mode_words(svc, manual);
                    out.push(roll_plan::canary_warning(field, &short, replicas, &mode));
                }
            }
            PoolChange::NewRayCluster(field) => {
                let workers = svc.spec.replicas.unwrap_or(1).max(1);
                let adds = u64::try_from(workers).unwrap_or(0);
                if let Some(short) = roll_plan::shortfall(class, &free, adds, per_replica) {
                    out.push(roll_plan::ray_cluster_warning(field, &short, workers));
                }
            }
        }
    }
    out
}
