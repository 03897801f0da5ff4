//! Defaulting with provenance (the defaults are listed field by field in
//! `docs/api-reference.md`; the built-in values are in [`super::builtin`]).
//!
//! Each field takes its value from the first layer that sets it: the
//! service's own spec, then the namespace's InferencePolicy objects, then
//! the matching ClusterInferencePolicy objects, then server flags and
//! built-in values. Every field filled in now is recorded in the
//! `infergate.dev/defaulted-from` annotation; entries already there are
//! kept, so defaulting an already defaulted object changes nothing.
//!
//! The result is values and their provenance ([`Defaulted`]); the webhook
//! turns it into a JSONPatch (`webhook::patch`).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

use crate::api::{
    AcceleratorType, BackendKind, CpuMemory, DEFAULTED_FROM_ANNOTATION, EndpointPickerMode,
    EndpointPickerSpec, FailureMode, HealthCheckSpec, MetricsSpec, PickerResources, ResourcesSpec,
    policy::PolicyDefaults,
    v1beta1::{
        AcceleratorSpec, EngineSpec, InferenceService, InferenceServiceSpec, ParallelismSpec,
        PlacementSpec, RoutingSpec, SpreadAcross,
    },
};

use super::builtin::{
    DEFAULT_ACCELERATOR, DEFAULT_BACKEND, DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_HEALTH_INTERVAL,
    DEFAULT_HEALTH_PATH, DEFAULT_HEALTH_TIMEOUT, DEFAULT_METRICS_INTERVAL, DEFAULT_METRICS_PATH,
    DEFAULT_PARALLELISM, DEFAULT_PATH_TEMPLATE, DEFAULT_PICKER_CPU_REQUEST,
    DEFAULT_PICKER_MEMORY_LIMIT, DEFAULT_PICKER_MEMORY_REQUEST, DEFAULT_PICKER_REPLICAS,
    DEFAULT_PORT, DEFAULT_REPLICAS, DEFAULT_REQUEST_TIMEOUT, DEFAULT_SHM_SIZE, DEFAULT_TARGET_CPU,
};
use super::context::Context;
use super::defaulted::{Defaulted, Provenance};
use super::policy::{Layer, first_default, layers};

/// Provenance of a server flag.
pub const SOURCE_FLAG: &str = "flag";
/// Provenance of a built-in value.
pub const SOURCE_BUILT_IN: &str = "built-in";

struct Filler<'l, 'a> {
    layers: &'l [Layer<'a>],
    /// Each layer's provenance source, formatted on first use.
    sources: Vec<Option<Cow<'static, str>>>,
    filled: Vec<Provenance>,
}

