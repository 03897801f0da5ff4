//! End-to-end: optional APIs that come and go while services use them.
//!
//! Against the real control plane with the published HTTPRoute,
//! InferencePool, PodMonitor and KubeRay RayService CRDs, the reconciler
//! running as the ServiceAccount of `deploy/` (exactly its RBAC): each CRD
//! in turn is deleted while services have children of its kind, and
//! installed again. While it is missing the services that use it say so in
//! their conditions (a PodMonitor's absence fails nothing); after the
//! reinstall their children are made again within 30 s, also for a service
//! created after the reinstall; and the child watch of the vanished kind
//! neither floods errors nor restarts over and over (the reconciler's own
//! metrics count both).
//!
//! This binary deletes CRDs: it holds this one test, so no other test of
//! the binary loses a CRD under its feet.

use crate::support;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::wait::Namespaced;
use crate::support::{
    ControlPlane, GRAPH_TOKEN, GraphServer, Reconciler, WAIT, eventually, get, read_fixture,
    wait_condition, wait_exists,
};
use infergate::api::v1beta1::InferenceService;
use infergate::metrics::Metrics;
use infergate::reconcile::Config;
use infergate::reconcile::children::httproute::HTTPRoute;
use infergate::reconcile::children::inferencepool::InferencePool;
use infergate::reconcile::children::podmonitor::PodMonitor;
use infergate::reconcile::children::rayservice::RayService;

/// How soon after a reinstall the children must be back (the contract).
const BACK_WITHIN: Duration = Duration::from_secs(30);
/// How long a CRD stays missing after its services reported it: long
/// enough for a watch retrying without backoff to show.
const MISSING_FOR: Duration = Duration::from_secs(20);
/// Watch errors of a vanished kind allowed over one removal (the removal
/// is seen by discovery within 10 s; retries back off from 0.8 s).
const MAX_ERRORS_PER_REMOVAL: u64 = 8;

