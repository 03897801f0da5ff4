//! What the free-device watches decode of a Node and of a Pod. Everything
//! else in the object (a pod's environment, volumes, images, probes and
//! managed fields; a node's images, addresses and info) is skipped as it
//! is read, never allocated; only extended resources are kept of a
//! node's allocatable and of a pod's requests.

use std::fmt;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::engine::capacity::nodes::{BLOCKING_EFFECTS, NodeFacts, NodeTaint};
use crate::engine::capacity::room::{
    InitContainer, Requests, device_count, effective_requests, is_extended_resource,
};
use crate::state::kept::kept_metadata;

/// A Node as the free-device watch decodes it.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "Node")]
pub struct RoomNode {
    /// Identity (the watch resumes from its resourceVersion) and labels.
    #[serde(default, deserialize_with = "node_metadata")]
    pub metadata: ObjectMeta,
    /// Whether it is cordoned, and its blocking taints.
    #[serde(default)]
    pub spec: Option<NodeSpecKept>,
    /// Its readiness and extended allocatable.
    #[serde(default)]
    pub status: Option<NodeStatusKept>,
}

kept_metadata! {
    /// A node's metadata: its identity and labels (what node selectors
    /// and affinities read).
    fn node_metadata {
        labels: Option<std::collections::BTreeMap<String, String>>,
    }
}

/// What is kept of a node's spec.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpecKept {
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: Option<bool>,
    /// Its `NoSchedule` and `NoExecute` taints.
    #[serde(default, deserialize_with = "blocking_taints")]
    pub taints: Vec<NodeTaint>,
}

/// What is kept of a node's status.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatusKept {
    /// Its extended resources' allocatable, in devices.
    #[serde(default, deserialize_with = "extended_amounts")]
    pub allocatable: Requests,
    /// Its `Ready` condition is `True`.
    #[serde(default, rename = "conditions", deserialize_with = "ready")]
    pub ready: bool,
}

impl RoomNode {
    /// The facts free devices read of this node.
    #[must_use]
    pub fn facts(&self) -> NodeFacts {
        let spec = self.spec.clone().unwrap_or_default();
        let status = self.status.clone().unwrap_or_default();
        NodeFacts {
            name: self.metadata.name.clone().unwrap_or_default(),
            labels: self.metadata.labels.clone().unwrap_or_default(),
            ready: status.ready,
            unschedulable: spec.unschedulable.unwrap_or(false),
            taints: spec.taints,
            allocatable: status.allocatable,
        }
    }

    /// Whether the node offers any extended resource (a node that offers
    /// none holds no device of any class and is not kept).
    #[must_use]
    pub fn has_devices(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.allocatable.iter().any(|(_, n)| *n > 0))
    }
}

/// A Pod as the free-device watch decodes it: identity, the node it is
/// bound to, whether it has finished, and its effective requests of
/// extended resources. A pod that requests none keeps no node name.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = "Pod")]
pub struct RoomPod {
    /// Identity (name, namespace, uid, resourceVersion).
    #[serde(default, deserialize_with = "pod_metadata")]
    pub metadata: ObjectMeta,
    /// The node and the requests.
    #[serde(default)]
    pub spec: PodSpecKept,
    /// The phase.
    #[serde(default)]
    pub status: PodStatusKept,
}

kept_metadata! {
    /// A pod's metadata: its identity only.
    fn pod_metadata {}
}

/// What is kept of a pod's spec.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(from = "PodSpecWire")]
pub struct PodSpecKept {
    /// `spec.nodeName`: the node it is bound to (only for a pod that
    /// requests an extended resource).
    pub node_name: Option<String>,
    /// Its effective requests of extended resources.
    pub requests: Requests,
}

/// What is kept of a pod's status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodStatusKept {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default)]
    pub phase: Option<String>,
}

