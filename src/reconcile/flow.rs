//! The reconcile flows: one prelude (default and validate, an invalid
//! spec reported in status) shared by the `Deployment` and `RayService`
//! backends, then each backend's children, status and requeue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::{Instrument, debug, info_span, warn};

use super::children::httproute::HTTPRoute;
use super::children::inferencepool::{self, InferencePool};
use super::children::podmonitor::PodMonitor;
use super::children::{self as builders, Desired, Track};
use super::children::{endpoint_picker, podmonitor};
use super::context::Ctx;
use super::error::Error;
use super::graph as resolve;
use super::progress;
use super::requeue::OPTIONAL_API_RECHECK;
use super::status::{
    Observation, Outcome, PolicyResult, PoolReport, Reason, Routing, TrackReplicas,
};
use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::{Backend, InferenceService};
use crate::engine::{self, PolicySnapshot, Verdict};
use crate::state::context::Watched;
use crate::state::with_context;

/// Periodic re-reconcile of every service (drift that no watch event reported).
pub const RESYNC: Duration = Duration::from_secs(3600);
pub(super) async fn reconcile(svc: Arc<InferenceService>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let start = Instant::now();
    let span = info_span!(
        "reconcile",
        namespace = %svc.namespace().unwrap_or_default(),
        name = %svc.name_any()
    );
    let result = reconcile_service(&svc, &ctx).instrument(span.clone()).await;
    // What it did to the children, in one event per kind of change (also
    // when it failed half-way: what was written stays written).
    ctx.writer.announce(&svc).instrument(span.clone()).await;
    let elapsed = start.elapsed();
    let label = match &result {
        Ok(_) => "success",
        Err(e) => e.metric_label(),
    };
    ctx.config.metrics.reconcile(label, elapsed);
    let _enter = span.enter();
    debug!(
        elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        result = label,
        "reconciled"
    );
    if result.is_ok()
        && let Ok(mut f) = ctx.failures.lock()
    {
        f.remove(&ObjectRef::from_obj(svc.as_ref()));
    }
    result
}

/// Exponential backoff per service (1 s for conflicts, 5 s doubling up to 5 min otherwise).
pub(super) fn error_policy(svc: Arc<InferenceService>, error: &Error, ctx: Arc<Ctx>) -> Action {
    if error.is_conflict() {
        return Action::requeue(Duration::from_secs(1));
    }
    let n = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(ObjectRef::from_obj(svc.as_ref())).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    let secs = 5u64
        .saturating_mul(1 << n.saturating_sub(1).min(6))
        .min(300);
    Action::requeue(Duration::from_secs(secs))
}

