//! What the policies that apply to a service bound in it: Deny violations
//! are errors, Warn violations warnings.

use std::time::Duration;

use crate::api::AcceleratorType;
use crate::api::policy::{Enforcement, PolicyLimits};
use crate::api::v1beta1::{InferenceService, InferenceServiceSpec};
use crate::engine::builtin::DEFAULT_PARALLELISM;
use crate::engine::context::Context;
use crate::engine::duration::{format_gateway_duration, parse_gateway_duration};
use crate::engine::field_error::FieldError;
use crate::engine::field_path::Path;
use crate::engine::policy::{Layer, strictest};
use crate::engine::verdict::Verdict;
use crate::engine::{graph_source, names, resources, rollout};

use super::fields::quoted_list;

/// The policies' limits on `svc` (`spec` is its spec's path); `timeout` is
/// its request timeout as written and read (`None` when it does not parse).
pub(super) fn check_service_limits(
    v: &mut Verdict,
    spec: &Path<'_>,
    svc: &InferenceService,
    ctx: &Context,
    layers: &[Layer<'_>],
    (timeout_str, timeout): (&str, Option<Duration>),
) {
    let mut lim = Limits { layers, verdict: v };
    lim.counts(spec, svc);
    lim.gpus(&spec.child("parallelism"), svc);
    if let Some(d) = timeout {
        let routing = spec.child("routing");
        lim.max_duration(&routing.child("requestTimeout"), timeout_str, d);
    }
    lim.placement(spec, svc, ctx);
    lim.images(spec, &svc.spec, names::owns_endpoint_pickers(svc));
    if let Some(g) = &svc.spec.graph
        && let Ok(url) = graph_source::parse_graph_url(&g.url)
    {
        let graph = spec.child("graph");
        lim.graph_host(&graph.child("url"), &url);
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

    /// Replicas (of each track and picker) and canary weights (of the
    /// manual canary and of each rollout step); a rollout's interval and
    /// the replicas it may take down at once.
    fn counts(&mut self, spec: &Path<'_>, svc: &InferenceService) {
        let s = &svc.spec;
        let replicas = |l: &PolicyLimits| l.max_replicas;
        let weight = |l: &PolicyLimits| l.max_canary_weight;
        if let Some(r) = s.replicas {
            self.max(&spec.child("replicas"), r, replicas, "");
        }
        if let Some(a) = &s.autoscaling {
            let at = spec.child("autoscaling");
            self.max(&at.child("maxReplicas"), a.max_replicas, replicas, "");
        }
        if let Some(r) = super::picker::picker_replicas(svc) {
            let routing = spec.child("routing");
            let picker = routing.child("endpointPicker");
            self.max(&picker.child("replicas"), r, replicas, "");
        }
        if let Some(c) = &s.canary {
            let canary = spec.child("canary");
            self.max(&canary.child("weight"), c.weight, weight, "");
        }
        if rollout::is_progressive(svc)
            && let Some(r) = &s.rollout
        {
            let plan = spec.child("rollout");
            let steps = plan.child("steps");
            for (i, w) in r.steps.iter().enumerate() {
                self.max(&steps.index(i), *w, weight, "");
            }
            for (enforcement, e) in rollout::min_interval_violations(self.layers, &plan, svc) {
                self.report(enforcement, e);
            }
        }
        if let Some(n) = s.rollout.as_ref().and_then(|r| r.max_unavailable) {
            let rollout = spec.child("rollout");
            self.max(
                &rollout.child("maxUnavailable"),
                n,
                |l| l.max_unavailable,
                "",
            );
        }
    }

    /// GPUs per replica (`at` is `spec.parallelism`).
    fn gpus(&mut self, at: &Path<'_>, svc: &InferenceService) {
        let gpus = resources::gpus_per_replica(svc);
        if gpus <= 0 {
            return;
        }
        let bound = |l: &PolicyLimits| l.max_gpus_per_replica;
        let (deny, warn) = strictest(self.layers, bound);
        if ![deny, warn].into_iter().flatten().any(|b| gpus > b.value) {
            // Within every bound: nothing to word.
            return;
        }
        let par = svc.spec.parallelism.as_ref();
        let detail = format!(
            "GPUs per replica (tensor {} x pipeline {}) ",
            par.and_then(|p| p.tensor).unwrap_or(DEFAULT_PARALLELISM),
            par.and_then(|p| p.pipeline).unwrap_or(DEFAULT_PARALLELISM)
        );
        self.max(at, gpus, bound, &detail);
    }

    /// The accelerator type and class, and where the placement reaches.
    fn placement(&mut self, spec: &Path<'_>, svc: &InferenceService, ctx: &Context) {
        let s = &svc.spec;
        let accelerator = spec.child("accelerator");
        let accel = s
            .accelerator
            .as_ref()
            .and_then(|a| a.r#type)
            .unwrap_or_default();
        if accel != AcceleratorType::None {
            self.accelerator(&accelerator.child("type"), accel);
        }
        if let Some(class) = s.accelerator.as_ref().and_then(|a| a.class.as_deref()) {
            self.accelerator_class(&accelerator.child("class"), class);
        }
        for (enforcement, e) in super::placement::limit_violations(spec, svc, ctx, self.layers) {
            self.report(enforcement, e);
        }
    }

    /// Every image the service runs comes from an allowed registry.
    fn images(&mut self, spec: &Path<'_>, s: &InferenceServiceSpec, owns_pickers: bool) {
        if let Some(img) = s.engine.as_ref().and_then(|e| e.image.as_deref()) {
            self.registry(&spec.child("engine").child("image"), img);
        }
        let model = spec.child("model");
        if let Some(img) = s.model.image.as_deref() {
            self.registry(&model.child("image"), img);
        }
        if let Some(c) = &s.canary {
            let canary = spec.child("canary");
            if let Some(img) = c.model.image.as_deref() {
                self.registry(&canary.child("model").child("image"), img);
            }
            if let Some(img) = c.engine_image.as_deref() {
                self.registry(&canary.child("engineImage"), img);
            }
        }
        let picker_image = || {
            s.routing
                .as_ref()?
                .endpoint_picker
                .as_ref()?
                .image
                .as_deref()
        };
        if let Some(img) = owns_pickers.then(picker_image).flatten() {
            let routing = spec.child("routing");
            self.registry(&routing.child("endpointPicker").child("image"), img);
        }
    }

    fn max(
        &mut self,
        field: &Path<'_>,
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

    fn max_duration(&mut self, field: &Path<'_>, shown: &str, value: Duration) {
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

    fn accelerator(&mut self, field: &Path<'_>, accel: AcceleratorType) {
        let layers = self.layers;
        for l in layers {
            let Some(list) = l.limits.and_then(|x| x.allowed_accelerators.as_ref()) else {
                continue;
            };
            if !list.contains(&accel) {
                let supported: Vec<&str> = list.iter().map(|a| a.as_str()).collect();
                let e = FieldError::not_supported(
                    field,
                    accel,
                    &supported,
                    &format!(" ({})", l.display()),
                );
                self.report(l.enforcement, e);
            }
        }
    }

    fn accelerator_class(&mut self, field: &Path<'_>, class: &str) {
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
                    field,
                    class,
                    &supported,
                    &format!(" ({})", l.display()),
                );
                self.report(l.enforcement, e);
            }
        }
    }

    fn graph_host(&mut self, field: &Path<'_>, url: &url::Url) {
        for (l, e) in graph_source::host_violations(field, self.layers, url) {
            self.report(l.enforcement, e);
        }
    }

    fn registry(&mut self, field: &Path<'_>, image: &str) {
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
