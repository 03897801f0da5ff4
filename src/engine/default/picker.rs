//! `spec.routing.endpointPicker` of a service routed through InferencePools.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

use crate::api::policy::PolicyDefaults;
use crate::api::{CpuMemory, EndpointPickerMode, EndpointPickerSpec, FailureMode, PickerResources};
use crate::engine::builtin::{
    DEFAULT_PICKER_CPU_REQUEST, DEFAULT_PICKER_MEMORY_LIMIT, DEFAULT_PICKER_MEMORY_REQUEST,
    DEFAULT_PICKER_REPLICAS,
};

use super::filler::{Filler, SOURCE_BUILT_IN};
use super::paths::PickerPaths;

/// `spec.routing.endpointPicker.*`, field by field from the policies'
/// `defaults.routing.endpointPicker`; with `mode: Owned`, the built-in
/// replicas, failure mode and container resources.
pub(super) fn default_picker(
    f: &mut Filler<'_, '_>,
    epp: &mut EndpointPickerSpec,
    at: &PickerPaths,
) {
    let picker = PolicyDefaults::endpoint_picker;
    f.fill(
        &mut epp.mode,
        at.mode,
        |d| picker(d)?.mode,
        Some((EndpointPickerMode::Owned, SOURCE_BUILT_IN)),
    );
    if epp.mode != Some(EndpointPickerMode::Owned) {
        return;
    }
    f.fill(&mut epp.image, at.image, |d| picker(d)?.image.clone(), None);
    f.fill(
        &mut epp.replicas,
        at.replicas,
        |d| picker(d)?.replicas,
        Some((DEFAULT_PICKER_REPLICAS, SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut epp.failure_mode,
        at.failure_mode,
        |d| picker(d)?.failure_mode,
        Some((FailureMode::FailClose, SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut epp.config,
        at.config,
        |d| picker(d)?.config.clone(),
        None,
    );
    default_resources(
        f,
        epp.resources.get_or_insert_with(PickerResources::default),
        at,
    );
}

/// Requests and limits, each from the policies first; the built-in
/// figures never put a request above a limit set elsewhere (nor a limit
/// below a request): a request then defaults to the limit, a limit to the
/// request, as Kubernetes does.
fn default_resources(f: &mut Filler<'_, '_>, res: &mut PickerResources, at: &PickerPaths) {
    fn resources(d: &PolicyDefaults) -> Option<&PickerResources> {
        d.endpoint_picker()?.resources.as_ref()
    }
    let requests = res.requests.get_or_insert_with(CpuMemory::default);
    f.fill(
        &mut requests.cpu,
        at.requests.cpu,
        |d| resources(d)?.requests.as_ref()?.cpu.clone(),
        None,
    );
    f.fill(
        &mut requests.memory,
        at.requests.memory,
        |d| resources(d)?.requests.as_ref()?.memory.clone(),
        None,
    );
    let limits = res.limits.get_or_insert_with(CpuMemory::default);
    f.fill(
        &mut limits.cpu,
        at.limits.cpu,
        |d| resources(d)?.limits.as_ref()?.cpu.clone(),
        None,
    );
    f.fill(
        &mut limits.memory,
        at.limits.memory,
        |d| resources(d)?.limits.as_ref()?.memory.clone(),
        built_in(
            DEFAULT_PICKER_MEMORY_LIMIT,
            requests.memory.as_ref(),
            Ordering::Less,
        ),
    );
    f.fill(
        &mut requests.cpu,
        at.requests.cpu,
        |_| None,
        built_in(
            DEFAULT_PICKER_CPU_REQUEST,
            limits.cpu.as_ref(),
            Ordering::Greater,
        ),
    );
    f.fill(
        &mut requests.memory,
        at.requests.memory,
        |_| None,
        built_in(
            DEFAULT_PICKER_MEMORY_REQUEST,
            limits.memory.as_ref(),
            Ordering::Greater,
        ),
    );
}

/// The built-in quantity `figure`, or `other` when `figure` compares to it
/// as `past` (a request above its limit, a limit below its request);
/// `figure` when either does not parse.
pub(super) fn built_in(
    figure: &'static str,
    other: Option<&Quantity>,
    past: Ordering,
) -> Option<(Quantity, &'static str)> {
    let value = match other {
        Some(o)
            if ParsedQuantity::try_from(figure)
                .ok()
                .zip(ParsedQuantity::try_from(o).ok())
                .and_then(|(a, b)| a.partial_cmp(&b))
                == Some(past) =>
        {
            o.clone()
        }
        _ => Quantity(figure.to_owned()),
    };
    Some((value, SOURCE_BUILT_IN))
}
