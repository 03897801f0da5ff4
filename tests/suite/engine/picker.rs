//! The endpoint picker of a service routed through InferencePools: its
//! replicas bounded by `maxReplicas` (naming the policy), its requests
//! within its limits, a policy's picker defaults within that policy's
//! limits, and its round trip through v1alpha1's stash.

use std::collections::BTreeMap;

use infergate::api::conversion::{self, V1ALPHA1, V1BETA1};
use infergate::api::policy::{Enforcement, PolicyDefaults, PolicyLimits, RoutingDefaults};
use infergate::api::v1beta1::{InferenceService, RoutingSpec};
use infergate::api::{CONVERSION_DATA_ANNOTATION, ClusterInferencePolicy};
use infergate::engine::{self, NoRoutes, PolicySnapshot};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{cluster, ctx_run, errors, namespaced, valid_service, validate};

/// A valid service routed through InferencePools, its picker `picker`.
fn pooled(picker: infergate::api::EndpointPickerSpec) -> InferenceService {
    let mut s = valid_service();
    s.spec.routing = Some(RoutingSpec {
        backend_kind: Some(infergate::api::BackendKind::InferencePool),
        endpoint_picker: Some(infergate::api::EndpointPickerSpec {
            image: Some("registry.example.com/epp:v1".to_owned()),
            ..picker
        }),
        ..Default::default()
    });
    s
}

fn max_replicas(n: i32) -> PolicyLimits {
    PolicyLimits {
        max_replicas: Some(n),
        ..Default::default()
    }
}

#[test]
fn picker_replicas_are_bounded_by_max_replicas_and_name_the_policy() {
    use infergate::api::{EndpointPickerMode, EndpointPickerSpec};
    let s = pooled(EndpointPickerSpec {
        replicas: Some(12),
        ..Default::default()
    });
    let p = PolicySnapshot {
        cluster: vec![cluster("platform", Enforcement::Deny, max_replicas(16))],
        namespaced: vec![namespaced("tight", max_replicas(8))],
    };
    assert_eq!(
        errors(&validate(&s, &p)),
        [
            "spec.routing.endpointPicker.replicas: Invalid value: 12: must be at most 8 (InferencePolicy \"team-a/tight\")"
        ]
    );
    // Warn: admitted with the same sentence as a warning.
    let p = PolicySnapshot {
        cluster: vec![cluster("platform", Enforcement::Warn, max_replicas(4))],
        namespaced: vec![],
    };
    let v = validate(&s, &p);
    assert!(v.allowed(), "{:?}", v.errors);
    assert_eq!(
        v.warnings,
        [
            "spec.routing.endpointPicker.replicas: Invalid value: 12: must be at most 4 (ClusterInferencePolicy \"platform\")"
        ]
    );
    // Unset, the picker is judged by its built-in single replica.
    let p = PolicySnapshot {
        cluster: vec![cluster("frozen", Enforcement::Deny, max_replicas(0))],
        namespaced: vec![],
    };
    let mut unset = pooled(EndpointPickerSpec::default());
    unset.spec.replicas = Some(0);
    assert_eq!(
        errors(&validate(&unset, &p)),
        [
            "spec.routing.endpointPicker.replicas: Invalid value: 1: must be at most 0 (ClusterInferencePolicy \"frozen\")"
        ]
    );
    // `mode: None` runs no picker: nothing to bound.
    let mut none = pooled(EndpointPickerSpec {
        mode: Some(EndpointPickerMode::None),
        replicas: Some(12),
        ..Default::default()
    });
    none.spec.replicas = Some(0);
    assert!(validate(&none, &p).allowed());
}

#[test]
fn picker_requests_stay_within_limits_and_parse() {
    use infergate::api::{CpuMemory, EndpointPickerSpec, PickerResources};
    let q = |s: &str| Some(Quantity(s.to_owned()));
    let with = |requests, limits| {
        pooled(EndpointPickerSpec {
            resources: Some(PickerResources { requests, limits }),
            ..Default::default()
        })
    };
    // A request above the limit beside it, or above the built-in memory limit.
    let s = with(
        Some(CpuMemory {
            cpu: q("2"),
            memory: q("2Gi"),
        }),
        Some(CpuMemory {
            cpu: q("1"),
            memory: None,
        }),
    );
    assert_eq!(
        errors(&validate(&s, &PolicySnapshot::default())),
        [
            "spec.routing.endpointPicker.resources.requests.cpu: Invalid value: \"2\": must be less than or equal to spec.routing.endpointPicker.resources.limits.cpu (1)",
            "spec.routing.endpointPicker.resources.requests.memory: Invalid value: \"2Gi\": must be less than or equal to spec.routing.endpointPicker.resources.limits.memory (1Gi)",
        ]
    );
    // Defaulting first (as admission does) gives such a request a limit
    // of its own size: admitted.
    let labels = BTreeMap::new();
    let only_request = with(
        Some(CpuMemory {
            cpu: None,
            memory: q("2Gi"),
        }),
        None,
    );
    let v = ctx_run(&PolicySnapshot::default(), &labels, &NoRoutes, |c| {
        let d = engine::default_service(&only_request, c).object;
        engine::validate_service(&d, None, c)
    });
    assert!(v.allowed(), "{:?}", v.errors);
    // A quantity that does not parse.
    let s = with(
        None,
        Some(CpuMemory {
            cpu: None,
            memory: q("lots"),
        }),
    );
    assert_eq!(
        errors(&validate(&s, &PolicySnapshot::default())),
        [
            "spec.routing.endpointPicker.resources.limits.memory: Invalid value: \"lots\": must be a Kubernetes quantity such as 500m, 4 or 16Gi"
        ]
    );
}

