//! `default_service`: every group of a service's fields defaulted in turn,
//! each by a function given its fields' paths.

use std::collections::BTreeMap;

use crate::api::DEFAULTED_FROM_ANNOTATION;
use crate::api::policy::PolicyDefaults;
use crate::api::rollout::{RolloutCanarySpec, RolloutSpec, RolloutStrategy};
use crate::api::v1beta1::{
    AcceleratorSpec, EngineSpec, InferenceService, InferenceServiceSpec, ParallelismSpec,
    RoutingSpec,
};
use crate::api::{BackendKind, EndpointPickerSpec, HealthCheckSpec, MetricsSpec, ResourcesSpec};
use crate::engine::builtin::{
    DEFAULT_ACCELERATOR, DEFAULT_BACKEND, DEFAULT_CANARY_ON_FULL_POOL, DEFAULT_HEALTH_INTERVAL,
    DEFAULT_HEALTH_PATH, DEFAULT_HEALTH_TIMEOUT, DEFAULT_MAX_UNAVAILABLE, DEFAULT_METRICS_INTERVAL,
    DEFAULT_METRICS_PATH, DEFAULT_ON_FULL_POOL, DEFAULT_PARALLELISM, DEFAULT_PATH_TEMPLATE,
    DEFAULT_PORT, DEFAULT_REPLICAS, DEFAULT_REQUEST_TIMEOUT, DEFAULT_TARGET_CPU,
};
use crate::engine::context::Context;
use crate::engine::defaulted::{Defaulted, DefaultedSpec};
use crate::engine::policy::layers;
use crate::engine::rollout::only_an_address;

use super::filler::{Filler, SOURCE_BUILT_IN, SOURCE_FLAG};
use super::paths::{self, SPEC, SpecPaths};
use super::provenance::{annotation_json, annotation_quoted};

/// Fill every default, write/extend the
/// `infergate.dev/defaulted-from` annotation. Idempotent.
#[must_use]
pub fn default_service(svc: &InferenceService, ctx: &Context) -> Defaulted {
    let d = fill_spec(svc, ctx);
    let mut metadata = svc.metadata.clone();
    if !d.filled.is_empty() {
        metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                DEFAULTED_FROM_ANNOTATION.to_owned(),
                annotation_json(svc, &d.filled),
            );
    }
    Defaulted {
        object: InferenceService {
            metadata,
            spec: d.spec,
            status: svc.status.clone(),
        },
        filled: d.filled,
        warnings: d.warnings,
    }
}

/// Fill every default of `svc`'s spec and write the
/// `infergate.dev/defaulted-from` annotation it then has, without copying
/// the rest of the object: what the mutating webhook patches. Idempotent
/// as [`default_service`] is.
#[must_use]
pub fn default_spec(svc: &InferenceService, ctx: &Context) -> DefaultedSpec {
    let mut d = fill_spec(svc, ctx);
    d.annotation = (!d.filled.is_empty()).then(|| annotation_quoted(svc, &d.filled));
    d
}

/// Every default of `svc`'s spec filled; the annotation left to the
/// caller, which writes it in the one form it needs.
fn fill_spec(svc: &InferenceService, ctx: &Context) -> DefaultedSpec {
    let layers = layers(ctx);
    let mut out = svc.spec.clone();
    let mut f = Filler::new(&layers);
    let spec = &mut out;
    let at = &SPEC;

    let engine = spec.engine.get_or_insert_with(EngineSpec::default);
    default_engine(&mut f, engine, &at.engine, ctx);
    default_scaling(&mut f, spec, at, ctx);
    default_resources(&mut f, spec, &at.resources);
    let accelerator = spec
        .accelerator
        .get_or_insert_with(AcceleratorSpec::default);
    default_accelerator(&mut f, accelerator, &at.accelerator, ctx);
    let warnings = super::fit::default_fit(&mut f, spec, at, ctx);
    let parallelism = spec
        .parallelism
        .get_or_insert_with(ParallelismSpec::default);
    default_parallelism(&mut f, parallelism, &at.parallelism);
    super::placement::default_placement(&mut f, spec, at);
    let health = spec
        .health_check
        .get_or_insert_with(HealthCheckSpec::default);
    default_health(&mut f, health, &at.health_check);
    default_metrics(&mut f, spec, &at.metrics);
    let routing = spec.routing.get_or_insert_with(RoutingSpec::default);
    default_routing(&mut f, routing, &at.routing);
    default_rollout(&mut f, &mut spec.rollout, &at.rollout);
    if let Some(c) = spec.canary.as_mut() {
        f.fill(
            &mut c.on_full_pool,
            at.canary_on_full_pool,
            |d| d.canary.as_ref()?.on_full_pool,
            Some((DEFAULT_CANARY_ON_FULL_POOL, SOURCE_BUILT_IN)),
        );
    }

    DefaultedSpec {
        spec: out,
        filled: f.filled,
        warnings,
        annotation: None,
        values: f.values,
    }
}

