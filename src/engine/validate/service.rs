//! Validation of a service against its own rules (one function per field
//! group, each given its path) and the limits of the policies that apply
//! to it (`limits`).

use std::time::Duration;

use kube::ResourceExt;

use crate::api::ResourcesSpec;
use crate::api::v1beta1::{
    AutoscalingSpec, Backend, CanarySpec, EngineSpec, InferenceService, InferenceServiceSpec,
    ModelSpec, ParallelismSpec,
};
use crate::engine::builtin::DEFAULT_REQUEST_TIMEOUT;
use crate::engine::context::Context;
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::policy::layers;
use crate::engine::verdict::Verdict;
use crate::engine::{full_pool, graph_source, names, rollout, route};

use super::capacity::FitJudgement;
use super::fields::{
    check_at_least, check_duration, check_gate_query, check_health, check_image, check_metrics,
    check_quantity,
};

/// Validate a (defaulted) service; `old` is the stored object on UPDATE.
///
/// Fields left unset are judged by their built-in defaults, except
/// `spec.engine.image`, which has none.
///
/// A model that does not fit its GPUs is an error, but for an update that
/// leaves the fit's inputs as they were: a warning then
/// ([`FitJudgement::of_update`]).
#[must_use]
pub fn validate_service(
    svc: &InferenceService,
    old: Option<&InferenceService>,
    ctx: &Context,
) -> Verdict {
    validate_judging(svc, old, ctx, FitJudgement::of_update(svc, old))
}

/// The reconciler's validation of a running service: as
/// [`validate_service`] judges a create, but a model that no longer fits
/// its GPUs (a later ModelProfile or AcceleratorClass) is a warning, not
/// an error: the service goes on being reconciled, and
/// [`super::capacity::misfits`] says what no longer fits.
#[must_use]
pub fn validate_running(svc: &InferenceService, ctx: &Context) -> Verdict {
    validate_judging(svc, None, ctx, FitJudgement::Warn)
}

fn validate_judging(
    svc: &InferenceService,
    old: Option<&InferenceService>,
    ctx: &Context,
    fit: FitJudgement,
) -> Verdict {
    let layers = layers(ctx);
    let mut v = Verdict::default();
    let s = &svc.spec;
    let (metadata, spec) = (Path::new("metadata"), Path::new("spec"));
    let engine_image = s.engine.as_ref().and_then(|e| e.image.as_deref());

    v.errors
        .extend(names::derived_name_errors(&metadata.child("name"), svc));
    let model = spec.child("model");
    check_model_ref(&mut v.errors, &model.child("ref"), &s.model);
    check_engine(&mut v.errors, &spec.child("engine"), s.engine.as_ref());
    check_backend(&mut v.errors, &spec, s, old.map(|o| &o.spec));
    check_at_least(&mut v.errors, &spec.child("replicas"), s.replicas, 0);
    if let Some(a) = &s.autoscaling {
        check_autoscaling(&mut v.errors, &spec.child("autoscaling"), a);
    }
    if let Some(r) = &s.resources {
        check_resources(&mut v.errors, &spec.child("resources"), r);
    }
    check_parallelism(
        &mut v.errors,
        &spec.child("parallelism"),
        s.parallelism.as_ref(),
    );
    super::placement::placement_errors(
        &mut v,
        &spec,
        svc,
        (ctx, &layers, fit == FitJudgement::Warn),
    );
    if let Some(c) = &s.canary {
        check_canary(&mut v, &spec, s, c, engine_image);
    }
    super::picker::check_inference_pool(&mut v.errors, &spec.child("routing"), svc);
    let rollout_at = spec.child("rollout");
    rollout::check_service(&mut v.errors, &rollout_at, svc);
    full_pool::check_service(&mut v.errors, &rollout_at, svc);
    check_analysis_query(&mut v.errors, &rollout_at, svc, ctx);
    if let Some(w) = old.and_then(|o| rollout::restart_warning(&rollout_at, svc, o)) {
        v.warnings.push(w);
    }
    check_health(
        &mut v.errors,
        &spec.child("healthCheck"),
        s.health_check.as_ref(),
    );
    check_metrics(&mut v.errors, &spec.child("metrics"), s.metrics.as_ref());
    let timeout = check_routing(&mut v.errors, &spec.child("routing"), svc, ctx);
    crate::engine::model_names::check((&mut v.errors, &mut v.warnings), &spec, svc, &layers);
    super::capacity::check_capacity(&mut v, &spec, svc, ctx, &layers, fit);
    super::limits::check_service_limits(&mut v, &spec, svc, ctx, &layers, timeout);
    v
}

