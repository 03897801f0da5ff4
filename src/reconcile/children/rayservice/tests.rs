use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::*;
use crate::api::v1beta1::Backend;
use crate::api::v1beta1::InferenceService;
use crate::api::v1beta1::{
    AcceleratorSpec, AutoscalingSpec, EngineSpec, EnvVar as SpecEnv, GraphSpec,
    InferenceServiceSpec, ModelSpec, ParallelismSpec,
};
use crate::api::{AcceleratorType, ResourcesSpec};
use crate::graph::proto::{ActorOptions, Node, ServingGraph};
use crate::graph::serve_config;
use crate::reconcile::children as builders;
use crate::reconcile::children::error::BuildError;

fn svc() -> InferenceService {
    let mut s = InferenceService::new(
        "rag",
        InferenceServiceSpec {
            model: ModelSpec {
                r#ref: "llama3-70b".into(),
                image: None,
                ..Default::default()
            },
            engine: Some(EngineSpec {
                image: Some("registry.example.com/ray-vllm:2.40".into()),
                env: vec![SpecEnv {
                    name: "HF_HOME".into(),
                    value: Some("/cache".into()),
                    value_from: None,
                }],
                ..EngineSpec::default()
            }),
            backend: Some(Backend::RayService),
            replicas: Some(2),
            accelerator: Some(AcceleratorSpec {
                r#type: Some(AcceleratorType::Nvidia),
                class: None,
            }),
            parallelism: Some(ParallelismSpec {
                tensor: Some(4),
                pipeline: Some(2),
            }),
            resources: Some(ResourcesSpec {
                cpu: Some(Quantity("16".into())),
                memory: Some(Quantity("128Gi".into())),
                gpu_memory: Some(Quantity("80Gi".into())),
            }),
            graph: Some(GraphSpec {
                url: "https://graphs.example.com/rag".into(),
                bearer_token_secret_ref: None,
            }),
            ..InferenceServiceSpec::default()
        },
    );
    s.metadata.namespace = Some("team-a".into());
    s.metadata.uid = Some("0b6f2a4e-1c1d-4b8e-9d47-3f7c5e9a1b22".into());
    s
}

fn graph() -> ServingGraph {
    ServingGraph {
        name: String::new(),
        ingress: "router".into(),
        nodes: vec![
            Node {
                name: "router".into(),
                import_path: "rag.app:app".into(),
                dependencies: vec!["llm".into()],
                ..Node::default()
            },
            Node {
                name: "llm".into(),
                import_path: "rag.llm:LLM".into(),
                num_replicas: Some(2),
                actor_options: Some(ActorOptions {
                    num_gpus: Some(8.0),
                    ..ActorOptions::default()
                }),
                ..Node::default()
            },
        ],
    }
}

fn worker(rs: &RayService) -> &Container {
    &rs.spec.ray_cluster_config.worker_group_specs[0]
        .template
        .spec
        .as_ref()
        .expect("pod spec")
        .containers[0]
}

#[test]
fn serve_config_comes_from_the_graph_with_the_route_path() {
    let rs = desired_rayservice(&svc(), &graph(), "/team-a/rag", None).expect("builds");
    let config: serve_config::ServeConfig =
        serde_saphyr::from_str(&rs.spec.serve_config_v2).expect("yaml");
    let app = &config.applications[0];
    assert_eq!(app.name, "rag");
    assert_eq!(app.route_prefix, "/team-a/rag");
    assert_eq!(app.import_path, "rag.app:app");
    assert_eq!(app.deployments.len(), 2);
}

#[test]
fn metadata_is_owned_and_labelled() {
    let rs = desired_rayservice(&svc(), &graph(), "/team-a/rag", None).expect("builds");
    assert_eq!(rs.metadata.name.as_deref(), Some("rag"));
    assert_eq!(rs.metadata.namespace.as_deref(), Some("team-a"));
    let owner = &rs.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.kind, "InferenceService");
    assert_eq!(owner.controller, Some(true));
    let labels = rs.metadata.labels.as_ref().expect("labels");
    assert_eq!(labels[builders::LABEL_MANAGED_BY], "infergate");
    assert_eq!(labels[builders::LABEL_TRACK], "primary");
    let json = serde_json::to_value(&rs).expect("json");
    assert_eq!(json["apiVersion"], API_VERSION);
    assert_eq!(json["kind"], "RayService");
    assert!(json["spec"]["serveConfigV2"].is_string());
    assert!(json["spec"]["rayClusterConfig"]["headGroupSpec"]["template"].is_object());
}