/// The value of the series `name{kind="KIND"}` in the reconciler's metrics.
fn series(metrics: &Metrics, name: &str, kind: &str) -> u64 {
    let text = metrics.encode().expect("metrics encode");
    let prefix = format!("{name}{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().expect("a counter value"))
}

/// Starts and errors of the child watch of `kind` so far.
fn watch_counts(metrics: &Metrics, kind: &str) -> (u64, u64) {
    (
        series(metrics, "infergate_child_watch_starts_total", kind),
        series(metrics, "infergate_child_watch_errors_total", kind),
    )
}

/// Wait until the reconciler follows `kind`'s CRD (its discovery says the
/// CRD is served and the kind's children are watched): only then is a
/// removal a change it can see. Just after a CRD is created, discovery can
/// still answer "not served" and that answer is trusted for 30 s.
async fn following(metrics: &Metrics, kind: &str) {
    support::eventually(
        &format!("the reconciler following {kind}"),
        WAIT,
        async || {
            let installed = series(metrics, "infergate_optional_api_installed", kind);
            (installed == 1)
                .then_some(())
                .ok_or_else(|| format!("infergate_optional_api_installed {installed}"))
        },
    )
    .await;
}

/// Delete the CRDs of `path` and wait until they are gone.
fn delete_crds(cp: &ControlPlane, path: &str) {
    let out = cp.kubectl(&["delete", "-f", path, "--wait=true", "--timeout=120s"]);
    assert!(
        out.status.success(),
        "kubectl delete -f {path} failed: {}",
        support::text(&out)
    );
}

/// Wait (up to [`BACK_WITHIN`]) until the child `K` `name` exists again.
async fn back<K: Namespaced>(client: &Client, ns: &str, name: &str, since: Instant) {
    let kind = K::kind(&());
    let left = BACK_WITHIN.saturating_sub(since.elapsed());
    eventually(&format!("{kind} {name} back"), left, async || {
        get::<K>(client, ns, name)
            .await
            .map(|_| ())
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
}

/// The graph token Secret of the namespace, readable by the reconciler.
async fn graph_token(cp: &ControlPlane, client: &Client, ns: &str) {
    support::set_graph_token(client, ns, GRAPH_TOKEN).await;
    cp.bind_graph_token_reader(ns);
}

/// A service routed through gateway `gw/inference-gw`, to InferencePools
/// (with owned endpoint pickers) or to Services.
fn routed_service(name: &str, pools: bool) -> InferenceService {
    let mut routing = json!({"gateway": {"name": "inference-gw", "namespace": "gateways"}});
    if pools {
        routing["backendKind"] = json!("InferencePool");
        routing["endpointPicker"] = json!({"image": "registry.example.com/epp:v1"});
    }
    serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {"model": {"ref": "llama3-8b"},
                 "engine": {"image": "registry.example.com/vllm:0.9"},
                 "replicas": 1, "routing": routing},
    }))
    .expect("service")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_crds_deleted_and_installed_again_while_services_use_them() {
    let crds = [
        support::httproute_crd(),
        support::inferencepool_crd(),
        support::podmonitor_crd(),
        support::rayservice_crd(),
    ];
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&crds).await;
    let ns = cp.fresh_namespace("optional").await;

    let server = GraphServer::start();
    server.set_graph(read_fixture("graph/rag.pb"), "\"v1\"");
    let fetcher = server.fetcher();
    let config: Config = support::reconcile_config("optional-e2e").with_graph_fetcher(fetcher);
    let metrics = config.metrics.clone();
    let _reconciler = Reconciler::start(sa_kubeconfig, config);
    support::allow_graph_host(&client, &ns, "127.0.0.1").await;
    graph_token(cp, &client, &ns).await;

    // `pools` routes through InferencePools, `direct` to its Services,
    // `rag` runs a RayService; each has a PodMonitor but `rag`.
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    for svc in [
        routed_service("pools", true),
        routed_service("direct", false),
        server.service("rag"),
    ] {
        services
            .create(&PostParams::default(), &svc)
            .await
            .expect("create service");
    }
    wait_exists::<InferencePool>(&client, &ns, "pools").await;
    wait_exists::<HTTPRoute>(&client, &ns, "pools").await;
    wait_exists::<HTTPRoute>(&client, &ns, "direct").await;
    wait_exists::<PodMonitor>(&client, &ns, "pools").await;
    wait_exists::<PodMonitor>(&client, &ns, "direct").await;
    wait_exists::<RayService>(&client, &ns, "rag").await;

    // ---------------------------------------------------------- InferencePool
    following(&metrics, "InferencePool").await;
    let (starts, errors) = watch_counts(&metrics, "InferencePool");
    delete_crds(cp, support::inferencepool_crd());
    let s = wait_condition(
        &client,
        &ns,
        "pools",
        "RoutingReady",
        "False",
        "InferencePoolNotInstalled",
        WAIT,
    )
    .await;
    let message = support::condition(&s, "RoutingReady").unwrap().message;
    assert!(
        message.contains("inferencepools.inference.networking.k8s.io"),
        "{message}"
    );
    tokio::time::sleep(MISSING_FOR).await;
    cp.apply_crds(support::inferencepool_crd(), true);
    let reinstalled = Instant::now();
    // A service made right after the reinstall gets its pool too.
    let mut late = routed_service("late", true);
    late.metadata.namespace = Some(ns.clone());
    services
        .create(&PostParams::default(), &late)
        .await
        .expect("create late service");
    back::<InferencePool>(&client, &ns, "pools", reinstalled).await;
    back::<InferencePool>(&client, &ns, "late", reinstalled).await;
    wait_condition(
        &client,
        &ns,
        "late",
        "RoutingReady",
        "True",
        "RouteApplied",
        BACK_WITHIN.saturating_sub(reinstalled.elapsed()) + Duration::from_secs(5),
    )
    .await;
    assert_watch_followed(&metrics, "InferencePool", starts, errors);

    // ---------------------------------------------------------- Gateway API
    following(&metrics, "HTTPRoute").await;
    let (starts, errors) = watch_counts(&metrics, "HTTPRoute");
    delete_crds(cp, support::httproute_crd());
    for name in ["direct", "pools"] {
        wait_condition(
            &client,
            &ns,
            name,
            "RoutingReady",
            "False",
            "GatewayAPINotInstalled",
            WAIT,
        )
        .await;
    }
    tokio::time::sleep(MISSING_FOR).await;
    cp.apply_crds(support::httproute_crd(), true);
    let reinstalled = Instant::now();
    for name in ["direct", "pools", "late"] {
        back::<HTTPRoute>(&client, &ns, name, reinstalled).await;
    }
    assert_watch_followed(&metrics, "HTTPRoute", starts, errors);

    // ----------------------------------------------------------- PodMonitor
    following(&metrics, "PodMonitor").await;
    let (starts, errors) = watch_counts(&metrics, "PodMonitor");
    delete_crds(cp, support::podmonitor_crd());
    tokio::time::sleep(MISSING_FOR).await;
    // Nothing fails without it.
    for name in ["direct", "pools"] {
        let s = get::<InferenceService>(&client, &ns, name)
            .await
            .expect("service");
        let reconciled = support::condition(&s, "Reconciled").expect("Reconciled");
        assert_eq!(reconciled.status, "True", "{name}: {reconciled:?}");
    }
    cp.apply_crds(support::podmonitor_crd(), true);
    let reinstalled = Instant::now();
    for name in ["direct", "pools", "late"] {
        back::<PodMonitor>(&client, &ns, name, reinstalled).await;
    }
    assert_watch_followed(&metrics, "PodMonitor", starts, errors);

    // --------------------------------------------------------------- KubeRay
    following(&metrics, "RayService").await;
    let (starts, errors) = watch_counts(&metrics, "RayService");
    delete_crds(cp, support::rayservice_crd());
    wait_condition(
        &client,
        &ns,
        "rag",
        "Reconciled",
        "False",
        "RayServiceNotInstalled",
        WAIT,
    )
    .await;
    tokio::time::sleep(MISSING_FOR).await;
    cp.apply_crds(support::rayservice_crd(), true);
    let reinstalled = Instant::now();
    back::<RayService>(&client, &ns, "rag", reinstalled).await;
    assert_watch_followed(&metrics, "RayService", starts, errors);
}

/// Over one removal and reinstall of `kind`'s CRD: its child watch was
/// started once more (no restart storm) and erred a bounded number of
/// times (no retries every few milliseconds).
#[track_caller]
fn assert_watch_followed(metrics: &Metrics, kind: &str, starts: u64, errors: u64) {
    let (starts_now, errors_now) = watch_counts(metrics, kind);
    assert_eq!(
        starts_now,
        starts + 1,
        "{kind}: the child watch starts once per installation"
    );
    assert!(
        errors_now - errors <= MAX_ERRORS_PER_REMOVAL,
        "{kind}: {} watch errors over one removal",
        errors_now - errors
    );
    assert_eq!(
        series(metrics, "infergate_optional_api_installed", kind),
        1,
        "{kind}: installed again"
    );
}
