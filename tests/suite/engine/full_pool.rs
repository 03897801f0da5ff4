//! The full-pool fields (`spec.rollout.onFullPool`, `.maxUnavailable`,
//! `spec.canary.onFullPool`, `spec.rollout.canary.onFullPool`) through the
//! engine: one replica always serves, the policies' `maxUnavailable`
//! (Deny and Warn), policies validated, defaults visible and idempotent.

use std::collections::BTreeMap;

use infergate::api::policy::{CanaryDefaults, Enforcement, PolicyDefaults, PolicyLimits};
use infergate::api::rollout::{
    CanaryOnFullPool, RolloutCanarySpec, RolloutOnFullPool, RolloutSpec, RolloutStrategy,
};
use infergate::api::v1beta1::{AutoscalingSpec, InferenceService};
use infergate::api::{ClusterInferencePolicy, InferencePolicy};
use infergate::engine::{self, NoRoutes, PolicySnapshot};

use super::{cluster, ctx_run, errors, namespaced, valid_service, validate};

fn with(replicas: i32, max_unavailable: i32) -> InferenceService {
    let mut s = valid_service();
    s.spec.replicas = Some(replicas);
    s.spec.rollout = Some(RolloutSpec {
        on_full_pool: Some(RolloutOnFullPool::Replace),
        max_unavailable: Some(max_unavailable),
        ..RolloutSpec::default()
    });
    s
}

fn limit(n: i32) -> PolicyLimits {
    PolicyLimits {
        max_unavailable: Some(n),
        ..PolicyLimits::default()
    }
}

#[test]
fn max_unavailable_leaves_one_replica_serving() {
    let none = PolicySnapshot::default();
    assert!(validate(&with(4, 3), &none).allowed());
    assert_eq!(
        errors(&validate(&with(4, 4), &none)),
        [
            "spec.rollout.maxUnavailable: Invalid value: 4: must be at most 3 (spec.replicas 4 - 1: one replica always serves)"
        ]
    );
    assert_eq!(
        errors(&validate(&with(3, 0), &none)),
        ["spec.rollout.maxUnavailable: Invalid value: 0: must be greater than or equal to 1"]
    );
    // One replica: 1 only (a Replace is a short outage); none: no bound.
    assert!(validate(&with(1, 1), &none).allowed());
    assert_eq!(
        errors(&validate(&with(1, 2), &none)),
        [
            "spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (spec.replicas is 1: a Replace takes the one replica down)"
        ]
    );
    assert!(validate(&with(0, 3), &none).allowed());
    // Under an HPA, its minReplicas is the floor.
    let mut hpa = with(1, 2);
    hpa.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 2,
        max_replicas: 6,
        target_cpu_utilization_percent: None,
    });
    assert_eq!(
        errors(&validate(&hpa, &none)),
        [
            "spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (spec.autoscaling.minReplicas 2 - 1: one replica always serves)"
        ]
    );
}

#[test]
fn policy_max_unavailable_denies_or_warns() {
    let s = with(8, 3);
    let deny = PolicySnapshot {
        cluster: vec![cluster("platform", Enforcement::Deny, limit(4))],
        namespaced: vec![namespaced("tight", limit(2))],
    };
    assert_eq!(
        errors(&validate(&s, &deny)),
        [
            "spec.rollout.maxUnavailable: Invalid value: 3: must be at most 2 (InferencePolicy \"team-a/tight\")"
        ]
    );
    let warn = PolicySnapshot {
        cluster: vec![cluster("soft", Enforcement::Warn, limit(2))],
        ..PolicySnapshot::default()
    };
    let v = validate(&s, &warn);
    assert!(v.allowed(), "{:?}", v.errors);
    assert_eq!(
        v.warnings,
        [
            "spec.rollout.maxUnavailable: Invalid value: 3: must be at most 2 (ClusterInferencePolicy \"soft\")"
        ]
    );
    assert!(validate(&with(8, 2), &deny).allowed());
}

