//! End-to-end with a real scheduler: kube-apiserver, kube-scheduler and kwok
//! (which plays the kubelet of fake Nodes). A CPU pool and two GPU pools,
//! each tainted `nvidia.com/gpu=present:NoSchedule` and labelled with its
//! accelerator (an H100 Node with eight `nvidia.com/gpu`, an L4 Node with
//! one), described by two AcceleratorClasses, serve every test of this
//! binary, with one reconciler; each test takes a fresh namespace. The
//! scheduler binds, kwok runs; only the image-pull and crash-loop test
//! writes container statuses, as a kubelet would, on pods kwok has run.

use crate::support;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;

use crate::support::scheduler::{
    ACCELERATOR_LABEL, GPU_TAINT, RUN_WAIT, Scheduling, accelerator_class as class,
    container_not_ready, crash_loop, gpu_node, kwok_node, pod_condition, scheduling,
    write_pod_status,
};
use crate::support::{ControlPlane, WAIT, control_plane, eventually};
use infergate::api::AcceleratorClass;
use infergate::api::profile::ModelProfile;
use infergate::api::v1beta1::InferenceService;

const H100: &str = "nvidia-h100-80gb";
const L4: &str = "nvidia-l4";

/// The Nodes and AcceleratorClasses of this run (names unique to the test process).
struct Nodes {
    cpu: String,
    gpu: String,
    /// The AcceleratorClass of the H100 pool (8 devices per node).
    h100_class: String,
    /// The AcceleratorClass of the L4 pool. It claims 2 devices per node
    /// while its Node offers 1 (as when a device plugin reports fewer GPUs
    /// than the machine type has): admission lets a 2-GPU replica through
    /// and only the scheduler can say that it fits nowhere.
    l4_class: String,
}

static NODES: OnceCell<Nodes> = OnceCell::const_new();

/// What every test runs against: the control plane, a client, the scheduler
/// and kwok, and the Nodes and classes.
type Env = (
    &'static ControlPlane,
    Client,
    &'static Scheduling,
    &'static Nodes,
);

/// The control plane, the scheduler and kwok, the Nodes and classes, and
/// the reconciler.
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
                .create_node(&client, gpu_node(&format!("gpu-h100-{run}"), H100, "8"))
                .await;
            assert_eq!(
                gpu.status.as_ref().unwrap().allocatable.as_ref().unwrap()["nvidia.com/gpu"].0,
                "8",
                "kwok keeps the allocatable the Node was written with"
            );
            sched
                .create_node(&client, gpu_node(&format!("gpu-l4-{run}"), L4, "1"))
                .await;
            cp.install_crds().await;
            let h100_class = format!("h100-{run}");
            let l4_class = format!("l4-{run}");
            let classes: Api<AcceleratorClass> = Api::all(client.clone());
            for c in [class(&h100_class, H100, 8), class(&l4_class, L4, 2)] {
                classes
                    .create(&PostParams::default(), &c)
                    .await
                    .unwrap_or_else(|e| panic!("creating AcceleratorClass {}: {e}", c.name_any()));
            }
            Nodes {
                cpu: cpu.name_any(),
                gpu: gpu.name_any(),
                h100_class,
                l4_class,
            }
        })
        .await;
    cp.shared_reconciler().await;
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

/// Create the InferenceService `chat` in `ns` with `spec` (model and engine added).
async fn create_service(client: &Client, ns: &str, mut spec: serde_json::Value) {
    spec["model"] = json!({"ref": "llama3-70b"});
    if spec["engine"]["image"].is_null() {
        spec["engine"]["image"] = json!("registry.example.com/vllm:0.9");
    }
    support::create_service_json(client, ns, "chat", spec).await;
}

