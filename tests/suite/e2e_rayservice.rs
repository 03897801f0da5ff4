//! End-to-end: `backend: RayService` against a real kube-apiserver with the
//! minimal ray.io/v1 RayService CRD and a local HTTPS graph server (bearer
//! check, ETag). The reconciler runs in-process on its own thread and
//! runtime, trusting the graph server's CA through its fetcher, as the
//! ServiceAccount of deploy/ with only deploy/rbac.yaml's permissions.

use crate::support;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{
    GRAPH_TOKEN, GraphServer, Reconciler, WAIT, condition, read_fixture, wait_for,
};
use infergate::api::v1beta1::InferenceService;
use infergate::graph::serve_config::ServeConfig;
use infergate::reconcile::Config;
use infergate::reconcile::children::rayservice::RayService;

/// Wait until the service satisfies `pred`; return it.
async fn wait_service(
    client: &Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&InferenceService) -> bool,
) -> InferenceService {
    wait_for(client, ns, "rag", what, WAIT, pred).await
}

/// Wait until the RayService exists and satisfies `pred`; return it.
async fn wait_rayservice(
    client: &Client,
    ns: &str,
    what: &str,
    pred: impl Fn(&RayService) -> bool,
) -> RayService {
    wait_for(client, ns, "rag", what, WAIT, pred).await
}

fn graph_condition(reason: &'static str) -> impl Fn(&InferenceService) -> bool {
    move |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "False" && c.reason == reason)
            && condition(s, "Reconciled").is_some_and(|c| c.reason == reason)
    }
}

/// A failure once a graph was applied: the last good graph keeps serving
/// (`GraphReady=False`, `StaleGraph`, naming the failure's reason), and
/// `Reconciled` carries the failure's reason.
fn stale_condition(reason: &'static str) -> impl Fn(&InferenceService) -> bool {
    move |s| {
        condition(s, "GraphReady").is_some_and(|c| {
            c.status == "False"
                && c.reason == "StaleGraph"
                && c.message
                    .contains(&format!("the latest fetch failed: {reason}: "))
        }) && condition(s, "Reconciled").is_some_and(|c| c.reason == reason)
    }
}

/// The tests of this file take turns: only the Lease holder reconciles, and
/// each test's reconciler trusts only its own graph server.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn serve_config(rs: &RayService) -> ServeConfig {
    serde_saphyr::from_str(&rs.spec.serve_config_v2).expect("serveConfigV2 parses")
}

