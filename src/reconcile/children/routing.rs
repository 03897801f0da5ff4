//! The HTTPRoute of a service: gateway, path, timeout, weighted backends.

use kube::ResourceExt;

use super::deployment::engine_port;
use super::error::BuildError;
use super::httproute::{
    GATEWAY_GROUP, HTTPBackendRef, HTTPHeaderMatch, HTTPPathMatch, HTTPPathModifier, HTTPRoute,
    HTTPRouteFilter, HTTPRouteMatch, HTTPRouteRule, HTTPRouteSpec, HTTPRouteTimeouts,
    HTTPURLRewriteFilter, ParentReference,
};
use super::inferencepool;
use super::meta::{Track, child_meta};
use crate::api::GatewayRef;
use crate::api::v1beta1::{InferenceService, RouteMatch};
use crate::engine;
use crate::engine::builtin::DEFAULT_REQUEST_TIMEOUT;
use crate::engine::model_names;

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

/// `namespace/name` of the gateway the route attaches to, or empty.
#[must_use]
pub fn gateway_display(svc: &InferenceService) -> String {
    gateway(svc)
        .map(|g| format!("{}/{}", g.namespace.unwrap_or_default(), g.name))
        .unwrap_or_default()
}

/// The message of a gateway's `Accepted=False` on `route`, if any.
#[must_use]
pub fn rejection(route: &HTTPRoute) -> Option<String> {
    route.status.as_ref()?.parents.iter().find_map(|p| {
        p.conditions
            .iter()
            .find(|c| c.type_ == "Accepted" && c.status == "False")
            .map(|c| format!("{}: {}", c.reason, c.message))
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
    route_to(svc, gw, path, backend_refs).map(Some)
}

/// HTTPRoute `S` of a `backend: RayService` service when a gateway is set:
/// the same match, rewrite and timeout as [`http_route`], to KubeRay's serve
/// Service `serve_service` on `port` (its `serve` port). The Serve
/// application's `route_prefix` is `/` ([`serve_route_prefix`]): the
/// rewrite sends what follows the rendered path.
pub fn ray_http_route(
    svc: &InferenceService,
    serve_service: &str,
    port: i32,
) -> Result<Option<HTTPRoute>, BuildError> {
    let Some(gw) = gateway(svc) else {
        return Ok(None);
    };
    let path = engine::render_route_path(svc).map_err(|e| BuildError::Route(e.to_string()))?;
    let backend = HTTPBackendRef {
        group: Some(String::new()),
        kind: Some("Service".to_owned()),
        name: serve_service.to_owned(),
        port: Some(port),
        weight: Some(100),
        ..HTTPBackendRef::default()
    };
    route_to(svc, gw, path, vec![backend]).map(Some)
}

/// The Serve application's `route_prefix` for a `backend: RayService`
/// service whose rendered path is `path`: `/` when a gateway routes to it
/// (the route's URLRewrite replaces the matched prefix with `/`), else the
/// rendered path (clients reach the serve Service directly).
#[must_use]
pub fn serve_route_prefix(svc: &InferenceService, path: &str) -> String {
    if gateway(svc).is_some() {
        "/".to_owned()
    } else {
        path.to_owned()
    }
}

/// HTTPRoute `S` through `gw`: PathPrefix on `path`, URLRewrite
/// `ReplacePrefixMatch: /`, the request timeout, `backend_refs`.
fn route_to(
    svc: &InferenceService,
    gw: GatewayRef,
    path: String,
    backend_refs: Vec<HTTPBackendRef>,
) -> Result<HTTPRoute, BuildError> {
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
            hostnames: svc
                .spec
                .routing
                .as_ref()
                .map(|r| r.hostnames.clone())
                .unwrap_or_default(),
            rules: rules(svc, path, &backend_refs),
        },
    );
    route.metadata = child_meta(svc, engine::primary_name(svc), Track::Primary)?;
    Ok(route)
}

