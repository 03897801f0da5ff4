//! The conditions an observation implies: `Reconciled`, `Ready` (with why
//! a track's pods do not start), `RoutingReady`, `GraphReady` and
//! `PolicyCompliant`.

use super::cond::{Cond, CondStatus, ConditionType};
use super::observation::{GraphUse, Observation, Outcome, PolicyResult, RolloutCapacity};
use super::reason::Reason;
use super::replicas::TrackReplicas;
use super::routing;
use crate::api::vocabulary::GraphReason;
use crate::api::vocabulary::message::{Replicas, TrackMessage, crash_looping};
use crate::reconcile::children::Track;
use crate::reconcile::children::rayservice::RayServiceObserved;
use crate::reconcile::pods::PodState;

fn replicas_message(primary: &TrackReplicas, canary: Option<&TrackReplicas>) -> String {
    let mut msg = format!(
        "{}/{} primary replicas ready",
        primary.ready, primary.desired
    );
    if let Some(c) = canary {
        msg.push_str(&format!(
            ", {}/{} canary replicas ready",
            c.ready, c.desired
        ));
    }
    msg
}

/// `Ready=False` for the most telling pod state among the tracks that are
/// short of ready replicas (the primary's on a tie); `None` when no such
/// track's pods say why.
fn blocked_ready(primary: &TrackReplicas, canary: Option<&TrackReplicas>) -> Option<Cond> {
    let tracks = [(Track::Primary, Some(primary)), (Track::Canary, canary)];
    let (track, replicas, state) = tracks
        .into_iter()
        .filter_map(|(t, r)| {
            let r = r?;
            let state = r.blocked()?;
            Some((state.rank()?, (t, r, state)))
        })
        .min_by_key(|(rank, _)| *rank)?
        .1;
    let counts = Replicas {
        ready: replicas.ready,
        desired: replicas.desired,
    };
    pods_say(track, Some(counts), state)
}

/// `Ready=False` for what a not-ready pod of `track` says (the scheduler's,
/// the kubelet's words), with the track's replicas when they are known;
/// `None` for a ready pod.
fn pods_say(track: Track, counts: Option<Replicas>, state: &PodState) -> Option<Cond> {
    let blocked = |detail: String| match counts {
        Some(counts) => TrackMessage::blocked(track, counts, detail),
        None => format!("{track}: {detail}"),
    };
    let waiting = |detail: &dyn std::fmt::Display| match counts {
        Some(counts) => TrackMessage::waiting(track, counts, detail),
        None => format!("{track}: {detail}"),
    };
    let (reason, message) = match state {
        PodState::Ready => return None,
        PodState::Unschedulable { message } if message.is_empty() => (
            Reason::Unschedulable,
            blocked("the scheduler finds no node for the pods".to_owned()),
        ),
        PodState::Unschedulable { message } => (Reason::Unschedulable, blocked(message.clone())),
        PodState::ImagePullFailed { image, message, .. } => (
            Reason::ImagePullFailed,
            blocked(if message.is_empty() {
                format!("image {image:?} cannot be pulled")
            } else {
                format!("image {image:?} cannot be pulled: {message}")
            }),
        ),
        PodState::CrashLooping {
            container,
            exit_code,
            reason,
        } => (
            Reason::CrashLooping,
            blocked(crash_looping(container, *exit_code, reason)),
        ),
        PodState::Starting => (Reason::Starting, waiting(&"pods are starting")),
        PodState::Waiting {
            container,
            reason,
            message,
        } => (
            Reason::Starting,
            waiting(&format_args!(
                "container {container:?} waits: {reason}: {message}"
            )),
        ),
    };
    Some(Cond::quoting(ConditionType::Ready, false, reason, message))
}

/// `Reconciled`, with its status, reason and message.
fn reconciled(status: bool, reason: Reason, message: String) -> Cond {
    Cond::new(ConditionType::Reconciled, status, reason, message)
}

/// The conditions of a service whose children were all applied: its
/// tracks' readiness, its routing, and on a full pool what a rollout or a
/// canary does.
fn applied(
    obs: &Observation,
    primary: &TrackReplicas,
    canary: Option<&TrackReplicas>,
    routing: &super::observation::Routing,
) -> Vec<Cond> {
    let mut out = vec![reconciled(
        true,
        Reason::Applied,
        "every child is applied".to_owned(),
    )];
    let complete = primary.complete() && canary.is_none_or(TrackReplicas::complete);
    let msg = replicas_message(primary, canary);
    out.push(if complete {
        Cond::new(ConditionType::Ready, true, Reason::Available, msg)
    } else if let Some(blocked) = blocked_ready(primary, canary) {
        blocked
    } else {
        Cond::new(ConditionType::Ready, false, Reason::Progressing, msg)
    });
    out.push(routing::condition(routing));
    if let Some(c) = &obs.rollout_capacity {
        out.push(rollout_capacity(c));
    }
    out.extend(canary_ready(canary, obs.canary_capacity.as_deref()));
    out
}

