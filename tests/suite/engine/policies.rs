//! Limits and defaults across policies: the strictest limit wins and names
//! its policy, `Warn` enforcement turns violations into warnings, cluster
//! policies apply by namespace selector, list limits and graph hosts apply
//! from every policy, defaults are layered by priority then name, a
//! namespace policy may only tighten, a cluster policy is validated, and
//! rollout gate queries must parse.

use std::collections::BTreeMap;

use infergate::api::policy::{
    ClusterInferencePolicySpec, Enforcement, EngineDefaults, PolicyDefaults, PolicyLimits,
    ResourceDefaults, RoutingDefaults,
};
use infergate::api::v1beta1::{AcceleratorSpec, Backend, CanarySpec, GraphSpec, ModelSpec};
use infergate::api::{AcceleratorType, ClusterInferencePolicy, HealthCheckSpec, InferencePolicy};
use infergate::engine::{self, NoRoutes, PolicySnapshot};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::{cluster, ctx_run, errors, namespaced, valid_service, validate};

#[test]
fn strictest_limit_wins_and_names_its_policy() {
    let s = {
        let mut s = valid_service();
        s.spec.replicas = Some(10);
        s
    };
    // cluster 16, namespace 8 -> 8 from the namespace policy
    let p = PolicySnapshot {
        cluster: vec![cluster(
            "platform",
            Enforcement::Deny,
            PolicyLimits {
                max_replicas: Some(16),
                ..Default::default()
            },
        )],
        namespaced: vec![namespaced(
            "tight",
            PolicyLimits {
                max_replicas: Some(8),
                ..Default::default()
            },
        )],
    };
    assert_eq!(
        errors(&validate(&s, &p)),
        vec![
            "spec.replicas: Invalid value: 10: must be at most 8 (InferencePolicy \"team-a/tight\")"
        ]
    );
    // a namespace policy cannot loosen: cluster 4 still applies against namespace 8
    let p = PolicySnapshot {
        cluster: vec![cluster(
            "platform",
            Enforcement::Deny,
            PolicyLimits {
                max_replicas: Some(4),
                ..Default::default()
            },
        )],
        namespaced: p.namespaced,
    };
    assert_eq!(
        errors(&validate(&s, &p)),
        vec![
            "spec.replicas: Invalid value: 10: must be at most 4 (ClusterInferencePolicy \"platform\")"
        ]
    );
}

#[test]
fn warn_enforcement_turns_violations_into_warnings() {
    let mut s = valid_service();
    s.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "other".to_owned(),
            image: None,
            ..Default::default()
        },
        weight: 40,
        ..Default::default()
    });
    let soft = PolicySnapshot {
        cluster: vec![cluster(
            "soft",
            Enforcement::Warn,
            PolicyLimits {
                max_canary_weight: Some(20),
                allowed_image_registries: Some(vec!["other.example.com/".to_owned()]),
                ..Default::default()
            },
        )],
        ..Default::default()
    };
    let v = validate(&s, &soft);
    assert!(v.allowed(), "{:?}", v.errors);
    assert!(v.warnings.iter().any(|w| w
        == "spec.canary.weight: Invalid value: 40: must be at most 20 (ClusterInferencePolicy \"soft\")"));
    assert!(
        v.warnings
            .iter()
            .any(|w| w.starts_with("spec.engine.image: Invalid value:"))
    );
    // A Deny policy next to it still denies; the Warn duplicate is dropped.
    let mut both = soft.clone();
    both.cluster.push(cluster(
        "hard",
        Enforcement::Deny,
        PolicyLimits {
            max_canary_weight: Some(30),
            ..Default::default()
        },
    ));
    let v = validate(&s, &both);
    assert_eq!(
        errors(&v),
        vec![
            "spec.canary.weight: Invalid value: 40: must be at most 30 (ClusterInferencePolicy \"hard\")"
        ]
    );
    assert!(
        !v.warnings
            .iter()
            .any(|w| w.starts_with("spec.canary.weight"))
    );
}

