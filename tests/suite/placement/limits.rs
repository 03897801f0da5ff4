//! What the policies' limits allow: a GPU service has a class where a
//! policy limits classes or cost, `placement` cannot reach the pool of a
//! class the policy does not allow (node selectors and tolerations equal
//! to that class's own), and priority classes are bounded by every policy.

use infergate::api::AcceleratorClassSpec;
use infergate::engine::{self, AcceleratorClasses, PolicySnapshot};
use serde_json::{Value, json};

use super::{
    admit, admit_among, cluster_policy, errors, h100, mig, namespace_policy, service, with,
};

fn only(cluster: Option<Value>, namespaced: Option<Value>) -> PolicySnapshot {
    PolicySnapshot {
        cluster: cluster.map(cluster_policy).into_iter().collect(),
        namespaced: namespaced.map(namespace_policy).into_iter().collect(),
    }
}

/// Where a policy sets `allowedAcceleratorClasses` or
/// `maxCostPerHourPerNamespace`, a service with GPUs has a class (its own
/// or a policy's default); elsewhere a class-less GPU service is admitted
/// as before, and a service without GPUs needs none anywhere.
#[test]
fn a_gpu_service_has_a_class_where_a_policy_limits_classes_or_cost() {
    let gpus = service(json!({"accelerator": {"type": "nvidia"}, "parallelism": {"tensor": 2}}));
    let cpu = service(json!({}));
    let required = |why: &str, who: &str| {
        format!(
            "spec.accelerator.class: Required value: a service with GPUs must name an AcceleratorClass ({why} of {who})"
        )
    };

    let classes_limited = only(
        Some(json!({"limits": {"allowedAcceleratorClasses": ["h100-80gb"]}})),
        None,
    );
    let (_, v) = admit(&gpus, &classes_limited);
    assert_eq!(
        errors(&v),
        [required(
            "limits.allowedAcceleratorClasses",
            "ClusterInferencePolicy \"platform\""
        )]
    );
    let cost_limited = only(
        None,
        Some(json!({"limits": {"maxCostPerHourPerNamespace": "40.00"}})),
    );
    let (_, v) = admit(&gpus, &cost_limited);
    assert_eq!(
        errors(&v),
        [required(
            "limits.maxCostPerHourPerNamespace",
            "InferencePolicy \"team-a/gpus\""
        )]
    );
    // Named, the class is judged as before; without GPUs none is needed.
    for policies in [&classes_limited, &cost_limited] {
        let named = service(json!({"accelerator": {"class": "h100-80gb"}}));
        let (_, v) = admit(&named, policies);
        assert!(v.allowed(), "{:?}", errors(&v));
        let (_, v) = admit(&cpu, policies);
        assert!(v.allowed(), "{:?}", errors(&v));
    }
    // A policy's default class is a class.
    let defaulted = only(
        Some(json!({
            "defaults": {"accelerator": {"class": "h100-80gb"}},
            "limits": {"allowedAcceleratorClasses": ["h100-80gb"], "maxCostPerHourPerNamespace": "40.00"}
        })),
        None,
    );
    let (d, v) = admit(&service(json!({"parallelism": {"tensor": 2}})), &defaulted);
    assert!(v.allowed(), "{:?}", errors(&v));
    assert_eq!(
        d.spec.accelerator.and_then(|a| a.class).as_deref(),
        Some("h100-80gb")
    );
    // A Warn policy warns.
    let warn = only(
        None,
        Some(
            json!({"enforcement": "Warn", "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}}),
        ),
    );
    let (_, v) = admit(&gpus, &warn);
    assert!(v.allowed(), "{:?}", errors(&v));
    assert_eq!(
        v.warnings,
        [required(
            "limits.allowedAcceleratorClasses",
            "InferencePolicy \"team-a/gpus\""
        )]
    );
    // No such policy: a class-less GPU service is admitted as it always was,
    // whatever else the policies limit.
    for policies in [
        PolicySnapshot::default(),
        only(
            Some(
                json!({"limits": {"maxGPUsPerReplica": 8, "maxGPUsPerNamespace": 64, "allowedAccelerators": ["nvidia"]}}),
            ),
            None,
        ),
    ] {
        let (d, v) = admit(&gpus, &policies);
        assert!(v.allowed(), "{:?}", errors(&v));
        assert_eq!(engine::gpus_per_replica(&d), 2);
        assert_eq!(d.spec.accelerator.and_then(|a| a.class), None);
    }
}

/// The pools of a cluster: two H100 pools (the shared one and a reserved
/// one of its own taint), an L4 pool tolerating the same GPU taint as the
/// shared H100s, and a MIG slice class with no node selector.
fn pools() -> AcceleratorClasses {
    let class = |v: Value| -> AcceleratorClassSpec { serde_json::from_value(v).expect("class") };
    AcceleratorClasses::from([
        ("h100-80gb".to_owned(), h100()),
        (
            "h100-reserved".to_owned(),
            class(json!({
                "vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": 8,
                "nodeSelector": {"gpu.example.com/pool": "reserved", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                "tolerations": [{"key": "gpu.example.com/reserved", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
            })),
        ),
        (
            "l4-24gb".to_owned(),
            class(json!({
                "vendor": "nvidia", "memoryPerDevice": "24Gi", "devicesPerNode": 1,
                "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
            })),
        ),
        ("mig".to_owned(), mig()),
    ])
}

/// A tenant allowed the MIG and L4 classes cannot put its pods on the
/// H100 pools through `placement`: each nodeSelector entry and toleration
/// equal to a disallowed class's own (and to no allowed class's) is denied,
/// naming the class and the entry.
#[test]
fn placement_cannot_reach_the_pool_of_a_class_the_policy_does_not_allow() {
    let policies = only(
        None,
        Some(json!({"limits": {"allowedAcceleratorClasses": ["mig", "l4-24gb"]}})),
    );
    let svc = service(json!({
        "accelerator": {"class": "mig"},
        "placement": {
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "pool": "inference"},
            "tolerations": [
                // The L4 pool's too: allowed.
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                // The reserved pool's, with the operator left to its default
                // and a time limit: the same taints.
                {"key": "gpu.example.com/reserved", "value": "true", "effect": "NoSchedule", "tolerationSeconds": 60},
                {"key": "dedicated", "operator": "Exists"}
            ]
        }
    }));
    let (_, v) = admit_among(&svc, &policies, &pools());
    let who = "which InferencePolicy \"team-a/gpus\" does not allow (limits.allowedAcceleratorClasses: \"mig\", \"l4-24gb\")";
    assert_eq!(
        errors(&v),
        [
            format!(
                "spec.placement.nodeSelector[cloud.google.com/gke-accelerator]: Forbidden: cloud.google.com/gke-accelerator=\"nvidia-h100-80gb\" selects the nodes of AcceleratorClasses \"h100-80gb\", \"h100-reserved\", {who}"
            ),
            format!(
                "spec.placement.tolerations[1]: Forbidden: tolerates the taint of the nodes of AcceleratorClass \"h100-reserved\", {who}"
            ),
        ]
    );

    // With the H100s allowed, the same placement is the tenant's choice.
    let wider = only(
        None,
        Some(
            json!({"limits": {"allowedAcceleratorClasses": ["mig", "l4-24gb", "h100-80gb", "h100-reserved"]}}),
        ),
    );
    let (_, v) = admit_among(&svc, &wider, &pools());
    assert!(v.allowed(), "{:?}", errors(&v));
    // Without a policy that limits classes, placement is not bounded by them.
    let (_, v) = admit_among(&svc, &PolicySnapshot::default(), &pools());
    assert!(v.allowed(), "{:?}", errors(&v));

    // Every applicable policy's list applies, each naming itself; a Warn
    // policy warns.
    let both = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "enforcement": "Warn",
            "limits": {"allowedAcceleratorClasses": ["mig", "l4-24gb", "h100-80gb"]}
        }))],
        namespaced: vec![namespace_policy(json!({
            "limits": {"allowedAcceleratorClasses": ["mig"]}
        }))],
    };
    let reserved = service(json!({
        "accelerator": {"class": "mig"},
        "placement": {"nodeSelector": {"gpu.example.com/pool": "reserved"}}
    }));
    let (_, v) = admit_among(&reserved, &both, &pools());
    assert_eq!(
        errors(&v),
        [
            "spec.placement.nodeSelector[gpu.example.com/pool]: Forbidden: gpu.example.com/pool=\"reserved\" selects the nodes of AcceleratorClass \"h100-reserved\", which InferencePolicy \"team-a/gpus\" does not allow (limits.allowedAcceleratorClasses: \"mig\")"
        ]
    );
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(
        v.warnings[0].contains("which ClusterInferencePolicy \"platform\" does not allow"),
        "{:?}",
        v.warnings
    );

    // The service's own class is judged by the class rules alone: naming a
    // disallowed class and repeating its node selector is one error.
    let own = service(json!({
        "accelerator": {"class": "h100-reserved"},
        "placement": {"nodeSelector": {"gpu.example.com/pool": "reserved"}}
    }));
    let (_, v) = admit_among(&own, &policies, &pools());
    assert_eq!(
        errors(&v),
        [
            "spec.accelerator.class: Unsupported value: \"h100-reserved\": supported values: \"mig\", \"l4-24gb\" (InferencePolicy \"team-a/gpus\")"
        ]
    );
}

