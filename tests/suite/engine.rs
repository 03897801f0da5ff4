//! Engine and conversion: property tests (defaulting is idempotent,
//! conversion round-trips both ways) and one test per policy/validation rule
//! that the examples cannot express on their own.

use std::collections::BTreeMap;

use infergate::api::conversion::{self, V1ALPHA1, V1BETA1};
use infergate::api::policy::{
    ClusterInferencePolicySpec, Enforcement, EngineDefaults, InferencePolicySpec, PolicyDefaults,
    PolicyLimits, ResourceDefaults, RoutingDefaults,
};
use infergate::api::v1beta1::{
    self, AcceleratorSpec, AutoscalingSpec, Backend, CanarySpec, CanaryStatus, EngineSpec,
    EnvFromSource, EnvVar, GraphSpec, GraphStatus, InferenceService, InferenceServiceSpec,
    InferenceServiceStatus, LocalObjectReference, ModelSpec, ParallelismSpec, PlacementSpec,
    RoutingSpec, SecretKeyRef, SpreadAcross, Toleration,
};
use infergate::api::{
    AcceleratorType, CONVERSION_DATA_ANNOTATION, ClusterInferencePolicy, GatewayRef,
    HealthCheckSpec, InferencePolicy, ResourcesSpec, v1alpha1,
};
use infergate::engine::{
    self, Context, NoRoutes, PolicySnapshot, RouteIndex, ServerDefaults, Verdict,
};
use k8s_openapi::api::core::v1::{EnvVarSource, SecretEnvSource, SecretKeySelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, Time,
};
use kube::api::ObjectMeta;
use proptest::prelude::*;

// ---------------------------------------------------------------- strategies

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop_oneof![Just(None), s.prop_map(Some)].boxed()
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,20}[a-z0-9]"
}

fn image() -> impl Strategy<Value = String> {
    prop_oneof![
        "registry\\.example\\.com/[a-z]{1,8}:[0-9]\\.[0-9]",
        "docker\\.io/[a-z]{1,8}/[a-z]{1,8}:latest",
    ]
}

fn quantity() -> impl Strategy<Value = Quantity> {
    prop_oneof!["[1-9][0-9]{0,2}m", "[1-9][0-9]?", "[1-9][0-9]?(Mi|Gi)"].prop_map(Quantity)
}

fn go_duration() -> impl Strategy<Value = String> {
    prop_oneof!["[1-9][0-9]?s", "[1-9]m", "[1-9][0-9]{0,2}ms"]
}

fn gateway_duration() -> impl Strategy<Value = String> {
    prop_oneof!["[1-9][0-9]?s", "[1-9][0-9]?m", "1h[1-5]?[0-9]m"]
}

fn metadata() -> impl Strategy<Value = ObjectMeta> {
    (
        name(),
        name(),
        opt(prop::collection::btree_map(
            "[a-z]{1,5}",
            "[a-z0-9]{0,5}",
            1..3,
        )),
        // An empty map too: a stash added to it must be told from one
        // added where there was no map.
        opt(prop::collection::btree_map(
            "(example\\.com/)?[a-z]{1,5}",
            ".{0,10}",
            0..3,
        )),
        opt(1i64..100),
        opt("[a-f0-9]{8}"),
    )
        .prop_map(
            |(name, ns, labels, annotations, generation, uid)| ObjectMeta {
                name: Some(name),
                namespace: Some(ns),
                labels,
                annotations,
                generation,
                uid,
                ..Default::default()
            },
        )
}

fn resources() -> impl Strategy<Value = ResourcesSpec> {
    (opt(quantity()), opt(quantity()), opt(quantity())).prop_map(|(cpu, memory, gpu_memory)| {
        ResourcesSpec {
            cpu,
            memory,
            gpu_memory,
        }
    })
}

fn health() -> impl Strategy<Value = HealthCheckSpec> {
    (opt("/[a-z]{1,8}"), opt(go_duration()), opt(go_duration())).prop_map(
        |(path, interval, timeout)| HealthCheckSpec {
            path,
            interval,
            timeout,
        },
    )
}

fn metrics() -> impl Strategy<Value = infergate::api::MetricsSpec> {
    (
        opt(1i32..65535),
        opt("/[a-z]{1,8}"),
        opt(gateway_duration()),
    )
        .prop_map(|(port, path, interval)| infergate::api::MetricsSpec {
            port,
            path,
            interval,
        })
}

fn backend_kind() -> impl Strategy<Value = infergate::api::BackendKind> {
    prop_oneof![
        Just(infergate::api::BackendKind::Service),
        Just(infergate::api::BackendKind::InferencePool),
    ]
}

fn endpoint_picker() -> impl Strategy<Value = infergate::api::EndpointPickerSpec> {
    use infergate::api::{EndpointPickerMode, EndpointPickerSpec, FailureMode};
    (
        opt(prop_oneof![
            Just(EndpointPickerMode::Owned),
            Just(EndpointPickerMode::None)
        ]),
        opt(image()),
        opt(1i32..4),
        opt(prop_oneof![
            Just(FailureMode::FailOpen),
            Just(FailureMode::FailClose)
        ]),
        opt("[a-z: \n]{0,20}"),
        opt(picker_resources()),
    )
        .prop_map(|(mode, image, replicas, failure_mode, config, resources)| {
            EndpointPickerSpec {
                mode,
                image,
                replicas,
                failure_mode,
                config,
                resources,
            }
        })
}

fn picker_resources() -> impl Strategy<Value = infergate::api::PickerResources> {
    use infergate::api::{CpuMemory, PickerResources};
    let cpu_memory =
        || (opt(quantity()), opt(quantity())).prop_map(|(cpu, memory)| CpuMemory { cpu, memory });
    (opt(cpu_memory()), opt(cpu_memory()))
        .prop_map(|(requests, limits)| PickerResources { requests, limits })
}

fn accelerator() -> impl Strategy<Value = AcceleratorType> {
    prop_oneof![
        Just(AcceleratorType::Nvidia),
        Just(AcceleratorType::Amd),
        Just(AcceleratorType::IntelGaudi),
        Just(AcceleratorType::GoogleTpu),
        Just(AcceleratorType::None),
    ]
}

fn time() -> impl Strategy<Value = Time> {
    (0i64..2_000_000_000)
        .prop_map(|s| Time(jiff::Timestamp::from_second(s).unwrap_or(jiff::Timestamp::UNIX_EPOCH)))
}

