//! The committed binary fixtures (`tests/fixtures/graph/`) are the text
//! examples of `examples/graphs/` encoded through the compiled descriptors
//! (`INFERGATE_UPDATE_FIXTURES=1` rewrites them), and the descriptors and the
//! generated types agree field by field.

use std::path::{Path, PathBuf};

use crate::support::{fixture, root};
use infergate::graph::{self, ServingGraph};
use prost_reflect::{DescriptorPool, DynamicMessage};

/// Encode a text-format graph through the compiled descriptors.
fn encode_text(path: &Path) -> Vec<u8> {
    let pool = DescriptorPool::decode(graph::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let desc = pool
        .get_message_by_name(graph::GRAPH_MESSAGE)
        .expect("ServingGraph in the descriptors");
    let text = std::fs::read_to_string(path).expect("read example");
    let dynamic = DynamicMessage::parse_text_format(desc, &text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let typed: ServingGraph = dynamic.transcode_to().expect("transcode");
    graph::encode(&typed)
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples/graphs"))
        .expect("examples/graphs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txtpb"))
        .collect();
    files.sort();
    files
}

#[test]
fn fixtures_match_the_text_examples() {
    let files = examples();
    assert!(files.len() >= 4, "expected the example graphs");
    let update = std::env::var_os("INFERGATE_UPDATE_FIXTURES").is_some();
    for path in files {
        let stem = path.file_stem().and_then(|s| s.to_str()).expect("stem");
        let encoded = encode_text(&path);
        let target = fixture(&format!("graph/{stem}.pb"));
        if update {
            std::fs::write(&target, &encoded).expect("write fixture");
        }
        let committed = std::fs::read(&target).unwrap_or_default();
        assert!(
            committed == encoded,
            "{} is stale: run INFERGATE_UPDATE_FIXTURES=1 cargo test --test suite graph::fixtures::",
            target.display()
        );
    }
}

#[test]
fn descriptors_and_generated_types_agree_field_by_field() {
    // Every field the .proto declares survives a trip through the generated
    // struct: encode with the descriptors, decode with prost, re-encode, compare.
    let bytes = encode_text(&root().join("examples/graphs/rag.txtpb"));
    let typed = graph::decode(&bytes).expect("decode");
    let pool = DescriptorPool::decode(graph::FILE_DESCRIPTOR_SET).expect("descriptor set");
    let desc = pool
        .get_message_by_name(graph::GRAPH_MESSAGE)
        .expect("message");
    let dynamic = DynamicMessage::decode(desc, graph::encode(&typed).as_slice()).expect("decode");
    assert_eq!(
        dynamic.transcode_to::<ServingGraph>().expect("transcode"),
        typed
    );
    assert_eq!(typed.nodes.len(), 4);
    assert_eq!(
        typed.nodes[3]
            .actor_options
            .as_ref()
            .and_then(|o| o.num_gpus),
        Some(0.25)
    );
    assert_eq!(
        typed.nodes[1]
            .actor_options
            .as_ref()
            .and_then(|o| o.memory_bytes),
        Some(2_147_483_648)
    );
    let fields: Vec<String> = pool
        .get_message_by_name("infergate.graph.v1.Node")
        .expect("Node")
        .fields()
        .map(|f| f.name().to_owned())
        .collect();
    assert_eq!(
        fields,
        [
            "name",
            "import_path",
            "dependencies",
            "num_replicas",
            "autoscaling",
            "actor_options",
            "user_config_json"
        ]
    );
}
