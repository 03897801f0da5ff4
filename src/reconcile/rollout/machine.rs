//! The progressive rollout's state machine (`spec.rollout.strategy: Canary`),
//! as one pure function: from the spec, the rollout's status, what the
//! cluster shows (the tracks' readiness, the canary's restarts, the gate's
//! verdict), the rollout-action annotation and the time, the next status,
//! what each track runs and the weight to route.
//!
//! The rollout is driven only by spec and status, so a restart of infergate,
//! a leader change or an API server restart resumes at the same step: the
//! weight routed is always the one in status.

use std::ops::ControlFlow;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::types::{Decision, Gate, Input, Note, RolloutObserved, StepClock};
use crate::api::rollout::{OnNoData, RolloutPhase, RolloutSpec, RolloutStatus, VersionRef};
use crate::api::vocabulary::{RolloutReason, message};
use crate::engine::rollout::{
    DEFAULT_FAILURE_LIMIT, DEFAULT_INTERVAL, DEFAULT_MAX_RESTARTS, DEFAULT_PROGRESS_DEADLINE,
    duration_or,
};
use crate::reconcile::once;

/// How often a rollout that waits for the cluster looks again (watch
/// events come sooner).
pub const POLL: Duration = Duration::from_secs(10);

/// The reason of a step that waits for the gate past its soak, if it is one.
fn holding(st: &RolloutStatus) -> Option<RolloutReason> {
    st.reason
        .as_deref()
        .and_then(|r| r.parse().ok())
        .filter(|r: &RolloutReason| r.holds_past_soak())
}
/// The shortest requeue while a rollout progresses.
const MIN_REQUEUE: Duration = Duration::from_millis(100);

fn at(t: Option<&Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

fn since(now: Timestamp, t: Option<&Time>) -> Duration {
    at(t)
        .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
        .unwrap_or_default()
}

/// When the current step's soak started: the instant this process
/// applied its route when it knows it, else the stored second rounded up
/// (a stored `stepStartedAt` is cut to the second, so the soak is never
/// shorter than `interval`).
fn soak_start(st: &RolloutStatus, clock: &StepClock) -> Option<Timestamp> {
    let stored = at(st.step_started_at.as_ref())?;
    Some(clock.started.unwrap_or_else(|| {
        stored
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(1))
            .unwrap_or(stored)
    }))
}

/// How long since `t` (zero before it).
fn elapsed(now: Timestamp, t: Option<Timestamp>) -> Duration {
    t.and_then(|t| Duration::try_from(now.duration_since(t)).ok())
        .unwrap_or_default()
}

/// Whether the current step's soak is over and the gate (if any) must be
/// evaluated before the next reconcile decides: once per `interval`, never
/// sooner after the last query of the step.
#[must_use]
pub fn gate_due(
    plan: &RolloutSpec,
    st: Option<&RolloutStatus>,
    clock: &StepClock,
    now: Timestamp,
) -> bool {
    let Some(st) = st else { return false };
    let interval = duration_or(plan.interval.as_deref(), DEFAULT_INTERVAL);
    st.phase == RolloutPhase::Progressing
        && st
            .step
            .is_some_and(|s| usize::try_from(s).is_ok_and(|s| s < plan.steps.len()))
        && !st.promoting(plan.steps.len())
        && st.step_started_at.is_some()
        && elapsed(now, soak_start(st, clock)) >= interval
        && clock
            .queried
            .is_none_or(|q| elapsed(now, Some(q)) >= interval)
}

/// The decision: act on a new action value, follow the spec (start,
/// restart, revert or advance the rollout), promote once the primary runs
/// the target, and say what the tracks run and when to look again.
#[must_use]
pub fn decide(input: &Input<'_>) -> Decision {
    let mut st = input.current.cloned().unwrap_or_default();
    let mut notes = Vec::new();

    // A value not acted on before acts once; it is recorded whatever it
    // did (also when there is nothing to act on), and a value seen before
    // (a GitOps tool re-applying its copy) is ignored.
    let verb = new_action(&mut st, input.action, input.acted_on);

    let Some(stable) = st.stable.clone() else {
        return first_version(st, &input.desired);
    };
    follow_spec(input, verb.as_deref(), &stable, &mut st, &mut notes);
    let promoting = promoting(input.plan, &st);
    if promoting && input.observed.primary_complete && st.target.is_some() {
        promote(&input.desired, &mut st, &mut notes);
    }
    let (primary, canary) = tracks(&st, &input.desired, promoting);
    let requeue = requeue(input, &st, promoting);
    st.message = st.message.as_deref().map(crate::telemetry::cut_message);
    Decision {
        status: st,
        primary,
        canary,
        notes,
        requeue,
    }
}

