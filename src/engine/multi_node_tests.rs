use serde_json::json;

use super::multi_node::{Group, group_of};
use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;

fn class(devices: i32) -> AcceleratorClassSpec {
    serde_json::from_value(json!({
        "vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": devices
    }))
    .expect("class")
}

fn service(spec: serde_json::Value) -> InferenceService {
    let mut spec = spec;
    spec["model"] = json!({"ref": "m"});
    spec["accelerator"] = json!({"type": "nvidia", "class": "h100"});
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": spec,
    }))
    .expect("service")
}

#[test]
fn a_replica_past_one_node_is_a_group_of_whole_nodes() {
    let svc = service(json!({"parallelism": {"tensor": 8, "pipeline": 2}}));
    assert_eq!(
        group_of(&svc, Some(&class(8))),
        Some(Group {
            nodes: 2,
            devices_per_pod: 8,
            tensor: 8,
            pipeline: 2
        })
    );
    let four = service(json!({"parallelism": {"tensor": 4, "pipeline": 4}}));
    assert_eq!(group_of(&four, Some(&class(4))).map(|g| g.nodes), Some(4));
    // One node holds it, or no class says how many a node has.
    assert_eq!(group_of(&svc, Some(&class(16))), None);
    assert_eq!(group_of(&svc, None), None);
    // A Ray service places its own workers.
    let ray =
        service(json!({"backend": "RayService", "parallelism": {"tensor": 8, "pipeline": 2}}));
    assert_eq!(group_of(&ray, Some(&class(8))), None);
}