fn condition() -> impl Strategy<Value = Condition> {
    (
        prop_oneof![
            Just("Ready"),
            Just("Reconciled"),
            Just("RoutingReady"),
            Just("PolicyCompliant")
        ],
        prop_oneof![Just("True"), Just("False"), Just("Unknown")],
        "[A-Z][a-zA-Z]{0,10}",
        ".{0,20}",
        opt(0i64..50),
        time(),
    )
        .prop_map(|(t, s, reason, message, og, ts)| Condition {
            type_: t.to_owned(),
            status: s.to_owned(),
            reason,
            message,
            observed_generation: og,
            last_transition_time: ts,
        })
}

fn beta_status() -> impl Strategy<Value = InferenceServiceStatus> {
    (
        opt(0i64..50),
        prop::collection::vec(condition(), 0..4).prop_map(|mut cs| {
            // Condition types are unique in a real status.
            let mut seen = std::collections::BTreeSet::new();
            cs.retain(|c| seen.insert(c.type_.clone()));
            cs
        }),
        opt(0i32..10),
        opt(0i32..10),
        opt(
            (opt(0i32..5), opt(0i32..5), opt(0i32..100)).prop_map(|(r, rr, w)| CanaryStatus {
                replicas: r,
                ready_replicas: rr,
                weight: w,
            }),
        ),
        opt("/[a-z]{1,5}/[a-z]{1,5}"),
        opt(gateway_duration()),
        opt(graph_status()),
        opt(rollout_status()),
    )
        .prop_map(
            |(
                observed_generation,
                conditions,
                replicas,
                ready_replicas,
                canary,
                route,
                rt,
                graph,
                rollout,
            )| {
                InferenceServiceStatus {
                    observed_generation,
                    conditions,
                    replicas,
                    ready_replicas,
                    canary,
                    route_path: route,
                    request_timeout: rt,
                    rollout,
                    capacity: None,
                    graph,
                }
            },
        )
}

/// `status.rollout`: the phase and the rollout actions acted on.
fn rollout_status() -> impl Strategy<Value = infergate::api::rollout::RolloutStatus> {
    use infergate::api::rollout::{RolloutPhase, RolloutStatus};
    (
        prop_oneof![
            Just(RolloutPhase::Stable),
            Just(RolloutPhase::Progressing),
            Just(RolloutPhase::Paused),
            Just(RolloutPhase::RolledBack),
        ],
        opt(0i32..3),
        opt("(pause|resume|promote|abort)/[a-z0-9]{1,8}"),
        prop::collection::vec("(pause|resume)/[a-z0-9]{1,8}", 0..4),
    )
        .prop_map(|(phase, step, last_action, actions_seen)| RolloutStatus {
            phase,
            step,
            last_action,
            actions_seen,
            ..RolloutStatus::default()
        })
}

/// `status.graph`: the live graph and the last fetch.
fn graph_status() -> impl Strategy<Value = GraphStatus> {
    (
        opt("https://[a-z]{1,8}\\.example\\.com/[a-z]{1,8}"),
        opt("[0-9a-f]{64}"),
        opt("\"[a-z0-9]{1,8}\""),
        opt("[A-Za-z]{1,10}: [a-z ]{0,20}"),
        opt("[a-z0-9-]{1,12}"),
        prop::collection::vec("[a-z0-9-]{1,12}", 0..4),
    )
        .prop_map(
            |(url, hex, etag, last_fetch_error, last_refresh, refreshes_seen)| GraphStatus {
                url,
                short_digest: hex.as_ref().map(|h| h[..12].to_owned()),
                digest: hex.map(|h| format!("sha256:{h}")),
                etag,
                applied_at: None,
                last_fetch_at: None,
                last_fetch_error,
                last_refresh,
                refreshes_seen,
            },
        )
}

