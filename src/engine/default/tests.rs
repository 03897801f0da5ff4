use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::api::AcceleratorType;
use crate::api::policy::{
    ClusterInferencePolicySpec, EngineDefaults, InferencePolicySpec, PolicyDefaults,
};
use crate::api::v1beta1::Backend;
use crate::api::v1beta1::{EngineSpec, InferenceService, RoutingSpec};
use crate::api::{
    BackendKind, CpuMemory, EndpointPickerMode, EndpointPickerSpec, FailureMode, PickerResources,
};
use crate::api::{ClusterInferencePolicy, InferencePolicy};
use crate::engine::builtin::DEFAULT_PATH_TEMPLATE;
use crate::engine::context::Context;
use crate::engine::context::{PolicySnapshot, ServerDefaults, image_policy_cluster};
use crate::engine::defaulted::Defaulted;

fn svc() -> InferenceService {
    let mut s = InferenceService::new("chat", Default::default());
    s.metadata.namespace = Some("team-a".to_owned());
    s.spec.model.r#ref = "m".to_owned();
    s
}

fn with<R>(policies: &PolicySnapshot, server: &ServerDefaults, f: impl FnOnce(&Context) -> R) -> R {
    crate::engine::context::in_team_a(policies, server, f)
}

fn image_policy_ns(name: &str, prio: i32, image: &str) -> InferencePolicy {
    let mut p = InferencePolicy::new(
        name,
        InferencePolicySpec {
            priority: prio,
            defaults: Some(PolicyDefaults {
                engine: Some(EngineDefaults {
                    image: Some(image.to_owned()),
                    port: None,
                    shm_size: None,
                    gpu_memory_utilization: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    p.metadata.namespace = Some("team-a".to_owned());
    p
}

#[test]
fn built_ins_fill_everything_but_the_image() {
    let d = with(
        &PolicySnapshot::default(),
        &ServerDefaults::default(),
        |c| default_service(&svc(), c),
    );
    let s = &d.object.spec;
    let e = s.engine.as_ref().unwrap();
    assert_eq!(e.image, None);
    assert_eq!(e.port, Some(8000));
    assert_eq!(s.backend, Some(Backend::Deployment));
    assert_eq!(s.replicas, Some(1));
    assert_eq!(
        s.accelerator.as_ref().unwrap().r#type,
        Some(AcceleratorType::None)
    );
    let r = s.routing.as_ref().unwrap();
    assert_eq!(r.request_timeout.as_deref(), Some("5m"));
    assert_eq!(r.path_template.as_deref(), Some(DEFAULT_PATH_TEMPLATE));
    assert_eq!(r.gateway, None);
    assert_eq!(s.resources, None);
    assert_eq!(s.autoscaling, None);
    let hc = s.health_check.as_ref().unwrap();
    assert_eq!(hc.interval.as_deref(), Some("10s"));
    assert_eq!(hc.timeout.as_deref(), Some("1s"));
    let prov = provenance_of(&d.object);
    assert_eq!(
        prov.get("spec.replicas").map(String::as_str),
        Some("built-in")
    );
    assert!(!prov.contains_key("spec.engine.image"));
}

#[test]
fn a_policy_moves_services_to_pools_and_the_picker_is_defaulted_field_by_field() {
    use crate::api::policy::RoutingDefaults;
    let mut policy = ClusterInferencePolicy::new(
        "pools",
        ClusterInferencePolicySpec {
            defaults: Some(PolicyDefaults {
                routing: Some(RoutingDefaults {
                    backend_kind: Some(BackendKind::InferencePool),
                    endpoint_picker: Some(EndpointPickerSpec {
                        image: Some("registry.example.com/epp:v1".to_owned()),
                        failure_mode: Some(FailureMode::FailOpen),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    policy.metadata.uid = Some("p".to_owned());
    let snap = PolicySnapshot {
        cluster: vec![policy],
        namespaced: vec![],
    };
    // The service sets its own replicas for the picker; the rest comes
    // from the policy or the built-ins.
    let mut s = svc();
    s.spec.routing = Some(RoutingSpec {
        endpoint_picker: Some(EndpointPickerSpec {
            replicas: Some(2),
            ..Default::default()
        }),
        ..Default::default()
    });
    let d = with(&snap, &ServerDefaults::default(), |c| {
        default_service(&s, c)
    });
    let r = d.object.spec.routing.as_ref().unwrap();
    assert_eq!(r.backend_kind, Some(BackendKind::InferencePool));
    let p = r.endpoint_picker.as_ref().unwrap();
    assert_eq!(p.mode, Some(EndpointPickerMode::Owned));
    assert_eq!(p.image.as_deref(), Some("registry.example.com/epp:v1"));
    assert_eq!(p.replicas, Some(2));
    assert_eq!(p.failure_mode, Some(FailureMode::FailOpen));
    assert_eq!(p.config, None);
    let source = |field: &str| {
        d.filled
            .iter()
            .find(|f| f.field == field)
            .map(|f| f.source.to_string())
    };
    assert_eq!(
        source("spec.routing.backendKind").as_deref(),
        Some("ClusterInferencePolicy/pools")
    );
    assert_eq!(
        source("spec.routing.endpointPicker.image").as_deref(),
        Some("ClusterInferencePolicy/pools")
    );
    assert_eq!(
        source("spec.routing.endpointPicker.mode").as_deref(),
        Some("built-in")
    );
    assert_eq!(source("spec.routing.endpointPicker.replicas"), None);
    // Without pools nothing of the picker is filled in.
    let d = with(
        &PolicySnapshot::default(),
        &ServerDefaults::default(),
        |c| default_service(&svc(), c),
    );
    let r = d.object.spec.routing.as_ref().unwrap();
    assert_eq!(r.backend_kind, Some(BackendKind::Service));
    assert_eq!(r.endpoint_picker, None);
}

/// A service routed through pools whose picker section is `picker`,
/// defaulted under `policy` (its `defaults.routing.endpointPicker`).
fn picker_defaulted(picker: EndpointPickerSpec, policy: Option<EndpointPickerSpec>) -> Defaulted {
    use crate::api::policy::RoutingDefaults;
    let mut p = ClusterInferencePolicy::new(
        "pickers",
        ClusterInferencePolicySpec {
            defaults: Some(PolicyDefaults {
                routing: Some(RoutingDefaults {
                    endpoint_picker: policy,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    p.metadata.uid = Some("p".to_owned());
    let snap = PolicySnapshot {
        cluster: vec![p],
        namespaced: vec![],
    };
    let mut s = svc();
    s.spec.routing = Some(RoutingSpec {
        backend_kind: Some(BackendKind::InferencePool),
        endpoint_picker: Some(picker),
        ..Default::default()
    });
    with(&snap, &ServerDefaults::default(), |c| {
        default_service(&s, c)
    })
}

fn q(s: &str) -> Option<Quantity> {
    Some(Quantity(s.to_owned()))
}

/// `(requests.cpu, requests.memory, limits.cpu, limits.memory)` of the
/// defaulted picker, and the source of each filled one.
fn picker_resources(d: &Defaulted) -> ([Option<String>; 4], [Option<String>; 4]) {
    let r = d.object.spec.routing.as_ref().unwrap();
    let res = r
        .endpoint_picker
        .as_ref()
        .unwrap()
        .resources
        .clone()
        .unwrap();
    let (req, lim) = (
        res.requests.unwrap_or_default(),
        res.limits.unwrap_or_default(),
    );
    let v = |q: Option<Quantity>| q.map(|q| q.0);
    let source = |field: &str| {
        let field = format!("spec.routing.endpointPicker.resources.{field}");
        d.filled
            .iter()
            .find(|f| f.field == field)
            .map(|f| f.source.to_string())
    };
    (
        [v(req.cpu), v(req.memory), v(lim.cpu), v(lim.memory)],
        [
            source("requests.cpu"),
            source("requests.memory"),
            source("limits.cpu"),
            source("limits.memory"),
        ],
    )
}

#[test]
fn the_picker_gets_requests_and_limits_field_by_field() {
    let some = |s: &str| Some(s.to_owned());
    let built_in = some("built-in");
    // Nothing set anywhere: the built-in figures, no CPU limit.
    let d = picker_defaulted(EndpointPickerSpec::default(), None);
    assert_eq!(
        picker_resources(&d),
        (
            [some("100m"), some("256Mi"), None, some("1Gi")],
            [built_in.clone(), built_in.clone(), None, built_in.clone()]
        )
    );
    let r = d.object.spec.routing.as_ref().unwrap();
    assert_eq!(r.endpoint_picker.as_ref().unwrap().replicas, Some(1));
    // A policy's figures, field by field; the service's own win.
    let policy = EndpointPickerSpec {
        resources: Some(PickerResources {
            requests: Some(CpuMemory {
                cpu: q("250m"),
                memory: None,
            }),
            limits: Some(CpuMemory {
                cpu: q("2"),
                memory: q("2Gi"),
            }),
        }),
        ..Default::default()
    };
    let own = EndpointPickerSpec {
        resources: Some(PickerResources {
            requests: Some(CpuMemory {
                cpu: None,
                memory: q("512Mi"),
            }),
            limits: None,
        }),
        ..Default::default()
    };
    let d = picker_defaulted(own, Some(policy));
    let policy_source = some("ClusterInferencePolicy/pickers");
    assert_eq!(
        picker_resources(&d),
        (
            [some("250m"), some("512Mi"), some("2"), some("2Gi")],
            [
                policy_source.clone(),
                None,
                policy_source.clone(),
                policy_source
            ]
        )
    );
    // A built-in figure never crosses a figure set elsewhere: a limit
    // below the built-in request is the request too, a request above the
    // built-in limit is the limit too.
    let d = picker_defaulted(
        EndpointPickerSpec {
            resources: Some(PickerResources {
                requests: Some(CpuMemory {
                    cpu: None,
                    memory: q("3Gi"),
                }),
                limits: Some(CpuMemory {
                    cpu: q("50m"),
                    memory: None,
                }),
            }),
            ..Default::default()
        },
        None,
    );
    assert_eq!(
        picker_resources(&d).0,
        [some("50m"), some("3Gi"), some("50m"), some("3Gi")]
    );
    // Idempotent; and `mode: None` runs no picker, so nothing is filled.
    let again = with(
        &PolicySnapshot::default(),
        &ServerDefaults::default(),
        |c| default_service(&d.object, c),
    );
    assert!(again.filled.is_empty(), "{:?}", again.filled);
    let d = picker_defaulted(
        EndpointPickerSpec {
            mode: Some(EndpointPickerMode::None),
            ..Default::default()
        },
        None,
    );
    let r = d.object.spec.routing.as_ref().unwrap();
    assert_eq!(r.endpoint_picker.as_ref().unwrap().resources, None);
}

#[test]
fn a_policy_rollout_is_copied_whole_without_its_prometheus_address() {
    use crate::api::rollout::{
        AnalysisSpec, PrometheusGate, RolloutSpec, RolloutStrategy, Threshold,
    };
    let plan = RolloutSpec {
        strategy: Some(RolloutStrategy::Canary),
        steps: vec![10, 50],
        interval: Some("10m".to_owned()),
        analysis: Some(AnalysisSpec {
            prometheus: Some(PrometheusGate {
                address: Some("http://prometheus.monitoring:9090".to_owned()),
                query: "up".to_owned(),
                threshold: Threshold {
                    min: Some(1.0),
                    max: None,
                },
                failure_limit: None,
                on_no_data: None,
            }),
        }),
        ..RolloutSpec::default()
    };
    let policy = ClusterInferencePolicy::new(
        "rollouts",
        ClusterInferencePolicySpec {
            defaults: Some(PolicyDefaults {
                rollout: Some(plan.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let snap = PolicySnapshot {
        cluster: vec![policy],
        namespaced: vec![],
    };
    let d = with(&snap, &ServerDefaults::default(), |c| {
        default_service(&svc(), c)
    });
    let got = d.object.spec.rollout.clone().expect("rollout defaulted");
    assert_eq!(got.steps, plan.steps);
    assert_eq!(got.strategy, plan.strategy);
    let p = got.analysis.unwrap().prometheus.unwrap();
    assert_eq!((p.address, p.query.as_str()), (None, "up"));
    assert!(d.filled.iter().any(|f| f.field == "spec.rollout"));
    // A service with a plan of its own keeps it (`strategy: Immediate`
    // opts out of the policy's Canary plan).
    let mut own = svc();
    let immediate = RolloutSpec {
        strategy: Some(RolloutStrategy::Immediate),
        ..RolloutSpec::default()
    };
    own.spec.rollout = Some(immediate.clone());
    let d = with(&snap, &ServerDefaults::default(), |c| {
        default_service(&own, c)
    });
    assert_eq!(
        d.object.spec.rollout.as_ref().map(RolloutSpec::plan),
        Some(immediate)
    );
    // A policy that names only the address sets no rollout.
    let only = ClusterInferencePolicy::new(
        "prometheus",
        ClusterInferencePolicySpec {
            defaults: Some(PolicyDefaults {
                rollout: Some(RolloutSpec {
                    analysis: Some(AnalysisSpec {
                        prometheus: Some(PrometheusGate {
                            address: Some("http://prometheus.monitoring:9090".to_owned()),
                            ..PrometheusGate::default()
                        }),
                    }),
                    ..RolloutSpec::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let snap = PolicySnapshot {
        cluster: vec![only],
        namespaced: vec![],
    };
    let d = with(&snap, &ServerDefaults::default(), |c| {
        default_service(&svc(), c)
    });
    // Only the built-in full-pool fields.
    let got = d.object.spec.rollout.expect("the full-pool fields");
    assert!(!got.has_plan(), "{got:?}");
    assert!(!d.filled.iter().any(|f| f.field == "spec.rollout"));
}

#[test]
fn zero_replicas_stay_zero() {
    let mut s = svc();
    s.spec.replicas = Some(0);
    let d = with(
        &PolicySnapshot::default(),
        &ServerDefaults::default(),
        |c| default_service(&s, c),
    );
    assert_eq!(d.object.spec.replicas, Some(0));
    assert!(!d.filled.iter().any(|p| p.field == "spec.replicas"));
}

#[test]
fn layers_in_order() {
    let server = ServerDefaults {
        engine_image: Some("flag/img".to_owned()),
        replicas: Some(5),
    };
    // flag only
    let d = with(&PolicySnapshot::default(), &server, |c| {
        default_service(&svc(), c)
    });
    assert_eq!(
        d.object.spec.engine.as_ref().unwrap().image.as_deref(),
        Some("flag/img")
    );
    assert_eq!(d.object.spec.replicas, Some(5));
    // cluster beats flag; higher priority cluster wins; ties by name
    let snap = PolicySnapshot {
        cluster: vec![
            image_policy_cluster("zeta", 1, "zeta/img"),
            image_policy_cluster("beta", 1, "beta/img"),
            image_policy_cluster("alpha", 0, "alpha/img"),
        ],
        namespaced: vec![],
    };
    let d = with(&snap, &server, |c| default_service(&svc(), c));
    let e = d.object.spec.engine.as_ref().unwrap();
    assert_eq!(e.image.as_deref(), Some("beta/img"));
    assert_eq!(e.port, Some(9000));
    assert_eq!(d.object.spec.replicas, Some(3));
    let prov = provenance_of(&d.object);
    assert_eq!(
        prov.get("spec.engine.image").map(String::as_str),
        Some("ClusterInferencePolicy/beta")
    );
    // namespace policy beats cluster; only for fields it sets
    let snap = PolicySnapshot {
        namespaced: vec![
            image_policy_ns("low", 0, "low/img"),
            image_policy_ns("high", 7, "high/img"),
        ],
        ..snap
    };
    let d = with(&snap, &server, |c| default_service(&svc(), c));
    let e = d.object.spec.engine.as_ref().unwrap();
    assert_eq!(e.image.as_deref(), Some("high/img"));
    assert_eq!(e.port, Some(9000), "port still from the cluster policy");
    let prov = provenance_of(&d.object);
    assert_eq!(
        prov.get("spec.engine.image").map(String::as_str),
        Some("InferencePolicy/team-a/high")
    );
    // the service's own value beats every layer
    let mut own = svc();
    own.spec.engine = Some(EngineSpec {
        image: Some("own/img".to_owned()),
        ..Default::default()
    });
    let d = with(&snap, &server, |c| default_service(&own, c));
    assert_eq!(
        d.object.spec.engine.as_ref().unwrap().image.as_deref(),
        Some("own/img")
    );
    assert!(!provenance_of(&d.object).contains_key("spec.engine.image"));
}

#[test]
fn other_namespaces_policies_do_not_apply() {
    let mut p = image_policy_ns("other", 100, "other/img");
    p.metadata.namespace = Some("team-b".to_owned());
    let snap = PolicySnapshot {
        namespaced: vec![p],
        ..Default::default()
    };
    let d = with(&snap, &ServerDefaults::default(), |c| {
        default_service(&svc(), c)
    });
    assert_eq!(d.object.spec.engine.as_ref().unwrap().image, None);
}

#[test]
fn idempotent_and_provenance_kept() {
    let snap = PolicySnapshot {
        cluster: vec![image_policy_cluster("platform", 0, "reg/img")],
        ..Default::default()
    };
    let (once, twice) = with(&snap, &ServerDefaults::default(), |c| {
        let once = default_service(&svc(), c);
        let twice = default_service(&once.object, c);
        (once, twice)
    });
    assert!(!once.filled.is_empty());
    assert!(twice.filled.is_empty());
    assert_eq!(once.object, twice.object);
    // autoscaling added later: only the new field is recorded
    let mut later = once.object.clone();
    later.spec.autoscaling = Some(crate::api::v1beta1::AutoscalingSpec {
        min_replicas: 1,
        max_replicas: 2,
        target_cpu_utilization_percent: None,
    });
    let d = with(&snap, &ServerDefaults::default(), |c| {
        default_service(&later, c)
    });
    assert_eq!(d.filled.len(), 1);
    let before = provenance_of(&once.object);
    let after = provenance_of(&d.object);
    assert_eq!(after.len(), before.len() + 1);
    for (k, v) in &before {
        assert_eq!(after.get(k), Some(v));
    }
}
