//! The KubeRay `ray.io/v1` RayService types infergate sets and reads, and
//! the pure builder [`desired_rayservice`] for `backend: RayService`.
//!
//! Written here rather than taken from a KubeRay crate: only the fields
//! infergate writes or reads are modelled. The end-to-end tests install
//! KubeRay's published CRDs (and run its operator), and
//! `tests/upstream_schema.rs` checks every field written here against them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, ImageVolumeSource, PodSpec, PodTemplateSpec,
    ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{self as builders, BuildError, Track};
use crate::api::AcceleratorType;
use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::graph::GraphError;
use crate::graph::proto::ServingGraph;
use crate::graph::serve_config;

/// The API version infergate writes.
pub const API_VERSION: &str = "ray.io/v1";
/// The resource name discovery lists for RayService.
pub const PLURAL: &str = "rayservices";
/// Name of the head container.
pub const HEAD_CONTAINER: &str = "ray-head";
/// Name of the worker container.
pub const WORKER_CONTAINER: &str = "ray-worker";
/// Name of the single worker group.
pub const WORKER_GROUP: &str = "workers";
/// Port of Ray Serve's HTTP proxy.
pub const SERVE_PORT: i32 = 8000;
/// CPU request and limit of the head pod (GCS, dashboard, Serve controller).
pub const HEAD_CPU: &str = "1";
/// Memory request and limit of the head pod.
pub const HEAD_MEMORY: &str = "4Gi";
/// Largest `serveConfigV2` infergate writes: the RayService must stay well
/// below etcd's 1.5 MiB object limit.
pub const MAX_SERVE_CONFIG_BYTES: usize = 1024 * 1024;
/// Environment variable carrying `spec.model.ref` into the Ray pods.
pub const ENV_MODEL_REF: &str = "INFERGATE_MODEL_REF";
/// Environment variable carrying the model image mount path when `spec.model.image` is set.
pub const ENV_MODEL_PATH: &str = "INFERGATE_MODEL_PATH";

/// Desired state of a KubeRay RayService.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ray.io",
    version = "v1",
    kind = "RayService",
    plural = "rayservices",
    namespaced,
    status = "RayServiceStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceSpec {
    /// The Ray Serve config as a YAML string.
    #[serde(rename = "serveConfigV2")]
    pub serve_config_v2: String,
    /// The Ray cluster the applications run on.
    pub ray_cluster_config: RayClusterSpec,
}

/// A Ray cluster: one head group and worker groups.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterSpec {
    /// Run KubeRay's autoscaler in the head pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_in_tree_autoscaling: Option<bool>,
    /// The head pod.
    pub head_group_spec: HeadGroupSpec,
    /// The worker pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_group_specs: Vec<WorkerGroupSpec>,
}

/// The head group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeadGroupSpec {
    /// Flags of `ray start` on the head.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ray_start_params: BTreeMap<String, String>,
    /// The head pod template.
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: PodTemplateSpec,
}

/// One worker group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupSpec {
    /// Group name.
    pub group_name: String,
    /// Desired workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Fewest workers the autoscaler keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Most workers the autoscaler starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// Flags of `ray start` on the workers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ray_start_params: BTreeMap<String, String>,
    /// The worker pod template.
    #[schemars(schema_with = "preserve_unknown_object")]
    pub template: PodTemplateSpec,
}

/// The observed state KubeRay reports (the part infergate reads).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(schema_with = "preserve_unknown_object")]
pub struct RayServiceStatus {
    /// `Ready` and `UpgradeInProgress` (KubeRay 1.3+).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `Running` once the applications serve (older KubeRay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_status: Option<String>,
    /// The cluster serving traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_service_status: Option<RayServiceClusterStatus>,
    /// The cluster KubeRay is building to replace it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_service_status: Option<RayServiceClusterStatus>,
    /// The generation KubeRay last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Status of one Ray cluster of a RayService.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RayServiceClusterStatus {
    /// Per application: `RUNNING`, `DEPLOYING`, `DEPLOY_FAILED`, `UNHEALTHY`, ...
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub application_statuses: BTreeMap<String, AppStatus>,
    /// Name of the RayCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_name: Option<String>,
}

