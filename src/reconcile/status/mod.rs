//! Status as a pure function of what the reconciler observed.
//!
//! Conditions follow the Kubernetes shape (`type`, `status`, `reason`,
//! `message`, `observedGeneration`, `lastTransitionTime`); the transition
//! time moves only when `status` changes.
//!
//! - `observation`: what a reconcile observed and did ([`Observation`],
//!   its [`Outcome`] and [`Routing`]), a track's replicas in `replicas`;
//! - `reason`: whether a status says it waits for an optional CRD (the
//!   [`Reason`]s are the API's, `crate::api::vocabulary`);
//! - `cond`: one condition ([`Cond`]), and setting and finding a
//!   condition in a status;
//! - `conditions`: the conditions an observation implies
//!   ([`conditions_for`]), `RoutingReady`'s in `routing`;
//! - `compute`: the new status ([`compute()`]), with `status.graph` from
//!   `graph`.

mod compute;
mod cond;
mod conditions;
mod graph;
mod observation;
mod reason;
mod replicas;
mod routing;

pub use compute::compute;
pub use cond::{
    Cond, CondStatus, ConditionType, GRAPH_READY, POLICY_COMPLIANT, READY, RECONCILED,
    ROUTING_READY, condition, set_condition,
};
pub use conditions::conditions_for;
pub use graph::{
    AppliedGraph, GraphReport, live_graph, pending_refresh, refresh_key, short_digest,
};
pub use observation::{
    GraphUse, Observation, Outcome, PolicyResult, PoolReport, RolloutCapacity, Routing,
};
pub use reason::{Reason, waits_for_an_optional_api};
pub use replicas::TrackReplicas;

#[cfg(test)]
mod capacity_tests;
#[cfg(test)]
mod ray_tests;
#[cfg(test)]
mod tests;