/// `spec.engine`: the image (a policy's, else the server's flag) and the port.
fn default_engine(
    f: &mut Filler<'_, '_>,
    e: &mut EngineSpec,
    at: &paths::EnginePaths,
    ctx: &Context,
) {
    f.fill(
        &mut e.image,
        at.image,
        |d| d.engine.as_ref()?.image.clone(),
        ctx.server.engine_image.clone().map(|v| (v, SOURCE_FLAG)),
    );
    f.fill(
        &mut e.port,
        at.port,
        |d| d.engine.as_ref()?.port,
        Some((DEFAULT_PORT, SOURCE_BUILT_IN)),
    );
}

/// `spec.backend`, `spec.replicas` (a policy's, else the server's flag, else
/// built-in) and the CPU target of `spec.autoscaling` when it is set.
fn default_scaling(
    f: &mut Filler<'_, '_>,
    spec: &mut InferenceServiceSpec,
    at: &SpecPaths,
    ctx: &Context,
) {
    f.built_in(&mut spec.backend, at.backend, DEFAULT_BACKEND);
    let fallback = match ctx.server.replicas {
        Some(r) => (r, SOURCE_FLAG),
        None => (DEFAULT_REPLICAS, SOURCE_BUILT_IN),
    };
    f.fill(
        &mut spec.replicas,
        at.replicas,
        |d| d.replicas,
        Some(fallback),
    );
    if let Some(auto) = spec.autoscaling.as_mut() {
        f.fill(
            &mut auto.target_cpu_utilization_percent,
            at.autoscaling.target_cpu_utilization_percent,
            |d| d.autoscaling.as_ref()?.target_cpu_utilization_percent,
            Some((DEFAULT_TARGET_CPU, SOURCE_BUILT_IN)),
        );
    }
}

/// `spec.resources.cpu` and `.memory`, only when a policy sets them.
fn default_resources(
    f: &mut Filler<'_, '_>,
    spec: &mut InferenceServiceSpec,
    at: &paths::CpuMemoryPaths,
) {
    let had = spec.resources.is_some();
    if !had && !f.any_policy(|d| d.resources.is_some()) {
        return;
    }
    let res = spec.resources.get_or_insert_with(ResourcesSpec::default);
    f.fill(
        &mut res.cpu,
        at.cpu,
        |d| d.resources.as_ref()?.cpu.clone(),
        None,
    );
    f.fill(
        &mut res.memory,
        at.memory,
        |d| d.resources.as_ref()?.memory.clone(),
        None,
    );
    if *res == ResourcesSpec::default() && !had {
        spec.resources = None;
    }
}

