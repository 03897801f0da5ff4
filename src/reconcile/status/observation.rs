//! What a reconcile observed and did: the outcome of its writes, its
//! routing, the policies' verdict; everything
//! [`compute`](super::compute::compute) needs.

use super::graph::GraphReport;
use super::replicas::TrackReplicas;
use crate::reconcile::pods::PodState;

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
        /// The primary Deployment's replicas.
        primary: TrackReplicas,
        /// The canary Deployment's replicas, when there is a canary.
        canary: Option<TrackReplicas>,
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
        observed: crate::reconcile::children::rayservice::RayServiceObserved,
        /// Nodes in the serving graph.
        nodes: usize,
        /// `(ready, desired)` workers of its Ray cluster, when KubeRay says.
        workers: Option<(i32, i32)>,
        /// The most telling state among its not-ready pods (head and
        /// workers, from the watch on the engine pods); `None` when none
        /// is known.
        blocker: Option<Box<PodState>>,
        /// Which graph it was applied with.
        graph: GraphUse,
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
        reason: crate::api::vocabulary::GraphReason,
        /// The message (never the token).
        message: String,
        /// The graph the RayService keeps running, in words
        /// ([`live_graph`](super::graph::live_graph)), when one was applied
        /// and the failure is the graph's (not a spec whose workers cannot
        /// hold it): `GraphReady` says `StaleGraph`.
        stale: Option<String>,
    },
    /// The `ray.io/v1` RayService CRD is not installed.
    RayServiceApiMissing,
    /// A replica spans nodes and the `leaderworkerset.x-k8s.io/v1` CRD is
    /// not installed: the Service and route were applied, no workload.
    LeaderWorkerSetApiMissing {
        /// Nodes per replica.
        nodes: i32,
    },
    /// `spec.accelerator.class` names an AcceleratorClass that does not
    /// exist (deleted after admission): the children are left as they are.
    AcceleratorClassNotFound(String),
}

/// Which graph a RayService was applied with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GraphUse {
    /// The graph just fetched, or fetched less than the resync ago:
    /// `GraphReady=True`.
    Current,
    /// The last good graph, the latest fetch having failed (the rest of
    /// the spec is applied with it): `GraphReady=False`, `StaleGraph`.
    LastGood {
        /// The distinct reason of the failure.
        reason: crate::api::vocabulary::GraphReason,
        /// The message (never the token).
        message: String,
        /// The live graph in words ([`live_graph`](super::graph::live_graph)).
        live: Option<String>,
    },
    /// The last good graph while the next fetch waits (its backoff, or
    /// its turn in line): `GraphReady` and `Reconciled` keep what they say.
    Waiting,
}

/// Everything [`compute`](super::compute::compute) needs.
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
    /// How a change of the primary's template fares on its class's pool
    /// (`RolloutCapacity`); `None` leaves the condition as it is (no class
    /// with devices, or free devices not known).
    pub rollout_capacity: Option<RolloutCapacity>,
    /// The numbers of a canary whose pods wait for room
    /// (`CanaryReady=False`, reason `CanaryCapacity`).
    pub canary_capacity: Option<String>,
}

/// How a change of the primary's template fares on its class's pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutCapacity {
    /// No change waits for devices: the primary surges one replica at a
    /// time while a replica's devices are free.
    Fits,
    /// The rollout in place the message describes is done.
    Done(String),
    /// No room for one more replica: the primary is replaced in place
    /// (the numbers and what it does).
    Replacing(String),
    /// No room for one more replica: the primary keeps its old template
    /// until there is (the numbers).
    Waiting(String),
}

impl Observation {
    /// What a reconcile observed at `generation` before it applied
    /// anything: its outcome and policy result, nothing routed, rolled out,
    /// charged or fetched yet.
    #[must_use]
    pub fn before_applying(
        generation: Option<i64>,
        outcome: Outcome,
        policy: PolicyResult,
    ) -> Self {
        Observation {
            generation,
            outcome,
            policy,
            route_path: None,
            request_timeout: None,
            rollout: None,
            capacity: None,
            graph: None,
            rollout_capacity: None,
            canary_capacity: None,
        }
    }
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
    /// A model no longer fits its GPUs (a later ModelProfile or
    /// AcceleratorClass), with the numbers; the service goes on being
    /// reconciled.
    NoLongerFits(String),
}
