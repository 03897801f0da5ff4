//! A change of the primary's pod template on its class's pool
//! (`docs/rollouts.md`, on a full GPU pool): when one more replica's
//! devices are free the Deployment surges as it always did; when they are
//! not, `Replace` renders `maxSurge: 0, maxUnavailable: N` for that rollout
//! and `Wait` keeps the Deployment on its old template until they are.
//!
//! The plan is made once per template change and recorded on the
//! Deployment ([`ANNOTATION_ROLL_PLAN`]) with the new template: while the
//! Deployment carries the template the service wants and its rollout is
//! not done, the plan it carries is rendered again, so a reconcile after a
//! replaced pod freed its devices, or a restart mid-rollout, changes
//! nothing and adds no pod. Once every replica runs the template and is
//! ready, the plan and its strategy go.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::Api;

use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::api::vocabulary::ConditionType;
use crate::engine;
use crate::engine::capacity::roll_plan::{self, RollPlan};
use crate::engine::multi_node::Group;
use crate::reconcile::children::{
    self as builders, ANNOTATION_ROLL_PLAN, ANNOTATION_TEMPLATE, Track,
};

use super::workload;
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::status::RolloutCapacity;
use crate::reconcile::watch::watched::WatchedDeployment;

/// How often a change waiting for room looks again (room that appears is
/// used within 30 s).
pub(super) const ROOM_RECHECK: Duration = Duration::from_secs(10);

/// How soon a change looks again while the node and pod watches list.
const ROOM_LISTING: Duration = Duration::from_secs(2);

/// What the plan did to the primary's Deployment, for the status.
pub(super) struct PrimaryPlan {
    /// `RolloutCapacity` (`None`: leave it as it is).
    pub capacity: Option<RolloutCapacity>,
    /// Come back this soon (the change waits for room, or replaces in
    /// place).
    pub requeue: Option<Duration>,
    /// The primary's groups (a replica that spans nodes) keep the template
    /// their LeaderWorkerSet runs: the change waits for room.
    pub keep_group_template: bool,
}

/// The template digest a Deployment carries.
pub(super) fn template_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(ANNOTATION_TEMPLATE)
        .map(String::as_str)
}

/// `RolloutCapacity=True` for a change that surges, said only where the
/// condition was said before (it waited or replaced in place): a service
/// whose rollouts always had room carries no such condition.
fn fits(
    svc: &InferenceService,
    free: Option<&crate::engine::capacity::room::Free>,
) -> Option<RolloutCapacity> {
    free?;
    let said = svc.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == ConditionType::RolloutCapacity.as_str())
    });
    said.then_some(RolloutCapacity::Fits)
}

/// `Replace N: <numbers and what it does>` parsed: N and the message.
fn parse_plan(value: &str) -> Option<(i32, &str)> {
    let (head, message) = value.split_once(": ")?;
    let n = head.strip_prefix("Replace ")?.parse().ok()?;
    Some((n, message))
}

/// `maxSurge: 0, maxUnavailable: n`.
fn replace_strategy(n: i32) -> DeploymentStrategy {
    DeploymentStrategy {
        type_: Some("RollingUpdate".to_owned()),
        rolling_update: Some(RollingUpdateDeployment {
            max_surge: Some(IntOrString::Int(0)),
            max_unavailable: Some(IntOrString::Int(n)),
        }),
    }
}

/// Render `plan` (`Replace N: message`) on `desired`.
fn render_replace(desired: &mut Deployment, n: i32, value: String) {
    desired
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_ROLL_PLAN.to_owned(), value);
    if let Some(spec) = desired.spec.as_mut() {
        spec.strategy = Some(replace_strategy(n));
    }
}

/// Whether the Deployment's rollout of the template it carries is done:
/// the controller saw its generation and every replica runs it and is
/// ready, none of an older one left.
fn rolled_out(live: &WatchedDeployment) -> bool {
    let want = live.desired();
    live.observed() && live.updated() >= want && live.ready() >= want && live.total() <= want
}

