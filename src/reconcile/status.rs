//! Status as a pure function of what the reconciler observed.
//!
//! Conditions follow the Kubernetes shape (`type`, `status`, `reason`,
//! `message`, `observedGeneration`, `lastTransitionTime`); the transition
//! time moves only when `status` changes.

use k8s_openapi::jiff::Timestamp;

use crate::api::v1beta1::{CanaryStatus, InferenceServiceStatus};
use crate::reconcile::children::Track;
use crate::reconcile::pods::PodState;
use crate::reconcile::watched::{WatchedDeployment, rollout_complete};

mod cond;
mod graph;
mod routing;

pub use cond::{Cond, CondStatus, condition, set_condition};
pub use graph::{
    AppliedGraph, GraphReport, live_graph, pending_refresh, refresh_key, short_digest,
};

/// The service serves: every wanted replica of every track is ready and up to date.
pub const READY: &str = "Ready";
/// The desired children were applied for the current generation.
pub const RECONCILED: &str = "Reconciled";
/// An HTTPRoute routes traffic to the service.
pub const ROUTING_READY: &str = "RoutingReady";
/// The service complies with every applicable policy.
pub const POLICY_COMPLIANT: &str = "PolicyCompliant";
/// The serving graph was fetched, decoded and validated (`backend: RayService`).
pub const GRAPH_READY: &str = "GraphReady";

