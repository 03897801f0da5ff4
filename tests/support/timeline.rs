//! One story of a namespace's HTTPRoutes, Deployments and Services: each
//! kind listed, then watched from its list, every object and event recorded
//! with its resourceVersion (etcd's revision, one counter for all kinds), so
//! the order of what happened across kinds can be checked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use infergate::reconcile::children::httproute::HTTPRoute;

/// One object as a list or a watch event showed it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its resourceVersion.
    pub revision: u64,
    /// `HTTPRoute`, `Deployment` or `Service`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Gone or going (DELETED, or a deletionTimestamp).
    pub going: bool,
    /// A route's backendRefs: `(name, weight)`.
    pub backends: Vec<(String, i32)>,
    /// A Deployment's pod template, as JSON.
    pub template: Option<String>,
    /// A Deployment's rollout is complete: the controller saw its spec,
    /// every wanted replica is ready and of the current template, no older
    /// pod is left.
    pub complete: bool,
}

impl Seen {
    /// Whether this route names `backend`, whatever its weight.
    pub fn names(&self, backend: &str) -> bool {
        self.backends.iter().any(|(n, _)| n == backend)
    }

    /// This route's weight for `backend` (0 when it does not name it).
    pub fn weight(&self, backend: &str) -> i32 {
        self.backends
            .iter()
            .find(|(n, _)| n == backend)
            .map_or(0, |(_, w)| *w)
    }

    fn line(&self) -> String {
        let what = if self.going {
            " (going)".to_owned()
        } else if self.kind == "HTTPRoute" {
            format!(" -> {:?}", self.backends)
        } else if self.kind == "Deployment" {
            format!(
                "{}{}",
                model(self.template.as_deref()),
                if self.complete { " complete" } else { "" }
            )
        } else {
            String::new()
        };
        format!("{} {} {}{what}", self.revision, self.kind, self.name)
    }
}

/// The `--served-model-name` of a template, for the story.
fn model(template: Option<&str>) -> String {
    template
        .and_then(|t| t.split("--served-model-name\",\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .map(|m| format!(" ({m})"))
        .unwrap_or_default()
}

/// `(name, weight)` of each backendRef of the route `name` (none without
/// the route).
pub async fn route_backends(client: &Client, ns: &str, name: &str) -> Vec<(String, i32)> {
    Api::<HTTPRoute>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("read the route")
        .map(|r| backends_of(&r))
        .unwrap_or_default()
}

fn backends_of(route: &HTTPRoute) -> Vec<(String, i32)> {
    route
        .spec
        .rules
        .iter()
        .flat_map(|r| r.backend_refs.iter())
        .map(|b| (b.name.clone(), b.weight.unwrap_or(1)))
        .collect()
}

fn deployment_of(d: &Deployment) -> (Option<String>, bool) {
    let template = d
        .spec
        .as_ref()
        .map(|s| serde_json::to_string(&s.template).expect("template"));
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let st = d.status.clone().unwrap_or_default();
    let complete = st.observed_generation >= d.metadata.generation
        && st.updated_replicas.unwrap_or(0) >= want
        && st.ready_replicas.unwrap_or(0) >= want
        && st.replicas.unwrap_or(0) <= st.updated_replicas.unwrap_or(0);
    (template, complete)
}

/// The watches of one namespace, recording into one story.
pub struct Timeline {
    seen: Arc<Mutex<Vec<Seen>>>,
    watches: Vec<tokio::task::JoinHandle<()>>,
}

impl Timeline {
    /// List and watch the HTTPRoutes, Deployments and Services of `ns`.
    pub async fn start(client: &Client, ns: &str) -> Self {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let watches = vec![
            watch::<HTTPRoute>(client, ns, Arc::clone(&seen), |r| {
                (backends_of(r), None, false)
            })
            .await,
            watch::<Deployment>(client, ns, Arc::clone(&seen), |d| {
                let (template, complete) = deployment_of(d);
                (Vec::new(), template, complete)
            })
            .await,
            watch::<Service>(client, ns, Arc::clone(&seen), |_| (Vec::new(), None, false)).await,
        ];
        Timeline { seen, watches }
    }

    /// What was seen so far, in revision order.
    pub fn so_far(&self) -> Vec<Seen> {
        let mut seen = self.seen.lock().expect("timeline").clone();
        seen.sort_by_key(|s| s.revision);
        seen
    }

    /// Let the watches deliver what the API server has sent, stop them,
    /// and return the story in revision order.
    pub async fn stop(self) -> Vec<Seen> {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for w in &self.watches {
            w.abort();
        }
        self.so_far()
    }
}

/// What a watch records of an object besides its identity.
type Details<K> = fn(&K) -> (Vec<(String, i32)>, Option<String>, bool);

async fn watch<K>(
    client: &Client,
    ns: &str,
    seen: Arc<Mutex<Vec<Seen>>>,
    details: Details<K>,
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
    let record = move |seen: &Mutex<Vec<Seen>>, object: &K, deleted: bool| {
        let revision = object
            .resource_version()
            .and_then(|v| v.parse::<u64>().ok())
            .expect("a numeric resourceVersion");
        let (backends, template, complete) = details(object);
        seen.lock().expect("timeline").push(Seen {
            revision,
            kind,
            name: object.name_any(),
            going: deleted || object.meta().deletion_timestamp.is_some(),
            backends,
            template,
            complete,
        });
    };
    let list = api.list(&ListParams::default()).await.expect("list");
    for object in &list.items {
        record(&seen, object, false);
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
            let (object, deleted) = match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => (o, false),
                Ok(WatchEvent::Deleted(o)) => (o, true),
                Ok(WatchEvent::Bookmark(_)) => continue,
                Ok(WatchEvent::Error(e)) => panic!("{kind} watch: {e:?}"),
                Err(e) => panic!("{kind} watch: {e}"),
            };
            record(&seen, &object, deleted);
        }
    })
}

