//! `backend: Deployment`: the rollout planned, the tracks' Deployments
//! and Services, HPA, InferencePools, HTTPRoute and PodMonitor built and
//! applied in order, the canary settled once the route lets go of it, and
//! the status written.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::warn;

use super::pools::{apply_pools, delete_endpoint_picker};
use super::workload::{self, Applied};
use super::{canary, canary_room, drive, full_pool};
use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::reconcile::backend::requeue::{OPTIONAL_API_RECHECK, RESYNC};
use crate::reconcile::children::httproute::HTTPRoute;
use crate::reconcile::children::inferencepool::{self, InferencePool};
use crate::reconcile::children::podmonitor::{self, PodMonitor};
use crate::reconcile::children::{self as builders, Desired, Track};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::status::{Observation, Outcome, Reason, Routing, TrackReplicas};

/// `backend: Deployment`: Deployments, Services, HPA and HTTPRoute.
pub(in crate::reconcile::backend) async fn reconcile_deployment(
    svc: &InferenceService,
    ctx: &Ctx,
    defaulted: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
    mut obs: Observation,
) -> Result<Action, Error> {
    // The rollout decides what each track runs and the canary's weight;
    // the children are built from that (the spec's version on the primary
    // at once with strategy Immediate).
    let planned = drive::plan_rollout(ctx, svc, defaulted, class).await?;
    let defaulted = &planned.effective;
    obs.rollout = Some(planned.status.clone());
    let gateway = builders::gateway(defaulted);
    let built = builders::desired(defaulted, class).and_then(|d| {
        let path = match gateway {
            Some(_) => Some(
                engine::render_route_path(defaulted)
                    .map_err(|e| builders::BuildError::Route(e.to_string()))?,
            ),
            None => None,
        };
        Ok((d, path))
    });
    let (mut desired, path) = match built {
        Ok(b) => b,
        Err(e) => {
            obs.outcome = Outcome::Invalid(e.to_string());
            ctx.writer.write_status(svc, &obs).await?;
            return Ok(Action::await_change());
        }
    };
    obs.route_path = path;
    obs.request_timeout = gateway
        .as_ref()
        .map(|_| builders::request_timeout(defaulted));

    // A change of the primary's template on a pool without room for one
    // more replica replaces in place or waits.
    let group = desired.group;
    let primary_plan =
        full_pool::plan_primary(ctx, svc, defaulted, class, &mut desired.primary, group).await?;
    obs.rollout_capacity = primary_plan.capacity;
    let requeue = match (planned.requeue, primary_plan.requeue) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // A canary's new replicas only where their devices are free: it waits,
    // or the primary lends it replicas.
    let room = canary_room::canary_room(ctx, svc, defaulted, class, &mut desired);
    obs.canary_capacity.clone_from(&room.capacity);
    if room.hold
        && let Some(st) = obs.rollout.as_mut()
    {
        drive::waiting_for_room(svc, st);
    }
    let requeue = if room.recheck {
        Some(requeue.map_or(full_pool::ROOM_RECHECK, |r| r.min(full_pool::ROOM_RECHECK)))
    } else {
        requeue
    };

    let plan = (&room, primary_plan.keep_group_template);
    match apply_all(ctx, svc, (defaulted, class), desired, plan).await {
        Ok(outcome) => {
            let waiting_for_optional_api = matches!(
                outcome,
                Outcome::Applied {
                    routing: Routing::GatewayApiMissing { .. } | Routing::InferencePoolApiMissing,
                    ..
                } | Outcome::LeaderWorkerSetApiMissing { .. }
            );
            obs.outcome = outcome;
            drive::step_applied(ctx, svc, obs.rollout.as_mut());
            ctx.writer.write_status(svc, &obs).await?;
            for n in &planned.notes {
                let kind = if n.warning {
                    kube::runtime::events::EventType::Warning
                } else {
                    kube::runtime::events::EventType::Normal
                };
                ctx.writer
                    .publish(svc, kind, Reason::Rollout(n.reason), n.message.clone())
                    .await;
            }
            let wait = if waiting_for_optional_api {
                OPTIONAL_API_RECHECK
            } else {
                RESYNC
            };
            Ok(Action::requeue(requeue.map_or(wait, |r| r.min(wait))))
        }
        Err(e) => {
            // The rollout's step is recorded only once its children are applied.
            obs.rollout = None;
            obs.outcome = Outcome::Failed(e.to_string());
            if let Err(se) = ctx.writer.write_status(svc, &obs).await {
                warn!(error = %se, "failed to record the apply failure in status");
            }
            Err(e)
        }
    }
}

