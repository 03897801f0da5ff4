//! End-to-end with a real scheduler: kube-apiserver, kube-scheduler and kwok
//! (which plays the kubelet of fake Nodes). One CPU Node and one GPU Node
//! (tainted `nvidia.com/gpu=present:NoSchedule`, eight `nvidia.com/gpu`)
//! serve every test of this binary; each test takes a fresh namespace. No
//! test writes a pod's status: the scheduler binds, kwok runs.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use infergate::api::v1beta1::InferenceService;
use support::scheduler::{RUN_WAIT, Scheduling, kwok_node, pod_condition, scheduling};
use support::{ControlPlane, Reconciler, SYSTEM_NAMESPACE, WAIT, control_plane, eventually};

const GPU_TAINT: &str = "nvidia.com/gpu";
const ACCELERATOR_LABEL: &str = "cloud.google.com/gke-accelerator";
const H100: &str = "nvidia-h100-80gb";

/// The two Nodes of this run (names unique to the test process).
struct Nodes {
    cpu: String,
    gpu: String,
}

static NODES: OnceCell<Nodes> = OnceCell::const_new();

/// What every test runs against: the control plane, a client, the scheduler
/// and kwok, and the two Nodes.
type Env = (
    &'static ControlPlane,
    Client,
    &'static Scheduling,
    &'static Nodes,
);

/// The control plane, the scheduler and kwok, and the two Nodes.
async fn setup() -> Env {
    support::init_tracing();
    let cp = control_plane().await;
    let client = cp.client().await;
    let sched = scheduling(cp).await;
    let nodes = NODES
        .get_or_init(|| async {
            let run = std::process::id();
            let cpu = sched
                .create_node(
                    &client,
                    kwok_node(&format!("cpu-pool-{run}"), &[], vec![], &[]),
                )
                .await;
            let gpu = sched
                .create_node(
                    &client,
                    kwok_node(
                        &format!("gpu-h100-{run}"),
                        &[(ACCELERATOR_LABEL, H100)],
                        vec![Taint {
                            key: GPU_TAINT.into(),
                            value: Some("present".into()),
                            effect: "NoSchedule".into(),
                            ..Taint::default()
                        }],
                        &[("nvidia.com/gpu", "8")],
                    ),
                )
                .await;
            assert_eq!(
                gpu.status.as_ref().unwrap().allocatable.as_ref().unwrap()["nvidia.com/gpu"].0,
                "8",
                "kwok keeps the allocatable the Node was written with"
            );
            Nodes {
                cpu: cpu.name_any(),
                gpu: gpu.name_any(),
            }
        })
        .await;
    (cp, client, sched, nodes)
}

/// A pod asking for one GPU; with the GPU toleration and an H100 node selector when `tolerate`.
fn gpu_pod(name: &str, tolerate: bool) -> Pod {
    let mut spec = json!({
        "containers": [{
            "name": "engine",
            "image": "registry.example.com/vllm:0.9",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}
        }]
    });
    if tolerate {
        spec["tolerations"] = json!([{
            "key": GPU_TAINT, "operator": "Equal", "value": "present", "effect": "NoSchedule"
        }]);
        spec["nodeSelector"] = json!({ ACCELERATOR_LABEL: H100 });
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("pod json")
}

async fn create_pod(client: &Client, ns: &str, pod: &Pod) -> Api<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.create(&PostParams::default(), pod)
        .await
        .unwrap_or_else(|e| panic!("creating pod {ns}/{}: {e}", pod.name_any()));
    pods
}

/// Wait until the pod is bound, Running and Ready; return it.
async fn wait_running(sched: &Scheduling, pods: &Api<Pod>, name: &str) -> Pod {
    eventually(
        &format!("pod {name} scheduled, Running and Ready"),
        RUN_WAIT,
        async || {
            sched.ensure_running();
            let pod = pods.get(name).await.map_err(|e| e.to_string())?;
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            let ready = pod_condition(&pod, "Ready").map(|c| c.0);
            if phase.as_deref() == Some("Running") && ready.as_deref() == Some("True") {
                Ok(pod)
            } else {
                Err(format!(
                    "node {:?}, phase {phase:?}, Ready {ready:?}; {}",
                    pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                    sched.logs(5)
                ))
            }
        },
    )
    .await
}

