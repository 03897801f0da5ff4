//! What explains the state of a service, most telling first, from the
//! facts `status` shows.

use std::collections::BTreeSet;

use super::commands::Commands;
use super::conditions::{full_pool, graph, policy, ready, reconciled, routing};
use super::finding::{Explanation, Finding, Severity, finding, rank};
use super::names;
use super::rollout::rollout;
use crate::api::vocabulary::{CondStatus, ConditionType, Reason};
use crate::plugin::facts::{ConditionFacts, ServiceFacts};

/// Whether the service is ready: `Ready=True`, and the reconciler has seen
/// its current generation.
#[must_use]
pub fn is_ready(f: &ServiceFacts) -> bool {
    let seen = match (f.observed_generation, f.generation) {
        (Some(seen), Some(current)) => seen >= current,
        _ => true,
    };
    seen && f
        .condition(ConditionType::Ready.as_str())
        .is_some_and(|c| c.status == CondStatus::True)
}

/// What explains the state of the service, most telling first (a ready
/// service may still have findings: a held canary, a policy warning).
#[must_use]
pub fn explain(f: &ServiceFacts) -> Vec<Finding> {
    let cmd = Commands::of(f);
    let mut out = Vec::new();
    if f.conditions.is_empty() {
        out.push(finding(
            rank::NO_STATUS,
            Severity::Waiting,
            "NoStatus",
            None,
            "infergate has not reported on the service yet: is its reconciler running?".to_owned(),
            Some(cmd.events()),
        ));
        return out;
    }
    if let Some(c) = false_condition(f, ConditionType::PolicyCompliant) {
        // A violation caused by a name or an adapter is told as one.
        let by_name = (c.reason == Reason::PolicyViolation.as_str())
            .then(|| names::denial(c, &cmd))
            .flatten();
        out.push(by_name.unwrap_or_else(|| policy(c, &cmd)));
    }
    if let Some(c) = false_condition(f, ConditionType::Reconciled) {
        match names::held_name(&c.message).and_then(|_| names::denial(c, &cmd)) {
            Some(held) => out.push(held),
            None => out.extend(reconciled(c, &cmd, f.accelerator_class.as_deref())),
        }
    }
    if let Some(c) = f
        .condition(ConditionType::GraphReady.as_str())
        .filter(|c| c.status != CondStatus::True && !c.reason.is_empty())
    {
        out.push(graph(c, &cmd));
    }
    if let Some(c) = false_condition(f, ConditionType::Ready) {
        out.extend(ready(c, &cmd, f.accelerator_class.as_deref()));
    }
    for type_ in [ConditionType::RolloutCapacity, ConditionType::CanaryReady] {
        if let Some(c) = false_condition(f, type_) {
            out.extend(full_pool(c, f.accelerator_class.as_deref()));
        }
    }
    out.extend(rollout(f, &cmd));
    if let Some(c) = false_condition(f, ConditionType::RoutingReady) {
        out.extend(routing(c, &cmd, &names::refused_names(f)));
    }
    out.extend(names::missing_rules(f, &cmd));
    if let (Some(seen), Some(current)) = (f.observed_generation, f.generation)
        && seen < current
    {
        out.push(finding(
            rank::NOT_OBSERVED,
            Severity::Waiting,
            "NotObserved",
            None,
            format!(
                "infergate has not acted on the latest change yet (generation {current}, last seen {seen}): the conditions describe the previous spec."
            ),
            Some(cmd.watch()),
        ));
    }
    // The same reason on two conditions (Reconciled and Ready both say
    // AcceleratorClassNotFound or InvalidSpec) is one finding.
    let mut seen = BTreeSet::new();
    out.retain(|f| seen.insert((f.reason.clone(), f.track.clone())));
    out.sort_by_key(|f| f.rank);
    out
}

/// The condition `type_` when it is `False`.
fn false_condition(f: &ServiceFacts, type_: ConditionType) -> Option<&ConditionFacts> {
    f.condition(type_.as_str())
        .filter(|c| c.status == CondStatus::False)
}

/// What `why` prints about `f`.
#[must_use]
pub fn explanation(f: &ServiceFacts) -> Explanation {
    Explanation {
        namespace: f.namespace.clone(),
        name: f.name.clone(),
        ready: is_ready(f),
        findings: explain(f),
    }
}