fn beta_spec() -> impl Strategy<Value = InferenceServiceSpec> {
    let model = (name(), opt(image())).prop_map(|(r, image)| ModelSpec { r#ref: r, image });
    let engine = (
        opt(image()),
        opt(1i32..65535),
        prop::collection::vec("--[a-z]{1,6}", 0..3),
        prop::collection::vec(
            (
                "[A-Z]{1,6}",
                opt("[a-z]{0,5}"),
                opt(("[a-z]{1,5}", "[a-z]{1,5}")),
            )
                .prop_map(|(name, value, secret)| EnvVar {
                    name,
                    value: if secret.is_some() { None } else { value },
                    value_from: secret.map(|(name, key)| EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name,
                            key,
                            optional: None,
                        }),
                        ..EnvVarSource::default()
                    }),
                }),
            0..2,
        ),
        prop::collection::vec(
            "[a-z]{1,5}".prop_map(|name| EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name,
                    optional: None,
                }),
                ..EnvFromSource::default()
            }),
            0..2,
        ),
        opt(prop_oneof![Just("2Gi"), Just("512Mi")].prop_map(|q| Quantity(q.to_owned()))),
        opt(1i64..1_000_000),
        opt(prop_oneof![Just(0.9), Just(0.85), Just(1.0)]),
    )
        .prop_map(
            |(image, port, args, env, env_from, shm_size, max_model_len, utilization)| EngineSpec {
                image,
                port,
                args,
                env,
                env_from,
                shm_size,
                max_model_len,
                gpu_memory_utilization: utilization,
            },
        );
    let placement = (
        opt(prop::collection::btree_map(
            "[a-z]{1,5}",
            "[a-z]{1,5}",
            0..2,
        )),
        opt(prop::collection::vec(
            "[a-z]{1,5}".prop_map(|key| Toleration {
                key: Some(key),
                operator: Some("Exists".to_owned()),
                effect: Some("NoSchedule".to_owned()),
                ..Toleration::default()
            }),
            0..2,
        )),
        opt("[a-z]{1,8}"),
        opt(prop_oneof![
            Just(SpreadAcross::Node),
            Just(SpreadAcross::Zone),
            Just(SpreadAcross::None)
        ]),
    )
        .prop_map(
            |(node_selector, tolerations, priority_class_name, spread_across)| PlacementSpec {
                node_selector,
                tolerations,
                priority_class_name,
                spread_across,
            },
        );
    let identity = (
        opt(placement),
        opt("[a-z]{1,8}"),
        prop::collection::vec(
            "[a-z]{1,8}".prop_map(|name| LocalObjectReference { name }),
            0..2,
        ),
    );
    let autoscaling =
        (1i32..5, 0i32..5, opt(1i32..100)).prop_map(|(min, extra, t)| AutoscalingSpec {
            min_replicas: min,
            max_replicas: min + extra,
            target_cpu_utilization_percent: t,
        });
    let canary = (
        (name(), opt(image())).prop_map(|(r, image)| ModelSpec { r#ref: r, image }),
        opt(image()),
        0i32..=100,
        opt(0i32..4),
    )
        .prop_map(|(model, engine_image, weight, replicas)| CanarySpec {
            model,
            engine_image,
            weight,
            replicas,
        });
    let routing = (
        opt(prop_oneof![
            Just("/{.metadata.namespace}/{.metadata.name}".to_owned()),
            Just("/models/{.spec.model.ref}".to_owned()),
        ]),
        opt(gateway_duration()),
        opt((name(), opt(name())).prop_map(|(name, namespace)| GatewayRef { name, namespace })),
        opt(backend_kind()),
        opt(endpoint_picker()),
    )
        .prop_map(
            |(path_template, request_timeout, gateway, backend_kind, endpoint_picker)| {
                RoutingSpec {
                    path_template,
                    request_timeout,
                    gateway,
                    backend_kind,
                    endpoint_picker,
                }
            },
        );
    let backend_graph = prop_oneof![
        Just((None, None)),
        Just((Some(Backend::Deployment), None)),
        (
            "https://[a-z]{1,8}\\.example\\.com/[a-z]{1,5}",
            opt((name(), "[a-z]{1,5}").prop_map(|(name, key)| SecretKeyRef { name, key }))
        )
            .prop_map(|(url, r)| (
                Some(Backend::RayService),
                Some(GraphSpec {
                    url,
                    bearer_token_secret_ref: r
                })
            )),
    ];
    (
        (
            model,
            opt(engine),
            backend_graph,
            opt(0i32..10),
            opt(autoscaling),
        ),
        (
            opt(resources()),
            opt((opt(accelerator()), opt("[a-z]{1,8}"))
                .prop_map(|(r#type, class)| AcceleratorSpec { r#type, class })),
            opt((opt(1i32..4), opt(1i32..4))
                .prop_map(|(tensor, pipeline)| ParallelismSpec { tensor, pipeline })),
            opt(canary),
            opt(health()),
            opt(routing),
            opt(metrics()),
        ),
        identity,
    )
        .prop_map(
            |(
                (model, engine, (backend, graph), replicas, autoscaling),
                (resources, accelerator, parallelism, canary, health_check, routing, metrics),
                (placement, service_account_name, image_pull_secrets),
            )| InferenceServiceSpec {
                model,
                engine,
                backend,
                replicas,
                autoscaling,
                resources,
                accelerator,
                parallelism,
                placement,
                service_account_name,
                image_pull_secrets,
                canary,
                health_check,
                routing,
                metrics,
                graph,
                rollout: replicas.map(|_| infergate::api::rollout::RolloutSpec {
                    strategy: Some(infergate::api::rollout::RolloutStrategy::Canary),
                    steps: vec![10, 50],
                    interval: Some("1m".into()),
                    ..Default::default()
                }),
            },
        )
}

fn beta_service() -> impl Strategy<Value = InferenceService> {
    (metadata(), beta_spec(), opt(beta_status())).prop_map(|(metadata, spec, status)| {
        InferenceService {
            metadata,
            spec,
            status,
        }
    })
}

fn alpha_service() -> impl Strategy<Value = v1alpha1::InferenceService> {
    let spec = (
        name(),
        opt(0i32..10),
        opt(0i32..5),
        opt(0i32..10),
        opt(resources()),
        opt((name(), 0i32..=100)
            .prop_map(|(model_ref, weight)| v1alpha1::CanarySpec { model_ref, weight })),
        opt(health()),
    )
        .prop_filter(
            "minReplicas <= maxReplicas when autoscaling",
            |(_, _, min, max, ..)| match (min, max) {
                (Some(a), Some(b)) if *a > 0 => a <= b,
                _ => true,
            },
        )
        .prop_map(
            |(model_ref, replicas, min_replicas, max_replicas, resources, canary, health_check)| {
                v1alpha1::InferenceServiceSpec {
                    model_ref,
                    replicas,
                    min_replicas,
                    max_replicas,
                    resources,
                    canary,
                    health_check,
                }
            },
        );
    let status = (opt(any::<bool>()), opt(0i32..10), opt(".{0,20}")).prop_map(
        |(ready, replicas, message)| v1alpha1::InferenceServiceStatus {
            ready,
            replicas,
            message,
        },
    );
    (metadata(), spec, opt(status)).prop_map(|(metadata, spec, status)| {
        v1alpha1::InferenceService {
            metadata,
            spec,
            status,
        }
    })
}

fn policy_defaults() -> impl Strategy<Value = PolicyDefaults> {
    (
        opt(
            (opt(image()), opt(1i32..65535)).prop_map(|(image, port)| EngineDefaults {
                image,
                port,
                shm_size: None,
                gpu_memory_utilization: None,
            }),
        ),
        opt(0i32..10),
        opt((opt(quantity()), opt(quantity()))
            .prop_map(|(cpu, memory)| ResourceDefaults { cpu, memory })),
        opt(health()),
        opt((
            opt(Just("/{.metadata.name}".to_owned())),
            opt(gateway_duration()),
            opt((name(), opt(name())).prop_map(|(name, namespace)| GatewayRef { name, namespace })),
            opt(endpoint_picker()),
        )
            .prop_map(
                |(path_template, request_timeout, gateway, endpoint_picker)| RoutingDefaults {
                    path_template,
                    request_timeout,
                    gateway,
                    backend_kind: None,
                    endpoint_picker,
                },
            )),
        opt(1i32..100),
        opt(metrics()),
    )
        .prop_map(
            |(engine, replicas, resources, health_check, routing, target, metrics)| {
                PolicyDefaults {
                    engine,
                    accelerator: None,
                    placement: None,
                    replicas,
                    autoscaling: target.map(|t| infergate::api::policy::AutoscalingDefaults {
                        target_cpu_utilization_percent: Some(t),
                    }),
                    resources,
                    health_check,
                    routing,
                    metrics,
                    rollout: None,
                }
            },
        )
}

fn snapshot() -> impl Strategy<Value = PolicySnapshot> {
    (
        prop::collection::vec((name(), -2i32..3, opt(policy_defaults())), 0..3),
        prop::collection::vec((name(), -2i32..3, opt(policy_defaults())), 0..3),
    )
        .prop_map(|(cluster, namespaced)| PolicySnapshot {
            cluster: cluster
                .into_iter()
                .map(|(n, priority, defaults)| {
                    ClusterInferencePolicy::new(
                        &n,
                        ClusterInferencePolicySpec {
                            priority,
                            defaults,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            namespaced: namespaced
                .into_iter()
                .map(|(n, priority, defaults)| {
                    let mut p = InferencePolicy::new(
                        &n,
                        InferencePolicySpec {
                            priority,
                            defaults,
                            ..Default::default()
                        },
                    );
                    p.metadata.namespace = Some("team-a".to_owned());
                    p
                })
                .collect(),
        })
}

// ------------------------------------------------------------- helpers

fn ctx_run<R>(
    policies: &PolicySnapshot,
    labels: &BTreeMap<String, String>,
    routes: &dyn RouteIndex,
    f: impl FnOnce(&Context) -> R,
) -> R {
    let server = ServerDefaults::default();
    let ctx = Context {
        namespace: "team-a",
        namespace_labels: labels,
        policies,
        classes: &infergate::engine::AcceleratorClasses::new(),
        profiles: &infergate::engine::ModelProfiles::default(),
        server: &server,
        routes,
    };
    f(&ctx)
}

fn valid_service() -> InferenceService {
    let mut s = InferenceService::new("chat", Default::default());
    s.metadata.namespace = Some("team-a".to_owned());
    s.spec.model.r#ref = "llama3-8b-q4".to_owned();
    s.spec.engine = Some(EngineSpec {
        image: Some("registry.example.com/vllm:0.9".to_owned()),
        ..Default::default()
    });
    s
}

fn validate(s: &InferenceService, p: &PolicySnapshot) -> Verdict {
    let labels = BTreeMap::new();
    ctx_run(p, &labels, &NoRoutes, |c| {
        engine::validate_service(s, None, c)
    })
}

fn cluster(name: &str, enforcement: Enforcement, limits: PolicyLimits) -> ClusterInferencePolicy {
    ClusterInferencePolicy::new(
        name,
        ClusterInferencePolicySpec {
            enforcement,
            limits: Some(limits),
            ..Default::default()
        },
    )
}

fn namespaced(name: &str, limits: PolicyLimits) -> InferencePolicy {
    let mut p = InferencePolicy::new(
        name,
        InferencePolicySpec {
            limits: Some(limits),
            ..Default::default()
        },
    );
    p.metadata.namespace = Some("team-a".to_owned());
    p
}

/// The webhook's patch for `defaulted`, parsed.
fn defaulting_patch(before: &InferenceService, defaulted: &engine::Defaulted) -> json_patch::Patch {
    let text = infergate::webhook::patch::defaulting_patch(before, defaulted).unwrap();
    serde_json::from_slice(&text).unwrap()
}

fn errors(v: &Verdict) -> Vec<String> {
    v.errors.iter().map(ToString::to_string).collect()
}

// ------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// down(up(x)) == x for every valid v1alpha1 object.
    #[test]
    fn alpha_round_trips(a in alpha_service()) {
        let b = conversion::to_v1beta1(&a).unwrap();
        let back = conversion::to_v1alpha1(&b).unwrap();
        prop_assert_eq!(&back, &a);
        // Metadata changes only in the conversion annotation.
        let mut meta = b.metadata.clone();
        if let Some(an) = meta.annotations.as_mut() {
            an.remove(CONVERSION_DATA_ANNOTATION);
            if an.is_empty() && a.metadata.annotations.is_none() {
                meta.annotations = None;
            }
        }
        prop_assert_eq!(meta, a.metadata.clone());
        // The same through the JSON entry point the webhook uses.
        let json = serde_json::to_value(&a).unwrap();
        let up = conversion::convert(json.clone(), V1BETA1).unwrap();
        prop_assert_eq!(up["apiVersion"].as_str(), Some(V1BETA1));
        let down = conversion::convert(up, V1ALPHA1).unwrap();
        prop_assert_eq!(down, json);
    }

    /// The webhook's one-object-at-a-time path (metadata kept as slices of
    /// the body) answers exactly what the typed conversion of the whole
    /// object does, both ways, the stash annotation included.
    #[test]
    fn the_streaming_path_converts_as_the_typed_one(a in alpha_service(), b in beta_service()) {
        use infergate::webhook::conversion::convert_object;
        for (json, desired) in [
            (serde_json::to_value(&a).unwrap(), V1BETA1),
            (serde_json::to_value(&b).unwrap(), V1ALPHA1),
            (serde_json::to_value(&b).unwrap(), V1BETA1),
        ] {
            let expected = conversion::convert(json.clone(), desired).unwrap();
            let streamed = convert_object(&json.to_string(), desired).unwrap();
            let streamed: serde_json::Value = serde_json::from_slice(&streamed).unwrap();
            prop_assert_eq!(&streamed, &expected);
            // And back again, from the streamed answer.
            let back_to = json["apiVersion"].as_str().unwrap();
            let back = convert_object(&streamed.to_string(), back_to).unwrap();
            let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
            prop_assert_eq!(back, json);
        }
    }

    /// up(down(x)) == x for every valid v1beta1 object, status included.
    #[test]
    fn beta_round_trips(b in beta_service()) {
        let a = conversion::to_v1alpha1(&b).unwrap();
        let back = conversion::to_v1beta1(&a).unwrap();
        prop_assert_eq!(&back, &b);
        let json = serde_json::to_value(&b).unwrap();
        let down = conversion::convert(json.clone(), V1ALPHA1).unwrap();
        prop_assert_eq!(down["apiVersion"].as_str(), Some(V1ALPHA1));
        prop_assert_eq!(&down["metadata"]["name"], &json["metadata"]["name"]);
        let up = conversion::convert(down, V1BETA1).unwrap();
        prop_assert_eq!(up, json);
    }

    /// default(default(x)) == default(x), and the patch for an already
    /// defaulted object is empty; the patch for x turns x into default(x).
    #[test]
    fn defaulting_is_idempotent(svc in beta_service(), policies in snapshot(), tier in any::<bool>()) {
        let mut svc = svc;
        svc.metadata.namespace = Some("team-a".to_owned());
        let labels: BTreeMap<String, String> = if tier {
            BTreeMap::from([("tier".to_owned(), "prod".to_owned())])
        } else {
            BTreeMap::new()
        };
        let (once, twice) = ctx_run(&policies, &labels, &NoRoutes, |c| {
            let once = engine::default_service(&svc, c);
            let twice = engine::default_service(&once.object, c);
            (once, twice)
        });
        prop_assert_eq!(&twice.object, &once.object);
        prop_assert!(twice.filled.is_empty());
        let j1 = serde_json::to_value(&once.object).unwrap();
        let j2 = serde_json::to_value(&twice.object).unwrap();
        prop_assert!(json_patch::diff(&j1, &j2).0.is_empty());
        let j0 = serde_json::to_value(&svc).unwrap();
        let patch = json_patch::diff(&j0, &j1);
        prop_assert_eq!(patch.0.is_empty(), once.filled.is_empty());
        let mut patched = j0.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        prop_assert_eq!(&patched, &j1);
        // The webhook's patch, built from what defaulting recorded, does the
        // same with adds only, and is empty for a defaulted object.
        let recorded = defaulting_patch(&svc, &once);
        prop_assert!(recorded.0.iter().all(|op| matches!(op, json_patch::PatchOperation::Add(_))));
        let mut patched = j0.clone();
        json_patch::patch(&mut patched, &recorded).unwrap();
        prop_assert_eq!(&patched, &j1);
        prop_assert!(defaulting_patch(&once.object, &twice).0.is_empty());
        // Replicas the user set, 0 included, are never changed.
        if let Some(r) = svc.spec.replicas {
            prop_assert_eq!(once.object.spec.replicas, Some(r));
        }
    }

    /// Validation never panics and every error names a field.
    #[test]
    fn every_error_names_its_field(svc in beta_service()) {
        let v = validate(&svc, &PolicySnapshot::default());
        for e in &v.errors {
            prop_assert!(e.field.starts_with("spec.") || e.field.starts_with("metadata."), "{}", e);
            let prefix = format!("{}: ", e.field);
            prop_assert!(e.to_string().starts_with(&prefix));
        }
    }
}

// ------------------------------------------------------------- conversion

/// A kubectl-shaped object (managed fields, last-applied configuration,
/// owner references, finalizers) converts down and up with its metadata
/// intact, the conversion annotation aside, and round-trips exactly.
#[test]
fn kubectl_shaped_metadata_survives_conversion() {
    let object = serde_json::json!({
        "apiVersion": V1BETA1, "kind": "InferenceService",
        "metadata": {
            "name": "chat", "namespace": "team-a", "uid": "0000-1111", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-11-21T12:00:00Z",
            "labels": {"team": "a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{\"model\":{\"ref\":\"m\"}}}"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "2222"}],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": V1BETA1,
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:model": {}}}}]
        },
        "spec": {"model": {"ref": "m", "image": "registry.example.com/w:1"}, "replicas": 2,
                 "canary": {"model": {"ref": "c"}, "weight": 10, "engineImage": "registry.example.com/e:2"},
                 "routing": {"requestTimeout": "10m"}}
    });
    let down = conversion::convert(object.clone(), V1ALPHA1).unwrap();
    assert_eq!(down["apiVersion"], V1ALPHA1);
    let mut meta = down["metadata"].clone();
    let annotations = meta["annotations"].as_object_mut().unwrap();
    assert!(
        annotations
            .remove(infergate::api::CONVERSION_DATA_ANNOTATION)
            .is_some(),
        "v1alpha1 cannot say everything: {down}"
    );
    assert_eq!(meta, object["metadata"], "metadata kept verbatim");
    let up = conversion::convert(down, V1BETA1).unwrap();
    assert_eq!(up, object);
}

/// The streaming path copies metadata without reading it only when no key
/// can be the conversion annotation: a stash under a `\u`-escaped name, or
/// one to add to an empty `annotations` map, is handled as the typed path
/// handles it; metadata with nothing to stash comes back byte for byte.
#[test]
fn the_streaming_path_reads_metadata_whenever_a_stash_may_be_involved() {
    use infergate::webhook::conversion::convert_object;
    let beta = serde_json::json!({
        "apiVersion": V1BETA1, "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "annotations": {}},
        "spec": {"model": {"ref": "m", "image": "registry.example.com/w:1"}}
    });
    // v1alpha1 cannot hold the image: a stash is added to the empty map.
    let expected = conversion::convert(beta.clone(), V1ALPHA1).unwrap();
    let streamed = convert_object(&beta.to_string(), V1ALPHA1).unwrap();
    let streamed: serde_json::Value = serde_json::from_slice(&streamed).unwrap();
    assert_eq!(streamed, expected);
    let back = convert_object(&streamed.to_string(), V1BETA1).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(back, beta, "the empty map survives the round trip");

    // The stash under an escaped spelling of its name is still found.
    let stashed = streamed.to_string();
    let escaped = stashed.replace(
        "\"infergate.dev/conversion-data\"",
        "\"\\u0069nfergate.dev\\/conversion-data\"",
    );
    assert_ne!(escaped, stashed);
    let back = convert_object(&escaped, V1BETA1).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(back, beta);
    // Also when no byte of the metadata spells the name as it is.
    let hidden = stashed.replace(
        "\"infergate.dev/conversion-data\"",
        "\"infergate.dev/conversion\\u002ddata\"",
    );
    assert!(!hidden.contains("conversion-data"), "{hidden}");
    let back = convert_object(&hidden, V1BETA1).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(back, beta);

    // Nothing to stash: metadata is copied as it was written.
    let text = r#"{"apiVersion":"infergate.dev/v1alpha1","kind":"InferenceService","metadata": { "name" : "chat","labels":{"a\/b":"c"} },"spec":{"modelRef":"m"}}"#;
    let up = convert_object(text, V1BETA1).unwrap();
    let up = String::from_utf8(up).unwrap();
    assert!(
        up.contains(r#""metadata":{ "name" : "chat","labels":{"a\/b":"c"} }"#),
        "{up}"
    );
}

#[test]
fn alpha_autoscaling_and_ready_mapping() {
    let mut a = v1alpha1::InferenceService::new(
        "chat",
        v1alpha1::InferenceServiceSpec {
            model_ref: "m".to_owned(),
            replicas: Some(2),
            min_replicas: Some(1),
            max_replicas: Some(8),
            canary: Some(v1alpha1::CanarySpec {
                model_ref: "c".to_owned(),
                weight: 10,
            }),
            ..Default::default()
        },
    );
    a.status = Some(v1alpha1::InferenceServiceStatus {
        ready: Some(true),
        replicas: Some(2),
        message: Some("all replicas ready".to_owned()),
    });
    let b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(
        b.spec.autoscaling,
        Some(AutoscalingSpec {
            min_replicas: 1,
            max_replicas: 8,
            target_cpu_utilization_percent: None
        })
    );
    assert_eq!(b.spec.model.r#ref, "m");
    assert_eq!(b.spec.canary.as_ref().map(|c| c.weight), Some(10));
    let st = b.status.as_ref().unwrap();
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.message, "all replicas ready");
    // Everything v1alpha1 says, v1beta1 can say: no annotation needed.
    assert!(b.metadata.annotations.is_none());

    // minReplicas 0 means no autoscaling; the values survive in the annotation.
    a.spec.min_replicas = Some(0);
    let b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(b.spec.autoscaling, None);
    assert!(
        b.metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(CONVERSION_DATA_ANNOTATION)
    );
    assert_eq!(conversion::to_v1alpha1(&b).unwrap(), a);
}

#[test]
fn edits_through_the_old_version_are_kept() {
    let mut b = valid_service();
    b.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "c".to_owned(),
            image: Some("registry.example.com/c:1".to_owned()),
        },
        engine_image: Some("registry.example.com/e:2".to_owned()),
        weight: 10,
        replicas: Some(2),
    });
    b.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::Nvidia),
        class: None,
    });
    let mut a = conversion::to_v1alpha1(&b).unwrap();
    // a v1alpha1 client changes the weight and the model
    if let Some(c) = a.spec.canary.as_mut() {
        c.weight = 30;
    }
    a.spec.model_ref = "new-model".to_owned();
    let up = conversion::to_v1beta1(&a).unwrap();
    let c = up.spec.canary.as_ref().unwrap();
    assert_eq!(c.weight, 30, "the edit is kept");
    assert_eq!(up.spec.model.r#ref, "new-model");
    assert_eq!(c.engine_image, b.spec.canary.as_ref().unwrap().engine_image);
    assert_eq!(c.replicas, Some(2));
    assert_eq!(up.spec.accelerator, b.spec.accelerator);
    assert!(up.metadata.annotations.is_none());
    // a v1alpha1 client removes the canary: nothing of it comes back
    let mut a = conversion::to_v1alpha1(&b).unwrap();
    a.spec.canary = None;
    let up = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(up.spec.canary, None);
}

#[test]
fn stale_stash_does_not_override_an_edit() {
    // v1alpha1 minReplicas 0 / maxReplicas 5 cannot be said in v1beta1 ...
    let a = v1alpha1::InferenceService::new(
        "chat",
        v1alpha1::InferenceServiceSpec {
            model_ref: "m".to_owned(),
            min_replicas: Some(0),
            max_replicas: Some(5),
            ..Default::default()
        },
    );
    let mut b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(b.spec.autoscaling, None);
    // ... then a v1beta1 client turns autoscaling on:
    b.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 2,
        max_replicas: 3,
        target_cpu_utilization_percent: None,
    });
    let down = conversion::to_v1alpha1(&b).unwrap();
    assert_eq!(
        down.spec.min_replicas,
        Some(2),
        "the edit wins over the stash"
    );
    assert_eq!(down.spec.max_replicas, Some(3));
    // without the edit the stash restores the original
    let b = conversion::to_v1beta1(&a).unwrap();
    assert_eq!(conversion::to_v1alpha1(&b).unwrap(), a);
}