/// The first version of a new service is stable at once.
fn first_version(st: RolloutStatus, desired: &VersionRef) -> Decision {
    let status = RolloutStatus {
        phase: RolloutPhase::Stable,
        stable: Some(desired.clone()),
        last_action: st.last_action,
        actions_seen: st.actions_seen,
        reason: Some(RolloutReason::Stable.into()),
        message: Some(format!("{} is stable", desired.model.r#ref)),
        ..RolloutStatus::default()
    };
    Decision {
        status,
        primary: desired.clone(),
        canary: None,
        notes: Vec::new(),
        requeue: None,
    }
}

/// Follow the version the spec asks for: start a rollout to a new one,
/// restart for another, end at the stable one, or advance the rollout
/// under way.
fn follow_spec(
    input: &Input<'_>,
    verb: Option<&str>,
    stable: &VersionRef,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) {
    let (plan, desired, now) = (input.plan, &input.desired, input.now);
    match st.phase {
        RolloutPhase::Stable | RolloutPhase::RolledBack => {
            if desired == stable {
                if st.phase == RolloutPhase::RolledBack || st.target.is_some() {
                    end_stable(
                        st,
                        RolloutReason::Stable,
                        format!("{} is stable", stable.model.r#ref),
                    );
                }
            } else if st.phase == RolloutPhase::RolledBack && st.target.as_ref() == Some(desired) {
                // Nothing is retried until the spec changes.
            } else {
                start(st, desired, now);
                notes.push(note(
                    false,
                    RolloutReason::RolloutStarted,
                    format!(
                        "rolling out {} (stable: {}) in steps {:?}",
                        desired.model.r#ref, stable.model.r#ref, plan.steps
                    ),
                ));
            }
        }
        RolloutPhase::Progressing | RolloutPhase::Paused => {
            if desired == stable {
                end_stable(
                    st,
                    RolloutReason::Reverted,
                    format!("the spec is back at the stable {}", stable.model.r#ref),
                );
                notes.push(note(
                    false,
                    RolloutReason::RolloutReverted,
                    "the spec was reverted to the stable version; the canary is removed".into(),
                ));
            } else if st.target.as_ref() != Some(desired) {
                start(st, desired, now);
                notes.push(note(
                    false,
                    RolloutReason::RolloutRestarted,
                    format!(
                        "a new version {} restarts the rollout from the first step",
                        desired.model.r#ref
                    ),
                ));
            } else {
                // Which part made the decision does not matter here.
                let _ = advance(plan, input, verb, st, notes);
            }
        }
    }
}

/// A rollout to `target` starts: weight 0 until the canary is ready.
fn start(st: &mut RolloutStatus, target: &VersionRef, now: Timestamp) {
    st.phase = RolloutPhase::Progressing;
    st.step = Some(0);
    st.weight = Some(0);
    st.step_started_at = None;
    st.progress_started_at = Some(Time(now));
    st.target = Some(target.clone());
    st.failures = Some(0);
    st.reason = Some(RolloutReason::WaitingForCanary.into());
    st.message = Some(format!(
        "waiting for the canary running {} to be ready",
        target.model.r#ref
    ));
}

/// The rollout ends with the stable version serving alone.
fn end_stable(st: &mut RolloutStatus, reason: RolloutReason, message: String) {
    st.phase = RolloutPhase::Stable;
    st.step = None;
    st.weight = None;
    st.step_started_at = None;
    st.progress_started_at = None;
    st.target = None;
    st.failures = None;
    st.reason = Some(reason.into());
    st.message = Some(message);
}

/// Whether the rollout is past its last step: the primary is rolled to
/// the target.
fn promoting(plan: &RolloutSpec, st: &RolloutStatus) -> bool {
    st.promoting(plan.steps.len())
}

/// The primary runs the target and is complete: the target is stable, the
/// weight returns to the primary and the canary goes.
fn promote(desired: &VersionRef, st: &mut RolloutStatus, notes: &mut Vec<Note>) {
    let target = st.target.clone().unwrap_or_else(|| desired.clone());
    st.stable = Some(target.clone());
    end_stable(
        st,
        RolloutReason::Promoted,
        format!("{} is stable", target.model.r#ref),
    );
    notes.push(note(
        false,
        RolloutReason::RolloutPromoted,
        format!("{} is now stable", target.model.r#ref),
    ));
}

/// What the tracks run and the canary's weight, from the status alone.
fn tracks(
    st: &RolloutStatus,
    desired: &VersionRef,
    promoting: bool,
) -> (VersionRef, Option<(VersionRef, i32)>) {
    let stable = st.stable.clone().unwrap_or_else(|| desired.clone());
    match st.phase {
        RolloutPhase::Progressing | RolloutPhase::Paused => {
            let target = st.target.clone().unwrap_or_else(|| desired.clone());
            let weight = st.weight.unwrap_or(0);
            if promoting {
                (target.clone(), Some((target, weight)))
            } else {
                (stable, Some((target, weight)))
            }
        }
        RolloutPhase::Stable | RolloutPhase::RolledBack => (stable, None),
    }
}

/// When to look again: when the step next has something to do while it
/// soaks, every [`POLL`] while the rollout waits for the cluster, and only
/// on a change once it is over.
fn requeue(input: &Input<'_>, st: &RolloutStatus, promoting: bool) -> Option<Duration> {
    match st.phase {
        RolloutPhase::Progressing if !promoting && st.step_started_at.is_some() => {
            Some(next_look(input.plan, st, input).clamp(MIN_REQUEUE, POLL))
        }
        RolloutPhase::Progressing => Some(POLL),
        _ => None,
    }
}

/// The verb of `action` when its value was not acted on before (neither
/// in `st` nor in `acted_on`), recorded in `st` as acted on.
#[must_use]
pub fn new_action(
    st: &mut RolloutStatus,
    action: Option<&str>,
    acted_on: &[String],
) -> Option<String> {
    let action = action?;
    let key = once::key(action);
    if once::contains(&st.actions_seen, st.last_action.as_deref(), &key) || acted_on.contains(&key)
    {
        return None;
    }
    // A status from before the list existed: its last value was acted on.
    once::seed(&mut st.actions_seen, st.last_action.as_deref());
    once::remember(&mut st.actions_seen, key.clone());
    st.last_action = Some(key);
    Some(action.split('/').next().unwrap_or_default().to_owned())
}

/// How long until the step next has something to do: the soak's end, the
/// next query while the gate holds (once per `interval` after the last), or
/// the hold's deadline.
fn next_look(plan: &RolloutSpec, st: &RolloutStatus, input: &Input<'_>) -> Duration {
    let now = input.now;
    let interval = duration_or(plan.interval.as_deref(), DEFAULT_INTERVAL);
    let clock = clock_for(st, input);
    let start = soak_start(st, &clock);
    let soak_left = interval.saturating_sub(elapsed(now, start));
    if !soak_left.is_zero() {
        return soak_left;
    }
    let query_left = clock.queried.map_or(Duration::ZERO, |q| {
        interval.saturating_sub(elapsed(now, Some(q)))
    });
    if holding(st).is_some() {
        let deadline = duration_or(plan.progress_deadline.as_deref(), DEFAULT_PROGRESS_DEADLINE);
        let deadline_left = deadline.saturating_sub(elapsed(now, start));
        return query_left.min(deadline_left);
    }
    query_left
}

/// The clock of the step `st` is at: the input's while the step is the
/// one it was taken for; a step started by this decision starts now.
fn clock_for(st: &RolloutStatus, input: &Input<'_>) -> StepClock {
    let before = input.current.and_then(|c| c.step_started_at.as_ref());
    if st.step_started_at.as_ref() == before {
        let mut clock = input.clock;
        if input.gate.is_some() {
            clock.queried = Some(input.now);
        }
        clock
    } else {
        StepClock {
            started: at(st.step_started_at.as_ref()),
            queried: None,
        }
    }
}

/// An event the decision calls for.
fn note(warning: bool, reason: RolloutReason, message: String) -> Note {
    Note {
        warning,
        reason,
        message,
    }
}

/// The rollout fails: no canary weight, the canary goes, nothing retried
/// until the spec changes.
fn fail(st: &mut RolloutStatus, notes: &mut Vec<Note>, reason: RolloutReason, why: String) {
    st.phase = RolloutPhase::RolledBack;
    st.step = None;
    st.weight = Some(0);
    st.step_started_at = None;
    st.progress_started_at = None;
    st.reason = Some(reason.into());
    st.message = Some(format!("rolled back: {why}"));
    notes.push(note(
        true,
        RolloutReason::RolledBack,
        format!("rollout rolled back ({reason}): {why}"),
    ));
}

/// Advance a rollout under way for the target the spec still asks for by
/// one decision: act on the action, fail it (restarts, deadline, gate),
/// wait for the canary, hold the step's soak, ask the gate, move to the
/// next step or to promotion. Each part either makes this decision
/// (`Break`) or leaves it to the next.
fn advance(
    plan: &RolloutSpec,
    input: &Input<'_>,
    verb: Option<&str>,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) -> ControlFlow<()> {
    let now = input.now;
    act_on(plan, verb, now, st, notes)?;
    if st.phase == RolloutPhase::Paused {
        return ControlFlow::Break(());
    }
    let step = st.step.and_then(|s| usize::try_from(s).ok()).unwrap_or(0);
    fail_on_restarts(plan, &input.observed, st, notes)?;
    if promoting(plan, st) || step >= plan.steps.len() {
        st.step = Some(RolloutStatus::last_step(plan.steps.len()));
        st.reason = Some(RolloutReason::Promoting.into());
        st.message =
            Some("the primary is being rolled to the target; the canary keeps its weight".into());
        return ControlFlow::Break(());
    }
    wait_for_canary(plan, &input.observed, now, st, notes)?;
    let want = plan.steps[step];
    enter_step(plan, step, want, now, st, notes)?;
    let start = soak_start(st, &clock_for(st, input));
    let interval = duration_or(plan.interval.as_deref(), DEFAULT_INTERVAL);
    if elapsed(now, start) < interval {
        st.reason = Some(RolloutReason::StepHeld.into());
        return ControlFlow::Break(());
    }
    if !ask_gate(plan, input, start, want, st, notes)? {
        count_failure(plan, input, want, st, notes);
        return ControlFlow::Break(());
    }
    next_step(plan, step, now, st, notes);
    ControlFlow::Continue(())
}

/// Act on the rollout-action annotation's verb: abort, pause, resume or
/// promote; any other verb (or one that does nothing in this phase) is
/// reported as ignored.
fn act_on(
    plan: &RolloutSpec,
    verb: Option<&str>,
    now: Timestamp,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) -> ControlFlow<()> {
    match verb {
        Some("abort") => {
            fail(
                st,
                notes,
                RolloutReason::Aborted,
                "aborted by the rollout-action annotation".into(),
            );
            return ControlFlow::Break(());
        }
        Some("pause") if st.phase == RolloutPhase::Progressing && !promoting(plan, st) => {
            st.phase = RolloutPhase::Paused;
            st.reason = Some(RolloutReason::Paused.into());
            st.message = Some(format!("paused at weight {}", st.weight.unwrap_or(0)));
            notes.push(note(
                false,
                RolloutReason::RolloutPaused,
                format!("paused at weight {}", st.weight.unwrap_or(0)),
            ));
            return ControlFlow::Break(());
        }
        Some("resume") if st.phase == RolloutPhase::Paused => {
            st.phase = RolloutPhase::Progressing;
            if st.step_started_at.is_some() {
                st.step_started_at = Some(Time(now));
            }
            notes.push(note(
                false,
                RolloutReason::RolloutResumed,
                "resumed: the current step's soak starts again".into(),
            ));
        }
        Some("promote") => {
            st.phase = RolloutPhase::Progressing;
            st.step = Some(RolloutStatus::last_step(plan.steps.len()));
            st.reason = Some(RolloutReason::Promoting.into());
            notes.push(note(
                false,
                RolloutReason::RolloutPromoting,
                "promoted by the rollout-action annotation: the primary is rolled to the target"
                    .into(),
            ));
        }
        Some(other) => notes.push(note(
            true,
            RolloutReason::RolloutActionIgnored,
            format!(
                "rollout action {other:?} does nothing now (phase {:?})",
                st.phase
            ),
        )),
        None => {}
    }
    ControlFlow::Continue(())
}

/// The rollout fails when the canary's containers restarted more than
/// `maxRestarts` times.
fn fail_on_restarts(
    plan: &RolloutSpec,
    observed: &RolloutObserved,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) -> ControlFlow<()> {
    let max_restarts = plan.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS);
    if observed.canary_restarts > max_restarts {
        fail(
            st,
            notes,
            RolloutReason::CanaryRestarts,
            format!(
                "the canary's containers restarted {} times (maxRestarts {max_restarts})",
                observed.canary_restarts
            ),
        );
        return ControlFlow::Break(());
    }
    ControlFlow::Continue(())
}

/// Wait for the canary to be fully ready, at most `progressDeadline` from
/// when it last stopped being ready.
fn wait_for_canary(
    plan: &RolloutSpec,
    observed: &RolloutObserved,
    now: Timestamp,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) -> ControlFlow<()> {
    let ready = observed
        .canary
        .is_some_and(|c| c.desired > 0 && c.ready >= c.desired);
    if ready {
        return ControlFlow::Continue(());
    }
    let deadline = duration_or(plan.progress_deadline.as_deref(), DEFAULT_PROGRESS_DEADLINE);
    if st.reason.as_deref() != Some(RolloutReason::WaitingForCanary.as_str()) {
        // It stopped being ready: the deadline runs again from now.
        st.progress_started_at = Some(Time(now));
    }
    if since(now, st.progress_started_at.as_ref()) > deadline {
        fail(
            st,
            notes,
            RolloutReason::ProgressDeadlineExceeded,
            format!(
                "the canary was not fully ready within {}",
                crate::engine::duration::format_gateway_duration(deadline)
            ),
        );
        return ControlFlow::Break(());
    }
    st.reason = Some(RolloutReason::WaitingForCanary.into());
    st.message = Some(format!(
        "waiting for the canary to be ready ({} of {})",
        observed.canary.map_or(0, |c| c.ready),
        observed.canary.map_or(0, |c| c.desired)
    ));
    ControlFlow::Break(())
}

/// Route the step's weight `want`, and start its soak, unless the step
/// already routes it.
fn enter_step(
    plan: &RolloutSpec,
    step: usize,
    want: i32,
    now: Timestamp,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) -> ControlFlow<()> {
    if st.weight == Some(want) && st.step_started_at.is_some() {
        return ControlFlow::Continue(());
    }
    st.weight = Some(want);
    st.step_started_at = Some(Time(now));
    st.reason = Some(RolloutReason::StepHeld.into());
    st.message = Some(format!(
        "step {} of {}: weight {want}",
        step + 1,
        plan.steps.len()
    ));
    notes.push(note(
        false,
        RolloutReason::RolloutStep,
        format!("weight {want} (step {} of {})", step + 1, plan.steps.len()),
    ));
    ControlFlow::Break(())
}

/// The soak is over: the gate, if any, decides whether the step passed
/// (`Continue(passed)`). A gate that holds (no sample, or no Prometheus to
/// ask) waits at most progressDeadline from the step's start.
fn ask_gate(
    plan: &RolloutSpec,
    input: &Input<'_>,
    start: Option<Timestamp>,
    want: i32,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) -> ControlFlow<(), bool> {
    let (gate, now) = (input.gate.as_ref(), input.now);
    let deadline = duration_or(plan.progress_deadline.as_deref(), DEFAULT_PROGRESS_DEADLINE);
    let mut hold = |st: &mut RolloutStatus, reason: RolloutReason, why: String| {
        let shown = crate::engine::duration::format_gateway_duration(deadline);
        if elapsed(now, start) >= deadline {
            fail(
                st,
                notes,
                reason,
                format!("{why} for {shown} after the step started (progressDeadline)"),
            );
        } else {
            st.reason = Some(reason.into());
            st.message = Some(message::Hold::format(&why, want, &shown));
        }
        ControlFlow::Break(())
    };
    let prometheus = plan.analysis.as_ref().and_then(|a| a.prometheus.as_ref());
    let passed = match (prometheus, gate) {
        (None, _) => true,
        (Some(_), None) => {
            // Not asked this time: a hold still ends at its deadline.
            if let Some(reason) = holding(st) {
                let why = st
                    .message
                    .as_deref()
                    .map(message::Hold::why)
                    .unwrap_or("the gate held")
                    .to_owned();
                return hold(st, reason, why);
            }
            return ControlFlow::Break(());
        }
        (Some(_), Some(Gate::Pass)) => true,
        (Some(_), Some(Gate::NoAddress(why))) => {
            return hold(st, RolloutReason::NoPrometheusAddress, why.clone());
        }
        (Some(p), Some(Gate::NoData)) => match p.on_no_data.unwrap_or_default() {
            OnNoData::Pass => true,
            OnNoData::Hold => {
                return hold(
                    st,
                    RolloutReason::AnalysisNoData,
                    "the analysis query returned no sample".into(),
                );
            }
            OnNoData::Fail => false,
        },
        (Some(_), Some(Gate::Fail(_))) => false,
    };
    ControlFlow::Continue(passed)
}

/// The gate failed: one more failed evaluation; at `failureLimit` the
/// rollout fails, before it the step holds and its soak starts again.
fn count_failure(
    plan: &RolloutSpec,
    input: &Input<'_>,
    want: i32,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) {
    let prometheus = plan.analysis.as_ref().and_then(|a| a.prometheus.as_ref());
    let limit = prometheus
        .and_then(|p| p.failure_limit)
        .unwrap_or(DEFAULT_FAILURE_LIMIT);
    let failures = st.failures.unwrap_or(0) + 1;
    st.failures = Some(failures);
    let why = match input.gate.as_ref() {
        Some(Gate::Fail(why)) => why.clone(),
        _ => "the query returned no sample".into(),
    };
    if failures >= limit {
        fail(
            st,
            notes,
            RolloutReason::AnalysisFailed,
            format!("{why} ({failures} of {limit} failed evaluations)"),
        );
    } else {
        // Held: the soak (and the next evaluation) starts again.
        st.step_started_at = Some(Time(input.now));
        st.reason = Some(RolloutReason::AnalysisFailed.into());
        st.message = Some(format!(
            "{why} ({failures} of {limit}); holding at weight {want}"
        ));
        notes.push(note(
            true,
            RolloutReason::AnalysisFailed,
            format!("{why} ({failures} of {limit})"),
        ));
    }
}

/// The step passed: on to the next step's weight, or past the last one to
/// promotion.
fn next_step(
    plan: &RolloutSpec,
    step: usize,
    now: Timestamp,
    st: &mut RolloutStatus,
    notes: &mut Vec<Note>,
) {
    st.failures = Some(0);
    let next = step + 1;
    st.step = Some(i32::try_from(next.min(plan.steps.len().saturating_sub(1))).unwrap_or(i32::MAX));
    if next < plan.steps.len() {
        let w = plan.steps[next];
        st.weight = Some(w);
        st.step_started_at = Some(Time(now));
        st.reason = Some(RolloutReason::StepHeld.into());
        st.message = Some(format!(
            "step {} of {}: weight {w}",
            next + 1,
            plan.steps.len()
        ));
        notes.push(note(
            false,
            RolloutReason::RolloutStep,
            format!("weight {w} (step {} of {})", next + 1, plan.steps.len()),
        ));
    } else {
        st.reason = Some(RolloutReason::Promoting.into());
        st.message = Some("the last step passed: the primary is being rolled to the target".into());
        notes.push(note(
            false,
            RolloutReason::RolloutPromoting,
            "the last step passed: rolling the primary to the target".into(),
        ));
    }
}