/// Split policy findings from the object's own errors.
fn policy_result(intrinsic: &Verdict, full: &Verdict) -> PolicyResult {
    let own: Vec<String> = intrinsic.errors.iter().map(ToString::to_string).collect();
    let violations: Vec<String> = full
        .errors
        .iter()
        .map(ToString::to_string)
        .filter(|e| !own.contains(e))
        .collect();
    if !violations.is_empty() {
        return PolicyResult::Violation(violations.join("; "));
    }
    let warnings: Vec<&String> = full
        .warnings
        .iter()
        .filter(|w| !intrinsic.warnings.contains(w))
        .collect();
    if warnings.is_empty() {
        PolicyResult::Compliant
    } else {
        PolicyResult::Warning(
            warnings
                .iter()
                .map(|w| w.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

async fn reconcile_service(svc: &InferenceService, ctx: &Ctx) -> Result<Action, Error> {
    let ns = svc.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    if svc.metadata.deletion_timestamp.is_some() {
        // Children carry owner references: the garbage collector removes them.
        if let Some(g) = ctx.graph.fetcher.get() {
            g.forget(&resolve::cache_key(svc));
        }
        ctx.writer.forget(svc);
        return Ok(Action::await_change());
    }
    let Some(Prelude {
        defaulted,
        graph_internal_allowed,
        obs,
        class,
    }) = prelude(svc, ctx, &ns).await?
    else {
        return Ok(Action::await_change());
    };
    if svc.spec.backend == Some(Backend::RayService) {
        super::ray::reconcile(
            svc,
            ctx,
            &defaulted,
            graph_internal_allowed,
            class.as_ref(),
            obs,
        )
        .await
    } else {
        reconcile_deployment(svc, ctx, &defaulted, class.as_ref(), obs).await
    }
}

/// What the backends build from, once the service is known to be valid.
struct Prelude {
    /// The service, defaulted in memory.
    defaulted: InferenceService,
    /// An applicable policy lists the graph URL's host literally.
    graph_internal_allowed: bool,
    /// The status so far.
    obs: Observation,
    /// The AcceleratorClass the engine pods run on.
    class: Option<AcceleratorClassSpec>,
}

/// What both backends do first: default and validate the service (on its
/// own and against the policies) and find its AcceleratorClass. An invalid
/// service, or one whose class is gone, gets its status and no change to
/// its children: `None`.
async fn prelude(svc: &InferenceService, ctx: &Ctx, ns: &str) -> Result<Option<Prelude>, Error> {
    let Evaluation {
        defaulted,
        intrinsic,
        policy,
        graph_internal_allowed,
        capacity,
    } = evaluate(ctx, svc, ns);
    let mut obs = Observation {
        generation: svc.metadata.generation,
        outcome: Outcome::Invalid(String::new()),
        policy,
        route_path: None,
        request_timeout: None,
        rollout: None,
        capacity: Some(capacity),
        graph: None,
    };
    let class = match defaulted
        .spec
        .accelerator
        .as_ref()
        .and_then(|a| a.class.as_deref())
    {
        None => None,
        Some(name) => match ctx.state.classes().get(name) {
            Some(c) => Some(c.clone()),
            None => {
                obs.outcome = Outcome::AcceleratorClassNotFound(name.to_owned());
                ctx.writer.write_status(svc, &obs).await?;
                return Ok(None);
            }
        },
    };
    if !intrinsic.allowed() {
        obs.outcome = Outcome::Invalid(intrinsic.message());
        ctx.writer.write_status(svc, &obs).await?;
        return Ok(None);
    }
    Ok(Some(Prelude {
        defaulted,
        graph_internal_allowed,
        obs,
        class,
    }))
}

/// `backend: Deployment`: Deployments, Services, HPA and HTTPRoute.
async fn reconcile_deployment(
    svc: &InferenceService,
    ctx: &Ctx,
    defaulted: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
    mut obs: Observation,
) -> Result<Action, Error> {
    // The rollout decides what each track runs and the canary's weight;
    // the children are built from that (the spec's version on the primary
    // at once with strategy Immediate).
    let planned = progress::plan_rollout(ctx, svc, defaulted, class).await?;
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
    let (desired, path) = match built {
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

    match apply_all(ctx, svc, defaulted, desired).await {
        Ok(outcome) => {
            let waiting_for_optional_api = matches!(
                outcome,
                Outcome::Applied {
                    routing: Routing::GatewayApiMissing { .. } | Routing::InferencePoolApiMissing,
                    ..
                }
            );
            obs.outcome = outcome;
            progress::step_applied(ctx, svc, obs.rollout.as_mut());
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
            Ok(Action::requeue(
                planned.requeue.map_or(wait, |r| r.min(wait)),
            ))
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

/// The engine's view of one service: defaulted in memory, validated on its
/// own and against the applicable policies.
struct Evaluation {
    defaulted: InferenceService,
    intrinsic: Verdict,
    policy: PolicyResult,
    /// An applicable policy lists the graph URL's host literally.
    graph_internal_allowed: bool,
    /// `status.capacity`.
    capacity: crate::api::v1beta1::CapacityStatus,
}

/// The InferencePool of each track and, with `endpointPicker.mode:
/// Owned`, its endpoint picker (removed with `mode: None`); what gateways
/// report about the pools. `None` when the InferencePool CRD is not served.
async fn apply_pools(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
) -> Result<Option<PoolReport>, Error> {
    if !ctx.installed::<InferencePool>().await? {
        return Ok(None);
    }
    let mut report = PoolReport::default();
    let mut tracks = vec![Track::Primary];
    if defaulted.spec.canary.is_some() {
        tracks.push(Track::Canary);
    }
    for track in tracks {
        let pool = inferencepool::inference_pool(defaulted, track)?;
        let name = builders::child_name(defaulted, track);
        // The picker first: the pool names its Service.
        if engine::names::owns_endpoint_pickers(defaulted) {
            apply_endpoint_picker(ctx, svc, defaulted, track).await?;
        } else {
            delete_endpoint_picker(ctx, svc, &name).await?;
        }
        match ctx.apply_and_read(svc, &pool).await {
            Ok(applied) => {
                let (reported, complaints) = inferencepool::parent_report(&applied);
                report.reported |= reported;
                report.complaints.extend(complaints);
                report.names.push(name);
            }
            Err(e) if e.is_api_gone() => {
                // The CRD went away between discovery and apply.
                ctx.forget::<InferencePool>();
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(report))
}

/// The endpoint picker of `track`'s pool: identity and rights first,
/// then its configuration, Deployment and Service.
async fn apply_endpoint_picker(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    track: Track,
) -> Result<(), Error> {
    let epp = endpoint_picker::endpoint_picker(defaulted, track)?;
    ctx.apply(svc, &epp.service_account).await?;
    ctx.apply(svc, &epp.role).await?;
    ctx.apply(svc, &epp.role_binding).await?;
    ctx.apply(svc, &epp.config_map).await?;
    ctx.apply(svc, &epp.deployment).await?;
    ctx.apply(svc, &epp.service).await?;
    Ok(())
}

/// Remove the endpoint picker of the pool `pool`, if there is one.
async fn delete_endpoint_picker(
    ctx: &Ctx,
    svc: &InferenceService,
    pool: &str,
) -> Result<(), Error> {
    let name = engine::names::epp_name(pool);
    ctx.delete::<Service>(svc, &name).await?;
    ctx.delete::<Deployment>(svc, &name).await?;
    ctx.delete::<ConfigMap>(svc, &name).await?;
    ctx.delete::<RoleBinding>(svc, &name).await?;
    ctx.delete::<Role>(svc, &name).await?;
    ctx.delete::<ServiceAccount>(svc, &name).await?;
    Ok(())
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

/// Default and validate (synchronous: the engine's context is not `Send`).
fn evaluate(ctx: &Ctx, svc: &InferenceService, ns: &str) -> Evaluation {
    let source = Watched {
        state: &ctx.state,
        server: &ctx.config.server,
        reconciling: Some(svc),
    };
    with_context(&source, ns, |full_ctx| {
        let defaulted = engine::default_service(svc, full_ctx).object;
        let no_policies = PolicySnapshot::default();
        let bare_ctx = engine::Context {
            policies: &no_policies,
            ..*full_ctx
        };
        let intrinsic = engine::validate_service(&defaulted, None, &bare_ctx);
        let full = engine::validate_service(&defaulted, None, full_ctx);
        let policy = match (
            policy_result(&intrinsic, &full),
            super::budget::over_budget(full_ctx, &ctx.state, svc),
        ) {
            (policy, None) => policy,
            (PolicyResult::Violation(v), Some(over)) => {
                PolicyResult::Violation(format!("{v}; {over}"))
            }
            (_, Some(over)) => PolicyResult::OverBudget(over),
        };
        let capacity = engine::capacity::sizing::capacity_status(
            &defaulted.spec,
            full_ctx.classes,
            full_ctx.profiles,
            engine::capacity::charge::charge_of(&defaulted.spec, full_ctx.classes),
        );
        let graph_internal_allowed = defaulted
            .spec
            .graph
            .as_ref()
            .and_then(|g| engine::graph_source::parse_graph_url(&g.url).ok())
            .is_some_and(|url| {
                engine::graph_source::host_listed_literally(&engine::policy::layers(full_ctx), &url)
            });
        Evaluation {
            defaulted,
            intrinsic,
            policy,
            graph_internal_allowed,
            capacity,
        }
    })
}

async fn apply_all(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    desired: Desired,
) -> Result<Outcome, Error> {
    // Why a track's pods are not ready, from the watch on the engine pods.
    let ns = svc.namespace().unwrap_or_default();
    let blocker = |track| ctx.pods.worst(&ns, &svc.name_any(), track);
    let primary = ctx.apply_and_read(svc, &desired.primary).await?;
    ctx.apply(svc, &desired.primary_service).await?;
    let canary_name = builders::child_name(defaulted, Track::Canary);
    let has_canary = desired.canary.is_some();
    // A canary given weight is applied first (its readiness decides the
    // weight routed); one that carries none (a rollout's new target at
    // weight 0, or a canary going away) changes only after the route.
    let weighted = defaulted.spec.canary.as_ref().is_some_and(|c| c.weight > 0);
    let (first, after_route) = if weighted {
        (desired.canary, None)
    } else {
        (None, desired.canary)
    };
    let mut canary = match first {
        Some((deployment, service)) => {
            let d = ctx.apply_and_read(svc, &deployment).await?;
            ctx.apply(svc, &service).await?;
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
        Some(c) => Some(builders::routed_canary_weight(defaulted, c.ready)),
        None => has_canary.then_some(0),
    };
    let pools_wanted = inferencepool::routes_through_pools(defaulted);
    let pools = if pools_wanted {
        apply_pools(ctx, svc, defaulted).await?
    } else {
        None
    };
    let (routing, routed_weight) = match builders::gateway(defaulted) {
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
                        pools: pools.clone(),
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
    };
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
    if !weighted {
        // The route lets go of the canary first (an error above returned
        // before this point, leaving it as it was).
        canary = super::canary::settle(ctx, svc, after_route, &canary_name)
            .await?
            .map(|d| TrackReplicas::of(&d).with_blocker(blocker(Track::Canary)));
    }
    Ok(Outcome::Applied {
        primary: TrackReplicas::of(&primary).with_blocker(blocker(Track::Primary)),
        canary,
        routing,
        routed_weight,
    })
}