/// The story, one line per object seen.
pub fn story(seen: &[Seen]) -> String {
    seen.iter().map(Seen::line).collect::<Vec<_>>().join("\n")
}

/// The route `route` as it stood just before `revision` (`None` before it
/// was first seen).
pub fn route_before<'a>(seen: &'a [Seen], route: &str, revision: u64) -> Option<&'a Seen> {
    seen.iter()
        .rev()
        .filter(|s| s.revision < revision)
        .find(|s| s.kind == "HTTPRoute" && s.name == route)
}

/// Route first, always: every change of the pod template of the canary's
/// Deployment, and every sign of its Deployment or Service going, comes
/// after the route `route` stopped naming `canary`; and the route names
/// the canary only while its Deployment's rollout is complete. Returns how
/// many template changes and goings were checked.
pub fn assert_route_first(seen: &[Seen], route: &str, canary: &str) -> usize {
    let told = story(seen);
    let mut checked = 0;
    let mut template: Option<&str> = None;
    for s in seen.iter().filter(|s| s.name == canary) {
        let changes = match s.kind {
            "Deployment" if s.going => true,
            "Deployment" => {
                let changed = template.is_some_and(|t| Some(t) != s.template.as_deref());
                template = s.template.as_deref().or(template);
                changed
            }
            "Service" => s.going,
            _ => false,
        };
        if !changes {
            continue;
        }
        checked += 1;
        if let Some(r) = route_before(seen, route, s.revision) {
            assert!(
                r.going || !r.names(canary),
                "the canary's {} changed or went (revision {}) while the route still named it (revision {}):\n{told}",
                s.kind,
                s.revision,
                r.revision
            );
        }
    }
    for r in seen
        .iter()
        .filter(|s| s.kind == "HTTPRoute" && s.name == route && s.names(canary))
    {
        let deployment = seen
            .iter()
            .rev()
            .filter(|s| s.revision < r.revision)
            .find(|s| s.kind == "Deployment" && s.name == canary);
        // (None: the route as first listed, older than every Deployment seen.)
        assert!(
            deployment.is_none_or(|d| d.complete && !d.going),
            "the route named the canary (revision {}) while its Deployment was not complete:\n{told}",
            r.revision
        );
    }
    checked
}
