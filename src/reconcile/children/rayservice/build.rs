//! The RayService a (defaulted) service with `backend: RayService` wants:
//! `serveConfigV2` from its serving graph, one head group, one worker group.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvFromSource, EnvVar, PodSpec, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::upstream::kuberay::{
    HeadGroupSpec, RayClusterSpec, RayService, RayServiceSpec, SERVE_PORT, WorkerGroupSpec,
};
use crate::api::v1beta1::InferenceService;
use crate::api::vocabulary::GraphReason;
use crate::api::{AcceleratorClassSpec, AcceleratorType};
use crate::engine;
use crate::graph::GraphError;
use crate::graph::proto::ServingGraph;
use crate::graph::serve_config;
use crate::reconcile::children::deployment::{MODEL_MOUNT_PATH, model_volume, resources};
use crate::reconcile::children::error::BuildError;
use crate::reconcile::children::meta::{
    LABEL_SERVICE, Track, label_gpu_memory, labels, owner_reference,
};
use crate::reconcile::children::pod::{Role, dress, engine_env};

/// Name of the head container.
pub const HEAD_CONTAINER: &str = "ray-head";
/// Name of the worker container.
pub const WORKER_CONTAINER: &str = "ray-worker";
/// Name of the single worker group.
pub const WORKER_GROUP: &str = "workers";

/// Name of the Service KubeRay makes for the RayService of `svc` once its
/// Serve applications run: `<rayservice>-serve-svc`.
#[must_use]
pub fn serve_service_name(svc: &InferenceService) -> String {
    format!("{}-serve-svc", engine::primary_name(svc))
}
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
    pub fn reason(&self) -> GraphReason {
        match self {
            Self::Graph(e) => e.reason(),
            Self::Build(_) => GraphReason::BuildFailed,
        }
    }
}

/// The labels a spread constraint counts a Ray pod's peers by: the
/// service's pods of one node type (KubeRay labels each pod with its type).
fn ray_spread(svc: &InferenceService, node_type: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_SERVICE.to_owned(), svc.name_any()),
        ("ray.io/node-type".to_owned(), node_type.to_owned()),
    ])
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
    class: Option<&AcceleratorClassSpec>,
) -> Result<RayService, RayServiceError> {
    let name = engine::primary_name(svc);
    let serve_config_v2 = serve_config_v2(svc, graph, &name, route_path)?;
    let image = engine_image(svc)?;
    let labels = labels(svc, Track::Primary);
    let meta = ObjectMeta {
        name: Some(name),
        namespace: svc.namespace(),
        labels: Some(labels.clone()),
        owner_references: Some(vec![owner_reference(svc)?]),
        ..ObjectMeta::default()
    };
    let env = ray_env(svc);
    let head = head_template(svc, class, &image, &env, labels.clone());
    let worker = worker_template(svc, class, image, env, labels);
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
                    ray_start_params: worker_start_params(svc),
                    template: worker,
                }],
            },
        },
        status: None,
    })
}

/// `serveConfigV2` for the graph: generated, checked to fit the workers,
/// written as YAML and at most [`MAX_SERVE_CONFIG_BYTES`].
fn serve_config_v2(
    svc: &InferenceService,
    graph: &ServingGraph,
    name: &str,
    route_path: &str,
) -> Result<String, RayServiceError> {
    let config = serve_config::generate(graph, name, route_path)?;
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
    Ok(serve_config_v2)
}

/// The engine image the Ray pods run.
fn engine_image(svc: &InferenceService) -> Result<String, BuildError> {
    svc.spec
        .engine
        .as_ref()
        .and_then(|e| e.image.clone())
        .filter(|i| !i.is_empty())
        .ok_or(BuildError::MissingEngineImage)
}

/// The environment of both Ray containers: `env` and `envFrom`.
type RayEnv = (Option<Vec<EnvVar>>, Option<Vec<EnvFromSource>>);

/// The model's ref (and its mount path when it comes as an image), then
/// the engine's environment.
fn ray_env(svc: &InferenceService) -> RayEnv {
    let mut first = vec![EnvVar {
        name: ENV_MODEL_REF.to_owned(),
        value: Some(svc.spec.model.r#ref.clone()),
        value_from: None,
    }];
    if svc.spec.model.image.is_some() {
        first.push(EnvVar {
            name: ENV_MODEL_PATH.to_owned(),
            value: Some(MODEL_MOUNT_PATH.to_owned()),
            value_from: None,
        });
    }
    engine_env(svc, first)
}

/// The head pod: GCS, dashboard, client and serve ports, a fixed CPU and
/// memory size, placed as a head.
fn head_template(
    svc: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
    image: &str,
    (env, env_from): &RayEnv,
    labels: BTreeMap<String, String>,
) -> PodTemplateSpec {
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
    let mut head_pod = PodSpec {
        containers: vec![Container {
            name: HEAD_CONTAINER.to_owned(),
            image: Some(image.to_owned()),
            env: env.clone(),
            env_from: env_from.clone(),
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
    };
    dress(
        &mut head_pod,
        svc,
        class,
        Role::Head,
        &ray_spread(svc, "head"),
    );
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            ..ObjectMeta::default()
        }),
        spec: Some(head_pod),
    }
}

/// The worker pod: sized like a Deployment backend's replica, with the
/// model's volume, placed as an accelerated pod.
fn worker_template(
    svc: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
    image: String,
    (env, env_from): RayEnv,
    labels: BTreeMap<String, String>,
) -> PodTemplateSpec {
    let (volumes, mounts) = model_volume(svc.spec.model.image.clone());
    let mut worker_labels = labels;
    label_gpu_memory(svc, &mut worker_labels);
    let mut worker_pod = PodSpec {
        containers: vec![Container {
            name: WORKER_CONTAINER.to_owned(),
            image: Some(image),
            env,
            env_from,
            resources: resources(svc, class),
            volume_mounts: mounts,
            ..Container::default()
        }],
        volumes,
        ..PodSpec::default()
    };
    dress(
        &mut worker_pod,
        svc,
        class,
        Role::Accelerated,
        &ray_spread(svc, "worker"),
    );
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(worker_labels),
            ..ObjectMeta::default()
        }),
        spec: Some(worker_pod),
    }
}

/// The workers' `rayStartParams`: Ray counts NVIDIA and AMD devices as
/// GPUs; KubeRay detects TPUs and Gaudi devices from the container's
/// resource limits.
fn worker_start_params(svc: &InferenceService) -> BTreeMap<String, String> {
    let accelerator = svc
        .spec
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .unwrap_or_default();
    let gpus = engine::gpus_per_replica(svc);
    let mut worker_params = BTreeMap::new();
    if matches!(accelerator, AcceleratorType::Nvidia | AcceleratorType::Amd) && gpus > 0 {
        worker_params.insert("num-gpus".to_owned(), gpus.to_string());
    }
    worker_params
}
