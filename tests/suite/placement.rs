//! Placement (the AcceleratorClass section of `docs/gpu-node-pools.md`) without a cluster: what defaulting fills
//! in from an AcceleratorClass and the policies, what validation denies,
//! and what the engine pods carry (both tracks of a Deployment-backed
//! service, the Ray head and workers, never the endpoint picker).

use std::collections::BTreeMap;

use infergate::api::v1beta1::InferenceService;
use infergate::api::{AcceleratorClassSpec, ClusterInferencePolicy, InferencePolicy};
use infergate::engine::{
    self, AcceleratorClasses, Context, NoRoutes, PolicySnapshot, ServerDefaults, Verdict,
};
use infergate::reconcile::children::{
    Track, deployment, endpoint_picker, pod::SHM_MOUNT_PATH, rayservice,
};
use k8s_openapi::api::core::v1::PodSpec;
use serde_json::{Value, json};

fn h100() -> AcceleratorClassSpec {
    serde_json::from_value(json!({
        "vendor": "nvidia",
        "memoryPerDevice": "80Gi",
        "devicesPerNode": 8,
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}]}
        ]}},
        "runtimeClassName": "nvidia",
        "costPerDeviceHour": "4.10"
    }))
    .expect("class")
}

fn mig() -> AcceleratorClassSpec {
    serde_json::from_value(json!({
        "vendor": "nvidia", "resourceName": "nvidia.com/mig-3g.40gb",
        "memoryPerDevice": "40Gi", "devicesPerNode": 2
    }))
    .expect("class")
}

fn classes() -> AcceleratorClasses {
    AcceleratorClasses::from([("h100-80gb".to_owned(), h100()), ("mig".to_owned(), mig())])
}

fn service(spec: Value) -> InferenceService {
    let mut spec = spec;
    spec["model"] = json!({"ref": "llama3-70b"});
    spec["engine"]["image"] = json!("registry.example.com/vllm:0.9");
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1"},
        "spec": spec,
    }))
    .expect("service")
}

fn with<R>(policies: &PolicySnapshot, f: impl FnOnce(&Context) -> R) -> R {
    with_classes(policies, &classes(), f)
}

fn with_classes<R>(
    policies: &PolicySnapshot,
    classes: &AcceleratorClasses,
    f: impl FnOnce(&Context) -> R,
) -> R {
    let labels = BTreeMap::new();
    f(&Context {
        namespace: "team-a",
        namespace_labels: &labels,
        policies,
        classes,
        profiles: &infergate::engine::ModelProfiles::default(),
        server: &ServerDefaults::default(),
        routes: &NoRoutes,
    })
}

/// Default, then validate, as admission does.
fn admit(svc: &InferenceService, policies: &PolicySnapshot) -> (InferenceService, Verdict) {
    admit_among(svc, policies, &classes())
}

/// [`admit`] with the AcceleratorClasses `classes` in the watch cache.
fn admit_among(
    svc: &InferenceService,
    policies: &PolicySnapshot,
    classes: &AcceleratorClasses,
) -> (InferenceService, Verdict) {
    with_classes(policies, classes, |ctx| {
        let d = engine::default_service(svc, ctx).object;
        let v = engine::validate_service(&d, None, ctx);
        (d, v)
    })
}

fn errors(v: &Verdict) -> Vec<String> {
    v.errors.iter().map(ToString::to_string).collect()
}

fn cluster_policy(spec: Value) -> ClusterInferencePolicy {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ClusterInferencePolicy",
        "metadata": {"name": "platform"}, "spec": spec
    }))
    .expect("policy")
}

fn namespace_policy(spec: Value) -> InferencePolicy {
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "gpus", "namespace": "team-a"}, "spec": spec
    }))
    .expect("policy")
}

