//! The LeaderWorkerSet of a service whose replicas span nodes.

use serde_json::{Value, json};

use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::{Track, Workload, deployment, desired, workload};

fn class(topology: bool) -> AcceleratorClassSpec {
    let mut c = json!({
        "vendor": "nvidia", "memoryPerDevice": "80Gi", "devicesPerNode": 8,
        "nodeSelector": {"pool": "h100"},
    });
    if topology {
        c["topologyKey"] = json!("example.com/nvlink-domain");
    }
    serde_json::from_value(c).expect("class")
}

fn service(extra: Value) -> InferenceService {
    let mut spec = json!({
        "model": {"ref": "meta-llama/Llama-3.1-405B-Instruct"},
        "engine": {"image": "registry.example.com/vllm:0.11.1", "port": 8000,
                   "args": ["--max-model-len", "32768"]},
        "replicas": 2,
        "accelerator": {"type": "nvidia", "class": "h100"},
        "parallelism": {"tensor": 8, "pipeline": 2},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1"},
        "spec": spec,
    }))
    .expect("service")
}

fn group_of(svc: &InferenceService, track: Track, class: &AcceleratorClassSpec) -> Value {
    let built = desired(svc, Some(class)).expect("desired");
    let d = deployment(svc, track, Some(class)).expect("deployment");
    let Workload::Group(lws) = workload(svc, track, Some(class), built.group, &d).expect("lws")
    else {
        panic!("a replica of 16 devices on 8-device nodes is a group");
    };
    serde_json::to_value(*lws).expect("json")
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string"))
        .collect()
}

