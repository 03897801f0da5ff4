//! The KubeRay (`ray.io/v1`) RayService and RayCluster types infergate
//! writes and reads: only the fields it sets or reads are modelled (the
//! RayService is built in `reconcile::children::rayservice`; of a
//! RayCluster, only what scaling reads, in `reconcile::children::raycluster`).
//!
//! Written here rather than taken from a KubeRay crate. The end-to-end
//! tests install KubeRay's published CRDs (and run its operator), and
//! `tests/suite/upstream_schema.rs` checks every field written here against them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API version infergate writes.
pub const API_VERSION: &str = "ray.io/v1";
/// The resource name discovery lists for RayService.
pub const PLURAL: &str = "rayservices";
/// Port of Ray Serve's HTTP proxy.
pub const SERVE_PORT: i32 = 8000;
/// Name of the port KubeRay's serve Service exposes Serve's HTTP proxy on.
pub const SERVE_PORT_NAME: &str = "serve";

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

/// The parts of a KubeRay RayCluster that scaling reads.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "ray.io",
    version = "v1",
    kind = "RayCluster",
    plural = "rayclusters",
    namespaced,
    status = "RayClusterStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterWorkers {
    /// The worker groups (only name and replica counts are read).
    #[serde(default)]
    pub worker_group_specs: Vec<GroupScale>,
}

/// A worker group's name and replica counts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupScale {
    /// `groupName`.
    #[serde(default)]
    pub group_name: String,
    /// `replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `minReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// `maxReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
}

/// What KubeRay reports of a cluster's workers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterStatus {
    /// Workers KubeRay wants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_worker_replicas: Option<i32>,
    /// Workers whose pods are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_worker_replicas: Option<i32>,
    /// Workers available (older KubeRay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_worker_replicas: Option<i32>,
}

fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}
