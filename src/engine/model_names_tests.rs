use serde_json::{Value, json};

use super::model_names::*;
use crate::api::v1beta1::InferenceService;
use crate::engine::context::in_team_a;
use crate::engine::{PolicySnapshot, ServerDefaults};

fn service(ns: &str, name: &str, spec: Value) -> InferenceService {
    let mut spec = spec;
    if spec.get("model").is_none() {
        spec["model"] = json!({"ref": "meta-llama/Llama-3.1-70B-Instruct"});
    }
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .expect("service")
}

fn named(ns: &str, name: &str, hostnames: Value) -> InferenceService {
    service(
        ns,
        name,
        json!({
            "model": {"ref": "meta-llama/Llama-3.1-70B-Instruct", "servedName": "llama-3-70b",
                      "adapters": [{"name": "sql-lora", "source": "org/sql-lora"}]},
            "routing": {"match": "ModelName", "hostnames": hostnames,
                        "gateway": {"name": "inference-gw", "namespace": "gateways"}},
        }),
    )
}

#[test]
fn adapters_become_vllms_lora_flags_with_the_base_name() {
    let svc = named("team-a", "chat", json!([]));
    assert_eq!(
        lora_args(&svc),
        [
            "--enable-lora",
            "--max-loras",
            "1",
            "--max-lora-rank",
            "16",
            "--lora-modules",
            r#"{"base_model_name":"llama-3-70b","name":"sql-lora","path":"org/sql-lora"}"#
        ]
    );
    assert!(lora_args(&service("team-a", "plain", json!({}))).is_empty());
    assert_eq!(
        served_name(&service("team-a", "plain", json!({}))),
        "meta-llama/Llama-3.1-70B-Instruct"
    );
}

#[test]
fn a_name_on_one_gateway_is_held_once_where_hostnames_meet() {
    let everywhere = claims(&named("team-a", "chat", json!([])));
    assert_eq!(everywhere.len(), 2);
    assert_eq!(everywhere[0].field, "spec.model.servedName");
    assert_eq!(everywhere[1].field, "spec.model.adapters[0].name");
    let api = claims(&named("team-b", "chat", json!(["api.example.com"])));
    let other = claims(&named("team-b", "chat", json!(["other.example.com"])));
    // No hostnames reach every hostname.
    assert!(clash(&everywhere, &api).is_some());
    // Disjoint hostnames do not meet; a wildcard meets the names below it.
    assert!(clash(&api, &other).is_none());
    let wild = claims(&named("team-c", "chat", json!(["*.example.com"])));
    assert!(clash(&wild, &api).is_some());
    assert!(hostnames_meet("*.example.com", "*.api.example.com"));
    assert!(!hostnames_meet("*.example.com", "example.com"));
    assert!(hostnames_meet("API.example.com", "api.example.com"));
    // Another gateway: no clash.
    let mut elsewhere = named("team-b", "chat", json!([]));
    if let Some(g) = elsewhere
        .spec
        .routing
        .as_mut()
        .and_then(|r| r.gateway.as_mut())
    {
        g.name = "other-gw".to_owned();
    }
    assert!(clash(&everywhere, &claims(&elsewhere)).is_none());
    // An adapter named like another service's base name clashes.
    let adapter_as_base = service(
        "team-b",
        "sql",
        json!({"model": {"ref": "m", "servedName": "sql-lora"},
               "routing": {"match": "Both", "gateway": {"name": "inference-gw", "namespace": "gateways"}}}),
    );
    let theirs = claims(&adapter_as_base);
    let (mine, _) = clash(&theirs, &everywhere).expect("clash");
    assert_eq!(mine.field, "spec.model.servedName");
    // Routed by path: nothing held.
    let by_path = service(
        "team-b",
        "p",
        json!({"model": {"ref": "m", "servedName": "llama-3-70b"},
               "routing": {"gateway": {"name": "inference-gw", "namespace": "gateways"}}}),
    );
    assert!(claims(&by_path).is_empty());
}

#[test]
fn a_denial_names_the_holder_only_in_the_requesters_namespace() {
    let mine = claims(&named("team-a", "chat2", json!([])));
    let same = clash_error(&mine[0], ("team-a", "chat"), "team-a").to_string();
    assert_eq!(
        same,
        "spec.model.servedName: Duplicate value: \"llama-3-70b\": served through Gateway gateways/inference-gw by team-a/chat"
    );
    let other = clash_error(&mine[1], ("team-secret", "chat"), "team-a").to_string();
    assert!(
        other.contains("by a service in another namespace"),
        "{other}"
    );
    assert!(!other.contains("team-secret"), "{other}");
}

#[test]
fn sources_match_glob_patterns() {
    assert!(glob_matches("org/*", "org/sql-lora"));
    assert!(glob_matches("*", "anything"));
    assert!(glob_matches(
        "/model/adapters/*/v*",
        "/model/adapters/sql/v2"
    ));
    assert!(!glob_matches("org/*", "evil/org/x"));
    assert!(!glob_matches("org/sql", "org/sql-lora"));
    assert!(glob_matches("a*a", "aa"));
    assert!(!glob_matches("a*a", "a"));
}

