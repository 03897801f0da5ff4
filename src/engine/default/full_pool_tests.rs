//! Defaulting of the full-pool fields (`spec.rollout.onFullPool`,
//! `.maxUnavailable`, `spec.canary.onFullPool`, `spec.rollout.canary.onFullPool`):
//! each layer, field by field, apart from the rollout plan.

use super::*;
use crate::api::policy::{
    CanaryDefaults, ClusterInferencePolicySpec, InferencePolicySpec, PolicyDefaults,
};
use crate::api::rollout::{CanaryOnFullPool, RolloutOnFullPool, RolloutSpec, RolloutStrategy};
use crate::api::v1beta1::{CanarySpec, InferenceService, ModelSpec};
use crate::api::{ClusterInferencePolicy, InferencePolicy};
use crate::engine::context::{PolicySnapshot, ServerDefaults, in_team_a};
use crate::engine::defaulted::Defaulted;

fn svc() -> InferenceService {
    let mut s = InferenceService::new("chat", Default::default());
    s.metadata.namespace = Some("team-a".to_owned());
    s.spec.model.r#ref = "m".to_owned();
    s
}

fn with_canary(mut s: InferenceService) -> InferenceService {
    s.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "m2".to_owned(),
            image: None,
            ..Default::default()
        },
        weight: 10,
        ..CanarySpec::default()
    });
    s
}

fn progressive(mut s: InferenceService) -> InferenceService {
    s.spec.rollout = Some(RolloutSpec {
        strategy: Some(RolloutStrategy::Canary),
        steps: vec![10, 50],
        ..RolloutSpec::default()
    });
    s
}

fn defaults(
    on_full_pool: Option<RolloutOnFullPool>,
    max_unavailable: Option<i32>,
    canary: Option<CanaryOnFullPool>,
) -> PolicyDefaults {
    PolicyDefaults {
        rollout: (on_full_pool.is_some() || max_unavailable.is_some()).then(|| RolloutSpec {
            on_full_pool,
            max_unavailable,
            ..RolloutSpec::default()
        }),
        canary: canary.map(|c| CanaryDefaults {
            on_full_pool: Some(c),
        }),
        ..PolicyDefaults::default()
    }
}

fn cluster(name: &str, d: PolicyDefaults) -> ClusterInferencePolicy {
    ClusterInferencePolicy::new(
        name,
        ClusterInferencePolicySpec {
            defaults: Some(d),
            ..ClusterInferencePolicySpec::default()
        },
    )
}

fn namespaced(name: &str, d: PolicyDefaults) -> InferencePolicy {
    let mut p = InferencePolicy::new(
        name,
        InferencePolicySpec {
            defaults: Some(d),
            ..InferencePolicySpec::default()
        },
    );
    p.metadata.namespace = Some("team-a".to_owned());
    p
}

fn run(s: &InferenceService, snap: &PolicySnapshot) -> Defaulted {
    in_team_a(snap, &ServerDefaults::default(), |c| default_service(s, c))
}

/// `field -> source` of what was filled.
fn source(d: &Defaulted, field: &str) -> Option<String> {
    d.filled
        .iter()
        .find(|p| p.field == field)
        .map(|p| p.source.to_string())
}

#[test]
fn built_in_values_fill_every_service_and_each_canary() {
    let d = run(&with_canary(svc()), &PolicySnapshot::default());
    let r = d.object.spec.rollout.as_ref().expect("rollout");
    assert_eq!(r.on_full_pool, Some(RolloutOnFullPool::Replace));
    assert_eq!(r.max_unavailable, Some(1));
    assert!(!r.has_plan());
    // No Canary rollout: no track to default.
    assert_eq!(r.canary, None);
    let c = d.object.spec.canary.as_ref().expect("canary");
    assert_eq!(c.on_full_pool, Some(CanaryOnFullPool::Wait));
    for field in [
        "spec.rollout.onFullPool",
        "spec.rollout.maxUnavailable",
        "spec.canary.onFullPool",
    ] {
        assert_eq!(source(&d, field).as_deref(), Some("built-in"), "{field}");
    }
    // A progressive rollout's track gets the canary default.
    let d = run(&progressive(svc()), &PolicySnapshot::default());
    let r = d.object.spec.rollout.as_ref().expect("rollout");
    let track = r.canary.as_ref().and_then(|c| c.on_full_pool);
    assert_eq!(track, Some(CanaryOnFullPool::Wait));
    assert_eq!(
        source(&d, "spec.rollout.canary.onFullPool").as_deref(),
        Some("built-in")
    );
    assert_eq!(d.object.spec.canary, None);
}