#[test]
fn a_class_gives_the_type_and_a_multi_gpu_replica_gets_shm() {
    let svc = service(json!({
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 2},
        "replicas": 2,
    }));
    let (d, v) = admit(&svc, &PolicySnapshot::default());
    assert!(v.allowed(), "{:?}", errors(&v));
    let spec = serde_json::to_value(&d.spec).expect("json");
    assert_eq!(
        spec["accelerator"],
        json!({"type": "nvidia", "class": "h100-80gb"})
    );
    assert_eq!(spec["engine"]["shmSize"], json!("2Gi"));
    assert_eq!(spec["placement"], json!({"spreadAcross": "node"}));
    let provenance: BTreeMap<String, String> = serde_json::from_str(
        &d.metadata.annotations.as_ref().expect("annotations")["infergate.dev/defaulted-from"],
    )
    .expect("provenance");
    assert_eq!(
        provenance["spec.accelerator.type"],
        "AcceleratorClass/h100-80gb"
    );
    assert_eq!(provenance["spec.engine.shmSize"], "built-in");

    // One GPU, one replica: no /dev/shm, no spread.
    let single = service(json!({"accelerator": {"class": "h100-80gb"}}));
    let (d, _) = admit(&single, &PolicySnapshot::default());
    let spec = serde_json::to_value(&d.spec).expect("json");
    assert_eq!(spec["engine"].get("shmSize"), None);
    assert_eq!(spec.get("placement"), None);

    // Defaulting is idempotent with the new fields too.
    let (again, _) = admit(&d, &PolicySnapshot::default());
    assert_eq!(again, d);
}

#[test]
fn policies_default_the_class_placement_and_shm_and_limit_the_classes() {
    let policies = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "defaults": {
                "accelerator": {"class": "h100-80gb"},
                "placement": {"priorityClassName": "inference-high", "spreadAcross": "zone",
                              "tolerations": [{"key": "dedicated", "operator": "Exists"}]},
                "engine": {"shmSize": "8Gi"}
            },
            "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}
        }))],
        namespaced: vec![],
    };
    let (d, v) = admit(&service(json!({})), &policies);
    assert!(v.allowed(), "{:?}", errors(&v));
    let spec = serde_json::to_value(&d.spec).expect("json");
    assert_eq!(spec["accelerator"]["class"], json!("h100-80gb"));
    assert_eq!(spec["accelerator"]["type"], json!("nvidia"));
    assert_eq!(spec["engine"]["shmSize"], json!("8Gi"));
    assert_eq!(
        spec["placement"]["priorityClassName"],
        json!("inference-high")
    );
    assert_eq!(spec["placement"]["spreadAcross"], json!("zone"));

    let (_, v) = admit(
        &service(json!({"accelerator": {"class": "mig"}})),
        &policies,
    );
    assert_eq!(
        errors(&v),
        [
            "spec.accelerator.class: Unsupported value: \"mig\": supported values: \"h100-80gb\" (ClusterInferencePolicy \"platform\")"
        ]
    );
    // A namespace policy's Warn limit warns instead.
    let warn = PolicySnapshot {
        cluster: vec![],
        namespaced: vec![namespace_policy(json!({
            "enforcement": "Warn",
            "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}
        }))],
    };
    let (_, v) = admit(&service(json!({"accelerator": {"class": "mig"}})), &warn);
    assert!(v.allowed());
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(v.warnings[0].contains("spec.accelerator.class"));
}

