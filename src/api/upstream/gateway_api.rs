//! The few Gateway API (`gateway.networking.k8s.io/v1`) HTTPRoute types
//! infergate sets (built in `reconcile::children::routing`).
//!
//! Written here rather than taken from the `gateway-api` crate, which still
//! depends on kube 4 / k8s-openapi 0.28 while infergate is on kube 5 /
//! k8s-openapi 0.29. Only the fields infergate writes or reads are modelled;
//! the end-to-end tests install the published Gateway API CRDs, and
//! `tests/suite/upstream_schema.rs` checks every field written here against them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the Gateway API.
pub const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";
/// The API version the reconciler writes.
pub const API_VERSION: &str = "gateway.networking.k8s.io/v1";
/// The resource name discovery lists for HTTPRoute.
pub const PLURAL: &str = "httproutes";

/// Desired state of an HTTPRoute.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "gateway.networking.k8s.io",
    version = "v1",
    kind = "HTTPRoute",
    plural = "httproutes",
    namespaced,
    status = "HTTPRouteStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteSpec {
    /// Gateways the route attaches to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parent_refs: Vec<ParentReference>,
    /// Hostnames the route serves (none: every hostname of its listeners).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    /// Routing rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<HTTPRouteRule>,
}

/// A reference to a parent (Gateway).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// API group of the parent (`gateway.networking.k8s.io`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the parent (`Gateway`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace of the parent; the route's namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the parent.
    pub name: String,
    /// Listener name on the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// One routing rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteRule {
    /// Request matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<HTTPRouteMatch>,
    /// Filters applied to matching requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<HTTPRouteFilter>,
    /// Weighted backends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_refs: Vec<HTTPBackendRef>,
    /// Request timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<HTTPRouteTimeouts>,
}

/// A request match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteMatch {
    /// Path match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathMatch>,
    /// Header matches (all must hold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HTTPHeaderMatch>,
}

/// A header match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPHeaderMatch {
    /// `Exact` or `RegularExpression`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// The header's name (case-insensitive).
    pub name: String,
    /// The value it must have.
    pub value: String,
}

/// A path match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPPathMatch {
    /// `Exact`, `PathPrefix` or `RegularExpression`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// The path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A filter of a rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteFilter {
    /// Filter type (`URLRewrite`).
    #[serde(rename = "type")]
    pub r#type: String,
    /// URL rewrite settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_rewrite: Option<HTTPURLRewriteFilter>,
}

/// The URLRewrite filter.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPURLRewriteFilter {
    /// Path rewrite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HTTPPathModifier>,
}

/// A path rewrite.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPPathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(rename = "type")]
    pub r#type: String,
    /// Replacement of the matched prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix_match: Option<String>,
}

/// A weighted backend (a Service port).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPBackendRef {
    /// API group of the backend (`""` for core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind of the backend (`Service`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the backend.
    pub name: String,
    /// Namespace of the backend; the route's namespace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Proportion of the traffic (0..1,000,000; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// Timeouts of a rule (GEP-2257 durations).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteTimeouts {
    /// Timeout for the whole request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Timeout for one request to a backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_request: Option<String>,
}

/// Observed state of an HTTPRoute (read only by infergate).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HTTPRouteStatus {
    /// Status per parent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<RouteParentStatus>,
}

/// The status a parent reports for the route.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteParentStatus {
    /// The parent.
    #[serde(default)]
    pub parent_ref: ParentReference,
    /// Controller that wrote this entry.
    #[serde(default)]
    pub controller_name: String,
    /// Accepted, ResolvedRefs, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::{CustomResourceExt, Resource};

    #[test]
    fn resource_identity_matches_gateway_api() {
        assert_eq!(HTTPRoute::api_version(&()), API_VERSION);
        assert_eq!(HTTPRoute::kind(&()), "HTTPRoute");
        assert_eq!(HTTPRoute::plural(&()), PLURAL);
        assert_eq!(HTTPRoute::group(&()), GATEWAY_GROUP);
        let crd = HTTPRoute::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("httproutes.gateway.networking.k8s.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
    }

    #[test]
    fn serializes_with_gateway_api_field_names() {
        let route = HTTPRouteSpec {
            hostnames: Vec::new(),
            parent_refs: vec![ParentReference {
                name: "gw".into(),
                ..ParentReference::default()
            }],
            rules: vec![HTTPRouteRule {
                matches: vec![HTTPRouteMatch {
                    path: Some(HTTPPathMatch {
                        r#type: Some("PathPrefix".into()),
                        value: Some("/a".into()),
                    }),
                    headers: Vec::new(),
                }],
                filters: vec![HTTPRouteFilter {
                    r#type: "URLRewrite".into(),
                    url_rewrite: Some(HTTPURLRewriteFilter {
                        path: Some(HTTPPathModifier {
                            r#type: "ReplacePrefixMatch".into(),
                            replace_prefix_match: Some("/".into()),
                        }),
                    }),
                }],
                backend_refs: vec![HTTPBackendRef {
                    name: "s".into(),
                    port: Some(8000),
                    weight: Some(90),
                    ..HTTPBackendRef::default()
                }],
                timeouts: Some(HTTPRouteTimeouts {
                    request: Some("5m".into()),
                    backend_request: None,
                }),
            }],
        };
        let v = serde_json::to_value(&route).unwrap();
        assert_eq!(v["parentRefs"][0]["name"], "gw");
        let rule = &v["rules"][0];
        assert_eq!(rule["matches"][0]["path"]["type"], "PathPrefix");
        assert_eq!(
            rule["filters"][0]["urlRewrite"]["path"]["replacePrefixMatch"],
            "/"
        );
        assert_eq!(rule["backendRefs"][0]["weight"], 90);
        assert_eq!(rule["timeouts"]["request"], "5m");
    }
}
