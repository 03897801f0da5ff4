//! A policy's defaults: each value valid on its own, and within the
//! policy's own limits.

use std::time::Duration;

use crate::api::policy::{EngineDefaults, PolicyDefaults, PolicyLimits, RoutingDefaults};
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::route;

use super::fields::check_at_least;
use super::fields::{
    check_duration, check_health, check_memory_share, check_metrics, check_quantity, quoted_list,
};
use super::service::{check_percent, check_port};

/// The defaults `d` of a policy (`spec` is its spec path) whose own
/// limits are `limits`; `max_timeout` is `limits.maxRequestTimeout`,
/// as written and read, when it parses.
pub(super) fn check_defaults(
    errs: &mut Vec<FieldError>,
    spec: &Path<'_>,
    d: &PolicyDefaults,
    limits: Option<&PolicyLimits>,
    max_timeout: Option<(&str, Duration)>,
) {
    let at = spec.child("defaults");
    let engine = at.child("engine");
    let routing = at.child("routing");
    if let Some(e) = &d.engine {
        check_engine(errs, &engine, e);
    }
    check_at_least(errs, &at.child("replicas"), d.replicas, 0);
    let autoscaling = at.child("autoscaling");
    check_percent(
        errs,
        &autoscaling.child("targetCPUUtilizationPercent"),
        d.autoscaling
            .as_ref()
            .and_then(|a| a.target_cpu_utilization_percent),
    );
    if let Some(r) = &d.resources {
        let resources = at.child("resources");
        check_quantity(errs, &resources.child("cpu"), r.cpu.as_ref());
        check_quantity(errs, &resources.child("memory"), r.memory.as_ref());
    }
    if let Some(hc) = &d.health_check {
        // Only the fields the policy sets; the rest are built-ins.
        check_health(errs, &at.child("healthCheck"), Some(hc));
    }
    check_metrics(errs, &at.child("metrics"), d.metrics.as_ref());
    if let Some(r) = &d.routing {
        check_routing(errs, &routing, r, max_timeout);
    }
    if let Some(l) = limits {
        check_within_own_limits(errs, spec, d, l);
    }
    if let Some(q) = d.engine.as_ref().and_then(|e| e.shm_size.as_ref()) {
        check_quantity(errs, &engine.child("shmSize"), Some(q));
    }
    check_memory_share(
        errs,
        &engine.child("gpuMemoryUtilization"),
        d.engine.as_ref().and_then(|e| e.gpu_memory_utilization),
    );
    super::picker::check_policy_picker(errs, &routing.child("endpointPicker"), d);
}

/// `defaults.engine`: a port, an image reference.
fn check_engine(errs: &mut Vec<FieldError>, at: &Path<'_>, e: &EngineDefaults) {
    check_port(errs, &at.child("port"), e.port);
    if let Some(img) = &e.image
        && (img.is_empty() || img.chars().any(char::is_whitespace))
    {
        errs.push(FieldError::invalid(
            &at.child("image"),
            format!("{img:?}"),
            "must be a non-empty image reference without whitespace",
        ));
    }
}

/// `defaults.routing`: a path template that renders, a Gateway with a
/// name, a request timeout that parses and is within the policy's own bound.
fn check_routing(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    r: &RoutingDefaults,
    max_timeout: Option<(&str, Duration)>,
) {
    if let Some(t) = &r.path_template
        && let Err(e) = route::check_template_on_sample(t)
    {
        errs.push(FieldError::invalid(
            &at.child("pathTemplate"),
            format!("{t:?}"),
            &format!("{e} (rendered on a sample service)"),
        ));
    }
    if let Some(gw) = &r.gateway
        && gw.name.is_empty()
    {
        let gateway = at.child("gateway");
        errs.push(FieldError::required(&gateway.child("name"), ""));
    }
    let Some(t) = &r.request_timeout else { return };
    let field = at.child("requestTimeout");
    if let Some(d) = check_duration(errs, &field, t)
        && let Some((max, max_d)) = max_timeout
        && d > max_d
    {
        errs.push(FieldError::invalid(
            &field,
            format!("{t:?}"),
            &format!("must be at most spec.limits.maxRequestTimeout ({max})"),
        ));
    }
}