#[test]
fn admission_denies_what_the_class_contradicts() {
    let cases = [
        (
            json!({"accelerator": {"class": "h100"}}),
            "spec.accelerator.class: Not found: \"h100\"",
        ),
        (
            json!({"accelerator": {"class": "h100-80gb", "type": "amd"}}),
            "spec.accelerator.type: Invalid value: \"amd\": must be \"nvidia\", the vendor of AcceleratorClass \"h100-80gb\"",
        ),
        (
            json!({"accelerator": {"class": "h100-80gb"}, "parallelism": {"tensor": 4, "pipeline": 4}}),
            "spec.parallelism: Invalid value: 16: tensor 4 x pipeline 4 devices per replica must be at most the 8 devices per node of AcceleratorClass \"h100-80gb\"",
        ),
        (
            json!({"accelerator": {"class": "h100-80gb"},
                   "placement": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4", "pool": "a"}}}),
            "spec.placement.nodeSelector[cloud.google.com/gke-accelerator]: Invalid value: \"nvidia-l4\": AcceleratorClass \"h100-80gb\" selects cloud.google.com/gke-accelerator=\"nvidia-h100-80gb\"",
        ),
        (
            json!({"engine": {"shmSize": "0"}}),
            "spec.engine.shmSize: Invalid value: \"0\": must be greater than 0",
        ),
        (
            json!({"engine": {"env": [{"name": "HF_TOKEN", "value": "x",
                    "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]}}),
            "spec.engine.env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
        ),
    ];
    for (spec, want) in cases {
        let (_, v) = admit(&service(spec.clone()), &PolicySnapshot::default());
        assert_eq!(errors(&v), [want], "{spec}");
        assert!(!v.allowed());
    }
    // Within the node it is fine, and the class's own key may be repeated.
    let (_, v) = admit(
        &service(json!({"accelerator": {"class": "h100-80gb"},
                        "parallelism": {"tensor": 4, "pipeline": 2},
                        "placement": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}})),
        &PolicySnapshot::default(),
    );
    assert!(v.allowed(), "{:?}", errors(&v));
}

#[test]
fn an_accelerator_class_is_judged_like_its_crd_does() {
    let bad: AcceleratorClassSpec = serde_json::from_value(json!({
        "vendor": "none", "memoryPerDevice": "0", "devicesPerNode": 0,
        "costPerDeviceHour": "4,10", "resourceName": "nvidia gpu"
    }))
    .expect("decodes");
    let v = engine::validate_accelerator_class(&bad);
    assert_eq!(
        errors(&v),
        [
            "spec.vendor: Unsupported value: \"none\": supported values: \"nvidia\", \"amd\", \"intel-gaudi\", \"google-tpu\"",
            "spec.devicesPerNode: Invalid value: 0: must be greater than or equal to 1",
            "spec.memoryPerDevice: Invalid value: \"0\": must be greater than 0",
            "spec.costPerDeviceHour: Invalid value: \"4,10\": must be a decimal such as 4.10",
            "spec.resourceName: Invalid value: \"nvidia gpu\": must be a resource name such as nvidia.com/gpu",
        ]
    );
    assert!(engine::validate_accelerator_class(&h100()).allowed());
}

fn pod(d: &k8s_openapi::api::apps::v1::Deployment) -> Value {
    serde_json::to_value(
        d.spec
            .as_ref()
            .expect("spec")
            .template
            .spec
            .as_ref()
            .expect("pod"),
    )
    .expect("json")
}

fn full_service() -> InferenceService {
    let svc = service(json!({
        "accelerator": {"class": "h100-80gb"},
        "parallelism": {"tensor": 2},
        "replicas": 3,
        "canary": {"model": {"ref": "llama3-70b-v2"}, "weight": 10},
        "placement": {"nodeSelector": {"pool": "inference"},
                      "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}],
                      "priorityClassName": "inference-high"},
        "serviceAccountName": "chat-engine",
        "imagePullSecrets": [{"name": "registry-creds"}],
        "engine": {
            "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
            "envFrom": [{"configMapRef": {"name": "engine-config"}}]
        }
    }));
    admit(&svc, &PolicySnapshot::default()).0
}

#[test]
fn both_tracks_carry_the_class_then_the_placement() {
    let svc = full_service();
    let class = h100();
    for track in [Track::Primary, Track::Canary] {
        let p = pod(&deployment(&svc, track, Some(&class)).expect("builds"));
        assert_eq!(
            p["nodeSelector"],
            json!({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "pool": "inference"})
        );
        assert_eq!(
            p["tolerations"],
            json!([
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
            ])
        );
        assert_eq!(
            p["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchExpressions"][0]["key"],
            json!("cloud.google.com/gke-spot")
        );
        assert_eq!(p["runtimeClassName"], json!("nvidia"));
        assert_eq!(p["priorityClassName"], json!("inference-high"));
        assert_eq!(p["serviceAccountName"], json!("chat-engine"));
        assert_eq!(p["imagePullSecrets"], json!([{"name": "registry-creds"}]));
        let spread = &p["topologySpreadConstraints"][0];
        assert_eq!(spread["topologyKey"], json!("kubernetes.io/hostname"));
        assert_eq!(spread["whenUnsatisfiable"], json!("ScheduleAnyway"));
        assert_eq!(
            spread["labelSelector"]["matchLabels"]["infergate.dev/track"],
            json!(if track == Track::Primary {
                "primary"
            } else {
                "canary"
            })
        );
        assert_eq!(
            p["volumes"],
            json!([{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}])
        );
        let engine = &p["containers"][0];
        assert_eq!(
            engine["volumeMounts"],
            json!([{"name": "dshm", "mountPath": SHM_MOUNT_PATH}])
        );
        assert_eq!(
            engine["env"],
            json!([{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}])
        );
        assert_eq!(
            engine["envFrom"],
            json!([{"configMapRef": {"name": "engine-config"}}])
        );
        assert_eq!(engine["resources"]["limits"]["nvidia.com/gpu"], json!("2"));
    }
}

#[test]
fn a_class_resource_name_is_what_the_pods_request() {
    let svc = admit(
        &service(json!({"accelerator": {"class": "mig"}, "parallelism": {"tensor": 2}})),
        &PolicySnapshot::default(),
    )
    .0;
    let p = pod(&deployment(&svc, Track::Primary, Some(&mig())).expect("builds"));
    let limits = &p["containers"][0]["resources"]["limits"];
    assert_eq!(limits["nvidia.com/mig-3g.40gb"], json!("2"));
    assert_eq!(limits.get("nvidia.com/gpu"), None);
}

#[test]
fn the_ray_head_gets_the_placement_only_and_the_picker_nothing() {
    let mut svc = full_service();
    svc.spec.backend = Some(infergate::api::v1beta1::Backend::RayService);
    // The graph's generator asks for a whole node's 8 GPUs.
    svc.spec.parallelism = Some(infergate::api::v1beta1::ParallelismSpec {
        tensor: Some(8),
        pipeline: Some(1),
    });
    let graph = infergate::graph::decode(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/graph/rag.pb"
        ))
        .expect("graph fixture"),
    )
    .expect("graph");
    let rs = rayservice::desired_rayservice(&svc, &graph, "/team-a/chat", Some(&h100()))
        .expect("builds");
    let cluster = serde_json::to_value(&rs.spec.ray_cluster_config).expect("json");
    let head = &cluster["headGroupSpec"]["template"]["spec"];
    let worker = &cluster["workerGroupSpecs"][0]["template"]["spec"];
    // The head: placement, identity, env and /dev/shm; no GPU pool constraints.
    assert_eq!(head["nodeSelector"], json!({"pool": "inference"}));
    assert_eq!(head["tolerations"].as_array().map(Vec::len), Some(1));
    assert_eq!(head.get("runtimeClassName"), None);
    assert_eq!(head.get("affinity"), None);
    assert_eq!(head["serviceAccountName"], json!("chat-engine"));
    assert_eq!(head["volumes"][0]["name"], json!("dshm"));
    assert_eq!(
        head["containers"][0]["env"][1]["valueFrom"]["secretKeyRef"]["name"],
        json!("hf")
    );
    // The workers: the class, then the placement.
    assert_eq!(
        worker["nodeSelector"]["cloud.google.com/gke-accelerator"],
        json!("nvidia-h100-80gb")
    );
    assert_eq!(worker["runtimeClassName"], json!("nvidia"));
    assert_eq!(worker["tolerations"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        worker["imagePullSecrets"],
        json!([{"name": "registry-creds"}])
    );

    // The endpoint picker's pods get none of it.
    let mut pooled = full_service();
    pooled.spec.routing = Some(
        serde_json::from_value(json!({
            "backendKind": "InferencePool",
            "endpointPicker": {"mode": "Owned", "image": "registry.example.com/epp:v1", "replicas": 1}
        }))
        .expect("routing"),
    );
    let picker = endpoint_picker::endpoint_picker(&pooled, Track::Primary)
        .expect("builds")
        .deployment;
    let p: PodSpec = picker.spec.expect("spec").template.spec.expect("pod");
    assert_eq!(p.node_selector, None);
    assert_eq!(p.tolerations, None);
    assert_eq!(p.runtime_class_name, None);
    assert_ne!(p.service_account_name.as_deref(), Some("chat-engine"));
    assert_eq!(p.image_pull_secrets, None);
}

#[test]
fn policies_keep_their_class_defaults_within_the_class_limits() {
    let own = cluster_policy(json!({
        "defaults": {"accelerator": {"class": "mig"}, "engine": {"shmSize": "lots"}},
        "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}
    }));
    assert_eq!(
        errors(&engine::validate_cluster_policy(&own)),
        [
            "spec.defaults.accelerator.class: Invalid value: \"mig\": must be one of spec.limits.allowedAcceleratorClasses (\"h100-80gb\")",
            "spec.defaults.engine.shmSize: Invalid value: \"lots\": must be a Kubernetes quantity such as 500m, 4 or 16Gi",
        ]
    );
    // A namespace policy may narrow the cluster's classes, not widen them,
    // and may not default to one the cluster does not allow.
    let policies = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "limits": {"allowedAcceleratorClasses": ["h100-80gb", "mig"]}
        }))],
        namespaced: vec![],
    };
    let wider = namespace_policy(json!({
        "defaults": {"accelerator": {"class": "l4-24gb"}},
        "limits": {"allowedAcceleratorClasses": ["h100-80gb", "l4-24gb"]}
    }));
    let v = with(&policies, |ctx| {
        engine::validate_namespaced_policy(&wider, ctx)
    });
    assert_eq!(
        errors(&v),
        [
            "spec.limits.allowedAcceleratorClasses[1]: Invalid value: \"l4-24gb\": may not loosen the allowed accelerator classes \"h100-80gb\", \"mig\" of ClusterInferencePolicy \"platform\"",
            "spec.defaults.accelerator.class: Invalid value: \"l4-24gb\": must be one of \"h100-80gb\", \"mig\" (ClusterInferencePolicy \"platform\")",
        ]
    );
    let narrower = namespace_policy(json!({
        "defaults": {"accelerator": {"class": "mig"}},
        "limits": {"allowedAcceleratorClasses": ["mig"]}
    }));
    let v = with(&policies, |ctx| {
        engine::validate_namespaced_policy(&narrower, ctx)
    });
    assert!(v.allowed(), "{:?}", errors(&v));
}

