//! A change of shape, route first: a running one-node service given a
//! larger tensor x pipeline (two nodes per replica) gets its
//! LeaderWorkerSet ready before its Deployment goes, and back again the
//! same way. The route names Service `chat`, which selects the serving
//! pods of both workloads (the Deployment's pods and the groups' leaders);
//! a watch of the route and of both workloads, ordered by resourceVersion,
//! sees no moment when the route names a Service with no ready replica
//! behind it.

use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Resource;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;

use infergate::reconcile::children::httproute::HTTPRoute;
use infergate::reconcile::children::lws::LeaderWorkerSet;

use super::*;

/// One object as a watch showed it.
#[derive(Clone, Debug)]
struct Seen {
    revision: u64,
    kind: &'static str,
    name: String,
    going: bool,
    /// Ready replicas (groups, for a LeaderWorkerSet); a route: 1 when it
    /// names backend `chat`.
    ready: i32,
    /// Every wanted replica ready and of the current template.
    complete: bool,
}

type Story = Arc<Mutex<Vec<Seen>>>;

async fn watch<K>(
    client: &Client,
    ns: &str,
    story: Story,
    details: fn(&K) -> (i32, bool),
) -> tokio::task::JoinHandle<()>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let kind: &'static str = K::kind(&()).into_owned().leak();
    let record = move |story: &Mutex<Vec<Seen>>, o: &K, deleted: bool| {
        let (ready, complete) = details(o);
        story.lock().expect("story").push(Seen {
            revision: o
                .meta()
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .expect("numeric resourceVersion"),
            kind,
            name: o.meta().name.clone().unwrap_or_default(),
            going: deleted || o.meta().deletion_timestamp.is_some(),
            ready,
            complete,
        });
    };
    let list = api.list(&ListParams::default()).await.expect("list");
    for o in &list.items {
        record(&story, o, false);
    }
    let from = list
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let stream = api
        .watch(&WatchParams::default().timeout(290), &from)
        .await
        .expect("watch");
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream.into_stream());
        while let Some(event) = stream.next().await {
            let (o, deleted) = match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => (o, false),
                Ok(WatchEvent::Deleted(o)) => (o, true),
                Ok(WatchEvent::Bookmark(_)) => continue,
                Ok(WatchEvent::Error(e)) => panic!("{kind} watch: {e:?}"),
                Err(e) => panic!("{kind} watch: {e}"),
            };
            record(&story, &o, deleted);
        }
    })
}

fn deployment_of(d: &Deployment) -> (i32, bool) {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let ready = st.ready_replicas.unwrap_or(0);
    let complete = st.observed_generation >= d.metadata.generation
        && st.updated_replicas.unwrap_or(0) >= want
        && ready >= want
        && st.replicas.unwrap_or(0) <= st.updated_replicas.unwrap_or(0);
    (ready, complete)
}

fn lws_of(l: &LeaderWorkerSet) -> (i32, bool) {
    let want = l.spec.replicas.unwrap_or(1);
    let st = l.status.clone().unwrap_or_default();
    let ready = st.ready_replicas.unwrap_or(0);
    let complete = st.observed_generation >= l.metadata.generation
        && st.updated_replicas.unwrap_or(0) >= want
        && ready >= want;
    (ready, complete)
}

fn route_of(r: &HTTPRoute) -> (i32, bool) {
    let names = r
        .spec
        .rules
        .iter()
        .flat_map(|rule| rule.backend_refs.iter())
        .any(|b| b.name == "chat");
    (i32::from(names), true)
}

/// The last state of `kind/name` strictly before `revision`.
fn before<'a>(story: &'a [Seen], kind: &str, name: &str, revision: u64) -> Option<&'a Seen> {
    story
        .iter()
        .rev()
        .filter(|s| s.revision < revision)
        .find(|s| s.kind == kind && s.name == name)
}

