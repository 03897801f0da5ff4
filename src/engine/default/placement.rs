//! `spec.placement` and the engine's `/dev/shm`, which depend on the
//! replicas and GPUs defaulted before them.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::policy::PolicyDefaults;
use crate::api::v1beta1::{EngineSpec, InferenceServiceSpec, PlacementSpec, SpreadAcross};
use crate::engine::builtin::DEFAULT_SHM_SIZE;
use crate::engine::resources::gpus_of;

use super::filler::{Filler, SOURCE_BUILT_IN};
use super::paths::{self, SpecPaths};

/// `spec.placement.*` (field by field from the policies; `spreadAcross`
/// `node` when a track can have more than one replica) and
/// `spec.engine.shmSize` (a policy's, else 2Gi when GPUs per replica > 1).
/// Runs after the accelerator and parallelism are defaulted.
pub(super) fn default_placement(
    f: &mut Filler<'_, '_>,
    spec: &mut InferenceServiceSpec,
    at: &SpecPaths,
) {
    let had_placement = spec.placement.is_some();
    let many = spec.replicas.is_some_and(|r| r > 1)
        || spec
            .autoscaling
            .as_ref()
            .is_some_and(|a| a.max_replicas > 1);
    let p = spec.placement.get_or_insert_with(PlacementSpec::default);
    fill_placement(f, p, &at.placement, many);
    if !had_placement && *p == PlacementSpec::default() {
        spec.placement = None;
    }

    let multi_gpu = gpus_of(spec) > 1;
    let policy_shm = f.any_policy(|d| d.engine.as_ref().is_some_and(|e| e.shm_size.is_some()));
    if multi_gpu || policy_shm {
        let engine = spec.engine.get_or_insert_with(EngineSpec::default);
        f.fill(
            &mut engine.shm_size,
            at.engine.shm_size,
            |d| d.engine.as_ref()?.shm_size.clone(),
            multi_gpu.then(|| (Quantity(DEFAULT_SHM_SIZE.to_owned()), SOURCE_BUILT_IN)),
        );
    }
}

/// The fields of `spec.placement`; `many` when a track can have more than
/// one replica.
fn fill_placement(
    f: &mut Filler<'_, '_>,
    p: &mut PlacementSpec,
    at: &paths::PlacementPaths,
    many: bool,
) {
    let placed = |d: &PolicyDefaults| d.placement.clone();
    f.fill(
        &mut p.node_selector,
        at.node_selector,
        |d| placed(d)?.node_selector,
        None,
    );
    f.fill(
        &mut p.tolerations,
        at.tolerations,
        |d| placed(d)?.tolerations,
        None,
    );
    f.fill(
        &mut p.priority_class_name,
        at.priority_class_name,
        |d| placed(d)?.priority_class_name,
        None,
    );
    let policy_spread = f.any_policy(|d| {
        d.placement
            .as_ref()
            .is_some_and(|p| p.spread_across.is_some())
    });
    if many || policy_spread {
        f.fill(
            &mut p.spread_across,
            at.spread_across,
            |d| placed(d)?.spread_across,
            many.then_some((SpreadAcross::Node, SOURCE_BUILT_IN)),
        );
    }
}