/// Scaling past one replica changes no pod template: defaulting writes
/// `spreadAcross: node` only then, and the pods carry the node spread
/// either way (a changed template would roll every pod, and for a
/// RayService build a new Ray cluster). `none` removes it, `zone` moves it.
#[test]
fn scaling_past_one_replica_changes_no_pod_template() {
    let template = |replicas: i32, spread: Option<&str>| {
        let mut spec = json!({"accelerator": {"class": "h100-80gb"}, "replicas": replicas});
        if let Some(s) = spread {
            spec["placement"] = json!({"spreadAcross": s});
        }
        let svc = admit(&service(spec), &PolicySnapshot::default()).0;
        pod(&deployment(&svc, Track::Primary, Some(&h100())).expect("builds"))
    };
    let one = template(1, None);
    let two = template(2, None);
    assert_eq!(one, two);
    assert_eq!(
        one["topologySpreadConstraints"][0]["topologyKey"],
        json!("kubernetes.io/hostname")
    );
    assert_eq!(
        template(2, Some("none")).get("topologySpreadConstraints"),
        None
    );
    assert_eq!(
        template(2, Some("zone"))["topologySpreadConstraints"][0]["topologyKey"],
        json!("topology.kubernetes.io/zone")
    );
}

fn only(cluster: Option<Value>, namespaced: Option<Value>) -> PolicySnapshot {
    PolicySnapshot {
        cluster: cluster.map(cluster_policy).into_iter().collect(),
        namespaced: namespaced.map(namespace_policy).into_iter().collect(),
    }
}

