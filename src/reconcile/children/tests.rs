//! The builders of the `Deployment` backend on one defaulted service.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::httproute::GATEWAY_GROUP;
use super::*;
use crate::api::v1beta1::InferenceService;
use crate::api::v1beta1::{
    AcceleratorSpec, AutoscalingSpec, CanarySpec, EngineSpec, EnvVar as SpecEnvVar,
    HealthCheckSpec, InferenceServiceSpec, ModelSpec, ParallelismSpec, ResourcesSpec, RoutingSpec,
};
use crate::api::{AcceleratorType, GatewayRef};

/// A service as the mutating webhook stores it.
fn svc() -> InferenceService {
    let mut s = InferenceService::new(
        "chat",
        InferenceServiceSpec {
            model: ModelSpec {
                r#ref: "llama3-8b-q4".into(),
                image: None,
                ..Default::default()
            },
            engine: Some(EngineSpec {
                image: Some("registry.example.com/vllm:0.9".into()),
                port: Some(8000),
                args: vec!["--max-model-len=8192".into()],
                env: vec![SpecEnvVar {
                    name: "HF_HOME".into(),
                    value: Some("/cache".into()),
                    value_from: None,
                }],
                ..EngineSpec::default()
            }),
            replicas: Some(2),
            resources: Some(ResourcesSpec {
                cpu: Some(Quantity("4".into())),
                memory: Some(Quantity("16Gi".into())),
                gpu_memory: Some(Quantity("24Gi".into())),
            }),
            accelerator: Some(AcceleratorSpec {
                r#type: Some(AcceleratorType::Nvidia),
                class: None,
            }),
            parallelism: Some(ParallelismSpec {
                tensor: Some(2),
                pipeline: Some(3),
            }),
            health_check: Some(HealthCheckSpec {
                path: Some("/health".into()),
                interval: Some("15s".into()),
                timeout: Some("1500ms".into()),
            }),
            routing: Some(RoutingSpec {
                path_template: Some("/{.metadata.namespace}/{.metadata.name}".into()),
                request_timeout: Some("90s".into()),
                gateway: Some(GatewayRef {
                    name: "inference-gw".into(),
                    namespace: Some("gateways".into()),
                }),
                ..RoutingSpec::default()
            }),
            ..InferenceServiceSpec::default()
        },
    );
    s.metadata.namespace = Some("team-a".into());
    s.metadata.uid = Some("8f0a-uid".into());
    s
}

fn with_canary(mut s: InferenceService, weight: i32, replicas: Option<i32>) -> InferenceService {
    s.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "llama3-8b-q5".into(),
            image: None,
            ..Default::default()
        },
        engine_image: None,
        weight,
        replicas,
        on_full_pool: None,
    });
    s
}

fn engine_container(d: &Deployment) -> &Container {
    &d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
}

#[test]
fn every_child_carries_the_labels_and_a_controller_owner_reference() {
    let s = with_canary(
        InferenceService {
            spec: InferenceServiceSpec {
                autoscaling: Some(AutoscalingSpec {
                    min_replicas: 1,
                    max_replicas: 4,
                    target_cpu_utilization_percent: None,
                }),
                ..svc().spec
            },
            ..svc()
        },
        10,
        None,
    );
    let d = desired(&s, None).unwrap();
    let route = http_route(&s, 10).unwrap().unwrap();
    let (cd, cs) = d.canary.clone().unwrap();
    let metas = [
        (&d.primary.metadata, "primary", "chat"),
        (&d.primary_service.metadata, "primary", "chat"),
        (&cd.metadata, "canary", "chat-canary"),
        (&cs.metadata, "canary", "chat-canary"),
        (&d.hpa.as_ref().unwrap().metadata, "primary", "chat"),
        (&route.metadata, "primary", "chat"),
    ];
    for (meta, track, name) in metas {
        assert_eq!(meta.name.as_deref(), Some(name));
        assert_eq!(meta.namespace.as_deref(), Some("team-a"));
        let l = meta.labels.as_ref().unwrap();
        assert_eq!(l[LABEL_NAME], "chat");
        assert_eq!(l[LABEL_MANAGED_BY], "infergate");
        assert_eq!(l[LABEL_SERVICE], "chat");
        assert_eq!(l[LABEL_TRACK], track);
        let owners = meta.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "InferenceService");
        assert_eq!(owners[0].api_version, "infergate.dev/v1beta1");
        assert_eq!(owners[0].name, "chat");
        assert_eq!(owners[0].uid, "8f0a-uid");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, Some(true));
    }
}

