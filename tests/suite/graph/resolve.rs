//! Against the real control plane: the graph token's Secret looked up (and
//! refused where its owner did not name the graph's host), and the built
//! RayService accepted by the API server with the minimal ray.io/v1 CRD
//! installed; the resync, a refresh, a cyclic graph and an update.

use crate::support;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::{GRAPH_TOKEN, GraphServer, read_fixture};
use infergate::graph::fetch::{GraphFetcher, TOKEN_HOSTS_ANNOTATION};

use super::{quick, rag};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_reads_the_secret_and_the_rayservice_is_accepted() {
    use infergate::api::v1beta1::InferenceService;
    use infergate::reconcile::children::rayservice::RayService;
    use infergate::reconcile::graph::resolve;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams, PostParams};

    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(support::rayservice_crd()).await;
    let client = cp.client().await;
    let ns = cp.fresh_namespace("graph").await;

    let server = GraphServer::start();
    server.set_graph(rag(), "\"v1\"");
    let fetcher = GraphFetcher::new(quick(), vec![server.ca.clone()]).expect("fetcher");

    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    let svc = services
        .create(&PostParams::default(), &server.service("rag"))
        .await
        .expect("create service");
    let route = infergate::engine::render_route_path(&svc).expect("route");
    assert_eq!(route, format!("/{ns}/rag"));

    let access = infergate::reconcile::graph::Access {
        internal_allowed: true,
        service_account: "infergate-system:infergate",
        class: None,
        refresh: false,
        // Every call below asks the server, but the one on reuse.
        max_age: Duration::ZERO,
    };
    let key = format!("{ns}/rag");
    // A failed fetch backs the service off; the test waits it out.
    let settle = || async {
        if let Some(w) = fetcher.retry_in(&key, &server.url("/graph")) {
            tokio::time::sleep(w).await;
        }
    };

    // No Secret yet.
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotFound", "{e}");
    assert!(e.to_string().contains(&format!("{ns}/graph-token")));

    // A Secret without the key, and without the hosts annotation.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret = |value: Option<&str>, hosts: Option<&str>| Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("graph-token".into()),
            annotations: hosts.map(|h| {
                [(TOKEN_HOSTS_ANNOTATION.to_owned(), h.to_owned())]
                    .into_iter()
                    .collect()
            }),
            ..Default::default()
        },
        data: Some(
            [(
                if value.is_some() { "token" } else { "other" }.to_owned(),
                ByteString(value.unwrap_or("x").as_bytes().to_vec()),
            )]
            .into_iter()
            .collect(),
        ),
        ..Secret::default()
    };
    let apply = PatchParams::apply("infergate-tests").force();
    let put = |s: Secret| {
        let secrets = secrets.clone();
        let apply = apply.clone();
        async move {
            secrets
                .patch("graph-token", &apply, &Patch::Apply(&s))
                .await
                .expect("secret");
        }
    };
    // The right token, but the Secret's owner never said where it may go:
    // no request is made.
    put(secret(Some(GRAPH_TOKEN), None)).await;
    let before = server.state.requests.load(Ordering::SeqCst);
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotAllowed", "{e}");
    assert!(e.to_string().contains(TOKEN_HOSTS_ANNOTATION), "{e}");
    // ... or said another host.
    put(secret(
        Some(GRAPH_TOKEN),
        Some("graphs.example.com, *.example.org"),
    ))
    .await;
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotAllowed", "{e}");
    assert_eq!(
        server.state.requests.load(Ordering::SeqCst),
        before,
        "nothing sent"
    );

    let here = format!("127.0.0.1:{}", server.addr.port());
    put(secret(None, Some(&here))).await;
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "SecretNotFound", "{e}");
    assert!(e.to_string().contains("has no key"), "{e}");

    // A wrong token: refused by the graph server, never echoed.
    put(secret(Some("wrong-token-value\n"), Some(&here))).await;
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "HTTPStatus", "{e}");
    assert!(!format!("{e} {e:?}").contains("wrong-token-value"));
    settle().await;

    // The right token: the RayService is built and the apiserver stores it.
    put(secret(Some(GRAPH_TOKEN), Some(&here))).await;
    let resolved = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .expect("resolved");
    let rayservices: Api<RayService> = Api::namespaced(client.clone(), &ns);
    let ssa = PatchParams::apply("infergate").force();
    let stored = rayservices
        .patch("rag", &ssa, &Patch::Apply(&resolved.rayservice))
        .await
        .expect("apiserver accepts the RayService");
    let config: infergate::graph::serve_config::ServeConfig =
        serde_saphyr::from_str(&stored.spec.serve_config_v2).expect("serveConfigV2");
    assert_eq!(config.applications[0].route_prefix, route);
    assert_eq!(config.applications[0].import_path, "rag.app:app");
    let owner = &stored.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(owner.uid, svc.metadata.uid.clone().expect("uid"));
    let group = &stored.spec.ray_cluster_config.worker_group_specs[0];
    assert_eq!(group.replicas, Some(1));
    assert!(
        group.template.spec.is_some(),
        "pod templates survive the preserve-unknown-fields schema"
    );

    // Unchanged graph: answered from the ETag cache.
    let again = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .expect("resolved");
    assert!(again.not_modified && again.fetched);
    assert_eq!(again.rayservice, resolved.rayservice);

    // Within the resync the server is not asked at all, even if its graph
    // changed; a refresh asks it.
    let asked = server.state.requests.load(Ordering::SeqCst);
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    let within = infergate::reconcile::graph::Access {
        max_age: Duration::from_secs(3600),
        ..access
    };
    let reused = resolve(&client, &fetcher, &svc, &route, within)
        .await
        .expect("resolved");
    assert!(reused.not_modified && !reused.fetched);
    assert_eq!(reused.rayservice, resolved.rayservice);
    assert_eq!(server.state.requests.load(Ordering::SeqCst), asked);
    let refreshed = resolve(
        &client,
        &fetcher,
        &svc,
        &route,
        infergate::reconcile::graph::Access {
            refresh: true,
            ..within
        },
    )
    .await
    .expect("resolved");
    assert!(refreshed.fetched && !refreshed.not_modified);
    assert_ne!(refreshed.digest, resolved.digest);
    assert_eq!(server.state.requests.load(Ordering::SeqCst), asked + 1);

    // A cyclic graph: an InvalidGraph error naming the cycle.
    server.set_graph(read_fixture("graph/cyclic.pb"), "\"cyclic\"");
    let e = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "InvalidGraph");
    assert!(
        e.to_string().contains("planner -> critic -> planner"),
        "{e}"
    );

    // An update is picked up and applied.
    server.set_graph(read_fixture("graph/rag-v2.pb"), "\"v2\"");
    let updated = resolve(&client, &fetcher, &svc, &route, access)
        .await
        .expect("resolved");
    assert!(!updated.not_modified);
    let stored = rayservices
        .patch("rag", &ssa, &Patch::Apply(&updated.rayservice))
        .await
        .expect("apply update");
    assert!(stored.spec.serve_config_v2.contains("name: reranker"));
}