/// Where a policy sets `allowedAcceleratorClasses` or
/// `maxCostPerHourPerNamespace`, a service with GPUs has a class (its own
/// or a policy's default); elsewhere a class-less GPU service is admitted
/// as before, and a service without GPUs needs none anywhere.
#[test]
fn a_gpu_service_has_a_class_where_a_policy_limits_classes_or_cost() {
    let gpus = service(json!({"accelerator": {"type": "nvidia"}, "parallelism": {"tensor": 2}}));
    let cpu = service(json!({}));
    let required = |why: &str, who: &str| {
        format!(
            "spec.accelerator.class: Required value: a service with GPUs must name an AcceleratorClass ({why} of {who})"
        )
    };

    let classes_limited = only(
        Some(json!({"limits": {"allowedAcceleratorClasses": ["h100-80gb"]}})),
        None,
    );
    let (_, v) = admit(&gpus, &classes_limited);
    assert_eq!(
        errors(&v),
        [required(
            "limits.allowedAcceleratorClasses",
            "ClusterInferencePolicy \"platform\""
        )]
    );
    let cost_limited = only(
        None,
        Some(json!({"limits": {"maxCostPerHourPerNamespace": "40.00"}})),
    );
    let (_, v) = admit(&gpus, &cost_limited);
    assert_eq!(
        errors(&v),
        [required(
            "limits.maxCostPerHourPerNamespace",
            "InferencePolicy \"team-a/gpus\""
        )]
    );
    // Named, the class is judged as before; without GPUs none is needed.
    for policies in [&classes_limited, &cost_limited] {
        let named = service(json!({"accelerator": {"class": "h100-80gb"}}));
        let (_, v) = admit(&named, policies);
        assert!(v.allowed(), "{:?}", errors(&v));
        let (_, v) = admit(&cpu, policies);
        assert!(v.allowed(), "{:?}", errors(&v));
    }
    // A policy's default class is a class.
    let defaulted = only(
        Some(json!({
            "defaults": {"accelerator": {"class": "h100-80gb"}},
            "limits": {"allowedAcceleratorClasses": ["h100-80gb"], "maxCostPerHourPerNamespace": "40.00"}
        })),
        None,
    );
    let (d, v) = admit(&service(json!({"parallelism": {"tensor": 2}})), &defaulted);
    assert!(v.allowed(), "{:?}", errors(&v));
    assert_eq!(
        d.spec.accelerator.and_then(|a| a.class).as_deref(),
        Some("h100-80gb")
    );
    // A Warn policy warns.
    let warn = only(
        None,
        Some(
            json!({"enforcement": "Warn", "limits": {"allowedAcceleratorClasses": ["h100-80gb"]}}),
        ),
    );
    let (_, v) = admit(&gpus, &warn);
    assert!(v.allowed(), "{:?}", errors(&v));
    assert_eq!(
        v.warnings,
        [required(
            "limits.allowedAcceleratorClasses",
            "InferencePolicy \"team-a/gpus\""
        )]
    );
    // No such policy: a class-less GPU service is admitted as it always was,
    // whatever else the policies limit.
    for policies in [
        PolicySnapshot::default(),
        only(
            Some(
                json!({"limits": {"maxGPUsPerReplica": 8, "maxGPUsPerNamespace": 64, "allowedAccelerators": ["nvidia"]}}),
            ),
            None,
        ),
    ] {
        let (d, v) = admit(&gpus, &policies);
        assert!(v.allowed(), "{:?}", errors(&v));
        assert_eq!(engine::gpus_per_replica(&d), 2);
        assert_eq!(d.spec.accelerator.and_then(|a| a.class), None);
    }
}