#[test]
fn cluster_policies_apply_by_namespace_selector() {
    let mut p = cluster(
        "prod-only",
        Enforcement::Deny,
        PolicyLimits {
            max_replicas: Some(1),
            ..Default::default()
        },
    );
    p.spec.namespace_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([("tier".to_owned(), "prod".to_owned())])),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "team".to_owned(),
            operator: "NotIn".to_owned(),
            values: Some(vec!["platform".to_owned()]),
        }]),
    });
    let snap = PolicySnapshot {
        cluster: vec![p],
        ..Default::default()
    };
    let mut s = valid_service();
    s.spec.replicas = Some(3);
    let check = |labels: &[(&str, &str)]| {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ctx_run(&snap, &labels, &NoRoutes, |c| {
            engine::validate_service(&s, None, c).allowed()
        })
    };
    assert!(!check(&[("tier", "prod")]));
    assert!(check(&[("tier", "dev")]));
    assert!(check(&[("tier", "prod"), ("team", "platform")]));
    assert!(check(&[]));
}

#[test]
fn list_limits_apply_from_every_policy() {
    let mut s = valid_service();
    s.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::Amd),
        class: None,
    });
    let snap = PolicySnapshot {
        cluster: vec![cluster(
            "platform",
            Enforcement::Deny,
            PolicyLimits {
                allowed_accelerators: Some(vec![AcceleratorType::Nvidia, AcceleratorType::Amd]),
                ..Default::default()
            },
        )],
        namespaced: vec![namespaced(
            "nvidia-only",
            PolicyLimits {
                allowed_accelerators: Some(vec![AcceleratorType::Nvidia]),
                ..Default::default()
            },
        )],
    };
    assert_eq!(
        errors(&validate(&s, &snap)),
        vec![
            "spec.accelerator.type: Unsupported value: \"amd\": supported values: \"nvidia\" (InferencePolicy \"team-a/nvidia-only\")"
        ]
    );
    // no accelerator is always allowed
    s.spec.accelerator = None;
    assert!(validate(&s, &snap).allowed());
}

#[test]
fn graph_hosts_are_limited_by_every_policy_and_only_narrowed() {
    let mut s = valid_service();
    s.spec.backend = Some(Backend::RayService);
    s.spec.graph = Some(GraphSpec {
        url: "https://graphs.team-a.ml.example.com/g".to_owned(),
        bearer_token_secret_ref: None,
    });
    let hosts = |l: &[&str]| Some(l.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>());
    let platform = |enforcement| {
        cluster(
            "platform",
            enforcement,
            PolicyLimits {
                allowed_graph_hosts: hosts(&["graphs.example.com", "*.ml.example.com"]),
                ..Default::default()
            },
        )
    };
    let snap = PolicySnapshot {
        cluster: vec![platform(Enforcement::Deny)],
        namespaced: vec![],
    };
    assert!(
        validate(&s, &snap).allowed(),
        "a subdomain of *.ml.example.com"
    );
    s.spec.graph.as_mut().unwrap().url = "https://10.0.0.7:8443/g".to_owned();
    assert_eq!(
        errors(&validate(&s, &snap)),
        vec![
            "spec.graph.url: Invalid value: \"https://10.0.0.7:8443/g\": host 10.0.0.7:8443 is not in the allowed graph hosts \"graphs.example.com\", \"*.ml.example.com\" (ClusterInferencePolicy \"platform\")"
        ]
    );
    // Warn: admitted with a warning.
    let warn = PolicySnapshot {
        cluster: vec![platform(Enforcement::Warn)],
        namespaced: vec![],
    };
    let v = validate(&s, &warn);
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    // A namespace policy narrows: the host must be in both lists.
    s.spec.graph.as_mut().unwrap().url = "https://graphs.example.com/g".to_owned();
    let both = PolicySnapshot {
        cluster: vec![platform(Enforcement::Deny)],
        namespaced: vec![namespaced(
            "team-graphs",
            PolicyLimits {
                allowed_graph_hosts: hosts(&["graphs.team-a.ml.example.com"]),
                ..Default::default()
            },
        )],
    };
    let e = errors(&validate(&s, &both));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("(InferencePolicy \"team-a/team-graphs\")"),
        "{e:?}"
    );
    // ... and may not list what the cluster policy does not allow.
    let labels = BTreeMap::new();
    let loosen = namespaced(
        "loosen",
        PolicyLimits {
            allowed_graph_hosts: hosts(&[
                "graphs.team-a.ml.example.com",
                "*.example.com",
                "bad host",
            ]),
            ..Default::default()
        },
    );
    let e = errors(&ctx_run(&both, &labels, &NoRoutes, |c| {
        engine::validate_namespaced_policy(&loosen, c)
    }));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("spec.limits.allowedGraphHosts[2]: Invalid value: \"bad host\""),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("spec.limits.allowedGraphHosts[1]: Invalid value: \"*.example.com\": may not loosen the allowed graph hosts"),
        "{e:?}"
    );
    // Only a literal entry opens internal addresses to the fetcher.
    let url = engine::graph_source::parse_graph_url("https://graphs.example.com/g").unwrap();
    let wild = engine::graph_source::parse_graph_url("https://a.ml.example.com/g").unwrap();
    ctx_run(&both, &labels, &NoRoutes, |c| {
        let layers = engine::policy::layers(c);
        assert!(engine::graph_source::host_listed_literally(&layers, &url));
        assert!(!engine::graph_source::host_listed_literally(&layers, &wild));
    });
}