/// Wait until service `chat`'s Ready condition has `reason`; return it as
/// `kubectl get infsvc -o yaml` shows it (what a user reads).
async fn ready_reason(
    cp: &ControlPlane,
    sched: &Scheduling,
    ns: &str,
    reason: &str,
) -> serde_json::Value {
    eventually(
        &format!("service {ns}/chat Ready with reason {reason}"),
        RUN_WAIT,
        async || {
            sched.ensure_running();
            let out = cp.kubectl(&["get", "-n", ns, "infsvc", "chat", "-o", "yaml"]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let svc: serde_json::Value =
                serde_saphyr::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
            let ready = svc["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .cloned()
                .ok_or_else(|| format!("no Ready condition yet: {text}"))?;
            if ready["reason"] == reason {
                Ok(ready)
            } else {
                Err(format!("Ready {ready}; {}", sched.logs(5)))
            }
        },
    )
    .await
}

/// The pods of `chat` in `ns`.
async fn service_pods(client: &Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("infergate.dev/service=chat"))
        .await
        .expect("listing pods")
        .items
}

/// A tensor-parallel service on the H100 class: the real scheduler puts
/// its pod on the H100 Node (the class's toleration and selector), kwok
/// runs it, and the service becomes Ready; the pod carries /dev/shm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tensor_parallel_service_runs_on_its_gpu_pool() {
    let (cp, client, sched, nodes) = setup().await;
    let ns = cp.fresh_namespace("sched-h100").await;
    create_service(
        &client,
        &ns,
        json!({"accelerator": {"class": nodes.h100_class}, "parallelism": {"tensor": 2}}),
    )
    .await;
    let ready = ready_reason(cp, sched, &ns, "Available").await;
    assert_eq!(ready["status"], "True", "{ready}");

    let pods = service_pods(&client, &ns).await;
    assert_eq!(pods.len(), 1, "{pods:#?}");
    let pod = &pods[0];
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some(nodes.gpu.as_str()));
    assert_eq!(
        spec.containers[0]
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap()["nvidia.com/gpu"]
            .0,
        "2"
    );
    let shm = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "dshm")
        .expect("a /dev/shm volume");
    assert_eq!(
        shm.empty_dir.as_ref().and_then(|e| e.medium.as_deref()),
        Some("Memory")
    );
}

/// The same service on the L4 class fits no Node: its pod stays Pending
/// and the service's Ready condition carries the scheduler's own message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_no_node_can_hold_says_why_in_its_status() {
    let (cp, client, sched, nodes) = setup().await;
    let ns = cp.fresh_namespace("sched-l4").await;
    create_service(
        &client,
        &ns,
        json!({"accelerator": {"class": nodes.l4_class}, "parallelism": {"tensor": 2}}),
    )
    .await;
    let ready = ready_reason(cp, sched, &ns, "Unschedulable").await;
    assert_eq!(ready["status"], "False", "{ready}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("0/") && message.contains("nodes are available"),
        "the scheduler's message: {message}"
    );
    assert!(
        message.contains("Insufficient nvidia.com/gpu"),
        "the L4 Node has one GPU: {message}"
    );
    let pods = service_pods(&client, &ns).await;
    assert!(
        pods.iter()
            .all(|p| p.spec.as_ref().unwrap().node_name.is_none()),
        "nothing was bound: {pods:#?}"
    );
    let (_, reason, scheduler) = pod_condition(&pods[0], "PodScheduled").expect("PodScheduled");
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.contains(
            scheduler
                .trim_end_matches('.')
                .split(" preemption")
                .next()
                .unwrap()
        ),
        "the status repeats the pod's message verbatim:\n{message}\n{scheduler}"
    );
}

/// Write what a kubelet writes when a running engine's image can no longer
/// be pulled (`ImagePullBackOff`) or it keeps crashing (`CrashLoopBackOff`),
/// on the pods kwok runs; the service names the image, or the exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_failures_and_crash_loops_are_named() {
    let (cp, client, sched, _) = setup().await;
    let ns = cp.fresh_namespace("sched-broken").await;
    create_service(
        &client,
        &ns,
        json!({"engine": {"image": "registry.example.com/vllm:gone"}, "resources": {"cpu": "1"}}),
    )
    .await;
    ready_reason(cp, sched, &ns, "Available").await;
    let pods = service_pods(&client, &ns).await;
    let name = pods[0].name_any();
    let kubelet_says = async |waiting, last| {
        let status = container_not_ready("registry.example.com/vllm:gone", waiting, last);
        write_pod_status(&client, &ns, &name, status).await;
    };
    kubelet_says(
        json!({"reason": "ImagePullBackOff",
               "message": "Back-off pulling image \"registry.example.com/vllm:gone\""}),
        json!({}),
    )
    .await;
    let ready = ready_reason(cp, sched, &ns, "ImagePullFailed").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("registry.example.com/vllm:gone"),
        "names the image: {message}"
    );

    let (waiting, last) = crash_loop();
    kubelet_says(waiting, last).await;
    let ready = ready_reason(cp, sched, &ns, "CrashLooping").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("137") && message.contains("OOMKilled"),
        "names the exit code and reason: {message}"
    );
}

