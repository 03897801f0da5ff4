//! End-to-end with the real KubeRay operator (built from its Go module at
//! the pinned version, with its own CRDs); the reconciler runs as the
//! ServiceAccount of deploy/ with exactly its RBAC.
//!
//! - KubeRay accepts the RayService infergate writes and builds a RayCluster
//!   whose head and worker groups are the ones infergate asked for, with the
//!   Serve config generated from the fetched graph; a new graph version on
//!   the server updates the RayService and KubeRay takes it up.
//! - Scaling reaches the Ray cluster KubeRay built, without a new cluster:
//!   KubeRay leaves a worker group's replica counts out of its cluster hash
//!   and copies them only into a new RayCluster, so infergate sets them on
//!   the RayService's active (and pending) RayCluster itself.
//!
//! - A service with a gateway is routed like a Deployment-backed one, to
//!   KubeRay's serve Service, once that Service exists: `RoutingReady`
//!   says what it waits for until then (with the published Gateway API
//!   HTTPRoute CRD).
//!
//! No kubelet runs here: KubeRay's pods are created but never start, so the
//! head never becomes ready, KubeRay never reaches the Ray dashboard to
//! deploy the Serve applications, and the RayService stays `Ready=False`
//! (`Initializing`). On a real cluster the head would start, KubeRay would
//! submit the Serve config, the applications would turn `RUNNING` in
//! `status.activeServiceStatus.applicationStatuses`, and the serve Service
//! would get endpoints.

use crate::support;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, ObjectMeta, PostParams};
use serde_json::{Value, json};

use crate::support::{
    GRAPH_TOKEN, GraphServer, Reconciler, condition, eventually, merge_patch, read_fixture,
};
use infergate::api::v1beta1::InferenceService;
use infergate::graph::fetch::{FetchOptions, GraphFetcher, TOKEN_HOSTS_ANNOTATION};
use infergate::graph::serve_config::ServeConfig;
use infergate::reconcile::Config;
use infergate::reconcile::children::raycluster::RayCluster;
use infergate::reconcile::children::rayservice::{RayService, WORKER_GROUP};

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

/// What each test runs on: a namespace watched by its own KubeRay operator,
/// a graph server on loopback serving `rag.pb` (allowed by the namespace's
/// policy, with a token whose Secret allows it and a RoleBinding that lets
/// infergate read it), and the reconciler as deploy/'s ServiceAccount.
pub(crate) struct Setup {
    _reconciler: Reconciler,
    pub(crate) kuberay: support::KubeRay,
    pub(crate) server: GraphServer,
    pub(crate) ns: String,
    pub(crate) client: kube::Client,
    /// The tests take turns: each runs its own reconciler, and only the
    /// Lease holder reconciles. Declared last, so dropped last: the turn
    /// passes on once the rest has stopped.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// (Other modules' tests call it for a plane of their own: the plane is
/// the calling test's module's.)
pub(crate) async fn setup(prefix: &str) -> Setup {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[support::httproute_crd()]).await;
    let ns = cp.fresh_namespace(prefix).await;
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
    cp.bind_graph_token_reader(&ns);

    let fetcher = Arc::new(
        GraphFetcher::new(FetchOptions::default(), vec![server.ca.clone()]).expect("fetcher"),
    );
    let config = Config {
        graph_resync: Duration::from_secs(2),
        ..support::reconcile_config(&format!("{prefix}-e2e")).with_graph_fetcher(fetcher)
    };
    let _reconciler = Reconciler::start(sa_kubeconfig, config);