/// What a Deployment reports about its rollout, and why its pods are not
/// ready.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rollout {
    /// `spec.replicas` (after the HPA, when it manages the Deployment).
    pub desired: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.updatedReplicas`.
    pub updated: i32,
    /// `status.replicas`: pods of the current template and of older ones.
    pub total: i32,
    /// The deployment controller has seen the current spec.
    pub observed: bool,
    /// The most telling state among the track's not-ready pods (from the
    /// watch on the engine pods); `None` when none is known. Boxed: most
    /// tracks have none, and an outcome carries two tracks.
    pub blocker: Option<Box<PodState>>,
}

impl Rollout {
    /// Read a Deployment as its watch keeps it.
    #[must_use]
    pub fn of(d: &WatchedDeployment) -> Self {
        Self {
            desired: d.desired(),
            ready: d.ready(),
            updated: d.updated(),
            total: d.total(),
            observed: d.observed(),
            blocker: None,
        }
    }

    /// The same rollout, with why its pods are not ready.
    #[must_use]
    pub fn with_blocker(self, blocker: Option<PodState>) -> Self {
        Self {
            blocker: blocker.map(Box::new),
            ..self
        }
    }

    /// Why the track serves fewer replicas than it wants, when its pods say:
    /// the rollout is not complete, fewer replicas are ready than desired,
    /// and a pod of the track is not ready.
    #[must_use]
    pub fn blocked(&self) -> Option<&PodState> {
        if self.complete() || self.ready >= self.desired {
            return None;
        }
        self.blocker.as_deref().filter(|b| b.rank().is_some())
    }

    /// Every wanted replica is ready and runs the current template, and no
    /// pod of an older template is left (while one is, the ready replicas
    /// may be old ones).
    #[must_use]
    pub fn complete(&self) -> bool {
        rollout_complete(
            self.observed,
            self.desired,
            self.ready,
            self.updated,
            self.total,
        )
    }
}

/// How routing turned out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routing {
    /// The HTTPRoute was applied; `rejection` holds a parent's `Accepted=False` message.
    Applied {
        /// `namespace/name` of the gateway.
        gateway: String,
        /// The routed path.
        path: String,
        /// Why a gateway refused the route, if one did.
        rejection: Option<String>,
        /// With `backendKind: InferencePool`: what gateways say about the pools.
        pools: Option<PoolReport>,
    },
    /// `spec.routing.gateway` is not set.
    NoGateway,
    /// The HTTPRoute CRD is not installed.
    GatewayApiMissing {
        /// `namespace/name` of the gateway that would be used.
        gateway: String,
    },
    /// `backendKind: InferencePool` but the InferencePool CRD is not installed.
    InferencePoolApiMissing,
    /// `backend: RayService`: KubeRay has not made the serve Service the
    /// route would name yet (it does once the Serve applications run).
    ServeServiceMissing {
        /// `namespace/name` of the gateway.
        gateway: String,
        /// Name of the serve Service.
        service: String,
        /// What is missing: the Service, or its `serve` port.
        detail: String,
    },
}

/// What gateway controllers report in the InferencePools' `status.parents`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolReport {
    /// The pools routed to.
    pub names: Vec<String>,
    /// Some parent reported on some pool.
    pub reported: bool,
    /// `Accepted` / `ResolvedRefs` conditions that are not `True`.
    pub complaints: Vec<String>,
}

/// How the reconcile went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every child was applied.
    Applied {
        /// The primary Deployment's rollout.
        primary: Rollout,
        /// The canary Deployment's rollout, when there is a canary.
        canary: Option<Rollout>,
        /// The routing result.
        routing: Routing,
        /// The canary weight actually routed (None without a route or canary).
        routed_weight: Option<i32>,
    },
    /// The object fails validation: nothing was applied.
    Invalid(String),
    /// Applying failed (the reconcile will be retried).
    Failed(String),
    /// The RayService was applied (`backend: RayService`).
    RayServiceApplied {
        /// What its status says.
        observed: crate::reconcile::children::rayservice::Observed,
        /// Nodes in the serving graph.
        nodes: usize,
        /// `(ready, desired)` workers of its Ray cluster, when KubeRay says.
        workers: Option<(i32, i32)>,
        /// The routing result.
        routing: Routing,
    },
    /// The service has waited in line for a graph fetch slot for longer
    /// than the notice (the message says where it stands): the existing
    /// RayService is left as it is.
    GraphQueued(String),
    /// The serving graph could not be turned into a RayService: the
    /// existing RayService was left as it is.
    GraphFailed {
        /// The distinct reason of the failure.
        reason: &'static str,
        /// The message (never the token).
        message: String,
        /// The graph the RayService keeps running, in words ([`live_graph`]),
        /// when one was applied and the failure is the graph's (not a spec
        /// whose workers cannot hold it): `GraphReady` says `StaleGraph`.
        stale: Option<String>,
    },
    /// The `ray.io/v1` RayService CRD is not installed.
    RayServiceApiMissing,
    /// `spec.accelerator.class` names an AcceleratorClass that does not
    /// exist (deleted after admission): the children are left as they are.
    AcceleratorClassNotFound(String),
}

/// Everything [`compute`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// `metadata.generation` of the service.
    pub generation: Option<i64>,
    /// The reconcile result.
    pub outcome: Outcome,
    /// Policy violations (`Err` with the message) or compliance.
    pub policy: PolicyResult,
    /// The rendered route path (when a gateway is set).
    pub route_path: Option<String>,
    /// The request timeout in force (when a gateway is set).
    pub request_timeout: Option<String>,
    /// The rollout's next state (Deployment-backed services).
    pub rollout: Option<crate::api::rollout::RolloutStatus>,
    /// What the service holds at most and what it fits (`status.capacity`).
    pub capacity: Option<crate::api::v1beta1::CapacityStatus>,
    /// What this reconcile learnt about the serving graph (`status.graph`).
    pub graph: Option<GraphReport>,
}

/// Result of checking the applicable policies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyResult {
    /// No violation.
    Compliant,
    /// Violations of `Deny` policies (the service predates the policy).
    Violation(String),
    /// Violations of `Warn` policies.
    Warning(String),
    /// The service's charge, counted after every older service's, passes
    /// its namespace's GPU or cost budget (left running as it is).
    OverBudget(String),
}

/// Why a condition is what it is, and why an event was written: every
/// reason infergate reports, in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Every child is applied.
    Applied,
    /// Every track's rollout is complete.
    Available,
    /// A rollout is under way.
    Progressing,
    /// The HTTPRoute is applied and not rejected.
    RouteApplied,
    /// A gateway rejected the HTTPRoute.
    RouteNotAccepted,
    /// No gateway is set: no HTTPRoute.
    NoGateway,
    /// The Gateway API CRDs are not installed.
    GatewayApiNotInstalled,
    /// The InferencePool CRD is not installed.
    InferencePoolNotInstalled,
    /// A gateway reports a problem with an InferencePool.
    InferencePoolNotAccepted,
    /// The spec fails validation.
    InvalidSpec,
    /// Applying a child failed.
    ApplyFailed,
    /// The serving graph is valid and applied.
    GraphResolved,
    /// A serving-graph failure, with the graph error's own reason.
    Graph(&'static str),
    /// Event: a step of a progressive rollout, with its own reason.
    Rollout(&'static str),
    /// The KubeRay CRDs are not installed.
    RayServiceNotInstalled,
    /// KubeRay has not reported on the RayService yet.
    RayServicePending,
    /// The RayService is ready.
    RayServiceReady,
    /// The RayService is not ready.
    RayServiceNotReady,
    /// The service complies with every applicable policy.
    Compliant,
    /// The service violates a Deny policy adopted after it.
    PolicyViolation,
    /// The service violates a Warn policy.
    PolicyWarning,
    /// The service's charge no longer fits its namespace's budget.
    OverBudget,
    /// Event: a child was created.
    Created,
    /// Event: a child was changed.
    Updated,
    /// Event: a child was deleted.
    Deleted,
    /// Event: the service became ready.
    Ready,
    /// The service's AcceleratorClass does not exist.
    AcceleratorClassNotFound,
    /// A track's pods find no node (the scheduler's message).
    Unschedulable,
    /// A track's pods cannot pull their image.
    ImagePullFailed,
    /// A track's engine container keeps exiting.
    CrashLooping,
    /// A track's pods are placed and not ready yet.
    Starting,
    /// KubeRay has not made the serve Service the route names yet.
    ServeServiceMissing,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` brought
    /// a new graph, now applied.
    GraphRefreshed,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` found the
    /// graph unchanged.
    GraphUnchanged,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` failed.
    GraphRefreshFailed,
    /// Event: a new serving graph was applied.
    GraphUpdated,
}

