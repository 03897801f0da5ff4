//! End-to-end: a RayService-backed service's pods (head and workers) say
//! why it is not ready, as a Deployment's do, with the real KubeRay
//! operator making the pods, the real kube-scheduler placing them and kwok
//! running them on fake Nodes (a CPU Node, and a GPU pool tainted and
//! labelled as GKE does it).
//!
//! The service's workers ask for 8 GPUs each (the generator of
//! `graph/rag.pb` asks 8) on an AcceleratorClass whose pool first has one
//! Node with 4: KubeRay's worker pod fits nowhere and the scheduler says
//! so on it; the service's `Ready` carries the scheduler's words. A Node
//! with room added to the pool, the worker lands and runs; then a kubelet's
//! words (written on the pods kwok runs, as `e2e_scheduling` does) about
//! the head's image and the worker's crashes are named in turn. KubeRay
//! never reaches a Ray dashboard here, so the RayService itself stays not
//! ready throughout.

use crate::support;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::support::scheduler::{
    RUN_WAIT, Scheduling, accelerator_class, container_not_ready, crash_loop, gpu_node, kwok_node,
    pod_condition, scheduling, write_pod_status,
};
use crate::support::{control_plane, eventually};
use infergate::api::AcceleratorClass;
use infergate::api::v1beta1::{AcceleratorSpec, AcceleratorType, InferenceService};

/// The pool's accelerator label.
const POOL: &str = "nvidia-a100-40gb";

/// Wait until service `rag`'s Ready condition has `reason`; return its
/// `(status, message)`.
async fn ready_reason(
    client: &Client,
    sched: &Scheduling,
    ns: &str,
    reason: &str,
) -> (String, String) {
    eventually(
        &format!("service {ns}/rag Ready with reason {reason}"),
        RUN_WAIT.max(Duration::from_secs(90)),
        async || {
            sched.ensure_running();
            let svc = support::get::<InferenceService>(client, ns, "rag")
                .await
                .ok_or("no service")?;
            match support::condition(&svc, "Ready") {
                Some(c) if c.reason == reason => Ok((c.status, c.message)),
                other => Err(format!("Ready {other:?}; {}", sched.logs(3))),
            }
        },
    )
    .await
}

/// The Ray pod of `rag` of node type `node_type` (`head`, `worker`) once
/// KubeRay has made it, with infergate's labels.
async fn ray_pod(client: &Client, ns: &str, node_type: &str) -> Pod {
    eventually(
        &format!("KubeRay's {node_type} pod"),
        RUN_WAIT,
        async || {
            let pods = Api::<Pod>::namespaced(client.clone(), ns)
                .list(&ListParams::default().labels(&format!(
                    "infergate.dev/service=rag,infergate.dev/track=primary,ray.io/node-type={node_type}"
                )))
                .await
                .map_err(|e| e.to_string())?;
            pods.items
                .into_iter()
                .find(|p| p.metadata.deletion_timestamp.is_none())
                .ok_or_else(|| format!("no {node_type} pod"))
        },
    )
    .await
}

