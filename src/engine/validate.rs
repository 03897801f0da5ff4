//! Validation of services and policies (API.md sections 2 and 4).

use crate::api::{ClusterInferencePolicy, InferencePolicy, v1beta1::InferenceService};

use super::{Context, Verdict};

/// Validate a (defaulted) service; `old` is the stored object on UPDATE.
#[must_use]
pub fn validate_service(
    svc: &InferenceService,
    old: Option<&InferenceService>,
    ctx: &Context,
) -> Verdict {
    let _ = (svc, old, ctx);
    Verdict::default()
}

/// Validate a ClusterInferencePolicy.
#[must_use]
pub fn validate_cluster_policy(p: &ClusterInferencePolicy) -> Verdict {
    let _ = p;
    Verdict::default()
}

/// Validate an InferencePolicy against the cluster policies that apply to its namespace.
#[must_use]
pub fn validate_namespaced_policy(p: &InferencePolicy, ctx: &Context) -> Verdict {
    let _ = (p, ctx);
    Verdict::default()
}
