//! End-to-end: `backend: RayService` against a real kube-apiserver with the
//! minimal ray.io/v1 RayService CRD and a local HTTPS graph server (bearer
//! check, ETag). The reconciler runs in-process on its own thread and
//! runtime, trusting the graph server's CA through its fetcher, as the
//! ServiceAccount of deploy/ with only deploy/rbac.yaml's permissions.

mod support;

use std::time::Duration;

use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use infergate::api::v1beta1::InferenceService;
use infergate::graph::serve_config::ServeConfig;
use infergate::reconcile::Config;
use infergate::reconcile::children::rayservice::RayService;
use support::{GRAPH_TOKEN, GraphServer, Reconciler, WAIT, condition, read_fixture, wait_for};

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

fn serve_config(rs: &RayService) -> ServeConfig {
    serde_saphyr::from_str(&rs.spec.serve_config_v2).expect("serveConfigV2 parses")
}

// -------------------------------------------------------------------- test

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayservice_follows_the_graph_and_graph_failures_leave_it_alone() {
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
    wait_service(&client, &ns, "Ready=True from the RayService", |s| {
        condition(s, "Ready").is_some_and(|c| c.status == "True" && c.reason == "RayServiceReady")
    })
    .await;

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
    let s = wait_service(&client, &ns, "HTTPStatus", graph_condition("HTTPStatus")).await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains("401"), "{msg}");
    assert!(!msg.contains("wrong-token-value"), "{msg}");
    // Ready keeps what the RayService last said.
    assert_eq!(
        condition(&s, "Ready").map(|c| c.status),
        Some("True".into())
    );
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));
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
        graph_condition("InvalidGraph"),
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
        graph_condition("ConnectFailure"),
    )
    .await;
    let msg = condition(&s, "GraphReady").expect("GraphReady").message;
    assert!(msg.contains(&closed.to_string()), "{msg}");
    unchanged(&rs, &rayservices.get("rag").await.expect("get"));
}
