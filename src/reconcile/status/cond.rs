//! One condition to set, infergate's condition types, and setting and
//! finding a condition in a status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::reason::Reason;
use crate::api::v1beta1::InferenceServiceStatus;

/// The service serves: every wanted replica of every track is ready and up to date.
pub const READY: &str = "Ready";
/// The desired children were applied for the current generation.
pub const RECONCILED: &str = "Reconciled";
/// An HTTPRoute routes traffic to the service.
pub const ROUTING_READY: &str = "RoutingReady";
/// The service complies with every applicable policy.
pub const POLICY_COMPLIANT: &str = "PolicyCompliant";
/// The serving graph was fetched, decoded and validated (`backend: RayService`).
pub const GRAPH_READY: &str = "GraphReady";

/// A condition's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CondStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`: not decided yet (a graph fetch waiting in line).
    Unknown,
}

impl CondStatus {
    /// `True`, `False` or `Unknown`, as the condition carries it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl From<bool> for CondStatus {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

/// A condition to set (without timestamps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    /// Condition type.
    pub type_: &'static str,
    /// True, False or Unknown.
    pub status: CondStatus,
    /// Why.
    pub reason: Reason,
    /// Human readable message (cut to 1 KiB).
    pub message: String,
}

impl Cond {
    pub(super) fn new(
        type_: &'static str,
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
            type_: cond.type_.to_owned(),
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
