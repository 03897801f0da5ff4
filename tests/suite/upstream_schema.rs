//! Every field infergate writes into an HTTPRoute, a RayService or a
//! PodMonitor exists in the published schema (Gateway API standard channel,
//! KubeRay and the Prometheus Operator, fetched from their Go modules at the
//! pinned versions): infergate's own types model
//! only what it sets, so a field upstream does not have (a misspelling, a
//! field from another channel or version) fails here, not on a cluster.
//!
//! The objects are built from services that exercise every optional part
//! (canary, gateway, timeouts; model image volume, env from values and
//! Secrets, GPUs of an AcceleratorClass with every constraint, placement,
//! ServiceAccount, pull secrets, `/dev/shm`, autoscaling).

use crate::support;
use serde_json::Value;

use infergate::api::v1beta1::{
    AcceleratorSpec, AcceleratorType, AutoscalingSpec, Backend, CanarySpec, EngineSpec, EnvVar,
    GatewayRef, GraphSpec, InferenceService, InferenceServiceSpec, LocalObjectReference, ModelSpec,
    ParallelismSpec, ResourcesSpec, RoutingSpec,
};
use infergate::api::{AcceleratorClassSpec, MetricsSpec};
use infergate::reconcile::children::{Track, http_route, inferencepool, podmonitor, rayservice};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The `openAPIV3Schema` of `version` in the CRD file at `path`.
fn schema(path: &str, version: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let crd: Value = serde_saphyr::from_str(&text).expect("CRD YAML");
    crd["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("{path} has no version {version}"))["schema"]["openAPIV3Schema"]
        .clone()
}

/// Every path of `value` that `schema` does not declare.
fn undeclared(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true && schema.get("properties").is_none()
    {
        return;
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, v) in map {
                let child = props
                    .and_then(|p| p.get(k))
                    .or_else(|| additional.filter(|a| a.is_object()));
                match child {
                    Some(s) => undeclared(v, s, &format!("{path}.{k}"), out),
                    None if schema["x-kubernetes-preserve-unknown-fields"] == true => {}
                    None => out.push(format!("{path}.{k}")),
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    undeclared(v, s, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn check(object: &impl serde::Serialize, crd_path: &str, what: &str) {
    let mut value = serde_json::to_value(object).expect("JSON");
    // The API server's own metadata schema is not in the CRD.
    value.as_object_mut().expect("object").remove("metadata");
    let mut missing = Vec::new();
    undeclared(&value, &schema(crd_path, "v1"), "", &mut missing);
    assert!(
        missing.is_empty(),
        "{what} sets fields the published schema does not have: {missing:#?}"
    );
}

fn service(backend: Backend) -> InferenceService {
    let mut s = InferenceService::new(
        "chat",
        InferenceServiceSpec {
            model: ModelSpec {
                r#ref: "llama3-8b".into(),
                image: Some("registry.example.com/weights/llama3:8b".into()),
                served_name: Some("llama3-8b".into()),
                adapters: vec![infergate::api::v1beta1::AdapterSpec {
                    name: "sql-lora".into(),
                    source: "/model/adapters/sql".into(),
                }],
                ..Default::default()
            },
            engine: Some(EngineSpec {
                image: Some("registry.example.com/vllm:0.9".into()),
                env: vec![
                    EnvVar {
                        name: "HF_HOME".into(),
                        value: Some("/cache".into()),
                        value_from: None,
                    },
                    serde_json::from_value(serde_json::json!({
                        "name": "HF_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}
                    }))
                    .expect("env"),
                ],
                env_from: vec![
                    serde_json::from_value(
                        serde_json::json!({"configMapRef": {"name": "engine-config"}}),
                    )
                    .expect("envFrom"),
                ],
                shm_size: Some(Quantity("8Gi".into())),
                ..EngineSpec::default()
            }),
            backend: Some(backend),
            replicas: Some(2),
            accelerator: Some(AcceleratorSpec {
                r#type: Some(AcceleratorType::Nvidia),
                class: None,
            }),
            parallelism: Some(ParallelismSpec {
                tensor: Some(8),
                pipeline: Some(1),
            }),
            resources: Some(ResourcesSpec {
                cpu: Some(Quantity("16".into())),
                memory: Some(Quantity("128Gi".into())),
                gpu_memory: Some(Quantity("80Gi".into())),
            }),
            routing: Some(RoutingSpec {
                path_template: Some("/{.metadata.namespace}/{.metadata.name}".into()),
                request_timeout: Some("5m".into()),
                gateway: Some(GatewayRef {
                    name: "inference-gw".into(),
                    namespace: Some("gateways".into()),
                }),
                // A route by path and by name, with hostnames.
                r#match: Some(infergate::api::v1beta1::RouteMatch::Both),
                model_name_header: Some("X-Gateway-Model-Name".into()),
                hostnames: vec!["api.example.com".into()],
                ..RoutingSpec::default()
            }),
            ..InferenceServiceSpec::default()
        },
    );
    s.metadata.namespace = Some("team-a".into());
    s.metadata.uid = Some("6a0c4f1e-2b3d-4c5e-8f70-112233445566".into());
    // Every pod field of the placement section.
    s.spec.placement = Some(
        serde_json::from_value(serde_json::json!({
            "nodeSelector": {"pool": "inference"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "inference",
                             "effect": "NoSchedule"}],
            "priorityClassName": "inference-high",
            "spreadAcross": "zone"
        }))
        .expect("placement"),
    );
    s.spec.service_account_name = Some("chat-engine".into());
    s.spec.image_pull_secrets = vec![LocalObjectReference {
        name: "registry-creds".into(),
    }];
    s
}

#[test]
fn the_httproute_infergate_writes_fits_the_gateway_api_schema() {
    let mut svc = service(Backend::Deployment);
    svc.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "llama3-8b-v2".into(),
            image: None,
            ..Default::default()
        },
        weight: 20,
        ..CanarySpec::default()
    });
    for routed in [0, 20] {
        let route = http_route(&svc, routed)
            .expect("builds")
            .expect("a gateway is set");
        check(&route, support::httproute_crd(), "the HTTPRoute");
    }
}

#[test]
fn inference_pools_and_their_routes_fit_the_published_schemas() {
    use infergate::api::{BackendKind, EndpointPickerMode, EndpointPickerSpec, FailureMode};
    let mut svc = service(Backend::Deployment);
    let routing = svc.spec.routing.as_mut().expect("routing");
    routing.backend_kind = Some(BackendKind::InferencePool);
    for mode in [EndpointPickerMode::Owned, EndpointPickerMode::None] {
        svc.spec.routing.as_mut().expect("routing").endpoint_picker = Some(EndpointPickerSpec {
            mode: Some(mode),
            image: Some("registry.example.com/epp:v1".into()),
            replicas: Some(2),
            failure_mode: Some(FailureMode::FailOpen),
            config: Some("plugins: []\n".into()),
            resources: None,
        });
        // Primary only, then with a canary (routed and not yet routed).
        for canary in [false, true] {
            svc.spec.canary = canary.then(|| CanarySpec {
                model: ModelSpec {
                    r#ref: "llama3-8b-v2".into(),
                    image: None,
                    ..Default::default()
                },
                weight: 20,
                ..CanarySpec::default()
            });
            let tracks: &[Track] = if canary {
                &[Track::Primary, Track::Canary]
            } else {
                &[Track::Primary]
            };
            for track in tracks {
                let pool = inferencepool::inference_pool(&svc, *track).expect("pool");
                assert_eq!(
                    pool.spec.endpoint_picker_ref.is_some(),
                    mode == EndpointPickerMode::Owned
                );
                check(&pool, support::inferencepool_crd(), "the InferencePool");
            }
            for routed in [0, 20] {
                let route = http_route(&svc, routed)
                    .expect("builds")
                    .expect("a gateway is set");
                assert!(
                    route.spec.rules[0]
                        .backend_refs
                        .iter()
                        .all(|b| b.kind.as_deref() == Some("InferencePool")),
                    "{route:?}"
                );
                check(&route, support::httproute_crd(), "the HTTPRoute to pools");
            }
        }
    }
}

#[test]
fn the_podmonitor_infergate_writes_fits_the_prometheus_operator_schema() {
    let mut svc = service(Backend::Deployment);
    svc.spec.metrics = Some(MetricsSpec {
        port: Some(9090),
        path: Some("/metrics".into()),
        interval: Some("15s".into()),
    });
    let monitor = podmonitor::pod_monitor(&svc).expect("builds");
    check(&monitor, support::podmonitor_crd(), "the PodMonitor");
}

#[test]
fn the_rayservice_infergate_writes_fits_the_kuberay_schema() {
    let graph =
        infergate::graph::decode(&support::read_fixture("graph/rag.pb")).expect("graph fixture");
    let mut svc = service(Backend::RayService);
    svc.spec.routing = None;
    svc.spec.graph = Some(GraphSpec {
        url: "https://graphs.example.com/rag".into(),
        bearer_token_secret_ref: None,
    });
    let fixed = rayservice::desired_rayservice(&svc, &graph, "/team-a/chat", Some(&class()))
        .expect("builds");
    check(
        &fixed,
        support::rayservice_crd(),
        "the RayService (fixed replicas)",
    );
    svc.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 1,
        max_replicas: 4,
        target_cpu_utilization_percent: None,
    });
    let scaled = rayservice::desired_rayservice(&svc, &graph, "/team-a/chat", Some(&class()))
        .expect("builds");
    check(
        &scaled,
        support::rayservice_crd(),
        "the RayService (autoscaling)",
    );
}

