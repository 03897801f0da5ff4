//! Whether a service's status says it waits for an optional CRD. The
//! reasons themselves are the API's ([`Reason`]).

use crate::api::v1beta1::InferenceService;
pub use crate::api::vocabulary::Reason;

/// The reasons with which a service says it waits for an optional CRD.
const WAITING_REASONS: [Reason; 4] = [
    Reason::GatewayApiNotInstalled,
    Reason::InferencePoolNotInstalled,
    Reason::RayServiceNotInstalled,
    Reason::LeaderWorkerSetNotInstalled,
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
        .any(|c| WAITING_REASONS.iter().any(|r| c.reason == *r))
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
            "LeaderWorkerSetNotInstalled",
        ] {
            assert!(waits_for_an_optional_api(&with_reason(reason)), "{reason}");
        }
        assert!(!waits_for_an_optional_api(&with_reason("RouteApplied")));
        let mut bare = with_reason("RouteApplied");
        bare.status = None;
        assert!(!waits_for_an_optional_api(&bare));
    }
}
