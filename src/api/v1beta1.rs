//! `InferenceService` at `infergate.dev/v1beta1`, the storage version.
// kube-derive's repeated `printcolumn(...)` lists look like duplicated
// attributes to clippy; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

pub use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, LocalObjectReference, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::common::{
    AcceleratorType, AdapterSpec, BackendKind, EndpointPickerMode, EndpointPickerSpec, FailureMode,
    GatewayRef, HealthCheckSpec, MetricsSpec, ModelSpec, ResourcesSpec, RouteMatch,
};

/// The desired state of an inference service.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "infergate.dev",
    version = "v1beta1",
    kind = "InferenceService",
    namespaced,
    shortname = "infsvc",
    category = "infergate",
    status = "InferenceServiceStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "Model", type_ = "string", json_path = ".spec.model.ref"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.rollout.phase",
        description = "Rollout phase"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".status.canary.weight",
        description = "Canary weight actually routed"
    ),
    printcolumn(name = "Path", type_ = "string", json_path = ".status.routePath"),
    printcolumn(
        name = "Graph",
        type_ = "string",
        json_path = ".status.graph.shortDigest",
        description = "The serving graph applied (backend RayService), short digest"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "integer",
        json_path = ".status.capacity.maxGPUs",
        description = "GPUs the service can hold at once (its budget charge)"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("!has(self.graph) || (has(self.backend) && self.backend == 'RayService')").message("spec.graph is allowed only when spec.backend is RayService"),
    validation = Rule::new("!has(self.backend) || self.backend != 'RayService' || has(self.graph)").message("spec.graph is required when spec.backend is RayService")
)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServiceSpec {
    /// The model to serve.
    pub model: ModelSpec,
    /// The serving engine (vLLM or similar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineSpec>,
    /// How the service runs: plain Deployments or a KubeRay RayService. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.backend is immutable"))]
    pub backend: Option<Backend>,
    /// Replicas of the primary track; 0 is honoured. Ignored by the workload when autoscaling is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.replicas must be at least 0"))]
    pub replicas: Option<i32>,
    /// Horizontal autoscaling on CPU utilisation; present means an HPA is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
    /// CPU, memory and GPU memory per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesSpec>,
    /// The accelerator the engine runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<AcceleratorSpec>,
    /// Tensor and pipeline parallelism; GPUs per replica = tensor x pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<ParallelismSpec>,
    /// Where the engine pods run, merged after the accelerator class's own
    /// constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
    /// The ServiceAccount of the engine pods (the namespace's `default` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.serviceAccountName must be a lowercase RFC 1123 subdomain"))]
    pub service_account_name: Option<String>,
    /// Secrets of the namespace the engine's images are pulled with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// A second model served beside the primary with a share of the traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
    /// Liveness and readiness probing of the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheckSpec>,
    /// How requests reach the service through the Gateway API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingSpec>,
    /// How Prometheus scrapes the engine's metrics (a PodMonitor `S`, where
    /// the Prometheus Operator's CRD is installed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsSpec>,
    /// How a new model or engine version reaches users: at once
    /// (`Immediate`, the default) or through canary steps (`Canary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::rollout::RolloutSpec>,
    /// The Ray Serve graph; required iff `backend: RayService`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphSpec>,
}

/// The serving engine container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineSpec {
    /// Engine container image; defaulted from policy or `--default-engine-image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub image: Option<String>,
    /// Container port the engine listens on (default 8000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("spec.engine.port must be between 1 and 65535"))]
    pub port: Option<i32>,
    /// Extra arguments appended to the generated ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables (core/v1 EnvVar: a value, or one from a
    /// Secret, a ConfigMap, a field or a resource).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub env: Vec<EnvVar>,
    /// Whole Secrets and ConfigMaps as environment variables (core/v1 EnvFromSource).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub env_from: Vec<EnvFromSource>,
    /// Size of the in-memory `/dev/shm` (tensor- and pipeline-parallel
    /// engines share tensors through it); defaulted to 2Gi when GPUs per
    /// replica > 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("spec.engine.shmSize must be a positive quantity such as 8Gi"))]
    pub shm_size: Option<Quantity>,
    /// The longest context the engine serves (`--max-model-len`); unset,
    /// the model's own. Defaulted by the fit (section Capacity) when the
    /// full context does not fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.engine.maxModelLen must be at least 1"))]
    pub max_model_len: Option<i64>,
    /// The share of each GPU's memory the engine may use
    /// (`--gpu-memory-utilization`, default 0.9 on GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0 && self <= 1.0").message("spec.engine.gpuMemoryUtilization must be above 0 and at most 1"))]
    pub gpu_memory_utilization: Option<f64>,
}