    Setup {
        _turn: turn,
        client,
        ns,
        server,
        kuberay,
        _reconciler,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_reaches_the_ray_cluster_kuberay_built_without_a_new_one() {
    let s = setup("kuberay").await;
    let (client, ns, server) = (s.client.clone(), s.ns.clone(), &s.server);
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
        merge_patch(
            &services,
            "rag",
            json!({"spec": {"replicas": replicas}}),
            "scale",
        )
        .await;
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
}

/// `value` at the JSON `pointer`, or a panic naming it.
fn at<'v>(value: &'v Value, pointer: &str) -> &'v Value {
    value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} missing in {value}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kuberay_builds_the_cluster_infergate_asked_for_and_takes_up_a_new_graph() {
    let s = setup("kuberay-graph").await;
    let (client, ns, server) = (s.client.clone(), s.ns.clone(), &s.server);
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    services
        .create(&PostParams::default(), &server.service("rag"))
        .await
        .expect("create service");

    // KubeRay builds one RayCluster for the RayService and reports it as
    // pending: it becomes active only once its Serve applications run.
    let rayservices: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<RayService>(&()));
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<RayCluster>(&()));
    let (rs, cluster) = eventually(
        "KubeRay's RayCluster for the RayService",
        WAIT,
        async || {
            let rs = rayservices
                .get_opt("rag")
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no RayService yet")?;
            let name = rs.data["status"]["pendingServiceStatus"]["rayClusterName"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or("no pending cluster in the RayService's status")?
                .to_owned();
            let cluster = clusters
                .get_opt(&name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the active cluster does not exist")?;
            Ok::<_, String>((rs, cluster))
        },
    )
    .await;
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();

    // The head and worker groups are the ones infergate wrote into the
    // RayService (images, resources, Ray start parameters, worker counts).
    let want = at(&rs.data, "/spec/rayClusterConfig");
    let got = at(&cluster.data, "/spec");
    for pointer in [
        "/headGroupSpec/rayStartParams",
        "/headGroupSpec/template/spec/containers/0/image",
        "/headGroupSpec/template/spec/containers/0/resources",
        "/workerGroupSpecs/0/groupName",
        "/workerGroupSpecs/0/rayStartParams",
        "/workerGroupSpecs/0/replicas",
        "/workerGroupSpecs/0/template/spec/containers/0/image",
        "/workerGroupSpecs/0/template/spec/containers/0/resources",
    ] {
        assert_eq!(at(got, pointer), at(want, pointer), "RayCluster {pointer}");
    }
    assert_eq!(at(got, "/workerGroupSpecs/0/groupName"), WORKER_GROUP);
    // KubeRay made the head pod from that template (no kubelet starts it).
    eventually("the head pod", WAIT, async || {
        let pods = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels(&format!(
                "ray.io/cluster={cluster_name},ray.io/node-type=head"
            )))
            .await
            .map_err(|e| e.to_string())?;
        (pods.items.len() == 1)
            .then_some(())
            .ok_or_else(|| format!("{} head pods", pods.items.len()))
    })
    .await;

    // The Serve config is the one generated from the fetched graph.
    let graph = infergate::graph::decode(&read_fixture("graph/rag.pb")).expect("graph");
    let typed: RayService =
        serde_json::from_value(serde_json::to_value(&rs).expect("json")).expect("typed RayService");
    let config: ServeConfig =
        serde_saphyr::from_str(&typed.spec.serve_config_v2).expect("serveConfigV2");
    let route = format!("/{ns}/rag");
    assert_eq!(
        config,
        infergate::graph::serve_config::generate(&graph, "rag", &route).expect("generate")
    );

    // KubeRay accepted it: no validation or failure events, no failed
    // condition. (KubeRay racing its own cache, a create of the RayCluster
    // it has just made, is no complaint about what infergate wrote: it
    // goes on with the cluster that exists.)
    let events = Api::<CoreEvent>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("events");
    let own_race = |e: &CoreEvent| {
        e.reason.as_deref() == Some("FailedToCreateRayCluster")
            && e.message
                .as_deref()
                .is_some_and(|m| m.ends_with(&format!("\"{cluster_name}\" already exists")))
    };
    let complaints: Vec<String> = events
        .items
        .iter()
        .filter(|e| {
            matches!(
                e.involved_object.kind.as_deref(),
                Some("RayService" | "RayCluster")
            ) && e.type_.as_deref() == Some("Warning")
                && !own_race(e)
        })
        .map(|e| format!("{:?}: {:?}", e.reason, e.message))
        .collect();
    assert!(complaints.is_empty(), "KubeRay complained: {complaints:?}");
    let conditions = rs.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .all(|c| !c["reason"].as_str().unwrap_or_default().contains("Invalid")),
        "{conditions:?}"
    );

    // A new graph version on the server: infergate updates the RayService;
    // KubeRay reconciles it and, the cluster spec being the same, keeps the
    // cluster it is preparing (no new RayCluster): the new Serve config goes
    // to that cluster once its head is ready. Without a kubelet it waits
    // there: Ready=False (Initializing), the same cluster pending, none active.
    let before = rs.metadata.generation.unwrap_or_default();
    let waits = |log: &str| log.matches("The head Pod is not ready, requeue").count();
    let waits_before = waits(&std::fs::read_to_string(&s.kuberay.log).unwrap_or_default());
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    let written = eventually("infergate to write the new graph", WAIT, async || {
        let rs = rayservices.get("rag").await.map_err(|e| e.to_string())?;
        let generation = rs.metadata.generation.unwrap_or_default();
        let serve = rs.data["spec"]["serveConfigV2"]
            .as_str()
            .unwrap_or_default();
        (generation > before && serve.contains("name: reranker"))
            .then_some(rs)
            .ok_or_else(|| format!("generation {generation}"))
    })
    .await;
    // KubeRay reconciles the new generation and goes on waiting for the
    // cluster's head (it writes the RayService's status, observedGeneration
    // included, only once the head is ready).
    eventually("KubeRay to reconcile the update", WAIT, async || {
        let log = std::fs::read_to_string(&s.kuberay.log).map_err(|e| e.to_string())?;
        (waits(&log) > waits_before + 1)
            .then_some(())
            .ok_or_else(|| "no new reconcile in KubeRay's log".to_owned())
    })
    .await;
    let updated = rayservices.get("rag").await.expect("RayService");
    assert_eq!(
        updated.data["spec"], written.data["spec"],
        "KubeRay changed nothing in the spec"
    );
    assert_eq!(
        updated.data["status"]["observedGeneration"].as_i64(),
        Some(before),
        "KubeRay reports the new generation only once the head is ready"
    );
    let status = &updated.data["status"];
    let ready = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("Initializing")),
        "waiting for a healthy cluster: {status}"
    );
    assert_eq!(
        status["pendingServiceStatus"]["rayClusterName"].as_str(),
        Some(cluster_name.as_str()),
        "the same cluster, still pending: {status}"
    );
    assert!(
        status["activeServiceStatus"]["rayClusterName"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "no cluster active before one is healthy: {status}"
    );
    let all = clusters
        .list(&ListParams::default())
        .await
        .expect("list clusters");
    assert_eq!(all.items.len(), 1, "still one RayCluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_rayservice_waits_for_kuberays_serve_service_then_routes_to_it() {
    use infergate::api::GatewayRef;
    use infergate::api::v1beta1::RoutingSpec;
    use infergate::reconcile::children::httproute::HTTPRoute;
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    let s = setup("kuberay-route").await;
    let (client, ns, server) = (s.client.clone(), s.ns.clone(), &s.server);
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let mut svc = server.service("rag");
    svc.spec.routing = Some(RoutingSpec {
        gateway: Some(GatewayRef {
            name: "public".into(),
            namespace: Some("infra".into()),
        }),
        request_timeout: Some("45s".into()),
        ..RoutingSpec::default()
    });
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    let path = format!("/{ns}/rag");

    // The RayService's Serve application takes what the route sends: the
    // route rewrites the rendered path to `/`.
    let rs: RayService =
        support::wait_for(&client, &ns, "rag", "the RayService", WAIT, |_| true).await;
    let config: ServeConfig =
        serde_saphyr::from_str(&rs.spec.serve_config_v2).expect("serveConfigV2");
    assert_eq!(config.applications[0].route_prefix, "/");

    // KubeRay makes the serve Service only once the Serve applications
    // run, which they never do here: RoutingReady says what it waits for,
    // and no route names a Service that does not exist.
    let waiting = support::wait_for::<InferenceService>(
        &client,
        &ns,
        "rag",
        "RoutingReady=False, ServeServiceMissing",
        WAIT,
        |s| condition(s, "RoutingReady").is_some_and(|c| c.reason == "ServeServiceMissing"),
    )
    .await;
    let msg = condition(&waiting, "RoutingReady")
        .expect("RoutingReady")
        .message;
    assert!(
        msg.contains("rag-serve-svc: it does not exist yet")
            && msg.contains("gateway infra/public"),
        "{msg}"
    );
    let routes: Api<HTTPRoute> = Api::namespaced(client.clone(), &ns);
    assert!(routes.get_opt("rag").await.expect("get route").is_none());

    // Stand in for KubeRay once its cluster serves: the serve Service as
    // KubeRay makes it (name, labels, port `serve`, owned by the RayService).
    let owner = OwnerReference {
        api_version: "ray.io/v1".into(),
        kind: "RayService".into(),
        name: "rag".into(),
        uid: rs.metadata.uid.clone().expect("uid"),
        controller: Some(true),
        block_owner_deletion: None,
    };
    Api::<Service>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &Service {
                metadata: ObjectMeta {
                    name: Some("rag-serve-svc".into()),
                    labels: Some(
                        [
                            ("ray.io/originated-from-cr-name", "rag"),
                            ("ray.io/originated-from-crd", "RayService"),
                            ("ray.io/serve", "rag-serve"),
                        ]
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .into(),
                    ),
                    owner_references: Some(vec![owner]),
                    ..ObjectMeta::default()
                },
                spec: Some(ServiceSpec {
                    selector: Some([("ray.io/serve".to_owned(), "true".to_owned())].into()),
                    ports: Some(vec![ServicePort {
                        name: Some("serve".into()),
                        port: 8000,
                        ..ServicePort::default()
                    }]),
                    ..ServiceSpec::default()
                }),
                ..Service::default()
            },
        )
        .await
        .expect("create the serve Service");

    // The route follows within the recheck: the rendered path, the same
    // rewrite and timeout as a Deployment-backed service, to the serve port.
    let route: HTTPRoute =
        support::wait_for(&client, &ns, "rag", "the HTTPRoute", WAIT, |_| true).await;
    let rule = &route.spec.rules[0];
    let m = rule.matches[0].path.as_ref().expect("path match");
    assert_eq!(
        (m.r#type.as_deref(), m.value.as_deref()),
        (Some("PathPrefix"), Some(path.as_str()))
    );
    let rewrite = rule.filters[0]
        .url_rewrite
        .as_ref()
        .and_then(|u| u.path.as_ref())
        .expect("URLRewrite");
    assert_eq!(rewrite.replace_prefix_match.as_deref(), Some("/"));
    assert_eq!(
        rule.timeouts.as_ref().and_then(|t| t.request.as_deref()),
        Some("45s")
    );
    let backends: Vec<_> = rule
        .backend_refs
        .iter()
        .map(|b| (b.name.as_str(), b.port))
        .collect();
    assert_eq!(backends, [("rag-serve-svc", Some(8000))]);
    let parent = &route.spec.parent_refs[0];
    assert_eq!(
        (parent.name.as_str(), parent.namespace.as_deref()),
        ("public", Some("infra"))
    );
    let owner = &route.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("InferenceService", "rag")
    );
    let routed = support::wait_for::<InferenceService>(
        &client,
        &ns,
        "rag",
        "RoutingReady=True",
        WAIT,
        |s| condition(s, "RoutingReady").is_some_and(|c| c.status == "True"),
    )
    .await;
    let st = routed.status.expect("status");
    assert_eq!(st.route_path.as_deref(), Some(path.as_str()));
    assert_eq!(st.request_timeout.as_deref(), Some("45s"));
}