#[test]
fn convert_rejects_what_it_cannot_convert() {
    let b = serde_json::to_value(valid_service()).unwrap();
    assert!(conversion::convert(b.clone(), "infergate.dev/v2").is_err());
    let mut other = b.clone();
    other["kind"] = "ClusterInferencePolicy".into();
    assert!(conversion::convert(other, V1ALPHA1).is_err());
    let mut bad = b.clone();
    bad["metadata"]["annotations"] = serde_json::json!({ CONVERSION_DATA_ANNOTATION: "{not json" });
    assert!(conversion::convert(bad, V1ALPHA1).is_err());
    // same version: untouched
    assert_eq!(conversion::convert(b.clone(), V1BETA1).unwrap(), b);
}

#[test]
fn convert_keeps_unknown_metadata_verbatim() {
    let mut b = serde_json::to_value(valid_service()).unwrap();
    b["metadata"]["managedFields"] =
        serde_json::json!([{"manager": "kubectl", "operation": "Apply"}]);
    b["metadata"]["resourceVersion"] = "42".into();
    b["spec"]["accelerator"] = serde_json::json!({"type": "amd"});
    let a = conversion::convert(b.clone(), V1ALPHA1).unwrap();
    let mut meta = a["metadata"].clone();
    assert!(meta["annotations"][CONVERSION_DATA_ANNOTATION].is_string());
    meta.as_object_mut().unwrap().remove("annotations");
    assert_eq!(meta, b["metadata"]);
    assert_eq!(conversion::convert(a, V1BETA1).unwrap(), b);
}