#[test]
fn policies_bound_and_default_max_unavailable_consistently() {
    // Its own limit: at least 1, and its default within it.
    let mut p = cluster("p", Enforcement::Deny, limit(0));
    assert_eq!(
        errors(&engine::validate_cluster_policy(&p)),
        ["spec.limits.maxUnavailable: Invalid value: 0: must be greater than or equal to 1"]
    );
    p.spec.limits = Some(limit(2));
    p.spec.defaults = Some(PolicyDefaults {
        rollout: Some(RolloutSpec {
            max_unavailable: Some(3),
            ..RolloutSpec::default()
        }),
        ..PolicyDefaults::default()
    });
    assert_eq!(
        errors(&engine::validate_cluster_policy(&p)),
        [
            "spec.defaults.rollout.maxUnavailable: Invalid value: 3: must be at most spec.limits.maxUnavailable (2)"
        ]
    );
    // The canary's default is defaults.canary, never defaults.rollout.canary.
    p.spec.defaults = Some(PolicyDefaults {
        rollout: Some(RolloutSpec {
            canary: Some(RolloutCanarySpec {
                on_full_pool: Some(CanaryOnFullPool::Borrow),
            }),
            ..RolloutSpec::default()
        }),
        canary: Some(CanaryDefaults {
            on_full_pool: Some(CanaryOnFullPool::Borrow),
        }),
        ..PolicyDefaults::default()
    });
    assert_eq!(
        errors(&engine::validate_cluster_policy(&p)),
        [
            "spec.defaults.rollout.canary: Forbidden: set defaults.canary.onFullPool: it defaults the canary of a Canary rollout and a manual spec.canary alike"
        ]
    );
    // A namespace policy may tighten the cluster's limit, not loosen it,
    // and its default stays within the cluster's limit.
    let snap = PolicySnapshot {
        cluster: vec![cluster("platform", Enforcement::Deny, limit(2))],
        ..PolicySnapshot::default()
    };
    let labels = BTreeMap::new();
    let run = |p: &InferencePolicy| {
        ctx_run(&snap, &labels, &NoRoutes, |c| {
            engine::validate_namespaced_policy(p, c)
        })
    };
    assert!(run(&namespaced("ok", limit(1))).allowed());
    assert_eq!(
        errors(&run(&namespaced("loose", limit(3)))),
        [
            "spec.limits.maxUnavailable: Invalid value: 3: may not loosen the limit 2 of ClusterInferencePolicy \"platform\""
        ]
    );
    let mut def = namespaced("defaults", PolicyLimits::default());
    def.spec.defaults = Some(PolicyDefaults {
        rollout: Some(RolloutSpec {
            max_unavailable: Some(3),
            ..RolloutSpec::default()
        }),
        ..PolicyDefaults::default()
    });
    assert_eq!(
        errors(&run(&def)),
        [
            "spec.defaults.rollout.maxUnavailable: Invalid value: 3: must be at most 2 (ClusterInferencePolicy \"platform\")"
        ]
    );
}

#[test]
fn a_defaulted_service_carries_the_full_pool_fields_and_validates() {
    let mut d = PolicyDefaults {
        rollout: Some(RolloutSpec {
            strategy: Some(RolloutStrategy::Canary),
            steps: vec![10, 50],
            max_unavailable: Some(2),
            ..RolloutSpec::default()
        }),
        canary: Some(CanaryDefaults {
            on_full_pool: Some(CanaryOnFullPool::Borrow),
        }),
        ..PolicyDefaults::default()
    };
    d.rollout.as_mut().unwrap().on_full_pool = Some(RolloutOnFullPool::Wait);
    let policy = ClusterInferencePolicy::new(
        "platform",
        infergate::api::policy::ClusterInferencePolicySpec {
            defaults: Some(d),
            ..Default::default()
        },
    );
    let snap = PolicySnapshot {
        cluster: vec![policy],
        ..PolicySnapshot::default()
    };
    let mut s = valid_service();
    s.spec.replicas = Some(3);
    let labels = BTreeMap::new();
    let (once, twice, v) = ctx_run(&snap, &labels, &NoRoutes, |c| {
        let once = engine::default_service(&s, c);
        let twice = engine::default_service(&once.object, c);
        let v = engine::validate_service(&once.object, None, c);
        (once, twice, v)
    });
    let r = once.object.spec.rollout.as_ref().expect("rollout");
    assert_eq!(r.on_full_pool, Some(RolloutOnFullPool::Wait));
    assert_eq!(r.max_unavailable, Some(2));
    assert_eq!(
        r.canary.as_ref().and_then(|c| c.on_full_pool),
        Some(CanaryOnFullPool::Borrow)
    );
    assert!(twice.filled.is_empty(), "{:?}", twice.filled);
    assert!(v.allowed(), "{:?}", v.errors);
    // The policy's default, too large for a service of 2 replicas, is
    // reported at the service's field.
    s.spec.replicas = Some(2);
    let v = ctx_run(&snap, &labels, &NoRoutes, |c| {
        let once = engine::default_service(&s, c);
        engine::validate_service(&once.object, None, c)
    });
    assert_eq!(
        errors(&v),
        [
            "spec.rollout.maxUnavailable: Invalid value: 2: must be at most 1 (spec.replicas 2 - 1: one replica always serves)"
        ]
    );
}