/// Without the toleration, a GPU pod fits nowhere: the CPU Node has no GPU
/// and the GPU Node's taint repels it. The scheduler says so on the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_pod_without_toleration_is_unschedulable() {
    let (cp, client, sched, _) = setup().await;
    let ns = cp.fresh_namespace("sched-taint").await;
    let pods = create_pod(&client, &ns, &gpu_pod("no-toleration", false)).await;

    let (status, reason, message) = eventually(
        "PodScheduled=False on pod no-toleration",
        WAIT,
        async || {
            sched.ensure_running();
            let pod = pods.get("no-toleration").await.ok()?;
            pod_condition(&pod, "PodScheduled")
        },
    )
    .await;
    assert_eq!(status, "False", "{reason}: {message}");
    assert_eq!(reason, "Unschedulable", "{message}");
    assert!(message.starts_with("0/"), "{message}");
    assert!(
        message.contains("untolerated taint") && message.contains("Insufficient nvidia.com/gpu"),
        "the message names the taint and the missing GPU: {message}"
    );

    // Still pending a while later: nothing binds it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pod = pods.get("no-toleration").await.expect("pod");
    assert_eq!(pod.spec.as_ref().unwrap().node_name, None);
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
}

/// With the toleration and the accelerator's node selector, the same pod
/// lands on the GPU Node and kwok runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_pod_with_toleration_runs_on_the_gpu_node() {
    let (cp, client, sched, nodes) = setup().await;
    let ns = cp.fresh_namespace("sched-gpu").await;
    let pods = create_pod(&client, &ns, &gpu_pod("tolerates", true)).await;

    let pod = wait_running(sched, &pods, "tolerates").await;
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some(nodes.gpu.as_str())
    );
    let scheduled = pod_condition(&pod, "PodScheduled").expect("PodScheduled");
    assert_eq!(scheduled.0, "True");
    let ip = pod
        .status
        .as_ref()
        .unwrap()
        .pod_ip
        .clone()
        .unwrap_or_default();
    assert!(
        ip.starts_with("10.244."),
        "kwok gives the pod an IP: {ip:?}"
    );
}

/// An InferenceService reconciled by infergate in process becomes Ready
/// because its pods were really scheduled (onto the CPU Node: it asks for no
/// GPU) and run by kwok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inference_service_becomes_ready_on_scheduled_pods() {
    let (cp, client, sched, nodes) = setup().await;
    cp.install_crds().await;
    cp.ensure_namespace(SYSTEM_NAMESPACE).await;
    let _reconciler = Reconciler::start(
        cp.kubeconfig().to_path_buf(),
        support::reconcile_config("scheduling-reconciler"),
    );
    let ns = cp.fresh_namespace("sched-service").await;
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {
            "model": {"ref": "llama3-8b-q4"},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "resources": {"cpu": "2", "memory": "4Gi"},
            "replicas": 2
        },
    }))
    .expect("service json");
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap_or_else(|e| panic!("creating {ns}/chat: {e}"));

    let svc = eventually("service chat Ready=True", RUN_WAIT, async || {
        sched.ensure_running();
        let svc = support::get::<InferenceService>(&client, &ns, "chat")
            .await
            .ok_or("not found")?;
        match support::condition(&svc, "Ready") {
            Some(c) if c.status == "True" => Ok(svc),
            other => Err(format!("Ready {other:?}; {}", sched.logs(5))),
        }
    })
    .await;
    assert_eq!(
        support::condition(&svc, "Ready").unwrap().reason,
        "Available"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels("infergate.dev/service=chat"))
        .await
        .expect("listing pods");
    let ready: Vec<&Pod> = list
        .items
        .iter()
        .filter(|p| pod_condition(p, "Ready").is_some_and(|c| c.0 == "True"))
        .collect();
    assert_eq!(ready.len(), 2, "{:#?}", list.items);
    for pod in ready {
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some(nodes.cpu.as_str()),
            "bound by the scheduler to the only Node that fits"
        );
        assert_eq!(pod_condition(pod, "PodScheduled").unwrap().0, "True");
    }

    // The GPU Node's taint kept everything else off it.
    let node: Node = Api::all(client.clone())
        .get(&nodes.gpu)
        .await
        .expect("gpu node");
    assert!(
        node.spec
            .unwrap()
            .taints
            .unwrap()
            .iter()
            .any(|t| t.key == GPU_TAINT)
    );
}