impl RoomPod {
    /// Whether the pod has finished (`Succeeded` or `Failed`): its devices
    /// are free again.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecWire {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    containers: Option<Vec<ContainerWire>>,
    #[serde(default)]
    init_containers: Option<Vec<ContainerWire>>,
    #[serde(default, deserialize_with = "extended_amounts")]
    overhead: Requests,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerWire {
    #[serde(default)]
    resources: Option<ResourcesWire>,
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(Default, Deserialize)]
struct ResourcesWire {
    #[serde(default, deserialize_with = "extended_amounts")]
    requests: Requests,
    #[serde(default, deserialize_with = "extended_amounts")]
    limits: Requests,
}

impl ContainerWire {
    /// Its requests; a resource with a limit and no request requests its
    /// limit (the API server defaults it so; kept for objects that skipped
    /// defaulting).
    fn requests(&self) -> Requests {
        let Some(r) = &self.resources else {
            return Requests::new();
        };
        let mut out = r.requests.clone();
        for (name, n) in &r.limits {
            if !out.iter().any(|(k, _)| k == name) {
                out.push((name.clone(), *n));
            }
        }
        out
    }
}

impl From<PodSpecWire> for PodSpecKept {
    fn from(w: PodSpecWire) -> Self {
        let containers: Vec<Requests> = w
            .containers
            .iter()
            .flatten()
            .map(ContainerWire::requests)
            .collect();
        let init: Vec<InitContainer> = w
            .init_containers
            .iter()
            .flatten()
            .map(|c| (c.requests(), c.restart_policy.as_deref() == Some("Always")))
            .collect();
        let requests = effective_requests(&containers, &init, &w.overhead);
        Self {
            node_name: if requests.is_empty() {
                None
            } else {
                w.node_name.filter(|n| !n.is_empty())
            },
            requests,
        }
    }
}

/// A resource list (`{"nvidia.com/gpu": "8", "cpu": "4", ...}`) as its
/// extended resources' device counts; other names (and amounts that are
/// not whole numbers) are skipped unread.
fn extended_amounts<'de, D: Deserializer<'de>>(d: D) -> Result<Requests, D::Error> {
    struct Amounts;
    impl<'de> Visitor<'de> for Amounts {
        type Value = Requests;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of resource names to quantities")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Requests, E> {
            Ok(Requests::new())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Requests, A::Error> {
            let mut out = Requests::new();
            while let Some(ExtendedName(name)) = map.next_key()? {
                match name {
                    Some(name) => {
                        if let Amount(Some(n)) = map.next_value()? {
                            out.push((name, n));
                        }
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }
    d.deserialize_any(Amounts)
}

/// A resource name, kept only when it is an extended resource.
struct ExtendedName(Option<String>);

impl<'de> Deserialize<'de> for ExtendedName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ExtendedName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a resource name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExtendedName, E> {
                Ok(ExtendedName(is_extended_resource(v).then(|| v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A quantity as a device count (`None` when not a whole number).
struct Amount(Option<u64>);

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Amount;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Amount, E> {
                Ok(Amount(device_count(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Amount, E> {
                Ok(Amount(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Amount, E> {
                Ok(Amount(u64::try_from(v).ok()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Amount, E> {
                Ok(Amount(device_count(&v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// A node's taints, only the blocking ones.
fn blocking_taints<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<NodeTaint>, D::Error> {
    #[derive(Deserialize)]
    struct TaintWire {
        #[serde(default)]
        key: String,
        #[serde(default)]
        value: Option<String>,
        #[serde(default)]
        effect: String,
    }
    let taints = Option::<Vec<TaintWire>>::deserialize(d)?.unwrap_or_default();
    Ok(taints
        .into_iter()
        .filter(|t| BLOCKING_EFFECTS.contains(&t.effect.as_str()))
        .map(|t| NodeTaint {
            key: t.key,
            value: t.value.unwrap_or_default(),
            effect: t.effect,
        })
        .collect())
}

/// Whether a node's conditions hold `Ready` `True`.
fn ready<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    struct ConditionWire {
        #[serde(default, rename = "type")]
        kind: String,
        #[serde(default)]
        status: String,
    }
    let conditions = Option::<Vec<ConditionWire>>::deserialize(d)?.unwrap_or_default();
    Ok(conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_node_keeps_labels_readiness_blocking_taints_and_extended_allocatable() {
        let node: RoomNode = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-1", "resourceVersion": "7",
                "labels": {"pool": "h100"},
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "spec": {"unschedulable": true, "taints": [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {"key": "spot", "effect": "PreferNoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "hugepages-2Mi": "0"},
                "capacity": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "MemoryPressure", "status": "False"},
                               {"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "images": [{"names": ["registry.example.com/vllm:0.9"], "sizeBytes": 1}]
            }
        }))
        .expect("node");
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
        assert!(node.metadata.managed_fields.is_none());
        let f = node.facts();
        assert_eq!(f.name, "gpu-1");
        assert_eq!(f.labels["pool"], "h100");
        assert!(f.ready && f.unschedulable);
        assert_eq!(f.taints.len(), 1, "PreferNoSchedule is not kept");
        assert_eq!(f.allocatable, vec![("nvidia.com/gpu".to_owned(), 8)]);
        assert!(node.has_devices());
        let bare: RoomNode =
            serde_json::from_value(json!({"metadata": {"name": "cpu-1"}, "status": {
                "allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "False"}]}}))
            .expect("node");
        assert!(!bare.has_devices());
        assert!(!bare.facts().ready);
    }

    #[test]
    fn a_pod_keeps_its_node_phase_and_effective_extended_requests() {
        let pod: RoomPod = serde_json::from_value(json!({
            "metadata": {"name": "chat-1", "namespace": "team-a", "uid": "u", "resourceVersion": "9",
                "labels": {"app": "chat"}, "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "nodeName": "gpu-1",
                "overhead": {"cpu": "250m"},
                "initContainers": [{"name": "fetch", "image": "x",
                    "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}}}],
                "containers": [
                    {"name": "engine", "image": "vllm", "env": [{"name": "A", "value": "b"}],
                     "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": "2"},
                                   "limits": {"nvidia.com/gpu": "2", "example.com/nic": "1"}}},
                    {"name": "proxy", "image": "envoy", "resources": {}}
                ],
                "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("pod");
        assert_eq!(pod.metadata.name.as_deref(), Some("chat-1"));
        assert!(pod.metadata.labels.is_none());
        assert_eq!(pod.spec.node_name.as_deref(), Some("gpu-1"));
        assert_eq!(
            pod.spec.requests,
            vec![
                ("nvidia.com/gpu".to_owned(), 2),
                ("example.com/nic".to_owned(), 1)
            ]
        );
        assert!(!pod.is_terminal());

        let cpu_only: RoomPod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Succeeded"}
        }))
        .expect("pod");
        assert!(cpu_only.spec.requests.is_empty());
        assert_eq!(
            cpu_only.spec.node_name, None,
            "no node kept for a pod without devices"
        );
        assert!(cpu_only.is_terminal());
    }

    #[test]
    fn a_deleted_object_decodes_from_its_metadata_alone() {
        let pod: RoomPod =
            serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "a"}}))
                .expect("pod");
        assert!(pod.spec.requests.is_empty());
        let node: RoomNode = serde_json::from_value(
            json!({"metadata": {"name": "n"}, "spec": null, "status": null}),
        )
        .expect("node");
        assert!(!node.has_devices());
    }
}
