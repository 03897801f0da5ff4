//! The LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`) infergate writes for
//! a replica that spans nodes: only the fields it sets or reads are
//! modelled (the builder is `reconcile::children::lws`).
//!
//! Written here rather than taken from a crate; the end-to-end tests
//! install the project's published CRDs and run its controller, and
//! `tests/suite/upstream_schema.rs` checks every field written here against
//! the CRD.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API version infergate writes.
pub const API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
/// The resource name discovery lists.
pub const PLURAL: &str = "leaderworkersets";
/// The label LWS puts on every pod of a group: the pod's index in its
/// group (the leader's is `"0"`).
pub const LABEL_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// The label LWS puts on every pod of a group: the group's index.
pub const LABEL_GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// The label LWS puts on every pod: the LeaderWorkerSet's name.
pub const LABEL_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// On a LeaderWorkerSet: the node label whose values are the domains one
/// group each may take.
pub const ANNOTATION_EXCLUSIVE_TOPOLOGY: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";
/// The variables LWS's pod webhook gives every pod of a group.
pub const ENV_LEADER_ADDRESS: &str = "LWS_LEADER_ADDRESS";
/// The pod's index in its group (see [`ENV_LEADER_ADDRESS`]).
pub const ENV_WORKER_INDEX: &str = "LWS_WORKER_INDEX";
/// A group's pods restart together when one of them does.
pub const RESTART_RECREATE_GROUP: &str = "RecreateGroupOnPodRestart";
/// Workers start once their leader pod exists.
pub const STARTUP_LEADER_CREATED: &str = "LeaderCreated";
/// The only rollout strategy.
pub const ROLLING_UPDATE: &str = "RollingUpdate";

/// Desired state of a LeaderWorkerSet: `replicas` groups of `size` pods.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "leaderworkerset.x-k8s.io",
    version = "v1",
    kind = "LeaderWorkerSet",
    plural = "leaderworkersets",
    namespaced,
    status = "LeaderWorkerSetStatus",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.hpaPodSelector"}"#,
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetSpec {
    /// Groups (replicas of the model); left to the HPA when it scales them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The pods of one group.
    pub leader_worker_template: LeaderWorkerTemplate,
    /// How a template change rolls over the groups.
    pub rollout_strategy: RolloutStrategy,
    /// When the workers of a group start.
    pub startup_policy: String,
}

/// The leader and worker pods of a group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerTemplate {
    /// Pods per group, the leader included.
    pub size: i32,
    /// The leader's pod (index 0).
    #[schemars(schema_with = "preserve_unknown_object")]
    pub leader_template: PodTemplateSpec,
    /// The workers' pod (indices 1..size).
    #[schemars(schema_with = "preserve_unknown_object")]
    pub worker_template: PodTemplateSpec,
    /// What a failed pod does to its group.
    pub restart_policy: String,
}

/// The rollout of a template change.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    /// Always `RollingUpdate`.
    #[serde(rename = "type")]
    pub type_: String,
    /// How many groups may be down or extra at once.
    pub rolling_update_configuration: RollingUpdateConfiguration,
}

/// Groups down and extra during a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateConfiguration {
    /// Groups below this index keep the old template (0: all roll; the
    /// controller reads it without a default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// Groups that may be unavailable at once.
    #[schemars(schema_with = "int_or_string")]
    pub max_unavailable: IntOrString,
    /// Groups that may be made beyond `replicas`.
    #[schemars(schema_with = "int_or_string")]
    pub max_surge: IntOrString,
}

/// What the LWS controller reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaderWorkerSetStatus {
    /// The generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Groups whose pods are all ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Groups of the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
}

fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-int-or-string": true})
}