#[test]
fn each_field_comes_from_the_first_layer_that_sets_it() {
    // The namespace policy sets onFullPool; a cluster policy of higher
    // priority sets it too and maxUnavailable; another the canary's.
    let mut high = cluster(
        "high",
        defaults(Some(RolloutOnFullPool::Replace), Some(2), None),
    );
    high.spec.priority = 10;
    let snap = PolicySnapshot {
        cluster: vec![
            high,
            cluster(
                "low",
                defaults(None, Some(3), Some(CanaryOnFullPool::Borrow)),
            ),
        ],
        namespaced: vec![namespaced(
            "team",
            defaults(Some(RolloutOnFullPool::Wait), None, None),
        )],
    };
    let d = run(&with_canary(svc()), &snap);
    let r = d.object.spec.rollout.as_ref().expect("rollout");
    assert_eq!(r.on_full_pool, Some(RolloutOnFullPool::Wait));
    assert_eq!(r.max_unavailable, Some(2));
    assert_eq!(
        d.object.spec.canary.as_ref().and_then(|c| c.on_full_pool),
        Some(CanaryOnFullPool::Borrow)
    );
    assert_eq!(
        source(&d, "spec.rollout.onFullPool").as_deref(),
        Some("InferencePolicy/team-a/team")
    );
    assert_eq!(
        source(&d, "spec.rollout.maxUnavailable").as_deref(),
        Some("ClusterInferencePolicy/high")
    );
    assert_eq!(
        source(&d, "spec.canary.onFullPool").as_deref(),
        Some("ClusterInferencePolicy/low")
    );
    // The canary default reaches a Canary rollout's track too.
    let d = run(&progressive(svc()), &snap);
    let track = d
        .object
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.canary.clone());
    assert_eq!(
        track.and_then(|c| c.on_full_pool),
        Some(CanaryOnFullPool::Borrow)
    );
    // The service's own values win, and defaulting again changes nothing.
    let mut own = with_canary(svc());
    own.spec.rollout = Some(RolloutSpec {
        on_full_pool: Some(RolloutOnFullPool::Replace),
        max_unavailable: Some(1),
        ..RolloutSpec::default()
    });
    if let Some(c) = own.spec.canary.as_mut() {
        c.on_full_pool = Some(CanaryOnFullPool::Wait);
    }
    let d = run(&own, &snap);
    assert_eq!(d.object.spec.rollout, own.spec.rollout);
    assert_eq!(d.object.spec.canary, own.spec.canary);
    let again = run(&d.object, &snap);
    assert!(again.filled.is_empty(), "{:?}", again.filled);
}

#[test]
fn full_pool_fields_are_not_a_plan() {
    // A policy that sets only the full-pool fields makes no rollout plan
    // the default, and does not hide a lower layer's plan.
    let plan = PolicyDefaults {
        rollout: Some(RolloutSpec {
            strategy: Some(RolloutStrategy::Canary),
            steps: vec![10, 50],
            on_full_pool: Some(RolloutOnFullPool::Replace),
            ..RolloutSpec::default()
        }),
        ..PolicyDefaults::default()
    };
    let snap = PolicySnapshot {
        cluster: vec![cluster("plan", plan)],
        namespaced: vec![namespaced(
            "team",
            defaults(Some(RolloutOnFullPool::Wait), None, None),
        )],
    };
    let d = run(&svc(), &snap);
    let r = d.object.spec.rollout.as_ref().expect("rollout");
    assert_eq!(r.strategy, Some(RolloutStrategy::Canary));
    assert_eq!(r.steps, [10, 50]);
    // The namespace policy's onFullPool, not the one in the plan's block.
    assert_eq!(r.on_full_pool, Some(RolloutOnFullPool::Wait));
    assert_eq!(
        source(&d, "spec.rollout").as_deref(),
        Some("ClusterInferencePolicy/plan")
    );
    // A block of full-pool fields alone (a service defaulted before the
    // plan was adopted) gets the plan field by field.
    let mut older = svc();
    older.spec.rollout = Some(RolloutSpec {
        on_full_pool: Some(RolloutOnFullPool::Replace),
        max_unavailable: Some(1),
        ..RolloutSpec::default()
    });
    let d = run(&older, &snap);
    let r = d.object.spec.rollout.as_ref().expect("rollout");
    assert_eq!(r.steps, [10, 50]);
    assert_eq!(r.on_full_pool, Some(RolloutOnFullPool::Replace));
    assert_eq!(
        source(&d, "spec.rollout.steps").as_deref(),
        Some("ClusterInferencePolicy/plan")
    );
    assert_eq!(source(&d, "spec.rollout"), None);
}