#[test]
fn no_uid_means_no_children() {
    let mut s = svc();
    s.metadata.uid = None;
    assert_eq!(desired(&s, None).unwrap_err(), BuildError::NoOwner);
}

#[test]
fn engine_container_has_image_port_args_env() {
    let d = deployment(&svc(), Track::Primary, None).unwrap();
    let c = engine_container(&d);
    assert_eq!(c.name, "engine");
    assert_eq!(c.image.as_deref(), Some("registry.example.com/vllm:0.9"));
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(port.container_port, 8000);
    assert_eq!(port.name.as_deref(), Some("http"));
    assert_eq!(
        c.args.as_ref().unwrap().join(" "),
        "--model llama3-8b-q4 --served-model-name llama3-8b-q4 --port 8000 \
         --tensor-parallel-size 2 --pipeline-parallel-size 3 --max-model-len=8192"
    );
    let env = c.env.as_ref().unwrap();
    assert_eq!(env[0].name, "HF_HOME");
    assert_eq!(env[0].value.as_deref(), Some("/cache"));
}

#[test]
fn parallel_sizes_only_when_above_one() {
    let mut s = svc();
    s.spec.parallelism = Some(ParallelismSpec {
        tensor: Some(1),
        pipeline: Some(4),
    });
    s.spec.engine.as_mut().unwrap().args.clear();
    s.spec.engine.as_mut().unwrap().port = Some(9000);
    let args = engine_args(&s, Track::Primary);
    assert!(!args.contains(&"--tensor-parallel-size".to_owned()));
    assert_eq!(
        &args[4..],
        &["--port", "9000", "--pipeline-parallel-size", "4"]
    );
    s.spec.parallelism = None;
    assert_eq!(engine_args(&s, Track::Primary).len(), 6);
}

#[test]
fn memory_fields_become_engine_flags() {
    let mut s = svc();
    s.spec.parallelism = None;
    let e = s.spec.engine.as_mut().unwrap();
    e.args.clear();
    e.max_model_len = Some(4608);
    e.gpu_memory_utilization = Some(0.9);
    // 0.9 is the engine's own default: no flag, no pod template change.
    assert_eq!(
        &engine_args(&s, Track::Primary)[6..],
        &["--max-model-len", "4608"]
    );
    s.spec.engine.as_mut().unwrap().gpu_memory_utilization = Some(0.85);
    assert_eq!(
        &engine_args(&s, Track::Primary)[6..],
        &[
            "--max-model-len",
            "4608",
            "--gpu-memory-utilization",
            "0.85"
        ]
    );
}

#[test]
fn model_image_is_mounted_as_an_image_volume() {
    let mut s = svc();
    s.spec.model.image = Some("registry.example.com/models/llama3:8b".into());
    let d = deployment(&s, Track::Primary, None).unwrap();
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let vol = &pod.volumes.as_ref().unwrap()[0];
    assert_eq!(
        vol.image.as_ref().unwrap().reference.as_deref(),
        Some("registry.example.com/models/llama3:8b")
    );
    let c = &pod.containers[0];
    assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/model");
    assert_eq!(
        &c.args.as_ref().unwrap()[..4],
        &["--model", "/model", "--served-model-name", "llama3-8b-q4"]
    );
    // Without a model image there is no volume.
    let d = deployment(&svc(), Track::Primary, None).unwrap();
    assert!(d.spec.unwrap().template.spec.unwrap().volumes.is_none());
}

#[test]
fn resources_requests_equal_limits_with_gpus_tensor_times_pipeline() {
    let d = deployment(&svc(), Track::Primary, None).unwrap();
    let r = engine_container(&d).resources.clone().unwrap();
    let req = r.requests.unwrap();
    assert_eq!(req["cpu"], Quantity("4".into()));
    assert_eq!(req["memory"], Quantity("16Gi".into()));
    assert_eq!(req["nvidia.com/gpu"], Quantity("6".into()));
    assert_eq!(Some(req), r.limits);
}

