//! `ClusterInferencePolicy` and `InferencePolicy` at `infergate.dev/v1beta1`:
//! defaults and limits for inference services, layered by priority.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    AcceleratorType, BackendKind, EndpointPickerSpec, GatewayRef, HealthCheckSpec, MetricsSpec,
};

/// Cluster-wide defaults and limits for the namespaces a selector matches.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infergate.dev",
    version = "v1beta1",
    kind = "ClusterInferencePolicy",
    shortname = "cip",
    category = "infergate",
    status = "PolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Enforcement",
        type_ = "string",
        json_path = ".spec.enforcement"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInferencePolicySpec {
    /// Namespaces the policy applies to; every namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Higher priority wins for defaults; ties are broken by name.
    #[serde(default)]
    pub priority: i32,
    /// `Deny` (default) rejects violations; `Warn` admits them with warnings.
    #[serde(default)]
    pub enforcement: Enforcement,
    /// Values filled into services that leave them unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<PolicyDefaults>,
    /// Bounds every service must respect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PolicyLimits>,
}

/// Defaults and limits for the inference services of one namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infergate.dev",
    version = "v1beta1",
    kind = "InferencePolicy",
    namespaced,
    // Not `ip`: that is the built-in IPAddress's short name (Kubernetes 1.33+).
    shortname = "infpol",
    category = "infergate",
    status = "PolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "Priority", type_ = "integer", json_path = ".spec.priority"),
    printcolumn(
        name = "Enforcement",
        type_ = "string",
        json_path = ".spec.enforcement"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct InferencePolicySpec {
    /// Higher priority wins for defaults; ties are broken by name.
    #[serde(default)]
    pub priority: i32,
    /// `Deny` (default) rejects violations; `Warn` admits them with warnings.
    #[serde(default)]
    pub enforcement: Enforcement,
    /// Values filled into services that leave them unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<PolicyDefaults>,
    /// Bounds every service must respect (may only tighten cluster limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PolicyLimits>,
}

/// What happens to a service that breaks a policy's limits.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Enforcement {
    /// Reject the service.
    #[default]
    Deny,
    /// Admit it with a warning.
    Warn,
}

/// Defaults a policy supplies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDefaults {
    /// Engine image, port and `/dev/shm` size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineDefaults>,
    /// The accelerator class of services that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<AcceleratorDefaults>,
    /// Placement of the engine pods, field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<super::v1beta1::PlacementSpec>,
    /// Replicas of the primary track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Autoscaling target, applied to services that set `autoscaling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingDefaults>,
    /// CPU and memory per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceDefaults>,
    /// Health check path, interval and timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheckSpec>,
    /// Route template, request timeout and Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<RoutingDefaults>,
    /// Metrics port, path and scrape interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsSpec>,
    /// The rollout plan (strategy, steps, interval, progressDeadline,
    /// maxRestarts, analysis), whole, for services whose `rollout` names
    /// none of these; `onFullPool` and `maxUnavailable` are defaulted field
    /// by field, and `canary` is denied here (`defaults.canary.onFullPool`
    /// defaults it). Only a ClusterInferencePolicy may name the Prometheus address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::rollout::RolloutSpec>,
    /// What canaries do on a full pool: `spec.canary.onFullPool` and, under
    /// strategy `Canary`, `spec.rollout.canary.onFullPool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryDefaults>,
}

/// Canary defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryDefaults {
    /// `Wait` or `Borrow`, for a manual canary and a `Canary` rollout's track.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_full_pool: Option<super::rollout::CanaryOnFullPool>,
}

impl PolicyDefaults {
    /// `routing.endpointPicker`, when set.
    #[must_use]
    pub fn endpoint_picker(&self) -> Option<&EndpointPickerSpec> {
        self.routing.as_ref()?.endpoint_picker.as_ref()
    }
}

/// Engine defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineDefaults {
    /// Engine container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Engine port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Size of the in-memory `/dev/shm`, for every service the policy applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", length(min = 1, max = 64))]
    pub shm_size: Option<Quantity>,
    /// Share of each GPU's memory the engine may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self > 0.0 && self <= 1.0").message("defaults.engine.gpuMemoryUtilization must be above 0 and at most 1"))]
    pub gpu_memory_utilization: Option<f64>,
}

/// Accelerator defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AcceleratorDefaults {
    /// The AcceleratorClass of services that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub class: Option<String>,
}

/// Autoscaling defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AutoscalingDefaults {
    /// Target average CPU utilisation in percent.
    #[serde(
        default,
        rename = "targetCPUUtilizationPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub target_cpu_utilization_percent: Option<i32>,
}

/// Resource defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDefaults {
    /// CPU per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