// ------------------------------------------------------------- policies

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

// ------------------------------------------------------- endpoint picker

/// A valid service routed through InferencePools, its picker `picker`.
fn pooled(picker: infergate::api::EndpointPickerSpec) -> InferenceService {
    let mut s = valid_service();
    s.spec.routing = Some(RoutingSpec {
        backend_kind: Some(infergate::api::BackendKind::InferencePool),
        endpoint_picker: Some(infergate::api::EndpointPickerSpec {
            image: Some("registry.example.com/epp:v1".to_owned()),
            ..picker
        }),
        ..Default::default()
    });
    s
}

fn max_replicas(n: i32) -> PolicyLimits {
    PolicyLimits {
        max_replicas: Some(n),
        ..Default::default()
    }
}

#[test]
fn picker_replicas_are_bounded_by_max_replicas_and_name_the_policy() {
    use infergate::api::{EndpointPickerMode, EndpointPickerSpec};
    let s = pooled(EndpointPickerSpec {
        replicas: Some(12),
        ..Default::default()
    });
    let p = PolicySnapshot {
        cluster: vec![cluster("platform", Enforcement::Deny, max_replicas(16))],
        namespaced: vec![namespaced("tight", max_replicas(8))],
    };
    assert_eq!(
        errors(&validate(&s, &p)),
        [
            "spec.routing.endpointPicker.replicas: Invalid value: 12: must be at most 8 (InferencePolicy \"team-a/tight\")"
        ]
    );
    // Warn: admitted with the same sentence as a warning.
    let p = PolicySnapshot {
        cluster: vec![cluster("platform", Enforcement::Warn, max_replicas(4))],
        namespaced: vec![],
    };
    let v = validate(&s, &p);
    assert!(v.allowed(), "{:?}", v.errors);
    assert_eq!(
        v.warnings,
        [
            "spec.routing.endpointPicker.replicas: Invalid value: 12: must be at most 4 (ClusterInferencePolicy \"platform\")"
        ]
    );
    // Unset, the picker is judged by its built-in single replica.
    let p = PolicySnapshot {
        cluster: vec![cluster("frozen", Enforcement::Deny, max_replicas(0))],
        namespaced: vec![],
    };
    let mut unset = pooled(EndpointPickerSpec::default());
    unset.spec.replicas = Some(0);
    assert_eq!(
        errors(&validate(&unset, &p)),
        [
            "spec.routing.endpointPicker.replicas: Invalid value: 1: must be at most 0 (ClusterInferencePolicy \"frozen\")"
        ]
    );
    // `mode: None` runs no picker: nothing to bound.
    let mut none = pooled(EndpointPickerSpec {
        mode: Some(EndpointPickerMode::None),
        replicas: Some(12),
        ..Default::default()
    });
    none.spec.replicas = Some(0);
    assert!(validate(&none, &p).allowed());
}

