//! The endpoint picker of a service routed through InferencePools
//! (`spec.routing.endpointPicker`) and a policy's picker defaults: image,
//! replicas, and the container's requests and limits.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

use crate::api::policy::PolicyDefaults;
use crate::api::v1beta1::{Backend, InferenceService};
use crate::api::{BackendKind, EndpointPickerSpec, PickerResources};
use crate::engine::builtin::{
    DEFAULT_PICKER_CPU_REQUEST, DEFAULT_PICKER_MEMORY_LIMIT, DEFAULT_PICKER_MEMORY_REQUEST,
    DEFAULT_PICKER_REPLICAS,
};
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::names;

use super::fields::check_at_least;
use super::fields::{check_image, check_quantity};

/// The picker section of a service.
fn picker_of(svc: &InferenceService) -> Option<&EndpointPickerSpec> {
    svc.spec.routing.as_ref()?.endpoint_picker.as_ref()
}

/// Replicas of each endpoint picker the service runs (its built-in value
/// when unset); `None` when it runs none.
pub(super) fn picker_replicas(svc: &InferenceService) -> Option<i32> {
    names::owns_endpoint_pickers(svc).then(|| {
        picker_of(svc)
            .and_then(|p| p.replicas)
            .unwrap_or(DEFAULT_PICKER_REPLICAS)
    })
}

/// `backendKind: InferencePool` routes a Deployment-backed service; an owned
/// endpoint picker needs an image, at least one replica, and requests no
/// higher than its limits. `at` is `spec.routing`.
pub(super) fn check_inference_pool(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    svc: &InferenceService,
) {
    let routing = svc.spec.routing.as_ref();
    if routing.and_then(|r| r.backend_kind) != Some(BackendKind::InferencePool) {
        return;
    }
    if svc.spec.backend == Some(Backend::RayService) {
        errs.push(FieldError::invalid(
            &at.child("backendKind"),
            "\"InferencePool\"",
            "InferencePool routing needs backend Deployment (a RayService serves through its own Serve proxy)",
        ));
    }
    if !names::owns_endpoint_pickers(svc) {
        return;
    }
    let picker = picker_of(svc);
    let at = at.child("endpointPicker");
    check_image(
        errs,
        &at.child("image"),
        picker.and_then(|p| p.image.as_deref()),
        "no endpoint picker image: set spec.routing.endpointPicker.image, or defaults.routing.endpointPicker.image in an InferencePolicy or ClusterInferencePolicy, or choose endpointPicker.mode: None",
    );
    check_at_least(
        errs,
        &at.child("replicas"),
        picker.and_then(|p| p.replicas),
        1,
    );
    check_resources(
        errs,
        &at.child("resources"),
        picker.and_then(|p| p.resources.as_ref()),
        true,
    );
}

/// Every quantity set parses and is not negative; each request is at most
/// its limit. With `built_in`, an unset figure is judged by its built-in
/// value (what the picker's container gets); without, only figures both
/// set are compared (a policy's defaults).
fn check_resources(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    res: Option<&PickerResources>,
    built_in: bool,
) {
    let requests = res.and_then(|r| r.requests.as_ref());
    let limits = res.and_then(|r| r.limits.as_ref());
    let figures = [
        (
            "cpu",
            requests.and_then(|r| r.cpu.as_ref()),
            DEFAULT_PICKER_CPU_REQUEST,
            limits.and_then(|l| l.cpu.as_ref()),
            None,
        ),
        (
            "memory",
            requests.and_then(|r| r.memory.as_ref()),
            DEFAULT_PICKER_MEMORY_REQUEST,
            limits.and_then(|l| l.memory.as_ref()),
            Some(DEFAULT_PICKER_MEMORY_LIMIT),
        ),
    ];
    let (requests_at, limits_at) = (at.child("requests"), at.child("limits"));
    for (name, request, default_request, limit, default_limit) in figures {
        let request_field = requests_at.child(name);
        let limit_field = limits_at.child(name);
        let before = errs.len();
        check_quantity(errs, &request_field, request);
        check_quantity(errs, &limit_field, limit);
        if errs.len() > before {
            continue;
        }
        let owned = |q: Option<&'static str>| q.map(|q| Quantity(q.to_owned()));
        let (request, limit) = if built_in {
            (
                request.cloned().or_else(|| owned(Some(default_request))),
                limit.cloned().or_else(|| owned(default_limit)),
            )
        } else {
            (request.cloned(), limit.cloned())
        };
        let (Some(request), Some(limit)) = (request, limit) else {
            continue;
        };
        if let (Ok(r), Ok(l)) = (
            ParsedQuantity::try_from(&request),
            ParsedQuantity::try_from(&limit),
        ) && r > l
        {
            errs.push(FieldError::invalid(
                &request_field,
                format!("{:?}", request.0),
                &format!("must be less than or equal to {limit_field} ({})", limit.0),
            ));
        }
    }
}

/// A policy's picker defaults: replicas at least 1, quantities that
/// parse, requests no higher than the limits set beside them (the bounds
/// its limits set are checked with the engine's). `at` is the picker's
/// path (`spec.defaults.routing.endpointPicker`).
pub(super) fn check_policy_picker(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    defaults: &PolicyDefaults,
) {
    let Some(picker) = defaults.endpoint_picker() else {
        return;
    };
    check_at_least(errs, &at.child("replicas"), picker.replicas, 1);
    check_resources(
        errs,
        &at.child("resources"),
        picker.resources.as_ref(),
        false,
    );
}