// -------------------------------------------------------------------- test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayservice_follows_the_graph_and_graph_failures_leave_it_alone() {
    let _turn = TURN.lock().await;
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[support::rayservice_crd()]).await;
    let ns = cp.fresh_namespace("ray").await;

    let server = GraphServer::start();
    server.set_graph(read_fixture("graph/rag.pb"), "\"v1\"");
    let fetcher = server.fetcher();
    let config = Config {
        graph_resync: Duration::from_secs(2),
        ..support::reconcile_config("rayservice-e2e").with_graph_fetcher(fetcher)
    };
    let _reconciler = Reconciler::start(sa_kubeconfig, config);

    // The graph server is on loopback: the namespace's policy lists it
    // literally, and the Secret's owner lets the token go there.
    support::allow_graph_host(&client, &ns, "127.0.0.1").await;
    support::set_graph_token(&client, &ns, GRAPH_TOKEN).await;
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let rayservices: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let svc = services
        .create(&PostParams::default(), &server.service("rag"))
        .await
        .expect("create service");
    let route = infergate::engine::render_route_path(&svc).expect("route path");

    // The deployed ServiceAccount may not read Secrets until the namespace
    // opts in; the condition says how, and that command is all it takes.
    let s = wait_service(
        &client,
        &ns,
        "SecretForbidden",
        graph_condition("SecretForbidden"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    let command = msg
        .split("kubectl ")
        .nth(1)
        .unwrap_or_else(|| panic!("no kubectl command in {msg}"));
    assert!(
        command.starts_with(&format!(
            "create rolebinding infergate-graph-token-reader --namespace {ns} --clusterrole infergate-graph-token-reader --serviceaccount infergate-system:infergate"
        )),
        "{msg}"
    );
    assert!(rayservices.get_opt("rag").await.expect("get").is_none());
    let out = cp.kubectl(&command.split_whitespace().collect::<Vec<_>>());
    assert!(out.status.success(), "{}", support::text(&out));

    // Created: serveConfigV2 from the graph, routed at the rendered path,
    // owned by the service, applied by the infergate field manager.
    let rs = wait_rayservice(&client, &ns, "the RayService", |_| true).await;
    let config = serve_config(&rs);
    assert_eq!(config.applications[0].route_prefix, route);
    assert_eq!(config.applications[0].import_path, "rag.app:app");
    assert!(!rs.spec.serve_config_v2.contains("reranker"));
    let owner = &rs.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.uid, svc.metadata.uid.clone().expect("uid"));
    assert_eq!(owner.controller, Some(true));
    assert!(
        rs.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("infergate")
                && m.operation.as_deref() == Some("Apply")),
        "server-side applied by infergate"
    );
    let svc_now = wait_service(&client, &ns, "GraphReady=True", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    // No KubeRay runs: the RayService has no status yet.
    let ready = condition(&svc_now, "Ready").expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "RayServicePending")
    );
    assert_eq!(
        svc_now.status.as_ref().and_then(|s| s.route_path.clone()),
        Some(route.clone())
    );

    // KubeRay reports the service ready: reflected in Ready.
    rayservices
        .patch_status(
            "rag",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"serviceStatus": "Running"}})),
        )
        .await
        .expect("patch RayService status");
    let quiet = wait_service(&client, &ns, "Ready=True from the RayService", |s| {
        condition(s, "Ready").is_some_and(|c| c.status == "True" && c.reason == "RayServiceReady")
    })
    .await;

    // Nothing changes: the periodic fetches (every 2 s here, each answered
    // 304) write no status, though each moves the fetch time.
    let asked = server.state.requests.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(
        server.state.requests.load(Ordering::SeqCst) >= asked + 2,
        "the graph was fetched meanwhile"
    );
    let still = services.get("rag").await.expect("service");
    assert_eq!(
        still.metadata.resource_version, quiet.metadata.resource_version,
        "no status written: {:?}",
        still.status
    );

    // A graph update on the server is picked up without touching the service.
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    let rs = wait_rayservice(&client, &ns, "the updated graph", |rs| {
        rs.spec.serve_config_v2.contains("name: reranker")
    })
    .await;
    assert_eq!(serve_config(&rs).applications[0].route_prefix, route);

    // Each failure sets its condition and leaves the RayService as it was.
    let unchanged = |before: &RayService, after: &RayService| {
        assert_eq!(
            after.metadata.resource_version,
            before.metadata.resource_version
        );
        assert_eq!(after.spec, before.spec);
    };

    // Workers too small for the graph: Unschedulable, nothing applied; a
    // spec that fits again recovers without a restart.
    let parallelism = |tensor: i32| {
        let services = services.clone();
        async move {
            services
                .patch(
                    "rag",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"parallelism": {"tensor": tensor}}})),
                )
                .await
                .expect("patch parallelism");
        }
    };
    parallelism(2).await;
    let s = wait_service(
        &client,
        &ns,
        "Unschedulable",
        graph_condition("Unschedulable"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(
        msg.contains(
            "deployment \"generator\" asks num_gpus 8 but a worker offers 2 GPU(s) (tensor 2 x pipeline 1)"
        ),
        "{msg}"
    );
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));
    parallelism(8).await;
    wait_service(&client, &ns, "GraphReady=True again", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;

    // A wrong token.
    support::set_graph_token(&client, &ns, "wrong-token-value").await;
    let s = wait_service(&client, &ns, "HTTPStatus", stale_condition("HTTPStatus")).await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains("401"), "{msg}");
    assert!(!msg.contains("wrong-token-value"), "{msg}");
    // Ready keeps what the RayService last said.
    assert_eq!(
        condition(&s, "Ready").map(|c| c.status),
        Some("True".into())
    );
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));
    // While the source fails, the rest of the spec is applied with the
    // last good graph: replicas and the engine image.
    let image = "registry.example.com/ray-vllm:2.41";
    services
        .patch(
            "rag",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3, "engine": {"image": image}}})),
        )
        .await
        .expect("patch replicas and engine");
    let moved = wait_rayservice(&client, &ns, "3 workers running the new image", |rs| {
        let cluster = &rs.spec.ray_cluster_config;
        let image_of = |t: &k8s_openapi::api::core::v1::PodTemplateSpec| {
            t.spec.as_ref().and_then(|p| p.containers[0].image.clone())
        };
        cluster.worker_group_specs[0].replicas == Some(3)
            && image_of(&cluster.worker_group_specs[0].template).as_deref() == Some(image)
            && image_of(&cluster.head_group_spec.template).as_deref() == Some(image)
    })
    .await;
    assert_eq!(
        moved.spec.serve_config_v2, rs.spec.serve_config_v2,
        "the last good graph"
    );
    let s = services.get("rag").await.expect("service");
    assert!(
        stale_condition("HTTPStatus")(&s),
        "the source still fails: {:?}",
        s.status
    );
    let r = condition(&s, "Reconciled").expect("Reconciled").message;
    assert!(r.contains("applied with the last good graph"), "{r}");
    support::set_graph_token(&client, &ns, GRAPH_TOKEN).await;
    wait_service(&client, &ns, "GraphReady=True again", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    let rs = rayservices.get("rag").await.expect("get");

    // A cyclic graph.
    server.set_graph(read_fixture("graph/cyclic.pb"), "\"cyclic\"");
    let s = wait_service(
        &client,
        &ns,
        "InvalidGraph",
        stale_condition("InvalidGraph"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains("planner -> critic -> planner"), "{msg}");
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));

    // An unreachable URL (a port nobody listens on).
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    wait_service(&client, &ns, "GraphReady=True again", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
    })
    .await;
    let rs = rayservices.get("rag").await.expect("get");
    let closed = support::free_port().expect("free port");
    services
        .patch(
            "rag",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"graph": {
                "url": format!("https://127.0.0.1:{closed}/graph")
            }}})),
        )
        .await
        .expect("patch graph url");
    let s = wait_service(
        &client,
        &ns,
        "ConnectFailure",
        stale_condition("ConnectFailure"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains(&closed.to_string()), "{msg}");
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));
}

