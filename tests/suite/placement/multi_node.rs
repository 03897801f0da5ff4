//! Replicas larger than a node at admission: a ClusterInferencePolicy's
//! `limits.maxNodesPerReplica` lets a replica span whole nodes of its
//! class (tensor within a node, pipeline stages across); without it the
//! one-node rule stands, and a namespace's policy may only lower it.

use infergate::engine::PolicySnapshot;
use serde_json::json;

use super::{admit, cluster_policy, errors, namespace_policy, service};

fn opened(n: i32) -> PolicySnapshot {
    PolicySnapshot {
        cluster: vec![cluster_policy(json!({"limits": {"maxNodesPerReplica": n}}))],
        namespaced: vec![],
    }
}

fn shaped(tensor: i32, pipeline: i32) -> infergate::api::v1beta1::InferenceService {
    service(json!({
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": tensor, "pipeline": pipeline},
        "replicas": 2,
    }))
}

#[test]
fn two_nodes_per_replica_are_admitted_under_a_limit_of_two_with_the_defaults_filled_in() {
    let (d, v) = admit(&shaped(8, 2), &opened(2));
    assert!(v.allowed(), "{:?}", errors(&v));
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let spec = serde_json::to_value(&d.spec).expect("json");
    assert_eq!(
        spec["accelerator"],
        json!({"type": "nvidia", "class": "h100-80gb"})
    );
    assert_eq!(spec["parallelism"], json!({"tensor": 8, "pipeline": 2}));
    assert!(spec["engine"]["shmSize"].is_string(), "{spec}");
    assert_eq!(spec["placement"]["spreadAcross"], json!("node"));
}

#[test]
fn a_tensor_past_a_node_too_many_devices_or_too_many_nodes_are_denied_with_the_numbers() {
    let cases = [
        (
            shaped(16, 1),
            "spec.parallelism.tensor: Invalid value: 16: must be at most the 8 devices per node of AcceleratorClass \"h100-80gb\" (tensor parallelism stays within a node; pipeline stages span nodes)",
        ),
        (
            shaped(4, 3),
            "spec.parallelism: Invalid value: 12: tensor 4 x pipeline 3 devices per replica must be a multiple of the 8 devices per node of AcceleratorClass \"h100-80gb\" (each node of a replica holds 8)",
        ),
        (
            shaped(8, 3),
            "spec.parallelism: Invalid value: 24: tensor 8 x pipeline 3 devices per replica span 3 nodes of AcceleratorClass \"h100-80gb\" (8 devices each); must be at most 2 (limits.maxNodesPerReplica of ClusterInferencePolicy \"platform\")",
        ),
        (
            shaped(4, 6),
            "spec.parallelism: Invalid value: 24: tensor 4 x pipeline 6 devices per replica span 3 nodes of AcceleratorClass \"h100-80gb\" (8 devices each); must be at most 2 (limits.maxNodesPerReplica of ClusterInferencePolicy \"platform\")",
        ),
    ];
    for (svc, want) in cases {
        let (_, v) = admit(&svc, &opened(2));
        assert_eq!(errors(&v), [want]);
    }
}

#[test]
fn without_a_cluster_policys_limit_a_replica_stays_on_one_node() {
    let today = "spec.parallelism: Invalid value: 16: tensor 8 x pipeline 2 devices per replica must be at most the 8 devices per node of AcceleratorClass \"h100-80gb\"";
    let (_, v) = admit(&shaped(8, 2), &PolicySnapshot::default());
    assert_eq!(errors(&v), [today]);
    // A namespace's own policy cannot open what the cluster's keep shut.
    let own = PolicySnapshot {
        cluster: vec![],
        namespaced: vec![namespace_policy(
            json!({"limits": {"maxNodesPerReplica": 4}}),
        )],
    };
    let (_, v) = admit(&shaped(8, 2), &own);
    assert_eq!(errors(&v), [today]);
    // It may lower them.
    let lowered = PolicySnapshot {
        cluster: opened(4).cluster,
        namespaced: vec![namespace_policy(
            json!({"limits": {"maxNodesPerReplica": 1}}),
        )],
    };
    let (_, v) = admit(&shaped(8, 2), &lowered);
    assert_eq!(
        errors(&v),
        [
            "spec.parallelism: Invalid value: 16: tensor 8 x pipeline 2 devices per replica span 2 nodes of AcceleratorClass \"h100-80gb\" (8 devices each); must be at most 1 (limits.maxNodesPerReplica of InferencePolicy \"team-a/gpus\")"
        ]
    );
    // A Ray service places its own workers: the one-node rule stays.
    let mut ray = shaped(8, 2);
    ray.spec.backend = Some(infergate::api::v1beta1::Backend::RayService);
    let (_, v) = admit(&ray, &opened(2));
    assert!(
        errors(&v)
            .iter()
            .any(|e| e.contains(today.split(": ").last().unwrap_or_default())),
        "{:?}",
        errors(&v)
    );
}

#[test]
fn a_warn_policys_limit_warns() {
    let policies = PolicySnapshot {
        cluster: vec![
            cluster_policy(json!({"limits": {"maxNodesPerReplica": 4}})),
            {
                let mut p = cluster_policy(
                    json!({"enforcement": "Warn", "limits": {"maxNodesPerReplica": 1}}),
                );
                p.metadata.name = Some("advice".to_owned());
                p
            },
        ],
        namespaced: vec![],
    };
    let (_, v) = admit(&shaped(8, 2), &policies);
    assert!(v.allowed(), "{:?}", errors(&v));
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(
        v.warnings[0].contains(
            "must be at most 1 (limits.maxNodesPerReplica of ClusterInferencePolicy \"advice\")"
        ),
        "{:?}",
        v.warnings
    );
}

#[test]
fn a_running_group_is_never_frozen_by_a_later_policy() {
    // The reconciler judges a running service without the policies' bound
    // as an error (it is told in PolicyCompliant): a shape that spans
    // whole nodes is a warning, one no group can hold stays an error.
    let (d, _) = admit(&shaped(8, 2), &opened(2));
    let v = super::with(&PolicySnapshot::default(), |ctx| {
        infergate::engine::validate_running(&d, ctx)
    });
    assert!(v.allowed(), "{:?}", errors(&v));
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    let (bad, _) = admit(&shaped(16, 1), &opened(2));
    let v = super::with(&opened(2), |ctx| {
        infergate::engine::validate_running(&bad, ctx)
    });
    assert!(!v.allowed());
}