#[test]
fn the_check_finds_a_field_upstream_does_not_have() {
    let svc = service(Backend::Deployment);
    let route = http_route(&svc, 0).expect("builds").expect("route");
    let mut value = serde_json::to_value(&route).expect("JSON");
    value["spec"]["rules"][0]["backendRefs"][0]["weigth"] = Value::from(1);
    value.as_object_mut().expect("object").remove("metadata");
    let mut missing = Vec::new();
    undeclared(
        &value,
        &schema(support::httproute_crd(), "v1"),
        "",
        &mut missing,
    );
    assert_eq!(missing, [".spec.rules[0].backendRefs[0].weigth"]);

    // Deep inside a RayService's worker pod template too.
    let graph =
        infergate::graph::decode(&support::read_fixture("graph/rag.pb")).expect("graph fixture");
    let mut svc = service(Backend::RayService);
    svc.spec.routing = None;
    let rs = rayservice::desired_rayservice(&svc, &graph, "/r", Some(&class())).expect("builds");
    let mut value = serde_json::to_value(&rs).expect("JSON");
    value["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
        ["resource"] = Value::from("typo");
    value.as_object_mut().expect("object").remove("metadata");
    let mut missing = Vec::new();
    undeclared(
        &value,
        &schema(support::rayservice_crd(), "v1"),
        "",
        &mut missing,
    );
    assert_eq!(
        missing,
        [".spec.rayClusterConfig.workerGroupSpecs[0].template.spec.containers[0].resource"]
    );
}

/// An AcceleratorClass with every scheduling constraint it can carry, on
/// MIG slices (a resource name of its own).
fn class() -> AcceleratorClassSpec {
    let mut class = crate::support::classes::h100();
    class.resource_name = Some("nvidia.com/mig-3g.40gb".into());
    class.memory_per_device = Quantity("40Gi".into());
    class.cost_per_device_hour = None;
    class
}
