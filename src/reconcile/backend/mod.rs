//! One reconcile of a service: the prelude both backends share, then the
//! backend its spec names.
//!
//! - `dispatch`: the reconcile the controller runs, and its backoff;
//! - `prelude`: default and validate (an invalid spec reported in status),
//!   find the AcceleratorClass;
//! - `deployment`: `backend: Deployment` (tracks, route, pools, the
//!   progressive rollout driven, the canary settled);
//! - `rayservice`: `backend: RayService` (the graph resolved, the
//!   RayService applied and its cluster scaled, the route to KubeRay's serve
//!   Service, `status.graph`);
//! - `requeue`: when a reconcile comes back.

mod deployment;
mod dispatch;
mod prelude;
mod rayservice;
mod requeue;

pub(in crate::reconcile) use dispatch::{error_policy, reconcile};