/// `spec.accelerator`: the class (a policy's), then the type: the class's
/// vendor, else built-in.
fn default_accelerator(
    f: &mut Filler<'_, '_>,
    acc: &mut AcceleratorSpec,
    at: &paths::AcceleratorPaths,
    ctx: &Context,
) {
    f.fill(
        &mut acc.class,
        at.class,
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
        f.record(at.r#type, format!("AcceleratorClass/{name}"), &class.vendor);
    }
    f.built_in(&mut acc.r#type, at.r#type, DEFAULT_ACCELERATOR);
}

/// `spec.parallelism`: built-in tensor and pipeline sizes.
fn default_parallelism(
    f: &mut Filler<'_, '_>,
    par: &mut ParallelismSpec,
    at: &paths::ParallelismPaths,
) {
    f.built_in(&mut par.tensor, at.tensor, DEFAULT_PARALLELISM);
    f.built_in(&mut par.pipeline, at.pipeline, DEFAULT_PARALLELISM);
}

/// `spec.healthCheck`: path, interval and timeout.
fn default_health(f: &mut Filler<'_, '_>, hc: &mut HealthCheckSpec, at: &paths::HealthCheckPaths) {
    f.fill(
        &mut hc.path,
        at.path,
        |d| d.health_check.as_ref()?.path.clone(),
        Some((DEFAULT_HEALTH_PATH.to_owned(), SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut hc.interval,
        at.interval,
        |d| d.health_check.as_ref()?.interval.clone(),
        Some((DEFAULT_HEALTH_INTERVAL.to_owned(), SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut hc.timeout,
        at.timeout,
        |d| d.health_check.as_ref()?.timeout.clone(),
        Some((DEFAULT_HEALTH_TIMEOUT.to_owned(), SOURCE_BUILT_IN)),
    );
}

/// `spec.metrics`: the port (the engine's as defaulted above; an invalid
/// one is reported there, not copied here), path and interval.
fn default_metrics(
    f: &mut Filler<'_, '_>,
    spec: &mut InferenceServiceSpec,
    at: &paths::MetricsPaths,
) {
    let engine_port = spec
        .engine
        .as_ref()
        .and_then(|e| e.port)
        .unwrap_or(DEFAULT_PORT);
    let m = spec.metrics.get_or_insert_with(MetricsSpec::default);
    f.fill(
        &mut m.port,
        at.port,
        |d| d.metrics.as_ref()?.port,
        (1..=65535)
            .contains(&engine_port)
            .then_some((engine_port, SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut m.path,
        at.path,
        |d| d.metrics.as_ref()?.path.clone(),
        Some((DEFAULT_METRICS_PATH.to_owned(), SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut m.interval,
        at.interval,
        |d| d.metrics.as_ref()?.interval.clone(),
        Some((DEFAULT_METRICS_INTERVAL.to_owned(), SOURCE_BUILT_IN)),
    );
}

/// `spec.routing`: path template, request timeout, Gateway, backend kind,
/// the match and its header, and the endpoint picker of an InferencePool
/// backend.
fn default_routing(f: &mut Filler<'_, '_>, r: &mut RoutingSpec, at: &paths::RoutingPaths) {
    f.fill(
        &mut r.path_template,
        at.path_template,
        |d| d.routing.as_ref()?.path_template.clone(),
        Some((DEFAULT_PATH_TEMPLATE.to_owned(), SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut r.request_timeout,
        at.request_timeout,
        |d| d.routing.as_ref()?.request_timeout.clone(),
        Some((DEFAULT_REQUEST_TIMEOUT.to_owned(), SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut r.gateway,
        at.gateway,
        |d| d.routing.as_ref()?.gateway.clone(),
        None,
    );
    f.fill(
        &mut r.backend_kind,
        at.backend_kind,
        |d| d.routing.as_ref()?.backend_kind,
        Some((BackendKind::Service, SOURCE_BUILT_IN)),
    );
    // A route by model name: the policies' choice (nothing is written for
    // a service routed by path, as before names), and the header.
    f.fill(
        &mut r.r#match,
        at.r#match,
        |d| d.routing.as_ref()?.r#match,
        None,
    );
    if r.r#match
        .is_some_and(crate::api::v1beta1::RouteMatch::by_name)
    {
        f.fill(
            &mut r.model_name_header,
            at.model_name_header,
            |d| d.routing.as_ref()?.model_name_header.clone(),
            Some((
                crate::engine::model_names::DEFAULT_HEADER.to_owned(),
                SOURCE_BUILT_IN,
            )),
        );
    }
    if r.backend_kind == Some(BackendKind::InferencePool) {
        let picker = r
            .endpoint_picker
            .get_or_insert_with(EndpointPickerSpec::default);
        super::picker::default_picker(f, picker, &at.endpoint_picker);
    }
}

/// `spec.rollout`: the plan (strategy, steps, interval, progressDeadline,
/// maxRestarts, analysis), whole, from the first policy that has one, for a
/// service whose block names none of these (the Prometheus address stays in
/// the policy, looked up when the analysis runs, and a policy that names
/// only the address has no plan); then `onFullPool` and `maxUnavailable`
/// field by field, and under strategy `Canary` the canary track's
/// `onFullPool` (from `defaults.canary`).
fn default_rollout(
    f: &mut Filler<'_, '_>,
    rollout: &mut Option<RolloutSpec>,
    at: &paths::RolloutPaths,
) {
    if !rollout.as_ref().is_some_and(RolloutSpec::has_plan)
        && let Some((plan, source)) = f.first(policy_plan)
    {
        match rollout.as_mut() {
            None => {
                f.record(at.block, source, &plan);
                *rollout = Some(plan);
            }
            Some(r) => merge_plan(f, r, plan, source, at),
        }
    }
    let r = rollout.get_or_insert_with(RolloutSpec::default);
    f.fill(
        &mut r.on_full_pool,
        at.on_full_pool,
        |d| d.rollout.as_ref()?.on_full_pool,
        Some((DEFAULT_ON_FULL_POOL, SOURCE_BUILT_IN)),
    );
    f.fill(
        &mut r.max_unavailable,
        at.max_unavailable,
        |d| d.rollout.as_ref()?.max_unavailable,
        Some((DEFAULT_MAX_UNAVAILABLE, SOURCE_BUILT_IN)),
    );
    if r.strategy == Some(RolloutStrategy::Canary) {
        let canary = r.canary.get_or_insert_with(RolloutCanarySpec::default);
        f.fill(
            &mut canary.on_full_pool,
            at.canary_on_full_pool,
            |d| d.canary.as_ref()?.on_full_pool,
            Some((DEFAULT_CANARY_ON_FULL_POOL, SOURCE_BUILT_IN)),
        );
    }
}

/// A policy's rollout plan: its `defaults.rollout` without the full-pool
/// fields and the Prometheus address; `None` when nothing is left.
fn policy_plan(d: &PolicyDefaults) -> Option<RolloutSpec> {
    let mut r = d.rollout.as_ref()?.plan();
    if let Some(a) = r.analysis.as_mut() {
        if let Some(p) = a.prometheus.as_mut() {
            p.address = None;
        }
        if a.prometheus.as_ref().is_some_and(only_an_address) {
            a.prometheus = None;
        }
        if a.prometheus.is_none() {
            r.analysis = None;
        }
    }
    r.has_plan().then_some(r)
}

/// Each field of `plan` into `r`, a block without a plan of its own (only
/// full-pool fields), each recorded at its own path.
fn merge_plan(
    f: &mut Filler<'_, '_>,
    r: &mut RolloutSpec,
    plan: RolloutSpec,
    source: crate::engine::defaulted::Source,
    at: &paths::RolloutPaths,
) {
    let RolloutSpec {
        strategy,
        steps,
        interval,
        progress_deadline,
        max_restarts,
        analysis,
        on_full_pool: _,
        max_unavailable: _,
        canary: _,
    } = plan;
    if let Some(v) = strategy {
        f.record(at.strategy, source.clone(), &v);
        r.strategy = Some(v);
    }
    if !steps.is_empty() {
        f.record(at.steps, source.clone(), &steps);
        r.steps = steps;
    }
    if let Some(v) = interval {
        f.record(at.interval, source.clone(), &v);
        r.interval = Some(v);
    }
    if let Some(v) = progress_deadline {
        f.record(at.progress_deadline, source.clone(), &v);
        r.progress_deadline = Some(v);
    }
    if let Some(v) = max_restarts {
        f.record(at.max_restarts, source.clone(), &v);
        r.max_restarts = Some(v);
    }
    if let Some(v) = analysis {
        f.record(at.analysis, source.clone(), &v);
        r.analysis = Some(v);
    }
}
