//! Rules of a change on a full GPU pool that need only the object: how
//! many replicas a `Replace` may take down at once, and what a write asks
//! of the pool beyond a scale-up ([`pool_changes`]).
//!
//! `spec.rollout.maxUnavailable` is at least 1 and leaves one replica
//! serving: at most `replicas - 1`, where `replicas` is the fewest the
//! primary may run (`autoscaling.minReplicas` under an HPA, else
//! `spec.replicas`). With one replica, 1 is the only value (a `Replace`
//! is then a short outage, which admission warns about when it happens);
//! with none, nothing serves and nothing is bounded.

use super::builtin::{DEFAULT_MAX_UNAVAILABLE, DEFAULT_REPLICAS};
use super::field_error::FieldError;
use super::field_path::Path;
use crate::api::rollout::{CanaryOnFullPool, RolloutStrategy};
use crate::api::v1beta1::{Backend, InferenceService, InferenceServiceSpec};

/// The replicas `maxUnavailable` is bounded by: the fewest the primary may
/// run, and the field they come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServingFloor {
    /// `spec.autoscaling.minReplicas` or `spec.replicas` (its built-in
    /// value when unset).
    pub replicas: i32,
    /// Where `replicas` comes from.
    pub field: &'static str,
}

impl ServingFloor {
    /// The fewest replicas `svc`'s primary may run.
    #[must_use]
    pub fn of(svc: &InferenceService) -> Self {
        match &svc.spec.autoscaling {
            Some(a) => Self {
                replicas: a.min_replicas,
                field: "spec.autoscaling.minReplicas",
            },
            None => Self {
                replicas: svc.spec.replicas.unwrap_or(DEFAULT_REPLICAS),
                field: "spec.replicas",
            },
        }
    }

    /// The largest `maxUnavailable` allowed: `replicas - 1`, 1 for a single
    /// replica, `None` (no bound) for none.
    #[must_use]
    pub fn max_unavailable(self) -> Option<i32> {
        match self.replicas {
            r if r > 1 => Some(r - 1),
            1 => Some(1),
            _ => None,
        }
    }
}

/// The `maxUnavailable` of `svc` (its built-in value when unset).
#[must_use]
pub fn max_unavailable(svc: &InferenceService) -> i32 {
    svc.spec
        .rollout
        .as_ref()
        .and_then(|r| r.max_unavailable)
        .unwrap_or(DEFAULT_MAX_UNAVAILABLE)
}

/// `spec.rollout.maxUnavailable` (`at` is `spec.rollout`), when set: at
/// least 1 (checked with the plan, for policies too) and within the
/// serving floor.
pub fn check_service(errs: &mut Vec<FieldError>, at: &Path<'_>, svc: &InferenceService) {
    let Some(n) = svc.spec.rollout.as_ref().and_then(|r| r.max_unavailable) else {
        return;
    };
    let floor = ServingFloor::of(svc);
    let Some(bound) = floor.max_unavailable() else {
        return;
    };
    if n < 1 || n <= bound {
        return;
    }
    let why = if floor.replicas > 1 {
        format!(
            "{} {} - 1: one replica always serves",
            floor.field, floor.replicas
        )
    } else {
        format!("{} is 1: a Replace takes the one replica down", floor.field)
    };
    errs.push(FieldError::invalid(
        &at.child("maxUnavailable"),
        n,
        &format!("must be at most {bound} ({why})"),
    ));
}

/// The AcceleratorClass a service's replicas draw devices from and how
/// many each takes (`tensor x pipeline`): `None` for a service without a
/// class or without devices, which rolls as it always did.
#[must_use]
pub fn pool_of(svc: &InferenceService) -> Option<(&str, u64)> {
    let class = svc.spec.accelerator.as_ref()?.class.as_deref()?;
    let per_replica = u64::try_from(super::resources::gpus_per_replica(svc)).ok()?;
    (per_replica > 0).then_some((class, per_replica))
}

/// A canary's `onFullPool` and the field it comes from: a manual
/// canary's (`spec.canary`), else the `Canary` rollout's track's.
#[must_use]
pub fn canary_on_full_pool(
    svc: &InferenceService,
    manual: bool,
) -> (&'static str, CanaryOnFullPool) {
    if manual {
        let mode = svc.spec.canary.as_ref().and_then(|c| c.on_full_pool);
        return ("canary.onFullPool", mode.unwrap_or_default());
    }
    let mode = svc
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.canary.as_ref())
        .and_then(|c| c.on_full_pool);
    ("rollout.canary.onFullPool", mode.unwrap_or_default())
}