/// Which workload runs the service.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Backend {
    /// Deployments, Services, an optional HPA and an HTTPRoute.
    #[default]
    Deployment,
    /// A KubeRay RayService generated from a serving graph.
    RayService,
}

impl Backend {
    /// The name as written in manifests.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::RayService => "RayService",
        }
    }
}

/// Autoscaling bounds and target.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas").message("spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas"))]
pub struct AutoscalingSpec {
    /// Lower bound (at least 1).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.autoscaling.minReplicas must be at least 1"))]
    pub min_replicas: i32,
    /// Upper bound (at least minReplicas).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.autoscaling.maxReplicas must be at least 1"))]
    pub max_replicas: i32,
    /// Target average CPU utilisation in percent, 1..100 (default 80).
    #[serde(
        default,
        rename = "targetCPUUtilizationPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("spec.autoscaling.targetCPUUtilizationPercent must be between 1 and 100"))]
    pub target_cpu_utilization_percent: Option<i32>,
}

/// The accelerator family, and the node pool's class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorSpec {
    /// `nvidia`, `amd`, `intel-gaudi`, `google-tpu` or `none` (default);
    /// with a class, the class's vendor.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub r#type: Option<AcceleratorType>,
    /// The AcceleratorClass whose nodes the engine pods run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub class: Option<String>,
}

/// Where the engine pods run, beyond what the accelerator class requires.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// Node labels the pods select, besides the class's (a key the class
    /// sets to another value is denied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints the pods tolerate, besides the class's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// The pods' PriorityClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Spread a track's pods across `node`s or `zone`s (a topology spread
    /// constraint, ScheduleAnyway), or `none`; default `node` when a track
    /// can have more than one replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_across: Option<SpreadAcross>,
}

/// The topology a track's pods are spread across.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SpreadAcross {
    /// `kubernetes.io/hostname`.
    #[default]
    #[serde(rename = "node")]
    Node,
    /// `topology.kubernetes.io/zone`.
    #[serde(rename = "zone")]
    Zone,
    /// No spread constraint.
    #[serde(rename = "none")]
    None,
}

impl SpreadAcross {
    /// The node label of the topology, `None` for `none`.
    #[must_use]
    pub fn topology_key(self) -> Option<&'static str> {
        match self {
            Self::Node => Some("kubernetes.io/hostname"),
            Self::Zone => Some("topology.kubernetes.io/zone"),
            Self::None => None,
        }
    }
}

/// Model parallelism.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParallelismSpec {
    /// Tensor-parallel size (at least 1, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.parallelism.tensor must be at least 1"))]
    pub tensor: Option<i32>,
    /// Pipeline-parallel size (at least 1, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.parallelism.pipeline must be at least 1"))]
    pub pipeline: Option<i32>,
}

/// A canary track.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// The canary model (`ref` required).
    pub model: ModelSpec,
    /// Engine image of the canary; `spec.engine.image` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub engine_image: Option<String>,
    /// Share of traffic in percent, 0..100 (further limited by policy).
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message("spec.canary.weight must be between 0 and 100"))]
    pub weight: i32,
    /// Canary replicas; computed from the weight when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.canary.replicas must be at least 0"))]
    pub replicas: Option<i32>,
    /// What the canary does when its pods do not fit the AcceleratorClass's
    /// free devices: `Wait` (default) or `Borrow`. A `Canary` rollout's
    /// track has its own, `spec.rollout.canary.onFullPool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_full_pool: Option<super::rollout::CanaryOnFullPool>,
}

