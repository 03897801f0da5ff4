//! Ray Serve serving graphs for `backend: RayService`, pure but for the
//! fetcher: nothing here reads the cluster or builds Kubernetes objects
//! (the reconciler does both, in `reconcile::graph` and `reconcile::children`).
//!
//! - [`proto`]: the protobuf schema (`proto/infergate/graph/v1/graph.proto`),
//!   compiled by build.rs with protox; [`codec`]: [`decode`] and [`encode`];
//! - [`validate`]: the graph as a DAG plus Ray Serve's own rules, pure, each
//!   broken rule a [`violation::Violation`];
//! - [`serve_config`]: the generated `serveConfigV2`, pure;
//! - [`placement`]: whether every deployment fits one worker, pure;
//! - [`fetch`]: the [`fetch::GraphSource`] trait and its HTTPS implementation
//!   (one deadline, an ETag cache, per-service backoff, fetches in flight
//!   bounded); [`queue`]: the slots for fetches and the line for them, first
//!   come, first served per namespace; [`token`]: bearer tokens bound to hosts by their Secret;
//!   [`destination`]: the addresses a fetch may connect to.
//!
//! `infergate graph FILE` is [`crate::check::graph`].
//!
//! Every failure on the way from `spec.graph` to a RayService is a
//! [`GraphError`] with a distinct [`GraphError::reason`] for the
//! InferenceService's conditions. No message ever contains the bearer token.

pub mod codec;
pub mod destination;
pub mod error;
pub mod fetch;
pub mod placement;
pub mod proto;
pub mod queue;
pub mod serve_config;
pub mod token;
pub mod validate;
pub mod violation;

pub use codec::{FILE_DESCRIPTOR_SET, GRAPH_MESSAGE, decode, encode};
pub use error::GraphError;
pub use proto::ServingGraph;