/// Plan the primary's change on the pool of `class` (the service's
/// AcceleratorClass `class_name`), rendering the plan on `desired` (the
/// primary Deployment infergate wants).
pub(super) async fn plan_primary(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
    desired: &mut Deployment,
    group: Option<Group>,
) -> Result<PrimaryPlan, Error> {
    let nothing = PrimaryPlan {
        capacity: None,
        requeue: None,
        keep_group_template: false,
    };
    let (Some(class_spec), Some((class_name, per_replica))) =
        (class, engine::full_pool::pool_of(defaulted))
    else {
        return Ok(nothing);
    };
    let ns = svc.namespace().unwrap_or_default();
    let name = desired.name_any();
    let free = ctx.state.free_devices(class_name);
    // The workload as built from `desired`: a group's template digest is
    // its LeaderWorkerSet's.
    let built = builders::workload(defaulted, Track::Primary, class, group, desired)?;
    let Some(live) = workload::cached(ctx, &ns, &built) else {
        // A new workload adds pods as a scale-up does.
        return Ok(PrimaryPlan {
            capacity: fits(svc, free.as_ref()),
            ..nothing
        });
    };
    let live_plan = live
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_ROLL_PLAN))
        .cloned();
    if template_of(&live.metadata) == template_of(workload::meta(&built)) {
        // The workload carries the template wanted: its plan stays.
        let Some((n, message)) = live_plan.as_deref().and_then(parse_plan) else {
            return Ok(PrimaryPlan {
                capacity: fits(svc, free.as_ref()),
                ..nothing
            });
        };
        if rolled_out(&live) {
            // Done: the plan and its strategy go (the next change is
            // planned afresh), and the condition says so once.
            return Ok(PrimaryPlan {
                capacity: Some(RolloutCapacity::Done(message.to_owned())),
                ..nothing
            });
        }
        let value = live_plan.clone().unwrap_or_default();
        render_replace(desired, n, value);
        return Ok(PrimaryPlan {
            capacity: Some(RolloutCapacity::Replacing(message.to_owned())),
            requeue: Some(ROOM_RECHECK),
            ..nothing
        });
    }
    // The template changes: plan it against the pool as it is now; right
    // after a start, once the watches have listed (a change made while
    // infergate was stopped adds no pod the pool cannot hold).
    let keep_group_template = group.is_some();
    if free.is_none() && ctx.state.room().listing() {
        if !keep_group_template {
            keep_old_template(ctx, &ns, &name, desired).await?;
        }
        return Ok(PrimaryPlan {
            capacity: None,
            requeue: Some(ROOM_LISTING),
            keep_group_template,
        });
    }
    let replicas = live.desired();
    // A group needs a node's devices free on each of its nodes.
    let per_node = u64::try_from(class_spec.devices_per_node).unwrap_or(per_replica);
    let (plan, short) = roll_plan::plan_of_spanning(
        defaulted,
        replicas,
        (per_replica, per_node),
        class_name,
        free.as_ref(),
    );
    match (plan, short) {
        (RollPlan::Surge, _) | (_, None) => Ok(PrimaryPlan {
            capacity: fits(svc, free.as_ref()),
            ..nothing
        }),
        (RollPlan::Replace { max_unavailable }, Some(short)) => {
            let message = short.message(plan, replicas);
            render_replace(
                desired,
                max_unavailable,
                format!("Replace {max_unavailable}: {message}"),
            );
            Ok(PrimaryPlan {
                capacity: Some(RolloutCapacity::Replacing(message)),
                requeue: Some(ROOM_RECHECK),
                ..nothing
            })
        }
        (RollPlan::Wait, Some(short)) => {
            if !keep_group_template {
                keep_old_template(ctx, &ns, &name, desired).await?;
            }
            Ok(PrimaryPlan {
                capacity: Some(RolloutCapacity::Waiting(short.message(plan, replicas))),
                requeue: Some(ROOM_RECHECK),
                keep_group_template,
            })
        }
    }
}

/// `desired` with the live Deployment's template, template digest,
/// strategy and plan (a read of the Deployment, made only while a change
/// waits for room): replicas and everything outside the template are
/// still applied.
async fn keep_old_template(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    desired: &mut Deployment,
) -> Result<(), Error> {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let live = api.get(name).await?;
    let Some(live_spec) = live.spec else {
        return Ok(());
    };
    let annotations = desired
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.remove(ANNOTATION_ROLL_PLAN);
    for key in [ANNOTATION_TEMPLATE, ANNOTATION_ROLL_PLAN] {
        if let Some(v) = live.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
            annotations.insert(key.to_owned(), v.clone());
        }
    }
    if let Some(spec) = desired.spec.as_mut() {
        spec.template = live_spec.template;
        if annotations.contains_key(ANNOTATION_ROLL_PLAN) {
            spec.strategy = live_spec.strategy;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_plan, rolled_out};
    use crate::reconcile::watch::watched::{
        DeploymentCounts, DeploymentSpecKept, WatchedDeployment,
    };

    #[test]
    fn a_recorded_plan_reads_back() {
        assert_eq!(
            parse_plan(
                "Replace 1: needs 8 nvidia.com/gpu in h100, 0 free: replacing 1 of 2 replicas at a time"
            ),
            Some((
                1,
                "needs 8 nvidia.com/gpu in h100, 0 free: replacing 1 of 2 replicas at a time"
            ))
        );
        assert_eq!(parse_plan("Wait: x"), None);
        assert_eq!(parse_plan("Replace x: y"), None);
    }

    fn deployment(generation: i64, observed: i64, counts: (i32, i32, i32)) -> WatchedDeployment {
        let mut d = WatchedDeployment::default();
        d.metadata.generation = Some(generation);
        d.spec = Some(DeploymentSpecKept { replicas: Some(2) });
        d.status = Some(DeploymentCounts {
            observed_generation: Some(observed),
            replicas: Some(counts.0),
            updated_replicas: Some(counts.1),
            ready_replicas: Some(counts.2),
        });
        d
    }

    #[test]
    fn a_rollout_is_done_when_every_replica_runs_the_template_and_is_ready() {
        assert!(rolled_out(&deployment(3, 3, (2, 2, 2))));
        // The controller has not seen the generation yet.
        assert!(!rolled_out(&deployment(3, 2, (2, 2, 2))));
        // One replaced, its successor not ready.
        assert!(!rolled_out(&deployment(3, 3, (2, 2, 1))));
        // An old pod still terminating.
        assert!(!rolled_out(&deployment(3, 3, (3, 2, 2))));
        // One of two still old.
        assert!(!rolled_out(&deployment(3, 3, (2, 1, 2))));
    }
}