#[test]
fn gpu_resource_name_follows_the_accelerator() {
    for (accel, name) in [
        (AcceleratorType::Amd, Some("amd.com/gpu")),
        (AcceleratorType::IntelGaudi, Some("habana.ai/gaudi")),
        (AcceleratorType::GoogleTpu, Some("google.com/tpu")),
        (AcceleratorType::None, None),
    ] {
        let mut s = svc();
        s.spec.accelerator = Some(AcceleratorSpec {
            r#type: Some(accel),
            class: None,
        });
        let limits = resources(&s, None).unwrap().limits.unwrap();
        let gpu_keys: Vec<_> = limits
            .keys()
            .filter(|k| *k != "cpu" && *k != "memory")
            .cloned()
            .collect();
        match name {
            Some(n) => assert_eq!(gpu_keys, vec![n.to_owned()], "{accel}"),
            None => assert!(gpu_keys.is_empty(), "{accel}"),
        }
    }
    let mut s = svc();
    s.spec.resources = None;
    s.spec.accelerator = None;
    assert!(resources(&s, None).is_none());
}

#[test]
fn gpu_memory_becomes_a_sanitised_pod_label() {
    let mut s = svc();
    s.spec.resources.as_mut().unwrap().gpu_memory = Some(Quantity("1.5Gi".into()));
    let d = deployment(&s, Track::Primary, None).unwrap();
    let l = d.spec.unwrap().template.metadata.unwrap().labels.unwrap();
    assert_eq!(l[LABEL_GPU_MEMORY], "1.5Gi");
    assert_eq!(l[LABEL_TRACK], "primary");
    assert_eq!(sanitize_label_value("+24Gi "), "24Gi");
    assert_eq!(sanitize_label_value(&"9".repeat(80)).len(), 63);
}

#[test]
fn probes_come_from_health_check() {
    let d = deployment(&svc(), Track::Primary, None).unwrap();
    let c = engine_container(&d);
    for p in [c.liveness_probe.as_ref(), c.readiness_probe.as_ref()] {
        let p = p.unwrap();
        let get = p.http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some("/health"));
        assert_eq!(get.port, IntOrString::String("http".into()));
        assert_eq!(p.period_seconds, Some(15));
        // 1500ms rounds up to whole seconds.
        assert_eq!(p.timeout_seconds, Some(2));
    }
    let startup = c.startup_probe.as_ref().unwrap();
    assert_eq!(startup.failure_threshold, Some(STARTUP_GRACE_SECONDS / 15));
}

#[test]
fn bad_health_check_duration_is_an_error_not_a_panic() {
    let mut s = svc();
    s.spec.health_check.as_mut().unwrap().interval = Some("soon".into());
    assert!(matches!(
        deployment(&s, Track::Primary, None),
        Err(BuildError::Duration {
            field: "spec.healthCheck.interval",
            ..
        })
    ));
}

#[test]
fn replicas_are_set_unless_autoscaled() {
    let mut s = svc();
    let d = deployment(&s, Track::Primary, None).unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(2));
    s.spec.replicas = Some(0);
    let d = deployment(&s, Track::Primary, None).unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(0), "0 is honoured");
    s.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 2,
        max_replicas: 5,
        target_cpu_utilization_percent: Some(70),
    });
    let d = deployment(&s, Track::Primary, None).unwrap();
    assert_eq!(d.spec.unwrap().replicas, None);
    let json = serde_json::to_value(deployment(&s, Track::Primary, None).unwrap()).unwrap();
    assert!(json["spec"].get("replicas").is_none());
}

#[test]
fn hpa_targets_the_primary_with_bounds_and_cpu_target() {
    let mut s = svc();
    assert!(hpa(&s, false).unwrap().is_none());
    s.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 2,
        max_replicas: 5,
        target_cpu_utilization_percent: Some(70),
    });
    let h = hpa(&s, false).unwrap().unwrap();
    let spec = h.spec;
    assert_eq!(spec.scale_target_ref.kind, "Deployment");
    assert_eq!(
        spec.scale_target_ref.api_version.as_deref(),
        Some("apps/v1")
    );
    assert_eq!(spec.scale_target_ref.name, "chat");
    assert_eq!(spec.min_replicas, Some(2));
    assert_eq!(spec.max_replicas, 5);
    let m = &spec.metrics.unwrap()[0];
    assert_eq!(m.type_, "Resource");
    let r = m.resource.as_ref().unwrap();
    assert_eq!(r.name, "cpu");
    assert_eq!(r.target.type_, "Utilization");
    assert_eq!(r.target.average_utilization, Some(70));
    // The canary keeps explicit replicas even when the primary is autoscaled.
    let s = with_canary(s, 20, None);
    let d = deployment(&s, Track::Canary, None).unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(1));
}