fn told(story: &[Seen]) -> String {
    story
        .iter()
        .map(|s| {
            format!(
                "{} {} {}{} ready {}{}",
                s.revision,
                s.kind,
                s.name,
                if s.going { " (going)" } else { "" },
                s.ready,
                if s.complete { " complete" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// At every revision of the story from `from` on, while the route names
/// Service `chat`, a workload behind it has a ready replica.
fn assert_always_served(story: &[Seen], from: u64) -> usize {
    let mut checked = 0;
    for s in story.iter().filter(|s| s.revision >= from) {
        let at = s.revision + 1;
        let Some(route) = before(story, "HTTPRoute", "chat", at) else {
            continue;
        };
        if route.going || route.ready == 0 {
            continue;
        }
        let serving =
            |kind, name| before(story, kind, name, at).is_some_and(|w| !w.going && w.ready > 0);
        assert!(
            serving("Deployment", "chat") || serving("LeaderWorkerSet", "chat-lws"),
            "at revision {} the route names chat with no ready replica behind it:\n{}",
            s.revision,
            told(story)
        );
        checked += 1;
    }
    checked
}

/// The first revision at which `kind/name` was seen going.
fn gone_at(story: &[Seen], kind: &str, name: &str) -> Option<u64> {
    story
        .iter()
        .find(|s| s.kind == kind && s.name == name && s.going)
        .map(|s| s.revision)
}

async fn reshape(s: &Setup, ns: &str, pipeline: i32) {
    Api::<InferenceService>::namespaced(s.client.clone(), ns)
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"parallelism": {"tensor": 8, "pipeline": pipeline}}})),
        )
        .await
        .expect("changing the shape");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_shape_moves_the_route_only_to_a_ready_workload_and_back() {
    let s = setup().await;
    s.cp.install_crd_file(support::httproute_crd()).await;
    let class = pool(&s, "lws-shape", 4).await;
    let ns = s.cp.fresh_namespace("multi-node").await;
    let _reconciler = support::short_lease_reconciler(&s.kubeconfig, "multi-node-shape");
    let mut svc = service_json("chat", &class, 1);
    svc.spec.parallelism = serde_json::from_value(json!({"tensor": 8, "pipeline": 1})).ok();
    svc.spec.routing =
        serde_json::from_value(json!({"gateway": {"name": "gw", "namespace": "gateways"}})).ok();
    Api::<InferenceService>::namespaced(s.client.clone(), &ns)
        .create(&PostParams::default(), &svc)
        .await
        .expect("admitted");
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &ns);
    let lws_api = leaderworkersets(&s.client, &ns);
    eventually("Deployment chat ready, routed", RUN_WAIT, async || {
        s.sched.ensure_running();
        let d = deployments
            .get_opt("chat")
            .await
            .map_err(|e| e.to_string())?;
        let ready = d.and_then(|d| d.status?.ready_replicas).unwrap_or(0);
        let routed = support::timeline::route_backends(&s.client, &ns, "chat").await;
        if ready == 1 && routed == [("chat".to_owned(), 100)] {
            Ok(())
        } else {
            Err(format!("ready {ready}, route {routed:?}"))
        }
    })
    .await;

    let story: Story = Arc::default();
    let watches = vec![
        watch::<HTTPRoute>(&s.client, &ns, Arc::clone(&story), route_of).await,
        watch::<Deployment>(&s.client, &ns, Arc::clone(&story), deployment_of).await,
        watch::<LeaderWorkerSet>(&s.client, &ns, Arc::clone(&story), lws_of).await,
    ];
    let start = story
        .lock()
        .expect("story")
        .iter()
        .map(|s| s.revision)
        .max()
        .unwrap_or(0);

    // One node per replica to two: the group first, then the Deployment goes.
    reshape(&s, &ns, 2).await;
    eventually(
        "the group serves and the Deployment is gone",
        RUN_WAIT,
        async || {
            s.sched.ensure_running();
            let lws = lws_api
                .get_opt("chat-lws")
                .await
                .map_err(|e| e.to_string())?;
            let ready = lws
                .and_then(|l| l.data["status"]["readyReplicas"].as_i64())
                .unwrap_or(0);
            let d = deployments
                .get_opt("chat")
                .await
                .map_err(|e| e.to_string())?;
            if ready == 1 && d.is_none() {
                Ok(())
            } else {
                Err(format!("group ready {ready}, Deployment {}", d.is_some()))
            }
        },
    )
    .await;
    // And back: the Deployment first, then the group goes.
    reshape(&s, &ns, 1).await;
    eventually(
        "the Deployment serves and the group is gone",
        RUN_WAIT,
        async || {
            s.sched.ensure_running();
            let d = deployments
                .get_opt("chat")
                .await
                .map_err(|e| e.to_string())?;
            let ready = d.and_then(|d| d.status?.ready_replicas).unwrap_or(0);
            let lws = lws_api
                .get_opt("chat-lws")
                .await
                .map_err(|e| e.to_string())?;
            if ready == 1 && lws.is_none() {
                Ok(())
            } else {
                Err(format!("Deployment ready {ready}, group {}", lws.is_some()))
            }
        },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    for w in &watches {
        w.abort();
    }
    let mut story = story.lock().expect("story").clone();
    story.sort_by_key(|s| s.revision);
    let told = told(&story);

    // The old workload went only after the new one was complete.
    let deployment_gone = gone_at(&story, "Deployment", "chat").expect("the Deployment went");
    let group_complete = story
        .iter()
        .find(|s| s.kind == "LeaderWorkerSet" && s.complete)
        .map(|s| s.revision)
        .expect("the group was complete");
    assert!(group_complete < deployment_gone, "{told}");
    let group_gone = gone_at(&story, "LeaderWorkerSet", "chat-lws").expect("the group went");
    let back = story
        .iter()
        .find(|s| s.kind == "Deployment" && s.revision > deployment_gone && s.complete)
        .map(|s| s.revision)
        .expect("the Deployment came back complete");
    assert!(back < group_gone, "{told}");
    let checked = assert_always_served(&story, start);
    assert!(checked >= 6, "{checked} moments checked:\n{told}");
    println!("{checked} moments checked; the story:\n{told}");
}
