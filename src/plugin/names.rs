//! The model names of a service as the plugin shows them: each name it
//! serves (the base and each adapter) and whether the gateway routes it,
//! read from the service's spec and its HTTPRoute as the cluster has it.
//!
//! A name is routed when the service routes by name (`routing.match:
//! ModelName` or `Both`) through a gateway, its HTTPRoute attaches to that
//! gateway with a rule matching the name's header value exactly, and the
//! gateway has accepted the route. Otherwise the facts say which of these
//! is missing; a route no gateway has reported on yet is said to wait, not
//! to be routed.

use serde::Serialize;

use crate::api::upstream::gateway_api::{HTTPRoute, HTTPRouteRule, ParentReference};
use crate::api::v1beta1::{InferenceService, RouteMatch};
use crate::engine::model_names;

/// Whether, and how far, the gateway routes one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum NameRoute {
    /// A rule matches it and the gateway accepted the route.
    Routed,
    /// A rule matches it; no gateway has reported on the route yet.
    Waiting,
    /// The service routes by path only: the gateway does not match names.
    PathOnly,
    /// No gateway is set: no HTTPRoute.
    NoGateway,
    /// The HTTPRoute does not exist (yet, or it may not be read).
    NoRoute,
    /// The HTTPRoute has no rule for the name on the service's gateway
    /// (not reconciled yet).
    NoRule,
    /// The gateway did not accept the route.
    NotAccepted,
}

/// One name the service serves.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NameFacts {
    /// The name clients put in the request's `model`.
    pub name: String,
    /// The field that serves it (`spec.model.servedName`,
    /// `spec.model.adapters[i].name`).
    pub field: String,
    /// The adapter's source, for an adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter_source: Option<String>,
    /// The gateway routes requests for it.
    pub routed: bool,
    /// How far.
    pub route: NameRoute,
    /// In words.
    pub detail: String,
}

/// The names of a service and how its route selects them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelNames {
    /// `Path`, `ModelName` or `Both`.
    #[serde(rename = "match")]
    pub route_match: String,
    /// The header the gateway's body-based router copies `model` into.
    pub header: String,
    /// `namespace/name` of the gateway, when one is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// The route's hostnames (none: every hostname of the gateway).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hostnames: Vec<String>,
    /// The base name first, then each adapter's.
    pub names: Vec<NameFacts>,
}

impl ModelNames {
    /// The names the service routes by name that are not routed for a
    /// reason other than waiting for the gateway's report.
    #[must_use]
    pub fn unrouted(&self) -> Vec<&NameFacts> {
        self.names
            .iter()
            .filter(|n| matches!(n.route, NameRoute::NoRule | NameRoute::NotAccepted))
            .collect()
    }
}

/// The names of `svc` and whether `route` (its HTTPRoute as read, if
/// any) routes each; `None` for a service that names nothing (no served
/// name, no adapters, routed by path: it serves its model's ref, as
/// before names).
#[must_use]
pub fn model_names(svc: &InferenceService, route: Option<&HTTPRoute>) -> Option<ModelNames> {
    if !model_names::names_its_models(svc) {
        return None;
    }
    let how = model_names::route_match(svc);
    let header = model_names::header(svc);
    let own_ns = svc.metadata.namespace.clone().unwrap_or_default();
    let gateway = svc
        .spec
        .routing
        .as_ref()
        .and_then(|r| r.gateway.as_ref())
        .map(|g| {
            (
                g.namespace.clone().unwrap_or_else(|| own_ns.clone()),
                g.name.clone(),
            )
        });
    let route_name = crate::engine::primary_name(svc);
    let names = model_names::served_names(svc)
        .into_iter()
        .enumerate()
        .map(|(i, (name, field))| {
            let (route_state, detail) = match (how, &gateway, route) {
                (RouteMatch::Path, _, _) => (
                    NameRoute::PathOnly,
                    "routed by path only (routing.match: Path): the gateway does not match names"
                        .to_owned(),
                ),
                (_, None, _) => (
                    NameRoute::NoGateway,
                    "spec.routing.gateway is not set: no HTTPRoute".to_owned(),
                ),
                (_, Some(_), None) => (
                    NameRoute::NoRoute,
                    format!("no HTTPRoute {route_name} (not made yet, or not readable)"),
                ),
                (_, Some(gw), Some(r)) => name_on_route(r, gw, header, name),
            };
            NameFacts {
                name: name.to_owned(),
                field,
                adapter_source: i
                    .checked_sub(1)
                    .and_then(|a| svc.spec.model.adapters.get(a))
                    .map(|a| a.source.clone()),
                routed: route_state == NameRoute::Routed,
                route: route_state,
                detail,
            }
        })
        .collect();
    Some(ModelNames {
        route_match: match how {
            RouteMatch::Path => "Path",
            RouteMatch::ModelName => "ModelName",
            RouteMatch::Both => "Both",
        }
        .to_owned(),
        header: header.to_owned(),
        gateway: gateway.map(|(ns, name)| format!("{ns}/{name}")),
        hostnames: svc
            .spec
            .routing
            .as_ref()
            .map(|r| r.hostnames.clone())
            .unwrap_or_default(),
        names,
    })
}

