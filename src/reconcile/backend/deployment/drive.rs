//! Driving a progressive rollout from a reconcile: what the cluster shows
//! (the tracks' Deployments, the canary's restarts, the analysis gate), the
//! decision of [`crate::reconcile::rollout`], and the service the children
//! are built from (the primary on the stable version, the canary on the
//! target at the decided weight).

use std::time::Duration;

use super::workload;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::AcceleratorClassSpec;
use crate::api::rollout::{RolloutPhase, RolloutStatus, VersionRef};
use crate::api::v1beta1::{CanarySpec, EngineSpec, InferenceService};
use crate::api::vocabulary::RolloutReason;
use crate::engine;
use crate::reconcile::children::{self as builders, Track};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::rollout::gate;
use crate::reconcile::rollout::{
    self as machine, ACTION_ANNOTATION, Decision, Gate, Input, Note, Readiness, RolloutObserved,
    StepClock, StepTimes,
};
use crate::reconcile::status::TrackReplicas;
use crate::state::context::Watched;
use crate::state::with_context;

/// What the children are built from, and what the rollout says.
pub(super) struct Planned {
    /// The defaulted service with each track's version and the canary's weight.
    pub effective: InferenceService,
    /// The next `status.rollout`.
    pub status: RolloutStatus,
    /// Events to publish once the status is written.
    pub notes: Vec<Note>,
    /// When to look again.
    pub requeue: Option<Duration>,
}

/// `t` cut to the second, as a stored `metav1.Time` holds it.
fn to_the_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// The clock of `current`'s step, when this process timed it.
fn clock_of(ctx: &Ctx, svc: &InferenceService, current: Option<&RolloutStatus>) -> StepClock {
    let Some(stored) = current.and_then(|c| c.step_started_at.as_ref()) else {
        return StepClock::default();
    };
    ctx.step_clocks
        .lock()
        .ok()
        .and_then(|m| m.get(&ObjectRef::from_obj(svc)).copied())
        .filter(|t| t.stored == stored.0)
        .map(|t| t.clock)
        .unwrap_or_default()
}

/// Remember that the gate's query of `current`'s step ran at `now`.
fn queried(ctx: &Ctx, svc: &InferenceService, current: Option<&RolloutStatus>, now: Timestamp) {
    let Some(stored) = current.and_then(|c| c.step_started_at.as_ref()) else {
        return;
    };
    if let Ok(mut m) = ctx.step_clocks.lock() {
        let times = m.entry(ObjectRef::from_obj(svc)).or_insert(StepTimes {
            stored: stored.0,
            clock: StepClock::default(),
        });
        if times.stored != stored.0 {
            *times = StepTimes {
                stored: stored.0,
                clock: StepClock::default(),
            };
        }
        times.clock.queried = Some(now);
    }
}

/// The rollout's canary waits for room on its class's pool (`next` says
/// it waits for the canary): it says so, and the progress deadline does
/// not run meanwhile (it runs from when the canary's pods can be placed,
/// as after any wait that was not the canary's).
pub(super) fn waiting_for_room(svc: &InferenceService, next: &mut RolloutStatus) {
    let waits = RolloutReason::WaitingForCanary.as_str();
    let room = RolloutReason::WaitingForRoom.as_str();
    if next.reason.as_deref() != Some(waits) && next.reason.as_deref() != Some(room) {
        return;
    }
    let before = svc.status.as_ref().and_then(|s| s.rollout.as_ref());
    if let Some(before) = before.filter(|b| b.reason.as_deref() == Some(room)) {
        next.progress_started_at
            .clone_from(&before.progress_started_at);
    }
    next.reason = Some(room.to_owned());
    next.message =
        Some("waiting for room for the canary's pods on the pool (see CanaryReady)".to_owned());
}