/// Status of one Ray Serve application.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// Application status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Details (the Python error for a failed deployment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Why a RayService could not be built.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum RayServiceError {
    /// The graph is invalid or cannot be rendered.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The service lacks what every child needs (owner, engine image).
    #[error(transparent)]
    Build(#[from] BuildError),
}

impl RayServiceError {
    /// The condition reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Graph(e) => e.reason(),
            Self::Build(_) => "BuildFailed",
        }
    }
}

/// Worker replicas and bounds: `(replicas, min, max, autoscaling)`.
#[must_use]
pub fn worker_scale(svc: &InferenceService) -> (i32, i32, i32, bool) {
    match svc.spec.autoscaling.as_ref() {
        Some(a) => (a.min_replicas, a.min_replicas, a.max_replicas, true),
        None => {
            let r = svc
                .spec
                .replicas
                .unwrap_or(engine::builtin::DEFAULT_REPLICAS)
                .max(0);
            (r, r, r, false)
        }
    }
}

/// The RayService `S` for a (defaulted) service, its graph and its rendered
/// route path: `serveConfigV2` from the graph, one head and one worker group
/// running the engine image, workers sized like the Deployment backend's
/// replicas (cpu, memory, GPUs by accelerator type) and scaled by
/// `replicas` or `autoscaling`.
pub fn desired_rayservice(
    svc: &InferenceService,
    graph: &ServingGraph,
    route_path: &str,
) -> Result<RayService, RayServiceError> {
    let name = engine::primary_name(svc);
    let config = serve_config::generate(graph, &name, route_path)?;
    crate::graph::placement::check(graph, &crate::graph::placement::Worker::of(svc))
        .map_err(GraphError::Unschedulable)?;
    let serve_config_v2 = serve_config::to_yaml(&config)?;
    if serve_config_v2.len() > MAX_SERVE_CONFIG_BYTES {
        return Err(GraphError::Render(format!(
            "serveConfigV2 is {} bytes; the limit is {MAX_SERVE_CONFIG_BYTES}",
            serve_config_v2.len()
        ))
        .into());
    }
    let image = svc
        .spec
        .engine
        .as_ref()
        .and_then(|e| e.image.clone())
        .filter(|i| !i.is_empty())
        .ok_or(BuildError::MissingEngineImage)?;
    let labels = builders::labels(svc, Track::Primary);
    let meta = ObjectMeta {
        name: Some(name),
        namespace: svc.namespace(),
        labels: Some(labels.clone()),
        owner_references: Some(vec![builders::owner_reference(svc)?]),
        ..ObjectMeta::default()
    };

    let mut env = vec![EnvVar {
        name: ENV_MODEL_REF.to_owned(),
        value: Some(svc.spec.model.r#ref.clone()),
        value_from: None,
    }];
    if svc.spec.model.image.is_some() {
        env.push(EnvVar {
            name: ENV_MODEL_PATH.to_owned(),
            value: Some(builders::MODEL_MOUNT_PATH.to_owned()),
            value_from: None,
        });
    }
    if let Some(e) = svc.spec.engine.as_ref() {
        env.extend(e.env.iter().map(|v| EnvVar {
            name: v.name.clone(),
            value: v.value.clone(),
            value_from: None,
        }));
    }
    let (volumes, mounts) = match svc.spec.model.image.clone() {
        Some(reference) => (
            Some(vec![Volume {
                name: builders::MODEL_VOLUME.to_owned(),
                image: Some(ImageVolumeSource {
                    reference: Some(reference),
                    pull_policy: None,
                }),
                ..Volume::default()
            }]),
            Some(vec![VolumeMount {
                name: builders::MODEL_VOLUME.to_owned(),
                mount_path: builders::MODEL_MOUNT_PATH.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            }]),
        ),
        None => (None, None),
    };

    let port = |name: &str, port: i32| ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    };
    let head_amounts = BTreeMap::from([
        ("cpu".to_owned(), Quantity(HEAD_CPU.to_owned())),
        ("memory".to_owned(), Quantity(HEAD_MEMORY.to_owned())),
    ]);
    let head = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: HEAD_CONTAINER.to_owned(),
                image: Some(image.clone()),
                env: Some(env.clone()),
                ports: Some(vec![
                    port("gcs-server", 6379),
                    port("dashboard", 8265),
                    port("client", 10001),
                    port("serve", SERVE_PORT),
                ]),
                resources: Some(ResourceRequirements {
                    requests: Some(head_amounts.clone()),
                    limits: Some(head_amounts),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    };

    let mut worker_labels = labels;
    if let Some(gm) = svc
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.gpu_memory.as_ref())
    {
        let value = builders::sanitize_label_value(&gm.0);
        if !value.is_empty() {
            worker_labels.insert(builders::LABEL_GPU_MEMORY.to_owned(), value);
        }
    }
    let worker = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(worker_labels),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: WORKER_CONTAINER.to_owned(),
                image: Some(image),
                env: Some(env),
                resources: builders::resources(svc),
                volume_mounts: mounts,
                ..Container::default()
            }],
            volumes,
            ..PodSpec::default()
        }),
    };

    let accelerator = svc
        .spec
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .unwrap_or_default();
    let gpus = engine::gpus_per_replica(svc);
    let mut worker_params = BTreeMap::new();
    // Ray counts NVIDIA and AMD devices as GPUs; KubeRay detects TPUs and
    // Gaudi devices from the container's resource limits.
    if matches!(accelerator, AcceleratorType::Nvidia | AcceleratorType::Amd) && gpus > 0 {
        worker_params.insert("num-gpus".to_owned(), gpus.to_string());
    }
    let (replicas, min, max, autoscaling) = worker_scale(svc);
    Ok(RayService {
        metadata: meta,
        spec: RayServiceSpec {
            serve_config_v2,
            ray_cluster_config: RayClusterSpec {
                enable_in_tree_autoscaling: autoscaling.then_some(true),
                head_group_spec: HeadGroupSpec {
                    ray_start_params: BTreeMap::from([
                        ("dashboard-host".to_owned(), "0.0.0.0".to_owned()),
                        // Replicas run on the workers, sized from the service.
                        ("num-cpus".to_owned(), "0".to_owned()),
                    ]),
                    template: head,
                },
                worker_group_specs: vec![WorkerGroupSpec {
                    group_name: WORKER_GROUP.to_owned(),
                    replicas: Some(replicas),
                    min_replicas: Some(min),
                    max_replicas: Some(max),
                    ray_start_params: worker_params,
                    template: worker,
                }],
            },
        },
        status: None,
    })
}

