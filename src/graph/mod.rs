//! Ray Serve serving graphs for `backend: RayService`, pure but for the
//! fetcher: nothing here reads the cluster or builds Kubernetes objects
//! (the reconciler does both, in `reconcile::graph` and `reconcile::children`).
//!
//! - [`proto`]: the protobuf schema (`proto/infergate/graph/v1/graph.proto`),
//!   compiled by build.rs with protox, and [`decode`];
//! - [`validate`]: the graph as a DAG plus Ray Serve's own rules, pure;
//! - [`serve_config`]: the generated `serveConfigV2`, pure;
//! - [`placement`]: whether every deployment fits one worker, pure;
//! - [`fetch`]: the [`fetch::GraphSource`] trait and its HTTPS implementation
//!   (one deadline, an ETag cache, per-service backoff, fetches in flight
//!   bounded); [`token`]: bearer tokens bound to hosts by their Secret;
//!   [`destination`]: the addresses a fetch may connect to;
//! - [`cli`]: `infergate graph FILE`.
//!
//! Every failure on the way from `spec.graph` to a RayService is a
//! [`GraphError`] with a distinct [`GraphError::reason`] for the
//! InferenceService's conditions. No message ever contains the bearer token.

pub mod cli;
pub mod destination;
pub mod error;
pub mod fetch;
pub mod placement;
pub mod serve_config;
pub mod token;
pub mod validate;

/// The protobuf messages generated from `proto/infergate/graph/v1/graph.proto`.
#[allow(
    missing_docs,
    clippy::doc_markdown,
    clippy::derive_partial_eq_without_eq
)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/infergate.graph.v1.rs"));
}

pub use error::GraphError;
pub use proto::ServingGraph;

/// The encoded `FileDescriptorSet` of the graph schema (for text-format
/// encoders and reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/graph_descriptor.bin"));

/// Fully qualified name of the top-level message.
pub const GRAPH_MESSAGE: &str = "infergate.graph.v1.ServingGraph";

/// Decode a protobuf-encoded [`ServingGraph`].
pub fn decode(bytes: &[u8]) -> Result<ServingGraph, GraphError> {
    <ServingGraph as prost::Message>::decode(bytes).map_err(|e| GraphError::Undecodable {
        message: e.to_string(),
    })
}

/// Encode a [`ServingGraph`] (deterministic: maps are ordered).
#[must_use]
pub fn encode(graph: &ServingGraph) -> Vec<u8> {
    prost::Message::encode_to_vec(graph)
}
