//! `why` on denials and routes caused by a model name.

use super::*;
use crate::plugin::facts::{ConditionFacts, ServiceFacts};
use crate::plugin::names::{ModelNames, NameFacts, NameRoute};

fn cond(type_: &str, status: &str, reason: &str, message: &str) -> ConditionFacts {
    ConditionFacts {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// `team-a/chat`, ready and reconciled, with `extra` conditions set over
/// those and the names `names` (`name`, how routed, detail).
fn facts(extra: Vec<ConditionFacts>, names: &[(&str, NameRoute, &str)]) -> ServiceFacts {
    let mut conditions = vec![
        cond("Ready", "True", "Available", "1/1 primary replicas ready"),
        cond("Reconciled", "True", "Applied", "every child is applied"),
        cond(
            "RoutingReady",
            "True",
            "RouteApplied",
            "HTTPRoute routes /chat",
        ),
        cond("PolicyCompliant", "True", "Compliant", "complies"),
    ];
    for c in extra {
        match conditions.iter_mut().find(|x| x.type_ == c.type_) {
            Some(x) => *x = c,
            None => conditions.push(c),
        }
    }
    ServiceFacts {
        namespace: "team-a".to_owned(),
        name: "chat".to_owned(),
        backend: "Deployment".to_owned(),
        conditions,
        model_names: (!names.is_empty()).then(|| ModelNames {
            route_match: "ModelName".to_owned(),
            header: "X-Gateway-Model-Name".to_owned(),
            gateway: Some("gateways/inference-gw".to_owned()),
            hostnames: Vec::new(),
            names: names
                .iter()
                .map(|(name, route, detail)| NameFacts {
                    name: (*name).to_owned(),
                    field: "spec.model.servedName".to_owned(),
                    adapter_source: None,
                    routed: *route == NameRoute::Routed,
                    route: *route,
                    detail: (*detail).to_owned(),
                })
                .collect(),
        }),
        ..ServiceFacts::default()
    }
}

const SOURCE_DENIED: &str = "the service violates a policy adopted after it (left running as it is): spec.model.adapters[0].source: Invalid value: \"someone/sql-lora\": must match one of \"org/*\" (limits.allowedAdapterSources of ClusterInferencePolicy \"adapters\")";

#[test]
fn a_later_policy_denying_an_adapter_is_told_as_a_names_denial() {
    let f = facts(
        vec![cond(
            "PolicyCompliant",
            "False",
            "PolicyViolation",
            SOURCE_DENIED,
        )],
        &[],
    );
    let found = explain(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    let d = &found[0];
    assert_eq!(d.reason, "PolicyViolation");
    assert_eq!(d.severity, Severity::Blocking);
    assert!(
        d.sentence.starts_with(
            "A policy adopted after the service denies its model names or adapters; the engine keeps serving what it loaded"
        ),
        "{}",
        d.sentence
    );
    assert!(
        d.sentence.contains("spec.model.adapters[0].source"),
        "{}",
        d.sentence
    );
    assert_eq!(
        d.next.as_deref(),
        Some("kubectl get inferencepolicies,clusterinferencepolicies -o yaml -n team-a")
    );
    // A Warn policy's word on adapters stays a notice.
    let f = facts(
        vec![cond(
            "PolicyCompliant",
            "False",
            "PolicyWarning",
            "spec.model.adapters: Too many: must have at most 1 items",
        )],
        &[],
    );
    assert_eq!(explain(&f)[0].severity, Severity::Notice);
    // A violation about something else is the policy's, as before.
    let f = facts(
        vec![cond(
            "PolicyCompliant",
            "False",
            "PolicyViolation",
            "gpus 8 > 4",
        )],
        &[],
    );
    assert!(
        explain(&f)[0]
            .sentence
            .starts_with("A policy denies the service")
    );
}

#[test]
fn a_name_another_service_holds_is_named_with_its_field() {
    let message = "spec.model.adapters[1].name: Duplicate value: \"sql-lora\": served through Gateway gateways/inference-gw by a service in another namespace";
    let f = facts(
        vec![cond("Reconciled", "False", "InvalidSpec", message)],
        &[],
    );
    let found = explain(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].sentence.starts_with(
            "Another service already serves the model name \"sql-lora\" (spec.model.adapters[1].name) through the same gateway"
        ),
        "{}",
        found[0].sentence
    );
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl edit infsvc chat -n team-a")
    );
    // The same words inside a policy violation's list.
    let f = facts(
        vec![cond(
            "PolicyCompliant",
            "False",
            "PolicyViolation",
            &format!(
                "the service violates a policy adopted after it (left running as it is): spec.replicas: x; {message}"
            ),
        )],
        &[],
    );
    assert!(
        explain(&f)[0]
            .sentence
            .contains("\"sql-lora\" (spec.model.adapters[1].name)"),
        "{:?}",
        explain(&f)
    );
}

#[test]
fn a_refused_route_names_the_model_names_it_carries() {
    let refused = "gateway gateways/inference-gw did not accept the HTTPRoute: NotAllowedByListeners: no listener for api.example.com";
    let f = facts(
        vec![
            cond("RoutingReady", "False", "RouteNotAccepted", refused),
            cond("Ready", "True", "Available", "1/1"),
        ],
        &[
            ("llama-3-70b", NameRoute::NotAccepted, "refused"),
            ("sql-lora", NameRoute::NotAccepted, "refused"),
        ],
    );
    let found = explain(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].sentence.starts_with(
            "The gateway refused the route, so requests for the model names llama-3-70b, sql-lora (header X-Gateway-Model-Name) reach nothing: \"gateway gateways/inference-gw"
        ),
        "{}",
        found[0].sentence
    );
    // Routed by path: the sentence is as it was.
    let f = facts(
        vec![cond("RoutingReady", "False", "RouteNotAccepted", refused)],
        &[],
    );
    assert!(
        explain(&f)[0]
            .sentence
            .starts_with("The gateway refused the route: \"")
    );
}