#[test]
fn each_replica_is_a_group_of_two_pods_running_vllm_across_nodes() {
    let lws = group_of(&service(json!({})), Track::Primary, &class(false));
    assert_eq!(lws["apiVersion"], "leaderworkerset.x-k8s.io/v1");
    assert_eq!(lws["metadata"]["name"], "chat-lws");
    assert_eq!(lws["metadata"]["ownerReferences"][0]["name"], "chat");
    let spec = &lws["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(spec["startupPolicy"], "LeaderCreated");
    assert_eq!(
        spec["rolloutStrategy"],
        json!({"type": "RollingUpdate",
               "rollingUpdateConfiguration": {"partition": 0, "maxUnavailable": 0, "maxSurge": 1}})
    );
    let lwt = &spec["leaderWorkerTemplate"];
    assert_eq!(lwt["size"], 2);
    assert_eq!(lwt["restartPolicy"], "RecreateGroupOnPodRestart");
    let leader = &lwt["leaderTemplate"];
    let worker = &lwt["workerTemplate"];
    let engine = |t: &Value| t["spec"]["containers"][0].clone();
    let flags = [
        "--tensor-parallel-size",
        "8",
        "--pipeline-parallel-size",
        "2",
        "--nnodes",
        "2",
        "--master-addr",
        "$(LWS_LEADER_ADDRESS)",
        "--master-port",
        "29500",
    ];
    let leader_args = engine(leader)["args"].clone();
    let leader_args = strings(&leader_args);
    let at = leader_args
        .iter()
        .position(|a| *a == "--tensor-parallel-size")
        .expect("tensor flag");
    assert_eq!(&leader_args[at..at + flags.len()], flags);
    // The service's own flags stay last.
    assert_eq!(
        &leader_args[at + flags.len()..],
        ["--node-rank", "0", "--max-model-len", "32768"]
    );
    let worker_args = engine(worker)["args"].clone();
    let worker_args = strings(&worker_args);
    assert_eq!(
        &worker_args[at + flags.len()..],
        [
            "--node-rank",
            "$(LWS_WORKER_INDEX)",
            "--headless",
            "--max-model-len",
            "32768"
        ]
    );
    // One node's devices each; probes and the port on the leader only.
    for t in [leader, worker] {
        assert_eq!(engine(t)["resources"]["limits"]["nvidia.com/gpu"], "8");
        assert_eq!(engine(t)["resources"]["requests"]["nvidia.com/gpu"], "8");
        assert_eq!(t["spec"]["nodeSelector"]["pool"], "h100");
    }
    assert!(engine(leader)["readinessProbe"].is_object());
    assert!(engine(leader)["ports"].is_array());
    for probe in ["readinessProbe", "livenessProbe", "startupProbe", "ports"] {
        assert!(engine(worker).get(probe).is_none(), "{probe} on a worker");
    }
    // The leader is the track's serving pod; a worker names its track in
    // a label of its own.
    let labels = |t: &Value| t["metadata"]["labels"].clone();
    assert_eq!(labels(leader)["infergate.dev/track"], "primary");
    assert!(labels(worker).get("infergate.dev/track").is_none());
    assert_eq!(labels(worker)["infergate.dev/worker-of"], "primary");
    assert_eq!(labels(worker)["infergate.dev/service"], "chat");
    assert!(
        lws["metadata"]["annotations"]["infergate.dev/template-digest"].is_string(),
        "{lws}"
    );
    assert!(
        lws["metadata"]["annotations"]
            .get("leaderworkerset.sigs.k8s.io/exclusive-topology")
            .is_none()
    );
}

#[test]
fn a_class_topology_key_keeps_a_group_in_one_domain_and_the_canary_is_a_group_too() {
    let svc = service(json!({"canary": {"model": {"ref": "m2"}, "weight": 10}}));
    let lws = group_of(&svc, Track::Canary, &class(true));
    assert_eq!(lws["metadata"]["name"], "chat-canary-lws");
    assert_eq!(
        lws["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"],
        "example.com/nvlink-domain"
    );
    let worker = &lws["spec"]["leaderWorkerTemplate"]["workerTemplate"];
    assert_eq!(
        worker["metadata"]["labels"]["infergate.dev/worker-of"],
        "canary"
    );
}

#[test]
fn an_autoscaled_group_leaves_replicas_to_the_hpa_which_scales_the_leaderworkerset() {
    let svc = service(json!({"autoscaling": {"minReplicas": 1, "maxReplicas": 4}}));
    let built = desired(&svc, Some(&class(false))).expect("desired");
    let hpa = built.hpa.expect("hpa");
    let target = hpa.spec.scale_target_ref;
    assert_eq!(
        (
            target.api_version.as_deref(),
            target.kind.as_str(),
            target.name.as_str()
        ),
        (
            Some("leaderworkerset.x-k8s.io/v1"),
            "LeaderWorkerSet",
            "chat-lws"
        )
    );
    let lws = group_of(&svc, Track::Primary, &class(false));
    assert!(lws["spec"].get("replicas").is_none(), "{}", lws["spec"]);
    // One node holds a replica: a Deployment, as before.
    let small = service(json!({"parallelism": {"tensor": 8, "pipeline": 1}}));
    let built = desired(&small, Some(&class(false))).expect("desired");
    assert_eq!(built.group, None);
    let d = deployment(&small, Track::Primary, Some(&class(false))).expect("deployment");
    assert!(matches!(
        workload(&small, Track::Primary, Some(&class(false)), None, &d),
        Ok(Workload::Deployment(_))
    ));
}

#[test]
fn a_replace_on_a_full_pool_becomes_max_surge_zero_on_the_groups() {
    use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let svc = service(json!({}));
    let c = class(false);
    let built = desired(&svc, Some(&c)).expect("desired");
    let mut d = built.primary.clone();
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(IntOrString::Int(0)),
                max_unavailable: Some(IntOrString::Int(1)),
            }),
        });
    }
    let Ok(Workload::Group(lws)) = workload(&svc, Track::Primary, Some(&c), built.group, &d) else {
        panic!("a group");
    };
    let r = &lws.spec.rollout_strategy.rolling_update_configuration;
    assert_eq!(
        (r.max_surge.clone(), r.max_unavailable.clone()),
        (IntOrString::Int(0), IntOrString::Int(1))
    );
}

#[test]
fn the_service_and_the_inference_pool_select_the_leaders_only() {
    let svc = service(json!({"routing": {"backendKind": "InferencePool"}}));
    let lws = group_of(&svc, Track::Primary, &class(false));
    let labels = |t: &str| {
        lws["spec"]["leaderWorkerTemplate"][t]["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    };
    let (leader, worker) = (labels("leaderTemplate"), labels("workerTemplate"));
    let selects = |selector: &std::collections::BTreeMap<String, String>,
                   pod: &serde_json::Map<String, Value>| {
        selector
            .iter()
            .all(|(k, v)| pod.get(k).and_then(Value::as_str) == Some(v))
    };
    let service = crate::reconcile::children::service(&svc, Track::Primary).expect("service");
    let by_service = service.spec.and_then(|s| s.selector).unwrap_or_default();
    let pool = crate::reconcile::children::inferencepool::inference_pool(&svc, Track::Primary)
        .expect("pool");
    let by_pool = pool.spec.selector.match_labels.clone();
    for selector in [&by_service, &by_pool] {
        assert!(!selector.is_empty());
        assert!(selects(selector, &leader), "{selector:?} misses the leader");
        assert!(!selects(selector, &worker), "{selector:?} picks a worker");
    }
}