/// The pools of a cluster: two H100 pools (the shared one and a reserved
/// one of its own taint), an L4 pool tolerating the same GPU taint as the
/// shared H100s, and a MIG slice class with no node selector.
fn pools() -> AcceleratorClasses {
    let class = |v: Value| -> AcceleratorClassSpec { serde_json::from_value(v).expect("class") };
    AcceleratorClasses::from([
        ("h100-80gb".to_owned(), h100()),
        (
            "h100-reserved".to_owned(),
            class(json!({
                "vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": 8,
                "nodeSelector": {"gpu.example.com/pool": "reserved", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                "tolerations": [{"key": "gpu.example.com/reserved", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
            })),
        ),
        (
            "l4-24gb".to_owned(),
            class(json!({
                "vendor": "nvidia", "memoryPerDevice": "24Gi", "devicesPerNode": 1,
                "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
            })),
        ),
        ("mig".to_owned(), mig()),
    ])
}

/// A tenant allowed the MIG and L4 classes cannot put its pods on the
/// H100 pools through `placement`: each nodeSelector entry and toleration
/// equal to a disallowed class's own (and to no allowed class's) is denied,
/// naming the class and the entry.
#[test]
fn placement_cannot_reach_the_pool_of_a_class_the_policy_does_not_allow() {
    let policies = only(
        None,
        Some(json!({"limits": {"allowedAcceleratorClasses": ["mig", "l4-24gb"]}})),
    );
    let svc = service(json!({
        "accelerator": {"class": "mig"},
        "placement": {
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "pool": "inference"},
            "tolerations": [
                // The L4 pool's too: allowed.
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                // The reserved pool's, with the operator left to its default
                // and a time limit: the same taints.
                {"key": "gpu.example.com/reserved", "value": "true", "effect": "NoSchedule", "tolerationSeconds": 60},
                {"key": "dedicated", "operator": "Exists"}
            ]
        }
    }));
    let (_, v) = admit_among(&svc, &policies, &pools());
    let who = "which InferencePolicy \"team-a/gpus\" does not allow (limits.allowedAcceleratorClasses: \"mig\", \"l4-24gb\")";
    assert_eq!(
        errors(&v),
        [
            format!(
                "spec.placement.nodeSelector[cloud.google.com/gke-accelerator]: Forbidden: cloud.google.com/gke-accelerator=\"nvidia-h100-80gb\" selects the nodes of AcceleratorClasses \"h100-80gb\", \"h100-reserved\", {who}"
            ),
            format!(
                "spec.placement.tolerations[1]: Forbidden: tolerates the taint of the nodes of AcceleratorClass \"h100-reserved\", {who}"
            ),
        ]
    );

    // With the H100s allowed, the same placement is the tenant's choice.
    let wider = only(
        None,
        Some(
            json!({"limits": {"allowedAcceleratorClasses": ["mig", "l4-24gb", "h100-80gb", "h100-reserved"]}}),
        ),
    );
    let (_, v) = admit_among(&svc, &wider, &pools());
    assert!(v.allowed(), "{:?}", errors(&v));
    // Without a policy that limits classes, placement is not bounded by them.
    let (_, v) = admit_among(&svc, &PolicySnapshot::default(), &pools());
    assert!(v.allowed(), "{:?}", errors(&v));

    // Every applicable policy's list applies, each naming itself; a Warn
    // policy warns.
    let both = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "enforcement": "Warn",
            "limits": {"allowedAcceleratorClasses": ["mig", "l4-24gb", "h100-80gb"]}
        }))],
        namespaced: vec![namespace_policy(json!({
            "limits": {"allowedAcceleratorClasses": ["mig"]}
        }))],
    };
    let reserved = service(json!({
        "accelerator": {"class": "mig"},
        "placement": {"nodeSelector": {"gpu.example.com/pool": "reserved"}}
    }));
    let (_, v) = admit_among(&reserved, &both, &pools());
    assert_eq!(
        errors(&v),
        [
            "spec.placement.nodeSelector[gpu.example.com/pool]: Forbidden: gpu.example.com/pool=\"reserved\" selects the nodes of AcceleratorClass \"h100-reserved\", which InferencePolicy \"team-a/gpus\" does not allow (limits.allowedAcceleratorClasses: \"mig\")"
        ]
    );
    assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
    assert!(
        v.warnings[0].contains("which ClusterInferencePolicy \"platform\" does not allow"),
        "{:?}",
        v.warnings
    );

    // The service's own class is judged by the class rules alone: naming a
    // disallowed class and repeating its node selector is one error.
    let own = service(json!({
        "accelerator": {"class": "h100-reserved"},
        "placement": {"nodeSelector": {"gpu.example.com/pool": "reserved"}}
    }));
    let (_, v) = admit_among(&own, &policies, &pools());
    assert_eq!(
        errors(&v),
        [
            "spec.accelerator.class: Unsupported value: \"h100-reserved\": supported values: \"mig\", \"l4-24gb\" (InferencePolicy \"team-a/gpus\")"
        ]
    );
}

