//! The state machine, reconcile by reconcile.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::rollout::{
    AnalysisSpec, PrometheusGate, RolloutPhase, RolloutSpec, RolloutStatus, RolloutStrategy,
    Threshold, VersionRef,
};
use crate::api::v1beta1::ModelSpec;

fn version(model: &str) -> VersionRef {
    VersionRef {
        model: ModelSpec {
            r#ref: model.into(),
            image: None,
            ..Default::default()
        },
        engine_image: Some("registry.example.com/vllm:0.9".into()),
    }
}

fn plan() -> RolloutSpec {
    RolloutSpec {
        strategy: Some(RolloutStrategy::Canary),
        steps: vec![10, 30, 60],
        interval: Some("1m".into()),
        progress_deadline: Some("10m".into()),
        max_restarts: Some(2),
        analysis: None,
        ..RolloutSpec::default()
    }
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

const READY: RolloutObserved = RolloutObserved {
    canary: Some(Readiness {
        ready: 1,
        desired: 1,
    }),
    canary_restarts: 0,
    primary_complete: false,
};

/// Drive one reconcile.
fn step(
    plan: &RolloutSpec,
    desired: &str,
    st: &RolloutStatus,
    observed: RolloutObserved,
    gate: Option<Gate>,
    action: Option<&str>,
    now: i64,
) -> Decision {
    decide(&Input {
        observed,
        gate,
        action,
        ..input(plan, desired, st, exact(st), t(now))
    })
}

/// A reconcile of `desired` over `st` with the canary ready, no verdict of
/// the gate and no action.
fn input<'a>(
    plan: &'a RolloutSpec,
    desired: &str,
    st: &'a RolloutStatus,
    clock: StepClock,
    now: Timestamp,
) -> Input<'a> {
    Input {
        plan,
        desired: version(desired),
        current: Some(st),
        observed: READY,
        gate: None,
        action: None,
        acted_on: &[],
        clock,
        now,
    }
}

/// The first reconcile of a new service asking for `model`.
fn created<'a>(plan: &'a RolloutSpec, model: &str, action: Option<&'a str>) -> Input<'a> {
    Input {
        plan,
        desired: version(model),
        current: None,
        observed: RolloutObserved::default(),
        gate: None,
        action,
        acted_on: &[],
        clock: StepClock::default(),
        now: t(0),
    }
}

/// The clock of a process that timed `st`'s step at the stored instant.
fn exact(st: &RolloutStatus) -> StepClock {
    StepClock {
        started: st.step_started_at.as_ref().map(|t| t.0),
        queried: None,
    }
}

fn stable_at(model: &str) -> RolloutStatus {
    decide(&created(&plan(), model, None)).status
}

/// `plan` rolling v2 out over a stable v1: its status once started, and
/// once a ready canary reached the first step.
fn started_and_at_first_step(plan: &RolloutSpec) -> (RolloutStatus, RolloutStatus) {
    let started = step(
        plan,
        "v2",
        &stable_at("v1"),
        RolloutObserved::default(),
        None,
        None,
        0,
    )
    .status;
    let at10 = step(plan, "v2", &started, READY, None, None, 10).status;
    (started, at10)
}

#[test]
fn the_first_version_is_stable_at_once() {
    let st = stable_at("v1");
    assert_eq!(st.phase, RolloutPhase::Stable);
    assert_eq!(st.stable, Some(version("v1")));
    let d = step(
        &plan(),
        "v1",
        &st,
        RolloutObserved::default(),
        None,
        None,
        1,
    );
    assert_eq!((d.primary, d.canary), (version("v1"), None));
    assert_eq!(d.status, st, "nothing changes");
}