/// Defaults above the policy's own limits `l` (`spec` is its spec path).
fn check_within_own_limits(
    errs: &mut Vec<FieldError>,
    spec: &Path<'_>,
    d: &PolicyDefaults,
    l: &PolicyLimits,
) {
    let at = spec.child("defaults");
    let own = spec.child("limits");
    if let Some(max) = l.max_replicas {
        replica_defaults(&at, d, |field, r| {
            if r > max {
                errs.push(FieldError::invalid(
                    field,
                    r,
                    &format!("must be at most {} ({max})", own.child("maxReplicas")),
                ));
            }
        });
    }
    if let (Some(max), Some(n)) = (l.max_unavailable, default_max_unavailable(d))
        && n > max
    {
        let rollout = at.child("rollout");
        errs.push(FieldError::invalid(
            &rollout.child("maxUnavailable"),
            n,
            &format!("must be at most {} ({max})", own.child("maxUnavailable")),
        ));
    }
    if let Some(list) = &l.allowed_image_registries {
        image_defaults(&at, d, |field, img| {
            if !list.iter().any(|p| img.starts_with(p.as_str())) {
                errs.push(FieldError::invalid(
                    field,
                    format!("{img:?}"),
                    &format!(
                        "must start with one of {} ({})",
                        own.child("allowedImageRegistries"),
                        quoted_list(list)
                    ),
                ));
            }
        });
    }
    let accelerator = at.child("accelerator");
    let placement = at.child("placement");
    for (field, name, list, what) in [
        (
            accelerator.child("class"),
            d.accelerator.as_ref().and_then(|a| a.class.as_deref()),
            l.allowed_accelerator_classes.as_ref(),
            "allowedAcceleratorClasses",
        ),
        (
            placement.child("priorityClassName"),
            default_priority_class(d),
            l.allowed_priority_classes.as_ref(),
            "allowedPriorityClasses",
        ),
    ] {
        if let (Some(name), Some(list)) = (name, list)
            && !list.iter().any(|c| c == name)
        {
            errs.push(FieldError::invalid(
                &field,
                format!("{name:?}"),
                &format!("must be one of {} ({})", own.child(what), quoted_list(list)),
            ));
        }
    }
}

/// The `rollout.maxUnavailable` a policy defaults.
pub(super) fn default_max_unavailable(d: &PolicyDefaults) -> Option<i32> {
    d.rollout.as_ref()?.max_unavailable
}

/// The PriorityClass a policy defaults.
pub(super) fn default_priority_class(d: &PolicyDefaults) -> Option<&str> {
    d.placement.as_ref()?.priority_class_name.as_deref()
}

/// Each replica count a policy defaults, with its path under `at`
/// (`spec.defaults`).
pub(super) fn replica_defaults(
    at: &Path<'_>,
    d: &PolicyDefaults,
    mut each: impl FnMut(&Path<'_>, i32),
) {
    if let Some(r) = d.replicas {
        each(&at.child("replicas"), r);
    }
    if let Some(r) = d.endpoint_picker().and_then(|e| e.replicas) {
        let routing = at.child("routing");
        let picker = routing.child("endpointPicker");
        each(&picker.child("replicas"), r);
    }
}

/// Each image a policy defaults, with its path under `at` (`spec.defaults`).
pub(super) fn image_defaults<'d>(
    at: &Path<'_>,
    d: &'d PolicyDefaults,
    mut each: impl FnMut(&Path<'_>, &'d str),
) {
    if let Some(img) = d.engine.as_ref().and_then(|e| e.image.as_deref()) {
        let engine = at.child("engine");
        each(&engine.child("image"), img);
    }
    if let Some(img) = d.endpoint_picker().and_then(|e| e.image.as_deref()) {
        let routing = at.child("routing");
        let picker = routing.child("endpointPicker");
        each(&picker.child("image"), img);
    }
}
