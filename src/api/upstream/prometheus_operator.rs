//! The few Prometheus Operator PodMonitor (`monitoring.coreos.com/v1`)
//! types infergate sets (built in `reconcile::children::podmonitor`).
//!
//! Only the fields infergate writes are modelled; the end-to-end tests
//! install the published PodMonitor CRD, and `tests/suite/upstream_schema.rs`
//! checks every field written here against it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API version the reconciler writes.
pub const API_VERSION: &str = "monitoring.coreos.com/v1";
/// The resource name discovery lists for PodMonitor.
pub const PLURAL: &str = "podmonitors";

/// Desired state of a PodMonitor.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "monitoring.coreos.com",
    version = "v1",
    kind = "PodMonitor",
    plural = "podmonitors",
    namespaced,
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct PodMonitorSpec {
    /// The pods scraped (in the PodMonitor's own namespace).
    pub selector: LabelSelector,
    /// Pod labels copied onto every scraped series.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_target_labels: Vec<String>,
    /// How each pod is scraped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
}

/// One scrape endpoint of the selected pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMetricsEndpoint {
    /// The container port number serving the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_number: Option<i32>,
    /// The HTTP path of the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The scrape interval (a Prometheus duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}