/// A model reference: set, at most 253 bytes, without whitespace.
fn check_model_ref(errs: &mut Vec<FieldError>, at: &Path<'_>, m: &ModelSpec) {
    let r = &m.r#ref;
    if r.is_empty() {
        errs.push(FieldError::required(at, "the model to serve"));
    } else if r.len() > 253 {
        errs.push(FieldError::too_long(
            at,
            &format!("may not be more than 253 bytes (is {})", r.len()),
        ));
    } else if r.chars().any(char::is_whitespace) {
        errs.push(FieldError::invalid(
            at,
            format!("{r:?}"),
            "must not contain whitespace",
        ));
    }
}

/// `spec.engine`: an image, a port, env names set and unique.
fn check_engine(errs: &mut Vec<FieldError>, at: &Path<'_>, engine: Option<&EngineSpec>) {
    check_image(
        errs,
        &at.child("image"),
        engine.and_then(|e| e.image.as_deref()),
        "no engine image: set spec.engine.image, or defaults.engine.image in an InferencePolicy or ClusterInferencePolicy, or start the server with --default-engine-image",
    );
    let Some(e) = engine else { return };
    check_port(errs, &at.child("port"), e.port);
    let env = at.child("env");
    let mut seen = std::collections::BTreeSet::new();
    for (i, var) in e.env.iter().enumerate() {
        let item = env.index(i);
        if var.name.is_empty() {
            errs.push(FieldError::required(&item.child("name"), ""));
        } else if !seen.insert(var.name.as_str()) {
            errs.push(FieldError::duplicate(
                &item.child("name"),
                format!("{:?}", var.name),
                "environment variable names must be unique",
            ));
        }
    }
}

/// A port, when set, is between 1 and 65535.
pub(super) fn check_port(errs: &mut Vec<FieldError>, at: &Path<'_>, port: Option<i32>) {
    if let Some(port) = port
        && !(1..=65535).contains(&port)
    {
        errs.push(FieldError::invalid(
            at,
            port,
            "must be between 1 and 65535, inclusive",
        ));
    }
}

/// `spec.backend` never changes; `spec.graph` is there iff the backend is a RayService.
fn check_backend(
    errs: &mut Vec<FieldError>,
    spec: &Path<'_>,
    s: &InferenceServiceSpec,
    old: Option<&InferenceServiceSpec>,
) {
    let backend = s.backend.unwrap_or_default();
    if let Some(old) = old {
        let before = old.backend.unwrap_or_default();
        if before != backend {
            errs.push(FieldError::invalid(
                &spec.child("backend"),
                format!("{:?}", backend.as_str()),
                &format!("field is immutable (was {:?})", before.as_str()),
            ));
        }
    }
    let graph = spec.child("graph");
    match (&s.graph, backend) {
        (None, Backend::RayService) => errs.push(FieldError::required(
            &graph,
            "required when spec.backend is RayService",
        )),
        (Some(_), Backend::Deployment) => errs.push(FieldError::forbidden(
            &graph,
            "allowed only when spec.backend is RayService",
        )),
        (Some(g), Backend::RayService) => errs.extend(graph_source::graph_errors(&graph, g)),
        (None, Backend::Deployment) => {}
    }
}

/// `spec.autoscaling`: at least one replica, a maximum at least the
/// minimum, a CPU target that is a percentage.
fn check_autoscaling(errs: &mut Vec<FieldError>, at: &Path<'_>, a: &AutoscalingSpec) {
    let min = at.child("minReplicas");
    check_at_least(errs, &min, Some(a.min_replicas), 1);
    if a.max_replicas < a.min_replicas {
        errs.push(FieldError::invalid(
            &at.child("maxReplicas"),
            a.max_replicas,
            &format!(
                "must be greater than or equal to {min} ({})",
                a.min_replicas
            ),
        ));
    }
    check_percent(
        errs,
        &at.child("targetCPUUtilizationPercent"),
        a.target_cpu_utilization_percent,
    );
}

/// A percentage, when set, is between 1 and 100.
pub(super) fn check_percent(errs: &mut Vec<FieldError>, at: &Path<'_>, value: Option<i32>) {
    if let Some(t) = value
        && !(1..=100).contains(&t)
    {
        errs.push(FieldError::invalid(
            at,
            t,
            "must be between 1 and 100, inclusive",
        ));
    }
}

