//! [`ClusterState`]: the policies, namespace labels, services and route index
//! the watches keep, and the watches that keep them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwap;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::api::v1beta1::InferenceService;
use crate::api::{AcceleratorClass, ClusterInferencePolicy, InferencePolicy, ModelProfile};
use crate::engine::{AcceleratorClasses, ModelProfiles, PolicySnapshot};

use super::namespace::{add_name_label, name_label_only};
use super::room::Room;
use super::routes::RouteTable;
use super::scope::{self, Scope};
use super::watching::{log_watch_error, next_until};

/// Service events waiting for the reconciler before the watch waits for it.
pub const SERVICE_EVENT_BUFFER: usize = 1024;

/// A change to a stored InferenceService, as the reconciler receives it.
#[derive(Debug, Clone)]
pub enum ServiceEvent {
    /// Created or changed (or listed again after a watch restart).
    Applied(Arc<InferenceService>),
    /// Deleted.
    Deleted(ObjectRef<InferenceService>),
}

/// Everything infergate reads from the cluster besides its children.
#[derive(Debug)]
pub struct ClusterState {
    policies: ArcSwap<PolicySnapshot>,
    classes: ArcSwap<AcceleratorClasses>,
    profiles: ArcSwap<ModelProfiles>,
    namespaces: RwLock<HashMap<String, Arc<BTreeMap<String, String>>>>,
    routes: RwLock<RouteTable>,
    services: Store<InferenceService>,
    services_writer: Mutex<Option<reflector::store::Writer<InferenceService>>>,
    pending_syncs: watch::Sender<usize>,
    watching: AtomicBool,
    policy_changes: watch::Sender<u64>,
    service_events: Mutex<Option<mpsc::Sender<ServiceEvent>>>,
    room: Arc<Room>,
    served: Arc<super::served::Served>,
    foreign: Arc<super::foreign::ForeignRoutes>,
}

impl Default for ClusterState {
    fn default() -> Self {
        Self::new(PolicySnapshot::default())
    }
}

impl ClusterState {
    /// A state holding `policies`, with no namespaces and no services, synced
    /// (`--policy-file` before the watches start, tests).
    #[must_use]
    pub fn new(policies: PolicySnapshot) -> Self {
        let (services, writer) = reflector::store();
        ClusterState {
            policies: ArcSwap::from_pointee(policies),
            classes: ArcSwap::from_pointee(AcceleratorClasses::new()),
            profiles: ArcSwap::from_pointee(ModelProfiles::default()),
            namespaces: RwLock::new(HashMap::new()),
            routes: RwLock::new(RouteTable::default()),
            services,
            services_writer: Mutex::new(Some(writer)),
            pending_syncs: watch::Sender::new(0),
            watching: AtomicBool::new(false),
            policy_changes: watch::Sender::new(0),
            service_events: Mutex::new(None),
            room: Arc::new(Room::default()),
            served: Arc::default(),
            foreign: Arc::default(),
        }
    }

    /// The policies now.
    #[must_use]
    pub fn policies(&self) -> Arc<PolicySnapshot> {
        self.policies.load_full()
    }

    /// Replace the policies (tests, `--policy-file`).
    pub fn set_policies(&self, policies: PolicySnapshot) {
        self.policies.store(Arc::new(policies));
        self.policy_changes.send_modify(|n| *n += 1);
    }

    /// The AcceleratorClasses now.
    #[must_use]
    pub fn classes(&self) -> Arc<AcceleratorClasses> {
        self.classes.load_full()
    }

    /// Replace the AcceleratorClasses; every service is reconciled again
    /// (a class gone or changed changes its services' pods or status).
    pub fn set_classes(&self, classes: AcceleratorClasses) {
        self.classes.store(Arc::new(classes));
        self.policy_changes.send_modify(|n| *n += 1);
    }