impl Reason {
    /// The CamelCase reason as conditions and events carry it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Applied => "Applied",
            Reason::Available => "Available",
            Reason::Progressing => "Progressing",
            Reason::RouteApplied => "RouteApplied",
            Reason::RouteNotAccepted => "RouteNotAccepted",
            Reason::NoGateway => "NoGateway",
            Reason::GatewayApiNotInstalled => "GatewayAPINotInstalled",
            Reason::InferencePoolNotInstalled => "InferencePoolNotInstalled",
            Reason::InferencePoolNotAccepted => "InferencePoolNotAccepted",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::ApplyFailed => "ApplyFailed",
            Reason::GraphResolved => "GraphResolved",
            Reason::Graph(reason) | Reason::Rollout(reason) => reason,
            Reason::RayServiceNotInstalled => "RayServiceNotInstalled",
            Reason::RayServicePending => "RayServicePending",
            Reason::RayServiceReady => "RayServiceReady",
            Reason::RayServiceNotReady => "RayServiceNotReady",
            Reason::Compliant => "Compliant",
            Reason::PolicyViolation => "PolicyViolation",
            Reason::PolicyWarning => "PolicyWarning",
            Reason::OverBudget => "OverBudget",
            Reason::Created => "Created",
            Reason::Updated => "Updated",
            Reason::Deleted => "Deleted",
            Reason::Ready => "Ready",
            Reason::AcceleratorClassNotFound => "AcceleratorClassNotFound",
            Reason::Unschedulable => "Unschedulable",
            Reason::ImagePullFailed => "ImagePullFailed",
            Reason::CrashLooping => "CrashLooping",
            Reason::Starting => "Starting",
            Reason::ServeServiceMissing => "ServeServiceMissing",
            Reason::GraphRefreshed => "GraphRefreshed",
            Reason::GraphUnchanged => "GraphUnchanged",
            Reason::GraphRefreshFailed => "GraphRefreshFailed",
            Reason::GraphUpdated => "GraphUpdated",
        }
    }

    /// Whether a condition turning False for this reason deserves a Warning event.
    #[must_use]
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            Reason::InvalidSpec
                | Reason::ApplyFailed
                | Reason::PolicyViolation
                | Reason::PolicyWarning
                | Reason::OverBudget
                | Reason::GatewayApiNotInstalled
                | Reason::InferencePoolNotInstalled
                | Reason::InferencePoolNotAccepted
                | Reason::RouteNotAccepted
                | Reason::RayServiceNotInstalled
                | Reason::AcceleratorClassNotFound
                | Reason::Unschedulable
                | Reason::ImagePullFailed
                | Reason::CrashLooping
                | Reason::GraphRefreshFailed
                | Reason::Graph(_)
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn rollout_message(primary: &Rollout, canary: Option<&Rollout>) -> String {
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
fn blocked_ready(primary: &Rollout, canary: Option<&Rollout>) -> Option<Cond> {
    let tracks = [(Track::Primary, Some(primary)), (Track::Canary, canary)];
    let (track, rollout, state) = tracks
        .into_iter()
        .filter_map(|(t, r)| {
            let r = r?;
            let state = r.blocked()?;
            Some((state.rank()?, (t, r, state)))
        })
        .min_by_key(|(rank, _)| *rank)?
        .1;
    let counts = format!(
        "{}: {}/{} replicas ready",
        track.as_str(),
        rollout.ready,
        rollout.desired
    );
    let (reason, message) = match state {
        PodState::Ready => return None,
        PodState::Unschedulable { message } if message.is_empty() => (
            Reason::Unschedulable,
            format!("{counts}: the scheduler finds no node for the pods"),
        ),
        PodState::Unschedulable { message } => {
            (Reason::Unschedulable, format!("{counts}: {message}"))
        }
        PodState::ImagePullFailed { image, message, .. } => (
            Reason::ImagePullFailed,
            if message.is_empty() {
                format!("{counts}: image {image:?} cannot be pulled")
            } else {
                format!("{counts}: image {image:?} cannot be pulled: {message}")
            },
        ),
        PodState::CrashLooping {
            container,
            exit_code,
            reason,
        } => (
            Reason::CrashLooping,
            if reason.is_empty() {
                format!(
                    "{counts}: container {container:?} is crash-looping (last exit code {exit_code})"
                )
            } else {
                format!(
                    "{counts}: container {container:?} is crash-looping (last exit code {exit_code}, {reason})"
                )
            },
        ),
        PodState::Starting => (Reason::Starting, format!("{counts}; pods are starting")),
        PodState::Waiting {
            container,
            reason,
            message,
        } => (
            Reason::Starting,
            format!("{counts}; container {container:?} waits: {reason}: {message}"),
        ),
    };
    Some(Cond::new(READY, false, reason, message))
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
        } => {
            out.push(Cond::new(
                RECONCILED,
                true,
                Reason::Applied,
                "every child is applied".to_owned(),
            ));
            let complete = primary.complete() && canary.as_ref().is_none_or(Rollout::complete);
            let msg = rollout_message(primary, canary.as_ref());
            out.push(if complete {
                Cond::new(READY, true, Reason::Available, msg)
            } else if let Some(blocked) = blocked_ready(primary, canary.as_ref()) {
                blocked
            } else {
                Cond::new(READY, false, Reason::Progressing, msg)
            });
            out.push(routing::condition(routing));
        }
        Outcome::Invalid(msg) => {
            out.push(Cond::new(
                RECONCILED,
                false,
                Reason::InvalidSpec,
                msg.clone(),
            ));
            out.push(Cond::new(
                READY,
                false,
                Reason::InvalidSpec,
                "the spec is invalid; children are left as they are".to_owned(),
            ));
        }
        Outcome::Failed(msg) => {
            // Ready keeps what was last observed: the children may still serve.
            out.push(Cond::new(
                RECONCILED,
                false,
                Reason::ApplyFailed,
                msg.clone(),
            ));
        }
        Outcome::RayServiceApplied {
            observed,
            nodes,
            routing,
            ..
        } => {
            out.push(Cond::new(
                RECONCILED,
                true,
                Reason::Applied,
                "the RayService is applied".to_owned(),
            ));
            out.push(Cond::new(
                GRAPH_READY,
                true,
                Reason::GraphResolved,
                format!("the serving graph ({nodes} nodes) is valid and applied"),
            ));
            out.push(Cond::new(
                READY,
                observed.ready,
                rayservice_reason(&observed.reason, observed.ready),
                observed.message.clone(),
            ));
            out.push(routing::condition(routing));
        }
        Outcome::GraphFailed {
            reason,
            message,
            stale,
        } => {
            // The existing RayService is untouched: Ready keeps what was last observed.
            out.push(match stale {
                None => Cond::new(GRAPH_READY, false, Reason::Graph(reason), message.clone()),
                Some(live) => Cond::new(
                    GRAPH_READY,
                    false,
                    Reason::Graph("StaleGraph"),
                    format!("the last good graph ({live}) keeps serving; the latest fetch failed: {reason}: {message}"),
                ),
            });
            out.push(Cond::new(
                RECONCILED,
                false,
                Reason::Graph(reason),
                format!(
                    "the RayService is left as it is: the serving graph is not usable ({reason}, see GraphReady)"
                ),
            ));
        }
        Outcome::GraphQueued(message) => {
            out.push(Cond::new(
                GRAPH_READY,
                CondStatus::Unknown,
                Reason::Graph("FetchQueued"),
                message.clone(),
            ));
        }
        Outcome::AcceleratorClassNotFound(name) => {
            let msg = format!(
                "AcceleratorClass {name:?} does not exist; the children are left as they are until it does or spec.accelerator.class names another"
            );
            out.push(Cond::new(
                RECONCILED,
                false,
                Reason::AcceleratorClassNotFound,
                msg.clone(),
            ));
            out.push(Cond::new(
                READY,
                false,
                Reason::AcceleratorClassNotFound,
                msg,
            ));
        }
        Outcome::RayServiceApiMissing => {
            out.push(Cond::new(
                RECONCILED,
                false,
                Reason::RayServiceNotInstalled,
                "the KubeRay RayService CRD (rayservices.ray.io/v1) is not installed: install KubeRay to run backend RayService".to_owned(),
            ));
        }
    }
    out.push(match &obs.policy {
        PolicyResult::Compliant => Cond::new(
            POLICY_COMPLIANT,
            true,
            Reason::Compliant,
            "the service complies with every applicable policy".to_owned(),
        ),
        PolicyResult::Violation(msg) => Cond::new(
            POLICY_COMPLIANT,
            false,
            Reason::PolicyViolation,
            format!(
                "the service violates a policy adopted after it (left running as it is): {msg}"
            ),
        ),
        PolicyResult::Warning(msg) => {
            Cond::new(POLICY_COMPLIANT, false, Reason::PolicyWarning, msg.clone())
        }
        PolicyResult::OverBudget(msg) => Cond::new(
            POLICY_COMPLIANT,
            false,
            Reason::OverBudget,
            format!(
                "the service no longer fits its namespace's budget, counted after every older service (left running as it is): {msg}"
            ),
        ),
    });
    out
}