/// A class deleted under a running service: Ready=False with reason
/// AcceleratorClassNotFound, and the Deployment is left exactly as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_class_leaves_the_children_as_they_are() {
    let (cp, client, sched, _) = setup().await;
    let ns = cp.fresh_namespace("sched-gone").await;
    let name = format!("short-lived-{}", std::process::id());
    let classes: Api<AcceleratorClass> = Api::all(client.clone());
    classes
        .create(&PostParams::default(), &class(&name, H100, 8))
        .await
        .expect("class");
    create_service(&client, &ns, json!({"accelerator": {"class": name}})).await;
    ready_reason(cp, sched, &ns, "Available").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let before = deployments.get("chat").await.expect("deployment");

    classes
        .delete(&name, &Default::default())
        .await
        .expect("deleting the class");
    let ready = ready_reason(cp, sched, &ns, "AcceleratorClassNotFound").await;
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&name),
        "{ready}"
    );
    let after = deployments.get("chat").await.expect("deployment");
    assert_eq!(after.metadata.generation, before.metadata.generation);
    assert_eq!(after.spec, before.spec, "the Deployment is left as it was");
}

/// A class changed under a running service so that its model no longer
/// fits (memoryPerDevice lowered below its weights): the service is not
/// frozen. PolicyCompliant says NoLongerFits with the numbers, a scale is
/// applied, and a Service deleted by hand comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_that_no_longer_fits_a_running_service_freezes_nothing() {
    let (cp, client, sched, _) = setup().await;
    let ns = cp.fresh_namespace("sched-fit").await;
    let run = std::process::id();
    let (class_name, model) = (format!("shrinking-{run}"), format!("fit-model-{run}"));
    let classes: Api<AcceleratorClass> = Api::all(client.clone());
    classes
        .create(&PostParams::default(), &class(&class_name, H100, 8))
        .await
        .expect("class");
    // An 8B-sized model, listed under a ref of this test alone.
    let profiles: Api<ModelProfile> = Api::all(client.clone());
    let profile: ModelProfile = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "ModelProfile",
        "metadata": {"name": model},
        "spec": {"modelRefs": [model], "weightBytes": 16_060_522_496_i64, "layers": 32,
                 "attention": {"kind": "GQA", "kvHeads": 8, "headDim": 128},
                 "maxPositionEmbeddings": 8192}
    }))
    .expect("profile");
    profiles
        .create(&PostParams::default(), &profile)
        .await
        .expect("profile");
    support::create_service_json(
        &client,
        &ns,
        "chat",
        json!({
            "model": {"ref": model},
            "engine": {"image": "registry.example.com/vllm:0.9"},
            "accelerator": {"class": class_name},
            "parallelism": {"tensor": 1},
            "replicas": 1,
        }),
    )
    .await;
    ready_reason(cp, sched, &ns, "Available").await;

    // 16 GiB devices: the weights alone no longer fit one.
    classes
        .patch(
            &class_name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"memoryPerDevice": "16Gi"}})),
        )
        .await
        .expect("lowering the class's memory");
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let compliant = eventually("PolicyCompliant=False NoLongerFits", WAIT, async || {
        let svc = services.get("chat").await.map_err(|e| e.to_string())?;
        let conds = svc
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let p = conds
            .iter()
            .find(|c| c.type_ == "PolicyCompliant")
            .cloned()
            .ok_or("no PolicyCompliant")?;
        if p.reason == "NoLongerFits" {
            Ok((p, conds))
        } else {
            Err(format!("{p:?}"))
        }
    })
    .await;
    let (p, conds) = compliant;
    assert_eq!(p.status, "False");
    assert!(
        p.message.contains("spec.parallelism.tensor") && p.message.contains("16Gi"),
        "the numbers: {}",
        p.message
    );
    let reconciled = conds
        .iter()
        .find(|c| c.type_ == "Reconciled")
        .expect("Reconciled");
    assert_eq!(reconciled.status, "True", "{reconciled:?}");

    // A scale is applied.
    services
        .patch(
            "chat",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scaling");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    eventually("the Deployment scaled to 2", WAIT, async || {
        let d = deployments.get("chat").await.map_err(|e| e.to_string())?;
        match d.spec.as_ref().and_then(|s| s.replicas) {
            Some(2) => Ok(()),
            other => Err(format!("replicas {other:?}")),
        }
    })
    .await;
    // A Service deleted by hand comes back.
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
    let before = svcs.get("chat").await.expect("the Service").uid();
    svcs.delete("chat", &Default::default())
        .await
        .expect("deleting the Service");
    eventually("the Service put back", WAIT, async || {
        let now = svcs.get("chat").await.map_err(|e| e.to_string())?.uid();
        if now != before {
            Ok(())
        } else {
            Err("the same Service".to_owned())
        }
    })
    .await;
    classes
        .delete(&class_name, &Default::default())
        .await
        .expect("deleting the class");
    profiles
        .delete(&model, &Default::default())
        .await
        .expect("deleting the profile");
}