/// Whether a canary of `svc` borrows its replicas from the primary: mode
/// `Borrow`, and a primary whose replicas `spec.replicas` sets (under an
/// HPA the autoscaler owns them, and the canary waits).
#[must_use]
pub fn borrows(svc: &InferenceService, manual: bool) -> bool {
    canary_on_full_pool(svc, manual).1 == CanaryOnFullPool::Borrow && svc.spec.autoscaling.is_none()
}

/// What a canary whose pods do not fit does, in words, with the mode:
/// `it waits for room and the route stays on the primary (canary.onFullPool:
/// Wait)`.
#[must_use]
pub fn canary_mode_words(svc: &InferenceService, manual: bool) -> String {
    let (field, mode) = canary_on_full_pool(svc, manual);
    match mode {
        CanaryOnFullPool::Wait => {
            format!("it waits for room and the route stays on the primary ({field}: Wait)")
        }
        CanaryOnFullPool::Borrow if svc.spec.autoscaling.is_some() => format!(
            "it waits for room and the route stays on the primary ({field}: Borrow takes replicas spec.replicas sets; under autoscaling the canary waits)"
        ),
        CanaryOnFullPool::Borrow => format!(
            "the primary lends it its replicas one at a time, keeping one ready ({field}: Borrow)"
        ),
    }
}

/// The canary weight a route may carry while the canary borrows from the
/// primary: the largest weight up to `wanted` such that each track's share
/// of the ready replicas of the tracks routed, rounded up, is at most its
/// own ready replicas (`ceil(w/100 x (p + c)) <= c` and the primary's
/// likewise); 0 (the primary alone) when no such weight routes the canary.
#[must_use]
pub fn carried_weight(wanted: i32, primary_ready: i32, canary_ready: i32) -> i32 {
    let (p, c) = (
        i64::from(primary_ready.max(0)),
        i64::from(canary_ready.max(0)),
    );
    if c == 0 || p == 0 {
        return 0;
    }
    let total = p + c;
    let carries = |w: i64, ready: i64| (w * total + 99) / 100 <= ready;
    (1..=i64::from(wanted.clamp(0, 100)))
        .rev()
        .find(|w| carries(*w, c) && carries(100 - w, p))
        .and_then(|w| i32::try_from(w).ok())
        .unwrap_or(0)
}

/// What a write of a service asks of its class's pool beyond a scale-up
/// (admission warns when the pool has no room for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolChange {
    /// The primary Deployment rolls: its pod template changes (the first
    /// field that changes it).
    RollsPrimary(&'static str),
    /// A canary track is added with this many replicas (a manual canary,
    /// or a `Canary` rollout's new version).
    AddsCanary {
        /// The field that adds it.
        field: &'static str,
        /// Its replicas.
        replicas: i32,
    },
    /// KubeRay builds a second RayCluster beside the running one (its
    /// zero-downtime upgrade: the cluster's pods change).
    NewRayCluster(&'static str),
}

/// The first field of the engine's pod template that differs between the
/// two specs (model, engine, resources, accelerator, parallelism,
/// placement, ServiceAccount, pull secrets, health check); `None` when
/// the template is the same (a scale, a route, a rollout plan).
#[must_use]
pub fn template_change(
    new: &InferenceServiceSpec,
    old: &InferenceServiceSpec,
) -> Option<&'static str> {
    let image = |s: &InferenceServiceSpec| s.engine.as_ref().and_then(|e| e.image.clone());
    if image(new) != image(old) {
        return Some("spec.engine.image");
    }
    let changed = [
        ("spec.engine", new.engine != old.engine),
        ("spec.model", new.model != old.model),
        ("spec.resources", new.resources != old.resources),
        ("spec.accelerator", new.accelerator != old.accelerator),
        ("spec.parallelism", new.parallelism != old.parallelism),
        ("spec.placement", new.placement != old.placement),
        (
            "spec.serviceAccountName",
            new.service_account_name != old.service_account_name,
        ),
        (
            "spec.imagePullSecrets",
            new.image_pull_secrets != old.image_pull_secrets,
        ),
        ("spec.healthCheck", new.health_check != old.health_check),
    ];
    changed.into_iter().find(|(_, c)| *c).map(|(f, _)| f)
}

