//! The HorizontalPodAutoscaler of the primary track.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use kube::Resource;

use super::error::BuildError;
use super::lws::LeaderWorkerSet;
use super::meta::{Track, child_meta};
use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::engine::builtin::DEFAULT_TARGET_CPU;

/// HorizontalPodAutoscaler `S` (autoscaling/v2) on the primary Deployment,
/// or on its LeaderWorkerSet when a replica spans nodes (`groups`: the
/// HPA then scales whole groups through its scale subresource, and
/// averages over the leaders LWS's `hpaPodSelector` selects).
pub fn hpa(
    svc: &InferenceService,
    groups: bool,
) -> Result<Option<HorizontalPodAutoscaler>, BuildError> {
    let Some(a) = svc.spec.autoscaling.as_ref() else {
        return Ok(None);
    };
    Ok(Some(HorizontalPodAutoscaler {
        metadata: child_meta(svc, engine::primary_name(svc), Track::Primary)?,
        spec: HorizontalPodAutoscalerSpec {
            scale_target_ref: if groups {
                CrossVersionObjectReference {
                    api_version: Some(LeaderWorkerSet::api_version(&()).into_owned()),
                    kind: LeaderWorkerSet::kind(&()).into_owned(),
                    name: engine::names::lws_name(&engine::primary_name(svc)),
                }
            } else {
                CrossVersionObjectReference {
                    api_version: Some(Deployment::api_version(&()).into_owned()),
                    kind: Deployment::kind(&()).into_owned(),
                    name: engine::primary_name(svc),
                }
            },
            min_replicas: Some(a.min_replicas),
            max_replicas: a.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".to_owned(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".to_owned(),
                    target: MetricTarget {
                        type_: "Utilization".to_owned(),
                        average_utilization: Some(
                            a.target_cpu_utilization_percent
                                .unwrap_or(DEFAULT_TARGET_CPU),
                        ),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            behavior: None,
        },
        status: None,
    }))
}