    /// The ModelProfiles now.
    #[must_use]
    pub fn profiles(&self) -> Arc<ModelProfiles> {
        self.profiles.load_full()
    }

    /// Replace the ModelProfiles; every service is reconciled again (its
    /// `status.capacity` follows its profile).
    pub fn set_profiles(&self, profiles: ModelProfiles) {
        self.profiles.store(Arc::new(profiles));
        self.policy_changes.send_modify(|n| *n += 1);
    }

    /// The exact header matches of HTTPRoutes infergate does not own
    /// (watched once the cluster serves HTTPRoutes).
    #[must_use]
    pub fn foreign_routes(&self) -> &super::foreign::ForeignRoutes {
        &self.foreign
    }

    /// Free devices per AcceleratorClass, from the watches of nodes and
    /// pods (started with the others when every namespace is watched).
    #[must_use]
    pub fn room(&self) -> &Room {
        &self.room
    }

    /// Which optional APIs the cluster serves, as discovery last said.
    #[must_use]
    pub fn served(&self) -> &super::served::Served {
        &self.served
    }

    /// The free devices of the AcceleratorClass named `class`: `None` when
    /// no such class is known, while the node and pod watches have not
    /// listed, and always in the namespace-scoped install (which may not
    /// watch nodes): then nothing may be decided from room.
    #[must_use]
    pub fn free_devices(&self, class: &str) -> Option<crate::engine::capacity::room::Free> {
        let classes = self.classes();
        self.room.free(classes.get(class)?)
    }

    /// Labels of `namespace`, always including `kubernetes.io/metadata.name`.
    #[must_use]
    pub fn namespace_labels(&self, namespace: &str) -> Arc<BTreeMap<String, String>> {
        if let Ok(map) = self.namespaces.read()
            && let Some(labels) = map.get(namespace)
        {
            return Arc::clone(labels);
        }
        Arc::new(name_label_only(namespace))
    }

    /// Set the labels of `namespace` (the watch, tests); whether they changed.
    pub fn set_namespace_labels(
        &self,
        namespace: &str,
        mut labels: BTreeMap<String, String>,
    ) -> bool {
        add_name_label(&mut labels, namespace);
        let Ok(mut map) = self.namespaces.write() else {
            return false;
        };
        let changed = map.get(namespace).is_none_or(|old| **old != labels);
        if changed {
            map.insert(namespace.to_owned(), Arc::new(labels));
        }
        changed
    }

    /// Run `f` with the route claims of every stored service.
    pub fn with_routes<R>(&self, f: impl FnOnce(&RouteTable) -> R) -> R {
        match self.routes.read() {
            Ok(table) => f(&table),
            // A writer panicked mid-update: the table is still a table.
            Err(poisoned) => f(&poisoned.into_inner()),
        }
    }

    /// Record a service's route claim as if the watch had delivered it (tests).
    pub fn apply_service(&self, svc: &InferenceService) {
        self.update_routes(|t| t.upsert(svc));
    }

