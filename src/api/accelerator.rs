//! `AcceleratorClass` at `infergate.dev/v1beta1`: one GPU node pool as the
//! platform team describes it once (vendor, device memory, devices per
//! node, and the scheduling constraints its nodes need); services name a
//! class in `spec.accelerator.class`.
// kube-derive's repeated `printcolumn(...)` lists look like duplicated
// attributes to clippy; they are distinct columns.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeAffinity, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::AcceleratorType;

/// A pool of accelerator nodes services can name.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "infergate.dev",
    version = "v1beta1",
    kind = "AcceleratorClass",
    shortname = "accel",
    category = "infergate",
    status = "AcceleratorClassStatus",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "Vendor", type_ = "string", json_path = ".spec.vendor"),
    printcolumn(name = "Memory", type_ = "string", json_path = ".spec.memoryPerDevice"),
    printcolumn(
        name = "Devices",
        type_ = "integer",
        json_path = ".spec.devicesPerNode"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorClassSpec {
    /// `nvidia`, `amd`, `intel-gaudi` or `google-tpu`: the device family
    /// (and, unless `resourceName` says otherwise, its resource name).
    #[x_kube(validation = Rule::new("self != 'none'").message("spec.vendor must be nvidia, amd, intel-gaudi or google-tpu"))]
    pub vendor: AcceleratorType,
    /// The extended resource the pods request, when not the vendor's own
    /// (for example `nvidia.com/mig-3g.40gb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')").message("spec.resourceName must be a resource name such as nvidia.com/gpu"))]
    pub resource_name: Option<String>,
    /// Memory of one device, a Kubernetes quantity such as `80Gi`.
    #[schemars(with = "String", length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("spec.memoryPerDevice must be a positive quantity such as 80Gi"))]
    pub memory_per_device: Quantity,
    /// Devices on one node: `tensor x pipeline` of a service must not
    /// exceed it, unless a policy's `limits.maxNodesPerReplica` lets a
    /// replica span several nodes (then it is a multiple of it).
    #[x_kube(validation = Rule::new("self >= 1").message("spec.devicesPerNode must be at least 1"))]
    pub devices_per_node: i32,
    /// Node labels every pod of the pool's services selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Taints of the pool the pods tolerate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Node affinity the pods carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// A node label whose values are the pool's topology domains (a rack,
    /// an NVLink domain): a replica that spans several nodes keeps all of
    /// them in one domain, one replica per domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    pub topology_key: Option<String>,
    /// RuntimeClass of the pods (for example `nvidia`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub runtime_class_name: Option<String>,
    /// Cost of one device for an hour, a decimal such as `4.10`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+([.][0-9]+)?$')").message("spec.costPerDeviceHour must be a decimal such as 4.10"))]
    pub cost_per_device_hour: Option<String>,
}

/// Status of an accelerator class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorClassStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl AcceleratorClassSpec {
    /// The extended resource a pod of this class requests.
    #[must_use]
    pub fn resource(&self) -> &str {
        self.resource_name
            .as_deref()
            .or_else(|| self.vendor.resource_name())
            .unwrap_or_default()
    }
}