#[test]
fn a_name_the_route_has_no_rule_for_yet_waits() {
    let f = facts(
        Vec::new(),
        &[
            ("llama-3-70b", NameRoute::Routed, "accepted"),
            (
                "chat-lora",
                NameRoute::NoRule,
                "HTTPRoute chat has no rule matching X-Gateway-Model-Name: chat-lora (not reconciled yet)",
            ),
        ],
    );
    let found = explain(&f);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].reason, "NameNotRouted");
    assert_eq!(found[0].severity, Severity::Waiting);
    assert_eq!(
        found[0].sentence,
        "The gateway does not route the model name chat-lora yet: HTTPRoute chat has no rule matching X-Gateway-Model-Name: chat-lora (not reconciled yet)."
    );
    assert_eq!(
        found[0].next.as_deref(),
        Some("kubectl infergate status chat -n team-a -w")
    );
    // Waiting for the gateway's report, routed by path, no gateway: nothing to say.
    for route in [
        NameRoute::Waiting,
        NameRoute::PathOnly,
        NameRoute::NoGateway,
    ] {
        let f = facts(Vec::new(), &[("llama-3-70b", route, "")]);
        assert!(explain(&f).is_empty(), "{route:?}: {:?}", explain(&f));
    }
}

#[test]
fn held_names_are_read_from_the_denials_text() {
    assert_eq!(
        names::held_name(
            "spec.model.servedName: Duplicate value: \"llama-3-70b\": served through Gateway gateways/gw for hostname a.example.com by team-a/chat"
        ),
        Some(("llama-3-70b", "spec.model.servedName"))
    );
    assert_eq!(
        names::held_name(
            "spec.routing.pathTemplate: Duplicate value: \"/x\": route path on Gateway"
        ),
        None
    );
}
