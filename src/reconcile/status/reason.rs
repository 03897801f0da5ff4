//! Why a condition is what it is, and why an event was written.

use crate::api::v1beta1::InferenceService;

/// Why a condition is what it is, and why an event was written: every
/// reason infergate reports, in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Every child is applied.
    Applied,
    /// Every track's replicas are ready and up to date.
    Available,
    /// A track is short of ready or up-to-date replicas.
    Progressing,
    /// The HTTPRoute is applied and not rejected.
    RouteApplied,
    /// A gateway rejected the HTTPRoute.
    RouteNotAccepted,
    /// No gateway is set: no HTTPRoute.
    NoGateway,
    /// The Gateway API CRDs are not installed.
    GatewayApiNotInstalled,
    /// The InferencePool CRD is not installed.
    InferencePoolNotInstalled,
    /// A gateway reports a problem with an InferencePool.
    InferencePoolNotAccepted,
    /// The spec fails validation.
    InvalidSpec,
    /// Applying a child failed.
    ApplyFailed,
    /// The serving graph is valid and applied.
    GraphResolved,
    /// A serving-graph failure, with the graph error's own reason.
    Graph(&'static str),
    /// Event: a step of a progressive rollout, with its own reason.
    Rollout(&'static str),
    /// The KubeRay CRDs are not installed.
    RayServiceNotInstalled,
    /// KubeRay has not reported on the RayService yet.
    RayServicePending,
    /// The RayService is ready.
    RayServiceReady,
    /// The RayService is not ready.
    RayServiceNotReady,
    /// The service complies with every applicable policy.
    Compliant,
    /// The service violates a Deny policy adopted after it.
    PolicyViolation,
    /// The service violates a Warn policy.
    PolicyWarning,
    /// The service's charge no longer fits its namespace's budget.
    OverBudget,
    /// Event: a child was created.
    Created,
    /// Event: a child was changed.
    Updated,
    /// Event: a child was deleted.
    Deleted,
    /// Event: the service became ready.
    Ready,
    /// The service's AcceleratorClass does not exist.
    AcceleratorClassNotFound,
    /// A track's pods find no node (the scheduler's message).
    Unschedulable,
    /// A track's pods cannot pull their image.
    ImagePullFailed,
    /// A track's engine container keeps exiting.
    CrashLooping,
    /// A track's pods are placed and not ready yet.
    Starting,
    /// KubeRay has not made the serve Service the route names yet.
    ServeServiceMissing,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` brought
    /// a new graph, now applied.
    GraphRefreshed,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` found the
    /// graph unchanged.
    GraphUnchanged,
    /// Event: a fetch asked for by `infergate.dev/graph-refresh` failed.
    GraphRefreshFailed,
    /// Event: a new serving graph was applied.
    GraphUpdated,
}

impl Reason {
    /// The CamelCase reason as conditions and events carry it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Applied => "Applied",
            Reason::Available => "Available",
            Reason::Progressing => "Progressing",
            Reason::RouteApplied => "RouteApplied",
            Reason::RouteNotAccepted => "RouteNotAccepted",
            Reason::NoGateway => "NoGateway",
            Reason::GatewayApiNotInstalled => "GatewayAPINotInstalled",
            Reason::InferencePoolNotInstalled => "InferencePoolNotInstalled",
            Reason::InferencePoolNotAccepted => "InferencePoolNotAccepted",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::ApplyFailed => "ApplyFailed",
            Reason::GraphResolved => "GraphResolved",
            Reason::Graph(reason) | Reason::Rollout(reason) => reason,
            Reason::RayServiceNotInstalled => "RayServiceNotInstalled",
            Reason::RayServicePending => "RayServicePending",
            Reason::RayServiceReady => "RayServiceReady",
            Reason::RayServiceNotReady => "RayServiceNotReady",
            Reason::Compliant => "Compliant",
            Reason::PolicyViolation => "PolicyViolation",
            Reason::PolicyWarning => "PolicyWarning",
            Reason::OverBudget => "OverBudget",
            Reason::Created => "Created",
            Reason::Updated => "Updated",
            Reason::Deleted => "Deleted",
            Reason::Ready => "Ready",
            Reason::AcceleratorClassNotFound => "AcceleratorClassNotFound",
            Reason::Unschedulable => "Unschedulable",
            Reason::ImagePullFailed => "ImagePullFailed",
            Reason::CrashLooping => "CrashLooping",
            Reason::Starting => "Starting",
            Reason::ServeServiceMissing => "ServeServiceMissing",
            Reason::GraphRefreshed => "GraphRefreshed",
            Reason::GraphUnchanged => "GraphUnchanged",
            Reason::GraphRefreshFailed => "GraphRefreshFailed",
            Reason::GraphUpdated => "GraphUpdated",
        }
    }

    /// Whether a condition turning False for this reason deserves a Warning event.
    #[must_use]
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            Reason::InvalidSpec
                | Reason::ApplyFailed
                | Reason::PolicyViolation
                | Reason::PolicyWarning
                | Reason::OverBudget
                | Reason::GatewayApiNotInstalled
                | Reason::InferencePoolNotInstalled
                | Reason::InferencePoolNotAccepted
                | Reason::RouteNotAccepted
                | Reason::RayServiceNotInstalled
                | Reason::AcceleratorClassNotFound
                | Reason::Unschedulable
                | Reason::ImagePullFailed
                | Reason::CrashLooping
                | Reason::GraphRefreshFailed
                | Reason::Graph(_)
        )
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The reasons with which a service says it waits for an optional CRD.
const WAITING_REASONS: [Reason; 3] = [
    Reason::GatewayApiNotInstalled,
    Reason::InferencePoolNotInstalled,
    Reason::RayServiceNotInstalled,
];

/// Whether the service's status says it waits for an optional CRD to be
/// installed (a condition with one of the `...NotInstalled` reasons).
#[must_use]
pub fn waits_for_an_optional_api(svc: &InferenceService) -> bool {
    svc.status
        .as_ref()
        .map(|s| s.conditions.iter())
        .into_iter()
        .flatten()
        .any(|c| WAITING_REASONS.iter().any(|r| r.as_str() == c.reason))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with_reason(reason: &str) -> InferenceService {
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"namespace": "team", "name": "chat"},
            "spec": {"model": {"ref": "m"}},
            "status": {"conditions": [{"type": "RoutingReady", "status": "False", "reason": reason,
                                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .expect("service decodes")
    }

    #[test]
    fn a_service_waits_when_a_condition_names_a_missing_crd() {
        for reason in [
            "GatewayAPINotInstalled",
            "InferencePoolNotInstalled",
            "RayServiceNotInstalled",
        ] {
            assert!(waits_for_an_optional_api(&with_reason(reason)), "{reason}");
        }
        assert!(!waits_for_an_optional_api(&with_reason("RouteApplied")));
        let mut bare = with_reason("RouteApplied");
        bare.status = None;
        assert!(!waits_for_an_optional_api(&bare));
    }
}