/// The static reason for what [`crate::reconcile::children::rayservice::observe`] said.
fn rayservice_reason(reason: &str, ready: bool) -> Reason {
    match reason {
        "RayServicePending" => Reason::RayServicePending,
        _ if ready => Reason::RayServiceReady,
        _ => Reason::RayServiceNotReady,
    }
}

/// The new status from the previous one and an observation.
#[must_use]
pub fn compute(
    previous: Option<&InferenceServiceStatus>,
    obs: &Observation,
    now: Timestamp,
) -> InferenceServiceStatus {
    let mut st = previous.cloned().unwrap_or_default();
    st.observed_generation = obs.generation;
    for cond in conditions_for(obs) {
        set_condition(&mut st.conditions, cond, obs.generation, now);
    }
    // A stable order makes `kubectl get -o yaml` and status diffs quiet.
    let order = |t: &str| match t {
        READY => 0,
        RECONCILED => 1,
        ROUTING_READY => 2,
        POLICY_COMPLIANT => 3,
        GRAPH_READY => 4,
        _ => 5,
    };
    st.conditions.sort_by_key(|c| order(&c.type_));
    if obs.capacity.is_some() {
        st.capacity.clone_from(&obs.capacity);
    }
    if let Outcome::Applied {
        primary,
        canary,
        routed_weight,
        ..
    } = &obs.outcome
    {
        st.replicas = Some(primary.desired);
        st.ready_replicas = Some(primary.ready);
        st.canary = canary.as_ref().map(|c| CanaryStatus {
            replicas: Some(c.desired),
            ready_replicas: Some(c.ready),
            weight: *routed_weight,
        });
        st.route_path.clone_from(&obs.route_path);
        st.request_timeout.clone_from(&obs.request_timeout);
        if obs.rollout.is_some() {
            st.rollout.clone_from(&obs.rollout);
        }
    }
    if let Some(report) = &obs.graph {
        graph::record(&mut st, report, now);
    }
    if let Outcome::RayServiceApplied { workers, .. } = &obs.outcome {
        st.route_path.clone_from(&obs.route_path);
        st.request_timeout.clone_from(&obs.request_timeout);
        if let Some((ready, desired)) = workers {
            st.replicas = Some(*desired);
            st.ready_replicas = Some(*ready);
        }
    }
    st
}

#[cfg(test)]
mod tests;
