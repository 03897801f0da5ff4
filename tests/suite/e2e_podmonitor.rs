//! End-to-end: engine metrics scraped where the Prometheus Operator runs.
//!
//! Against the real control plane, with the reconciler running as the
//! ServiceAccount of `deploy/` (exactly its RBAC): without the PodMonitor
//! CRD a service is reconciled and nothing fails; once the published CRD
//! (from the prometheus-operator Go module) is installed, the PodMonitor
//! appears without a restart, from the service's `spec.metrics` and a
//! policy's `defaults.metrics`, and follows later changes. (No Prometheus
//! runs here: a real cluster's Prometheus would scrape the pods the
//! PodMonitor selects; the selector itself is checked in the unit tests.)

use crate::support;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{Reconciler, eventually, wait_condition, wait_exists};
use infergate::api::InferencePolicy;
use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::podmonitor::{self, PodMonitor};
use k8s_openapi::api::apps::v1::Deployment;

/// An optional CRD is picked up within 30 s of being installed.
const APPEAR: Duration = Duration::from_secs(30);

/// Whether the API server serves `monitoring.coreos.com/v1` `podmonitors`.
async fn podmonitors_served(client: &Client) -> bool {
    client
        .list_api_group_resources(podmonitor::API_VERSION)
        .await
        .is_ok_and(|l| l.resources.iter().any(|r| r.name == podmonitor::PLURAL))
}

/// `(portNumber, path, interval)` of the PodMonitor's one endpoint.
fn endpoint(m: &PodMonitor) -> Option<(i32, String, String)> {
    match m.spec.pod_metrics_endpoints.as_slice() {
        [e] => Some((e.port_number?, e.path.clone()?, e.interval.clone()?)),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podmonitors_appear_with_the_crd_and_follow_the_spec() {
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[]).await;
    let ns = cp.fresh_namespace("metrics").await;
    assert!(
        !podmonitors_served(&client).await,
        "this test starts without the PodMonitor CRD"
    );

    // A namespace policy sets the scrape interval; the service its port.
    let policy: InferencePolicy = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
        "metadata": {"name": "metrics", "namespace": ns},
        "spec": {"defaults": {"metrics": {"interval": "15s"}}},
    }))
    .expect("policy");
    Api::<InferencePolicy>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &policy)
        .await
        .expect("create policy");
    let _reconciler = Reconciler::start(sa_kubeconfig, support::reconcile_config("metrics-e2e"));
    let svc: InferenceService = serde_json::from_value(json!({
        "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": ns},
        "spec": {"model": {"ref": "llama3-8b"},
                 "engine": {"image": "registry.example.com/vllm:0.9", "port": 8080},
                 "replicas": 1},
    }))
    .expect("service");
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");

    // Without the CRD: reconciled, nothing failed.
    wait_exists::<Deployment>(&client, &ns, "chat").await;
    let s = wait_condition(
        &client,
        &ns,
        "chat",
        "Reconciled",
        "True",
        "Applied",
        support::WAIT,
    )
    .await;
    assert!(
        support::condition(&s, "Ready").is_some(),
        "status written without the PodMonitor CRD: {:?}",
        s.status
    );

    // The published CRD arrives; the PodMonitor follows, no restart.
    cp.apply_crds(support::podmonitor_crd(), true);
    let monitors: Api<PodMonitor> = Api::namespaced(client.clone(), &ns);
    let m = eventually("PodMonitor chat", APPEAR, async || {
        monitors
            .get_opt("chat")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "not yet".to_owned())
    })
    .await;
    assert_eq!(
        endpoint(&m),
        Some((8080, "/metrics".to_owned(), "15s".to_owned())),
        "the engine port, the built-in path, the policy's interval"
    );
    assert_eq!(m.spec.pod_target_labels, ["infergate.dev/track"]);
    let owner = m
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .expect("owner reference");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("InferenceService", "chat")
    );
    assert_eq!(
        m.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("infergate")
    );

    // The service's own spec.metrics wins over the policy, and changes reach it.
    services
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"metrics": {"port": 9090, "path": "/stats", "interval": "90s"}}}),
            ),
        )
        .await
        .expect("patch metrics");
    eventually(
        "the PodMonitor to follow spec.metrics",
        support::WAIT,
        async || {
            let m = monitors.get("chat").await.map_err(|e| e.to_string())?;
            let got = endpoint(&m);
            (got == Some((9090, "/stats".to_owned(), "1m30s".to_owned())))
                .then_some(())
                .ok_or_else(|| format!("{got:?}"))
        },
    )
    .await;
}