    fn update_routes(&self, f: impl FnOnce(&mut RouteTable)) {
        match self.routes.write() {
            Ok(mut table) => f(&mut table),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Every stored InferenceService (filled once the watches run).
    #[must_use]
    pub fn services(&self) -> Store<InferenceService> {
        self.services.clone()
    }

    /// Whether every watch has delivered its initial list.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        *self.pending_syncs.borrow() == 0
    }

    /// Wait until every watch has delivered its initial list.
    pub async fn synced(&self) {
        let mut rx = self.pending_syncs.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Whether the state is fed by watches.
    #[must_use]
    pub fn is_watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// A counter that moves whenever a policy or a namespace's labels change
    /// (every service's defaults and compliance may change with them).
    #[must_use]
    pub fn policy_changes(&self) -> watch::Receiver<u64> {
        self.policy_changes.subscribe()
    }

    /// Receive every later service event. One receiver at a time: a new
    /// subscription replaces the last one (the reconciler subscribes once
    /// per leadership term). The watch waits while the receiver's buffer
    /// ([`SERVICE_EVENT_BUFFER`]) is full, and forgets a dropped receiver.
    pub fn subscribe_services(&self) -> mpsc::Receiver<ServiceEvent> {
        let (tx, rx) = mpsc::channel(SERVICE_EVENT_BUFFER);
        if let Ok(mut slot) = self.service_events.lock() {
            *slot = Some(tx);
        }
        rx
    }

    async fn publish(&self, event: ServiceEvent) {
        let tx = self.service_events.lock().ok().and_then(|s| s.clone());
        if let Some(tx) = tx
            && tx.send(event).await.is_err()
            && let Ok(mut slot) = self.service_events.lock()
            && slot.as_ref().is_some_and(|s| s.same_channel(&tx))
        {
            *slot = None;
        }
    }

    /// Watch one policy kind (or the AcceleratorClasses or ModelProfiles) into `writer`;
    /// rebuild the snapshot on every change.
    fn spawn_policy_watch<K>(
        self: &Arc<Self>,
        stream: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
        mut writer: reflector::store::Writer<K>,
        rebuild: Arc<dyn Fn() + Send + Sync>,
        shutdown: &CancellationToken,
    ) where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        tokio::spawn(run_watch(
            Arc::clone(self),
            stream,
            shutdown.clone(),
            move |event| {
                writer.apply_watcher_event(&event);
                if is_change(&event) {
                    rebuild();
                }
                Vec::new()
            },
        ));
    }

    /// Start the watches; `watch_policies == false` when policies come from
    /// files. Services and InferencePolicies are watched in `scope`;
    /// ClusterInferencePolicies, AcceleratorClasses, ModelProfiles and namespaces cluster-wide,
    /// and, when `scope` is every namespace, the nodes and pods of
    /// [`Self::room`]. The state reports synced once each watch but the
    /// room's has listed; the watches run until `shutdown`. Calling it
    /// twice starts nothing new.
    pub fn spawn_watches(
        self: &Arc<Self>,
        client: Client,
        scope: &Scope,
        watch_policies: bool,
        shutdown: CancellationToken,
    ) {
        let Some(services_writer) = self.services_writer.lock().ok().and_then(|mut w| w.take())
        else {
            return;
        };
        self.watching.store(true, Ordering::Release);
        self.pending_syncs
            .send_modify(|n| *n += if watch_policies { 6 } else { 2 });
        if watch_policies {
            self.spawn_policy_watches(&client, scope, &shutdown);
        }
        self.spawn_namespace_watch(&client, shutdown.clone());
        self.served.spawn(client.clone(), shutdown.clone());
        self.foreign
            .spawn(client.clone(), scope.clone(), shutdown.clone());
        if *scope == Scope::All {
            super::room::watch::spawn(&self.room, &client, &shutdown);
        }
        self.spawn_service_watch(&client, scope, services_writer, shutdown);
    }

    /// The cluster's and namespaces' policies, the AcceleratorClasses and
    /// the ModelProfiles, each a reflector whose change rebuilds its map.
    fn spawn_policy_watches(
        self: &Arc<Self>,
        client: &Client,
        scope: &Scope,
        shutdown: &CancellationToken,
    ) {
        let (cluster, cluster_writer) = reflector::store::<ClusterInferencePolicy>();
        let (namespaced, namespaced_writer) = reflector::store::<InferencePolicy>();
        let rebuild: Arc<dyn Fn() + Send + Sync> = {
            let state = Arc::clone(self);
            let (cluster, namespaced) = (cluster.clone(), namespaced.clone());
            Arc::new(move || {
                state.set_policies(PolicySnapshot {
                    cluster: sorted(&cluster),
                    namespaced: sorted(&namespaced),
                });
            })
        };
        self.spawn_policy_watch(
            watcher::watcher(
                Api::<ClusterInferencePolicy>::all(client.clone()),
                scope::list_in_pages(),
            )
            .boxed(),
            cluster_writer,
            Arc::clone(&rebuild),
            shutdown,
        );
        self.spawn_policy_watch(
            scope.watch::<InferencePolicy>(client, scope::list_in_pages()),
            namespaced_writer,
            rebuild,
            shutdown,
        );
        let (classes, classes_writer) = reflector::store::<AcceleratorClass>();
        let state = Arc::clone(self);
        self.spawn_policy_watch(
            watcher::watcher(
                Api::<AcceleratorClass>::all(client.clone()),
                scope::list_in_pages(),
            )
            .boxed(),
            classes_writer,
            Arc::new(move || state.set_classes(class_map(&classes))),
            shutdown,
        );
        let (profiles, profiles_writer) = reflector::store::<ModelProfile>();
        let state = Arc::clone(self);
        self.spawn_policy_watch(
            watcher::watcher(
                Api::<ModelProfile>::all(client.clone()),
                scope::list_in_pages(),
            )
            .boxed(),
            profiles_writer,
            Arc::new(move || state.set_profiles(profile_map(&profiles))),
            shutdown,
        );
    }

    /// Namespaces' labels (for policy selectors); a change of labels is a
    /// policy change.
    fn spawn_namespace_watch(self: &Arc<Self>, client: &Client, shutdown: CancellationToken) {
        let state = Arc::clone(self);
        tokio::spawn(run_watch(
            Arc::clone(self),
            watcher::watcher(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                scope::list_in_pages(),
            )
            .boxed(),
            shutdown,
            move |event| {
                let changed = match &event {
                    watcher::Event::Apply(ns) | watcher::Event::InitApply(ns) => {
                        state.set_namespace_labels(&ns.name_any(), ns.labels().clone())
                            && matches!(event, watcher::Event::Apply(_))
                    }
                    watcher::Event::Delete(ns) => {
                        if let Ok(mut map) = state.namespaces.write() {
                            map.remove(&ns.name_any());
                        }
                        false
                    }
                    _ => false,
                };
                if changed {
                    state.policy_changes.send_modify(|n| *n += 1);
                }
                Vec::new()
            },
        ));
    }

    /// The InferenceServices (and the route table built from them): each
    /// change handed on as a [`ServiceEvent`].
    fn spawn_service_watch(
        self: &Arc<Self>,
        client: &Client,
        scope: &Scope,
        writer: reflector::store::Writer<InferenceService>,
        shutdown: CancellationToken,
    ) {
        let state = Arc::clone(self);
        let mut writer = writer;
        let mut staging = RouteTable::default();
        let mut relisted = Vec::new();
        tokio::spawn(run_watch(
            Arc::clone(self),
            scope
                .watch::<InferenceService>(client, scope::list_in_pages())
                // Nothing reads who manages which field; left out of the cache.
                .modify(|svc| {
                    svc.metadata.managed_fields = None;
                })
                .boxed(),
            shutdown,
            move |event| {
                writer.apply_watcher_event(&event);
                match event {
                    watcher::Event::Apply(svc) => {
                        state.apply_service(&svc);
                        state
                            .services
                            .get(&ObjectRef::from_obj(&svc))
                            .map(ServiceEvent::Applied)
                            .into_iter()
                            .collect()
                    }
                    watcher::Event::Delete(svc) => {
                        let key = ObjectRef::from_obj(&svc);
                        let ns = key.namespace.clone().unwrap_or_default();
                        state.update_routes(|t| t.remove(&ns, &key.name));
                        vec![ServiceEvent::Deleted(key)]
                    }
                    watcher::Event::Init => {
                        staging = RouteTable::default();
                        relisted.clear();
                        Vec::new()
                    }
                    watcher::Event::InitApply(svc) => {
                        staging.upsert(&svc);
                        relisted.push(ObjectRef::from_obj(&svc));
                        Vec::new()
                    }
                    watcher::Event::InitDone => {
                        let table = std::mem::take(&mut staging);
                        state.update_routes(|t| *t = table);
                        // The store holds the new list now: hand each object on.
                        relisted
                            .drain(..)
                            .filter_map(|key| state.services.get(&key))
                            .map(ServiceEvent::Applied)
                            .collect()
                    }
                }
            },
        ));
    }
}

/// Whether a watch event changes what a store holds as a whole.
fn is_change<K>(event: &watcher::Event<K>) -> bool {
    matches!(
        event,
        watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)
    )
}

