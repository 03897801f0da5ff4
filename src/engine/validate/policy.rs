//! Validation of the policies themselves: their defaults and limits are
//! consistent (`policy`, `policy_defaults`), and a namespace policy never
//! loosens a cluster one (`policy_outer`).

use kube::ResourceExt;

use crate::api::policy::{PolicyDefaults, PolicyLimits};
use crate::api::rollout::RolloutSpec;
use crate::api::{ClusterInferencePolicy, InferencePolicy};
use crate::engine::context::Context;
use crate::engine::field_error::{FieldError, FieldErrorReason};
use crate::engine::field_path::Path;
use crate::engine::policy::{Layer, cluster_layers};
use crate::engine::verdict::Verdict;
use crate::engine::{graph_source, rollout, selector};

use super::fields::{check_duration, check_gate_query};

/// Validate a ClusterInferencePolicy.
#[must_use]
pub fn validate_cluster_policy(p: &ClusterInferencePolicy) -> Verdict {
    let mut v = Verdict::default();
    let spec = Path::new("spec");
    if let Some(sel) = &p.spec.namespace_selector {
        let at = spec.child("namespaceSelector");
        for (suffix, msg) in selector::selector_errors(sel) {
            v.errors.push(FieldError {
                field: format!("{at}.{suffix}"),
                reason: reason_of(&msg),
                message: msg,
            });
        }
    }
    check_policy_spec(
        &mut v,
        &spec,
        p.spec.defaults.as_ref(),
        p.spec.limits.as_ref(),
        &[],
    );
    if let Some(r) = p.spec.defaults.as_ref().and_then(|d| d.rollout.as_ref()) {
        let defaults = spec.child("defaults");
        check_default_rollout(&mut v.errors, &defaults.child("rollout"), r, None);
    }
    v
}

/// Validate an InferencePolicy, also against the ClusterInferencePolicy
/// objects that apply to its namespace (`ctx.namespace`, `ctx.namespace_labels`):
/// a namespace policy may tighten a cluster limit, never loosen it, and its
/// defaults must respect the cluster limits.
#[must_use]
pub fn validate_namespaced_policy(p: &InferencePolicy, ctx: &Context) -> Verdict {
    let mut v = Verdict::default();
    let spec = Path::new("spec");
    let cluster = cluster_layers(ctx);
    check_policy_spec(
        &mut v,
        &spec,
        p.spec.defaults.as_ref(),
        p.spec.limits.as_ref(),
        &cluster,
    );
    // Tenants often control their namespace's policies: no Prometheus address here.
    if let Some(r) = p.spec.defaults.as_ref().and_then(|d| d.rollout.as_ref()) {
        let namespace = p.namespace().filter(|n| !n.is_empty());
        let namespace = namespace.as_deref().unwrap_or(ctx.namespace);
        let defaults = spec.child("defaults");
        check_default_rollout(
            &mut v.errors,
            &defaults.child("rollout"),
            r,
            Some(namespace),
        );
    }
    v
}

/// A policy's default rollout plan (`at` is `spec.defaults.rollout`),
/// without a `canary` block (`defaults.canary` defaults it); the
/// Prometheus address is allowed only in a ClusterInferencePolicy (no
/// `namespace`). The gate query parses once its placeholders carry the
/// namespace (`default` for a cluster policy) and a sample service's names.
fn check_default_rollout(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    r: &RolloutSpec,
    namespace: Option<&str>,
) {
    rollout::check_plan(errs, at, r, namespace.is_none());
    if r.canary.is_some() {
        errs.push(FieldError::forbidden(
            &at.child("canary"),
            "set defaults.canary.onFullPool: it defaults the canary of a Canary rollout and a manual spec.canary alike",
        ));
    }
    let namespace = namespace.filter(|n| !n.is_empty()).unwrap_or("default");
    if let Some(p) = r.analysis.as_ref().and_then(|a| a.prometheus.as_ref()) {
        check_gate_query(errs, at, p, (namespace, "service", "service-canary"));
    }
}

