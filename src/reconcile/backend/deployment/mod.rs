//! `backend: Deployment`: a primary and (with a canary) a canary track,
//! each a Deployment and a Service, routed by one HTTPRoute, directly or
//! through InferencePools.
//!
//! - `flow`: the backend's reconcile, children built and applied in order;
//! - `drive`: drives the progressive rollout ([`crate::reconcile::rollout`])
//!   from a reconcile: what the tracks run and the canary's weight;
//! - `canary`: changes or deletes a canary that carries no weight, only
//!   once no route names it;
//! - `full_pool`: a change of the primary's template on a pool without
//!   room for one more replica (replaced in place, or kept waiting);
//! - `canary_room`: a canary's new replicas on a pool without room for
//!   them (the canary waits, or the primary lends it replicas);
//! - `pools`: the InferencePools and their endpoint pickers;
//! - `workload`: what runs a track, a Deployment or (a replica that spans
//!   nodes) a LeaderWorkerSet, and the change between the two.

mod canary;
mod canary_room;
mod drive;
mod flow;
mod full_pool;
mod pools;
mod workload;

pub(super) use flow::reconcile_deployment;