/// `limits.allowedPriorityClasses` bounds `placement.priorityClassName`
/// under every applicable policy (absent: any); a namespace policy may
/// narrow the platform's list, not widen it, and no policy defaults a
/// PriorityClass its limits or the platform's exclude.
#[test]
fn priority_classes_are_bounded_by_every_policy() {
    let policies = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "limits": {"allowedPriorityClasses": ["inference-high", "inference-low"]}
        }))],
        namespaced: vec![namespace_policy(json!({
            "limits": {"allowedPriorityClasses": ["inference-low"]}
        }))],
    };
    let at = |name: &str| service(json!({"placement": {"priorityClassName": name}}));
    let (_, v) = admit(&at("system-cluster-critical"), &policies);
    assert_eq!(
        errors(&v),
        [
            "spec.placement.priorityClassName: Unsupported value: \"system-cluster-critical\": supported values: \"inference-low\" (InferencePolicy \"team-a/gpus\")",
            "spec.placement.priorityClassName: Unsupported value: \"system-cluster-critical\": supported values: \"inference-high\", \"inference-low\" (ClusterInferencePolicy \"platform\")",
        ]
    );
    let (_, v) = admit(&at("inference-high"), &policies);
    assert_eq!(
        errors(&v),
        [
            "spec.placement.priorityClassName: Unsupported value: \"inference-high\": supported values: \"inference-low\" (InferencePolicy \"team-a/gpus\")"
        ]
    );
    for allowed in [at("inference-low"), service(json!({}))] {
        let (_, v) = admit(&allowed, &policies);
        assert!(v.allowed(), "{:?}", errors(&v));
    }
    // Without a list, any PriorityClass.
    let (_, v) = admit(&at("system-cluster-critical"), &PolicySnapshot::default());
    assert!(v.allowed(), "{:?}", errors(&v));

    // The policies themselves.
    let own = cluster_policy(json!({
        "defaults": {"placement": {"priorityClassName": "batch"}},
        "limits": {"allowedPriorityClasses": ["inference-high"]}
    }));
    assert_eq!(
        errors(&engine::validate_cluster_policy(&own)),
        [
            "spec.defaults.placement.priorityClassName: Invalid value: \"batch\": must be one of spec.limits.allowedPriorityClasses (\"inference-high\")"
        ]
    );
    let platform = PolicySnapshot {
        cluster: vec![cluster_policy(json!({
            "limits": {"allowedPriorityClasses": ["inference-high", "inference-low"]}
        }))],
        namespaced: vec![],
    };
    let wider = namespace_policy(json!({
        "defaults": {"placement": {"priorityClassName": "system-cluster-critical"}},
        "limits": {"allowedPriorityClasses": ["inference-low", "system-cluster-critical"]}
    }));
    let v = with(&platform, |ctx| {
        engine::validate_namespaced_policy(&wider, ctx)
    });
    assert_eq!(
        errors(&v),
        [
            "spec.limits.allowedPriorityClasses[1]: Invalid value: \"system-cluster-critical\": may not loosen the allowed priority classes \"inference-high\", \"inference-low\" of ClusterInferencePolicy \"platform\"",
            "spec.defaults.placement.priorityClassName: Invalid value: \"system-cluster-critical\": must be one of \"inference-high\", \"inference-low\" (ClusterInferencePolicy \"platform\")",
        ]
    );
    let narrower = namespace_policy(json!({
        "defaults": {"placement": {"priorityClassName": "inference-low"}},
        "limits": {"allowedPriorityClasses": ["inference-low"]}
    }));
    let v = with(&platform, |ctx| {
        engine::validate_namespaced_policy(&narrower, ctx)
    });
    assert!(v.allowed(), "{:?}", errors(&v));
}