impl<'a> Filler<'_, 'a> {
    /// Fill `slot` when empty: policy layers, then `fallback` (value, source).
    fn fill<T: serde::Serialize>(
        &mut self,
        slot: &mut Option<T>,
        field: &'static str,
        from_policy: impl Fn(&'a crate::api::policy::PolicyDefaults) -> Option<T>,
        fallback: Option<(T, &'static str)>,
    ) {
        if slot.is_some() {
            return;
        }
        let found = match first_default(self.layers, from_policy) {
            Some((v, i)) => {
                let layer = &self.layers[i];
                let source = self.sources[i].get_or_insert_with(|| Cow::Owned(layer.source()));
                Some((v, source.clone()))
            }
            None => fallback.map(|(v, src)| (v, Cow::Borrowed(src))),
        };
        if let Some((v, source)) = found {
            let value = serde_json::to_string(&v).ok();
            *slot = Some(v);
            self.filled.push(Provenance {
                field,
                source,
                value,
            });
        }
    }

    /// Record that `field` was filled with `value` from `source` (a value
    /// that comes from neither a policy nor a built-in).
    fn record<T: serde::Serialize>(&mut self, field: &'static str, source: String, value: &T) {
        self.filled.push(Provenance {
            field,
            source: Cow::Owned(source),
            value: serde_json::to_string(value).ok(),
        });
    }
}

/// `spec.placement.*` (field by field from the policies; `spreadAcross`
/// `node` when a track can have more than one replica) and
/// `spec.engine.shmSize` (a policy's, else 2Gi when GPUs per replica > 1).
/// Runs after the accelerator and parallelism are defaulted.
fn placement_defaults(
    f: &mut Filler<'_, '_>,
    spec: &mut InferenceServiceSpec,
    layers: &[Layer<'_>],
) {
    let had_placement = spec.placement.is_some();
    let many = spec.replicas.is_some_and(|r| r > 1)
        || spec
            .autoscaling
            .as_ref()
            .is_some_and(|a| a.max_replicas > 1);
    let p = spec.placement.get_or_insert_with(PlacementSpec::default);
    let placed = |d: &PolicyDefaults| d.placement.clone();
    f.fill(
        &mut p.node_selector,
        "spec.placement.nodeSelector",
        |d| placed(d)?.node_selector,
        None,
    );
    f.fill(
        &mut p.tolerations,
        "spec.placement.tolerations",
        |d| placed(d)?.tolerations,
        None,
    );
    f.fill(
        &mut p.priority_class_name,
        "spec.placement.priorityClassName",
        |d| placed(d)?.priority_class_name,
        None,
    );
    let policy_spread = layers.iter().any(|l| {
        l.defaults.is_some_and(|d| {
            d.placement
                .as_ref()
                .is_some_and(|p| p.spread_across.is_some())
        })
    });
    if many || policy_spread {
        f.fill(
            &mut p.spread_across,
            "spec.placement.spreadAcross",
            |d| placed(d)?.spread_across,
            many.then_some((SpreadAcross::Node, SOURCE_BUILT_IN)),
        );
    }
    if !had_placement && *p == PlacementSpec::default() {
        spec.placement = None;
    }

    let multi_gpu = super::resources::gpus_of(spec) > 1;
    let policy_shm = layers.iter().any(|l| {
        l.defaults
            .is_some_and(|d| d.engine.as_ref().is_some_and(|e| e.shm_size.is_some()))
    });
    if multi_gpu || policy_shm {
        let engine = spec.engine.get_or_insert_with(EngineSpec::default);
        f.fill(
            &mut engine.shm_size,
            "spec.engine.shmSize",
            |d| d.engine.as_ref()?.shm_size.clone(),
            multi_gpu.then(|| (Quantity(DEFAULT_SHM_SIZE.to_owned()), SOURCE_BUILT_IN)),
        );
    }
}

/// `spec.engine.gpuMemoryUtilization` (on GPUs: a policy's, else 0.9),
/// then the fit's `parallelism.tensor` and `engine.maxModelLen` (see
/// [`super::capacity::sizing::choose`]); the warnings the fit gives.
/// Runs after the accelerator is defaulted, before the built-in tensor.
fn fit_defaults(
    f: &mut Filler<'_, '_>,
    spec: &mut InferenceServiceSpec,
    ctx: &Context,
) -> Vec<String> {
    let on_gpus = spec
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .is_some_and(|t| t != AcceleratorType::None);
    if !on_gpus {
        return Vec::new();
    }
    {
        let engine = spec.engine.get_or_insert_with(EngineSpec::default);
        f.fill(
            &mut engine.gpu_memory_utilization,
            "spec.engine.gpuMemoryUtilization",
            |d| d.engine.as_ref()?.gpu_memory_utilization,
            Some((DEFAULT_GPU_MEMORY_UTILIZATION, SOURCE_BUILT_IN)),
        );
    }
    let Some(choice) = super::capacity::sizing::choose(spec, ctx.classes, ctx.profiles) else {
        return Vec::new();
    };
    let source = format!(
        "fit: ModelProfile/{}, AcceleratorClass/{}",
        choice.profile_name, choice.class_name
    );
    let tensor = i32::try_from(choice.tensor).unwrap_or(i32::MAX);
    spec.parallelism
        .get_or_insert_with(ParallelismSpec::default)
        .tensor = Some(tensor);
    f.record("spec.parallelism.tensor", source.clone(), &tensor);
    if let Some(n) = choice.max_model_len {
        spec.engine
            .get_or_insert_with(EngineSpec::default)
            .max_model_len = Some(n);
        f.record("spec.engine.maxModelLen", source, &n);
    }
    choice.warning.into_iter().collect()
}

/// `spec.routing.endpointPicker.*` of a service routed through
/// InferencePools, field by field from the policies'
/// `defaults.routing.endpointPicker`; with `mode: Owned`, the built-in
/// replicas, failure mode and container resources.
fn picker_defaults(f: &mut Filler<'_, '_>, epp: &mut EndpointPickerSpec) {
    let picker = PolicyDefaults::endpoint_picker;
    fn resources(d: &PolicyDefaults) -> Option<&PickerResources> {
        d.endpoint_picker()?.resources.as_ref()
    }
    f.fill(
        &mut epp.mode,
        "spec.routing.endpointPicker.mode",
        |d| picker(d)?.mode,
        Some((EndpointPickerMode::Owned, SOURCE_BUILT_IN)),
    );
    if epp.mode != Some(EndpointPickerMode::Owned) {
        return;
    }
    f.fill(
        &mut epp.image,
        "spec.routing.endpointPicker.image",
        |d| picker(d)?.image.clone(),
        None,
    );
    f.fill(
        &mut epp.replicas,
        "spec.routing.endpointPicker.replicas",
        |d| picker(d)?.replicas,
        Some((DEFAULT_PICKER_REPLICAS, SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut epp.failure_mode,
        "spec.routing.endpointPicker.failureMode",
        |d| picker(d)?.failure_mode,
        Some((FailureMode::FailClose, SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut epp.config,
        "spec.routing.endpointPicker.config",
        |d| picker(d)?.config.clone(),
        None,
    );
    // Requests and limits, each from the policies first; the built-in
    // figures never put a request above a limit set elsewhere (nor a limit
    // below a request): a request then defaults to the limit, a limit to the
    // request, as Kubernetes does.
    let res = epp.resources.get_or_insert_with(PickerResources::default);
    let requests = res.requests.get_or_insert_with(CpuMemory::default);
    f.fill(
        &mut requests.cpu,
        "spec.routing.endpointPicker.resources.requests.cpu",
        |d| resources(d)?.requests.as_ref()?.cpu.clone(),
        None,
    );
    f.fill(
        &mut requests.memory,
        "spec.routing.endpointPicker.resources.requests.memory",
        |d| resources(d)?.requests.as_ref()?.memory.clone(),
        None,
    );
    let limits = res.limits.get_or_insert_with(CpuMemory::default);
    f.fill(
        &mut limits.cpu,
        "spec.routing.endpointPicker.resources.limits.cpu",
        |d| resources(d)?.limits.as_ref()?.cpu.clone(),
        None,
    );
    f.fill(
        &mut limits.memory,
        "spec.routing.endpointPicker.resources.limits.memory",
        |d| resources(d)?.limits.as_ref()?.memory.clone(),
        built_in(
            DEFAULT_PICKER_MEMORY_LIMIT,
            requests.memory.as_ref(),
            Ordering::Less,
        ),
    );
    f.fill(
        &mut requests.cpu,
        "spec.routing.endpointPicker.resources.requests.cpu",
        |_| None,
        built_in(
            DEFAULT_PICKER_CPU_REQUEST,
            limits.cpu.as_ref(),
            Ordering::Greater,
        ),
    );
    f.fill(
        &mut requests.memory,
        "spec.routing.endpointPicker.resources.requests.memory",
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
fn built_in(
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

/// Fill every default, write/extend the
/// `infergate.dev/defaulted-from` annotation. Idempotent.
#[must_use]
pub fn default_service(svc: &InferenceService, ctx: &Context) -> Defaulted {
    let layers = layers(ctx);
    let mut out = svc.clone();
    let mut f = Filler {
        layers: &layers,
        sources: vec![None; layers.len()],
        filled: Vec::new(),
    };
    let spec = &mut out.spec;

    // engine.*
    {
        let engine = spec.engine.get_or_insert_with(EngineSpec::default);
        f.fill(
            &mut engine.image,
            "spec.engine.image",
            |d| d.engine.as_ref()?.image.clone(),
            ctx.server.engine_image.clone().map(|v| (v, SOURCE_FLAG)),
        );
        f.fill(
            &mut engine.port,
            "spec.engine.port",
            |d| d.engine.as_ref()?.port,
            Some((DEFAULT_PORT, SOURCE_BUILT_IN)),
        );
    }
    f.fill(
        &mut spec.backend,
        "spec.backend",
        |_| None,
        Some((DEFAULT_BACKEND, SOURCE_BUILT_IN)),
    );
    {
        let fallback = match ctx.server.replicas {
            Some(r) => (r, SOURCE_FLAG),
            None => (DEFAULT_REPLICAS, SOURCE_BUILT_IN),
        };
        f.fill(
            &mut spec.replicas,
            "spec.replicas",
            |d| d.replicas,
            Some(fallback),
        );
    }
    if let Some(auto) = spec.autoscaling.as_mut() {
        f.fill(
            &mut auto.target_cpu_utilization_percent,
            "spec.autoscaling.targetCPUUtilizationPercent",
            |d| d.autoscaling.as_ref()?.target_cpu_utilization_percent,
            Some((DEFAULT_TARGET_CPU, SOURCE_BUILT_IN)),
        );
    }
    // resources.cpu/memory only when a policy sets them.
    {
        let has_policy_resources = layers
            .iter()
            .any(|l| l.defaults.is_some_and(|d| d.resources.is_some()));
        if has_policy_resources || spec.resources.is_some() {
            let res = spec.resources.get_or_insert_with(ResourcesSpec::default);
            f.fill(
                &mut res.cpu,
                "spec.resources.cpu",
                |d| d.resources.as_ref()?.cpu.clone(),
                None,
            );
            f.fill(
                &mut res.memory,
                "spec.resources.memory",
                |d| d.resources.as_ref()?.memory.clone(),
                None,
            );
            if *res == ResourcesSpec::default() && svc.spec.resources.is_none() {
                spec.resources = None;
            }
        }
    }
    {
        let acc = spec
            .accelerator
            .get_or_insert_with(AcceleratorSpec::default);
        f.fill(
            &mut acc.class,
            "spec.accelerator.class",
            |d| d.accelerator.as_ref()?.class.clone(),
            None,
        );
        // With a class, the type is the class's vendor (a class that does
        // not exist is denied by validation, and defaults nothing).
        if let Some(name) = acc.class.as_deref()
            && let Some(class) = ctx.classes.get(name)
            && acc.r#type.is_none()
        {
            acc.r#type = Some(class.vendor);
            f.record(
                "spec.accelerator.type",
                format!("AcceleratorClass/{name}"),
                &class.vendor,
            );
        }
        f.fill(
            &mut acc.r#type,
            "spec.accelerator.type",
            |_| None,
            Some((DEFAULT_ACCELERATOR, SOURCE_BUILT_IN)),
        );
    }
    let warnings = fit_defaults(&mut f, spec, ctx);
    {
        let par = spec
            .parallelism
            .get_or_insert_with(ParallelismSpec::default);
        f.fill(
            &mut par.tensor,
            "spec.parallelism.tensor",
            |_| None,
            Some((DEFAULT_PARALLELISM, SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut par.pipeline,
            "spec.parallelism.pipeline",
            |_| None,
            Some((DEFAULT_PARALLELISM, SOURCE_BUILT_IN)),
        );
    }
    placement_defaults(&mut f, spec, &layers);
    {
        let hc = spec
            .health_check
            .get_or_insert_with(HealthCheckSpec::default);
        f.fill(
            &mut hc.path,
            "spec.healthCheck.path",
            |d| d.health_check.as_ref()?.path.clone(),
            Some((DEFAULT_HEALTH_PATH.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut hc.interval,
            "spec.healthCheck.interval",
            |d| d.health_check.as_ref()?.interval.clone(),
            Some((DEFAULT_HEALTH_INTERVAL.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut hc.timeout,
            "spec.healthCheck.timeout",
            |d| d.health_check.as_ref()?.timeout.clone(),
            Some((DEFAULT_HEALTH_TIMEOUT.to_owned(), SOURCE_BUILT_IN)),
        );
    }
    {
        // The engine port as defaulted above (an invalid one is reported
        // there, not copied here).
        let engine_port = spec
            .engine
            .as_ref()
            .and_then(|e| e.port)
            .unwrap_or(DEFAULT_PORT);
        let m = spec.metrics.get_or_insert_with(MetricsSpec::default);
        f.fill(
            &mut m.port,
            "spec.metrics.port",
            |d| d.metrics.as_ref()?.port,
            (1..=65535)
                .contains(&engine_port)
                .then_some((engine_port, SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut m.path,
            "spec.metrics.path",
            |d| d.metrics.as_ref()?.path.clone(),
            Some((DEFAULT_METRICS_PATH.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut m.interval,
            "spec.metrics.interval",
            |d| d.metrics.as_ref()?.interval.clone(),
            Some((DEFAULT_METRICS_INTERVAL.to_owned(), SOURCE_BUILT_IN)),
        );
    }
    {
        let r = spec.routing.get_or_insert_with(RoutingSpec::default);
        f.fill(
            &mut r.path_template,
            "spec.routing.pathTemplate",
            |d| d.routing.as_ref()?.path_template.clone(),
            Some((DEFAULT_PATH_TEMPLATE.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut r.request_timeout,
            "spec.routing.requestTimeout",
            |d| d.routing.as_ref()?.request_timeout.clone(),
            Some((DEFAULT_REQUEST_TIMEOUT.to_owned(), SOURCE_BUILT_IN)),
        );
        f.fill(
            &mut r.gateway,
            "spec.routing.gateway",
            |d| d.routing.as_ref()?.gateway.clone(),
            None,
        );
        f.fill(
            &mut r.backend_kind,
            "spec.routing.backendKind",
            |d| d.routing.as_ref()?.backend_kind,
            Some((BackendKind::Service, SOURCE_BUILT_IN)),
        );
        if r.backend_kind == Some(BackendKind::InferencePool) {
            picker_defaults(
                &mut f,
                r.endpoint_picker
                    .get_or_insert_with(EndpointPickerSpec::default),
            );
        }
    }

    // rollout: the whole block, only when a policy sets one; the Prometheus
    // address stays in the policy (looked up when the analysis runs), and a
    // policy that names only the address sets no rollout.
    f.fill(
        &mut spec.rollout,
        "spec.rollout",
        |d| {
            let mut r = d.rollout.clone()?;
            if let Some(a) = r.analysis.as_mut() {
                if let Some(p) = a.prometheus.as_mut() {
                    p.address = None;
                }
                if a.prometheus
                    .as_ref()
                    .is_some_and(super::rollout::only_an_address)
                {
                    a.prometheus = None;
                }
                if a.prometheus.is_none() {
                    r.analysis = None;
                }
            }
            (r != crate::api::rollout::RolloutSpec::default()).then_some(r)
        },
        None,
    );

    let filled = f.filled;
    if !filled.is_empty() {
        record_provenance(&mut out, &filled);
    }
    Defaulted {
        object: out,
        filled,
        warnings,
    }
}

/// The `defaulted-from` annotation of `svc`, parsed (empty when absent or malformed).
#[must_use]
pub fn provenance_of(svc: &InferenceService) -> BTreeMap<String, String> {
    svc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULTED_FROM_ANNOTATION))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

fn record_provenance(svc: &mut InferenceService, filled: &[Provenance]) {
    let earlier = provenance_of(svc);
    let mut map: BTreeMap<&str, &str> = earlier
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for p in filled {
        map.insert(p.field, &p.source);
    }
    // A map of strings always serialises.
    let json = serde_json::to_string(&map).unwrap_or_default();
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DEFAULTED_FROM_ANNOTATION.to_owned(), json);
}

#[cfg(test)]
mod tests;
