//! Progressive rollout rules that need only the object and the policies:
//! the plan's own validity, the policies' limits on it, and what "the
//! version" of a service is.

use std::time::Duration;

use super::duration::{format_gateway_duration, parse_gateway_duration};
use super::field_error::FieldError;
use super::field_path::Path;
use super::policy::Layer;
use crate::api::policy::Enforcement;
use crate::api::rollout::{
    PrometheusGate, RolloutPhase, RolloutSpec, RolloutStrategy, Threshold, VersionRef,
};
use crate::api::v1beta1::{Backend, InferenceService};

/// `spec.rollout.interval` when unset.
pub const DEFAULT_INTERVAL: &str = "5m";
/// `spec.rollout.progressDeadline` when unset.
pub const DEFAULT_PROGRESS_DEADLINE: &str = "30m";
/// `spec.rollout.maxRestarts` when unset.
pub const DEFAULT_MAX_RESTARTS: i32 = 3;
/// `analysis.prometheus.failureLimit` when unset.
pub const DEFAULT_FAILURE_LIMIT: i32 = 1;

/// The version the spec asks for: the model and the engine image.
#[must_use]
pub fn version_of(svc: &InferenceService) -> VersionRef {
    VersionRef {
        model: svc.spec.model.clone(),
        engine_image: svc.spec.engine.as_ref().and_then(|e| e.image.clone()),
    }
}

/// Whether the service rolls new versions out through canary steps.
#[must_use]
pub fn is_progressive(svc: &InferenceService) -> bool {
    svc.spec.rollout.as_ref().and_then(|r| r.strategy) == Some(RolloutStrategy::Canary)
}

/// A GEP-2257 duration of the plan, or its default.
#[must_use]
pub fn duration_or(value: Option<&str>, default: &str) -> Duration {
    value
        .and_then(|v| parse_gateway_duration(v).ok())
        .or_else(|| parse_gateway_duration(default).ok())
        .unwrap_or_default()
}

