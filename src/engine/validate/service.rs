//! Validation of a service against its own rules and the limits of the
//! policies that apply to it.

use std::time::Duration;

use kube::ResourceExt;

use crate::api::policy::{Enforcement, PolicyLimits};
use crate::api::{
    AcceleratorType,
    v1beta1::{Backend, InferenceService, ModelSpec},
};
use crate::engine::builtin::{DEFAULT_PARALLELISM, DEFAULT_REQUEST_TIMEOUT};
use crate::engine::context::Context;
use crate::engine::duration::{format_gateway_duration, parse_gateway_duration};
use crate::engine::field_error::FieldError;
use crate::engine::policy::{Layer, layers, strictest};
use crate::engine::verdict::Verdict;
use crate::engine::{graph_source, names, promql, resources, rollout, route};

use super::fields::{check_health, check_image, check_metrics, check_quantity, quoted_list};

/// Validate a (defaulted) service; `old` is the stored object on UPDATE.
///
/// Fields left unset are judged by their built-in defaults, except
/// `spec.engine.image`, which has none.
#[must_use]
pub fn validate_service(
    svc: &InferenceService,
    old: Option<&InferenceService>,
    ctx: &Context,
) -> Verdict {
    let layers = layers(ctx);
    let mut v = Verdict::default();
    let s = &svc.spec;
    let errs = &mut v.errors;

    // Names.
    errs.extend(names::derived_name_errors(svc));

    // Model.
    check_model_ref(errs, "spec.model.ref", &s.model);

    // Engine.
    let engine = s.engine.as_ref();
    let engine_image = engine.and_then(|e| e.image.as_deref());
    check_image(
        errs,
        "spec.engine.image",
        engine_image,
        "no engine image: set spec.engine.image, or defaults.engine.image in an InferencePolicy or ClusterInferencePolicy, or start the server with --default-engine-image",
    );
    if let Some(port) = engine.and_then(|e| e.port)
        && !(1..=65535).contains(&port)
    {
        errs.push(FieldError::invalid(
            "spec.engine.port",
            port,
            "must be between 1 and 65535, inclusive",
        ));
    }
    if let Some(e) = engine {
        let mut seen = std::collections::BTreeSet::new();
        for (i, var) in e.env.iter().enumerate() {
            if var.name.is_empty() {
                errs.push(FieldError::required(
                    format!("spec.engine.env[{i}].name"),
                    "",
                ));
            } else if !seen.insert(var.name.as_str()) {
                errs.push(FieldError::duplicate(
                    format!("spec.engine.env[{i}].name"),
                    format!("{:?}", var.name),
                    "environment variable names must be unique",
                ));
            }
        }
    }

    // Backend and graph.
    let backend = s.backend.unwrap_or_default();
    if let Some(old) = old {
        let before = old.spec.backend.unwrap_or_default();
        if before != backend {
            errs.push(FieldError::invalid(
                "spec.backend",
                format!("{:?}", backend.as_str()),
                &format!("field is immutable (was {:?})", before.as_str()),
            ));
        }
    }
    match (&s.graph, backend) {
        (None, Backend::RayService) => errs.push(FieldError::required(
            "spec.graph",
            "required when spec.backend is RayService",
        )),
        (Some(_), Backend::Deployment) => errs.push(FieldError::forbidden(
            "spec.graph",
            "allowed only when spec.backend is RayService",
        )),
        (Some(g), Backend::RayService) => errs.extend(graph_source::graph_errors(g)),
        (None, Backend::Deployment) => {}
    }

    // Replicas and autoscaling.
    if let Some(r) = s.replicas
        && r < 0
    {
        errs.push(FieldError::invalid(
            "spec.replicas",
            r,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(a) = &s.autoscaling {
        if a.min_replicas < 1 {
            errs.push(FieldError::invalid(
                "spec.autoscaling.minReplicas",
                a.min_replicas,
                "must be greater than or equal to 1",
            ));
        }
        if a.max_replicas < a.min_replicas {
            errs.push(FieldError::invalid(
                "spec.autoscaling.maxReplicas",
                a.max_replicas,
                &format!(
                    "must be greater than or equal to spec.autoscaling.minReplicas ({})",
                    a.min_replicas
                ),
            ));
        }
        if let Some(t) = a.target_cpu_utilization_percent
            && !(1..=100).contains(&t)
        {
            errs.push(FieldError::invalid(
                "spec.autoscaling.targetCPUUtilizationPercent",
                t,
                "must be between 1 and 100, inclusive",
            ));
        }
    }

    // Resources.
    if let Some(r) = &s.resources {
        check_quantity(errs, "spec.resources.cpu", r.cpu.as_ref());
        check_quantity(errs, "spec.resources.memory", r.memory.as_ref());
        check_quantity(errs, "spec.resources.gpuMemory", r.gpu_memory.as_ref());
    }

    // Accelerator and parallelism.
    let accel = s
        .accelerator
        .as_ref()
        .and_then(|a| a.r#type)
        .unwrap_or_default();
    let par = s.parallelism.as_ref();
    for (field, value) in [
        ("spec.parallelism.tensor", par.and_then(|p| p.tensor)),
        ("spec.parallelism.pipeline", par.and_then(|p| p.pipeline)),
    ] {
        if let Some(n) = value
            && n < 1
        {
            errs.push(FieldError::invalid(
                field,
                n,
                "must be greater than or equal to 1",
            ));
        }
    }

    super::placement::placement_errors(errs, svc, ctx);

    // Canary.
    if let Some(c) = &s.canary {
        check_model_ref(errs, "spec.canary.model.ref", &c.model);
        if !(0..=100).contains(&c.weight) {
            errs.push(FieldError::invalid(
                "spec.canary.weight",
                c.weight,
                "must be between 0 and 100, inclusive",
            ));
        }
        if let Some(r) = c.replicas
            && r < 0
        {
            errs.push(FieldError::invalid(
                "spec.canary.replicas",
                r,
                "must be greater than or equal to 0",
            ));
        }
        let canary_image = c.engine_image.as_deref().or(engine_image);
        if !c.model.r#ref.is_empty()
            && c.model.r#ref == s.model.r#ref
            && canary_image == engine_image
        {
            v.warnings.push(format!(
                "spec.canary: the canary is identical to the primary (model {:?}, engine image {:?}); it only splits traffic between two copies",
                c.model.r#ref,
                engine_image.unwrap_or_default()
            ));
        }
    }

    super::picker::check_inference_pool(&mut v.errors, svc);
    rollout::check_service(&mut v.errors, svc);
    check_analysis_query(&mut v.errors, svc, ctx);
    if let Some(w) = old.and_then(|o| rollout::restart_warning(svc, o)) {
        v.warnings.push(w);
    }

    // Health check.
    check_health(&mut v.errors, "spec.healthCheck", s.health_check.as_ref());
    check_metrics(&mut v.errors, "spec.metrics", s.metrics.as_ref());

    // Routing.
    let routing = s.routing.as_ref();
    let timeout_str = routing
        .and_then(|r| r.request_timeout.as_deref())
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT);
    let request_timeout = match parse_gateway_duration(timeout_str) {
        Ok(d) => Some(d),
        Err(e) => {
            v.errors.push(FieldError::invalid(
                "spec.routing.requestTimeout",
                format!("{timeout_str:?}"),
                &e,
            ));
            None
        }
    };
    match route::render_route_path(svc) {
        Err(e) => v.errors.push(e),
        Ok(path) => {
            if let Some((gw, _)) = route::route_claim(svc) {
                let ns = svc.metadata.namespace.as_deref().unwrap_or(ctx.namespace);
                if let Some((ons, oname)) = ctx.routes.owner(&gw, &path, (ns, &svc.name_any())) {
                    v.errors.push(FieldError::duplicate(
                        "spec.routing.pathTemplate",
                        format!("{path:?}"),
                        &format!(
                            "route path on Gateway {}/{} is already used by InferenceService {ons}/{oname}",
                            gw.namespace.as_deref().unwrap_or(ns),
                            gw.name
                        ),
                    ));
                }
            }
        }
    }
    if let Some(gw) = routing.and_then(|r| r.gateway.as_ref())
        && gw.name.is_empty()
    {
        v.errors
            .push(FieldError::required("spec.routing.gateway.name", ""));
    }

    super::capacity::check_capacity(&mut v, svc, ctx, &layers);

    // Policy limits.
    let mut lim = Limits {
        layers: &layers,
        verdict: &mut v,
    };
    if let Some(r) = s.replicas {
        lim.max("spec.replicas", r, |l| l.max_replicas, "");
    }
    if let Some(a) = &s.autoscaling {
        lim.max(
            "spec.autoscaling.maxReplicas",
            a.max_replicas,
            |l| l.max_replicas,
            "",
        );
    }
    if let Some(r) = super::picker::picker_replicas(svc) {
        lim.max(
            "spec.routing.endpointPicker.replicas",
            r,
            |l| l.max_replicas,
            "",
        );
    }
    if let Some(c) = &s.canary {
        lim.max("spec.canary.weight", c.weight, |l| l.max_canary_weight, "");
    }
    if rollout::is_progressive(svc)
        && let Some(r) = &s.rollout
    {
        for (i, w) in r.steps.iter().enumerate() {
            lim.max(
                &format!("spec.rollout.steps[{i}]"),
                *w,
                |l| l.max_canary_weight,
                "",
            );
        }
        for (enforcement, e) in rollout::min_interval_violations(&layers, svc) {
            lim.report(enforcement, e);
        }
    }
    let gpus = resources::gpus_per_replica(svc);
    if gpus > 0 {
        let detail = format!(
            "GPUs per replica (tensor {} x pipeline {}) ",
            par.and_then(|p| p.tensor).unwrap_or(DEFAULT_PARALLELISM),
            par.and_then(|p| p.pipeline).unwrap_or(DEFAULT_PARALLELISM)
        );
        lim.max(
            "spec.parallelism",
            gpus,
            |l| l.max_gpus_per_replica,
            &detail,
        );
    }
    if let Some(d) = request_timeout {
        lim.max_duration("spec.routing.requestTimeout", timeout_str, d);
    }
    if accel != AcceleratorType::None {
        lim.accelerator(accel);
    }
    if let Some(class) = s.accelerator.as_ref().and_then(|a| a.class.as_deref()) {
        lim.accelerator_class(class);
    }
    for (enforcement, e) in super::placement::limit_violations(svc, ctx, &layers) {
        lim.report(enforcement, e);
    }
    let mut images: Vec<(&str, &str)> = Vec::new();
    if let Some(img) = engine_image {
        images.push(("spec.engine.image", img));
    }
    if let Some(img) = s.model.image.as_deref() {
        images.push(("spec.model.image", img));
    }
    if let Some(c) = &s.canary {
        if let Some(img) = c.model.image.as_deref() {
            images.push(("spec.canary.model.image", img));
        }
        if let Some(img) = c.engine_image.as_deref() {
            images.push(("spec.canary.engineImage", img));
        }
    }
    if let Some(img) = names::owns_endpoint_pickers(svc)
        .then(|| {
            s.routing
                .as_ref()?
                .endpoint_picker
                .as_ref()?
                .image
                .as_deref()
        })
        .flatten()
    {
        images.push(("spec.routing.endpointPicker.image", img));
    }
    for (field, img) in images {
        lim.registry(field, img);
    }
    if let Some(g) = &s.graph
        && let Ok(url) = graph_source::parse_graph_url(&g.url)
    {
        lim.graph_host(&url);
    }
    v
}

fn check_model_ref(errs: &mut Vec<FieldError>, field: &str, m: &ModelSpec) {
    let r = &m.r#ref;
    if r.is_empty() {
        errs.push(FieldError::required(field, "the model to serve"));
    } else if r.len() > 253 {
        errs.push(FieldError::too_long(
            field,
            &format!("may not be more than 253 bytes (is {})", r.len()),
        ));
    } else if r.chars().any(char::is_whitespace) {
        errs.push(FieldError::invalid(
            field,
            format!("{r:?}"),
            "must not contain whitespace",
        ));
    }
}

/// Policy limit checks: Deny violations are errors, Warn violations warnings.
struct Limits<'l, 'a, 'v> {
    layers: &'l [Layer<'a>],
    verdict: &'v mut Verdict,
}

impl Limits<'_, '_, '_> {
    fn report(&mut self, enforcement: Enforcement, e: FieldError) {
        match enforcement {
            Enforcement::Deny => self.verdict.errors.push(e),
            Enforcement::Warn => self.verdict.warnings.push(e.to_string()),
        }
    }

    fn max(
        &mut self,
        field: &str,
        value: i32,
        get: impl Fn(&PolicyLimits) -> Option<i32>,
        what: &str,
    ) {
        let (deny, warn) = strictest(self.layers, get);
        for (b, enf) in [(deny, Enforcement::Deny), (warn, Enforcement::Warn)] {
            if let Some(b) = b
                && value > b.value
            {
                let e = FieldError::invalid(
                    field,
                    value,
                    &format!("{what}must be at most {} ({})", b.value, b.layer.display()),
                );
                self.report(enf, e);
                // A Deny violation makes the same Warn violation noise.
                return;
            }
        }
    }

    fn max_duration(&mut self, field: &str, shown: &str, value: Duration) {
        let (deny, warn) = strictest(self.layers, |l| {
            l.max_request_timeout
                .as_deref()
                .and_then(|s| parse_gateway_duration(s).ok())
        });
        for (b, enf) in [(deny, Enforcement::Deny), (warn, Enforcement::Warn)] {
            if let Some(b) = b
                && value > b.value
            {
                let e = FieldError::invalid(
                    field,
                    format!("{shown:?}"),
                    &format!(
                        "must be at most {} ({})",
                        format_gateway_duration(b.value),
                        b.layer.display()
                    ),
                );
                self.report(enf, e);
                return;
            }
        }
    }

    fn accelerator(&mut self, accel: AcceleratorType) {
        let layers = self.layers;
        for l in layers {
            let Some(list) = l.limits.and_then(|x| x.allowed_accelerators.as_ref()) else {
                continue;
            };
            if !list.contains(&accel) {
                let supported: Vec<&str> = list.iter().map(|a| a.as_str()).collect();
                let e = FieldError::not_supported(
                    "spec.accelerator.type",
                    accel,
                    &supported,
                    &format!(" ({})", l.display()),
                );
                self.report(l.enforcement, e);
            }
        }
    }

    fn accelerator_class(&mut self, class: &str) {
        let layers = self.layers;
        for l in layers {
            let Some(list) = l
                .limits
                .and_then(|x| x.allowed_accelerator_classes.as_ref())
            else {
                continue;
            };
            if !list.iter().any(|c| c == class) {
                let supported: Vec<&str> = list.iter().map(String::as_str).collect();
                let e = FieldError::not_supported(
                    "spec.accelerator.class",
                    class,
                    &supported,
                    &format!(" ({})", l.display()),
                );
                self.report(l.enforcement, e);
            }
        }
    }

    fn graph_host(&mut self, url: &url::Url) {
        for (l, e) in graph_source::host_violations(self.layers, url) {
            self.report(l.enforcement, e);
        }
    }

    fn registry(&mut self, field: &str, image: &str) {
        let layers = self.layers;
        for l in layers {
            let Some(list) = l.limits.and_then(|x| x.allowed_image_registries.as_ref()) else {
                continue;
            };
            if !list.iter().any(|p| image.starts_with(p.as_str())) {
                let e = FieldError::invalid(
                    field,
                    format!("{image:?}"),
                    &format!(
                        "must start with one of {} ({})",
                        quoted_list(list),
                        l.display()
                    ),
                );
                self.report(l.enforcement, e);
            }
        }
    }
}

/// The gate's query parses once its placeholders carry this service's
/// namespace and names (the reconciler confines it to that namespace).
fn check_analysis_query(errs: &mut Vec<FieldError>, svc: &InferenceService, ctx: &Context) {
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
    promql::check_query(
        errs,
        &crate::engine::field_path::Path::new("spec.rollout.analysis.prometheus.query"),
        &p.query,
        (
            &namespace,
            &names::primary_name(svc),
            &names::canary_name(svc),
        ),
    );
}
