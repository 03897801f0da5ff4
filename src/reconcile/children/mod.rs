//! The children of an InferenceService as pure functions: Deployment,
//! Service, HorizontalPodAutoscaler and (in [`httproute`]) HTTPRoute for
//! `backend: Deployment`; the RayService (in [`rayservice`]) for
//! `backend: RayService`.
//!
//! Every function takes a defaulted [`InferenceService`] (as the mutating
//! webhook stores it, or as the reconciler defaults it in memory) and returns
//! plain Kubernetes objects ready for server-side apply. No I/O.

pub mod httproute;
pub mod rayservice;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, HTTPGetAction, ImageVolumeSource, PodSpec, PodTemplateSpec,
    Probe, ResourceRequirements, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use self::httproute::{
    GATEWAY_GROUP, HTTPBackendRef, HTTPPathMatch, HTTPPathModifier, HTTPRoute, HTTPRouteFilter,
    HTTPRouteMatch, HTTPRouteRule, HTTPRouteSpec, HTTPRouteTimeouts, HTTPURLRewriteFilter,
    ParentReference,
};
use crate::api::v1beta1::InferenceService;
use crate::api::{AcceleratorType, GatewayRef, MANAGER};
use crate::engine;
use crate::engine::builtin::{
    DEFAULT_HEALTH_INTERVAL, DEFAULT_HEALTH_PATH, DEFAULT_HEALTH_TIMEOUT, DEFAULT_PARALLELISM,
    DEFAULT_PORT, DEFAULT_REPLICAS, DEFAULT_REQUEST_TIMEOUT, DEFAULT_TARGET_CPU,
};

/// `app.kubernetes.io/name: S` on every child.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/managed-by: infergate` on every child.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `infergate.dev/service: S` on every child.
pub const LABEL_SERVICE: &str = "infergate.dev/service";
/// `infergate.dev/track: primary|canary` on every child.
pub const LABEL_TRACK: &str = "infergate.dev/track";
/// Pod label recording `spec.resources.gpuMemory` (sanitised) for scheduling policies.
pub const LABEL_GPU_MEMORY: &str = "infergate.dev/gpu-memory";
/// Name of the engine container.
pub const CONTAINER_NAME: &str = "engine";
/// Name of the engine's container and Service port.
pub const PORT_NAME: &str = "http";
/// Name of the image volume holding the model weights (`spec.model.image`).
pub const MODEL_VOLUME: &str = "model";
/// Where the model image volume is mounted in the engine container.
pub const MODEL_MOUNT_PATH: &str = "/model";
/// How long the startup probe lets an engine load its model before liveness applies.
pub const STARTUP_GRACE_SECONDS: i32 = 1800;

/// Which track a child belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Track {
    /// The primary model.
    Primary,
    /// The canary model.
    Canary,
}

impl Track {
    /// The `infergate.dev/track` label value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Canary => "canary",
        }
    }
}

/// Why desired state could not be built (the validator normally catches these first).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The object has no name or uid, so no owner reference can point at it.
    #[error("object has no name or uid to own children")]
    NoOwner,
    /// No engine image after defaulting.
    #[error("spec.engine.image is not set: set it, a policy default, or --default-engine-image")]
    MissingEngineImage,
    /// The canary section is missing where a canary child was asked for.
    #[error("spec.canary is not set")]
    NoCanary,
    /// A health check duration does not parse.
    #[error("{field}: {message}")]
    Duration {
        /// The field path.
        field: &'static str,
        /// The parse error.
        message: String,
    },
    /// The route path does not render.
    #[error("{0}")]
    Route(String),
}

/// The children of one service, except the HTTPRoute (which depends on
/// observed canary readiness, see [`http_route`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// Deployment `S`.
    pub primary: Deployment,
    /// Service `S`.
    pub primary_service: Service,
    /// Deployment `S-canary` and Service `S-canary` when `spec.canary` is set.
    pub canary: Option<(Deployment, Service)>,
    /// HorizontalPodAutoscaler `S` when `spec.autoscaling` is set.
    pub hpa: Option<HorizontalPodAutoscaler>,
}

