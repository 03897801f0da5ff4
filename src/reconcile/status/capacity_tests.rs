//! The conditions of a full GPU pool: `RolloutCapacity` and `CanaryReady`.

use super::tests::{applied, cond, routed, ts};
use super::*;

#[test]
fn rollout_capacity_says_what_a_change_of_the_primary_does_on_a_full_pool() {
    let numbers =
        "needs 8 nvidia.com/gpu in h100-80gb, 0 free: replacing 1 of 2 replicas at a time";
    let mut obs = applied(2, None, routed());
    obs.rollout_capacity = Some(RolloutCapacity::Replacing(numbers.into()));
    let st = compute(None, &obs, ts(0));
    let c = cond(&st, ConditionType::RolloutCapacity.as_str());
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        ("False", "ReplacingInPlace", numbers)
    );
    obs.rollout_capacity = Some(RolloutCapacity::Done(numbers.into()));
    let st = compute(Some(&st), &obs, ts(5));
    let c = cond(&st, ConditionType::RolloutCapacity.as_str());
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "RolledOut")
    );
    assert!(c.message.contains(numbers), "{}", c.message);
    obs.rollout_capacity = Some(RolloutCapacity::Waiting("needs 8 ...: waiting".into()));
    let st = compute(Some(&st), &obs, ts(9));
    let c = cond(&st, ConditionType::RolloutCapacity.as_str());
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "WaitingForCapacity")
    );
    // Not known (no class, room not listed yet): left as it was.
    obs.rollout_capacity = None;
    let kept = compute(Some(&st), &obs, ts(12));
    assert_eq!(
        cond(&kept, ConditionType::RolloutCapacity.as_str()),
        cond(&st, ConditionType::RolloutCapacity.as_str())
    );
}

#[test]
fn canary_ready_says_when_the_canary_waits_for_room_and_goes_with_it() {
    let mut obs = applied(2, None, routed());
    obs.canary_capacity =
        Some("needs 8 nvidia.com/gpu in h100, 0 free: the canary's 1 replica wait for room".into());
    let st = compute(None, &obs, ts(0));
    let c = cond(&st, ConditionType::CanaryReady.as_str());
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "CanaryCapacity")
    );
    assert!(
        c.message.starts_with("needs 8 nvidia.com/gpu"),
        "{}",
        c.message
    );
    // Room: the canary runs and is ready.
    let st = compute(Some(&st), &applied(2, Some(1), routed()), ts(5));
    let c = cond(&st, ConditionType::CanaryReady.as_str());
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Available")
    );
    // The canary goes: so does its condition.
    let st = compute(Some(&st), &applied(2, None, routed()), ts(9));
    assert!(
        st.conditions
            .iter()
            .all(|c| c.type_ != ConditionType::CanaryReady.as_str())
    );
}