/// The conditions an observation implies (only those it decides).
#[must_use]
pub fn conditions_for(obs: &Observation) -> Vec<Cond> {
    let mut out = Vec::with_capacity(4);
    match &obs.outcome {
        Outcome::Applied {
            primary,
            canary,
            routing,
            ..
        } => out.extend(applied(obs, primary, canary.as_ref(), routing)),
        Outcome::Invalid(msg) => {
            out.push(reconciled(false, Reason::InvalidSpec, msg.clone()));
            out.push(Cond::new(
                ConditionType::Ready,
                false,
                Reason::InvalidSpec,
                "the spec is invalid; children are left as they are".to_owned(),
            ));
        }
        Outcome::Failed(msg) => {
            // Ready keeps what was last observed: the children may still serve.
            out.push(reconciled(false, Reason::ApplyFailed, msg.clone()));
        }
        Outcome::RayServiceApplied {
            observed,
            nodes,
            workers,
            blocker,
            graph,
            routing,
        } => {
            match graph {
                GraphUse::Current => {
                    out.push(reconciled(
                        true,
                        Reason::Applied,
                        "the RayService is applied".to_owned(),
                    ));
                    out.push(Cond::new(
                        ConditionType::GraphReady,
                        true,
                        Reason::GraphResolved,
                        format!("the serving graph ({nodes} nodes) is valid and applied"),
                    ));
                }
                GraphUse::LastGood {
                    reason,
                    message,
                    live,
                } => {
                    let [graph_ready, _] = graph_failed(*reason, message, live.as_deref());
                    out.push(graph_ready);
                    out.push(reconciled(
                        false,
                        Reason::Graph(*reason),
                        format!(
                            "the RayService is applied with the last good graph: the latest one is not usable ({reason}, see GraphReady)"
                        ),
                    ));
                }
                GraphUse::Waiting => {}
            }
            out.push(ray_ready(observed, *workers, blocker.as_deref()));
            out.push(routing::condition(routing));
        }
        Outcome::GraphFailed {
            reason,
            message,
            stale,
        } => out.extend(graph_failed(*reason, message, stale.as_deref())),
        Outcome::GraphQueued(message) => {
            out.push(Cond::new(
                ConditionType::GraphReady,
                CondStatus::Unknown,
                Reason::Graph(GraphReason::FetchQueued),
                message.clone(),
            ));
        }
        Outcome::AcceleratorClassNotFound(name) => {
            let msg = format!(
                "AcceleratorClass {name:?} does not exist; the children are left as they are until it does or spec.accelerator.class names another"
            );
            out.push(reconciled(
                false,
                Reason::AcceleratorClassNotFound,
                msg.clone(),
            ));
            out.push(Cond::new(
                ConditionType::Ready,
                false,
                Reason::AcceleratorClassNotFound,
                msg,
            ));
        }
        Outcome::RayServiceApiMissing => {
            out.push(reconciled(false, Reason::RayServiceNotInstalled, "the KubeRay RayService CRD (rayservices.ray.io/v1) is not installed: install KubeRay to run backend RayService".to_owned()));
        }
        Outcome::LeaderWorkerSetApiMissing { nodes } => {
            let msg = format!(
                "a replica spans {nodes} nodes and runs as a LeaderWorkerSet group, but the LeaderWorkerSet CRD (leaderworkersets.leaderworkerset.x-k8s.io/v1) is not installed: install LeaderWorkerSet (its CRD and controller)"
            );
            out.push(reconciled(
                false,
                Reason::LeaderWorkerSetNotInstalled,
                msg.clone(),
            ));
            out.push(Cond::new(
                ConditionType::Ready,
                false,
                Reason::LeaderWorkerSetNotInstalled,
                msg,
            ));
        }
    }
    out.push(policy_condition(&obs.policy));
    out
}

/// `RolloutCapacity`: whether a change of the primary's template has the
/// room it needs, and what it does when it has not.
fn rollout_capacity(c: &RolloutCapacity) -> Cond {
    let (status, reason, message) = match c {
        RolloutCapacity::Fits => (
            true,
            Reason::RolledOut,
            "no rollout of the primary waits for devices: it adds one replica before it removes one while a replica's devices are free".to_owned(),
        ),
        RolloutCapacity::Done(how) => (
            true,
            Reason::RolledOut,
            format!("the rollout in place is done ({how})"),
        ),
        RolloutCapacity::Replacing(m) => (false, Reason::ReplacingInPlace, m.clone()),
        RolloutCapacity::Waiting(m) => (false, Reason::WaitingForCapacity, m.clone()),
    };
    Cond::new(ConditionType::RolloutCapacity, status, reason, message)
}