fn reason_of(msg: &str) -> FieldErrorReason {
    use FieldErrorReason as R;
    if msg.starts_with("Required value") {
        R::Required
    } else if msg.starts_with("Forbidden") {
        R::Forbidden
    } else if msg.starts_with("Unsupported value") {
        R::NotSupported
    } else {
        R::Invalid
    }
}

/// Policy rules shared by both kinds (`spec` is the policy's spec path).
/// `outer` are the cluster layers a namespace policy must not loosen
/// (empty for a cluster policy).
fn check_policy_spec(
    v: &mut Verdict,
    spec: &Path<'_>,
    defaults: Option<&PolicyDefaults>,
    limits: Option<&PolicyLimits>,
    outer: &[Layer<'_>],
) {
    let max_timeout = check_limits(&mut v.errors, &spec.child("limits"), limits);
    if let Some(d) = defaults {
        super::policy_defaults::check_defaults(&mut v.errors, spec, d, limits, max_timeout);
    }
    for outer_layer in outer {
        super::policy_outer::check_against(v, spec, defaults, limits, outer_layer);
    }
}

/// A policy's own limits (`at` is `spec.limits`): durations that parse,
/// counts in range, a cost that is a decimal, host and registry lists
/// without empty entries. Returns `maxRequestTimeout`, as written and read,
/// when it parses.
fn check_limits<'l>(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    limits: Option<&'l PolicyLimits>,
) -> Option<(&'l str, std::time::Duration)> {
    let max_timeout = limits.and_then(|l| l.max_request_timeout.as_deref());
    let max_timeout = max_timeout
        .and_then(|s| check_duration(errs, &at.child("maxRequestTimeout"), s).map(|d| (s, d)));
    if let Some(s) = limits.and_then(|l| l.min_rollout_interval.as_deref()) {
        check_duration(errs, &at.child("minRolloutInterval"), s);
    }
    if let Some(l) = limits {
        check_limit_counts(errs, at, l);
        if let Some(list) = &l.allowed_graph_hosts {
            let hosts = at.child("allowedGraphHosts");
            errs.extend(graph_source::policy_host_errors(&hosts, list, None).0);
        }
        if let Some(list) = &l.allowed_image_registries {
            let registries = at.child("allowedImageRegistries");
            for (i, prefix) in list.iter().enumerate() {
                if prefix.trim().is_empty() {
                    errs.push(FieldError::invalid(
                        &registries.index(i),
                        format!("{prefix:?}"),
                        "must not be empty (an empty prefix allows every image)",
                    ));
                }
            }
        }
    }
    max_timeout
}

/// The counts a policy bounds are in range; its cost bound is a decimal.
fn check_limit_counts(errs: &mut Vec<FieldError>, at: &Path<'_>, l: &PolicyLimits) {
    for (field, val, lo, hi) in [
        ("maxReplicas", l.max_replicas, 0, i32::MAX),
        ("maxCanaryWeight", l.max_canary_weight, 0, 100),
        ("maxGPUsPerReplica", l.max_gpus_per_replica, 0, i32::MAX),
        ("maxUnavailable", l.max_unavailable, 1, i32::MAX),
        ("maxNodesPerReplica", l.max_nodes_per_replica, 1, i32::MAX),
    ] {
        if let Some(x) = val
            && !(lo..=hi).contains(&x)
        {
            let range = if hi == i32::MAX {
                format!("must be greater than or equal to {lo}")
            } else {
                format!("must be between {lo} and {hi}, inclusive")
            };
            errs.push(FieldError::invalid(&at.child(field), x, &range));
        }
    }
    super::fields::check_at_least(
        errs,
        &at.child("maxGPUsPerNamespace"),
        l.max_gpus_per_namespace,
        0,
    );
    if let Some(c) = l.max_cost_per_hour_per_namespace.as_deref()
        && (crate::engine::capacity::charge::decimal(c).is_none()
            || !c.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
    {
        errs.push(FieldError::invalid(
            &at.child("maxCostPerHourPerNamespace"),
            format!("{c:?}"),
            "must be a decimal such as \"120.50\"",
        ));
    }
}
