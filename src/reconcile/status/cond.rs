//! One condition to set, and setting and finding a condition in a status
//! (the condition types and statuses are the API's).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::reason::Reason;
use crate::api::v1beta1::InferenceServiceStatus;

pub use crate::api::vocabulary::{CondStatus, ConditionType};

/// [`ConditionType::Ready`]'s word.
pub const READY: &str = ConditionType::Ready.as_str();
/// [`ConditionType::Reconciled`]'s word.
pub const RECONCILED: &str = ConditionType::Reconciled.as_str();
/// [`ConditionType::RoutingReady`]'s word.
pub const ROUTING_READY: &str = ConditionType::RoutingReady.as_str();
/// [`ConditionType::PolicyCompliant`]'s word.
pub const POLICY_COMPLIANT: &str = ConditionType::PolicyCompliant.as_str();
/// [`ConditionType::GraphReady`]'s word.
pub const GRAPH_READY: &str = ConditionType::GraphReady.as_str();

/// A condition to set (without timestamps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    /// Condition type.
    pub type_: ConditionType,
    /// True, False or Unknown.
    pub status: CondStatus,
    /// Why.
    pub reason: Reason,
    /// Human readable message (cut to 1 KiB, or for the scheduler's and
    /// the kubelet's words `Cond::quoting` keeps, to
    /// [`crate::telemetry::CONDITION_MESSAGE_MAX`]).
    pub message: String,
}

impl Cond {
    pub(super) fn new(
        type_: ConditionType,
        status: impl Into<CondStatus>,
        reason: Reason,
        message: String,
    ) -> Self {
        Self {
            type_,
            status: status.into(),
            reason,
            message: crate::telemetry::cut_message(&message),
        }
    }

    /// A condition whose message is infergate's prefix and then words of
    /// the scheduler or the kubelet, already kept to 1 KiB: the prefix is
    /// not counted against them (cut only at
    /// [`crate::telemetry::CONDITION_MESSAGE_MAX`]).
    pub(super) fn quoting(
        type_: ConditionType,
        status: impl Into<CondStatus>,
        reason: Reason,
        message: String,
    ) -> Self {
        Self {
            message: crate::telemetry::cut_condition_message(&message),
            ..Self::new(type_, status, reason, String::new())
        }
    }
}

/// Set `cond` in `conditions`, keeping `lastTransitionTime` when the status is unchanged.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    cond: Cond,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = cond.status.as_str().to_owned();
    let existing = conditions.iter_mut().find(|c| c.type_ == cond.type_);
    match existing {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Time(now);
                c.status = status;
            }
            c.reason = cond.reason.as_str().to_owned();
            c.message = cond.message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: cond.type_.as_str().to_owned(),
            status,
            reason: cond.reason.as_str().to_owned(),
            message: cond.message,
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

/// Find a condition by type.
#[must_use]
pub fn condition<'a>(
    status: Option<&'a InferenceServiceStatus>,
    type_: &str,
) -> Option<&'a Condition> {
    status?.conditions.iter().find(|c| c.type_ == type_)
}