#[test]
fn a_full_promotion_walks_every_step_then_rolls_the_primary_first() {
    let p = plan();
    let st = stable_at("v1");
    // A new version: the canary track starts at weight 0.
    let d = step(&p, "v2", &st, RolloutObserved::default(), None, None, 0);
    assert_eq!(d.status.phase, RolloutPhase::Progressing);
    assert_eq!(d.primary, version("v1"));
    assert_eq!(d.canary, Some((version("v2"), 0)));
    // Not ready yet: held at 0.
    let d = step(
        &p,
        "v2",
        &d.status,
        RolloutObserved::default(),
        None,
        None,
        5,
    );
    assert_eq!(d.canary, Some((version("v2"), 0)));
    assert_eq!(d.status.reason.as_deref(), Some("WaitingForCanary"));
    // Ready: the first step's weight, and its soak starts.
    let d = step(&p, "v2", &d.status, READY, None, None, 10);
    assert_eq!(d.canary, Some((version("v2"), 10)));
    assert_eq!(d.status.step_started_at, Some(Time(t(10))));
    // Held for the interval.
    let d = step(&p, "v2", &d.status, READY, None, None, 69);
    assert_eq!(d.canary, Some((version("v2"), 10)));
    assert!(d.requeue.unwrap() <= Duration::from_secs(1));
    let d = step(&p, "v2", &d.status, READY, None, None, 70);
    assert_eq!(
        (d.status.step, d.canary.clone()),
        (Some(1), Some((version("v2"), 30)))
    );
    let d = step(&p, "v2", &d.status, READY, None, None, 130);
    assert_eq!(d.canary, Some((version("v2"), 60)));
    // After the last step: the primary is rolled to the target first,
    // the canary keeping its weight until the primary is complete.
    let d = step(&p, "v2", &d.status, READY, None, None, 190);
    assert_eq!(d.primary, version("v2"));
    assert_eq!(d.canary, Some((version("v2"), 60)));
    assert_eq!(d.status.reason.as_deref(), Some("Promoting"));
    // The step stays an index into the steps: the last one.
    assert_eq!(d.status.step, Some(2));
    // A pause while the primary is being rolled does nothing.
    let paused = step(&p, "v2", &d.status, READY, None, Some("pause/1"), 195);
    assert_eq!(paused.status.phase, RolloutPhase::Progressing);
    assert_eq!(paused.status.reason.as_deref(), Some("Promoting"));
    assert_eq!(paused.primary, version("v2"));
    assert!(
        paused
            .notes
            .iter()
            .any(|n| n.reason == "RolloutActionIgnored")
    );
    let d = step(&p, "v2", &d.status, READY, None, None, 200);
    assert_eq!(d.status.step, Some(2));
    assert_eq!(
        d.canary,
        Some((version("v2"), 60)),
        "the primary is not complete yet"
    );
    let done = RolloutObserved {
        primary_complete: true,
        ..READY
    };
    let d = step(&p, "v2", &d.status, done, None, None, 210);
    assert_eq!(d.status.phase, RolloutPhase::Stable);
    assert_eq!(d.status.stable, Some(version("v2")));
    assert_eq!((d.primary, d.canary), (version("v2"), None));
    assert!(d.notes.iter().any(|n| n.reason == "RolloutPromoted"));
}

#[test]
fn failures_roll_back_and_nothing_is_retried_until_the_spec_changes() {
    let p = plan();
    let (started, at10) = started_and_at_first_step(&p);
    // A crash-looping canary.
    let crashing = RolloutObserved {
        canary_restarts: 3,
        ..READY
    };
    let d = step(&p, "v2", &at10, crashing, None, None, 20);
    assert_eq!(d.status.phase, RolloutPhase::RolledBack);
    assert_eq!(d.status.reason.as_deref(), Some("CanaryRestarts"));
    assert_eq!((d.primary.clone(), d.canary.clone()), (version("v1"), None));
    assert!(
        d.notes
            .iter()
            .any(|n| n.warning && n.reason == "RolledBack")
    );
    // The same spec: nothing retried.
    let again = step(&p, "v2", &d.status, READY, None, None, 500);
    assert_eq!(again.status.phase, RolloutPhase::RolledBack);
    assert_eq!(again.canary, None);
    // Reverted to the stable version: Stable.
    let back = step(&p, "v1", &d.status, READY, None, None, 600);
    assert_eq!(back.status.phase, RolloutPhase::Stable);
    // Another version: a new rollout.
    let next = step(&p, "v3", &d.status, READY, None, None, 600);
    assert_eq!(next.status.phase, RolloutPhase::Progressing);
    assert_eq!(next.canary, Some((version("v3"), 0)));
    // Never ready within the deadline.
    let d = step(
        &p,
        "v2",
        &started,
        RolloutObserved::default(),
        None,
        None,
        601,
    );
    assert_eq!(d.status.reason.as_deref(), Some("ProgressDeadlineExceeded"));
}