#[test]
fn policy_picker_defaults_respect_their_limits() {
    use infergate::api::{CpuMemory, EndpointPickerSpec, PickerResources};
    let picker = EndpointPickerSpec {
        image: Some("docker.io/someone/epp:1".to_owned()),
        replicas: Some(20),
        resources: Some(PickerResources {
            requests: Some(CpuMemory {
                cpu: Some(Quantity("one".to_owned())),
                memory: Some(Quantity("2Gi".to_owned())),
            }),
            limits: Some(CpuMemory {
                cpu: None,
                memory: Some(Quantity("1Gi".to_owned())),
            }),
        }),
        ..Default::default()
    };
    let defaults = PolicyDefaults {
        routing: Some(RoutingDefaults {
            endpoint_picker: Some(picker),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut p = ClusterInferencePolicy::new("p", Default::default());
    p.spec.defaults = Some(defaults.clone());
    p.spec.limits = Some(PolicyLimits {
        max_replicas: Some(16),
        allowed_image_registries: Some(vec!["registry.example.com/".to_owned()]),
        ..Default::default()
    });
    assert_eq!(
        errors(&engine::validate_cluster_policy(&p)),
        [
            "spec.defaults.routing.endpointPicker.replicas: Invalid value: 20: must be at most spec.limits.maxReplicas (16)",
            "spec.defaults.routing.endpointPicker.image: Invalid value: \"docker.io/someone/epp:1\": must start with one of spec.limits.allowedImageRegistries (\"registry.example.com/\")",
            "spec.defaults.routing.endpointPicker.resources.requests.cpu: Invalid value: \"one\": must be a Kubernetes quantity such as 500m, 4 or 16Gi",
            "spec.defaults.routing.endpointPicker.resources.requests.memory: Invalid value: \"2Gi\": must be less than or equal to spec.defaults.routing.endpointPicker.resources.limits.memory (1Gi)",
        ]
    );
    // A namespace policy's picker defaults within the cluster's limits.
    let snap = PolicySnapshot {
        cluster: vec![p],
        namespaced: vec![],
    };
    let mut ns = namespaced("defaults", PolicyLimits::default());
    ns.spec.defaults = Some(defaults);
    let labels = BTreeMap::new();
    let e = ctx_run(&snap, &labels, &NoRoutes, |c| {
        engine::validate_namespaced_policy(&ns, c)
    });
    let e = errors(&e);
    for want in [
        "spec.defaults.routing.endpointPicker.replicas: Invalid value: 20: must be at most 16 (ClusterInferencePolicy \"p\")",
        "spec.defaults.routing.endpointPicker.image: Invalid value: \"docker.io/someone/epp:1\": must start with one of \"registry.example.com/\" (ClusterInferencePolicy \"p\")",
    ] {
        assert!(e.iter().any(|x| x == want), "{want} missing from {e:#?}");
    }
}

/// The picker exists only in v1beta1: a v1alpha1 read carries it in the
/// conversion annotation, and converting back restores it exactly.
#[test]
fn the_picker_survives_a_round_trip_through_v1alpha1() {
    use infergate::api::{CpuMemory, EndpointPickerSpec, FailureMode, PickerResources};
    let mut b = pooled(EndpointPickerSpec {
        replicas: Some(2),
        failure_mode: Some(FailureMode::FailOpen),
        config: Some("plugins: []\n".to_owned()),
        resources: Some(PickerResources {
            requests: Some(CpuMemory {
                cpu: Some(Quantity("250m".to_owned())),
                memory: Some(Quantity("512Mi".to_owned())),
            }),
            limits: Some(CpuMemory {
                cpu: None,
                memory: Some(Quantity("2Gi".to_owned())),
            }),
        }),
        ..Default::default()
    });
    b.metadata.name = Some("chat".to_owned());
    let a = conversion::to_v1alpha1(&b).unwrap();
    let stash = &a.metadata.annotations.as_ref().unwrap()[CONVERSION_DATA_ANNOTATION];
    assert!(stash.contains("\"/spec/routing\""), "{stash}");
    assert!(stash.contains("512Mi"), "{stash}");
    assert_eq!(conversion::to_v1beta1(&a).unwrap(), b);
    // The same through the JSON entry point the webhook uses.
    let json = serde_json::to_value(&b).unwrap();
    let down = conversion::convert(json.clone(), V1ALPHA1).unwrap();
    assert!(down["spec"].get("routing").is_none());
    assert_eq!(conversion::convert(down, V1BETA1).unwrap(), json);
}