/// What the write of `svc` (over `old` on UPDATE) asks of the pool: a
/// rollout of the primary, a canary added, or a second RayCluster. A
/// CREATE rolls nothing; its canary is added.
#[must_use]
pub fn pool_changes(svc: &InferenceService, old: Option<&InferenceService>) -> Vec<PoolChange> {
    let spec = &svc.spec;
    let mut out = Vec::new();
    if spec.backend.unwrap_or_default() == Backend::RayService {
        if let Some(field) = old.and_then(|o| template_change(spec, &o.spec)) {
            out.push(PoolChange::NewRayCluster(field));
        }
        return out;
    }
    let progressive = spec
        .rollout
        .as_ref()
        .and_then(|r| r.strategy)
        .is_some_and(|s| s == RolloutStrategy::Canary);
    if let Some(old) = old
        && let Some(field) = template_change(spec, &old.spec)
    {
        let version = |s: &InferenceServiceSpec| {
            (
                s.model.clone(),
                s.engine.as_ref().and_then(|e| e.image.clone()),
            )
        };
        if progressive && version(spec) != version(&old.spec) && spec.canary.is_none() {
            // The new version starts on a canary track at the first step.
            let first = spec
                .rollout
                .as_ref()
                .and_then(|r| r.steps.first().copied())
                .unwrap_or(1);
            out.push(PoolChange::AddsCanary {
                field,
                replicas: super::resources::canary_replicas_at(spec, first, None),
            });
        } else {
            out.push(PoolChange::RollsPrimary(field));
        }
    }
    let had_canary = old.is_some_and(|o| o.spec.canary.is_some());
    if !had_canary && spec.canary.is_some() {
        let replicas = super::resources::canary_replicas(svc);
        if replicas > 0 {
            out.push(PoolChange::AddsCanary {
                field: "spec.canary",
                replicas,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::rollout::RolloutSpec;
    use crate::api::v1beta1::{AutoscalingSpec, InferenceServiceSpec};

    fn svc(replicas: Option<i32>, min: Option<i32>, n: Option<i32>) -> InferenceService {
        InferenceService::new(
            "chat",
            InferenceServiceSpec {
                replicas,
                autoscaling: min.map(|m| AutoscalingSpec {
                    min_replicas: m,
                    max_replicas: m + 4,
                    target_cpu_utilization_percent: None,
                }),
                rollout: Some(RolloutSpec {
                    max_unavailable: n,
                    ..RolloutSpec::default()
                }),
                ..InferenceServiceSpec::default()
            },
        )
    }

    fn errors(s: &InferenceService) -> Vec<String> {
        let spec = Path::new("spec");
        let mut errs = Vec::new();
        check_service(&mut errs, &spec.child("rollout"), s);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn one_replica_always_serves() {
        assert!(errors(&svc(Some(3), None, Some(2))).is_empty());
        assert_eq!(
            errors(&svc(Some(3), None, Some(3))),
            [
                "spec.rollout.maxUnavailable: Invalid value: 3: must be at most 2 (spec.replicas 3 - 1: one replica always serves)"
            ]
        );
        // Under an HPA the floor is its minReplicas, whatever spec.replicas says.
        assert_eq!(
            errors(&svc(Some(8), Some(2), Some(2))),
            [
                "spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (spec.autoscaling.minReplicas 2 - 1: one replica always serves)"
            ]
        );
        assert!(errors(&svc(Some(1), Some(4), Some(3))).is_empty());
    }

    #[test]
    fn one_replica_allows_one_and_none_bounds_nothing() {
        assert!(errors(&svc(Some(1), None, Some(1))).is_empty());
        assert!(errors(&svc(None, None, Some(1))).is_empty());
        assert_eq!(
            errors(&svc(None, None, Some(2))),
            [
                "spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (spec.replicas is 1: a Replace takes the one replica down)"
            ]
        );
        assert_eq!(
            errors(&svc(Some(1), Some(1), Some(2))),
            [
                "spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (spec.autoscaling.minReplicas is 1: a Replace takes the one replica down)"
            ]
        );
        // Scaled to zero: nothing serves, nothing to bound.
        assert!(errors(&svc(Some(0), None, Some(5))).is_empty());
        // Below 1 is the plan's own error, not this one's.
        assert!(errors(&svc(Some(3), None, Some(0))).is_empty());
        assert_eq!(max_unavailable(&svc(Some(3), None, None)), 1);
        assert_eq!(
            ServingFloor::of(&svc(Some(0), None, None)).max_unavailable(),
            None
        );
    }

    fn spec_of(v: serde_json::Value) -> InferenceService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team-a"},
            "spec": v
        }))
        .expect("service")
    }

    #[test]
    fn what_a_write_asks_of_the_pool() {
        let base = serde_json::json!({
            "model": {"ref": "m"}, "engine": {"image": "vllm:1"}, "replicas": 2,
            "accelerator": {"class": "h100"}, "parallelism": {"tensor": 8}
        });
        let old = spec_of(base.clone());
        let with = |patch: serde_json::Value| {
            let mut v = base.clone();
            for (k, x) in patch.as_object().expect("object") {
                v[k] = x.clone();
            }
            spec_of(v)
        };
        // A create rolls nothing; a scale or a route neither.
        assert!(pool_changes(&old, None).is_empty());
        assert!(pool_changes(&with(serde_json::json!({"replicas": 3})), Some(&old)).is_empty());
        assert!(
            pool_changes(
                &with(serde_json::json!({"routing": {"gateway": {"name": "gw"}}})),
                Some(&old)
            )
            .is_empty()
        );
        // The engine image, the model, the placement roll the primary.
        assert_eq!(
            pool_changes(
                &with(serde_json::json!({"engine": {"image": "vllm:2"}})),
                Some(&old)
            ),
            [PoolChange::RollsPrimary("spec.engine.image")]
        );
        assert_eq!(
            pool_changes(
                &with(serde_json::json!({"model": {"ref": "m2"}})),
                Some(&old)
            ),
            [PoolChange::RollsPrimary("spec.model")]
        );
        assert_eq!(
            pool_changes(
                &with(serde_json::json!({"placement": {"nodeSelector": {"zone": "a"}}})),
                Some(&old)
            ),
            [PoolChange::RollsPrimary("spec.placement")]
        );
        // A canary added, on create as on update.
        let canary = with(
            serde_json::json!({"canary": {"model": {"ref": "m2"}, "weight": 10, "replicas": 1}}),
        );
        let added = [PoolChange::AddsCanary {
            field: "spec.canary",
            replicas: 1,
        }];
        assert_eq!(pool_changes(&canary, Some(&old)), added);
        assert_eq!(pool_changes(&canary, None), added);
        assert!(pool_changes(&canary, Some(&canary)).is_empty());
        // A Canary rollout's new version starts on a canary track.
        let progressive = |image: &str| {
            with(serde_json::json!({
                "engine": {"image": image},
                "rollout": {"strategy": "Canary", "steps": [10, 50]}
            }))
        };
        assert_eq!(
            pool_changes(&progressive("vllm:2"), Some(&progressive("vllm:1"))),
            [PoolChange::AddsCanary {
                field: "spec.engine.image",
                replicas: 1
            }]
        );
        // A RayService's cluster changes: KubeRay builds a second one; its
        // scale is applied in place.
        let ray = |image: &str, replicas: i32| {
            with(serde_json::json!({
                "backend": "RayService", "engine": {"image": image}, "replicas": replicas,
                "graph": {"url": "https://g.example.com/g.pb"}
            }))
        };
        assert_eq!(
            pool_changes(&ray("vllm:2", 2), Some(&ray("vllm:1", 2))),
            [PoolChange::NewRayCluster("spec.engine.image")]
        );
        assert!(pool_changes(&ray("vllm:1", 3), Some(&ray("vllm:1", 2))).is_empty());
    }

    #[test]
    fn a_lending_primary_routes_only_what_ready_replicas_carry() {
        // Three primary replicas and one canary: a quarter each.
        assert_eq!(carried_weight(25, 3, 1), 25);
        // Less than asked where more would overload the primary.
        assert_eq!(
            carried_weight(20, 3, 1),
            0,
            "80% on 3 of 4 ready is more than 3"
        );
        assert_eq!(carried_weight(50, 1, 1), 50);
        assert_eq!(carried_weight(20, 1, 1), 0);
        // No ready canary, or no ready primary: the primary alone.
        assert_eq!(carried_weight(25, 3, 0), 0);
        assert_eq!(carried_weight(25, 0, 1), 0);
        // Whatever is routed keeps the rule for both tracks.
        for p in 1..6 {
            for c in 1..4 {
                for want in 0..=100 {
                    let w = i64::from(carried_weight(want, p, c));
                    assert!(w <= i64::from(want));
                    if w > 0 {
                        let t = i64::from(p + c);
                        assert!((w * t + 99) / 100 <= i64::from(c), "{want} {p} {c}");
                        assert!(((100 - w) * t + 99) / 100 <= i64::from(p), "{want} {p} {c}");
                    }
                }
            }
        }
    }
}