#[test]
fn the_gate_holds_below_the_failure_limit_and_fails_at_it() {
    let mut p = gated(None);
    if let Some(gate) = p.analysis.as_mut().and_then(|a| a.prometheus.as_mut()) {
        gate.failure_limit = Some(2);
    }
    let (_, at10) = started_and_at_first_step(&p);
    assert!(!gate_due(&p, Some(&at10), &exact(&at10), t(69)));
    assert!(gate_due(&p, Some(&at10), &exact(&at10), t(70)));
    // Due but not evaluated: nothing moves.
    let d = step(&p, "v2", &at10, READY, None, None, 70);
    assert_eq!(d.status.weight, Some(10));
    // No data: held (Hold is the default).
    let d = step(&p, "v2", &at10, READY, Some(Gate::NoData), None, 70);
    assert_eq!(
        (d.status.weight, d.status.reason.as_deref()),
        (Some(10), Some("AnalysisNoData"))
    );
    // One failure holds, the second fails the rollout.
    let d = step(
        &p,
        "v2",
        &at10,
        READY,
        Some(Gate::Fail("p99 12 > 1".into())),
        None,
        70,
    );
    assert_eq!(
        (d.status.phase, d.status.failures),
        (RolloutPhase::Progressing, Some(1))
    );
    assert_eq!(d.status.weight, Some(10));
    let d = step(
        &p,
        "v2",
        &d.status,
        READY,
        Some(Gate::Fail("p99 12 > 1".into())),
        None,
        130,
    );
    assert_eq!(d.status.phase, RolloutPhase::RolledBack);
    assert_eq!(d.status.reason.as_deref(), Some("AnalysisFailed"));
    // A pass advances and clears the count.
    let d = step(&p, "v2", &at10, READY, Some(Gate::Pass), None, 70);
    assert_eq!((d.status.weight, d.status.failures), (Some(30), Some(0)));
}

#[test]
fn actions_act_once_per_value() {
    let p = plan();
    let (_, at10) = started_and_at_first_step(&p);
    // pause: frozen past the interval.
    let paused = step(&p, "v2", &at10, READY, None, Some("pause/1"), 20).status;
    assert_eq!(paused.phase, RolloutPhase::Paused);
    assert_eq!(paused.last_action.as_deref(), Some("pause/1"));
    let d = step(&p, "v2", &paused, READY, None, Some("pause/1"), 500);
    assert_eq!(
        (d.status.phase, d.status.weight),
        (RolloutPhase::Paused, Some(10))
    );
    // resume: the soak starts again.
    let resumed = step(&p, "v2", &paused, READY, None, Some("resume/1"), 500).status;
    assert_eq!(resumed.phase, RolloutPhase::Progressing);
    assert_eq!(resumed.step_started_at, Some(Time(t(500))));
    let d = step(&p, "v2", &resumed, READY, None, Some("resume/1"), 559);
    assert_eq!(
        d.status.weight,
        Some(10),
        "the re-applied annotation repeats nothing"
    );
    // promote: straight to rolling the primary, never more weight.
    let d = step(&p, "v2", &resumed, READY, None, Some("promote/a"), 501);
    assert_eq!(
        (d.primary, d.canary),
        (version("v2"), Some((version("v2"), 10)))
    );
    assert_eq!(
        (d.status.step, d.status.reason.as_deref()),
        (Some(2), Some("Promoting"))
    );
    // abort: rolled back at once.
    let d = step(&p, "v2", &resumed, READY, None, Some("abort/x"), 501);
    assert_eq!((d.status.phase, d.canary), (RolloutPhase::RolledBack, None));
    assert_eq!(d.status.reason.as_deref(), Some("Aborted"));
}

