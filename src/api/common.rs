//! Types shared by several kinds and versions.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of every infergate kind.
pub const GROUP: &str = "infergate.dev";
/// Field manager and controller name.
pub const MANAGER: &str = "infergate";
pub use super::vocabulary::names::{
    ANNOTATION_CONVERSION_DATA as CONVERSION_DATA_ANNOTATION,
    ANNOTATION_DEFAULTED_FROM as DEFAULTED_FROM_ANNOTATION,
};

/// A model reference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// Name of the model the engine serves (1..253 characters, no whitespace).
    #[serde(rename = "ref")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("size(self) >= 1 && !self.matches('\\\\s')").message("model.ref must be 1 to 253 characters without whitespace"))]
    pub r#ref: String,
    /// Optional OCI artifact holding the weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub image: Option<String>,
    /// The name clients give in a request's `model` field (vLLM's
    /// `--served-model-name`); default: `ref`. Only on `spec.model`: both
    /// tracks of a canary serve the same names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9._:/-]+$')").message("model.servedName must be 1 to 128 characters of A-Z a-z 0-9 . _ : / -"))]
    pub served_name: Option<String>,
    /// LoRA adapters the engine loads at start, each a model name of its
    /// own. Only on `spec.model`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub adapters: Vec<AdapterSpec>,
    /// The largest rank of the adapters (vLLM's `--max-lora-rank`);
    /// default 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 512").message("model.maxAdapterRank must be between 1 and 512"))]
    pub max_adapter_rank: Option<i32>,
}

/// A LoRA adapter served by the engine of its base model.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdapterSpec {
    /// The adapter's model name (what requests give in `model`).
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9._:/-]+$')").message("an adapter's name must be 1 to 128 characters of A-Z a-z 0-9 . _ : / -"))]
    pub name: String,
    /// Where vLLM loads it from: a Hugging Face repository id or a path
    /// (for example inside `model.image`'s volume).
    #[schemars(length(min = 1, max = 1024))]
    pub source: String,
}

/// CPU, memory and GPU memory per replica.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesSpec {
    /// CPU request and limit of the engine container (a Kubernetes quantity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory request and limit of the engine container (a Kubernetes quantity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// GPU memory each replica needs; recorded as the pod label `infergate.dev/gpu-memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory: Option<Quantity>,
}

/// HTTP health check of the engine container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckSpec {
    /// HTTP path probed for liveness and readiness (default `/healthz`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("healthCheck.path must start with '/'"))]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// Probe period, a Go-style duration such as `10s` (default `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub interval: Option<String>,
    /// Probe timeout, a Go-style duration no longer than `interval` (default `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub timeout: Option<String>,
}

/// How Prometheus scrapes the engine's own metrics (a PodMonitor, where the
/// Prometheus Operator's CRD is installed).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    /// Container port serving the metrics (default: the engine port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 65535").message("metrics.port must be between 1 and 65535"))]
    pub port: Option<i32>,
    /// HTTP path of the metrics (default `/metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("metrics.path must start with '/'"))]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// Scrape interval, a Gateway API duration such as `30s` or `1m` (default `30s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$')").message("metrics.interval must be a Gateway API duration such as 30s or 1m"))]
    pub interval: Option<String>,
}

/// What the HTTPRoute's backendRefs point at.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BackendKind {
    /// Each track's Service (any ready pod takes a request).
    #[default]
    Service,
    /// Each track's Gateway API Inference Extension InferencePool (an
    /// endpoint picker chooses the pod).
    InferencePool,
}

/// Who picks the endpoint of an InferencePool.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum EndpointPickerMode {
    /// infergate runs one endpoint picker per pool.
    #[default]
    Owned,
    /// Pools without an `endpointPickerRef`, for gateways that pick endpoints themselves.
    None,
}

/// What the gateway does when the endpoint picker does not answer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailureMode {
    /// Route the request to some endpoint anyway.
    FailOpen,
    /// Fail the request (upstream's default).
    #[default]
    FailClose,
}

/// The endpoint picker of each InferencePool (`backendKind: InferencePool`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPickerSpec {
    /// `Owned` (default): infergate runs an endpoint picker per pool; `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<EndpointPickerMode>,
    /// The endpoint picker's image; required for `Owned` (from here or a policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub image: Option<String>,
    /// Replicas of each endpoint picker (default 1; at most the policies'
    /// `limits.maxReplicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("endpointPicker.replicas must be at least 1"))]
    pub replicas: Option<i32>,
    /// What the gateway does when the picker fails (default `FailClose`),
    /// copied into each pool's `endpointPickerRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<FailureMode>,
    /// The picker's plugin configuration, mounted from a ConfigMap; a
    /// change restarts the picker's pods (they read it at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 65536))]
    pub config: Option<String>,
    /// CPU and memory requests and limits of the picker's container
    /// (defaults: requests 100m CPU and 256Mi memory, a 1Gi memory limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<PickerResources>,
}

/// Requests and limits of the endpoint picker's container: CPU and memory
/// only (the picker holds no accelerator).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PickerResources {
    /// What the scheduler reserves for the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<CpuMemory>,
    /// What the container may use at most (each at least its request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<CpuMemory>,
}

/// A CPU and a memory quantity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuMemory {
    /// CPU (a Kubernetes quantity such as `100m` or `2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory (a Kubernetes quantity such as `256Mi` or `1Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

/// A reference to a Gateway API Gateway (an HTTPRoute parentRef).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GatewayRef {
    /// Name of the Gateway.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the Gateway; the service's namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// Accelerator families infergate knows the resource names of.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    JsonSchema,
)]
pub enum AcceleratorType {
    /// `nvidia.com/gpu`
    #[serde(rename = "nvidia")]
    Nvidia,
    /// `amd.com/gpu`
    #[serde(rename = "amd")]
    Amd,
    /// `habana.ai/gaudi`
    #[serde(rename = "intel-gaudi")]
    IntelGaudi,
    /// `google.com/tpu`
    #[serde(rename = "google-tpu")]
    GoogleTpu,
    /// No accelerator: CPU only.
    #[default]
    #[serde(rename = "none")]
    None,
}

impl AcceleratorType {
    /// The name as written in manifests.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Nvidia => "nvidia",
            Self::Amd => "amd",
            Self::IntelGaudi => "intel-gaudi",
            Self::GoogleTpu => "google-tpu",
            Self::None => "none",
        }
    }

    /// The extended resource name for this accelerator, `None` for `none`.
    #[must_use]
    pub fn resource_name(self) -> Option<&'static str> {
        match self {
            Self::Nvidia => Some("nvidia.com/gpu"),
            Self::Amd => Some("amd.com/gpu"),
            Self::IntelGaudi => Some("habana.ai/gaudi"),
            Self::GoogleTpu => Some("google.com/tpu"),
            Self::None => None,
        }
    }
}

impl std::fmt::Display for AcceleratorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an HTTPRoute selects a service's requests.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RouteMatch {
    /// By path prefix (the route path template).
    #[default]
    Path,
    /// By the model name header: one rule per served name.
    ModelName,
    /// Both: the path rule and the name rules.
    Both,
}

impl RouteMatch {
    /// Whether the route has a rule per served name.
    #[must_use]
    pub fn by_name(self) -> bool {
        matches!(self, Self::ModelName | Self::Both)
    }
}