/// The HTTPRoute with the canary's `routed` weight (none without a
/// gateway, and left as it is when a pool or the Gateway API is missing):
/// how routing turned out and the weight the route carries.
async fn route(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    pools_wanted: bool,
    pools: Option<crate::reconcile::status::PoolReport>,
    routed: Option<i32>,
) -> Result<(Routing, Option<i32>), Error> {
    let primary_name = builders::child_name(defaulted, Track::Primary);
    Ok(match builders::gateway(defaulted) {
        // Never a silent fallback to the Services: the route stays as it is.
        _ if pools_wanted && pools.is_none() => (Routing::InferencePoolApiMissing, None),
        None => {
            ctx.delete::<HTTPRoute>(svc, &primary_name).await?;
            (Routing::NoGateway, None)
        }
        Some(_) if !ctx.installed::<HTTPRoute>().await? => (
            Routing::GatewayApiMissing {
                gateway: builders::gateway_display(defaulted),
            },
            None,
        ),
        Some(_) => {
            let route = builders::http_route(defaulted, routed.unwrap_or(0))?
                .ok_or(Error::MissingMetadata("spec.routing.gateway"))?;
            match ctx.apply_and_read(svc, &route).await {
                Ok(applied) => (
                    Routing::Applied {
                        gateway: builders::gateway_display(defaulted),
                        path: engine::render_route_path(defaulted)
                            .map_err(|e| builders::BuildError::Route(e.to_string()))?,
                        rejection: builders::rejection(&applied),
                        pools,
                    },
                    routed,
                ),
                Err(e) if e.is_api_gone() => {
                    // The CRD went away between discovery and apply.
                    ctx.forget::<HTTPRoute>();
                    (
                        Routing::GatewayApiMissing {
                            gateway: builders::gateway_display(defaulted),
                        },
                        None,
                    )
                }
                Err(e) => return Err(e),
            }
        }
    })
}