/// Whether `route`, attached to `gateway`, routes `name` in `header`.
fn name_on_route(
    route: &HTTPRoute,
    gateway: &(String, String),
    header: &str,
    name: &str,
) -> (NameRoute, String) {
    let route_ns = route.metadata.namespace.as_deref().unwrap_or_default();
    let route_name = route.metadata.name.as_deref().unwrap_or_default();
    let on = |p: &ParentReference| {
        p.name == gateway.1 && p.namespace.as_deref().unwrap_or(route_ns) == gateway.0
    };
    let gw = format!("{}/{}", gateway.0, gateway.1);
    if !route.spec.parent_refs.iter().any(on) {
        return (
            NameRoute::NoRule,
            format!("HTTPRoute {route_name} does not attach to gateway {gw} (not reconciled yet)"),
        );
    }
    if !route
        .spec
        .rules
        .iter()
        .any(|r| matches_name(r, header, name))
    {
        return (
            NameRoute::NoRule,
            format!(
                "HTTPRoute {route_name} has no rule matching {header}: {name} (not reconciled yet)"
            ),
        );
    }
    let parents = route
        .status
        .as_ref()
        .map(|s| s.parents.as_slice())
        .unwrap_or_default();
    let accepted = |status: &str| {
        parents.iter().filter(|p| on(&p.parent_ref)).find_map(|p| {
            p.conditions
                .iter()
                .find(|c| c.type_ == "Accepted" && c.status == status)
        })
    };
    if let Some(c) = accepted("False") {
        return (
            NameRoute::NotAccepted,
            format!(
                "gateway {gw} did not accept HTTPRoute {route_name}: {}: {}",
                c.reason, c.message
            ),
        );
    }
    if accepted("True").is_some() {
        return (
            NameRoute::Routed,
            format!("HTTPRoute {route_name} matches {header}: {name}, accepted by gateway {gw}"),
        );
    }
    (
        NameRoute::Waiting,
        format!(
            "HTTPRoute {route_name} matches {header}: {name}; gateway {gw} has not reported on it yet"
        ),
    )
}