/// The children of a reconcile are applied (the route with the step's
/// weight among them): a step that started in this reconcile starts now,
/// and this process remembers the instant at its full precision.
pub(super) fn step_applied(ctx: &Ctx, svc: &InferenceService, next: Option<&mut RolloutStatus>) {
    let previous = svc
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .and_then(|r| r.step_started_at.as_ref());
    let key = ObjectRef::from_obj(svc);
    let Ok(mut m) = ctx.step_clocks.lock() else {
        return;
    };
    match next {
        Some(st) if st.step_started_at.is_some() && st.step_started_at.as_ref() != previous => {
            let now = Timestamp::now();
            st.step_started_at = Some(Time(now));
            m.insert(
                key,
                StepTimes {
                    stored: to_the_second(now),
                    clock: StepClock {
                        started: Some(now),
                        queried: None,
                    },
                },
            );
        }
        Some(st) if st.step_started_at.is_some() => {}
        _ => {
            m.remove(&key);
        }
    }
}

/// `defaulted` with the primary on `primary` and the canary (when any) on
/// its version at its weight, sized for the steps it will carry.
fn with_versions(
    defaulted: &InferenceService,
    primary: &VersionRef,
    canary: Option<&(VersionRef, i32)>,
) -> InferenceService {
    let mut e = defaulted.clone();
    e.spec.model = primary.model.clone();
    e.spec
        .engine
        .get_or_insert_with(EngineSpec::default)
        .image
        .clone_from(&primary.engine_image);
    if let Some((v, w)) = canary {
        // Sized (by the usual canary rule) for the largest step, so the
        // canary is ready before its weight grows; then given its weight.
        let largest = defaulted
            .spec
            .rollout
            .as_ref()
            .and_then(|r| r.steps.iter().copied().max())
            .unwrap_or(*w);
        let replicas = engine::resources::canary_replicas_at(&e.spec, largest.max(*w).max(1), None);
        e.spec.canary = Some(CanarySpec {
            model: v.model.clone(),
            engine_image: v.engine_image.clone(),
            weight: *w,
            replicas: Some(replicas),
            // The rollout's track is where its canary's full-pool mode is set.
            on_full_pool: defaulted
                .spec
                .rollout
                .as_ref()
                .and_then(|r| r.canary.as_ref())
                .and_then(|c| c.on_full_pool),
        });
    } else {
        e.spec.canary = None;
    }
    e
}