/// The plan on its own (`at` is `spec.rollout` or a policy's
/// `spec.defaults.rollout`); `address_allowed` only for a ClusterInferencePolicy.
pub fn check_plan(
    errs: &mut Vec<FieldError>,
    at: &Path<'_>,
    r: &RolloutSpec,
    address_allowed: bool,
) {
    let steps = at.child("steps");
    let mut last = 0;
    for (i, w) in r.steps.iter().enumerate() {
        if !(1..=99).contains(w) {
            errs.push(FieldError::invalid(
                &steps.index(i),
                w,
                "must be between 1 and 99, inclusive",
            ));
        } else if *w <= last {
            errs.push(FieldError::invalid(
                &steps.index(i),
                w,
                &format!("steps must increase: {w} follows {last}"),
            ));
        }
        last = last.max(*w);
    }
    if r.strategy == Some(RolloutStrategy::Canary) && r.steps.is_empty() {
        errs.push(FieldError::required(
            &steps,
            "strategy Canary needs at least one step (a canary weight such as 10)",
        ));
    }
    for (field, value) in [
        ("interval", r.interval.as_deref()),
        ("progressDeadline", r.progress_deadline.as_deref()),
    ] {
        if let Some(v) = value {
            match parse_gateway_duration(v) {
                Ok(d) if d.is_zero() => errs.push(FieldError::invalid(
                    &at.child(field),
                    format!("{v:?}"),
                    "must be greater than 0",
                )),
                Ok(_) => {}
                Err(e) => errs.push(FieldError::invalid(&at.child(field), format!("{v:?}"), &e)),
            }
        }
    }
    if let Some(m) = r.max_restarts
        && m < 0
    {
        errs.push(FieldError::invalid(
            &at.child("maxRestarts"),
            m,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(m) = r.max_unavailable
        && m < 1
    {
        errs.push(FieldError::invalid(
            &at.child("maxUnavailable"),
            m,
            "must be greater than or equal to 1",
        ));
    }
    let Some(p) = r.analysis.as_ref().and_then(|a| a.prometheus.as_ref()) else {
        return;
    };
    let analysis = at.child("analysis");
    let field = analysis.child("prometheus");
    if address_allowed && only_an_address(p) {
        // A ClusterInferencePolicy saying only where Prometheus is.
        check_address(errs, &field, p);
        return;
    }
    if address_allowed {
        check_address(errs, &field, p);
    } else if p.address.is_some() {
        errs.push(FieldError::forbidden(
            &field.child("address"),
            "the Prometheus address comes only from a ClusterInferencePolicy (defaults.rollout.analysis.prometheus.address) or serve --prometheus-url",
        ));
    }
    if p.query.trim().is_empty() {
        errs.push(FieldError::required(
            &field.child("query"),
            "a PromQL query is required",
        ));
    }
    if p.threshold.max.is_some() == p.threshold.min.is_some() {
        errs.push(FieldError::invalid(
            &field.child("threshold"),
            "{...}",
            "set exactly one of max and min",
        ));
    }
    if let Some(l) = p.failure_limit
        && l < 1
    {
        errs.push(FieldError::invalid(
            &field.child("failureLimit"),
            l,
            "must be greater than or equal to 1",
        ));
    }
}

/// A gate that only names the Prometheus address (no query, threshold
/// or other setting): what a ClusterInferencePolicy may say alone.
#[must_use]
pub fn only_an_address(p: &PrometheusGate) -> bool {
    p.query.trim().is_empty()
        && p.threshold == Threshold::default()
        && p.failure_limit.is_none()
        && p.on_no_data.is_none()
}

/// The address a ClusterInferencePolicy names: an http(s) URL.
fn check_address(errs: &mut Vec<FieldError>, field: &Path<'_>, p: &PrometheusGate) {
    if let Some(a) = &p.address
        && !(a.starts_with("http://") || a.starts_with("https://"))
    {
        errs.push(FieldError::invalid(
            &field.child("address"),
            format!("{a:?}"),
            "must be an http:// or https:// URL",
        ));
    }
}

/// `spec.rollout` of a service (at `at`): the plan, and what it cannot be
/// combined with.
pub fn check_service(errs: &mut Vec<FieldError>, at: &Path<'_>, svc: &InferenceService) {
    let Some(r) = &svc.spec.rollout else { return };
    check_plan(errs, at, r, false);
    if r.strategy != Some(RolloutStrategy::Canary) {
        return;
    }
    if svc.spec.canary.is_some() {
        errs.push(FieldError::invalid(
            &at.child("strategy"),
            "\"Canary\"",
            "a manual spec.canary and a Canary rollout cannot be combined: remove spec.canary, or use strategy Immediate",
        ));
    }
    if svc.spec.backend == Some(Backend::RayService) {
        errs.push(FieldError::invalid(
            &at.child("strategy"),
            "\"Canary\"",
            "progressive rollout needs backend Deployment",
        ));
    }
}

/// The policies' limits on the plan: every step within `maxCanaryWeight`
/// (checked by the caller like `canary.weight`), the interval at least the
/// largest `minRolloutInterval`. `at` is `spec.rollout`.
pub fn min_interval_violations(
    layers: &[Layer<'_>],
    at: &Path<'_>,
    svc: &InferenceService,
) -> Vec<(Enforcement, FieldError)> {
    let Some(r) = svc
        .spec
        .rollout
        .as_ref()
        .filter(|r| r.strategy == Some(RolloutStrategy::Canary))
    else {
        return Vec::new();
    };
    let shown = r.interval.as_deref().unwrap_or(DEFAULT_INTERVAL);
    let Ok(interval) = parse_gateway_duration(shown) else {
        return Vec::new();
    };
    layers
        .iter()
        .filter_map(|l| {
            let min = l
                .limits
                .and_then(|x| x.min_rollout_interval.as_deref())
                .and_then(|s| parse_gateway_duration(s).ok())?;
            (interval < min).then(|| {
                (
                    l.enforcement,
                    FieldError::invalid(
                        &at.child("interval"),
                        format!("{shown:?}"),
                        &format!(
                            "must be at least {} ({})",
                            format_gateway_duration(min),
                            l.display()
                        ),
                    ),
                )
            })
        })
        .collect()
}

/// The admission warning for an edit of the version while a rollout of
/// another one is under way (it restarts from the first step); `at` is the
/// rollout's path.
#[must_use]
pub fn restart_warning(
    at: &Path<'_>,
    svc: &InferenceService,
    old: &InferenceService,
) -> Option<String> {
    if !is_progressive(svc) {
        return None;
    }
    let st = old.status.as_ref()?.rollout.as_ref()?;
    if !matches!(st.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
        return None;
    }
    let target = st.target.as_ref()?;
    let new = version_of(svc);
    if &new == target || Some(&new) == st.stable.as_ref() {
        return None;
    }
    Some(format!(
        "{at}: the rollout of {:?} (step {} of {}) restarts from the first step with {:?}",
        target.model.r#ref,
        st.step.unwrap_or(0) + 1,
        svc.spec.rollout.as_ref().map_or(0, |r| r.steps.len()),
        new.model.r#ref
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rollout::{AnalysisSpec, PrometheusGate, RolloutStatus, Threshold};
    use crate::api::v1beta1::{InferenceServiceSpec, InferenceServiceStatus, ModelSpec};

    fn svc(model: &str) -> InferenceService {
        InferenceService::new(
            "chat",
            InferenceServiceSpec {
                model: ModelSpec {
                    r#ref: model.into(),
                    image: None,
                    ..Default::default()
                },
                rollout: Some(RolloutSpec {
                    strategy: Some(RolloutStrategy::Canary),
                    steps: vec![10, 30],
                    ..RolloutSpec::default()
                }),
                ..InferenceServiceSpec::default()
            },
        )
    }

    fn during(stable: &str, target: &str) -> InferenceService {
        let mut old = svc(target);
        old.status = Some(InferenceServiceStatus {
            rollout: Some(RolloutStatus {
                phase: RolloutPhase::Progressing,
                step: Some(1),
                stable: Some(version_of(&svc(stable))),
                target: Some(version_of(&svc(target))),
                ..RolloutStatus::default()
            }),
            ..InferenceServiceStatus::default()
        });
        old
    }

    #[test]
    fn editing_the_version_mid_rollout_warns_that_it_restarts() {
        let old = during("v1", "v2");
        let spec = Path::new("spec");
        let at = spec.child("rollout");
        let w = restart_warning(&at, &svc("v3"), &old).expect("a warning");
        assert!(w.contains("restarts from the first step"), "{w}");
        assert!(w.contains("\"v2\" (step 2 of 2)"), "{w}");
        // The same target, or back to the stable version: no warning.
        assert_eq!(restart_warning(&at, &svc("v2"), &old), None);
        assert_eq!(restart_warning(&at, &svc("v1"), &old), None);
    }

    #[test]
    fn the_plan_is_checked_and_only_a_cluster_policy_names_prometheus() {
        let mut plan = RolloutSpec {
            strategy: Some(RolloutStrategy::Canary),
            steps: vec![0, 50, 40, 100],
            interval: Some("soon".into()),
            progress_deadline: Some("0s".into()),
            max_restarts: Some(-1),
            analysis: Some(AnalysisSpec {
                prometheus: Some(PrometheusGate {
                    address: Some("http://prometheus:9090".into()),
                    query: " ".into(),
                    threshold: Threshold::default(),
                    failure_limit: Some(0),
                    on_no_data: None,
                }),
            }),
            max_unavailable: Some(0),
            ..RolloutSpec::default()
        };
        let mut errs = Vec::new();
        check_plan(&mut errs, &Path::new("spec.rollout"), &plan, false);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rollout.steps[0]",
                "spec.rollout.steps[2]",
                "spec.rollout.steps[3]",
                "spec.rollout.interval",
                "spec.rollout.progressDeadline",
                "spec.rollout.maxRestarts",
                "spec.rollout.maxUnavailable",
                "spec.rollout.analysis.prometheus.address",
                "spec.rollout.analysis.prometheus.query",
                "spec.rollout.analysis.prometheus.threshold",
                "spec.rollout.analysis.prometheus.failureLimit",
            ]
        );
        // A ClusterInferencePolicy may name the address (an http(s) URL).
        let mut errs = Vec::new();
        check_plan(&mut errs, &Path::new("spec.defaults.rollout"), &plan, true);
        assert!(!errs.iter().any(|e| e.field.ends_with(".address")));
        plan.analysis
            .as_mut()
            .unwrap()
            .prometheus
            .as_mut()
            .unwrap()
            .address = Some("prometheus:9090".into());
        let mut errs = Vec::new();
        check_plan(&mut errs, &Path::new("spec.defaults.rollout"), &plan, true);
        assert!(errs.iter().any(|e| e.field.ends_with(".address")));
        // Canary without steps.
        let mut errs = Vec::new();
        check_plan(
            &mut errs,
            &Path::new("spec.rollout"),
            &RolloutSpec {
                strategy: Some(RolloutStrategy::Canary),
                ..RolloutSpec::default()
            },
            false,
        );
        assert_eq!(errs[0].field, "spec.rollout.steps");
    }

    fn gate(address: Option<&str>, query: &str, max: Option<f64>) -> RolloutSpec {
        RolloutSpec {
            analysis: Some(AnalysisSpec {
                prometheus: Some(PrometheusGate {
                    address: address.map(str::to_owned),
                    query: query.into(),
                    threshold: Threshold { max, min: None },
                    failure_limit: None,
                    on_no_data: None,
                }),
            }),
            ..RolloutSpec::default()
        }
    }

    #[test]
    fn a_cluster_policy_may_name_only_the_prometheus_address() {
        let only = gate(Some("http://prometheus.monitoring:9090"), "", None);
        let mut errs = Vec::new();
        check_plan(&mut errs, &Path::new("spec.defaults.rollout"), &only, true);
        assert!(errs.is_empty(), "{errs:?}");
        // Still an http(s) URL.
        let mut errs = Vec::new();
        check_plan(
            &mut errs,
            &Path::new("spec.defaults.rollout"),
            &gate(Some("prom:9090"), "", None),
            true,
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        // A namespace policy may not, and a threshold without a query is a gate.
        let mut errs = Vec::new();
        check_plan(&mut errs, &Path::new("spec.defaults.rollout"), &only, false);
        assert!(errs.iter().any(|e| e.field.ends_with(".address")));
        let mut errs = Vec::new();
        check_plan(
            &mut errs,
            &Path::new("spec.defaults.rollout"),
            &gate(Some("http://p:9090"), "", Some(1.0)),
            true,
        );
        assert!(errs.iter().any(|e| e.field.ends_with(".query")), "{errs:?}");
    }
}