/// The route's rules: the path rule (routed by path, or `Both`), then one
/// rule per served name matching the model name header exactly (routed by
/// name), each with the same backends and timeout.
fn rules(
    svc: &InferenceService,
    path: String,
    backend_refs: &[HTTPBackendRef],
) -> Vec<HTTPRouteRule> {
    let timeouts = Some(HTTPRouteTimeouts {
        request: Some(request_timeout(svc)),
        backend_request: None,
    });
    let how = model_names::route_match(svc);
    let mut out = Vec::new();
    if how != RouteMatch::ModelName {
        out.push(HTTPRouteRule {
            matches: vec![HTTPRouteMatch {
                path: Some(HTTPPathMatch {
                    r#type: Some("PathPrefix".to_owned()),
                    value: Some(path),
                }),
                headers: Vec::new(),
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
            backend_refs: backend_refs.to_vec(),
            timeouts: timeouts.clone(),
        });
    }
    if how.by_name() {
        let header = model_names::header(svc);
        for (name, _) in model_names::served_names(svc) {
            out.push(HTTPRouteRule {
                matches: vec![HTTPRouteMatch {
                    path: None,
                    headers: vec![HTTPHeaderMatch {
                        r#type: Some("Exact".to_owned()),
                        name: header.to_owned(),
                        value: name.to_owned(),
                    }],
                }],
                filters: Vec::new(),
                backend_refs: backend_refs.to_vec(),
                timeouts: timeouts.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ray_service(gateway: bool) -> InferenceService {
        let mut routing = json!({"requestTimeout": "2m", "pathTemplate": "/{.metadata.namespace}/{.metadata.name}"});
        if gateway {
            routing["gateway"] = json!({"name": "public", "namespace": "infra"});
        }
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"namespace": "team-a", "name": "rag", "uid": "u-1"},
            "spec": {
                "model": {"ref": "llama3-8b"},
                "engine": {"image": "registry.example.com/ray:2.60"},
                "backend": "RayService",
                "graph": {"url": "https://graphs.example.com/rag"},
                "routing": routing,
            },
        }))
        .expect("service decodes")
    }

    #[test]
    fn a_ray_route_sends_the_rendered_path_to_the_serve_service() {
        let svc = ray_service(true);
        let route = ray_http_route(&svc, "rag-serve-svc", 8000)
            .expect("builds")
            .expect("a gateway is set");
        assert_eq!(route.metadata.name.as_deref(), Some("rag"));
        let parent = &route.spec.parent_refs[0];
        assert_eq!(
            (parent.name.as_str(), parent.namespace.as_deref()),
            ("public", Some("infra"))
        );
        let rule = &route.spec.rules[0];
        let m = rule.matches[0].path.as_ref().expect("path match");
        assert_eq!(
            (m.r#type.as_deref(), m.value.as_deref()),
            (Some("PathPrefix"), Some("/team-a/rag"))
        );
        let rewrite = rule.filters[0]
            .url_rewrite
            .as_ref()
            .and_then(|u| u.path.as_ref())
            .expect("rewrite");
        assert_eq!(rewrite.replace_prefix_match.as_deref(), Some("/"));
        assert_eq!(
            rule.timeouts.as_ref().and_then(|t| t.request.as_deref()),
            Some("2m")
        );
        let backends: Vec<_> = rule
            .backend_refs
            .iter()
            .map(|b| (b.kind.as_deref(), b.name.as_str(), b.port, b.weight))
            .collect();
        assert_eq!(
            backends,
            [(Some("Service"), "rag-serve-svc", Some(8000), Some(100))]
        );
        // The rewrite sends what follows the path: Serve's prefix is `/`.
        assert_eq!(serve_route_prefix(&svc, "/team-a/rag"), "/");
    }

    #[test]
    fn without_a_gateway_no_route_and_serve_keeps_the_rendered_path() {
        let svc = ray_service(false);
        assert_eq!(
            ray_http_route(&svc, "rag-serve-svc", 8000).expect("builds"),
            None
        );
        assert_eq!(serve_route_prefix(&svc, "/team-a/rag"), "/team-a/rag");
    }

    #[test]
    fn a_route_by_name_has_a_rule_per_served_name_with_the_weights_and_hostnames() {
        let svc: InferenceService = serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"namespace": "team-a", "name": "chat", "uid": "u-1"},
            "spec": {
                "model": {"ref": "m", "servedName": "llama-3-70b",
                          "adapters": [{"name": "sql-lora", "source": "org/sql-lora"}]},
                "engine": {"image": "registry.example.com/vllm:0.11", "port": 8000},
                "canary": {"model": {"ref": "m"}, "weight": 20},
                "routing": {"match": "ModelName", "modelNameHeader": "X-Gateway-Model-Name",
                            "hostnames": ["api.example.com"], "requestTimeout": "2m",
                            "gateway": {"name": "gw", "namespace": "gateways"}}
            }
        }))
        .expect("service");
        let route = http_route(&svc, 20).expect("builds").expect("a gateway");
        let spec = serde_json::to_value(&route.spec).expect("json");
        assert_eq!(spec["hostnames"], json!(["api.example.com"]));
        let rules = spec["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 2, "{spec}");
        for (rule, name) in rules.iter().zip(["llama-3-70b", "sql-lora"]) {
            assert_eq!(
                rule["matches"],
                json!([{"headers": [{"type": "Exact", "name": "X-Gateway-Model-Name", "value": name}]}])
            );
            assert_eq!(
                rule.get("filters"),
                None,
                "no rewrite: the client's path stays"
            );
            assert_eq!(rule["timeouts"]["request"], "2m");
            let weights: Vec<(&str, i64)> = rule["backendRefs"]
                .as_array()
                .expect("backends")
                .iter()
                .map(|b| {
                    (
                        b["name"].as_str().unwrap_or(""),
                        b["weight"].as_i64().unwrap_or(0),
                    )
                })
                .collect();
            assert_eq!(weights, [("chat", 80), ("chat-canary", 20)]);
        }
        // Both keeps the path rule first.
        let mut both = svc.clone();
        if let Some(r) = both.spec.routing.as_mut() {
            r.r#match = Some(RouteMatch::Both);
        }
        let route = http_route(&both, 20).expect("builds").expect("a gateway");
        assert_eq!(route.spec.rules.len(), 3);
        assert!(route.spec.rules[0].matches[0].path.is_some());
        // The engine of both tracks serves the base's names.
        let primary = super::super::engine_args(&svc, Track::Primary);
        let canary = super::super::engine_args(&svc, Track::Canary);
        for args in [&primary, &canary] {
            let at = args
                .iter()
                .position(|a| a == "--served-model-name")
                .expect("flag");
            assert_eq!(args[at + 1], "llama-3-70b");
            assert!(args.contains(&"--enable-lora".to_owned()));
        }
    }
}