#[test]
fn picker_requests_stay_within_limits_and_parse() {
    use infergate::api::{CpuMemory, EndpointPickerSpec, PickerResources};
    let q = |s: &str| Some(Quantity(s.to_owned()));
    let with = |requests, limits| {
        pooled(EndpointPickerSpec {
            resources: Some(PickerResources { requests, limits }),
            ..Default::default()
        })
    };
    // A request above the limit beside it, or above the built-in memory limit.
    let s = with(
        Some(CpuMemory {
            cpu: q("2"),
            memory: q("2Gi"),
        }),
        Some(CpuMemory {
            cpu: q("1"),
            memory: None,
        }),
    );
    assert_eq!(
        errors(&validate(&s, &PolicySnapshot::default())),
        [
            "spec.routing.endpointPicker.resources.requests.cpu: Invalid value: \"2\": must be less than or equal to spec.routing.endpointPicker.resources.limits.cpu (1)",
            "spec.routing.endpointPicker.resources.requests.memory: Invalid value: \"2Gi\": must be less than or equal to spec.routing.endpointPicker.resources.limits.memory (1Gi)",
        ]
    );
    // Defaulting first (as admission does) gives such a request a limit
    // of its own size: admitted.
    let labels = BTreeMap::new();
    let only_request = with(
        Some(CpuMemory {
            cpu: None,
            memory: q("2Gi"),
        }),
        None,
    );
    let v = ctx_run(&PolicySnapshot::default(), &labels, &NoRoutes, |c| {
        let d = engine::default_service(&only_request, c).object;
        engine::validate_service(&d, None, c)
    });
    assert!(v.allowed(), "{:?}", v.errors);
    // A quantity that does not parse.
    let s = with(
        None,
        Some(CpuMemory {
            cpu: None,
            memory: q("lots"),
        }),
    );
    assert_eq!(
        errors(&validate(&s, &PolicySnapshot::default())),
        [
            "spec.routing.endpointPicker.resources.limits.memory: Invalid value: \"lots\": must be a Kubernetes quantity such as 500m, 4 or 16Gi"
        ]
    );
}

