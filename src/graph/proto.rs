//! The protobuf messages generated from `proto/infergate/graph/v1/graph.proto`
//! (compiled by build.rs with protox).
#![allow(
    missing_docs,
    clippy::doc_markdown,
    clippy::derive_partial_eq_without_eq
)]

include!(concat!(env!("OUT_DIR"), "/infergate.graph.v1.rs"));