fn verdict(svc: &InferenceService, policies: &PolicySnapshot) -> (Vec<String>, Vec<String>) {
    in_team_a(policies, &ServerDefaults::default(), |ctx| {
        let layers = crate::engine::policy::layers(ctx);
        let (mut errors, mut warnings) = (Vec::new(), Vec::new());
        check(
            (&mut errors, &mut warnings),
            &crate::engine::field_path::Path::new("spec"),
            svc,
            &layers,
        );
        (errors.iter().map(ToString::to_string).collect(), warnings)
    })
}

fn adapters(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| json!({"name": format!("a{i}"), "source": format!("org/a{i}")}))
            .collect(),
    )
}

#[test]
fn the_fields_rules_name_the_field() {
    let policies = PolicySnapshot::default();
    let dup = service(
        "team-a",
        "chat",
        json!({"model": {"ref": "m", "servedName": "x", "adapters": [{"name": "x", "source": "s"}]}}),
    );
    assert_eq!(
        verdict(&dup, &policies).0,
        [
            "spec.model.adapters[0].name: Duplicate value: \"x\": the service already serves this name"
        ]
    );
    let canary = service(
        "team-a",
        "chat",
        json!({"canary": {"model": {"ref": "m2", "servedName": "y"}, "weight": 10}}),
    );
    assert!(
        verdict(&canary, &policies).0[0].starts_with("spec.canary.model.servedName: Forbidden")
    );
    // Eight adapters by default; nine are too many.
    let nine = service(
        "team-a",
        "chat",
        json!({"model": {"ref": "m", "adapters": adapters(9)}}),
    );
    assert_eq!(
        verdict(&nine, &policies).0,
        [
            "spec.model.adapters: Too many: must have at most 8 items (where no policy sets limits.maxAdapters), has 9"
        ]
    );
    // A route by name holds 16 rules: 15 names, 14 with the path rule.
    let mut by_name = service(
        "team-a",
        "chat",
        json!({"model": {"ref": "m", "adapters": adapters(14)}, "routing": {"match": "Both"}}),
    );
    let many = PolicySnapshot {
        cluster: vec![
            serde_json::from_value(json!({
                "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
                "metadata": {"name": "many"}, "spec": {"limits": {"maxAdapters": 20}}
            }))
            .expect("policy"),
        ],
        namespaced: vec![],
    };
    let errs = verdict(&by_name, &many).0;
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains("at most 14 names"), "{errs:?}");
    if let Some(r) = by_name.spec.routing.as_mut() {
        r.r#match = Some(crate::api::v1beta1::RouteMatch::ModelName);
    }
    assert!(verdict(&by_name, &many).0.is_empty());
    let header = service(
        "team-a",
        "chat",
        json!({"routing": {"modelNameHeader": "X Model", "hostnames": ["API.example.com", "*.example.com", "10.0.0.1"]}}),
    );
    let errs = verdict(&header, &policies).0;
    assert!(
        errs[0].starts_with("spec.routing.modelNameHeader: Invalid value"),
        "{errs:?}"
    );
    assert!(
        errs[1].starts_with("spec.routing.hostnames[0]: Invalid value"),
        "{errs:?}"
    );
    assert!(
        errs[2].starts_with("spec.routing.hostnames[2]: Invalid value"),
        "{errs:?}"
    );
    assert_eq!(errs.len(), 3, "{errs:?}");
}

#[test]
fn a_policy_bounds_adapters_and_their_sources() {
    let policy = |enforcement: &str| PolicySnapshot {
        cluster: vec![
            serde_json::from_value(json!({
                "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
                "metadata": {"name": "adapters"},
                "spec": {"enforcement": enforcement,
                         "limits": {"maxAdapters": 1, "allowedAdapterSources": ["org/*"]}}
            }))
            .expect("policy"),
        ],
        namespaced: vec![],
    };
    let svc = service(
        "team-a",
        "chat",
        json!({"model": {"ref": "m", "adapters": [
            {"name": "a", "source": "org/a"}, {"name": "b", "source": "hf.co/evil/b"}]}}),
    );
    let (errors, warnings) = verdict(&svc, &policy("Deny"));
    assert_eq!(
        errors,
        [
            "spec.model.adapters: Too many: must have at most 1 items (limits.maxAdapters of ClusterInferencePolicy \"adapters\"), has 2",
            "spec.model.adapters[1].source: Invalid value: \"hf.co/evil/b\": must match one of \"org/*\" (limits.allowedAdapterSources of ClusterInferencePolicy \"adapters\")"
        ]
    );
    assert!(warnings.is_empty());
    let (errors, warnings) = verdict(&svc, &policy("Warn"));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
}