#[test]
fn canary_uses_its_model_image_and_replica_rule() {
    let mut s = with_canary(svc(), 30, None);
    s.spec.replicas = Some(5);
    let d = deployment(&s, Track::Canary, None).unwrap();
    let spec = d.spec.as_ref().unwrap();
    // ceil(5 * 30 / 100) = 2
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(
        spec.selector.match_labels.as_ref().unwrap()[LABEL_TRACK],
        "canary"
    );
    let c = engine_container(&d);
    assert_eq!(c.image.as_deref(), Some("registry.example.com/vllm:0.9"));
    assert_eq!(
        &c.args.as_ref().unwrap()[..4],
        &[
            "--model",
            "llama3-8b-q5",
            "--served-model-name",
            "llama3-8b-q5"
        ]
    );
    s.spec.canary.as_mut().unwrap().engine_image = Some("registry.example.com/vllm:1.0".into());
    s.spec.canary.as_mut().unwrap().replicas = Some(3);
    let d = deployment(&s, Track::Canary, None).unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(
        engine_container(&d).image.as_deref(),
        Some("registry.example.com/vllm:1.0")
    );
    assert_eq!(
        deployment(&svc(), Track::Canary, None).unwrap_err(),
        BuildError::NoCanary
    );
}

#[test]
fn missing_engine_image_is_an_error() {
    let mut s = svc();
    s.spec.engine.as_mut().unwrap().image = None;
    assert_eq!(
        deployment(&s, Track::Primary, None).unwrap_err(),
        BuildError::MissingEngineImage
    );
}

#[test]
fn services_select_their_track_on_the_engine_port() {
    let s = with_canary(svc(), 10, None);
    for track in [Track::Primary, Track::Canary] {
        let svc_obj = service(&s, track).unwrap();
        let spec = svc_obj.spec.unwrap();
        assert_eq!(spec.selector.unwrap(), selector_labels(&s, track));
        let p = &spec.ports.unwrap()[0];
        assert_eq!(p.port, 8000);
        assert_eq!(p.target_port, Some(IntOrString::String("http".into())));
        // The Deployment's pods carry the Service's selector.
        let d = deployment(&s, track, None).unwrap();
        let pod_labels = d.spec.unwrap().template.metadata.unwrap().labels.unwrap();
        for (k, v) in selector_labels(&s, track) {
            assert_eq!(pod_labels[&k], v);
        }
    }
}