/// Build every child but the route.
pub fn desired(svc: &InferenceService) -> Result<Desired, BuildError> {
    let canary = if svc.spec.canary.is_some() {
        Some((
            deployment(svc, Track::Canary)?,
            service(svc, Track::Canary)?,
        ))
    } else {
        None
    };
    Ok(Desired {
        primary: deployment(svc, Track::Primary)?,
        primary_service: service(svc, Track::Primary)?,
        canary,
        hpa: hpa(svc)?,
    })
}

/// The name of a track's Deployment and Service.
#[must_use]
pub fn child_name(svc: &InferenceService, track: Track) -> String {
    match track {
        Track::Primary => engine::primary_name(svc),
        Track::Canary => engine::canary_name(svc),
    }
}

/// The four labels every child carries.
#[must_use]
pub fn labels(svc: &InferenceService, track: Track) -> BTreeMap<String, String> {
    let name = svc.name_any();
    BTreeMap::from([
        (LABEL_NAME.to_owned(), name.clone()),
        (LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (LABEL_SERVICE.to_owned(), name),
        (LABEL_TRACK.to_owned(), track.as_str().to_owned()),
    ])
}

/// The pod selector of a track (a stable subset of [`labels`]).
#[must_use]
pub fn selector_labels(svc: &InferenceService, track: Track) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_SERVICE.to_owned(), svc.name_any()),
        (LABEL_TRACK.to_owned(), track.as_str().to_owned()),
    ])
}

/// The controller owner reference to the service.
pub fn owner_reference(svc: &InferenceService) -> Result<OwnerReference, BuildError> {
    let mut owner = svc.controller_owner_ref(&()).ok_or(BuildError::NoOwner)?;
    // Foreground deletion of the service waits for its children.
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}

fn child_meta(
    svc: &InferenceService,
    name: String,
    track: Track,
) -> Result<ObjectMeta, BuildError> {
    Ok(ObjectMeta {
        name: Some(name),
        namespace: svc.namespace(),
        labels: Some(labels(svc, track)),
        owner_references: Some(vec![owner_reference(svc)?]),
        ..ObjectMeta::default()
    })
}

/// The engine port after defaulting.
#[must_use]
pub fn engine_port(svc: &InferenceService) -> i32 {
    svc.spec
        .engine
        .as_ref()
        .and_then(|e| e.port)
        .unwrap_or(DEFAULT_PORT)
}

