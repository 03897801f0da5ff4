//! A serving graph on the wire: decoding, encoding and the schema's
//! descriptor.

use super::error::GraphError;
use super::proto::ServingGraph;

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
