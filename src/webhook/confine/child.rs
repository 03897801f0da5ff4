//! A written child as far as its checks read it ([`Child`]): its namespace,
//! its owner references and the ServiceAccounts and labels of its pod
//! templates (a Deployment's, a RayService's head and worker groups', or a
//! LeaderWorkerSet's leader and workers').

use std::collections::BTreeMap;

use serde::Deserialize;

/// The pod label that marks an endpoint picker's pods.
pub(super) use crate::api::vocabulary::names::LABEL_COMPONENT as COMPONENT_LABEL;
/// Its value on an endpoint picker's pods.
pub(super) const PICKER_COMPONENT: &str = "endpoint-picker";

/// A child as far as its checks read it: metadata and pod templates.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Child {
    #[serde(default)]
    pub(super) metadata: Meta,
    #[serde(default)]
    pub(super) spec: Option<Spec>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Meta {
    #[serde(default)]
    pub(super) namespace: Option<String>,
    #[serde(default)]
    pub(super) owner_references: Vec<OwnerRef>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct OwnerRef {
    #[serde(default)]
    pub(super) api_version: String,
    #[serde(default)]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) uid: String,
    #[serde(default)]
    pub(super) controller: Option<bool>,
}

/// A Deployment's `spec.template`, a RayService's cluster's templates, or
/// a LeaderWorkerSet's leader and worker templates.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Spec {
    #[serde(default)]
    pub(super) template: Option<Template>,
    #[serde(default)]
    ray_cluster_config: Option<RayCluster>,
    #[serde(default)]
    leader_worker_template: Option<LeaderWorker>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct LeaderWorker {
    #[serde(default)]
    leader_template: Option<Template>,
    #[serde(default)]
    worker_template: Option<Template>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct RayCluster {
    #[serde(default)]
    head_group_spec: Option<Group>,
    #[serde(default)]
    worker_group_specs: Vec<Group>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Group {
    #[serde(default)]
    template: Option<Template>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Template {
    #[serde(default)]
    pub(super) metadata: Option<TemplateMeta>,
    #[serde(default)]
    pub(super) spec: Option<PodSpec>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub(super) struct TemplateMeta {
    #[serde(default)]
    pub(super) labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(super) struct PodSpec {
    #[serde(default)]
    pub(super) service_account_name: Option<String>,
    #[serde(default)]
    pub(super) service_account: Option<String>,
}

impl Child {
    /// The object's `metadata.namespace`.
    #[must_use]
    pub fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    /// Every pod template of the object.
    pub(super) fn templates(&self) -> Vec<&Template> {
        let Some(spec) = &self.spec else {
            return Vec::new();
        };
        let ray = spec.ray_cluster_config.as_ref();
        let group = spec.leader_worker_template.as_ref();
        spec.template
            .iter()
            .chain(group.and_then(|g| g.leader_template.as_ref()))
            .chain(group.and_then(|g| g.worker_template.as_ref()))
            .chain(ray.and_then(|r| r.head_group_spec.as_ref()?.template.as_ref()))
            .chain(
                ray.into_iter()
                    .flat_map(|r| r.worker_group_specs.iter())
                    .filter_map(|g| g.template.as_ref()),
            )
            .collect()
    }
}
