//! What admission reads besides the object: policies, namespace labels and
//! the routes other services claim. Kept in memory by watches (kube-runtime
//! reflectors) or loaded once from `--policy-file`; the admission path never
//! calls the API server.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio_util::sync::CancellationToken;

use crate::api::v1beta1::InferenceService;
use crate::api::{ClusterInferencePolicy, GatewayRef, InferencePolicy};
use crate::engine::{PolicySnapshot, RouteIndex};

/// The label every namespace carries with its own name (Kubernetes >= 1.21);
/// supplied even before the namespace watch has seen a new namespace.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Errors while loading `--policy-file`.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// The file could not be read.
    #[error("failed to read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not YAML or JSON.
    #[error("failed to parse {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A document is not a policy.
    #[error(
        "{path}: document {index} is {kind:?}, not a ClusterInferencePolicy or InferencePolicy"
    )]
    NotAPolicy {
        /// The file.
        path: String,
        /// Zero-based document index.
        index: usize,
        /// The kind found.
        kind: String,
    },
}

/// Rendered routes of stored services: `(gateway namespace, gateway name, path)`
/// to the services `(namespace, name)` claiming it.
#[derive(Debug, Default)]
pub struct RouteTable {
    routes: HashMap<(String, String, String), Vec<(String, String)>>,
}

impl RouteTable {
    /// Index the route claims of `services`.
    pub fn build<'a>(services: impl IntoIterator<Item = &'a InferenceService>) -> Self {
        let mut routes: HashMap<(String, String, String), Vec<(String, String)>> = HashMap::new();
        for svc in services {
            let Some((gw, path)) = crate::engine::route_claim(svc) else {
                continue;
            };
            let ns = svc.metadata.namespace.clone().unwrap_or_default();
            let name = svc.metadata.name.clone().unwrap_or_default();
            let gw_ns = gw.namespace.clone().unwrap_or_else(|| ns.clone());
            routes
                .entry((gw_ns, gw.name, path))
                .or_default()
                .push((ns, name));
        }
        for owners in routes.values_mut() {
            owners.sort();
        }
        RouteTable { routes }
    }
}

impl RouteIndex for RouteTable {
    fn owner(
        &self,
        gateway: &GatewayRef,
        path: &str,
        exclude: (&str, &str),
    ) -> Option<(String, String)> {
        let key = (
            gateway.namespace.clone().unwrap_or_default(),
            gateway.name.clone(),
            path.to_owned(),
        );
        self.routes
            .get(&key)?
            .iter()
            .find(|(ns, name)| (ns.as_str(), name.as_str()) != exclude)
            .cloned()
    }
}

/// Everything admission reads, swapped atomically as watches deliver changes.
#[derive(Debug)]
pub struct PolicyCache {
    policies: ArcSwap<PolicySnapshot>,
    namespaces: ArcSwap<HashMap<String, Arc<BTreeMap<String, String>>>>,
    routes: ArcSwap<RouteTable>,
    pending_syncs: AtomicUsize,
    watching: AtomicBool,
}

impl Default for PolicyCache {
    fn default() -> Self {
        Self::new(PolicySnapshot::default())
    }
}

impl PolicyCache {
    /// A cache holding `policies`, synced, with no namespaces and no routes
    /// (`--policy-file` mode and tests).
    #[must_use]
    pub fn new(policies: PolicySnapshot) -> Self {
        PolicyCache {
            policies: ArcSwap::from_pointee(policies),
            namespaces: ArcSwap::from_pointee(HashMap::new()),
            routes: ArcSwap::from_pointee(RouteTable::default()),
            pending_syncs: AtomicUsize::new(0),
            watching: AtomicBool::new(false),
        }
    }