/// Request routing through the Gateway API.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingSpec {
    /// Route path template with `{...}` placeholders (default `/{.metadata.namespace}/{.metadata.name}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path_template: Option<String>,
    /// Gateway API (GEP-2257) request timeout such as `5m` (default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$')").message("spec.routing.requestTimeout must be a Gateway API duration such as 30s, 5m or 1h30m"))]
    pub request_timeout: Option<String>,
    /// The Gateway the HTTPRoute attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayRef>,
    /// What the route's backendRefs point at: `Service` (default) or an
    /// `InferencePool` per track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_kind: Option<BackendKind>,
    /// The endpoint picker of each InferencePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker: Option<EndpointPickerSpec>,
    /// How the route selects the service's requests: `Path` (default), by
    /// the model name header (`ModelName`: one rule per served name), or
    /// `Both`.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub r#match: Option<RouteMatch>,
    /// The header the gateway's body-based router copies the request's
    /// `model` into (default `X-Gateway-Model-Name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub model_name_header: Option<String>,
    /// The HTTPRoute's `spec.hostnames` (none: every hostname the Gateway
    /// listens on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 253)))]
    pub hostnames: Vec<String>,
}

/// Where the Ray Serve graph is fetched from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphSpec {
    /// HTTPS URL of the protobuf serving graph.
    #[schemars(length(max = 2048))]
    #[x_kube(
        validation = Rule::new("self.matches('^https://[^/?#@]+([/?].*)?$')").message("spec.graph.url must be an https:// URL with a host and no user information"),
        validation = Rule::new("!self.contains('#')").message("spec.graph.url must not have a fragment")
    )]
    pub url: String,
    /// Secret key holding the bearer token sent with the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_secret_ref: Option<SecretKeyRef>,
}

/// A key in a Secret of the service's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name (a DNS subdomain).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("bearerTokenSecretRef.name must be a lowercase RFC 1123 subdomain"))]
    pub name: String,
    /// Key inside the Secret.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[-._a-zA-Z0-9]+$') && self != '.' && self != '..'").message("bearerTokenSecretRef.key must consist of alphanumeric characters, '-', '_' or '.'"))]
    pub key: String,
}

/// The observed state of an inference service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServiceStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Reconciled, RoutingReady, PolicyCompliant; GraphReady (RayService backend); RolloutCapacity and CanaryReady (a class with devices).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "crate::api::conditions::serialize"
    )]
    pub conditions: Vec<Condition>,
    /// Replicas of the primary track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready replicas of the primary track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// The canary track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// The rendered route path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_path: Option<String>,
    /// The request timeout in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout: Option<String>,
    /// The progressive rollout (`spec.rollout.strategy: Canary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::rollout::RolloutStatus>,
    /// What the service holds at most and what it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityStatus>,
    /// The serving graph applied (`backend: RayService`) and the last fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphStatus>,
}

/// Which serving graph is live, and how the last fetch went.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphStatus {
    /// The URL the applied graph was fetched from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `sha256:<hex>` of the applied graph's fetched bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The first 12 hex digits of `digest` (the Graph printer column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_digest: Option<String>,
    /// The ETag the graph server sent with the applied graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// When the RayService was first applied with this graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at: Option<Time>,
    /// When a fetch ended (successful, not modified or failed): written
    /// with any other change of the status, and otherwise at most every
    /// 10 minutes (a fetch that brings the same graph is no change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetch_at: Option<Time>,
    /// Why the last fetch failed (`Reason: message`); absent after a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fetch_error: Option<String>,
    /// The last `infergate.dev/graph-refresh` value acted on (over 128
    /// bytes, as `sha256:<hex>` of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh: Option<String>,
    /// The last 16 `infergate.dev/graph-refresh` values acted on, newest
    /// last (each as `lastRefresh` keeps it): a value among them is not
    /// acted on again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 128)))]
    pub refreshes_seen: Vec<String>,
}

/// The service's capacity: GPUs, the KV cache its model fits, and cost.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityStatus {
    /// GPUs of one replica (`tensor x pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_replica: Option<i32>,
    /// GPUs the service can hold at once: its charge against the namespace's budget.
    #[serde(default, rename = "maxGPUs", skip_serializing_if = "Option::is_none")]
    pub max_gpus: Option<i64>,
    /// Tokens of KV cache one replica holds (when a ModelProfile lists the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<i64>,
    /// Requests of the full context one replica holds at once, e.g. `3.4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<String>,
    /// Cost of `maxGPUs` for an hour, from the AcceleratorClass, e.g. `32.80`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<String>,
}

/// The observed canary track.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// Canary replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready canary replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// The weight actually routed to the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}