#[test]
fn policy_picker_defaults_respect_their_limits() {
    use infergate::api::{CpuMemory, EndpointPickerSpec, PickerResources};
    let picker = EndpointPickerSpec {
        image: Some("docker.io/someone/epp:1".to_owned()),
        replicas: Some(20),
        resources: Some(PickerResources {
            requests: Some(CpuMemory {
                cpu: Some(Quantity("one".to_owned())),
                memory: Some(Quantity("2Gi".to_owned())),
            }),
            limits: Some(CpuMemory {
                cpu: None,
                memory: Some(Quantity("1Gi".to_owned())),
            }),
        }),
        ..Default::default()
    };
    let defaults = PolicyDefaults {
        routing: Some(RoutingDefaults {
            endpoint_picker: Some(picker),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut p = ClusterInferencePolicy::new("p", Default::default());
    p.spec.defaults = Some(defaults.clone());
    p.spec.limits = Some(PolicyLimits {
        max_replicas: Some(16),
        allowed_image_registries: Some(vec!["registry.example.com/".to_owned()]),
        ..Default::default()
    });
    assert_eq!(
        errors(&engine::validate_cluster_policy(&p)),
        [
            "spec.defaults.routing.endpointPicker.replicas: Invalid value: 20: must be at most spec.limits.maxReplicas (16)",
            "spec.defaults.routing.endpointPicker.image: Invalid value: \"docker.io/someone/epp:1\": must start with one of spec.limits.allowedImageRegistries (\"registry.example.com/\")",
            "spec.defaults.routing.endpointPicker.resources.requests.cpu: Invalid value: \"one\": must be a Kubernetes quantity such as 500m, 4 or 16Gi",
            "spec.defaults.routing.endpointPicker.resources.requests.memory: Invalid value: \"2Gi\": must be less than or equal to spec.defaults.routing.endpointPicker.resources.limits.memory (1Gi)",
        ]
    );
    // A namespace policy's picker defaults within the cluster's limits.
    let snap = PolicySnapshot {
        cluster: vec![p],
        namespaced: vec![],
    };
    let mut ns = namespaced("defaults", PolicyLimits::default());
    ns.spec.defaults = Some(defaults);
    let labels = BTreeMap::new();
    let e = ctx_run(&snap, &labels, &NoRoutes, |c| {
        engine::validate_namespaced_policy(&ns, c)
    });
    let e = errors(&e);
    for want in [
        "spec.defaults.routing.endpointPicker.replicas: Invalid value: 20: must be at most 16 (ClusterInferencePolicy \"p\")",
        "spec.defaults.routing.endpointPicker.image: Invalid value: \"docker.io/someone/epp:1\": must start with one of \"registry.example.com/\" (ClusterInferencePolicy \"p\")",
    ] {
        assert!(e.iter().any(|x| x == want), "{want} missing from {e:#?}");
    }
}

/// The picker exists only in v1beta1: a v1alpha1 read carries it in the
/// conversion annotation, and converting back restores it exactly.
#[test]
fn the_picker_survives_a_round_trip_through_v1alpha1() {
    use infergate::api::{CpuMemory, EndpointPickerSpec, FailureMode, PickerResources};
    let mut b = pooled(EndpointPickerSpec {
        replicas: Some(2),
        failure_mode: Some(FailureMode::FailOpen),
        config: Some("plugins: []\n".to_owned()),
        resources: Some(PickerResources {
            requests: Some(CpuMemory {
                cpu: Some(Quantity("250m".to_owned())),
                memory: Some(Quantity("512Mi".to_owned())),
            }),
            limits: Some(CpuMemory {
                cpu: None,
                memory: Some(Quantity("2Gi".to_owned())),
            }),
        }),
        ..Default::default()
    });
    b.metadata.name = Some("chat".to_owned());
    let a = conversion::to_v1alpha1(&b).unwrap();
    let stash = &a.metadata.annotations.as_ref().unwrap()[CONVERSION_DATA_ANNOTATION];
    assert!(stash.contains("\"/spec/routing\""), "{stash}");
    assert!(stash.contains("512Mi"), "{stash}");
    assert_eq!(conversion::to_v1beta1(&a).unwrap(), b);
    // The same through the JSON entry point the webhook uses.
    let json = serde_json::to_value(&b).unwrap();
    let down = conversion::convert(json.clone(), V1ALPHA1).unwrap();
    assert!(down["spec"].get("routing").is_none());
    assert_eq!(conversion::convert(down, V1BETA1).unwrap(), json);
}

// ------------------------------------------------------------- services

#[test]
fn identical_canary_is_a_warning() {
    let mut s = valid_service();
    s.spec.canary = Some(CanarySpec {
        model: s.spec.model.clone(),
        weight: 10,
        ..Default::default()
    });
    let v = validate(&s, &PolicySnapshot::default());
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 1);
    assert!(v.warnings[0].contains("identical to the primary"));
    // a different engine image makes it a real canary
    if let Some(c) = s.spec.canary.as_mut() {
        c.engine_image = Some("registry.example.com/vllm:1.0".to_owned());
    }
    assert!(validate(&s, &PolicySnapshot::default()).warnings.is_empty());
}

#[test]
fn backend_is_immutable() {
    let old = valid_service();
    let mut new = old.clone();
    new.spec.backend = Some(Backend::RayService);
    new.spec.graph = Some(GraphSpec {
        url: "https://g.example.com/x".to_owned(),
        bearer_token_secret_ref: None,
    });
    let labels = BTreeMap::new();
    let v = ctx_run(&PolicySnapshot::default(), &labels, &NoRoutes, |c| {
        engine::validate_service(&new, Some(&old), c)
    });
    assert_eq!(
        errors(&v),
        vec![
            "spec.backend: Invalid value: \"RayService\": field is immutable (was \"Deployment\")"
        ]
    );
    // unset and explicit Deployment are the same backend
    let mut explicit = old.clone();
    explicit.spec.backend = Some(Backend::Deployment);
    let v = ctx_run(&PolicySnapshot::default(), &labels, &NoRoutes, |c| {
        engine::validate_service(&explicit, Some(&old), c)
    });
    assert!(v.allowed());
}

struct OneRoute;
impl RouteIndex for OneRoute {
    fn owner(
        &self,
        gw: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)> {
        (gw.name == "gw"
            && gw.namespace.as_deref() == Some("gateways")
            && path == "/team-a/chat"
            && exclude != ("team-b", "other"))
            .then(|| ("team-b".to_owned(), "other".to_owned()))
    }
}

#[test]
fn route_collision_names_the_other_service() {
    let mut s = valid_service();
    s.spec.routing = Some(RoutingSpec {
        gateway: Some(GatewayRef {
            name: "gw".to_owned(),
            namespace: Some("gateways".to_owned()),
        }),
        ..Default::default()
    });
    let labels = BTreeMap::new();
    let v = ctx_run(&PolicySnapshot::default(), &labels, &OneRoute, |c| {
        engine::validate_service(&s, None, c)
    });
    assert_eq!(
        errors(&v),
        vec![
            "spec.routing.pathTemplate: Duplicate value: \"/team-a/chat\": route path on Gateway gateways/gw is already used by InferenceService team-b/other"
        ]
    );
    assert_eq!(v.errors[0].reason.as_str(), "FieldValueDuplicate");
    // A RayService-backed service is routed like any other: the same check.
    let mut ray = s.clone();
    ray.spec.backend = Some(Backend::RayService);
    ray.spec.graph = Some(GraphSpec {
        url: "https://graphs.example.com/chat".to_owned(),
        bearer_token_secret_ref: None,
    });
    let v = ctx_run(&PolicySnapshot::default(), &labels, &OneRoute, |c| {
        engine::validate_service(&ray, None, c)
    });
    assert_eq!(
        errors(&v),
        vec![
            "spec.routing.pathTemplate: Duplicate value: \"/team-a/chat\": route path on Gateway gateways/gw is already used by InferenceService team-b/other"
        ]
    );
    // without a gateway there is nothing to collide on
    s.spec.routing = None;
    let v = ctx_run(&PolicySnapshot::default(), &labels, &OneRoute, |c| {
        engine::validate_service(&s, None, c)
    });
    assert!(v.allowed());
}

#[test]
fn all_violations_are_reported_at_once() {
    let mut s = valid_service();
    s.spec.replicas = Some(-1);
    s.spec.engine = Some(EngineSpec {
        image: None,
        port: Some(0),
        ..Default::default()
    });
    s.spec.resources = Some(ResourcesSpec {
        cpu: Some(Quantity("-1".to_owned())),
        ..Default::default()
    });
    s.spec.parallelism = Some(ParallelismSpec {
        tensor: Some(0),
        pipeline: None,
    });
    s.spec.health_check = Some(HealthCheckSpec {
        interval: Some("0s".to_owned()),
        ..Default::default()
    });
    s.spec.engine.as_mut().unwrap().env = vec![
        EnvVar {
            name: "A".to_owned(),
            value: None,
            value_from: None,
        },
        EnvVar {
            name: "A".to_owned(),
            value: None,
            value_from: None,
        },
    ];
    let v = validate(&s, &PolicySnapshot::default());
    let fields: Vec<&str> = v.errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.engine.image",
            "spec.engine.port",
            "spec.engine.env[1].name",
            "spec.replicas",
            "spec.resources.cpu",
            "spec.parallelism.tensor",
            "spec.healthCheck.interval",
        ]
    );
    assert!(
        v.message()
            .starts_with("[spec.engine.image: Required value: ")
    );
    assert_eq!(v.errors[0].reason.as_str(), "FieldValueRequired");
    assert!(
        v.errors[4]
            .to_string()
            .ends_with("must be greater than or equal to 0")
    );
}

