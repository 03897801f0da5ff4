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

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema does not nest (a graph holds nodes, a node its options),
    /// and unknown fields are skipped within prost's recursion limit (100
    /// nested groups): a graph of nested groups is refused, not recursed.
    #[test]
    fn nested_groups_are_refused_within_prosts_recursion_limit() {
        // Field 15, wire type 3 (start group), 100,000 times.
        let deep = vec![(15u8 << 3) | 3; 100_000];
        let err = decode(&deep).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
        // Inside a node (field 3, length-delimited), the same.
        let mut inside = vec![(3u8 << 3) | 2];
        let group = vec![(15u8 << 3) | 3; 1_000];
        inside.extend([0xe8, 0x07]); // 1,000 as a varint
        inside.extend(&group);
        let err = decode(&inside).unwrap_err();
        assert!(err.to_string().contains("recursion limit"), "{err}");
        // A few levels of an unknown group are skipped.
        let shallow = [(15u8 << 3) | 3, (15 << 3) | 4];
        assert!(decode(&shallow).is_ok());
    }
}