/// Turn a quantity into a label value: characters outside `[A-Za-z0-9._-]`
/// become `-`, the ends are alphanumeric, at most 63 characters.
#[must_use]
pub fn sanitize_label_value(raw: &str) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Generated engine arguments followed by `spec.engine.args`.
#[must_use]
pub fn engine_args(svc: &InferenceService, track: Track) -> Vec<String> {
    let (model_ref, model_image) = match (track, svc.spec.canary.as_ref()) {
        (Track::Canary, Some(c)) => (c.model.r#ref.clone(), c.model.image.is_some()),
        _ => (svc.spec.model.r#ref.clone(), svc.spec.model.image.is_some()),
    };
    let model = if model_image {
        MODEL_MOUNT_PATH.to_owned()
    } else {
        model_ref.clone()
    };
    let mut args = vec![
        "--model".to_owned(),
        model,
        "--served-model-name".to_owned(),
        model_ref,
        "--port".to_owned(),
        engine_port(svc).to_string(),
    ];
    let p = svc.spec.parallelism.as_ref();
    let tensor = p.and_then(|p| p.tensor).unwrap_or(DEFAULT_PARALLELISM);
    let pipeline = p.and_then(|p| p.pipeline).unwrap_or(DEFAULT_PARALLELISM);
    if tensor > 1 {
        args.push("--tensor-parallel-size".to_owned());
        args.push(tensor.to_string());
    }
    if pipeline > 1 {
        args.push("--pipeline-parallel-size".to_owned());
        args.push(pipeline.to_string());
    }
    if let Some(engine) = svc.spec.engine.as_ref() {
        args.extend(engine.args.iter().cloned());
    }
    args
}

/// Requests and limits: cpu, memory, and the accelerator's resource = tensor x pipeline.
#[must_use]
pub fn resources(svc: &InferenceService) -> Option<ResourceRequirements> {
    let mut amounts = BTreeMap::new();
    if let Some(r) = svc.spec.resources.as_ref() {
        if let Some(cpu) = r.cpu.as_ref() {
            amounts.insert("cpu".to_owned(), cpu.clone());
        }
        if let Some(memory) = r.memory.as_ref() {
            amounts.insert("memory".to_owned(), memory.clone());
        }
    }
    let accelerator = svc
        .spec
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .unwrap_or(AcceleratorType::None);
    let gpus = engine::gpus_per_replica(svc);
    if let Some(resource) = accelerator.resource_name()
        && gpus > 0
    {
        amounts.insert(resource.to_owned(), Quantity(gpus.to_string()));
    }
    if amounts.is_empty() {
        return None;
    }
    Some(ResourceRequirements {
        requests: Some(amounts.clone()),
        limits: Some(amounts),
        ..ResourceRequirements::default()
    })
}

/// Whole seconds for a probe field, rounded up, at least 1.
fn probe_seconds(field: &'static str, value: &str) -> Result<i32, BuildError> {
    let d = engine::parse_go_duration(value)
        .map_err(|message| BuildError::Duration { field, message })?;
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Ok(i32::try_from(secs.max(1)).unwrap_or(i32::MAX))
}

/// Liveness, readiness and startup probes from `spec.healthCheck`.
pub fn probes(svc: &InferenceService) -> Result<(Probe, Probe, Probe), BuildError> {
    let hc = svc.spec.health_check.clone().unwrap_or_default();
    let path = hc.path.unwrap_or_else(|| DEFAULT_HEALTH_PATH.to_owned());
    let period = probe_seconds(
        "spec.healthCheck.interval",
        hc.interval.as_deref().unwrap_or(DEFAULT_HEALTH_INTERVAL),
    )?;
    let timeout = probe_seconds(
        "spec.healthCheck.timeout",
        hc.timeout.as_deref().unwrap_or(DEFAULT_HEALTH_TIMEOUT),
    )?;
    let probe = Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path),
            port: IntOrString::String(PORT_NAME.to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        ..Probe::default()
    };
    // Engines load weights for minutes: liveness applies only once the
    // startup probe has succeeded.
    let startup = Probe {
        failure_threshold: Some((STARTUP_GRACE_SECONDS / period).max(1)),
        ..probe.clone()
    };
    Ok((probe.clone(), probe, startup))
}

/// Deployment `S` or `S-canary`. An autoscaled primary leaves `replicas` to the HPA.
pub fn deployment(svc: &InferenceService, track: Track) -> Result<Deployment, BuildError> {
    let engine_image = svc
        .spec
        .engine
        .as_ref()
        .and_then(|e| e.image.clone())
        .filter(|i| !i.is_empty());
    let (image, model_image, replicas) = match track {
        Track::Primary => (
            engine_image.ok_or(BuildError::MissingEngineImage)?,
            svc.spec.model.image.clone(),
            if svc.spec.autoscaling.is_some() {
                None
            } else {
                Some(svc.spec.replicas.unwrap_or(DEFAULT_REPLICAS))
            },
        ),
        Track::Canary => {
            let canary = svc.spec.canary.as_ref().ok_or(BuildError::NoCanary)?;
            (
                canary
                    .engine_image
                    .clone()
                    .filter(|i| !i.is_empty())
                    .or(engine_image)
                    .ok_or(BuildError::MissingEngineImage)?,
                canary.model.image.clone(),
                Some(engine::canary_replicas(svc)),
            )
        }
    };
    let (liveness, readiness, startup) = probes(svc)?;
    let env: Vec<EnvVar> = svc
        .spec
        .engine
        .as_ref()
        .map(|e| {
            e.env
                .iter()
                .map(|v| EnvVar {
                    name: v.name.clone(),
                    value: v.value.clone(),
                    value_from: None,
                })
                .collect()
        })
        .unwrap_or_default();
    let mut pod_labels = labels(svc, track);
    if let Some(gm) = svc
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.gpu_memory.as_ref())
    {
        let value = sanitize_label_value(&gm.0);
        if !value.is_empty() {
            pod_labels.insert(LABEL_GPU_MEMORY.to_owned(), value);
        }
    }
    let (volumes, mounts) = match model_image {
        Some(reference) => (
            Some(vec![Volume {
                name: MODEL_VOLUME.to_owned(),
                image: Some(ImageVolumeSource {
                    reference: Some(reference),
                    pull_policy: None,
                }),
                ..Volume::default()
            }]),
            Some(vec![VolumeMount {
                name: MODEL_VOLUME.to_owned(),
                mount_path: MODEL_MOUNT_PATH.to_owned(),
                read_only: Some(true),
                ..VolumeMount::default()
            }]),
        ),
        None => (None, None),
    };
    let container = Container {
        name: CONTAINER_NAME.to_owned(),
        image: Some(image),
        args: Some(engine_args(svc, track)),
        env: if env.is_empty() { None } else { Some(env) },
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_owned()),
            container_port: engine_port(svc),
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        resources: resources(svc),
        liveness_probe: Some(liveness),
        readiness_probe: Some(readiness),
        startup_probe: Some(startup),
        volume_mounts: mounts,
        ..Container::default()
    };
    Ok(Deployment {
        metadata: child_meta(svc, child_name(svc, track), track)?,
        spec: Some(DeploymentSpec {
            replicas,
            selector: LabelSelector {
                match_labels: Some(selector_labels(svc, track)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes,
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// Service `S` or `S-canary`: ClusterIP on the engine port.
pub fn service(svc: &InferenceService, track: Track) -> Result<Service, BuildError> {
    if track == Track::Canary && svc.spec.canary.is_none() {
        return Err(BuildError::NoCanary);
    }
    Ok(Service {
        metadata: child_meta(svc, child_name(svc, track), track)?,
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector_labels(svc, track)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_owned()),
                port: engine_port(svc),
                target_port: Some(IntOrString::String(PORT_NAME.to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// HorizontalPodAutoscaler `S` (autoscaling/v2) on the primary Deployment.
pub fn hpa(svc: &InferenceService) -> Result<Option<HorizontalPodAutoscaler>, BuildError> {
    let Some(a) = svc.spec.autoscaling.as_ref() else {
        return Ok(None);
    };
    Ok(Some(HorizontalPodAutoscaler {
        metadata: child_meta(svc, engine::primary_name(svc), Track::Primary)?,
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some(Deployment::api_version(&()).into_owned()),
                kind: Deployment::kind(&()).into_owned(),
                name: engine::primary_name(svc),
            },
            min_replicas: Some(a.min_replicas),
            max_replicas: a.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".to_owned(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".to_owned(),
                    target: MetricTarget {
                        type_: "Utilization".to_owned(),
                        average_utilization: Some(
                            a.target_cpu_utilization_percent
                                .unwrap_or(DEFAULT_TARGET_CPU),
                        ),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            behavior: None,
        },
        status: None,
    }))
}

/// The canary weight to route now: `spec.canary.weight` once the canary has
/// a ready replica, 0 before (and without a canary).
#[must_use]
pub fn routed_canary_weight(svc: &InferenceService, canary_ready_replicas: i32) -> i32 {
    match svc.spec.canary.as_ref() {
        Some(c) if canary_ready_replicas > 0 => c.weight.clamp(0, 100),
        _ => 0,
    }
}

/// The gateway the route attaches to, namespace resolved.
#[must_use]
pub fn gateway(svc: &InferenceService) -> Option<GatewayRef> {
    let gw = svc.spec.routing.as_ref()?.gateway.as_ref()?;
    Some(GatewayRef {
        name: gw.name.clone(),
        namespace: gw.namespace.clone().or_else(|| svc.namespace()),
    })
}

/// The request timeout in force.
#[must_use]
pub fn request_timeout(svc: &InferenceService) -> String {
    svc.spec
        .routing
        .as_ref()
        .and_then(|r| r.request_timeout.clone())
        .unwrap_or_else(|| DEFAULT_REQUEST_TIMEOUT.to_owned())
}

/// HTTPRoute `S` when a gateway is set: PathPrefix on the rendered path,
/// URLRewrite `ReplacePrefixMatch: /`, the request timeout, and backends
/// weighted `100 - w` / `w` where `w` is `routed_weight` (the canary backend
/// is left out while nothing is routed to it).
pub fn http_route(
    svc: &InferenceService,
    routed_weight: i32,
) -> Result<Option<HTTPRoute>, BuildError> {
    let Some(gw) = gateway(svc) else {
        return Ok(None);
    };
    let path = engine::render_route_path(svc).map_err(|e| BuildError::Route(e.to_string()))?;
    let port = engine_port(svc);
    let weight = if svc.spec.canary.is_some() {
        routed_weight.clamp(0, 100)
    } else {
        0
    };
    let mut backend_refs = vec![HTTPBackendRef {
        group: Some(String::new()),
        kind: Some("Service".to_owned()),
        name: engine::primary_name(svc),
        port: Some(port),
        weight: Some(100 - weight),
        ..HTTPBackendRef::default()
    }];
    if weight > 0 {
        backend_refs.push(HTTPBackendRef {
            group: Some(String::new()),
            kind: Some("Service".to_owned()),
            name: engine::canary_name(svc),
            port: Some(port),
            weight: Some(weight),
            ..HTTPBackendRef::default()
        });
    }
    let mut route = HTTPRoute::new(
        &engine::primary_name(svc),
        HTTPRouteSpec {
            parent_refs: vec![ParentReference {
                group: Some(GATEWAY_GROUP.to_owned()),
                kind: Some("Gateway".to_owned()),
                namespace: gw.namespace,
                name: gw.name,
                section_name: None,
            }],
            rules: vec![HTTPRouteRule {
                matches: vec![HTTPRouteMatch {
                    path: Some(HTTPPathMatch {
                        r#type: Some("PathPrefix".to_owned()),
                        value: Some(path),
                    }),
                }],
                filters: vec![HTTPRouteFilter {
                    r#type: "URLRewrite".to_owned(),
                    url_rewrite: Some(HTTPURLRewriteFilter {
                        path: Some(HTTPPathModifier {
                            r#type: "ReplacePrefixMatch".to_owned(),
                            replace_prefix_match: Some("/".to_owned()),
                        }),
                    }),
                }],
                backend_refs,
                timeouts: Some(HTTPRouteTimeouts {
                    request: Some(request_timeout(svc)),
                    backend_request: None,
                }),
            }],
        },
    );
    route.metadata = child_meta(svc, engine::primary_name(svc), Track::Primary)?;
    Ok(Some(route))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::v1beta1::{
        AcceleratorSpec, AutoscalingSpec, CanarySpec, EngineSpec, EnvVar as SpecEnvVar,
        HealthCheckSpec, InferenceServiceSpec, ModelSpec, ParallelismSpec, ResourcesSpec,
        RoutingSpec,
    };

    /// A service as the mutating webhook stores it.
    fn svc() -> InferenceService {
        let mut s = InferenceService::new(
            "chat",
            InferenceServiceSpec {
                model: ModelSpec {
                    r#ref: "llama3-8b-q4".into(),
                    image: None,
                },
                engine: Some(EngineSpec {
                    image: Some("registry.example.com/vllm:0.9".into()),
                    port: Some(8000),
                    args: vec!["--max-model-len=8192".into()],
                    env: vec![SpecEnvVar {
                        name: "HF_HOME".into(),
                        value: Some("/cache".into()),
                    }],
                }),
                replicas: Some(2),
                resources: Some(ResourcesSpec {
                    cpu: Some(Quantity("4".into())),
                    memory: Some(Quantity("16Gi".into())),
                    gpu_memory: Some(Quantity("24Gi".into())),
                }),
                accelerator: Some(AcceleratorSpec {
                    r#type: Some(AcceleratorType::Nvidia),
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
                }),
                ..InferenceServiceSpec::default()
            },
        );
        s.metadata.namespace = Some("team-a".into());
        s.metadata.uid = Some("8f0a-uid".into());
        s
    }

    fn with_canary(
        mut s: InferenceService,
        weight: i32,
        replicas: Option<i32>,
    ) -> InferenceService {
        s.spec.canary = Some(CanarySpec {
            model: ModelSpec {
                r#ref: "llama3-8b-q5".into(),
                image: None,
            },
            engine_image: None,
            weight,
            replicas,
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
        let d = desired(&s).unwrap();
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
        assert_eq!(desired(&s).unwrap_err(), BuildError::NoOwner);
    }

    #[test]
    fn engine_container_has_image_port_args_env() {
        let d = deployment(&svc(), Track::Primary).unwrap();
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
    fn model_image_is_mounted_as_an_image_volume() {
        let mut s = svc();
        s.spec.model.image = Some("registry.example.com/models/llama3:8b".into());
        let d = deployment(&s, Track::Primary).unwrap();
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
        let d = deployment(&svc(), Track::Primary).unwrap();
        assert!(d.spec.unwrap().template.spec.unwrap().volumes.is_none());
    }

    #[test]
    fn resources_requests_equal_limits_with_gpus_tensor_times_pipeline() {
        let d = deployment(&svc(), Track::Primary).unwrap();
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
            });
            let limits = resources(&s).unwrap().limits.unwrap();
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
        assert!(resources(&s).is_none());
    }

    #[test]
    fn gpu_memory_becomes_a_sanitised_pod_label() {
        let mut s = svc();
        s.spec.resources.as_mut().unwrap().gpu_memory = Some(Quantity("1.5Gi".into()));
        let d = deployment(&s, Track::Primary).unwrap();
        let l = d.spec.unwrap().template.metadata.unwrap().labels.unwrap();
        assert_eq!(l[LABEL_GPU_MEMORY], "1.5Gi");
        assert_eq!(l[LABEL_TRACK], "primary");
        assert_eq!(sanitize_label_value("+24Gi "), "24Gi");
        assert_eq!(sanitize_label_value(&"9".repeat(80)).len(), 63);
    }

    #[test]
    fn probes_come_from_health_check() {
        let d = deployment(&svc(), Track::Primary).unwrap();
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
            deployment(&s, Track::Primary),
            Err(BuildError::Duration {
                field: "spec.healthCheck.interval",
                ..
            })
        ));
    }

    #[test]
    fn replicas_are_set_unless_autoscaled() {
        let mut s = svc();
        let d = deployment(&s, Track::Primary).unwrap();
        assert_eq!(d.spec.unwrap().replicas, Some(2));
        s.spec.replicas = Some(0);
        let d = deployment(&s, Track::Primary).unwrap();
        assert_eq!(d.spec.unwrap().replicas, Some(0), "0 is honoured");
        s.spec.autoscaling = Some(AutoscalingSpec {
            min_replicas: 2,
            max_replicas: 5,
            target_cpu_utilization_percent: Some(70),
        });
        let d = deployment(&s, Track::Primary).unwrap();
        assert_eq!(d.spec.unwrap().replicas, None);
        let json = serde_json::to_value(deployment(&s, Track::Primary).unwrap()).unwrap();
        assert!(json["spec"].get("replicas").is_none());
    }

    #[test]
    fn hpa_targets_the_primary_with_bounds_and_cpu_target() {
        let mut s = svc();
        assert!(hpa(&s).unwrap().is_none());
        s.spec.autoscaling = Some(AutoscalingSpec {
            min_replicas: 2,
            max_replicas: 5,
            target_cpu_utilization_percent: Some(70),
        });
        let h = hpa(&s).unwrap().unwrap();
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
        let d = deployment(&s, Track::Canary).unwrap();
        assert_eq!(d.spec.unwrap().replicas, Some(1));
    }

    #[test]
    fn canary_uses_its_model_image_and_replica_rule() {
        let mut s = with_canary(svc(), 30, None);
        s.spec.replicas = Some(5);
        let d = deployment(&s, Track::Canary).unwrap();
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
        let d = deployment(&s, Track::Canary).unwrap();
        assert_eq!(d.spec.as_ref().unwrap().replicas, Some(3));
        assert_eq!(
            engine_container(&d).image.as_deref(),
            Some("registry.example.com/vllm:1.0")
        );
        assert_eq!(
            deployment(&svc(), Track::Canary).unwrap_err(),
            BuildError::NoCanary
        );
    }

    #[test]
    fn missing_engine_image_is_an_error() {
        let mut s = svc();
        s.spec.engine.as_mut().unwrap().image = None;
        assert_eq!(
            deployment(&s, Track::Primary).unwrap_err(),
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
            let d = deployment(&s, track).unwrap();
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
}