/// Whether a rule matches `header` exactly equal to `name` (header names
/// compare without case, as HTTP compares them; the value exactly).
fn matches_name(rule: &HTTPRouteRule, header: &str, name: &str) -> bool {
    rule.matches.iter().any(|m| {
        m.headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case(header)
                && h.value == name
                && h.r#type.as_deref().is_none_or(|t| t == "Exact")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::children::http_route;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use crate::api::upstream::gateway_api::{HTTPRouteStatus, RouteParentStatus};

    /// `team-a/chat` serving `llama-3-70b` and adapter `sql-lora`, routed
    /// by `how` through gateway `gateways/inference-gw` when `gateway`.
    fn svc(how: &str, gateway: bool) -> InferenceService {
        let mut routing = json!({"match": how, "hostnames": ["api.example.com"]});
        if gateway {
            routing["gateway"] = json!({"name": "inference-gw", "namespace": "gateways"});
        }
        serde_json::from_value(json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"namespace": "team-a", "name": "chat", "uid": "u-1"},
            "spec": {
                "model": {
                    "ref": "meta-llama/Llama-3.1-70B-Instruct",
                    "servedName": "llama-3-70b",
                    "adapters": [{"name": "sql-lora", "source": "org/sql-lora"}],
                },
                "engine": {"image": "registry.example.com/vllm:0.11.1"},
                "routing": routing,
            },
        }))
        .expect("service decodes")
    }

    /// The HTTPRoute the reconciler makes for `svc`, with `accepted` (the
    /// gateway's `Accepted` status and message) when reported.
    fn route(svc: &InferenceService, accepted: Option<(&str, &str)>) -> HTTPRoute {
        let mut r = http_route(svc, 0).expect("builds").expect("a gateway");
        r.metadata.namespace = Some("team-a".to_owned());
        if let Some((status, message)) = accepted {
            r.status = Some(HTTPRouteStatus {
                parents: vec![RouteParentStatus {
                    parent_ref: r.spec.parent_refs[0].clone(),
                    controller_name: "example.com/gateway".to_owned(),
                    conditions: vec![Condition {
                        type_: "Accepted".to_owned(),
                        status: status.to_owned(),
                        reason: if status == "True" {
                            "Accepted"
                        } else {
                            "NotAllowedByListeners"
                        }
                        .to_owned(),
                        message: message.to_owned(),
                        last_transition_time: Time(Timestamp::UNIX_EPOCH),
                        observed_generation: None,
                    }],
                }],
            });
        }
        r
    }

    fn states(n: &ModelNames) -> Vec<(&str, NameRoute)> {
        n.names.iter().map(|f| (f.name.as_str(), f.route)).collect()
    }

    #[test]
    fn every_name_is_routed_once_the_gateway_accepts_the_reconcilers_route() {
        let s = svc("ModelName", true);
        let n = model_names(&s, Some(&route(&s, Some(("True", ""))))).expect("names");
        assert_eq!(
            states(&n),
            [
                ("llama-3-70b", NameRoute::Routed),
                ("sql-lora", NameRoute::Routed)
            ]
        );
        assert!(n.names.iter().all(|f| f.routed));
        assert_eq!(n.route_match, "ModelName");
        assert_eq!(n.header, "X-Gateway-Model-Name");
        assert_eq!(n.gateway.as_deref(), Some("gateways/inference-gw"));
        assert_eq!(n.hostnames, ["api.example.com"]);
        assert_eq!(n.names[0].field, "spec.model.servedName");
        assert_eq!(n.names[0].adapter_source, None);
        assert_eq!(n.names[1].field, "spec.model.adapters[0].name");
        assert_eq!(n.names[1].adapter_source.as_deref(), Some("org/sql-lora"));
        assert!(n.unrouted().is_empty());
        // Both keeps the path rule and routes the names too.
        let s = svc("Both", true);
        let n = model_names(&s, Some(&route(&s, Some(("True", ""))))).expect("names");
        assert!(n.names.iter().all(|f| f.routed), "{n:?}");
    }

    #[test]
    fn a_route_no_gateway_reported_on_waits_and_a_refused_one_is_not_routed() {
        let s = svc("ModelName", true);
        let n = model_names(&s, Some(&route(&s, None))).expect("names");
        assert!(
            n.names
                .iter()
                .all(|f| f.route == NameRoute::Waiting && !f.routed)
        );
        assert_eq!(
            n.names[0].detail,
            "HTTPRoute chat matches X-Gateway-Model-Name: llama-3-70b; gateway gateways/inference-gw has not reported on it yet"
        );
        assert!(n.unrouted().is_empty(), "waiting is not a problem yet");
        let refused = route(
            &s,
            Some(("False", "hostname api.example.com matches no listener")),
        );
        let n = model_names(&s, Some(&refused)).expect("names");
        assert!(n.names.iter().all(|f| f.route == NameRoute::NotAccepted));
        assert_eq!(
            n.names[1].detail,
            "gateway gateways/inference-gw did not accept HTTPRoute chat: NotAllowedByListeners: hostname api.example.com matches no listener"
        );
        assert_eq!(n.unrouted().len(), 2);
    }

    #[test]
    fn an_adapter_added_since_the_route_was_made_has_no_rule_yet() {
        let mut s = svc("ModelName", true);
        let before = route(&s, Some(("True", "")));
        s.spec.model.adapters.push(crate::api::common::AdapterSpec {
            name: "chat-lora".to_owned(),
            source: "org/chat-lora".to_owned(),
        });
        let n = model_names(&s, Some(&before)).expect("names");
        assert_eq!(
            states(&n),
            [
                ("llama-3-70b", NameRoute::Routed),
                ("sql-lora", NameRoute::Routed),
                ("chat-lora", NameRoute::NoRule)
            ]
        );
        assert_eq!(
            n.names[2].detail,
            "HTTPRoute chat has no rule matching X-Gateway-Model-Name: chat-lora (not reconciled yet)"
        );
        // A route on another gateway routes none of them there.
        let mut moved = before.clone();
        moved.spec.parent_refs[0].name = "old-gw".to_owned();
        let n = model_names(&s, Some(&moved)).expect("names");
        assert!(
            n.names.iter().all(|f| f.route == NameRoute::NoRule),
            "{n:?}"
        );
        // Another header than the route's: no rule for it.
        s.spec.routing.as_mut().expect("routing").model_name_header = Some("X-Model".to_owned());
        let n = model_names(&s, Some(&before)).expect("names");
        assert!(
            n.names.iter().all(|f| f.route == NameRoute::NoRule),
            "{n:?}"
        );
        // Header names compare without case.
        s.spec.routing.as_mut().expect("routing").model_name_header =
            Some("x-gateway-model-name".to_owned());
        let n = model_names(&s, Some(&before)).expect("names");
        assert_eq!(n.names[0].route, NameRoute::Routed);
    }

    #[test]
    fn path_routes_no_gateway_and_no_route_say_so() {
        let s = svc("Path", true);
        let n = model_names(&s, Some(&route(&s, Some(("True", ""))))).expect("names");
        assert!(
            n.names
                .iter()
                .all(|f| f.route == NameRoute::PathOnly && !f.routed)
        );
        let s = svc("ModelName", false);
        let n = model_names(&s, None).expect("names");
        assert!(n.names.iter().all(|f| f.route == NameRoute::NoGateway));
        assert_eq!(n.gateway, None);
        let s = svc("ModelName", true);
        let n = model_names(&s, None).expect("names");
        assert!(n.names.iter().all(|f| f.route == NameRoute::NoRoute));
        assert_eq!(
            n.names[0].detail,
            "no HTTPRoute chat (not made yet, or not readable)"
        );
    }

    /// `status` shows the names, what each serves and whether it is
    /// routed, under the route; `-o json` carries the same facts.
    #[test]
    fn status_shows_each_name_and_whether_it_is_routed() {
        use crate::plugin::facts::{RelatedObjects, shape};
        use crate::plugin::status::{print_facts, render};
        use crate::plugin::term::{Output, Style};
        let mut s = svc("ModelName", true);
        let observed = RelatedObjects {
            route: Some(route(&s, Some(("True", "")))),
            ..RelatedObjects::default()
        };
        s.spec.model.adapters.push(crate::api::common::AdapterSpec {
            name: "chat-lora".to_owned(),
            source: "/models/chat-lora".to_owned(),
        });
        let f = shape(&s, &observed, Timestamp::UNIX_EPOCH);
        let screen = render(&f, Style::PLAIN);
        let want = "\
Route       gateways/inference-gw (by model name) -> chat 100

Names       match ModelName, header X-Gateway-Model-Name, gateway gateways/inference-gw, hostnames api.example.com

MODEL NAME   SERVES                     ROUTED
llama-3-70b  base model                 yes
sql-lora     adapter org/sql-lora       yes
chat-lora    adapter /models/chat-lora  no: HTTPRoute chat has no rule matching X-Gateway-Model-Name: chat-lora (not reconciled yet)
";
        assert!(screen.contains(want), "{screen}");
        let json: serde_json::Value =
            serde_json::from_str(&print_facts(&f, Output::Json, Style::PLAIN).expect("json"))
                .expect("parses");
        assert_eq!(json["modelNames"]["match"], "ModelName");
        assert_eq!(
            json["modelNames"]["names"][1]["adapterSource"],
            "org/sql-lora"
        );
        assert_eq!(json["modelNames"]["names"][1]["routed"], true);
        assert_eq!(json["modelNames"]["names"][2]["route"], "NoRule");
        // A service that names nothing shows no names.
        let mut plain = svc("Path", true);
        plain.spec.model.served_name = None;
        plain.spec.model.adapters.clear();
        let screen = render(
            &shape(&plain, &observed, Timestamp::UNIX_EPOCH),
            Style::PLAIN,
        );
        assert!(!screen.contains("Names"), "{screen}");
    }

    #[test]
    fn a_service_that_names_nothing_has_no_names_to_show() {
        let mut s = svc("Path", true);
        s.spec.model.served_name = None;
        s.spec.model.adapters.clear();
        assert_eq!(model_names(&s, None), None);
        // Routed by name, it serves its ref as its name.
        s.spec.routing.as_mut().expect("routing").r#match = Some(RouteMatch::ModelName);
        let n = model_names(&s, None).expect("names");
        assert_eq!(n.names[0].name, "meta-llama/Llama-3.1-70B-Instruct");
    }
}