    /// Load every policy in `paths` (multi-document YAML or JSON).
    pub fn from_files(paths: &[impl AsRef<Path>]) -> Result<Self, PolicyFileError> {
        let mut snapshot = PolicySnapshot::default();
        for path in paths {
            let path = path.as_ref();
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| PolicyFileError::Read {
                path: shown.clone(),
                source,
            })?;
            let docs: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(&text).map_err(|e| PolicyFileError::Parse {
                    path: shown.clone(),
                    message: e.to_string(),
                })?;
            for (index, doc) in docs.into_iter().enumerate() {
                if doc.is_null() {
                    continue;
                }
                let kind = doc
                    .get("kind")
                    .and_then(|k| k.as_str())
                    .unwrap_or_default()
                    .to_owned();
                let parse_err = |e: serde_json::Error| PolicyFileError::Parse {
                    path: shown.clone(),
                    message: format!("document {index}: {e}"),
                };
                match kind.as_str() {
                    "ClusterInferencePolicy" => snapshot
                        .cluster
                        .push(serde_json::from_value(doc).map_err(parse_err)?),
                    "InferencePolicy" => snapshot
                        .namespaced
                        .push(serde_json::from_value(doc).map_err(parse_err)?),
                    _ => {
                        return Err(PolicyFileError::NotAPolicy {
                            path: shown,
                            index,
                            kind,
                        });
                    }
                }
            }
        }
        Ok(Self::new(snapshot))
    }

    /// The policies now.
    #[must_use]
    pub fn policies(&self) -> Arc<PolicySnapshot> {
        self.policies.load_full()
    }

    /// Replace the policies (tests, `--policy-file`).
    pub fn set_policies(&self, policies: PolicySnapshot) {
        self.policies.store(Arc::new(policies));
    }

    /// Labels of `namespace`, always including `kubernetes.io/metadata.name`.
    #[must_use]
    pub fn namespace_labels(&self, namespace: &str) -> Arc<BTreeMap<String, String>> {
        if let Some(labels) = self.namespaces.load().get(namespace) {
            return labels.clone();
        }
        let mut labels = BTreeMap::new();
        labels.insert(NAMESPACE_NAME_LABEL.to_owned(), namespace.to_owned());
        Arc::new(labels)
    }

    /// Replace the namespace labels (tests).
    pub fn set_namespaces(&self, namespaces: HashMap<String, BTreeMap<String, String>>) {
        self.namespaces.store(Arc::new(
            namespaces
                .into_iter()
                .map(|(k, v)| (k, Arc::new(v)))
                .collect(),
        ));
    }

    /// The route table now.
    #[must_use]
    pub fn routes(&self) -> Arc<RouteTable> {
        self.routes.load_full()
    }

    /// Replace the route table (tests).
    pub fn set_routes(&self, routes: RouteTable) {
        self.routes.store(Arc::new(routes));
    }

    /// Whether every watch has delivered its initial list.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        self.pending_syncs.load(Ordering::Acquire) == 0
    }

    /// Whether the cache is fed by watches (not `--policy-file`).
    #[must_use]
    pub fn is_watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// Start the watches of policies, namespaces and InferenceServices. The
    /// cache reports synced once each has listed; the watches run until
    /// `shutdown`. With `watch_policies == false` (policies from files) only
    /// namespaces and services are watched.
    pub fn spawn_watches(
        self: &Arc<Self>,
        client: Client,
        watch_policies: bool,
        shutdown: CancellationToken,
    ) {
        self.watching.store(true, Ordering::Release);
        let n = if watch_policies { 4 } else { 2 };
        self.pending_syncs.fetch_add(n, Ordering::AcqRel);
        if watch_policies {
            let (cluster_store, cluster_writer) = reflector::store::<ClusterInferencePolicy>();
            let (ns_store, ns_writer) = reflector::store::<InferencePolicy>();
            let rebuild = {
                let cache = Arc::clone(self);
                let cluster_store = cluster_store.clone();
                let ns_store = ns_store.clone();
                move || {
                    let snapshot = PolicySnapshot {
                        cluster: sorted(&cluster_store),
                        namespaced: sorted(&ns_store),
                    };
                    cache.policies.store(Arc::new(snapshot));
                }
            };
            let rebuild = Arc::new(rebuild);
            spawn_reflector(
                Arc::clone(self),
                Api::<ClusterInferencePolicy>::all(client.clone()),
                cluster_writer,
                {
                    let r = Arc::clone(&rebuild);
                    move || r()
                },
                shutdown.clone(),
            );
            spawn_reflector(
                Arc::clone(self),
                Api::<InferencePolicy>::all(client.clone()),
                ns_writer,
                move || rebuild(),
                shutdown.clone(),
            );
        }
        let (ns_store, ns_writer) = reflector::store::<Namespace>();
        {
            let cache = Arc::clone(self);
            spawn_reflector(
                Arc::clone(self),
                Api::<Namespace>::all(client.clone()),
                ns_writer,
                move || {
                    let map = ns_store
                        .state()
                        .iter()
                        .filter_map(|ns| {
                            let name = ns.metadata.name.clone()?;
                            let mut labels = ns.metadata.labels.clone().unwrap_or_default();
                            labels
                                .entry(NAMESPACE_NAME_LABEL.to_owned())
                                .or_insert_with(|| name.clone());
                            Some((name, Arc::new(labels)))
                        })
                        .collect();
                    cache.namespaces.store(Arc::new(map));
                },
                shutdown.clone(),
            );
        }
        let (svc_store, svc_writer) = reflector::store::<InferenceService>();
        let cache = Arc::clone(self);
        spawn_reflector(
            Arc::clone(self),
            Api::<InferenceService>::all(client),
            svc_writer,
            move || {
                let state = svc_store.state();
                cache
                    .routes
                    .store(Arc::new(RouteTable::build(state.iter().map(|s| &**s))));
            },
            shutdown,
        );
    }
}

fn sorted<K: Resource + Clone>(store: &Store<K>) -> Vec<K>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    let mut items: Vec<K> = store.state().iter().map(|k| (**k).clone()).collect();
    items.sort_by(|a, b| {
        (a.meta().namespace.as_deref(), a.meta().name.as_deref())
            .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
    });
    items
}

/// Run one reflector: feed `writer`, call `on_change` after the initial list
/// and after every later change, count the cache synced after the first list.
fn spawn_reflector<K>(
    cache: Arc<PolicyCache>,
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    on_change: impl Fn() + Send + 'static,
    shutdown: CancellationToken,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    tokio::spawn(async move {
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).default_backoff(),
        );
        futures::pin_mut!(stream);
        let mut synced = false;
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                ev = stream.next() => ev,
            };
            match event {
                None => return,
                Some(Ok(watcher::Event::InitDone)) => {
                    on_change();
                    if !synced {
                        synced = true;
                        cache.pending_syncs.fetch_sub(1, Ordering::AcqRel);
                        tracing::info!(kind = %kind, "cache synced");
                    }
                }
                Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) => on_change(),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(kind = %kind, error = %e, "watch failed; retrying");
                }
            }
        }
    });
}