/// Wait until pod `name` is Running and Ready (kwok ran it).
async fn wait_running(client: &Client, ns: &str, name: &str) -> Pod {
    eventually(
        &format!("pod {name} Running and Ready"),
        RUN_WAIT,
        async || {
            let pod = Api::<Pod>::namespaced(client.clone(), ns)
                .get(name)
                .await
                .map_err(|e| e.to_string())?;
            let ready = pod_condition(&pod, "Ready").map(|c| c.0);
            (ready.as_deref() == Some("True"))
                .then_some(pod.clone())
                .ok_or_else(|| format!("Ready {ready:?}"))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ray_services_head_and_workers_say_why_it_is_not_ready() {
    let s = crate::e2e_kuberay::setup("ray-pods").await;
    let cp = control_plane().await;
    let sched = scheduling(cp).await;
    let (client, ns, server) = (s.client.clone(), s.ns.clone(), &s.server);

    // A CPU Node for the head, a GPU pool with one 4-GPU Node, and the
    // pool's class (8 devices per node, as its machine type says).
    let run = std::process::id();
    sched
        .create_node(
            &client,
            kwok_node(&format!("ray-cpu-{run}"), &[], vec![], &[]),
        )
        .await;
    sched
        .create_node(&client, gpu_node(&format!("ray-gpu-a-{run}"), POOL, "4"))
        .await;
    let class = format!("a100-{run}");
    Api::<AcceleratorClass>::all(client.clone())
        .create(&PostParams::default(), &accelerator_class(&class, POOL, 8))
        .await
        .expect("class");

    let mut svc = server.service("rag");
    svc.spec.accelerator = Some(AcceleratorSpec {
        r#type: Some(AcceleratorType::Nvidia),
        class: Some(class.clone()),
    });
    svc.spec.replicas = Some(1);
    Api::<InferenceService>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");

    // KubeRay makes the head and a worker; the head runs on the CPU Node,
    // the worker (8 GPUs) fits nowhere.
    let head = ray_pod(&client, &ns, "head").await;
    let worker = ray_pod(&client, &ns, "worker").await;
    wait_running(&client, &ns, &head.name_any()).await;
    let (status, message) = ready_reason(&client, sched, &ns, "Unschedulable").await;
    assert_eq!(status, "False");
    assert!(
        message.starts_with("primary: ") && message.contains("Insufficient nvidia.com/gpu"),
        "the scheduler's words: {message}"
    );
    let worker = Api::<Pod>::namespaced(client.clone(), &ns)
        .get(&worker.name_any())
        .await
        .expect("worker");
    let (_, reason, scheduler) = pod_condition(&worker, "PodScheduled").expect("PodScheduled");
    assert_eq!(reason, "Unschedulable");
    assert!(
        message.contains(
            scheduler
                .trim_end_matches('.')
                .split(" preemption")
                .next()
                .unwrap_or_default()
        ),
        "the status repeats the worker's message verbatim:\n{message}\n{scheduler}"
    );

    // Room in the pool: the worker lands and runs.
    sched
        .create_node(&client, gpu_node(&format!("ray-gpu-b-{run}"), POOL, "8"))
        .await;
    let worker = wait_running(&client, &ns, &worker.name_any()).await;
    eventually("Ready no longer Unschedulable", RUN_WAIT, async || {
        let svc = support::get::<InferenceService>(&client, &ns, "rag")
            .await
            .ok_or("no service")?;
        let c = support::condition(&svc, "Ready").ok_or("no Ready")?;
        (c.reason != "Unschedulable").then_some(()).ok_or(c.message)
    })
    .await;

    // The head's image can no longer be pulled: named.
    let image = "registry.example.com/ray-vllm:2.40";
    let status = container_not_ready(
        image,
        json!({"reason": "ImagePullBackOff",
               "message": format!("Back-off pulling image \"{image}\"")}),
        json!({}),
    );
    write_pod_status(&client, &ns, &head.name_any(), status).await;
    let (status, message) = ready_reason(&client, sched, &ns, "ImagePullFailed").await;
    assert_eq!(status, "False");
    assert!(message.contains(image), "names the image: {message}");

    // The worker keeps crashing, and is the head's image back: named.
    let (waiting, last) = crash_loop();
    write_pod_status(
        &client,
        &ns,
        &worker.name_any(),
        container_not_ready(image, waiting, last),
    )
    .await;
    let running = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T12:01:00Z"}],
    }});
    write_pod_status(&client, &ns, &head.name_any(), running).await;
    let (status, message) = ready_reason(&client, sched, &ns, "CrashLooping").await;
    assert_eq!(status, "False");
    assert!(
        message.contains("137") && message.contains("OOMKilled"),
        "names the exit code and reason: {message}"
    );
    Api::<AcceleratorClass>::all(client.clone())
        .delete(&class, &Default::default())
        .await
        .expect("deleting the class");
}
