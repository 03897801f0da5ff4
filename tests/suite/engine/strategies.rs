//! The generators of the engine's properties: valid InferenceServices of
//! v1beta1 (spec and status, every optional field set or not) and of
//! v1alpha1, and policy snapshots whose policies carry defaults.

use infergate::api::policy::{
    ClusterInferencePolicySpec, EngineDefaults, InferencePolicySpec, PolicyDefaults,
    ResourceDefaults, RoutingDefaults,
};
use infergate::api::rollout::{
    CanaryOnFullPool, RolloutCanarySpec, RolloutOnFullPool, RolloutSpec, RolloutStrategy,
};
use infergate::api::v1beta1::{
    AcceleratorSpec, AdapterSpec, AutoscalingSpec, Backend, CanarySpec, CanaryStatus, EngineSpec,
    EnvFromSource, EnvVar, GraphSpec, GraphStatus, InferenceService, InferenceServiceSpec,
    InferenceServiceStatus, LocalObjectReference, ModelSpec, ParallelismSpec, PlacementSpec,
    RouteMatch, RoutingSpec, SecretKeyRef, SpreadAcross, Toleration,
};
use infergate::api::{
    AcceleratorType, ClusterInferencePolicy, GatewayRef, HealthCheckSpec, InferencePolicy,
    ResourcesSpec, v1alpha1,
};
use infergate::engine::PolicySnapshot;
use k8s_openapi::api::core::v1::{EnvVarSource, SecretEnvSource, SecretKeySelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::ObjectMeta;
use proptest::prelude::*;

fn rollout_on_full_pool() -> impl Strategy<Value = RolloutOnFullPool> {
    prop_oneof![
        Just(RolloutOnFullPool::Replace),
        Just(RolloutOnFullPool::Wait)
    ]
}

fn canary_on_full_pool() -> impl Strategy<Value = CanaryOnFullPool> {
    prop_oneof![Just(CanaryOnFullPool::Wait), Just(CanaryOnFullPool::Borrow)]
}

/// A rollout's full-pool fields: `onFullPool`, `maxUnavailable` and the
/// track's `canary` block (empty or not), each set or not.
type FullPool = (
    Option<RolloutOnFullPool>,
    Option<i32>,
    Option<Option<CanaryOnFullPool>>,
);

fn full_pool() -> impl Strategy<Value = FullPool> {
    (
        opt(rollout_on_full_pool()),
        opt(1i32..4),
        opt(opt(canary_on_full_pool())),
    )
}

/// `plan` (or none) with the full-pool fields; `None` when nothing is set.
fn with_full_pool(plan: Option<RolloutSpec>, (on, max, track): FullPool) -> Option<RolloutSpec> {
    if plan.is_none() && on.is_none() && max.is_none() && track.is_none() {
        return None;
    }
    Some(RolloutSpec {
        on_full_pool: on,
        max_unavailable: max,
        canary: track.map(|c| RolloutCanarySpec { on_full_pool: c }),
        ..plan.unwrap_or_default()
    })
}

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
    let adapter =
        (name(), "[a-z]{1,6}/[a-z]{1,6}").prop_map(|(name, source)| AdapterSpec { name, source });
    let model = (
        name(),
        opt(image()),
        opt(name()),
        prop::collection::vec(adapter, 0..3),
        opt(1i32..=64),
    )
        .prop_map(
            |(r, image, served_name, adapters, max_adapter_rank)| ModelSpec {
                r#ref: r,
                image,
                served_name,
                adapters,
                max_adapter_rank,
            },
        );
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
        (name(), opt(image())).prop_map(|(r, image)| ModelSpec {
            r#ref: r,
            image,
            ..ModelSpec::default()
        }),
        opt(image()),
        0i32..=100,
        opt(0i32..4),
        opt(canary_on_full_pool()),
    )
        .prop_map(
            |(model, engine_image, weight, replicas, on_full_pool)| CanarySpec {
                model,
                engine_image,
                weight,
                replicas,
                on_full_pool,
            },
        );
    let routing = (
        opt(prop_oneof![
            Just("/{.metadata.namespace}/{.metadata.name}".to_owned()),
            Just("/models/{.spec.model.ref}".to_owned()),
        ]),
        opt(gateway_duration()),
        opt((name(), opt(name())).prop_map(|(name, namespace)| GatewayRef { name, namespace })),
        opt(backend_kind()),
        opt(endpoint_picker()),
        (
            opt(prop_oneof![
                Just(RouteMatch::Path),
                Just(RouteMatch::ModelName),
                Just(RouteMatch::Both)
            ]),
            opt(Just("X-Model".to_owned())),
            prop::collection::vec("[a-z]{1,6}\\.example\\.com", 0..2),
        ),
    )
        .prop_map(
            |(
                path_template,
                request_timeout,
                gateway,
                backend_kind,
                endpoint_picker,
                (r#match, model_name_header, hostnames),
            )| {
                RoutingSpec {
                    path_template,
                    request_timeout,
                    gateway,
                    backend_kind,
                    endpoint_picker,
                    r#match,
                    model_name_header,
                    hostnames,
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
        full_pool(),
    )
        .prop_map(
            |(
                (model, engine, (backend, graph), replicas, autoscaling),
                (resources, accelerator, parallelism, canary, health_check, routing, metrics),
                (placement, service_account_name, image_pull_secrets),
                pool,
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
                rollout: with_full_pool(
                    replicas.map(|_| RolloutSpec {
                        strategy: Some(RolloutStrategy::Canary),
                        steps: vec![10, 50],
                        interval: Some("1m".into()),
                        ..Default::default()
                    }),
                    pool,
                ),
            },
        )
}

pub(super) fn beta_service() -> impl Strategy<Value = InferenceService> {
    (metadata(), beta_spec(), opt(beta_status())).prop_map(|(metadata, spec, status)| {
        InferenceService {
            metadata,
            spec,
            status,
        }
    })
}

pub(super) fn alpha_service() -> impl Strategy<Value = v1alpha1::InferenceService> {
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
                    ..RoutingDefaults::default()
                },
            )),
        opt(1i32..100),
        opt(metrics()),
        (
            opt(Just(RolloutSpec {
                strategy: Some(RolloutStrategy::Canary),
                steps: vec![20],
                ..RolloutSpec::default()
            })),
            opt(rollout_on_full_pool()),
            opt(1i32..4),
            opt(canary_on_full_pool()),
        ),
    )
        .prop_map(
            |(
                engine,
                replicas,
                resources,
                health_check,
                routing,
                target,
                metrics,
                (plan, on_full_pool, max_unavailable, canary),
            )| {
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
                    rollout: with_full_pool(plan, (on_full_pool, max_unavailable, None)),
                    canary: canary.map(|c| infergate::api::policy::CanaryDefaults {
                        on_full_pool: Some(c),
                    }),
                }
            },
        )
}

pub(super) fn snapshot() -> impl Strategy<Value = PolicySnapshot> {
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