#[test]
fn head_and_worker_pods_carry_the_labels_the_pod_watch_selects() {
    let rs = desired_rayservice(&svc(), &graph(), "/r", None).expect("builds");
    let cluster = &rs.spec.ray_cluster_config;
    let templates = [
        ("head", &cluster.head_group_spec.template),
        ("worker", &cluster.worker_group_specs[0].template),
    ];
    for (group, template) in templates {
        let labels = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or_else(|| panic!("{group} template has no labels"));
        // Every key the pod watch's selector names, with the service's values.
        for term in crate::reconcile::pods::watch::selector().split(',') {
            match term.strip_prefix('!') {
                Some(absent) => assert!(!labels.contains_key(absent), "{group} pods have {absent}"),
                None => {
                    let key = term.split('=').next().unwrap_or(term);
                    assert!(labels.contains_key(key), "{group} pods lack {key}");
                }
            }
        }
        assert_eq!(labels[builders::LABEL_SERVICE], "rag", "{group}");
        assert_eq!(labels[builders::LABEL_TRACK], "primary", "{group}");
        assert_eq!(labels[builders::LABEL_MANAGED_BY], "infergate", "{group}");
    }
}

#[test]
fn workers_run_the_engine_image_with_gpus_by_accelerator() {
    let rs = desired_rayservice(&svc(), &graph(), "/r", None).expect("builds");
    let group = &rs.spec.ray_cluster_config.worker_group_specs[0];
    assert_eq!(group.ray_start_params["num-gpus"], "8");
    let c = worker(&rs);
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.com/ray-vllm:2.40")
    );
    let limits = c
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .expect("limits");
    assert_eq!(limits["nvidia.com/gpu"], Quantity("8".into()));
    assert_eq!(limits["cpu"], Quantity("16".into()));
    let env = c.env.as_ref().expect("env");
    assert!(
        env.iter()
            .any(|e| e.name == ENV_MODEL_REF && e.value.as_deref() == Some("llama3-70b"))
    );
    assert!(env.iter().any(|e| e.name == "HF_HOME"));
    let pod_labels = group
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref());
    assert_eq!(
        pod_labels.expect("labels")[builders::LABEL_GPU_MEMORY],
        "80Gi"
    );

    let head = &rs.spec.ray_cluster_config.head_group_spec;
    let hc = &head.template.spec.as_ref().expect("pod").containers[0];
    assert_eq!(hc.image, c.image, "head runs the engine image");
    let head_limits = hc
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .expect("limits");
    assert!(
        !head_limits.contains_key("nvidia.com/gpu"),
        "no GPU on the head"
    );
    assert!(
        hc.ports
            .as_ref()
            .expect("ports")
            .iter()
            .any(|p| p.container_port == SERVE_PORT)
    );

    let mut amd = svc();
    amd.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::Amd),
        class: None,
    });
    let rs = desired_rayservice(&amd, &graph(), "/r", None).expect("builds");
    let limits = worker(&rs)
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .expect("l");
    assert_eq!(limits["amd.com/gpu"], Quantity("8".into()));

    let mut tpu = svc();
    tpu.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::GoogleTpu),
        class: None,
    });
    let rs = desired_rayservice(&tpu, &graph(), "/r", None).expect("builds");
    let group = &rs.spec.ray_cluster_config.worker_group_specs[0];
    assert!(!group.ray_start_params.contains_key("num-gpus"));
    let limits = worker(&rs)
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .expect("l");
    assert_eq!(limits["google.com/tpu"], Quantity("8".into()));

    let mut cpu_only = svc();
    cpu_only.spec.accelerator = None;
    // A GPU deployment on CPU-only workers could never be placed.
    let e = desired_rayservice(&cpu_only, &graph(), "/r", None).unwrap_err();
    assert_eq!(e.reason(), "Unschedulable");
    assert!(
        e.to_string().contains("deployment \"llm\" asks num_gpus 8"),
        "{e}"
    );
    let mut cpu_graph = graph();
    cpu_graph.nodes[1].actor_options = None;
    let rs = desired_rayservice(&cpu_only, &cpu_graph, "/r", None).expect("builds");
    let limits = worker(&rs)
        .resources
        .as_ref()
        .and_then(|r| r.limits.clone())
        .expect("l");
    assert!(limits.keys().all(|k| k == "cpu" || k == "memory"));
}

#[test]
fn worker_replicas_follow_replicas_or_autoscaling() {
    let rs = desired_rayservice(&svc(), &graph(), "/r", None).expect("builds");
    let g = &rs.spec.ray_cluster_config.worker_group_specs[0];
    assert_eq!(
        (g.replicas, g.min_replicas, g.max_replicas),
        (Some(2), Some(2), Some(2))
    );
    assert_eq!(rs.spec.ray_cluster_config.enable_in_tree_autoscaling, None);

    let mut zero = svc();
    zero.spec.replicas = Some(0);
    let rs = desired_rayservice(&zero, &graph(), "/r", None).expect("builds");
    assert_eq!(
        rs.spec.ray_cluster_config.worker_group_specs[0].replicas,
        Some(0)
    );

    let mut auto = svc();
    auto.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 1,
        max_replicas: 6,
        target_cpu_utilization_percent: None,
    });
    let rs = desired_rayservice(&auto, &graph(), "/r", None).expect("builds");
    let g = &rs.spec.ray_cluster_config.worker_group_specs[0];
    assert_eq!(
        (g.replicas, g.min_replicas, g.max_replicas),
        (Some(1), Some(1), Some(6))
    );
    assert_eq!(
        rs.spec.ray_cluster_config.enable_in_tree_autoscaling,
        Some(true)
    );
}

