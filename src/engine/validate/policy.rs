//! Validation of the policies themselves: their defaults and limits are
//! consistent, and a namespace policy never loosens a cluster one.

use kube::ResourceExt;

use crate::api::policy::{Enforcement, PolicyDefaults, PolicyLimits};
use crate::api::rollout::RolloutSpec;
use crate::api::{AcceleratorType, ClusterInferencePolicy, InferencePolicy};
use crate::engine::context::Context;
use crate::engine::duration::parse_gateway_duration;
use crate::engine::field_error::{FieldError, FieldErrorReason};
use crate::engine::policy::{Layer, cluster_layers};
use crate::engine::verdict::Verdict;
use crate::engine::{graph_source, promql, rollout, route, selector};

use super::fields::{check_health, check_metrics, check_quantity, quoted_list};

/// Validate a ClusterInferencePolicy.
#[must_use]
pub fn validate_cluster_policy(p: &ClusterInferencePolicy) -> Verdict {
    let mut v = Verdict::default();
    if let Some(sel) = &p.spec.namespace_selector {
        for (suffix, msg) in selector::selector_errors(sel) {
            v.errors.push(FieldError {
                field: format!("spec.namespaceSelector.{suffix}"),
                reason: reason_of(&msg),
                message: msg,
            });
        }
    }
    check_policy_spec(
        &mut v,
        p.spec.defaults.as_ref(),
        p.spec.limits.as_ref(),
        &[],
    );
    if let Some(r) = p.spec.defaults.as_ref().and_then(|d| d.rollout.as_ref()) {
        rollout::check_plan(&mut v.errors, "spec.defaults.rollout", r, true);
        check_default_query(&mut v.errors, r, "default");
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
    let cluster = cluster_layers(ctx);
    check_policy_spec(
        &mut v,
        p.spec.defaults.as_ref(),
        p.spec.limits.as_ref(),
        &cluster,
    );
    // Tenants often control their namespace's policies: no Prometheus address here.
    if let Some(r) = p.spec.defaults.as_ref().and_then(|d| d.rollout.as_ref()) {
        rollout::check_plan(&mut v.errors, "spec.defaults.rollout", r, false);
        let namespace = p.namespace().filter(|n| !n.is_empty());
        let namespace = namespace.as_deref().unwrap_or(ctx.namespace);
        check_default_query(
            &mut v.errors,
            r,
            if namespace.is_empty() {
                "default"
            } else {
                namespace
            },
        );
    }
    v
}

/// A policy's default gate query parses once its placeholders carry
/// `namespace` and a sample service's names.
fn check_default_query(errs: &mut Vec<FieldError>, r: &RolloutSpec, namespace: &str) {
    if let Some(p) = r.analysis.as_ref().and_then(|a| a.prometheus.as_ref()) {
        promql::check_query(
            errs,
            &crate::engine::field_path::Path::new(
                "spec.defaults.rollout.analysis.prometheus.query",
            ),
            &p.query,
            (namespace, "service", "service-canary"),
        );
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

/// Policy rules shared by both kinds. `outer` are the cluster layers a
/// namespace policy must not loosen (empty for a cluster policy).
fn check_policy_spec(
    v: &mut Verdict,
    defaults: Option<&PolicyDefaults>,
    limits: Option<&PolicyLimits>,
    outer: &[Layer<'_>],
) {
    let errs = &mut v.errors;
    let max_timeout = limits.and_then(|l| l.max_request_timeout.as_deref());
    let max_timeout_d = max_timeout.and_then(|s| match parse_gateway_duration(s) {
        Ok(d) => Some(d),
        Err(e) => {
            errs.push(FieldError::invalid(
                "spec.limits.maxRequestTimeout",
                format!("{s:?}"),
                &e,
            ));
            None
        }
    });
    if let Some(s) = limits.and_then(|l| l.min_rollout_interval.as_deref())
        && let Err(e) = parse_gateway_duration(s)
    {
        errs.push(FieldError::invalid(
            "spec.limits.minRolloutInterval",
            format!("{s:?}"),
            &e,
        ));
    }
    if let Some(l) = limits {
        for (field, val, lo, hi) in [
            ("spec.limits.maxReplicas", l.max_replicas, 0, i32::MAX),
            ("spec.limits.maxCanaryWeight", l.max_canary_weight, 0, 100),
            (
                "spec.limits.maxGPUsPerReplica",
                l.max_gpus_per_replica,
                0,
                i32::MAX,
            ),
        ] {
            if let Some(x) = val
                && !(lo..=hi).contains(&x)
            {
                let range = if hi == i32::MAX {
                    format!("must be greater than or equal to {lo}")
                } else {
                    format!("must be between {lo} and {hi}, inclusive")
                };
                errs.push(FieldError::invalid(field, x, &range));
            }
        }
        if let Some(n) = l.max_gpus_per_namespace
            && n < 0
        {
            errs.push(FieldError::invalid(
                "spec.limits.maxGPUsPerNamespace",
                n,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(c) = l.max_cost_per_hour_per_namespace.as_deref()
            && (crate::engine::capacity::charge::decimal(c).is_none()
                || !c.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        {
            errs.push(FieldError::invalid(
                "spec.limits.maxCostPerHourPerNamespace",
                format!("{c:?}"),
                "must be a decimal such as \"120.50\"",
            ));
        }
        if let Some(list) = &l.allowed_graph_hosts {
            errs.extend(graph_source::policy_host_errors(list, None).0);
        }
        if let Some(list) = &l.allowed_image_registries {
            for (i, prefix) in list.iter().enumerate() {
                if prefix.trim().is_empty() {
                    errs.push(FieldError::invalid(
                        format!("spec.limits.allowedImageRegistries[{i}]"),
                        format!("{prefix:?}"),
                        "must not be empty (an empty prefix allows every image)",
                    ));
                }
            }
        }
    }
    if let Some(d) = defaults {
        if let Some(e) = &d.engine {
            if let Some(port) = e.port
                && !(1..=65535).contains(&port)
            {
                errs.push(FieldError::invalid(
                    "spec.defaults.engine.port",
                    port,
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if let Some(img) = &e.image
                && (img.is_empty() || img.chars().any(char::is_whitespace))
            {
                errs.push(FieldError::invalid(
                    "spec.defaults.engine.image",
                    format!("{img:?}"),
                    "must be a non-empty image reference without whitespace",
                ));
            }
        }
        if let Some(r) = d.replicas
            && r < 0
        {
            errs.push(FieldError::invalid(
                "spec.defaults.replicas",
                r,
                "must be greater than or equal to 0",
            ));
        }
        if let Some(t) = d
            .autoscaling
            .as_ref()
            .and_then(|a| a.target_cpu_utilization_percent)
            && !(1..=100).contains(&t)
        {
            errs.push(FieldError::invalid(
                "spec.defaults.autoscaling.targetCPUUtilizationPercent",
                t,
                "must be between 1 and 100, inclusive",
            ));
        }
        if let Some(r) = &d.resources {
            check_quantity(errs, "spec.defaults.resources.cpu", r.cpu.as_ref());
            check_quantity(errs, "spec.defaults.resources.memory", r.memory.as_ref());
        }
        if let Some(hc) = &d.health_check {
            // Only the fields the policy sets; the rest are built-ins.
            check_health(errs, "spec.defaults.healthCheck", Some(hc));
        }
        check_metrics(errs, "spec.defaults.metrics", d.metrics.as_ref());
        if let Some(r) = &d.routing {
            if let Some(t) = &r.path_template
                && let Err(e) = route::check_template_on_sample(t)
            {
                errs.push(FieldError::invalid(
                    "spec.defaults.routing.pathTemplate",
                    format!("{t:?}"),
                    &format!("{e} (rendered on a sample service)"),
                ));
            }
            if let Some(gw) = &r.gateway
                && gw.name.is_empty()
            {
                errs.push(FieldError::required(
                    "spec.defaults.routing.gateway.name",
                    "",
                ));
            }
            if let Some(t) = &r.request_timeout {
                match parse_gateway_duration(t) {
                    Err(e) => errs.push(FieldError::invalid(
                        "spec.defaults.routing.requestTimeout",
                        format!("{t:?}"),
                        &e,
                    )),
                    Ok(d) => {
                        if let Some(max) = max_timeout_d
                            && d > max
                        {
                            errs.push(FieldError::invalid(
                                "spec.defaults.routing.requestTimeout",
                                format!("{t:?}"),
                                &format!(
                                    "must be at most spec.limits.maxRequestTimeout ({})",
                                    max_timeout.unwrap_or_default()
                                ),
                            ));
                        }
                    }
                }
            }
        }
        // Defaults above this policy's own limits.
        for (field, replicas) in replica_defaults(d) {
            if let (Some(r), Some(max)) = (replicas, limits.and_then(|l| l.max_replicas))
                && r > max
            {
                errs.push(FieldError::invalid(
                    field,
                    r,
                    &format!("must be at most spec.limits.maxReplicas ({max})"),
                ));
            }
        }
        for (field, img) in image_defaults(d) {
            if let (Some(img), Some(list)) = (
                img,
                limits.and_then(|l| l.allowed_image_registries.as_ref()),
            ) && !list.iter().any(|p| img.starts_with(p.as_str()))
            {
                errs.push(FieldError::invalid(
                    field,
                    format!("{img:?}"),
                    &format!(
                        "must start with one of spec.limits.allowedImageRegistries ({})",
                        quoted_list(list)
                    ),
                ));
            }
        }
        if let (Some(class), Some(list)) = (
            d.accelerator.as_ref().and_then(|a| a.class.as_deref()),
            limits.and_then(|l| l.allowed_accelerator_classes.as_ref()),
        ) && !list.iter().any(|c| c == class)
        {
            errs.push(FieldError::invalid(
                "spec.defaults.accelerator.class",
                format!("{class:?}"),
                &format!(
                    "must be one of spec.limits.allowedAcceleratorClasses ({})",
                    quoted_list(list)
                ),
            ));
        }
        if let (Some(name), Some(list)) = (
            default_priority_class(d),
            limits.and_then(|l| l.allowed_priority_classes.as_ref()),
        ) && !list.iter().any(|c| c == name)
        {
            errs.push(FieldError::invalid(
                "spec.defaults.placement.priorityClassName",
                format!("{name:?}"),
                &format!(
                    "must be one of spec.limits.allowedPriorityClasses ({})",
                    quoted_list(list)
                ),
            ));
        }
        if let Some(q) = d.engine.as_ref().and_then(|e| e.shm_size.as_ref()) {
            check_quantity(errs, "spec.defaults.engine.shmSize", Some(q));
        }
        if let Some(u) = d.engine.as_ref().and_then(|e| e.gpu_memory_utilization)
            && !(u > 0.0 && u <= 1.0)
        {
            errs.push(FieldError::invalid(
                "spec.defaults.engine.gpuMemoryUtilization",
                u,
                "must be above 0 and at most 1",
            ));
        }
        super::picker::check_policy_picker(errs, d);
    }

    // A namespace policy against the cluster policies over it.
    for outer_layer in outer {
        let Some(ol) = outer_layer.limits else {
            continue;
        };
        let mut out: Vec<FieldError> = Vec::new();
        let who = outer_layer.display();
        let l = limits.cloned().unwrap_or_default();
        for (field, mine, theirs) in [
            ("spec.limits.maxReplicas", l.max_replicas, ol.max_replicas),
            (
                "spec.limits.maxCanaryWeight",
                l.max_canary_weight,
                ol.max_canary_weight,
            ),
            (
                "spec.limits.maxGPUsPerReplica",
                l.max_gpus_per_replica,
                ol.max_gpus_per_replica,
            ),
        ] {
            if let (Some(m), Some(t)) = (mine, theirs)
                && m > t
            {
                out.push(FieldError::invalid(
                    field,
                    m,
                    &format!("may not loosen the limit {t} of {who}"),
                ));
            }
        }
        if let (Some(m), Some(t)) = (
            l.max_request_timeout.as_deref(),
            ol.max_request_timeout.as_deref(),
        ) && let (Ok(md), Ok(td)) = (parse_gateway_duration(m), parse_gateway_duration(t))
            && md > td
        {
            out.push(FieldError::invalid(
                "spec.limits.maxRequestTimeout",
                format!("{m:?}"),
                &format!("may not loosen the limit {t} of {who}"),
            ));
        }
        if let (Some(mine), Some(theirs)) =
            (&l.allowed_image_registries, &ol.allowed_image_registries)
        {
            for (i, p) in mine.iter().enumerate() {
                if !theirs.iter().any(|t| p.starts_with(t.as_str())) {
                    out.push(FieldError::invalid(
                        format!("spec.limits.allowedImageRegistries[{i}]"),
                        format!("{p:?}"),
                        &format!(
                            "may not loosen the allowed registries {} of {who}",
                            quoted_list(theirs)
                        ),
                    ));
                }
            }
        }
        if let (Some(mine), Some(theirs)) = (&l.allowed_graph_hosts, &ol.allowed_graph_hosts) {
            out.extend(graph_source::policy_host_errors(mine, Some((theirs, &who))).1);
        }
        if let (Some(mine), Some(theirs)) = (&l.allowed_accelerators, &ol.allowed_accelerators) {
            for (i, a) in mine.iter().enumerate() {
                if *a != AcceleratorType::None && !theirs.contains(a) {
                    out.push(FieldError::invalid(
                        format!("spec.limits.allowedAccelerators[{i}]"),
                        format!("{:?}", a.as_str()),
                        &format!(
                            "may not loosen the allowed accelerators {} of {who}",
                            quoted_list(theirs)
                        ),
                    ));
                }
            }
        }
        if let (Some(mine), Some(theirs)) = (
            &l.allowed_accelerator_classes,
            &ol.allowed_accelerator_classes,
        ) {
            for (i, c) in mine.iter().enumerate() {
                if !theirs.contains(c) {
                    out.push(FieldError::invalid(
                        format!("spec.limits.allowedAcceleratorClasses[{i}]"),
                        format!("{c:?}"),
                        &format!(
                            "may not loosen the allowed accelerator classes {} of {who}",
                            quoted_list(theirs)
                        ),
                    ));
                }
            }
        }
        if let (Some(mine), Some(theirs)) =
            (&l.allowed_priority_classes, &ol.allowed_priority_classes)
        {
            for (i, c) in mine.iter().enumerate() {
                if !theirs.contains(c) {
                    out.push(FieldError::invalid(
                        format!("spec.limits.allowedPriorityClasses[{i}]"),
                        format!("{c:?}"),
                        &format!(
                            "may not loosen the allowed priority classes {} of {who}",
                            quoted_list(theirs)
                        ),
                    ));
                }
            }
        }
        if let Some(d) = defaults {
            if let (Some(class), Some(list)) = (
                d.accelerator.as_ref().and_then(|a| a.class.as_deref()),
                ol.allowed_accelerator_classes.as_ref(),
            ) && !list.iter().any(|c| c == class)
            {
                out.push(FieldError::invalid(
                    "spec.defaults.accelerator.class",
                    format!("{class:?}"),
                    &format!("must be one of {} ({who})", quoted_list(list)),
                ));
            }
            if let (Some(name), Some(list)) = (
                default_priority_class(d),
                ol.allowed_priority_classes.as_ref(),
            ) && !list.iter().any(|c| c == name)
            {
                out.push(FieldError::invalid(
                    "spec.defaults.placement.priorityClassName",
                    format!("{name:?}"),
                    &format!("must be one of {} ({who})", quoted_list(list)),
                ));
            }
            for (field, replicas) in replica_defaults(d) {
                if let (Some(r), Some(max)) = (replicas, ol.max_replicas)
                    && r > max
                {
                    out.push(FieldError::invalid(
                        field,
                        r,
                        &format!("must be at most {max} ({who})"),
                    ));
                }
            }
            if let (Some(t), Some(max)) = (
                d.routing
                    .as_ref()
                    .and_then(|r| r.request_timeout.as_deref()),
                ol.max_request_timeout.as_deref(),
            ) && let (Ok(td), Ok(md)) = (parse_gateway_duration(t), parse_gateway_duration(max))
                && td > md
            {
                out.push(FieldError::invalid(
                    "spec.defaults.routing.requestTimeout",
                    format!("{t:?}"),
                    &format!("must be at most {max} ({who})"),
                ));
            }
            for (field, img) in image_defaults(d) {
                if let (Some(img), Some(list)) = (img, ol.allowed_image_registries.as_ref())
                    && !list.iter().any(|p| img.starts_with(p.as_str()))
                {
                    out.push(FieldError::invalid(
                        field,
                        format!("{img:?}"),
                        &format!("must start with one of {} ({who})", quoted_list(list)),
                    ));
                }
            }
        }
        match outer_layer.enforcement {
            Enforcement::Deny => v.errors.extend(out),
            Enforcement::Warn => v.warnings.extend(out.iter().map(ToString::to_string)),
        }
    }
}

/// The PriorityClass a policy defaults.
fn default_priority_class(d: &PolicyDefaults) -> Option<&str> {
    d.placement.as_ref()?.priority_class_name.as_deref()
}

/// The replica counts a policy defaults, by field.
fn replica_defaults(d: &PolicyDefaults) -> [(&'static str, Option<i32>); 2] {
    [
        ("spec.defaults.replicas", d.replicas),
        (
            "spec.defaults.routing.endpointPicker.replicas",
            d.endpoint_picker().and_then(|e| e.replicas),
        ),
    ]
}

/// The images a policy defaults, by field.
fn image_defaults(d: &PolicyDefaults) -> [(&'static str, Option<&str>); 2] {
    [
        (
            "spec.defaults.engine.image",
            d.engine.as_ref().and_then(|e| e.image.as_deref()),
        ),
        (
            "spec.defaults.routing.endpointPicker.image",
            d.endpoint_picker().and_then(|e| e.image.as_deref()),
        ),
    ]
}