#[test]
fn a_b_a_acts_twice_and_a_reapplied_value_changes_nothing() {
    let p = plan();
    let (_, at10) = started_and_at_first_step(&p);
    // A: pause.
    let a = step(&p, "v2", &at10, READY, None, Some("pause/A"), 20).status;
    assert_eq!(a.phase, RolloutPhase::Paused);
    // B: resume.
    let b = step(&p, "v2", &a, READY, None, Some("resume/B"), 30).status;
    assert_eq!(b.phase, RolloutPhase::Progressing);
    assert_eq!(b.actions_seen, ["pause/A", "resume/B"]);
    // A again (a GitOps tool re-applying its copy): nothing changes.
    let d = step(&p, "v2", &b, READY, None, Some("pause/A"), 31);
    assert_eq!(d.status, b);
    assert!(d.notes.is_empty(), "{:?}", d.notes);
    // A value this process recorded a moment ago, not in the status read
    // yet, does not act again either.
    let d = decide(&Input {
        action: Some("pause/A"),
        acted_on: &["pause/A".to_owned()],
        ..input(&p, "v2", &at10, exact(&at10), t(20))
    });
    assert_eq!(d.status.phase, RolloutPhase::Progressing);
    // A status written before the list existed: its lastAction counts.
    let legacy = RolloutStatus {
        actions_seen: Vec::new(),
        last_action: Some("pause/A".into()),
        ..b.clone()
    };
    let d = step(&p, "v2", &legacy, READY, None, Some("pause/A"), 31);
    assert_eq!(d.status.phase, RolloutPhase::Progressing);
    let d = step(&p, "v2", &legacy, READY, None, Some("pause/C"), 31);
    assert_eq!(d.status.phase, RolloutPhase::Paused);
    assert_eq!(d.status.actions_seen, ["pause/A", "pause/C"]);
    // ... kept in full when it was long: seen by its digest, listed as one.
    let long = format!("pause/{}", "x".repeat(200));
    let legacy = RolloutStatus {
        last_action: Some(long.clone()),
        ..legacy
    };
    let d = step(&p, "v2", &legacy, READY, None, Some(&long), 31);
    assert_eq!(d.status.phase, RolloutPhase::Progressing);
    let d = step(&p, "v2", &legacy, READY, None, Some("pause/D"), 31);
    assert_eq!(d.status.phase, RolloutPhase::Paused);
    assert!(
        d.status.actions_seen.iter().all(|a| a.len() <= 128),
        "{:?}",
        d.status.actions_seen
    );
}

#[test]
fn a_value_seen_before_the_rollout_does_not_act_on_it() {
    let p = plan();
    // The service was created with the annotation (its manifest's copy).
    let first = decide(&created(&p, "v1", Some("pause/in-the-manifest"))).status;
    assert_eq!(first.actions_seen, ["pause/in-the-manifest"]);
    let d = step(
        &p,
        "v2",
        &first,
        READY,
        None,
        Some("pause/in-the-manifest"),
        5,
    );
    assert_eq!(d.status.phase, RolloutPhase::Progressing);
    // Sixteen values kept, newest last; a long value as its digest.
    let mut st = d.status;
    for i in 0..20 {
        st = step(&p, "v2", &st, READY, None, Some(&format!("nothing/{i}")), 6).status;
    }
    assert_eq!(st.actions_seen.len(), 16);
    assert_eq!(
        st.actions_seen.last().map(String::as_str),
        Some("nothing/19")
    );
    let long = format!("pause/{}", "x".repeat(200));
    let paused = step(&p, "v2", &st, READY, None, Some(&long), 7).status;
    assert_eq!(paused.phase, RolloutPhase::Paused);
    let key = paused.last_action.clone().expect("recorded");
    assert!(key.starts_with("sha256:"), "{key}");
    assert_eq!(paused.actions_seen.last(), Some(&key));
}

#[test]
fn a_new_target_restarts_and_a_restart_of_infergate_resumes_where_it_was() {
    let p = plan();
    let (_, at10) = started_and_at_first_step(&p);
    let at30 = step(&p, "v2", &at10, READY, None, None, 70).status;
    // What a restarted infergate reads back from the API server.
    let stored: RolloutStatus =
        serde_json::from_value(serde_json::to_value(&at30).unwrap()).unwrap();
    let d = step(&p, "v2", &stored, READY, None, None, 100);
    assert_eq!((d.status.step, d.status.weight), (Some(1), Some(30)));
    assert_eq!(d.canary, Some((version("v2"), 30)));
    // A new version mid-rollout: weight 0 first, step 0.
    let d = step(&p, "v3", &stored, READY, None, None, 100);
    assert_eq!(
        (d.status.step, d.canary),
        (Some(0), Some((version("v3"), 0)))
    );
    // Reverted mid-rollout: ends at once.
    let d = step(&p, "v1", &stored, READY, None, None, 100);
    assert_eq!((d.status.phase, d.canary), (RolloutPhase::Stable, None));
}

fn gated(on_no_data: Option<crate::api::rollout::OnNoData>) -> RolloutSpec {
    let mut p = plan();
    p.analysis = Some(AnalysisSpec {
        prometheus: Some(PrometheusGate {
            address: None,
            query: "q".into(),
            threshold: Threshold {
                max: Some(1.0),
                min: None,
            },
            failure_limit: None,
            on_no_data,
        }),
    });
    p
}

