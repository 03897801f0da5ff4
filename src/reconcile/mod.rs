//! The co-located reconciler: leader election, the controller, the children
//! it makes, and the status it reports.
//!
//! `infergate serve` calls [`run`] unless `--no-reconcile`. Every replica
//! competes for one coordination.k8s.io Lease ([`LEASE_NAME`] in infergate's
//! namespace); only the holder runs the controller, and it stops the moment
//! the lease is lost. Webhooks are served by every replica regardless.
//!
//! The tree, by concern, from the top down; each folder's front door says
//! more, and no file imports one above it:
//!
//! - `lease`: leader election ([`run`]), and the controller of each term;
//!   [`controller`]: the kube-runtime Controller of one term, from the
//!   watches to the reconcile; [`context`]: what every reconcile of a term
//!   shares ([`context::Ctx`]); [`config`], [`error`];
//! - `backend/`: one reconcile of a service: the prelude both backends
//!   share (default and validate, an invalid spec reported in status), then
//!   `backend/deployment/` (the tracks and their route; it drives the
//!   progressive rollout, and `backend/deployment/canary.rs` changes or
//!   deletes a canary that carries no weight only once no route names it)
//!   or `backend/rayservice.rs`;
//! - [`rollout`]: what a progressive rollout decides (a pure state
//!   machine), and the analysis gate it asks;
//! - `write/`: writes to the cluster: children (applied only when they
//!   changed, deleted), status (only when it changed) and events;
//! - [`status`]: status and conditions as a pure function of what was
//!   observed (the conditions are computed in `status/conditions.rs`);
//! - [`watch`]: what the reconciler watches (every kind of child, each
//!   kept as [`watch::watched`] says; an optional CRD's while it is served)
//!   and how events become reconciles (news only, never the echo of
//!   infergate's own writes; the shared [`crate::state`]'s service events);
//! - [`pods`]: why an engine pod does not start, from a watch on the
//!   engine pods, for the `Ready` condition;
//! - [`children`]: the desired children as pure functions (Deployments,
//!   Services, HPAs, and the HTTPRoute and RayService types infergate writes);
//! - [`graph`]: from `spec.graph` to the desired RayService (Secret, fetch
//!   through [`crate::graph::fetch::GraphSource`], validation, builder);
//! - [`accounting`]: the GPU budget ledgers corrected from the services, and
//!   which services no longer fit their namespace's budget;
//! - [`once`]: the annotations that act at most once per value.

pub mod accounting;
mod backend;
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
mod write;

pub use config::{Config, GRAPH_RESYNC, LeaseTiming};
pub use error::Error;
pub use lease::{LEASE_NAME, run};
