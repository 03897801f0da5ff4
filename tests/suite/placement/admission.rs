//! What admission makes of an AcceleratorClass: the type and a multi-GPU
//! replica's `/dev/shm` from the class, the class's placement and shm from
//! the policies' defaults (and their class limits), the denials where a
//! service contradicts its class, an AcceleratorClass judged as its CRD
//! judges it, and policies' class defaults kept within their class limits.

use std::collections::BTreeMap;

use infergate::api::AcceleratorClassSpec;
use infergate::engine::{self, PolicySnapshot};
use serde_json::json;

use super::{admit, cluster_policy, errors, h100, namespace_policy, service, with};

#[test]
fn a_class_gives_the_type_and_a_multi_gpu_replica_gets_shm() {
    let svc = service(json!({
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 2},
        "replicas": 2,
    }));
    let (d, v) = admit(&svc, &PolicySnapshot::default());
    assert!(v.allowed(), "{:?}", errors(&v));
    let spec = serde_json::to_value(&d.spec).expect("json");
    assert_eq!(
        spec["accelerator"],
        json!({"type": "nvidia", "class": "h100-80gb"})
    );
    assert_eq!(spec["engine"]["shmSize"], json!("2Gi"));
    assert_eq!(spec["placement"], json!({"spreadAcross": "node"}));
    let provenance: BTreeMap<String, String> = serde_json::from_str(
        &d.metadata.annotations.as_ref().expect("annotations")["infergate.dev/defaulted-from"],
    )
    .expect("provenance");
    assert_eq!(
        provenance["spec.accelerator.type"],
        "AcceleratorClass/h100-80gb"
    );
    assert_eq!(provenance["spec.engine.shmSize"], "built-in");

    // One GPU, one replica: no /dev/shm, no spread.
    let single = service(json!({"accelerator": {"class": "h100-80gb"}}));
    let (d, _) = admit(&single, &PolicySnapshot::default());
    let spec = serde_json::to_value(&d.spec).expect("json");
    assert_eq!(spec["engine"].get("shmSize"), None);
    assert_eq!(spec.get("placement"), None);

    // Defaulting is idempotent with the new fields too.
    let (again, _) = admit(&d, &PolicySnapshot::default());
    assert_eq!(again, d);
}

#[test]
fn policies_default_the_class_placement_and_shm_and_limit_the_classes() {
    let policies = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "defaults": {
                "accelerator": {"class": "h100-80gb"},
                "placement": {"priorityClassName": "inference-high", "spreadAcross": "zone",
                              "tolerations": [{"key": "dedicated", "operator": "Exists"}]},
                "engine": {"shmSize": "8Gi"}
            },
            "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}
        }))],
        namespaced: vec![],
    };
    let (d, v) = admit(&service(json!({})), &policies);
    assert!(v.allowed(), "{:?}", errors(&v));
    let spec = serde_json::to_value(&d.spec).expect("json");
    assert_eq!(spec["accelerator"]["class"], json!("h100-80gb"));
    assert_eq!(spec["accelerator"]["type"], json!("nvidia"));
    assert_eq!(spec["engine"]["shmSize"], json!("8Gi"));
    assert_eq!(
        spec["placement"]["priorityClassName"],
        json!("inference-high")
    );
    assert_eq!(spec["placement"]["spreadAcross"], json!("zone"));

    let (_, v) = admit(
        &service(json!({"accelerator": {"class": "mig"}})),
        &policies,
    );
    assert_eq!(
        errors(&v),
        [
            "spec.accelerator.class: Unsupported value: \"mig\": supported values: \"h100-80gb\" (ClusterInferencePolicy \"platform\")"
        ]
    );
    // A namespace policy's Warn limit warns instead.
    let warn = PolicySnapshot {
        cluster: vec![],
        namespaced: vec![namespace_policy(json!({
            "enforcement": "Warn",
            "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}
        }))],
    };
    let (_, v) = admit(&service(json!({"accelerator": {"class": "mig"}})), &warn);
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(v.warnings[0].contains("spec.accelerator.class"));
}