/// The rollout's decision for this reconcile (strategy Immediate: the
/// spec's version is stable at once).
pub(super) async fn plan_rollout(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
) -> Result<Planned, Error> {
    let desired = engine::rollout::version_of(defaulted);
    let current = svc.status.as_ref().and_then(|s| s.rollout.as_ref());
    let action = svc.annotations().get(ACTION_ANNOTATION).map(String::as_str);
    let acted_on = ctx.writer.acted_on(svc).actions;
    if !engine::rollout::is_progressive(defaulted) {
        let mut status = RolloutStatus {
            phase: RolloutPhase::Stable,
            stable: Some(desired.clone()),
            last_action: current.and_then(|c| c.last_action.clone()),
            actions_seen: current.map(|c| c.actions_seen.clone()).unwrap_or_default(),
            reason: Some("Stable".into()),
            message: Some(format!("{} is stable", desired.model.r#ref)),
            ..RolloutStatus::default()
        };
        // Nothing to act on, but the value counts as seen: it does not act
        // on a canary rollout later.
        let _ = machine::new_action(&mut status, action, &acted_on);
        return Ok(Planned {
            effective: defaulted.clone(),
            status,
            notes: Vec::new(),
            requeue: None,
        });
    }
    let plan = defaulted.spec.rollout.clone().unwrap_or_default();
    let now = Timestamp::now();
    let under_way = current
        .is_some_and(|c| matches!(c.phase, RolloutPhase::Progressing | RolloutPhase::Paused));
    let observed = if under_way {
        observe_rollout(ctx, defaulted, current, class)?
    } else {
        RolloutObserved::default()
    };
    let clock = clock_of(ctx, svc, current);
    let gate = match plan.analysis.as_ref().and_then(|a| a.prometheus.as_ref()) {
        Some(p) if machine::gate_due(&plan, current, &clock, now) => {
            let verdict = evaluate_gate(ctx, defaulted, p).await;
            queried(ctx, svc, current, now);
            Some(verdict)
        }
        _ => None,
    };
    let Decision {
        status,
        primary,
        canary,
        notes,
        requeue,
    } = machine::decide(&Input {
        plan: &plan,
        desired,
        current,
        observed,
        gate,
        action,
        acted_on: &acted_on,
        clock,
        now,
    });
    Ok(Planned {
        effective: with_versions(defaulted, &primary, canary.as_ref()),
        status,
        notes,
        requeue,
    })
}

/// The tracks as the cluster shows them: the canary's readiness (only
/// once it runs the target), its restarts, and whether the primary runs
/// what the last decision asked and is complete.
fn observe_rollout(
    ctx: &Ctx,
    defaulted: &InferenceService,
    current: Option<&RolloutStatus>,
    class: Option<&AcceleratorClassSpec>,
) -> Result<RolloutObserved, Error> {
    let Some(st) = current else {
        return Ok(RolloutObserved::default());
    };
    let ns = defaulted.namespace().unwrap_or_default();
    let stable = st
        .stable
        .clone()
        .unwrap_or_else(|| engine::rollout::version_of(defaulted));
    let target = st
        .target
        .clone()
        .unwrap_or_else(|| engine::rollout::version_of(defaulted));
    let weight = st.weight.unwrap_or(0);
    let promoting = st.promoting(defaulted.spec.rollout.as_ref().map_or(0, |r| r.steps.len()));
    let primary_version = if promoting { &target } else { &stable };
    let expected = with_versions(defaulted, primary_version, Some(&(target.clone(), weight)));
    let mut observed = RolloutObserved::default();
    // The tracks' Deployments as their watch keeps them: the engine each
    // runs (a fingerprint) and its replica counts.
    // A replica that spans nodes runs as a LeaderWorkerSet group.
    let group = crate::engine::multi_node::group_of(&expected, class);
    let want = |track| {
        builders::deployment(&expected, track, class)
            .and_then(|d| builders::workload(&expected, track, class, group, &d))
    };
    let canary_want = want(Track::Canary)?;
    if let Some(d) = workload::cached(ctx, &ns, &canary_want)
        && d.runs_template_of(workload::meta(&canary_want))
    {
        let r = TrackReplicas::of(&d);
        observed.canary = Some(Readiness {
            ready: if r.complete() { r.ready } else { 0 },
            desired: r.desired,
        });
    }
    let primary_want = want(Track::Primary)?;
    if let Some(d) = workload::cached(ctx, &ns, &primary_want) {
        observed.primary_complete =
            promoting && d.runs_template_of(workload::meta(&primary_want)) && d.complete();
    }
    // The canary's restarts, as the engine pod watch counts them.
    observed.canary_restarts = ctx.pods.canary_restarts(&ns, &defaulted.name_any());
    Ok(observed)
}

/// Run the gate's query, confined to the service's namespace, at the
/// Prometheus a ClusterInferencePolicy names (or `serve --prometheus-url`);
/// without an address the gate holds and says so.
async fn evaluate_gate(
    ctx: &Ctx,
    defaulted: &InferenceService,
    gate: &crate::api::rollout::PrometheusGate,
) -> Gate {
    let ns = defaulted.namespace().unwrap_or_default();
    let source = Watched {
        state: &ctx.state,
        server: &ctx.config.server,
        reconciling: Some(defaulted),
    };
    let from_policy = with_context(&source, &ns, |engine_ctx| {
        engine::policy::layers(engine_ctx)
            .iter()
            .filter(|l| l.kind == "ClusterInferencePolicy")
            .find_map(|l| {
                l.defaults?
                    .rollout
                    .as_ref()?
                    .analysis
                    .as_ref()?
                    .prometheus
                    .as_ref()?
                    .address
                    .clone()
            })
    });
    let Some(address) = from_policy.or_else(|| ctx.config.prometheus_url.clone()) else {
        return Gate::NoAddress(
            "the analysis has a query but no Prometheus address: a ClusterInferencePolicy sets defaults.rollout.analysis.prometheus.address, or infergate runs with serve --prometheus-url".into(),
        );
    };
    let rendered = engine::promql::render_query(
        &gate.query,
        &ns,
        &defaulted.name_any(),
        &builders::child_name(defaulted, Track::Canary),
    );
    gate::evaluate(&address, &rendered, &ns, gate).await
}
