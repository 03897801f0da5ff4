//! The co-located reconciler: leader election, the controller, the children
//! it makes, and the status it reports.
//!
//! `infergate serve` calls [`run`] unless `--no-reconcile`. Every replica
//! competes for one coordination.k8s.io Lease ([`LEASE_NAME`] in infergate's
//! namespace); only the holder runs the controller, and it stops the moment
//! the lease is lost. Webhooks are served by every replica regardless.
//!
//! - `lease`: leader election ([`run`]), and the controller of each term;
//! - [`controller`]: the kube-runtime Controller of one term, fed by
//!   [`watches`] (every kind of [`kinds`], each by a [`child_watch`] that
//!   keeps what [`watched`] says of each child and hands on only news, not
//!   the [`echo`] of infergate's own writes; an optional CRD's while it is
//!   served, see [`optional`]; and the shared [`crate::state`]'s service
//!   events), running [`flow`] with a [`context::Ctx`];
//! - [`flow`]: the prelude both backends share and the `Deployment`
//!   backend (`progress` drives a rollout); [`ray`] the `RayService` backend;
//!   [`apply`] writes children, status and events; `canary` changes or
//!   deletes a canary that carries no weight only once no route names it;
//! - [`pods`]: why an engine pod does not start, from a watch on the
//!   engine pods, for the `Ready` condition;
//! - [`children`]: the desired children as pure functions (Deployments,
//!   Services, HPAs, and the HTTPRoute and RayService types infergate writes);
//! - [`graph`]: from `spec.graph` to the desired RayService (Secret, fetch
//!   through [`crate::graph::fetch::GraphSource`], validation, builder);
//! - [`status`]: status and conditions as a pure function of what was observed;
//! - [`budget`]: the GPU budget ledgers corrected from the services, and
//!   which services no longer fit their namespace's budget.

mod backend;
pub mod budget;
pub mod children;
pub mod config;
pub mod context;
pub mod controller;
pub mod error;
pub mod graph;
mod lease;
pub mod once;
pub mod pods;
pub mod rollout;
pub mod status;
pub mod watch;
pub mod write;

pub use config::{Config, GRAPH_RESYNC, LeaseTiming};
pub use error::Error;
pub use lease::{LEASE_NAME, run};
