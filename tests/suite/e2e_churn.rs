//! End-to-end: what the reconciler remembers per service and child goes
//! with them. Two thousand services created and deleted against a real
//! kube-apiserver leave the reconciler's remembered entries
//! (`infergate_reconciler_remembered_entries`) where they started.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

use crate::support::{self, Reconciler, WAIT, control_plane, eventually, wait_exists};
use infergate::api::v1beta1::InferenceService;
use infergate::metrics::Metrics;
use infergate::reconcile::Config;

const SERVICES: usize = 2000;

/// The gauge of the reconciler's remembered entries, as `/metrics` shows it.
fn remembered(metrics: &Metrics) -> i64 {
    let text = metrics.encode().expect("metrics encode");
    text.lines()
        .find_map(|l| l.strip_prefix("infergate_reconciler_remembered_entries "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no remembered-entries gauge in:\n{text}"))
}

async fn deployments(client: &kube::Client, ns: &str) -> usize {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .list_metadata(&ListParams::default())
        .await
        .map_or(0, |l| l.items.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_services_come_and_go_and_the_remembered_entries_return_to_their_start() {
    support::init_tracing();
    let cp = control_plane().await;
    cp.install_crds().await;
    cp.ensure_namespace(support::SYSTEM_NAMESPACE).await;
    let client = cp.client().await;
    let metrics = Metrics::new();
    let config = Config {
        metrics: metrics.clone(),
        ..support::reconcile_config("churn")
    };
    let reconciler = Reconciler::start(cp.kubeconfig().to_path_buf(), config);

    // One service that stays: the start is what the reconciler remembers
    // of it.
    let ns = cp.fresh_namespace("churn").await;
    let spec = json!({"model": {"ref": "m"}, "engine": {"image": "registry.example.com/vllm:0.9"},
                      "replicas": 1});
    support::create_service_json(&client, &ns, "resident", spec.clone()).await;
    let _: Deployment = wait_exists(&client, &ns, "resident").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = remembered(&metrics);

    let many = cp.fresh_namespace("churn-many").await;
    let began = Instant::now();
    futures::stream::iter(0..SERVICES)
        .map(|i| {
            let (client, many, spec) = (client.clone(), many.clone(), spec.clone());
            async move {
                support::create_service_json(&client, &many, &format!("s{i}"), spec).await;
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
    eventually(
        &format!("{SERVICES} services reconciled"),
        Duration::from_secs(300),
        || async { (deployments(&client, &many).await >= SERVICES).then_some(()) },
    )
    .await;
    let peak = remembered(&metrics);
    println!(
        "{SERVICES} services created and reconciled in {:.1}s; remembered entries: start {start}, with them {peak}",
        began.elapsed().as_secs_f64()
    );
    assert!(
        peak >= start + i64::try_from(SERVICES).expect("count"),
        "the reconciler remembers something per service ({start} -> {peak})"
    );

    let services: Api<InferenceService> = Api::namespaced(client.clone(), &many);
    services
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("delete every service");
    eventually("every service gone", Duration::from_secs(300), || async {
        let left = services
            .list_metadata(&ListParams::default())
            .await
            .ok()?
            .items
            .len();
        (left == 0).then_some(())
    })
    .await;
    let deadline = Instant::now() + WAIT;
    let back = loop {
        let now = remembered(&metrics);
        if now == start {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "the remembered entries stay at {now}, not back at their start {start}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "{SERVICES} services deleted; remembered entries {back} (start {start}) after {:.1}s",
        began.elapsed().as_secs_f64()
    );
    // The one that stayed is still reconciled.
    let kept: Vec<_> = Api::<InferenceService>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(kept.len(), 1);
    reconciler.stop();
}
