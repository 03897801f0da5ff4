//! End-to-end with the real KubeRay operator (built from its Go module at
//! the pinned version, with its own CRDs): scaling a RayService-backed
//! service reaches the Ray cluster KubeRay built, without a new cluster.
//!
//! KubeRay leaves a worker group's replica counts out of its cluster hash and
//! copies them only into a new RayCluster, so a change of `spec.replicas`
//! alone would never reach the running cluster. infergate sets them on the
//! RayService's active (and pending) RayCluster itself; the reconciler runs
//! as the ServiceAccount of deploy/ with exactly its RBAC.

mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use infergate::api::v1beta1::InferenceService;
use infergate::graph::fetch::{FetchOptions, GraphFetcher, TOKEN_HOSTS_ANNOTATION};
use infergate::reconcile::Config;
use infergate::reconcile::children::raycluster::RayCluster;
use infergate::reconcile::children::rayservice::{RayService, WORKER_GROUP};
use support::{GRAPH_TOKEN, GraphServer, Reconciler, condition, eventually, read_fixture};

const WAIT: Duration = Duration::from_secs(90);

/// The worker group's `(replicas, minReplicas, maxReplicas)` of `cluster`.
fn counts(cluster: &RayCluster) -> Option<(i32, i32, i32)> {
    let g = cluster
        .spec
        .worker_group_specs
        .iter()
        .find(|g| g.group_name == WORKER_GROUP)?;
    Some((g.replicas?, g.min_replicas?, g.max_replicas?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_reaches_the_ray_cluster_kuberay_built_without_a_new_one() {
    support::init_tracing();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    let client = cp.client().await;
    let sa_kubeconfig = cp.deployed_service_account().await;
    let ns = cp.fresh_namespace("kuberay").await;
    let kuberay = cp.start_kuberay(&ns);

    // The graph server on loopback, allowed by the namespace's policy; the
    // token's Secret allows it; the namespace lets infergate read the token.
    let server = GraphServer::start();
    server.set_graph(read_fixture("graph/rag.pb"), "\"v1\"");
    support::allow_graph_host(&client, &ns, "127.0.0.1").await;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("graph-token".into()),
                    annotations: Some(
                        [(TOKEN_HOSTS_ANNOTATION.to_owned(), "127.0.0.1".to_owned())].into(),
                    ),
                    ..ObjectMeta::default()
                },
                data: Some(
                    [(
                        "token".to_owned(),
                        ByteString(GRAPH_TOKEN.as_bytes().to_vec()),
                    )]
                    .into(),
                ),
                ..Secret::default()
            },
        )
        .await
        .expect("secret");
    let out = cp.kubectl(&[
        "create",
        "rolebinding",
        "infergate-graph-token-reader",
        "--namespace",
        &ns,
        "--clusterrole",
        "infergate-graph-token-reader",
        "--serviceaccount",
        "infergate-system:infergate",
    ]);
    assert!(out.status.success(), "{}", support::text(&out));

    let fetcher = Arc::new(
        GraphFetcher::new(FetchOptions::default(), vec![server.ca.clone()]).expect("fetcher"),
    );
    let config = Config {
        graph_resync: Duration::from_secs(2),
        ..support::reconcile_config("kuberay-e2e").with_graph_fetcher(fetcher)
    };
    let _reconciler = Reconciler::start(sa_kubeconfig, config);

    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let mut svc = server.service("rag");
    svc.spec.replicas = Some(2);
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");

    // KubeRay builds a cluster for the RayService infergate applied.
    let rayservices: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let clusters: Api<RayCluster> = Api::namespaced(client.clone(), &ns);
    let name = eventually("KubeRay's RayCluster", WAIT, async || {
        let rs = rayservices
            .get_opt("rag")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no RayService yet")?;
        let names = infergate::reconcile::children::raycluster::cluster_names(&rs);
        let name = names
            .first()
            .cloned()
            .ok_or("no cluster named in its status")?;
        let c = clusters
            .get_opt(&name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("named cluster not found")?;
        (counts(&c) == Some((2, 2, 2)))
            .then_some(name)
            .ok_or_else(|| format!("workers {:?}", counts(&c)))
    })
    .await;

    // 2 -> 3 -> 1 reaches that cluster's worker group; no other cluster.
    for replicas in [3, 1] {
        services
            .patch(
                "rag",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .expect("scale");
        eventually(&format!("{replicas} workers on {name}"), WAIT, async || {
            let c = clusters.get(&name).await.map_err(|e| e.to_string())?;
            (counts(&c) == Some((replicas, replicas, replicas)))
                .then_some(())
                .ok_or_else(|| format!("workers {:?}", counts(&c)))
        })
        .await;
        // KubeRay acts on it: that many worker pods (not terminating).
        eventually(&format!("{replicas} worker pods"), WAIT, async || {
            let pods = Api::<Pod>::namespaced(client.clone(), &ns)
                .list(&ListParams::default().labels(&format!(
                    "ray.io/cluster={name},ray.io/group={WORKER_GROUP}"
                )))
                .await
                .map_err(|e| e.to_string())?;
            let live = pods
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            (live == usize::try_from(replicas).unwrap_or_default())
                .then_some(())
                .ok_or_else(|| format!("{live} worker pods"))
        })
        .await;
        let all = clusters
            .list(&ListParams::default())
            .await
            .expect("list clusters");
        let names: Vec<_> = all
            .items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        assert_eq!(names, std::slice::from_ref(&name), "no new cluster");
    }

    // Status reports the workers the cluster has.
    eventually("status.replicas from the cluster", WAIT, async || {
        let s = services.get("rag").await.map_err(|e| e.to_string())?;
        let replicas = s.status.as_ref().and_then(|st| st.replicas);
        let graph = condition(&s, "GraphReady").map(|c| c.status);
        (replicas == Some(1) && graph.as_deref() == Some("True"))
            .then_some(())
            .ok_or_else(|| format!("replicas {replicas:?}, GraphReady {graph:?}"))
    })
    .await;
    drop(kuberay);
}
