//! End-to-end: a canary that goes away lets go of the route first, against
//! a real kube-apiserver, etcd and kube-controller-manager.
//!
//! The test plays the kubelet (pods marked Ready through pods/status) so
//! the canary really carries weight, then deletes the `spec.canary` block
//! while watching the HTTPRoute, the Deployments and the Services of the
//! namespace, one watch each. Every event carries the resourceVersion the
//! API server gave it (etcd's revision, one counter for all kinds): the
//! route's change that drops the canary's backendRef must come before the
//! first sign of the canary's Deployment or Service going away.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use infergate::api::v1beta1::InferenceService;
use infergate::reconcile::children::httproute::HTTPRoute;
use support::{Reconciler, WAIT, eventually, get, mark_pods_ready, merge_patch, wait_gone};

const ENGINE: &str = "registry.example.com/vllm:0.9";

/// One event seen by a watch: the resourceVersion, which object, and what
/// it says.
#[derive(Debug, Clone)]
struct Seen {
    revision: u64,
    kind: &'static str,
    name: String,
    /// The object is gone or going (DELETED, or a deletionTimestamp).
    going: bool,
    /// For a route: the backendRefs it names.
    backends: Vec<String>,
}

type Timeline = Arc<Mutex<Vec<Seen>>>;

/// Watch `K` in `ns` from `revision`, recording every event into `timeline`.
fn watch<K>(
    client: &Client,
    ns: &str,
    revision: &str,
    timeline: Timeline,
    backends: fn(&K) -> Vec<String>,
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let revision = revision.to_owned();
    let kind: &'static str = K::kind(&()).into_owned().leak();
    tokio::spawn(async move {
        let stream = api
            .watch(&WatchParams::default().timeout(290), &revision)
            .await
            .expect("watch");
        let mut stream = std::pin::pin!(stream.into_stream());
        while let Some(event) = stream.next().await {
            let (object, deleted) = match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => (o, false),
                Ok(WatchEvent::Deleted(o)) => (o, true),
                Ok(WatchEvent::Bookmark(_)) => continue,
                Ok(WatchEvent::Error(e)) => panic!("{kind} watch: {e:?}"),
                Err(e) => panic!("{kind} watch: {e}"),
            };
            let revision = object
                .resource_version()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a numeric resourceVersion");
            let seen = Seen {
                revision,
                kind,
                name: object.name_any(),
                going: deleted || object.meta().deletion_timestamp.is_some(),
                backends: backends(&object),
            };
            timeline.lock().expect("timeline").push(seen);
        }
    })
}

fn route_backends(route: &HTTPRoute) -> Vec<String> {
    route
        .spec
        .rules
        .iter()
        .flat_map(|r| r.backend_refs.iter().map(|b| b.name.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_canary_leaves_the_route_before_its_backends_go() {
    support::init_tracing();
    let cp = support::control_plane().await;
    cp.install_crds().await;
    cp.install_crd_file(support::httproute_crd()).await;
    cp.ensure_namespace(support::SYSTEM_NAMESPACE).await;
    let client = cp.client().await;
    let _reconciler = Reconciler::start(
        cp.kubeconfig().to_path_buf(),
        support::reconcile_config("canary-e2e"),
    );
    let ns = cp.fresh_namespace("canary").await;

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
    let services: Api<InferenceService> = Api::namespaced(client.clone(), &ns);
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create");

    // The canary's pod is Ready: the route sends it 20%.
    mark_pods_ready(&client, &ns, "chat", "primary", 1).await;
    mark_pods_ready(&client, &ns, "chat", "canary", 1).await;
    let route = eventually("the canary routed at 20%", WAIT, || async {
        let r = get::<HTTPRoute>(&client, &ns, "chat").await?;
        let weights: Vec<_> = r.spec.rules[0]
            .backend_refs
            .iter()
            .map(|b| (b.name.clone(), b.weight))
            .collect();
        (weights == [("chat".into(), Some(80)), ("chat-canary".into(), Some(20))]).then_some(r)
    })
    .await;

    // One watch per kind, all from the route's current revision.
    let from = route.resource_version().expect("resourceVersion");
    let timeline: Timeline = Arc::default();
    let watches = [
        watch::<HTTPRoute>(&client, &ns, &from, Arc::clone(&timeline), route_backends),
        watch::<Deployment>(&client, &ns, &from, Arc::clone(&timeline), |_| Vec::new()),
        watch::<Service>(&client, &ns, &from, Arc::clone(&timeline), |_| Vec::new()),
    ];

    merge_patch(
        &services,
        "chat",
        json!({"spec": {"canary": null}}),
        "remove the canary",
    )
    .await;
    wait_gone::<Deployment>(&client, &ns, "chat-canary", WAIT).await;
    wait_gone::<Service>(&client, &ns, "chat-canary", WAIT).await;
    // Let the watches deliver what the API server has already sent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for w in &watches {
        w.abort();
    }

    let mut seen = timeline.lock().expect("timeline").clone();
    seen.sort_by_key(|s| s.revision);
    let story: Vec<String> = seen
        .iter()
        .map(|s| {
            format!(
                "{} {} {}{}",
                s.revision,
                s.kind,
                s.name,
                if s.going {
                    " (going)".to_owned()
                } else if s.kind == "HTTPRoute" {
                    format!(" -> {:?}", s.backends)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    let story = story.join("\n");
    let let_go = seen
        .iter()
        .find(|s| s.kind == "HTTPRoute" && !s.backends.iter().any(|b| b == "chat-canary"))
        .unwrap_or_else(|| panic!("the route never stopped naming the canary:\n{story}"));
    for kind in ["Deployment", "Service"] {
        let going = seen
            .iter()
            .find(|s| s.kind == kind && s.name == "chat-canary" && s.going)
            .unwrap_or_else(|| panic!("no event of the canary's {kind} going:\n{story}"));
        assert!(
            let_go.revision < going.revision,
            "the canary's {kind} went (revision {}) while the route still named it (let go at {}):\n{story}",
            going.revision,
            let_go.revision
        );
    }
    // The primary stays, routed at 100%.
    let route = get::<HTTPRoute>(&client, &ns, "chat").await.expect("route");
    let weights: Vec<_> = route.spec.rules[0]
        .backend_refs
        .iter()
        .map(|b| (b.name.clone(), b.weight))
        .collect();
    assert_eq!(weights, [("chat".to_owned(), Some(100))]);
    assert!(get::<Deployment>(&client, &ns, "chat").await.is_some());
}
