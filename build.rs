//! Compiles the serving-graph protobuf schema (proto/) with protox, a pure-Rust
//! protobuf compiler: no `protoc` binary and no network are needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/infergate/graph/v1/graph.proto";
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile([PROTO], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    // The descriptors, for tests that read text-format graphs through them.
    std::fs::write(
        out.join("graph_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    prost_build::Config::new()
        // Deterministic encoding and stable iteration order.
        .btree_map(["."])
        .compile_fds(fds)?;
    Ok(())
}