#[test]
fn route_has_prefix_rewrite_timeout_parent_and_weights() {
    let s = with_canary(svc(), 10, None);
    let r = http_route(&s, 10).unwrap().unwrap();
    assert_eq!(r.metadata.name.as_deref(), Some("chat"));
    let p = &r.spec.parent_refs[0];
    assert_eq!(p.name, "inference-gw");
    assert_eq!(p.namespace.as_deref(), Some("gateways"));
    assert_eq!(p.kind.as_deref(), Some("Gateway"));
    assert_eq!(p.group.as_deref(), Some(GATEWAY_GROUP));
    let rule = &r.spec.rules[0];
    let m = rule.matches[0].path.as_ref().unwrap();
    assert_eq!(m.r#type.as_deref(), Some("PathPrefix"));
    assert_eq!(m.value.as_deref(), Some("/team-a/chat"));
    let rw = rule.filters[0]
        .url_rewrite
        .as_ref()
        .unwrap()
        .path
        .as_ref()
        .unwrap();
    assert_eq!(rule.filters[0].r#type, "URLRewrite");
    assert_eq!(rw.r#type, "ReplacePrefixMatch");
    assert_eq!(rw.replace_prefix_match.as_deref(), Some("/"));
    assert_eq!(
        rule.timeouts.as_ref().unwrap().request.as_deref(),
        Some("90s")
    );
    let backends: Vec<_> = rule
        .backend_refs
        .iter()
        .map(|b| (b.name.as_str(), b.weight, b.port))
        .collect();
    assert_eq!(
        backends,
        vec![
            ("chat", Some(90), Some(8000)),
            ("chat-canary", Some(10), Some(8000))
        ]
    );
    // Nothing routed to the canary yet: primary only, full weight.
    let r = http_route(&s, 0).unwrap().unwrap();
    let backends: Vec<_> = r.spec.rules[0]
        .backend_refs
        .iter()
        .map(|b| (b.name.as_str(), b.weight))
        .collect();
    assert_eq!(backends, vec![("chat", Some(100))]);
}

#[test]
fn route_gateway_namespace_defaults_to_the_service_namespace() {
    let mut s = svc();
    s.spec
        .routing
        .as_mut()
        .unwrap()
        .gateway
        .as_mut()
        .unwrap()
        .namespace = None;
    let r = http_route(&s, 0).unwrap().unwrap();
    assert_eq!(r.spec.parent_refs[0].namespace.as_deref(), Some("team-a"));
    s.spec.routing.as_mut().unwrap().gateway = None;
    assert!(http_route(&s, 0).unwrap().is_none());
}

#[test]
fn canary_weight_is_routed_only_once_a_canary_replica_is_ready() {
    let s = with_canary(svc(), 25, None);
    assert_eq!(routed_canary_weight(&s, 0), 0);
    assert_eq!(routed_canary_weight(&s, 1), 25);
    assert_eq!(routed_canary_weight(&svc(), 3), 0);
}

#[test]
fn a_route_names_a_backend_by_service_or_pool_at_any_weight() {
    let s = with_canary(svc(), 10, None);
    let mut r = http_route(&s, 10).unwrap().unwrap();
    assert!(names_backend(&r, "team-a", "chat-canary"));
    assert!(!names_backend(&r, "team-b", "chat-canary"));
    r.spec.rules[0].backend_refs[1].weight = Some(0);
    assert!(names_backend(&r, "team-a", "chat-canary"));
    r.spec.rules[0].backend_refs[1].kind = Some("InferencePool".into());
    r.spec.rules[0].backend_refs[1].group = Some(inferencepool::GROUP.into());
    assert!(names_backend(&r, "team-a", "chat-canary"));
    r.spec.rules[0].backend_refs[1].kind = Some("ConfigMap".into());
    assert!(!names_backend(&r, "team-a", "chat-canary"));
    assert!(!names_backend(
        &http_route(&s, 0).unwrap().unwrap(),
        "team-a",
        "chat-canary"
    ));
}

#[test]
fn pod_monitor_scrapes_both_engine_tracks_at_the_metrics_endpoint() {
    use crate::api::MetricsSpec;
    use podmonitor::pod_monitor;
    let mut s = with_canary(svc(), 10, None);
    // Undefaulted metrics: the engine port, /metrics, 30s.
    let m = pod_monitor(&s).unwrap();
    assert_eq!(m.metadata.name.as_deref(), Some("chat"));
    assert_eq!(m.metadata.labels, Some(labels(&s, Track::Primary)));
    assert_eq!(
        m.metadata.owner_references,
        Some(vec![owner_reference(&s).unwrap()])
    );
    let ep = &m.spec.pod_metrics_endpoints;
    assert_eq!(ep.len(), 1);
    assert_eq!(ep[0].port_number, Some(8000));
    assert_eq!(ep[0].path.as_deref(), Some("/metrics"));
    assert_eq!(ep[0].interval.as_deref(), Some("30s"));
    assert_eq!(m.spec.pod_target_labels, [LABEL_TRACK]);

    // The selector takes the pods of both tracks' Deployments, nothing else
    // of the service (an endpoint picker's pods carry no track label).
    let matches = |pod: &BTreeMap<String, String>| {
        let sel = &m.spec.selector;
        sel.match_labels
            .iter()
            .flatten()
            .all(|(k, v)| pod.get(k) == Some(v))
            && sel.match_expressions.iter().flatten().all(|e| {
                e.operator == "In"
                    && pod
                        .get(&e.key)
                        .is_some_and(|v| e.values.iter().flatten().any(|x| x == v))
            })
    };
    for track in [Track::Primary, Track::Canary] {
        let d = deployment(&s, track, None).unwrap();
        let pod = d.spec.unwrap().template.metadata.unwrap().labels.unwrap();
        assert!(matches(&pod), "{track:?} pods are scraped");
    }
    let mut epp = labels(&s, Track::Primary);
    epp.remove(LABEL_TRACK);
    assert!(!matches(&epp), "pods without a track are not scraped");
    let mut other = labels(&s, Track::Primary);
    other.insert(LABEL_SERVICE.into(), "other".into());
    assert!(!matches(&other), "another service's pods are not scraped");

    // spec.metrics is taken as set; the interval in canonical form.
    s.spec.metrics = Some(MetricsSpec {
        port: Some(9090),
        path: Some("/stats".into()),
        interval: Some("90s".into()),
    });
    let m = pod_monitor(&s).unwrap();
    let ep = &m.spec.pod_metrics_endpoints[0];
    assert_eq!(
        (ep.port_number, ep.path.as_deref(), ep.interval.as_deref()),
        (Some(9090), Some("/stats"), Some("1m30s"))
    );
    s.spec.metrics.as_mut().unwrap().interval = Some("soon".into());
    assert!(matches!(
        pod_monitor(&s),
        Err(BuildError::Duration {
            field: "spec.metrics.interval",
            ..
        })
    ));
}

/// The endpoint picker section of a service made [`with_pools`].
fn picker_of(s: &mut InferenceService) -> &mut crate::api::EndpointPickerSpec {
    s.spec
        .routing
        .as_mut()
        .and_then(|r| r.endpoint_picker.as_mut())
        .expect("a service with pools has an endpoint picker section")
}

fn with_pools(mut s: InferenceService, mode: crate::api::EndpointPickerMode) -> InferenceService {
    use crate::api::{BackendKind, EndpointPickerSpec, FailureMode};
    let r = s.spec.routing.as_mut().unwrap();
    r.backend_kind = Some(BackendKind::InferencePool);
    r.endpoint_picker = Some(EndpointPickerSpec {
        mode: Some(mode),
        image: Some("registry.example.com/epp:v1".into()),
        replicas: Some(1),
        failure_mode: Some(FailureMode::FailOpen),
        config: Some("plugins: []\n".into()),
        resources: None,
    });
    s
}

#[test]
fn a_pool_per_track_selects_that_tracks_pods_and_names_its_picker() {
    use crate::api::{EndpointPickerMode, FailureMode};
    use inferencepool::inference_pool;
    let s = with_pools(with_canary(svc(), 10, None), EndpointPickerMode::Owned);
    for (track, name) in [(Track::Primary, "chat"), (Track::Canary, "chat-canary")] {
        let pool = inference_pool(&s, track).unwrap();
        assert_eq!(pool.metadata.name.as_deref(), Some(name));
        assert_eq!(pool.metadata.labels, Some(labels(&s, track)));
        assert_eq!(pool.spec.selector.match_labels, selector_labels(&s, track));
        assert_eq!(pool.spec.target_ports.len(), 1);
        assert_eq!(pool.spec.target_ports[0].number, 8000);
        let r = pool.spec.endpoint_picker_ref.unwrap();
        assert_eq!(r.name, format!("{name}-epp"));
        assert_eq!(r.port.number, 9002);
        assert_eq!(r.failure_mode, Some(FailureMode::FailOpen));
    }
    // mode None: pools without a picker, for gateways that pick themselves.
    let s = with_pools(svc(), EndpointPickerMode::None);
    assert_eq!(
        inference_pool(&s, Track::Primary)
            .unwrap()
            .spec
            .endpoint_picker_ref,
        None
    );
    assert_eq!(inference_pool(&s, Track::Canary), Err(BuildError::NoCanary));
}

#[test]
fn the_endpoint_picker_reads_only_what_it_needs_and_is_never_in_a_pool() {
    use crate::api::EndpointPickerMode;
    use endpoint_picker::{COMPONENT, LABEL_COMPONENT, endpoint_picker};
    let mut s = with_pools(with_canary(svc(), 10, None), EndpointPickerMode::Owned);
    let epp = endpoint_picker(&s, Track::Canary).unwrap();
    for meta in [
        &epp.service_account.metadata,
        &epp.role.metadata,
        &epp.role_binding.metadata,
        &epp.config_map.metadata,
        &epp.deployment.metadata,
        &epp.service.metadata,
    ] {
        assert_eq!(meta.name.as_deref(), Some("chat-canary-epp"));
        assert_eq!(
            meta.owner_references,
            Some(vec![owner_reference(&s).unwrap()])
        );
    }
    // Its pods: the component label, no track, so no pool selects them.
    let d = epp.deployment.spec.clone().unwrap();
    let pod = d.template.metadata.unwrap().labels.unwrap();
    assert_eq!(
        pod.get(LABEL_COMPONENT).map(String::as_str),
        Some(COMPONENT)
    );
    assert!(!pod.contains_key(LABEL_TRACK), "{pod:?}");
    let pool = inferencepool::inference_pool(&s, Track::Canary).unwrap();
    assert!(
        !pool
            .spec
            .selector
            .match_labels
            .iter()
            .all(|(k, v)| pod.get(k) == Some(v)),
        "the pool does not select its picker"
    );
    let pod_spec = d.template.spec.unwrap();
    assert_eq!(
        pod_spec.service_account_name.as_deref(),
        Some("chat-canary-epp")
    );
    let c = &pod_spec.containers[0];
    assert_eq!(c.image.as_deref(), Some("registry.example.com/epp:v1"));
    assert_eq!(
        c.args.clone().unwrap(),
        [
            "--pool-name=chat-canary",
            "--pool-namespace=team-a",
            "--pool-group=inference.networking.k8s.io",
            "--config-file=/config/config.yaml",
        ]
    );
    let ports: Vec<i32> = epp
        .service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [9002, 9003, 9090]);
    assert_eq!(epp.config_map.data.unwrap()["config.yaml"], "plugins: []\n");
    // The Role: pods, its own pool, llm-d's objectives; no Secrets; no
    // leases for one replica.
    let rules = epp.role.rules.unwrap();
    let resources: Vec<String> = rules
        .iter()
        .flat_map(|r| r.resources.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        resources,
        [
            "pods",
            "inferencepools",
            "inferenceobjectives",
            "inferencemodelrewrites"
        ]
    );
    assert_eq!(
        rules[1].resource_names.as_deref(),
        Some(&["chat-canary".to_owned()][..])
    );
    assert!(rules.iter().all(|r| {
        r.verbs
            .iter()
            .all(|v| ["get", "list", "watch"].contains(&v.as_str()))
    }));
    // Leader election only with more than one replica.
    picker_of(&mut s).replicas = Some(2);
    let rules = endpoint_picker(&s, Track::Primary)
        .unwrap()
        .role
        .rules
        .unwrap();
    assert!(
        rules
            .iter()
            .any(|r| r.resources.as_deref() == Some(&["leases".to_owned()][..]))
    );
    // No image: an error, not a picker without one.
    picker_of(&mut s).image = None;
    assert_eq!(
        endpoint_picker(&s, Track::Primary),
        Err(BuildError::MissingEndpointPickerImage)
    );
}

#[test]
fn the_route_points_at_the_pools_and_leaves_an_unready_canary_out() {
    use crate::api::EndpointPickerMode;
    let s = with_pools(with_canary(svc(), 20, None), EndpointPickerMode::Owned);
    let refs = |routed| {
        http_route(&s, routed).unwrap().unwrap().spec.rules[0]
            .backend_refs
            .iter()
            .map(|b| {
                (
                    b.group.clone().unwrap_or_default(),
                    b.kind.clone().unwrap_or_default(),
                    b.name.clone(),
                    b.port,
                    b.weight,
                )
            })
            .collect::<Vec<_>>()
    };
    let pool = |name: &str, weight| {
        (
            "inference.networking.k8s.io".to_owned(),
            "InferencePool".to_owned(),
            name.to_owned(),
            None,
            Some(weight),
        )
    };
    assert_eq!(refs(0), [pool("chat", 100)]);
    assert_eq!(refs(20), [pool("chat", 80), pool("chat-canary", 20)]);
}