#[test]
fn model_image_is_mounted_on_workers() {
    let mut s = svc();
    s.spec.model.image = Some("registry.example.com/models/llama3:70b".into());
    let rs = desired_rayservice(&s, &graph(), "/r", None).expect("builds");
    let pod = rs.spec.ray_cluster_config.worker_group_specs[0]
        .template
        .spec
        .as_ref()
        .expect("pod");
    let vol = &pod.volumes.as_ref().expect("volumes")[0];
    assert_eq!(
        vol.image.as_ref().and_then(|i| i.reference.as_deref()),
        Some("registry.example.com/models/llama3:70b")
    );
    let c = &pod.containers[0];
    assert_eq!(
        c.volume_mounts.as_ref().expect("mounts")[0].mount_path,
        builders::MODEL_MOUNT_PATH
    );
    assert!(
        c.env
            .as_ref()
            .expect("env")
            .iter()
            .any(|e| e.name == ENV_MODEL_PATH)
    );
}

#[test]
fn invalid_graph_or_service_is_an_error_with_a_reason() {
    let mut g = graph();
    g.nodes[1].dependencies.push("router".into());
    let e = desired_rayservice(&svc(), &g, "/r", None).unwrap_err();
    assert_eq!(e.reason(), "InvalidGraph");
    let e = desired_rayservice(&svc(), &graph(), "/r/", None).unwrap_err();
    assert_eq!(e.reason(), "InvalidGraph", "route prefix rules apply");

    let mut no_image = svc();
    no_image.spec.engine = None;
    let e = desired_rayservice(&no_image, &graph(), "/r", None).unwrap_err();
    assert_eq!(e, RayServiceError::Build(BuildError::MissingEngineImage));
    let mut no_uid = svc();
    no_uid.metadata.uid = None;
    let e = desired_rayservice(&no_uid, &graph(), "/r", None).unwrap_err();
    assert_eq!(e, RayServiceError::Build(BuildError::NoOwner));
}

#[test]
fn oversized_serve_config_is_refused() {
    let mut g = graph();
    g.nodes[1].user_config_json =
        serde_json::json!({ "blob": "x".repeat(MAX_SERVE_CONFIG_BYTES) }).to_string();
    let e = desired_rayservice(&svc(), &g, "/r", None).unwrap_err();
    assert_eq!(e.reason(), "InvalidGraph");
    assert!(e.to_string().contains("the limit is 1048576"), "{e}");
}

fn with_status(status: RayServiceStatus) -> RayService {
    let mut rs = RayService::new("rag", RayServiceSpec::default());
    rs.status = Some(status);
    rs
}

fn ready_condition(status: &str, message: &str) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: "x".into(),
        message: message.into(),
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

#[test]
fn observe_reads_conditions_then_service_status() {
    let rs = RayService::new("rag", RayServiceSpec::default());
    assert_eq!(observe(&rs).reason, "RayServicePending");

    let ready = with_status(RayServiceStatus {
        conditions: vec![ready_condition("True", "")],
        ..RayServiceStatus::default()
    });
    assert!(observe(&ready).ready);

    let failing = with_status(RayServiceStatus {
        conditions: vec![ready_condition("False", "not ready")],
        active_service_status: Some(RayServiceClusterStatus {
            application_statuses: BTreeMap::from([(
                "rag".to_owned(),
                AppStatus {
                    status: Some("DEPLOY_FAILED".into()),
                    message: Some("ModuleNotFoundError: rag".into()),
                },
            )]),
            ray_cluster_name: None,
        }),
        ..RayServiceStatus::default()
    });
    let o = observe(&failing);
    assert!(!o.ready);
    assert_eq!(o.reason, "RayServiceNotReady");
    assert!(
        o.message
            .contains("application rag is DEPLOY_FAILED: ModuleNotFoundError: rag"),
        "{}",
        o.message
    );

    let running = with_status(RayServiceStatus {
        service_status: Some("Running".into()),
        ..RayServiceStatus::default()
    });
    assert!(observe(&running).ready);
}

#[test]
fn crd_identity_matches_kuberay() {
    use kube::CustomResourceExt;
    let crd = RayService::crd();
    assert_eq!(crd.metadata.name.as_deref(), Some("rayservices.ray.io"));
    assert_eq!(crd.spec.scope, "Namespaced");
    let yaml = serde_saphyr::to_string(&crd).expect("yaml");
    assert!(yaml.contains("x-kubernetes-preserve-unknown-fields: true"));
}