/// What the RayService's status says, for the InferenceService's conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The applications serve traffic.
    pub ready: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
}

/// Read readiness from a RayService: its `Ready` condition when KubeRay
/// writes one, else `serviceStatus: Running`, and the first unhealthy
/// application's message otherwise.
#[must_use]
pub fn observe(rs: &RayService) -> Observed {
    let name = rs.name_any();
    let Some(status) = rs.status.as_ref() else {
        return Observed {
            ready: false,
            reason: "RayServicePending".to_owned(),
            message: format!("RayService {name} has no status yet"),
        };
    };
    let failing = status
        .active_service_status
        .as_ref()
        .and_then(|a| {
            a.application_statuses
                .iter()
                .find(|(_, s)| s.status.as_deref() != Some("RUNNING"))
        })
        .map(|(app, s)| {
            format!(
                "application {app} is {}{}",
                s.status.as_deref().unwrap_or("unknown"),
                s.message
                    .as_deref()
                    .filter(|m| !m.is_empty())
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )
        });
    if let Some(c) = status.conditions.iter().find(|c| c.type_ == "Ready") {
        let ready = c.status == "True";
        return Observed {
            ready,
            reason: if ready {
                "RayServiceReady".to_owned()
            } else {
                "RayServiceNotReady".to_owned()
            },
            message: match (&failing, ready) {
                (Some(f), false) => format!("RayService {name}: {f}"),
                _ if c.message.is_empty() => format!("RayService {name} Ready={}", c.status),
                _ => format!("RayService {name}: {}", c.message),
            },
        };
    }
    let running = status.service_status.as_deref() == Some("Running") && failing.is_none();
    Observed {
        ready: running,
        reason: if running {
            "RayServiceReady".to_owned()
        } else {
            "RayServiceNotReady".to_owned()
        },
        message: match failing {
            Some(f) => format!("RayService {name}: {f}"),
            None => format!(
                "RayService {name} is {}",
                status.service_status.as_deref().unwrap_or("starting")
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::ResourcesSpec;
    use crate::api::v1beta1::Backend;
    use crate::api::v1beta1::{
        AcceleratorSpec, AutoscalingSpec, EngineSpec, EnvVar as SpecEnv, GraphSpec,
        InferenceServiceSpec, ModelSpec, ParallelismSpec,
    };
    use crate::graph::proto::{ActorOptions, Node};

    fn svc() -> InferenceService {
        let mut s = InferenceService::new(
            "rag",
            InferenceServiceSpec {
                model: ModelSpec {
                    r#ref: "llama3-70b".into(),
                    image: None,
                },
                engine: Some(EngineSpec {
                    image: Some("registry.example.com/ray-vllm:2.40".into()),
                    env: vec![SpecEnv {
                        name: "HF_HOME".into(),
                        value: Some("/cache".into()),
                    }],
                    ..EngineSpec::default()
                }),
                backend: Some(Backend::RayService),
                replicas: Some(2),
                accelerator: Some(AcceleratorSpec {
                    r#type: Some(AcceleratorType::Nvidia),
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
        let rs = desired_rayservice(&svc(), &graph(), "/team-a/rag").expect("builds");
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
        let rs = desired_rayservice(&svc(), &graph(), "/team-a/rag").expect("builds");
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
    fn workers_run_the_engine_image_with_gpus_by_accelerator() {
        let rs = desired_rayservice(&svc(), &graph(), "/r").expect("builds");
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
        });
        let rs = desired_rayservice(&amd, &graph(), "/r").expect("builds");
        let limits = worker(&rs)
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("l");
        assert_eq!(limits["amd.com/gpu"], Quantity("8".into()));

        let mut tpu = svc();
        tpu.spec.accelerator = Some(AcceleratorSpec {
            r#type: Some(AcceleratorType::GoogleTpu),
        });
        let rs = desired_rayservice(&tpu, &graph(), "/r").expect("builds");
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
        let e = desired_rayservice(&cpu_only, &graph(), "/r").unwrap_err();
        assert_eq!(e.reason(), "Unschedulable");
        assert!(
            e.to_string().contains("deployment \"llm\" asks num_gpus 8"),
            "{e}"
        );
        let mut cpu_graph = graph();
        cpu_graph.nodes[1].actor_options = None;
        let rs = desired_rayservice(&cpu_only, &cpu_graph, "/r").expect("builds");
        let limits = worker(&rs)
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("l");
        assert!(limits.keys().all(|k| k == "cpu" || k == "memory"));
    }

    #[test]
    fn worker_replicas_follow_replicas_or_autoscaling() {
        let rs = desired_rayservice(&svc(), &graph(), "/r").expect("builds");
        let g = &rs.spec.ray_cluster_config.worker_group_specs[0];
        assert_eq!(
            (g.replicas, g.min_replicas, g.max_replicas),
            (Some(2), Some(2), Some(2))
        );
        assert_eq!(rs.spec.ray_cluster_config.enable_in_tree_autoscaling, None);

        let mut zero = svc();
        zero.spec.replicas = Some(0);
        let rs = desired_rayservice(&zero, &graph(), "/r").expect("builds");
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
        let rs = desired_rayservice(&auto, &graph(), "/r").expect("builds");
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
        let rs = desired_rayservice(&s, &graph(), "/r").expect("builds");
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
        let e = desired_rayservice(&svc(), &g, "/r").unwrap_err();
        assert_eq!(e.reason(), "InvalidGraph");
        let e = desired_rayservice(&svc(), &graph(), "/r/").unwrap_err();
        assert_eq!(e.reason(), "InvalidGraph", "route prefix rules apply");

        let mut no_image = svc();
        no_image.spec.engine = None;
        let e = desired_rayservice(&no_image, &graph(), "/r").unwrap_err();
        assert_eq!(e, RayServiceError::Build(BuildError::MissingEngineImage));
        let mut no_uid = svc();
        no_uid.metadata.uid = None;
        let e = desired_rayservice(&no_uid, &graph(), "/r").unwrap_err();
        assert_eq!(e, RayServiceError::Build(BuildError::NoOwner));
    }

    #[test]
    fn oversized_serve_config_is_refused() {
        let mut g = graph();
        g.nodes[1].user_config_json =
            serde_json::json!({ "blob": "x".repeat(MAX_SERVE_CONFIG_BYTES) }).to_string();
        let e = desired_rayservice(&svc(), &g, "/r").unwrap_err();
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
}