/// `sha256:<hex>` of `bytes`, computed here rather than by infergate.
fn sha256(bytes: &[u8]) -> String {
    let sum = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = sum.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The notes of the service's events with `reason`, oldest first.
async fn event_notes(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let mut found: Vec<_> = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.involved_object.name.as_deref() == Some("rag")
        })
        .collect();
    found.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    found.into_iter().filter_map(|e| e.message).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_which_graph_is_live_and_a_refresh_fetches_now() {
    let _turn = TURN.lock().await;
    let (cp, client, sa_kubeconfig) = support::reconciler_setup(&[support::rayservice_crd()]).await;
    let ns = cp.fresh_namespace("ray-live").await;
    let server = GraphServer::start();
    let v1 = read_fixture("graph/rag.pb");
    let v2 = read_fixture("graph/rag-v2.pb");
    server.set_graph(v1.clone(), "\"v1\"");
    // No periodic refetch within the test: only a refresh fetches again.
    let config = Config {
        graph_resync: Duration::from_secs(3600),
        ..support::reconcile_config("ray-live-e2e").with_graph_fetcher(server.fetcher())
    };
    let _reconciler = Reconciler::start(sa_kubeconfig, config);
    support::allow_graph_host(&client, &ns, "127.0.0.1").await;
    support::set_graph_token(&client, &ns, GRAPH_TOKEN).await;
    cp.bind_graph_token_reader(&ns);
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let rayservices: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let mut svc = server.service("rag");
    let url = server.url("/flaky");
    if let Some(g) = svc.spec.graph.as_mut() {
        g.url.clone_from(&url);
    }
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");

    // The live graph: the digest of the bytes served, where from, when.
    let graph_of = |s: &InferenceService| s.status.as_ref().and_then(|st| st.graph.clone());
    let s = wait_service(&client, &ns, "status.graph", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
            && graph_of(s).is_some_and(|g| g.digest.is_some())
    })
    .await;
    let g = graph_of(&s).expect("status.graph");
    let d1 = sha256(&v1);
    assert_eq!(g.digest.as_deref(), Some(d1.as_str()));
    assert_eq!(g.short_digest.as_deref(), Some(&d1[7..19]));
    assert_eq!(g.url.as_deref(), Some(url.as_str()));
    assert!(g.applied_at.is_some() && g.last_fetch_at.is_some(), "{g:?}");
    assert!(g.refreshes_seen.is_empty(), "{g:?}");
    assert_eq!((g.last_fetch_error, g.last_refresh), (None, None));
    let first_applied = g.applied_at.clone();
    // The Graph printer column shows the short digest.
    let out = cp.kubectl(&["get", "infsvc", "rag", "-n", &ns]);
    let table = support::text(&out);
    assert!(
        table.lines().next().is_some_and(|h| h.contains("GRAPH")) && table.contains(&d1[7..19]),
        "{table}"
    );

    // A new graph on the server waits for the resync, unless asked for.
    server.set_graph(v2.clone(), "\"v2\"");
    // (Times in status have a second's precision.)
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let s = services.get("rag").await.expect("service");
    assert_eq!(
        graph_of(&s).and_then(|g| g.digest),
        Some(d1.clone()),
        "no fetch before the resync or a refresh"
    );
    support::refresh_graph(&services, "rag", "r1").await;
    let s = wait_service(&client, &ns, "refresh r1 acted on", |s| {
        graph_of(s).is_some_and(|g| g.last_refresh.as_deref() == Some("r1"))
    })
    .await;
    let g = graph_of(&s).expect("status.graph");
    let d2 = sha256(&v2);
    assert_eq!(g.digest.as_deref(), Some(d2.as_str()));
    assert_ne!(g.applied_at, first_applied, "a new graph, applied now");
    let rs = rayservices.get("rag").await.expect("RayService");
    assert!(rs.spec.serve_config_v2.contains("name: reranker"));
    // The event follows the status write.
    let want = format!(
        "refresh \"r1\": a new graph sha256:{} is applied (was sha256:{})",
        &d2[7..19],
        &d1[7..19]
    );
    support::eventually("the new graph's event", WAIT, async || {
        let notes = event_notes(&client, &ns, "GraphRefreshed").await;
        notes
            .contains(&want)
            .then_some(())
            .ok_or(format!("{notes:?}"))
    })
    .await;

    // Another value with nothing new says so; appliedAt stays.
    let applied = g.applied_at.clone();
    support::refresh_graph(&services, "rag", "r2").await;
    let s = wait_service(&client, &ns, "refresh r2 acted on", |s| {
        graph_of(s).is_some_and(|g| g.last_refresh.as_deref() == Some("r2"))
    })
    .await;
    assert_eq!(graph_of(&s).and_then(|g| g.applied_at), applied);
    let want = format!(
        "refresh \"r2\": the graph is unchanged (sha256:{})",
        &d2[7..19]
    );
    support::eventually("the unchanged event", WAIT, async || {
        let notes = event_notes(&client, &ns, "GraphUnchanged").await;
        notes
            .contains(&want)
            .then_some(())
            .ok_or(format!("{notes:?}"))
    })
    .await;

    // r1 again (r1, r2, r1): a value acted on before is not acted on again,
    // however long after (here well past the fetcher's 500 ms between a
    // service's refreshes).
    let asked = server.state.requests.load(Ordering::SeqCst);
    support::refresh_graph(&services, "rag", "r1").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = services.get("rag").await.expect("service");
    let g = graph_of(&s).expect("status.graph");
    assert_eq!(g.refreshes_seen, ["r1", "r2"]);
    assert_eq!(g.last_refresh.as_deref(), Some("r2"));
    assert_eq!(
        server.state.requests.load(Ordering::SeqCst),
        asked,
        "no fetch for a value acted on before"
    );

    // A failed fetch keeps the live graph serving and says so.
    let before = rayservices.get("rag").await.expect("RayService");
    server
        .state
        .flaky_failures
        .store(1, std::sync::atomic::Ordering::SeqCst);
    support::refresh_graph(&services, "rag", "r3").await;
    let s = wait_service(&client, &ns, "StaleGraph", stale_condition("HTTPStatus")).await;
    let c = condition(&s, "GraphReady").expect("GraphReady");
    assert!(
        c.message.contains(&format!(
            "the last good graph (sha256:{} from {url}",
            &d2[7..19]
        )) && c.message.contains("503"),
        "{}",
        c.message
    );
    let g = graph_of(&s).expect("status.graph");
    assert_eq!(
        g.digest.as_deref(),
        Some(d2.as_str()),
        "the live graph stays"
    );
    assert_eq!(g.last_refresh.as_deref(), Some("r3"));
    assert_eq!(g.refreshes_seen, ["r1", "r2", "r3"]);
    assert!(
        g.last_fetch_error
            .as_deref()
            .is_some_and(|e| e.starts_with("HTTPStatus: ") && e.contains("503")),
        "{g:?}"
    );
    let after = rayservices.get("rag").await.expect("RayService");
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    support::eventually("the failed refresh's event", WAIT, async || {
        let notes = event_notes(&client, &ns, "GraphRefreshFailed").await;
        notes
            .iter()
            .any(|n| n.starts_with("refresh \"r3\": the fetch failed (HTTPStatus)"))
            .then_some(())
            .ok_or(format!("{notes:?}"))
    })
    .await;

    // The retry after the failure's backoff (200 ms here) fetches again
    // and, the server answering now, clears the error; a new value is
    // acted on by a fetch too (not within a backoff, nor within 500 ms of
    // the service's last fetch here).
    support::refresh_graph(&services, "rag", "r4").await;
    let s = wait_service(&client, &ns, "GraphReady=True again", |s| {
        condition(s, "GraphReady").is_some_and(|c| c.status == "True")
            && graph_of(s).is_some_and(|g| g.last_refresh.as_deref() == Some("r4"))
    })
    .await;
    assert_eq!(graph_of(&s).and_then(|g| g.last_fetch_error), None);
    // The annotation stays the user's: never removed or changed.
    assert_eq!(
        s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("infergate.dev/graph-refresh"))
            .map(String::as_str),
        Some("r4")
    );
}
