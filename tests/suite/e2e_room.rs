//! End-to-end: free devices per AcceleratorClass known from watches
//! (API section 14), against kube-apiserver, kube-scheduler and kwok. The
//! shared state's watches run as `serve` starts them (every namespace);
//! the test reads `ClusterState::free_devices` as admission and the
//! reconciler do, while a node joins, a pod is bound to it and the pod
//! finishes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::scheduler::{
    ACCELERATOR_LABEL, GPU_TAINT, accelerator_class, gpu_node, scheduling, write_pod_status,
};
use crate::support::{WAIT, control_plane, eventually};
use infergate::api::AcceleratorClass;
use infergate::state::{ClusterState, Scope};

/// `(devices, nodes)` the class has free, or why not known.
fn free(state: &ClusterState, class: &str) -> Result<(u64, u32), String> {
    state
        .free_devices(class)
        .map(|f| (f.devices, f.nodes))
        .ok_or_else(|| "not known yet".to_owned())
}

async fn wait_free(state: &ClusterState, class: &str, want: (u64, u32), what: &str) {
    eventually(what, WAIT, async || match free(state, class) {
        Ok(got) if got == want => Ok(()),
        Ok(got) => Err(format!("(devices, nodes) {got:?}, want {want:?}")),
        Err(e) => Err(e),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_devices_follow_a_node_a_bound_pod_and_its_end() {
    crate::support::init_tracing();
    let cp = control_plane().await;
    let client = cp.client().await;
    let sched = scheduling(cp).await;
    cp.install_crds().await;
    let run = std::process::id();
    let pool = format!("room-{run}");
    let class = format!("room-{run}");

    let state = Arc::new(ClusterState::default());
    let stop = CancellationToken::new();
    state.spawn_watches(client.clone(), &Scope::All, true, stop.clone());
    Api::<AcceleratorClass>::all(client.clone())
        .create(&PostParams::default(), &accelerator_class(&class, &pool, 8))
        .await
        .expect("creating the class");
    wait_free(&state, &class, (0, 0), "an empty pool").await;

    sched
        .create_node(&client, gpu_node(&format!("room-{run}"), &pool, "8"))
        .await;
    wait_free(&state, &class, (8, 1), "the node's 8 devices").await;

    let ns = cp.fresh_namespace("room").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "engine"},
        "spec": {
            "nodeSelector": {ACCELERATOR_LABEL: pool},
            "tolerations": [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "initContainers": [{"name": "fetch", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "containers": [
                {"name": "engine", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
                {"name": "proxy", "image": "envoy", "resources": {"requests": {"cpu": "100m"}}}
            ]
        }
    }))
    .expect("pod json");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("creating the pod");
    wait_free(&state, &class, (5, 1), "the bound pod's 3 devices taken").await;

    write_pod_status(
        &client,
        &ns,
        "engine",
        json!({"status": {"phase": "Succeeded"}}),
    )
    .await;
    wait_free(
        &state,
        &class,
        (8, 1),
        "the finished pod's devices free again",
    )
    .await;

    pods.delete("engine", &DeleteParams::default())
        .await
        .expect("deleting the pod");
    stop.cancel();
}
