//! The Prometheus Operator PodMonitor (`monitoring.coreos.com/v1`) that
//! scrapes a service's engine metrics; its wire types are the API's
//! ([`crate::api::upstream::prometheus_operator`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::deployment::engine_port;
use super::error::BuildError;
use super::meta::{LABEL_SERVICE, LABEL_TRACK, Track, child_meta};
use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::engine::builtin::{DEFAULT_METRICS_INTERVAL, DEFAULT_METRICS_PATH};
use crate::engine::duration::canonical_gateway_duration;
use kube::ResourceExt;

pub use crate::api::upstream::prometheus_operator::{
    API_VERSION, PLURAL, PodMetricsEndpoint, PodMonitor, PodMonitorSpec,
};

/// PodMonitor `S`: the engine pods of both tracks (selected by the service
/// and track labels, so an endpoint picker's pods, which carry no track,
/// are never scraped), at `spec.metrics`' port, path and interval, with the
/// track as a target label.
pub fn pod_monitor(svc: &InferenceService) -> Result<PodMonitor, BuildError> {
    let metrics = svc.spec.metrics.as_ref();
    let interval = metrics
        .and_then(|m| m.interval.as_deref())
        .unwrap_or(DEFAULT_METRICS_INTERVAL);
    // The canonical form (largest unit first) is also a Prometheus duration.
    let interval =
        canonical_gateway_duration(interval).map_err(|message| BuildError::Duration {
            field: "spec.metrics.interval",
            message,
        })?;
    let mut monitor = PodMonitor::new(
        &engine::primary_name(svc),
        PodMonitorSpec {
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([(LABEL_SERVICE.to_owned(), svc.name_any())])),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: LABEL_TRACK.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(
                        [Track::Primary, Track::Canary]
                            .map(|t| t.as_str().to_owned())
                            .to_vec(),
                    ),
                }]),
            },
            pod_target_labels: vec![LABEL_TRACK.to_owned()],
            pod_metrics_endpoints: vec![PodMetricsEndpoint {
                port_number: Some(metrics.and_then(|m| m.port).unwrap_or(engine_port(svc))),
                path: Some(
                    metrics
                        .and_then(|m| m.path.clone())
                        .unwrap_or_else(|| DEFAULT_METRICS_PATH.to_owned()),
                ),
                interval: Some(interval),
            }],
        },
    );
    monitor.metadata = child_meta(svc, engine::primary_name(svc), Track::Primary)?;
    Ok(monitor)
}