#[test]
fn no_data_holds_at_most_the_progress_deadline_and_asks_once_per_interval() {
    // interval 1m, progressDeadline 10m; the step started at t(10).
    let p = gated(None);
    let (_, at10) = started_and_at_first_step(&p);
    let held = step(&p, "v2", &at10, READY, Some(Gate::NoData), None, 70).status;
    assert_eq!(held.reason.as_deref(), Some("AnalysisNoData"));
    assert_eq!(
        held.step_started_at, at10.step_started_at,
        "the step's start stays"
    );
    // Asked at 70: not again before 130.
    let clock = StepClock {
        queried: Some(t(70)),
        ..exact(&held)
    };
    assert!(!gate_due(&p, Some(&held), &clock, t(71)));
    assert!(!gate_due(&p, Some(&held), &clock, t(129)));
    assert!(gate_due(&p, Some(&held), &clock, t(130)));
    // The requeue while holding waits for the next query.
    let d = decide(&input(&p, "v2", &held, clock, t(71)));
    assert_eq!(d.status.reason.as_deref(), Some("AnalysisNoData"));
    assert_eq!(d.requeue, Some(POLL));
    let d = decide(&input(&p, "v2", &held, clock, t(125)));
    assert_eq!(d.requeue, Some(Duration::from_secs(5)));
    // Still no sample 10m after the step started: the rollout fails.
    let d = step(&p, "v2", &held, READY, Some(Gate::NoData), None, 609);
    assert_eq!(d.status.phase, RolloutPhase::Progressing);
    let d = step(&p, "v2", &held, READY, Some(Gate::NoData), None, 610);
    assert_eq!(d.status.phase, RolloutPhase::RolledBack);
    assert_eq!(d.status.reason.as_deref(), Some("AnalysisNoData"));
    // Also when the deadline passes between two queries.
    let d = step(&p, "v2", &held, READY, None, None, 611);
    assert_eq!(
        (d.status.phase, d.status.reason.as_deref()),
        (RolloutPhase::RolledBack, Some("AnalysisNoData"))
    );
    // Data again before the deadline: the step passes.
    let d = step(&p, "v2", &held, READY, Some(Gate::Pass), None, 300);
    assert_eq!(d.status.weight, Some(30));
}

#[test]
fn a_gate_without_a_prometheus_address_says_so_and_ends() {
    let p = gated(None);
    let (_, at10) = started_and_at_first_step(&p);
    let why = "the analysis has a query but no Prometheus address".to_owned();
    let d = step(
        &p,
        "v2",
        &at10,
        READY,
        Some(Gate::NoAddress(why.clone())),
        None,
        70,
    );
    assert_eq!(d.status.reason.as_deref(), Some("NoPrometheusAddress"));
    assert!(
        d.status
            .message
            .as_deref()
            .unwrap()
            .contains("no Prometheus address")
    );
    let d = step(&p, "v2", &d.status, READY, None, None, 700);
    assert_eq!(d.status.phase, RolloutPhase::RolledBack);
    assert_eq!(d.status.reason.as_deref(), Some("NoPrometheusAddress"));
}

#[test]
fn the_message_is_cut_to_a_kibibyte() {
    let p = gated(Some(crate::api::rollout::OnNoData::Fail));
    let mut p3 = p.clone();
    if let Some(g) = p3.analysis.as_mut().and_then(|a| a.prometheus.as_mut()) {
        g.failure_limit = Some(3);
    }
    let (_, at10) = started_and_at_first_step(&p3);
    let long = "x".repeat(10_000);
    let d = step(&p3, "v2", &at10, READY, Some(Gate::Fail(long)), None, 70);
    assert!(d.status.message.as_deref().unwrap().len() <= 1024);
}

#[test]
fn a_soak_timed_from_a_stored_second_is_never_short() {
    let p = plan();
    let (_, at10) = started_and_at_first_step(&p);
    // Without this process's clock, the stored second may be up to a
    // second before the route was applied: the soak ends a second later.
    let no_clock = |now| decide(&input(&p, "v2", &at10, StepClock::default(), t(now)));
    assert_eq!(no_clock(70).status.weight, Some(10));
    assert_eq!(no_clock(71).status.weight, Some(30));
    // With it, the precise instant counts.
    let precise = t(10)
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(900))
        .unwrap();
    let clock = StepClock {
        started: Some(precise),
        queried: None,
    };
    let at = |now: Timestamp| decide(&input(&p, "v2", &at10, clock, now));
    let just_before = precise
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(59_999))
        .unwrap();
    let d = at(just_before);
    assert_eq!(d.status.weight, Some(10));
    assert!(d.requeue.unwrap() <= Duration::from_millis(100));
    let d = at(precise
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(60))
        .unwrap());
    assert_eq!(d.status.weight, Some(30));
}