/// `limits.allowedPriorityClasses` bounds `placement.priorityClassName`
/// under every applicable policy (absent: any); a namespace policy may
/// narrow the platform's list, not widen it, and no policy defaults a
/// PriorityClass its limits or the platform's exclude.
#[test]
fn priority_classes_are_bounded_by_every_policy() {
    let policies = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "limits": {"allowedPriorityClasses": ["inference-high", "inference-low"]}
        }))],
        namespaced: vec![namespace_policy(json!({
            "limits": {"allowedPriorityClasses": ["inference-low"]}
        }))],
    };
    let at = |name: &str| service(json!({"placement": {"priorityClassName": name}}));
    let (_, v) = admit(&at("system-cluster-critical"), &policies);
    assert_eq!(
        errors(&v),
        [
            "spec.placement.priorityClassName: Unsupported value: \"system-cluster-critical\": supported values: \"inference-low\" (InferencePolicy \"team-a/gpus\")",
            "spec.placement.priorityClassName: Unsupported value: \"system-cluster-critical\": supported values: \"inference-high\", \"inference-low\" (ClusterInferencePolicy \"platform\")",
        ]
    );
    let (_, v) = admit(&at("inference-high"), &policies);
    assert_eq!(
        errors(&v),
        [
            "spec.placement.priorityClassName: Unsupported value: \"inference-high\": supported values: \"inference-low\" (InferencePolicy \"team-a/gpus\")"
        ]
    );
    for allowed in [at("inference-low"), service(json!({}))] {
        let (_, v) = admit(&allowed, &policies);
        assert!(v.allowed(), "{:?}", errors(&v));
    }
    // Without a list, any PriorityClass.
    let (_, v) = admit(&at("system-cluster-critical"), &PolicySnapshot::default());
    assert!(v.allowed(), "{:?}", errors(&v));

    // The policies themselves.
    let own = cluster_policy(json!({
        "defaults": {"placement": {"priorityClassName": "batch"}},
        "limits": {"allowedPriorityClasses": ["inference-high"]}
    }));
    assert_eq!(
        errors(&engine::validate_cluster_policy(&own)),
        [
            "spec.defaults.placement.priorityClassName: Invalid value: \"batch\": must be one of spec.limits.allowedPriorityClasses (\"inference-high\")"
        ]
    );
    let platform = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "limits": {"allowedPriorityClasses": ["inference-high", "inference-low"]}
        }))],
        namespaced: vec![],
    };
    let wider = namespace_policy(json!({
        "defaults": {"placement": {"priorityClassName": "system-cluster-critical"}},
        "limits": {"allowedPriorityClasses": ["inference-low", "system-cluster-critical"]}
    }));
    let v = with(&platform, |ctx| {
        engine::validate_namespaced_policy(&wider, ctx)
    });
    assert_eq!(
        errors(&v),
        [
            "spec.limits.allowedPriorityClasses[1]: Invalid value: \"system-cluster-critical\": may not loosen the allowed priority classes \"inference-high\", \"inference-low\" of ClusterInferencePolicy \"platform\"",
            "spec.defaults.placement.priorityClassName: Invalid value: \"system-cluster-critical\": must be one of \"inference-high\", \"inference-low\" (ClusterInferencePolicy \"platform\")",
        ]
    );
    let narrower = namespace_policy(json!({
        "defaults": {"placement": {"priorityClassName": "inference-low"}},
        "limits": {"allowedPriorityClasses": ["inference-low"]}
    }));
    let v = with(&platform, |ctx| {
        engine::validate_namespaced_policy(&narrower, ctx)
    });
    assert!(v.allowed(), "{:?}", errors(&v));
}