#[test]
fn admission_denies_what_the_class_contradicts() {
    let cases = [
        (
            json!({"accelerator": {"class": "h100"}}),
            "spec.accelerator.class: Not found: \"h100\"",
        ),
        (
            json!({"accelerator": {"class": "h100-80gb", "type": "amd"}}),
            "spec.accelerator.type: Invalid value: \"amd\": must be \"nvidia\", the vendor of AcceleratorClass \"h100-80gb\"",
        ),
        (
            json!({"accelerator": {"class": "h100-80gb"}, "parallelism": {"tensor": 4, "pipeline": 4}}),
            "spec.parallelism: Invalid value: 16: tensor 4 x pipeline 4 devices per replica must be at most the 8 devices per node of AcceleratorClass \"h100-80gb\"",
        ),
        (
            json!({"accelerator": {"class": "h100-80gb"},
                   "placement": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4", "pool": "a"}}}),
            "spec.placement.nodeSelector[cloud.google.com/gke-accelerator]: Invalid value: \"nvidia-l4\": AcceleratorClass \"h100-80gb\" selects cloud.google.com/gke-accelerator=\"nvidia-h100-80gb\"",
        ),
        (
            json!({"engine": {"shmSize": "0"}}),
            "spec.engine.shmSize: Invalid value: \"0\": must be greater than 0",
        ),
        (
            json!({"engine": {"env": [{"name": "HF_TOKEN", "value": "x",
                    "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}}),
            "spec.engine.env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
        ),
    ];
    for (spec, want) in cases {
        let (_, v) = admit(&service(spec.clone()), &PolicySnapshot::default());
        assert_eq!(errors(&v), [want], "{spec}");
        assert!(!v.allowed());
    }
    // Within the node it is fine, and the class's own key may be repeated.
    let (_, v) = admit(
        &service(json!({"accelerator": {"class": "h100-80gb"},
                        "parallelism": {"tensor": 4, "pipeline": 2},
                        "placement": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}})),
        &PolicySnapshot::default(),
    );
    assert!(v.allowed(), "{:?}", errors(&v));
}

#[test]
fn an_accelerator_class_is_judged_like_its_crd_does() {
    let bad: AcceleratorClassSpec = serde_json::from_value(json!({
        "vendor": "none", "memoryPerDevice": "0", "devicesPerNode": 0,
        "costPerDeviceHour": "4,10", "resourceName": "nvidia gpu"
    }))
    .expect("decodes");
    let v = engine::validate_accelerator_class(&bad);
    assert_eq!(
        errors(&v),
        [
            "spec.vendor: Unsupported value: \"none\": supported values: \"nvidia\", \"amd\", \"intel-gaudi\", \"google-tpu\"",
            "spec.devicesPerNode: Invalid value: 0: must be greater than or equal to 1",
            "spec.memoryPerDevice: Invalid value: \"0\": must be greater than 0",
            "spec.costPerDeviceHour: Invalid value: \"4,10\": must be a decimal such as 4.10",
            "spec.resourceName: Invalid value: \"nvidia gpu\": must be a resource name such as nvidia.com/gpu",
        ]
    );
    assert!(engine::validate_accelerator_class(&h100()).allowed());
}

#[test]
fn policies_keep_their_class_defaults_within_the_class_limits() {
    let own = cluster_policy(json!({
        "defaults": {"accelerator": {"class": "mig"}, "engine": {"shmSize": "lots"}},
        "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}
    }));
    assert_eq!(
        errors(&engine::validate_cluster_policy(&own)),
        [
            "spec.defaults.accelerator.class: Invalid value: \"mig\": must be one of spec.limits.allowedAcceleratorClasses (\"h100-80gb\")",
            "spec.defaults.engine.shmSize: Invalid value: \"lots\": must be a Kubernetes quantity such as 500m, 4 or 16Gi",
        ]
    );
    // A namespace policy may narrow the cluster's classes, not widen them,
    // and may not default to one the cluster does not allow.
    let policies = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "limits": {"allowedAcceleratorClasses": ["h100-80gb", "mig"]}
        }))],
        namespaced: vec![],
    };
    let wider = namespace_policy(json!({
        "defaults": {"accelerator": {"class": "l4-24gb"}},
        "limits": {"allowedAcceleratorClasses": ["h100-80gb", "l4-24gb"]}
    }));
    let v = with(&policies, |ctx| {
        engine::validate_namespaced_policy(&wider, ctx)
    });
    assert_eq!(
        errors(&v),
        [
            "spec.limits.allowedAcceleratorClasses[1]: Invalid value: \"l4-24gb\": may not loosen the allowed accelerator classes \"h100-80gb\", \"mig\" of ClusterInferencePolicy \"platform\"",
            "spec.defaults.accelerator.class: Invalid value: \"l4-24gb\": must be one of \"h100-80gb\", \"mig\" (ClusterInferencePolicy \"platform\")",
        ]
    );
    let narrower = namespace_policy(json!({
        "defaults": {"accelerator": {"class": "mig"}},
        "limits": {"allowedAcceleratorClasses": ["mig"]}
    }));
    let v = with(&policies, |ctx| {
        engine::validate_namespaced_policy(&narrower, ctx)
    });
    assert!(v.allowed(), "{:?}", errors(&v));
}
