//! The status a reconcile writes: the previous one with the conditions
//! an observation implies set, and the fields it observed.

use k8s_openapi::jiff::Timestamp;

use super::cond::{
    ConditionType, GRAPH_READY, POLICY_COMPLIANT, READY, RECONCILED, ROUTING_READY, set_condition,
};
use super::conditions::conditions_for;
use super::graph;
use super::observation::{Observation, Outcome};
use crate::api::v1beta1::{CanaryStatus, InferenceServiceStatus};

/// The new status from the previous one and an observation.
#[must_use]
pub fn compute(
    previous: Option<&InferenceServiceStatus>,
    obs: &Observation,
    now: Timestamp,
) -> InferenceServiceStatus {
    let mut st = previous.cloned().unwrap_or_default();
    st.observed_generation = obs.generation;
    for cond in conditions_for(obs) {
        set_condition(&mut st.conditions, cond, obs.generation, now);
    }
    // CanaryReady is said while there is a canary (or one waits for room).
    if let Outcome::Applied { canary: None, .. } = &obs.outcome
        && obs.canary_capacity.is_none()
    {
        st.conditions
            .retain(|c| c.type_ != ConditionType::CanaryReady.as_str());
    }
    // A stable order makes `kubectl get -o yaml` and status diffs quiet.
    let order = |t: &str| match t {
        READY => 0,
        RECONCILED => 1,
        ROUTING_READY => 2,
        POLICY_COMPLIANT => 3,
        GRAPH_READY => 4,
        _ => 5,
    };
    st.conditions.sort_by_key(|c| order(&c.type_));
    if obs.capacity.is_some() {
        st.capacity.clone_from(&obs.capacity);
    }
    if let Outcome::Applied {
        primary,
        canary,
        routed_weight,
        ..
    } = &obs.outcome
    {
        st.replicas = Some(primary.desired);
        st.ready_replicas = Some(primary.ready);
        st.canary = canary.as_ref().map(|c| CanaryStatus {
            replicas: Some(c.desired),
            ready_replicas: Some(c.ready),
            weight: *routed_weight,
        });
        st.route_path.clone_from(&obs.route_path);
        st.request_timeout.clone_from(&obs.request_timeout);
        if obs.rollout.is_some() {
            st.rollout.clone_from(&obs.rollout);
        }
    }
    if let Some(report) = &obs.graph {
        graph::record(&mut st, report, now);
    }
    if let Outcome::RayServiceApplied { workers, .. } = &obs.outcome {
        st.route_path.clone_from(&obs.route_path);
        st.request_timeout.clone_from(&obs.request_timeout);
        if let Some((ready, desired)) = workers {
            st.replicas = Some(*desired);
            st.ready_replicas = Some(*ready);
        }
    }
    graph::settle_fetch_time(previous, &mut st, now);
    st
}