/// Routing defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoutingDefaults {
    /// Route path template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_template: Option<String>,
    /// Gateway API request timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$')").message("routing.requestTimeout must be a Gateway API duration such as 30s, 5m or 1h30m"))]
    pub request_timeout: Option<String>,
    /// Gateway the HTTPRoute attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayRef>,
    /// `Service` or `InferencePool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_kind: Option<BackendKind>,
    /// Endpoint picker defaults, field by field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker: Option<EndpointPickerSpec>,
    /// `Path`, `ModelName` or `Both`.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub r#match: Option<super::common::RouteMatch>,
    /// The model name header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub model_name_header: Option<String>,
}

/// Limits a policy imposes; unset means no limit from this policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyLimits {
    /// Upper bound for `replicas`, `autoscaling.maxReplicas` and
    /// `routing.endpointPicker.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("limits.maxReplicas must be at least 0"))]
    pub max_replicas: Option<i32>,
    /// Upper bound for `canary.weight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message("limits.maxCanaryWeight must be between 0 and 100"))]
    pub max_canary_weight: Option<i32>,
    /// Upper bound for GPUs per replica (tensor x pipeline).
    #[serde(
        default,
        rename = "maxGPUsPerReplica",
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self >= 0").message("limits.maxGPUsPerReplica must be at least 0"))]
    pub max_gpus_per_replica: Option<i32>,
    /// Nodes one replica may span (default 1). Above 1, a service whose
    /// `tensor x pipeline` exceeds its AcceleratorClass's `devicesPerNode`
    /// runs each replica as a LeaderWorkerSet group of `tensor x pipeline /
    /// devicesPerNode` pods, one node each (tensor parallel within a node,
    /// pipeline stages across nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("limits.maxNodesPerReplica must be at least 1"))]
    pub max_nodes_per_replica: Option<i32>,
    /// Upper bound for the LoRA adapters of a service (`model.adapters`);
    /// 8 where no policy sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("limits.maxAdapters must be at least 0"))]
    pub max_adapters: Option<i32>,
    /// Glob patterns (`*` any run of characters) an adapter's `source`
    /// must match (absent: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 1024)))]
    pub allowed_adapter_sources: Option<Vec<String>>,
    /// Upper bound for `routing.requestTimeout` (a Gateway API duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$')").message("limits.maxRequestTimeout must be a Gateway API duration such as 30m"))]
    pub max_request_timeout: Option<String>,
    /// Image prefixes every image must start with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_image_registries: Option<Vec<String>>,
    /// Accelerator types services may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_accelerators: Option<Vec<AcceleratorType>>,
    /// AcceleratorClasses services may name. Where it (or
    /// `maxCostPerHourPerNamespace`) applies, a service with GPUs must have
    /// a class, and its `placement` may not select or tolerate the pool of
    /// a class the list does not allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub allowed_accelerator_classes: Option<Vec<String>>,
    /// PriorityClasses `placement.priorityClassName` may name (absent: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    pub allowed_priority_classes: Option<Vec<String>>,
    /// Hosts `spec.graph.url` may name (`graphs.example.com`,
    /// `graph-api.ml.svc:8443`, `*.ml.example.com`); a literal entry also
    /// lets the fetcher reach an internal address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 260)))]
    pub allowed_graph_hosts: Option<Vec<String>>,
    /// Lower bound for `rollout.interval` (a GEP-2257 duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]{1,5}(h|m|s|ms)){1,4}$')").message("limits.minRolloutInterval must be a Gateway API duration such as 1m"))]
    pub min_rollout_interval: Option<String>,
    /// Upper bound for `rollout.maxUnavailable` (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("limits.maxUnavailable must be at least 1"))]
    pub max_unavailable: Option<i32>,
    /// Deny services whose `model.ref` no ModelProfile lists (a curated catalogue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_model_profile: Option<bool>,
    /// GPUs the InferenceServices of one namespace may hold at once (their charges).
    #[serde(
        default,
        rename = "maxGPUsPerNamespace",
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self >= 0").message("limits.maxGPUsPerNamespace must be at least 0"))]
    pub max_gpus_per_namespace: Option<i64>,
    /// Cost per hour the InferenceServices of one namespace may hold at
    /// once, a decimal string such as `"120.50"`. Where it applies, a
    /// service with GPUs must have an AcceleratorClass (cost comes from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+([.][0-9]+)?$')").message("limits.maxCostPerHourPerNamespace must be a decimal such as 120.50"))]
    pub max_cost_per_hour_per_namespace: Option<String>,
}

/// Status of a policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions in the Kubernetes shape.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "crate::api::conditions::serialize"
    )]
    pub conditions: Vec<Condition>,
}
