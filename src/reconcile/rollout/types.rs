//! What the state machine reads ([`Input`]: the plan, the status, what
//! the cluster shows, the gate's verdict, the action, the time) and what it
//! answers ([`Decision`]), and the step times this process remembers.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::rollout::{RolloutSpec, RolloutStatus, VersionRef};

pub use crate::api::vocabulary::names::ANNOTATION_ROLLOUT_ACTION as ACTION_ANNOTATION;

/// A track's readiness, as its Deployment reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Ready replicas.
    pub ready: i32,
    /// Wanted replicas.
    pub desired: i32,
}

/// What the cluster shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RolloutObserved {
    /// The canary track, when it exists and runs the target.
    pub canary: Option<Readiness>,
    /// Container restarts of the canary's pods since they started.
    pub canary_restarts: i32,
    /// The primary track runs the version the last decision asked for and
    /// its rollout is complete.
    pub primary_complete: bool,
}

/// The analysis gate's verdict for the current step.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Within the threshold.
    Pass,
    /// Outside it, or the query failed.
    Fail(String),
    /// The query returned no sample.
    NoData,
    /// No Prometheus address anywhere (the message says where to set one).
    NoAddress(String),
}

/// What this process knows of the current step's times, more precisely
/// than the second-precision `stepStartedAt` in status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepClock {
    /// When the route with the step's weight was applied.
    pub started: Option<Timestamp>,
    /// When the gate's query last ran during this step.
    pub queried: Option<Timestamp>,
}

/// A service's current step as this process timed it.
#[derive(Clone, Copy, Debug)]
pub(in crate::reconcile) struct StepTimes {
    /// The `stepStartedAt` they belong to, as stored (to the second).
    pub(in crate::reconcile) stored: Timestamp,
    /// The precise times.
    pub(in crate::reconcile) clock: StepClock,
}
/// An event the decision calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// A Warning (failure) rather than a Normal event.
    pub warning: bool,
    /// The event's reason.
    pub reason: crate::api::vocabulary::RolloutReason,
    /// The event's message.
    pub message: String,
}

/// What to do now.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The next `status.rollout`.
    pub status: RolloutStatus,
    /// What the primary track runs.
    pub primary: VersionRef,
    /// The canary track (the target) and the weight to route to it; `None`:
    /// no canary track (the route lets go of it before it is deleted).
    pub canary: Option<(VersionRef, i32)>,
    /// Events to publish.
    pub notes: Vec<Note>,
    /// When to look again (`None`: only on a change).
    pub requeue: Option<Duration>,
}

/// Everything the decision reads.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The plan.
    pub plan: &'a RolloutSpec,
    /// The version the spec asks for.
    pub desired: VersionRef,
    /// The current `status.rollout`.
    pub current: Option<&'a RolloutStatus>,
    /// What the cluster shows.
    pub observed: RolloutObserved,
    /// The gate's verdict, when [`gate_due`](super::gate_due) said to evaluate it.
    pub gate: Option<Gate>,
    /// The `infergate.dev/rollout-action` annotation.
    pub action: Option<&'a str>,
    /// Action values this process recorded as acted on, whether or not
    /// `current` shows them yet.
    pub acted_on: &'a [String],
    /// The current step's times as this process took them.
    pub clock: StepClock,
    /// Now.
    pub now: Timestamp,
}
