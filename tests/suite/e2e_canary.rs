//! End-to-end: a canary that goes away lets go of the route first, against
//! a real kube-apiserver, etcd and kube-controller-manager.
//!
//! The test plays the kubelet (pods marked Ready through pods/status) so
//! the canary really carries weight, then takes the canary away while
//! watching the HTTPRoutes, the Deployments and the Services of the
//! namespace together ([`support::timeline`]). Every event carries the
//! resourceVersion the API server gave it (etcd's revision, one counter for
//! all kinds): the route's change that drops the canary's backendRef must
//! come before the first sign of the canary's Deployment or Service going
//! away. Where the route cannot be written as wanted (InferencePool routing
//! chosen, its CRD absent: the route stays as it was), the canary stays
//! while the route names it.

use crate::support;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::timeline::{Timeline, assert_route_first, route_backends, story};
use crate::support::{
    Reconciler, WAIT, eventually, get, mark_pods_ready, merge_patch, wait_condition, wait_gone,
};
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::LeaseTiming;

const ENGINE: &str = "registry.example.com/vllm:0.9";

/// The tests take turns (only the Lease holder reconciles); a short lease
/// lets the next test's reconciler take over at once.
async fn reconciler(
    id: &str,
) -> (
    tokio::sync::MutexGuard<'static, ()>,
    Client,
    String,
    Reconciler,
) {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    let (cp, client, kubeconfig) = support::reconciler_setup(&[support::httproute_crd()]).await;
    let config = infergate::reconcile::Config {
        lease: LeaseTiming {
            duration_seconds: 6,
            grace_seconds: 2,
        },
        ..support::reconcile_config(id)
    };
    let reconciler = Reconciler::start(kubeconfig, config);
    let ns = cp.fresh_namespace(id).await;
    (turn, client, ns, reconciler)
}

/// Service `chat` with a manual canary at 20%, both tracks' pods Ready,
/// once the route sends the canary its 20%.
async fn canary_at_20(client: &Client, ns: &str) -> Api<InferenceService> {
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {
            "model": {"ref": "llama3-8b-q4"}, "engine": {"image": ENGINE}, "replicas": 1,
            "canary": {"model": {"ref": "llama3-8b-q5"}, "weight": 20, "replicas": 1},
            "routing": {"gateway": {"name": "gw", "namespace": "gateways"}}
        }
    }))
    .expect("service");
    let services: Api<InferenceService> = Api::namespaced(client.clone(), ns);
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create");
    mark_pods_ready(client, ns, "chat", "primary", 1).await;
    mark_pods_ready(client, ns, "chat", "canary", 1).await;
    eventually("the canary routed at 20%", WAIT, || async {
        let weights = weights(client, ns).await;
        (weights == [("chat".into(), 80), ("chat-canary".into(), 20)])
            .then_some(())
            .ok_or(format!("{weights:?}"))
    })
    .await;
    services
}

/// `(name, weight)` of the route's backendRefs.
async fn weights(client: &Client, ns: &str) -> Vec<(String, i32)> {
    route_backends(client, ns, "chat").await
}

/// Wait until the route names the primary alone and the canary's
/// Deployment and Service are gone; check in the story that they went only
/// after the route let go of the canary.
async fn gone_after_the_route(client: &Client, ns: &str, timeline: Timeline) {
    eventually("the route without the canary", WAIT, || async {
        let w = weights(client, ns).await;
        (w == [("chat".to_owned(), 100)])
            .then_some(())
            .ok_or(format!("{w:?}"))
    })
    .await;
    wait_gone::<Deployment>(client, ns, "chat-canary", WAIT).await;
    wait_gone::<Service>(client, ns, "chat-canary", WAIT).await;
    let seen = timeline.stop().await;
    let checked = assert_route_first(&seen, "chat", "chat-canary");
    assert!(
        checked >= 2,
        "the canary's Deployment and Service went:\n{}",
        story(&seen)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_canary_leaves_the_route_before_its_backends_go() {
    let (_turn, client, ns, _reconciler) = reconciler("canary").await;
    let services = canary_at_20(&client, &ns).await;

    let timeline = Timeline::start(&client, &ns).await;
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"canary": null}}),
        "remove the canary",
    )
    .await;
    gone_after_the_route(&client, &ns, timeline).await;
    // The primary stays.
    assert!(get::<Deployment>(&client, &ns, "chat").await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_stays_while_a_route_that_cannot_be_rewritten_names_it() {
    let (_turn, client, ns, _reconciler) = reconciler("canary-pools").await;
    let services = canary_at_20(&client, &ns).await;
    let timeline = Timeline::start(&client, &ns).await;

    // InferencePool routing without its CRD: the route stays as it was,
    // naming the canary's Service at 20%, so the canary removed in the
    // same change stays too.
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"canary": null, "routing": {"backendKind": "InferencePool",
               "endpointPicker": {"image": "registry.example.com/epp:v1"}}}}),
        "remove the canary, route through pools",
    )
    .await;
    wait_condition(
        &client,
        &ns,
        "chat",
        "RoutingReady",
        "False",
        "InferencePoolNotInstalled",
        WAIT,
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(
        weights(&client, &ns).await,
        [("chat".to_owned(), 80), ("chat-canary".to_owned(), 20)]
    );
    for (kind, exists) in [
        (
            "Deployment",
            get::<Deployment>(&client, &ns, "chat-canary")
                .await
                .is_some_and(|d| d.metadata.deletion_timestamp.is_none()),
        ),
        (
            "Service",
            get::<Service>(&client, &ns, "chat-canary")
                .await
                .is_some_and(|d| d.metadata.deletion_timestamp.is_none()),
        ),
    ] {
        assert!(
            exists,
            "the canary's {kind} went while the route names it:\n{}",
            story(&timeline.so_far())
        );
    }

    // Back to Services: the route is written without the canary, then the
    // canary goes.
    merge_patch(
        &services,
        "chat",
        json!({"spec": {"routing": {"backendKind": "Service"}}}),
        "route through Services",
    )
    .await;
    gone_after_the_route(&client, &ns, timeline).await;
}