#[test]
fn gpu_helpers() {
    let mut s = valid_service();
    assert_eq!(engine::gpus_per_replica(&s), 0);
    s.spec.parallelism = Some(ParallelismSpec {
        tensor: Some(2),
        pipeline: Some(3),
    });
    assert_eq!(engine::gpus_per_replica(&s), 0, "no accelerator, no GPUs");
    s.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::IntelGaudi),
        class: None,
    });
    assert_eq!(engine::gpus_per_replica(&s), 6);
    s.spec.replicas = Some(3);
    s.spec.canary = Some(CanarySpec {
        model: ModelSpec {
            r#ref: "c".to_owned(),
            image: None,
        },
        weight: 10,
        ..Default::default()
    });
    assert_eq!(engine::canary_replicas(&s), 1, "ceil(3*10/100) = 1");
    s.spec.autoscaling = Some(AutoscalingSpec {
        min_replicas: 15,
        max_replicas: 20,
        target_cpu_utilization_percent: None,
    });
    assert_eq!(
        engine::canary_replicas(&s),
        2,
        "base is minReplicas: ceil(1.5)"
    );
    if let Some(c) = s.spec.canary.as_mut() {
        c.weight = 0;
    }
    assert_eq!(engine::canary_replicas(&s), 0);
    if let Some(c) = s.spec.canary.as_mut() {
        c.replicas = Some(4);
    }
    assert_eq!(engine::canary_replicas(&s), 4);
    assert_eq!(engine::primary_name(&s), "chat");
    assert_eq!(engine::canary_name(&s), "chat-canary");
}

#[test]
fn v1beta1_module_is_the_storage_shape() {
    // The status written by the reconciler round-trips through JSON unchanged.
    let mut s = valid_service();
    s.status = Some(InferenceServiceStatus {
        route_path: Some("/team-a/chat".to_owned()),
        ..Default::default()
    });
    let j = serde_json::to_value(&s).unwrap();
    let back: v1beta1::InferenceService = serde_json::from_value(j).unwrap();
    assert_eq!(back, s);
}