#[test]
fn policy_defaults_are_layered_by_priority_then_name() {
    let mk = |n: &str, prio: i32, port: i32| {
        ClusterInferencePolicy::new(
            n,
            ClusterInferencePolicySpec {
                priority: prio,
                defaults: Some(PolicyDefaults {
                    engine: Some(EngineDefaults {
                        image: None,
                        port: Some(port),
                        shm_size: None,
                        gpu_memory_utilization: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    };
    let snap = PolicySnapshot {
        cluster: vec![mk("b", 5, 2), mk("a", 5, 1), mk("z", 9, 3)],
        ..Default::default()
    };
    let labels = BTreeMap::new();
    let port = |snap: &PolicySnapshot| {
        ctx_run(snap, &labels, &NoRoutes, |c| {
            engine::default_service(&valid_service(), c)
                .object
                .spec
                .engine
                .and_then(|e| e.port)
        })
    };
    assert_eq!(port(&snap), Some(3));
    let snap2 = PolicySnapshot {
        cluster: vec![mk("b", 5, 2), mk("a", 5, 1)],
        ..Default::default()
    };
    assert_eq!(port(&snap2), Some(1), "ties by name");
}

#[test]
fn namespaced_policy_may_only_tighten() {
    let snap = PolicySnapshot {
        cluster: vec![cluster(
            "platform",
            Enforcement::Deny,
            PolicyLimits {
                max_replicas: Some(16),
                max_request_timeout: Some("30m".to_owned()),
                allowed_image_registries: Some(vec!["registry.example.com/".to_owned()]),
                ..Default::default()
            },
        )],
        ..Default::default()
    };
    let labels = BTreeMap::new();
    let run = |p: &InferencePolicy| {
        ctx_run(&snap, &labels, &NoRoutes, |c| {
            engine::validate_namespaced_policy(p, c)
        })
    };
    let tighter = namespaced(
        "ok",
        PolicyLimits {
            max_replicas: Some(8),
            max_request_timeout: Some("10m".to_owned()),
            allowed_image_registries: Some(vec!["registry.example.com/team-a/".to_owned()]),
            ..Default::default()
        },
    );
    assert!(run(&tighter).allowed(), "{:?}", run(&tighter).errors);
    let looser = namespaced(
        "loose",
        PolicyLimits {
            max_replicas: Some(32),
            max_request_timeout: Some("1h".to_owned()),
            allowed_image_registries: Some(vec!["docker.io/".to_owned()]),
            ..Default::default()
        },
    );
    let e = errors(&run(&looser));
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(e[0].contains("may not loosen the limit 16 of ClusterInferencePolicy \"platform\""));
    // a default above a cluster limit is denied too
    let mut def = namespaced("defaults", PolicyLimits::default());
    def.spec.defaults = Some(PolicyDefaults {
        replicas: Some(20),
        ..Default::default()
    });
    assert_eq!(
        errors(&run(&def)),
        vec![
            "spec.defaults.replicas: Invalid value: 20: must be at most 16 (ClusterInferencePolicy \"platform\")"
        ]
    );
}

#[test]
fn cluster_policy_validation() {
    let mut p = ClusterInferencePolicy::new("p", Default::default());
    p.spec.defaults = Some(PolicyDefaults {
        engine: Some(EngineDefaults {
            image: Some("docker.io/x:1".to_owned()),
            port: Some(0),
            shm_size: None,
            gpu_memory_utilization: None,
        }),
        health_check: Some(HealthCheckSpec {
            path: None,
            interval: Some("1s".to_owned()),
            timeout: Some("5s".to_owned()),
        }),
        resources: Some(ResourceDefaults {
            cpu: Some(Quantity("two".to_owned())),
            memory: None,
        }),
        routing: Some(RoutingDefaults {
            request_timeout: Some("5 minutes".to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    });
    p.spec.limits = Some(PolicyLimits {
        allowed_image_registries: Some(vec!["registry.example.com/".to_owned()]),
        max_request_timeout: Some("30x".to_owned()),
        ..Default::default()
    });
    let e = errors(&engine::validate_cluster_policy(&p));
    for field in [
        "spec.limits.maxRequestTimeout: Invalid value: \"30x\"",
        "spec.defaults.engine.port: Invalid value: 0",
        "spec.defaults.healthCheck.timeout: Invalid value: \"5s\"",
        "spec.defaults.resources.cpu: Invalid value: \"two\"",
        "spec.defaults.routing.requestTimeout: Invalid value: \"5 minutes\"",
        "spec.defaults.engine.image: Invalid value: \"docker.io/x:1\": must start with one of spec.limits.allowedImageRegistries",
    ] {
        assert!(
            e.iter().any(|x| x.starts_with(field)),
            "{field} missing from {e:#?}"
        );
    }
    assert_eq!(e.len(), 6, "{e:#?}");
}

/// A rollout plan whose gate runs `query`.
fn gated_plan(query: &str) -> infergate::api::rollout::RolloutSpec {
    use infergate::api::rollout::{
        AnalysisSpec, PrometheusGate, RolloutSpec, RolloutStrategy, Threshold,
    };
    RolloutSpec {
        strategy: Some(RolloutStrategy::Canary),
        steps: vec![10],
        interval: Some("5m".into()),
        analysis: Some(AnalysisSpec {
            prometheus: Some(PrometheusGate {
                query: query.into(),
                threshold: Threshold {
                    max: Some(1.0),
                    min: None,
                },
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

#[test]
fn rollout_gate_queries_must_parse() {
    let good = r#"histogram_quantile(0.99, sum by (le) (rate(x_bucket{namespace="{{namespace}}",pod=~"{{canary}}-.*",svc="{{service}}"}[5m])))"#;
    let bad = "sum(rate(x[5m])";
    let parse_error = ": not valid PromQL: unclosed left parenthesis";

    let mut svc = valid_service();
    svc.spec.rollout = Some(gated_plan(good));
    assert!(validate(&svc, &PolicySnapshot::default()).errors.is_empty());
    svc.spec.rollout = Some(gated_plan(bad));
    let e = errors(&validate(&svc, &PolicySnapshot::default()));
    assert_eq!(
        e,
        [format!(
            "spec.rollout.analysis.prometheus.query: Invalid value: {bad:?}{parse_error}"
        )]
    );

    let field = "spec.defaults.rollout.analysis.prometheus.query";
    let mut cluster = ClusterInferencePolicy::new("p", Default::default());
    let mut ns = namespaced("p", PolicyLimits::default());
    for (query, want) in [(good, 0), (bad, 1)] {
        let defaults = Some(PolicyDefaults {
            rollout: Some(gated_plan(query)),
            ..Default::default()
        });
        cluster.spec.defaults.clone_from(&defaults);
        ns.spec.defaults = defaults;
        let from_cluster = errors(&engine::validate_cluster_policy(&cluster));
        let labels = BTreeMap::new();
        let from_ns = errors(&ctx_run(
            &PolicySnapshot::default(),
            &labels,
            &NoRoutes,
            |c| engine::validate_namespaced_policy(&ns, c),
        ));
        for e in [from_cluster, from_ns] {
            assert_eq!(e.len(), want, "{e:#?}");
            assert!(
                e.iter()
                    .all(|x| x.starts_with(field) && x.ends_with(parse_error)),
                "{e:#?}"
            );
        }
    }
}