/// The classes of `store` by name.
fn class_map(store: &Store<AcceleratorClass>) -> AcceleratorClasses {
    store
        .state()
        .iter()
        .map(|c| (c.name_any(), c.spec.clone()))
        .collect()
}

/// The profiles of `store`, indexed by model ref.
fn profile_map(store: &Store<ModelProfile>) -> ModelProfiles {
    ModelProfiles::from_iter(store.state().iter().map(|p| (p.name_any(), p.spec.clone())))
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

/// Drive one watch until `shutdown`: hand every event to `on_event` and
/// publish the service events it returns, count the state synced after the
/// first complete list, log failures (the watcher retries with backoff).
async fn run_watch<K, F>(
    state: Arc<ClusterState>,
    stream: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    shutdown: CancellationToken,
    mut on_event: F,
) where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Default,
    F: FnMut(watcher::Event<K>) -> Vec<ServiceEvent>,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let stream = stream.default_backoff();
    futures::pin_mut!(stream);
    let mut synced = false;
    while let Some(event) = next_until(&mut stream, &shutdown).await {
        match event {
            Ok(event) => {
                let init_done = matches!(event, watcher::Event::InitDone);
                let published = on_event(event);
                // The store is complete once the list is applied: synced
                // before its objects are handed on, since the reconciler
                // starts taking service events only once every cache is
                // synced (a list longer than its buffer would otherwise
                // wait for it forever).
                if init_done && !synced {
                    synced = true;
                    state
                        .pending_syncs
                        .send_modify(|n| *n = n.saturating_sub(1));
                    tracing::info!(kind = %kind, "cache synced");
                }
                for event in published {
                    state.publish(event).await;
                }
            }
            Err(e) => log_watch_error(&kind, &e, "watch"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_list_longer_than_the_event_buffer_syncs_before_anyone_reads_its_events() {
        let state = Arc::new(ClusterState::default());
        state.pending_syncs.send_modify(|n| *n += 1);
        // The reconciler subscribes first and reads only once every cache
        // is synced.
        let mut events = state.subscribe_services();
        let n = SERVICE_EVENT_BUFFER + 10;
        let list = std::iter::once(watcher::Event::Init)
            .chain((0..n).map(|_| watcher::Event::InitApply(InferenceService::default())))
            .chain(std::iter::once(watcher::Event::InitDone))
            .map(Ok);
        let stream = futures::stream::iter(list)
            .chain(futures::stream::pending())
            .boxed();
        let shutdown = CancellationToken::new();
        tokio::spawn(run_watch(
            Arc::clone(&state),
            stream,
            shutdown.clone(),
            move |event| match event {
                watcher::Event::InitDone => (0..n)
                    .map(|i| ServiceEvent::Deleted(ObjectRef::new(&format!("s{i}")).within("ns")))
                    .collect(),
                _ => Vec::new(),
            },
        ));
        tokio::time::timeout(Duration::from_secs(5), state.synced())
            .await
            .expect("synced while the list's events wait for a reader");
        // Every event still arrives, in order, once read.
        for i in 0..n {
            match events.recv().await {
                Some(ServiceEvent::Deleted(key)) => assert_eq!(key.name, format!("s{i}")),
                other => panic!("event {i}: {other:?}"),
            }
        }
        shutdown.cancel();
    }
}
