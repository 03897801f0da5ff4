//! What the engine pods carry: both tracks of a Deployment-backed service
//! the class's placement then the service's, a class's resource name as
//! the request, the Ray head the placement only and the endpoint picker
//! nothing, and scaling past one replica changes no pod template.

use infergate::api::v1beta1::InferenceService;
use infergate::engine::PolicySnapshot;
use infergate::reconcile::children::{
    Track, deployment, endpoint_picker, pod::SHM_MOUNT_PATH, rayservice,
};
use k8s_openapi::api::core::v1::PodSpec;
use serde_json::{Value, json};

use super::{admit, h100, mig, service};

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
