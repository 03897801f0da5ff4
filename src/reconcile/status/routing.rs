//! The `RoutingReady` condition of a routing result.

use super::cond::{Cond, ConditionType};
use super::observation::Routing;
use super::reason::Reason;

/// `RoutingReady` for `routing`.
pub(super) fn condition(routing: &Routing) -> Cond {
    match routing {
        Routing::Applied {
            gateway,
            path,
            rejection: None,
            pools: None,
        } => Cond::new(
            ConditionType::RoutingReady,
            true,
            Reason::RouteApplied,
            format!("HTTPRoute routes {path} through gateway {gateway}"),
        ),
        Routing::Applied {
            gateway,
            path,
            rejection: None,
            pools: Some(report),
        } => {
            let names = report.names.join(", ");
            if !report.complaints.is_empty() {
                Cond::new(
                    ConditionType::RoutingReady,
                    false,
                    Reason::InferencePoolNotAccepted,
                    format!(
                        "InferencePool {names}: {}",
                        report.complaints.join("; ")
                    ),
                )
            } else if report.reported {
                Cond::new(
                    ConditionType::RoutingReady,
                    true,
                    Reason::RouteApplied,
                    format!(
                        "HTTPRoute routes {path} through gateway {gateway} to InferencePool {names}, accepted by the gateway"
                    ),
                )
            } else {
                Cond::new(
                    ConditionType::RoutingReady,
                    true,
                    Reason::RouteApplied,
                    format!(
                        "HTTPRoute routes {path} through gateway {gateway} to InferencePool {names}; no gateway controller has reported on the pools yet"
                    ),
                )
            }
        }
        Routing::Applied {
            gateway,
            rejection: Some(why),
            ..
        } => Cond::new(
            ConditionType::RoutingReady,
            false,
            Reason::RouteNotAccepted,
            format!("gateway {gateway} did not accept the HTTPRoute: {why}"),
        ),
        Routing::NoGateway => Cond::new(
            ConditionType::RoutingReady,
            false,
            Reason::NoGateway,
            "spec.routing.gateway is not set (no policy supplies one): no HTTPRoute is made; the Service is reachable inside the cluster".to_owned(),
        ),
        Routing::InferencePoolApiMissing => Cond::new(
            ConditionType::RoutingReady,
            false,
            Reason::InferencePoolNotInstalled,
            format!(
                "routing.backendKind is InferencePool but the InferencePool CRD ({}/v1) is not installed: install the Gateway API Inference Extension, or route to Services (backendKind: Service)",
                crate::reconcile::children::inferencepool::CRD_NAME
            ),
        ),
        Routing::GatewayApiMissing { gateway } => Cond::new(
            ConditionType::RoutingReady,
            false,
            Reason::GatewayApiNotInstalled,
            format!(
                "the Gateway API HTTPRoute CRD (httproutes.gateway.networking.k8s.io/v1) is not installed: install Gateway API to route through gateway {gateway}"
            ),
        ),
        Routing::ServeServiceMissing {
        gateway,
        service,
        detail,
    } => Cond::new(
        ConditionType::RoutingReady,
        false,
        Reason::ServeServiceMissing,
        format!(
            "waiting for KubeRay's serve Service {service}: {detail}; KubeRay makes it once the Serve applications run, and the HTTPRoute through gateway {gateway} names it then"
        ),
    ),
}
}