/// `spec.resources`: every quantity set parses and is not negative.
fn check_resources(errs: &mut Vec<FieldError>, at: &Path<'_>, r: &ResourcesSpec) {
    check_quantity(errs, &at.child("cpu"), r.cpu.as_ref());
    check_quantity(errs, &at.child("memory"), r.memory.as_ref());
    check_quantity(errs, &at.child("gpuMemory"), r.gpu_memory.as_ref());
}

/// `spec.parallelism`: tensor and pipeline, when set, at least 1.
fn check_parallelism(errs: &mut Vec<FieldError>, at: &Path<'_>, par: Option<&ParallelismSpec>) {
    check_at_least(errs, &at.child("tensor"), par.and_then(|p| p.tensor), 1);
    check_at_least(errs, &at.child("pipeline"), par.and_then(|p| p.pipeline), 1);
}

/// `spec.canary`: its model, a weight that is a percentage, replicas not
/// negative; a warning when it serves exactly what the primary does.
fn check_canary(
    v: &mut Verdict,
    spec: &Path<'_>,
    s: &InferenceServiceSpec,
    c: &CanarySpec,
    engine_image: Option<&str>,
) {
    let at = spec.child("canary");
    let model = at.child("model");
    check_model_ref(&mut v.errors, &model.child("ref"), &c.model);
    if !(0..=100).contains(&c.weight) {
        v.errors.push(FieldError::invalid(
            &at.child("weight"),
            c.weight,
            "must be between 0 and 100, inclusive",
        ));
    }
    check_at_least(&mut v.errors, &at.child("replicas"), c.replicas, 0);
    let canary_image = c.engine_image.as_deref().or(engine_image);
    if !c.model.r#ref.is_empty() && c.model.r#ref == s.model.r#ref && canary_image == engine_image {
        v.warnings.push(format!(
            "{at}: the canary is identical to the primary (model {:?}, engine image {:?}); it only splits traffic between two copies",
            c.model.r#ref,
            engine_image.unwrap_or_default()
        ));
    }
}

/// `spec.routing`: a request timeout that parses (returned, as written
/// and read, for the policies' bound), a route path no other service on
/// the Gateway claims, a Gateway with a name.
fn check_routing<'s>(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    svc: &'s InferenceService,
    ctx: &Context,
) -> (&'s str, Option<Duration>) {
    let routing = svc.spec.routing.as_ref();
    let timeout_str = routing
        .and_then(|r| r.request_timeout.as_deref())
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT);
    let request_timeout = check_duration(errs, &at.child("requestTimeout"), timeout_str);
    let template = at.child("pathTemplate");
    match route::render_route_path_at(&template, svc) {
        Err(e) => errs.push(e),
        Ok(path) => check_route_owner(errs, &template, svc, ctx, &path),
    }
    if let Some(gw) = routing.and_then(|r| r.gateway.as_ref())
        && gw.name.is_empty()
    {
        let gateway = at.child("gateway");
        errs.push(FieldError::required(&gateway.child("name"), ""));
    }
    (timeout_str, request_timeout)
}

/// The route path `path` is not another service's on the same Gateway.
fn check_route_owner(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    svc: &InferenceService,
    ctx: &Context,
    path: &str,
) {
    // The path is rendered already: only the Gateway is wanted here.
    let Some(gw) = route::claimed_gateway(svc) else {
        return;
    };
    let ns = svc.metadata.namespace.as_deref().unwrap_or(ctx.namespace);
    // The name as `name_any` gives it, borrowed.
    let name = svc.metadata.name.as_deref();
    let name = name.or(svc.metadata.generate_name.as_deref()).unwrap_or("");
    if let Some((ons, oname)) = ctx.routes.owner(&gw, path, (ns, name)) {
        errs.push(FieldError::duplicate(
            at,
            format!("{path:?}"),
            &format!(
                "route path on Gateway {}/{} is already used by InferenceService {ons}/{oname}",
                gw.namespace.as_deref().unwrap_or(ns),
                gw.name
            ),
        ));
    }
}

/// The gate's query (`at` is `spec.rollout`) parses once its placeholders
/// carry this service's namespace and names (the reconciler confines it to
/// that namespace).
fn check_analysis_query(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    svc: &InferenceService,
    ctx: &Context,
) {
    let Some(p) = svc
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.analysis.as_ref())
        .and_then(|a| a.prometheus.as_ref())
    else {
        return;
    };
    let namespace = svc
        .namespace()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| ctx.namespace.to_owned());
    let namespace = if namespace.is_empty() {
        "default".to_owned()
    } else {
        namespace
    };
    let (primary, canary) = (names::primary_name(svc), names::canary_name(svc));
    check_gate_query(errs, at, p, (&namespace, &primary, &canary));
}