/// `CanaryReady` while there is a canary: False with `CanaryCapacity` and
/// the numbers while its pods wait for room, else whether its replicas
/// are ready.
fn canary_ready(canary: Option<&TrackReplicas>, waiting: Option<&str>) -> Option<Cond> {
    if let Some(numbers) = waiting {
        return Some(Cond::new(
            ConditionType::CanaryReady,
            false,
            Reason::CanaryCapacity,
            numbers.to_owned(),
        ));
    }
    let c = canary?;
    let msg = format!("{}/{} canary replicas ready", c.ready, c.desired);
    Some(if c.complete() {
        Cond::new(ConditionType::CanaryReady, true, Reason::Available, msg)
    } else {
        Cond::new(ConditionType::CanaryReady, false, Reason::Progressing, msg)
    })
}

/// `PolicyCompliant`, from what the policy check of the reconcile found.
fn policy_condition(policy: &PolicyResult) -> Cond {
    match policy {
        PolicyResult::Compliant => Cond::new(
            ConditionType::PolicyCompliant,
            true,
            Reason::Compliant,
            "the service complies with every applicable policy".to_owned(),
        ),
        PolicyResult::Violation(msg) => Cond::new(
            ConditionType::PolicyCompliant,
            false,
            Reason::PolicyViolation,
            format!(
                "the service violates a policy adopted after it (left running as it is): {msg}"
            ),
        ),
        PolicyResult::Warning(msg) => Cond::new(
            ConditionType::PolicyCompliant,
            false,
            Reason::PolicyWarning,
            msg.clone(),
        ),
        PolicyResult::NoLongerFits(msg) => Cond::new(
            ConditionType::PolicyCompliant,
            false,
            Reason::NoLongerFits,
            format!(
                "the service no longer fits its GPUs (a ModelProfile or AcceleratorClass changed after it; it goes on running and being reconciled, and an update that keeps the fit's inputs is admitted): {msg}"
            ),
        ),
        PolicyResult::OverBudget(msg) => Cond::new(
            ConditionType::PolicyCompliant,
            false,
            Reason::OverBudget,
            format!(
                "the service no longer fits its namespace's budget, counted after every older service (left running as it is): {msg}"
            ),
        ),
    }
}

/// A graph that could not be used: `GraphReady=False` (`StaleGraph` while
/// a last good graph keeps serving) and `Reconciled=False`; the existing
/// RayService is untouched, so `Ready` keeps what was last observed.
fn graph_failed(reason: GraphReason, message: &str, stale: Option<&str>) -> [Cond; 2] {
    [
        match stale {
            None => Cond::new(
                ConditionType::GraphReady,
                false,
                Reason::Graph(reason),
                message.to_owned(),
            ),
            Some(live) => Cond::new(
                ConditionType::GraphReady,
                false,
                Reason::Graph(GraphReason::StaleGraph),
                format!(
                    "the last good graph ({live}) keeps serving; the latest fetch failed: {reason}: {message}"
                ),
            ),
        },
        Cond::new(
            ConditionType::Reconciled,
            false,
            Reason::Graph(reason),
            format!(
                "the RayService is left as it is: the serving graph is not usable ({reason}, see GraphReady)"
            ),
        ),
    ]
}

/// `Ready` of a RayService-backed service: what its pods say (head and
/// workers, as a Deployment's) while the RayService is not ready or its
/// workers are short, else what KubeRay says.
fn ray_ready(
    observed: &RayServiceObserved,
    workers: Option<(i32, i32)>,
    blocker: Option<&PodState>,
) -> Cond {
    let short = workers.is_some_and(|(ready, desired)| ready < desired);
    let counts = workers.map(|(ready, desired)| Replicas { ready, desired });
    (!observed.ready || short)
        .then(|| pods_say(Track::Primary, counts, blocker?))
        .flatten()
        .unwrap_or_else(|| {
            Cond::new(
                ConditionType::Ready,
                observed.ready,
                rayservice_reason(&observed.reason, observed.ready),
                observed.message.clone(),
            )
        })
}

/// The static reason for what [`crate::reconcile::children::rayservice::observe`] said.
fn rayservice_reason(reason: &str, ready: bool) -> Reason {
    match reason.parse() {
        Ok(Reason::RayServicePending) => Reason::RayServicePending,
        _ if ready => Reason::RayServiceReady,
        _ => Reason::RayServiceNotReady,
    }
}