/// PodMonitor `S` where the Prometheus Operator's CRD is served; nothing
/// (and no failure) where it is not.
async fn apply_pod_monitor(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
) -> Result<(), Error> {
    if !ctx.installed::<PodMonitor>().await? {
        return Ok(());
    }
    let monitor = podmonitor::pod_monitor(defaulted)?;
    match ctx.apply(svc, &monitor).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_api_gone() => {
            // The CRD went away between discovery and apply.
            ctx.forget::<PodMonitor>();
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A canary given weight, applied before the route (its readiness decides
/// the weight routed): its workload `w` and Service; `None` when the
/// cluster serves no LeaderWorkerSet API for its groups. A canary that
/// changed shape loses its old workload once the new one is complete (the
/// Service selects both meanwhile).
async fn apply_weighted_canary(
    ctx: &Ctx,
    svc: &InferenceService,
    w: &builders::Workload,
    service: &k8s_openapi::api::core::v1::Service,
    canary_name: &str,
) -> Result<Option<crate::reconcile::watch::watched::WatchedDeployment>, Error> {
    let Applied::Running(d) = workload::apply(ctx, svc, w).await? else {
        return Ok(None);
    };
    ctx.apply(svc, service).await?;
    workload::retire_other_shape(ctx, svc, w, &d, canary_name).await?;
    Ok(Some(*d))
}

async fn apply_all(
    ctx: &Ctx,
    svc: &InferenceService,
    (defaulted, class): (&InferenceService, Option<&AcceleratorClassSpec>),
    desired: Desired,
    (room, keep_group_template): (&canary_room::CanaryRoom, bool),
) -> Result<Outcome, Error> {
    let canary_waits = room.hold;
    // Why a track's pods are not ready, from the watch on the engine pods.
    let ns = svc.namespace().unwrap_or_default();
    let blocker = |track| ctx.pods.worst(&ns, &svc.name_any(), track);
    let group = desired.group;
    let track_workload = |track, d: &k8s_openapi::api::apps::v1::Deployment| {
        builders::workload(defaulted, track, class, group, d)
    };
    let mut primary_workload = track_workload(Track::Primary, &desired.primary)?;
    if keep_group_template {
        // A change of the groups' template waits for room.
        workload::keep_live_template(ctx, &ns, &mut primary_workload).await?;
    }
    let api_missing = || Outcome::LeaderWorkerSetApiMissing {
        nodes: group.map_or(1, |g| g.nodes),
    };
    let Applied::Running(primary) = workload::apply(ctx, svc, &primary_workload).await? else {
        return Ok(api_missing());
    };
    ctx.apply(svc, &desired.primary_service).await?;
    let canary_name = builders::child_name(defaulted, Track::Canary);
    let has_canary = desired.canary.is_some();
    // A canary given weight is applied first (its readiness decides the
    // weight routed); one that carries none (a rollout's new target at
    // weight 0, or a canary going away) changes only after the route.
    let weighted = defaulted.spec.canary.as_ref().is_some_and(|c| c.weight > 0);
    // A new canary whose pods do not fit waits: nothing of it is applied
    // or deleted, and the route carries it no weight.
    let (first, after_route) = if canary_waits {
        (None, None)
    } else if weighted {
        (desired.canary, None)
    } else {
        (None, desired.canary)
    };
    let mut canary = match first {
        Some((deployment, service)) => {
            let w = track_workload(Track::Canary, &deployment)?;
            let Some(d) = apply_weighted_canary(ctx, svc, &w, &service, &canary_name).await? else {
                return Ok(api_missing());
            };
            Some(TrackReplicas::of(&d).with_blocker(blocker(Track::Canary)))
        }
        None => None,
    };
    let primary_name = builders::child_name(defaulted, Track::Primary);
    match desired.hpa {
        Some(hpa) => {
            ctx.apply(svc, &hpa).await?;
        }
        None => {
            ctx.delete::<HorizontalPodAutoscaler>(svc, &primary_name)
                .await?;
        }
    }
    let routed = match &canary {
        Some(c) if room.lent > 0 => {
            // Lent replicas: each track's weight carried by its ready ones.
            let wanted = builders::routed_canary_weight(defaulted, c.ready);
            let primary_ready = TrackReplicas::of(&primary).ready;
            Some(engine::full_pool::carried_weight(
                wanted,
                primary_ready,
                c.ready,
            ))
        }
        Some(c) => Some(builders::routed_canary_weight(defaulted, c.ready)),
        None => has_canary.then_some(0),
    };
    let pools_wanted = inferencepool::routes_through_pools(defaulted);
    let pools = if pools_wanted {
        apply_pools(ctx, svc, defaulted).await?
    } else {
        None
    };
    let (routing, routed_weight) = route(ctx, svc, defaulted, pools_wanted, pools, routed).await?;
    apply_pod_monitor(ctx, svc, defaulted).await?;
    // Pools (and their pickers) the route no longer names go now that
    // the API server holds the route without them.
    let unwanted_pools: &[Track] = match (pools_wanted, has_canary) {
        (false, _) => &[Track::Primary, Track::Canary],
        (true, false) => &[Track::Canary],
        (true, true) => &[],
    };
    for track in unwanted_pools {
        let pool = builders::child_name(defaulted, *track);
        ctx.delete::<InferencePool>(svc, &pool).await?;
        delete_endpoint_picker(ctx, svc, &pool).await?;
    }
    if !weighted && !canary_waits {
        // The route lets go of the canary first (an error above returned
        // before this point, leaving it as it was).
        let after_route = match after_route {
            Some((deployment, service)) => {
                Some((track_workload(Track::Canary, &deployment)?, service))
            }
            None => None,
        };
        canary = canary::settle(ctx, svc, after_route, &canary_name)
            .await?
            .map(|d| TrackReplicas::of(&d).with_blocker(blocker(Track::Canary)));
    }
    // A change of shape: the old workload goes once the new one is complete.
    workload::retire_other_shape(ctx, svc, &primary_workload, &primary, &primary_name).await?;
    Ok(Outcome::Applied {
        primary: TrackReplicas::of(&primary).with_blocker(blocker(Track::Primary)),
        canary,
        routing,
        routed_weight,
    })
}
