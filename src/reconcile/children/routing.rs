//! The HTTPRoute of a service: gateway, path, timeout, weighted backends.

use kube::ResourceExt;

use super::deployment::engine_port;
use super::error::BuildError;
use super::httproute::{
    GATEWAY_GROUP, HTTPBackendRef, HTTPPathMatch, HTTPPathModifier, HTTPRoute, HTTPRouteFilter,
    HTTPRouteMatch, HTTPRouteRule, HTTPRouteSpec, HTTPRouteTimeouts, HTTPURLRewriteFilter,
    ParentReference,
};
use super::inferencepool;
use super::meta::{Track, child_meta};
use crate::api::GatewayRef;
use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::engine::builtin::DEFAULT_REQUEST_TIMEOUT;

/// The canary weight to route now: `spec.canary.weight` once the canary has
/// a ready replica, 0 before (and without a canary).
#[must_use]
pub fn routed_canary_weight(svc: &InferenceService, canary_ready_replicas: i32) -> i32 {
    match svc.spec.canary.as_ref() {
        Some(c) if canary_ready_replicas > 0 => c.weight.clamp(0, 100),
        _ => 0,
    }
}

/// Whether `route` names `name` in `namespace` as a backend, whatever its
/// weight (a weight-0 backendRef can still carry requests on some
/// gateways): a Service, or an InferencePool (which selects the same pods).
#[must_use]
pub fn names_backend(route: &HTTPRoute, namespace: &str, name: &str) -> bool {
    let route_ns = route.metadata.namespace.as_deref().unwrap_or_default();
    route
        .spec
        .rules
        .iter()
        .flat_map(|r| r.backend_refs.iter())
        .any(|b| {
            let kind = match (b.group.as_deref(), b.kind.as_deref()) {
                (None | Some(""), None | Some("Service")) => true,
                (Some(g), Some("InferencePool")) => g == inferencepool::GROUP,
                _ => false,
            };
            kind && b.name == name && b.namespace.as_deref().unwrap_or(route_ns) == namespace
        })
}

/// The gateway the route attaches to, namespace resolved.
#[must_use]
pub fn gateway(svc: &InferenceService) -> Option<GatewayRef> {
    let gw = svc.spec.routing.as_ref()?.gateway.as_ref()?;
    Some(GatewayRef {
        name: gw.name.clone(),
        namespace: gw.namespace.clone().or_else(|| svc.namespace()),
    })
}

/// The request timeout in force.
#[must_use]
pub fn request_timeout(svc: &InferenceService) -> String {
    svc.spec
        .routing
        .as_ref()
        .and_then(|r| r.request_timeout.clone())
        .unwrap_or_else(|| DEFAULT_REQUEST_TIMEOUT.to_owned())
}

/// HTTPRoute `S` when a gateway is set: PathPrefix on the rendered path,
/// URLRewrite `ReplacePrefixMatch: /`, the request timeout, and backends
/// weighted `100 - w` / `w` where `w` is `routed_weight` (the canary backend
/// is left out while nothing is routed to it): each track's Service, or its
/// InferencePool with `backendKind: InferencePool`.
pub fn http_route(
    svc: &InferenceService,
    routed_weight: i32,
) -> Result<Option<HTTPRoute>, BuildError> {
    let Some(gw) = gateway(svc) else {
        return Ok(None);
    };
    let path = engine::render_route_path(svc).map_err(|e| BuildError::Route(e.to_string()))?;
    let port = engine_port(svc);
    let weight = if svc.spec.canary.is_some() {
        routed_weight.clamp(0, 100)
    } else {
        0
    };
    // Each track's Service, or its InferencePool (no port: the pool names
    // its target ports).
    let pools = inferencepool::routes_through_pools(svc);
    let backend = |name: String, weight: i32| {
        if pools {
            HTTPBackendRef {
                group: Some(inferencepool::GROUP.to_owned()),
                kind: Some("InferencePool".to_owned()),
                name,
                weight: Some(weight),
                ..HTTPBackendRef::default()
            }
        } else {
            HTTPBackendRef {
                group: Some(String::new()),
                kind: Some("Service".to_owned()),
                name,
                port: Some(port),
                weight: Some(weight),
                ..HTTPBackendRef::default()
            }
        }
    };
    let mut backend_refs = vec![backend(engine::primary_name(svc), 100 - weight)];
    if weight > 0 {
        backend_refs.push(backend(engine::canary_name(svc), weight));
    }
    let mut route = HTTPRoute::new(
        &engine::primary_name(svc),
        HTTPRouteSpec {
            parent_refs: vec![ParentReference {
                group: Some(GATEWAY_GROUP.to_owned()),
                kind: Some("Gateway".to_owned()),
                namespace: gw.namespace,
                name: gw.name,
                section_name: None,
            }],
            rules: vec![HTTPRouteRule {
                matches: vec![HTTPRouteMatch {
                    path: Some(HTTPPathMatch {
                        r#type: Some("PathPrefix".to_owned()),
                        value: Some(path),
                    }),
                }],
                filters: vec![HTTPRouteFilter {
                    r#type: "URLRewrite".to_owned(),
                    url_rewrite: Some(HTTPURLRewriteFilter {
                        path: Some(HTTPPathModifier {
                            r#type: "ReplacePrefixMatch".to_owned(),
                            replace_prefix_match: Some("/".to_owned()),
                        }),
                    }),
                }],
                backend_refs,
                timeouts: Some(HTTPRouteTimeouts {
                    request: Some(request_timeout(svc)),
                    backend_request: None,
                }),
            }],
        },
    );
    route.metadata = child_meta(svc, engine::primary_name(svc), Track::Primary)?;
    Ok(Some(route))
}
