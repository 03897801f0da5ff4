//! The watches of one leadership term: the children of every kind of
//! [`each_kind`] (by infergate's label, metadata only; a kind of an optional
//! CRD once it is served), and the triggers taken from the shared state's
//! service events.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc;
use futures::future::BoxFuture;
use kube::Client;
use kube::api::{ObjectMeta, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{Controller, Predicate, WatchStreamExt, predicates};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::children::{ANNOTATION_APPLIED, LABEL_MANAGED_BY};
use super::discovery::{ApiDiscovery, DISCOVERY_TTL_MISSING};
use super::graph as resolve;
use super::kinds::{Child, ChildCaches, ChildKind, Crd, KindVisitor, discovery, each_kind};
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::graph::fetch::GraphFetcher;
use crate::state::{Scope, ServiceEvent};

/// A child kind's cache and the stream of its touched objects.
type ChildWatch<K> = (
    Store<PartialObjectMeta<K>>,
    mpsc::UnboundedReceiver<PartialObjectMeta<K>>,
);

/// Adds one kind's owner triggers to the controller.
type Trigger = Box<dyn FnOnce(Controller<InferenceService>) -> Controller<InferenceService> + Send>;

/// The children of every kind of [`each_kind`], watched for one term.
pub(super) struct ChildWatches {
    /// Every kind's cache (and an optional CRD's discovery).
    pub(super) caches: ChildCaches,
    /// Ends once every cache the controller waits for holds its first list
    /// (an optional kind's is not waited for).
    pub(super) synced: BoxFuture<'static, ()>,
    /// Every kind's stream of touched children, for the controller.
    pub(super) triggers: Triggers,
}

impl ChildWatches {
    /// Start the watches of every child kind, in the order of
    /// [`each_kind`]. An optional CRD that reconciles every service on
    /// arrival says so on `crd_appeared`.
    pub(super) fn start(
        tasks: &mut JoinSet<()>,
        client: &Client,
        scope: &Scope,
        crd_appeared: mpsc::UnboundedSender<()>,
    ) -> Self {
        let mut starter = Starter {
            tasks,
            client,
            scope,
            crd_appeared,
            caches: ChildCaches::default(),
            synced: Vec::new(),
            triggers: Vec::new(),
        };
        each_kind(&mut starter);
        let synced = starter.synced;
        ChildWatches {
            caches: starter.caches,
            synced: Box::pin(async move {
                for cache in synced {
                    cache.await;
                }
            }),
            triggers: Triggers(starter.triggers),
        }
    }
}

/// Every kind's owner triggers.
pub(super) struct Triggers(Vec<Trigger>);

impl Triggers {
    /// `controller`, triggered by every kind's children (a child touches
    /// the service that owns it).
    pub(super) fn attach(
        self,
        controller: Controller<InferenceService>,
    ) -> Controller<InferenceService> {
        self.0.into_iter().fold(controller, |c, add| add(c))
    }
}

/// Starts one kind's watch at a time (see [`ChildWatches::start`]).
struct Starter<'a> {
    tasks: &'a mut JoinSet<()>,
    client: &'a Client,
    scope: &'a Scope,
    crd_appeared: mpsc::UnboundedSender<()>,
    caches: ChildCaches,
    synced: Vec<BoxFuture<'static, ()>>,
    triggers: Vec<Trigger>,
}

impl KindVisitor for Starter<'_> {
    fn visit<K: ChildKind>(&mut self) {
        let (store, rx, api) = match K::CRD {
            Crd::BuiltIn => {
                let (store, rx) = child_reflector::<K>(self.tasks, self.client, self.scope);
                let cache = store.clone();
                self.synced.push(Box::pin(async move {
                    let _ = cache.wait_until_ready().await;
                }));
                (store, rx, None)
            }
            Crd::Optional {
                reconcile_all_on_arrival,
            } => {
                let api = Arc::new(discovery::<K>());
                let appeared = reconcile_all_on_arrival.then(|| self.crd_appeared.clone());
                let (store, rx) = optional_reflector::<K>(
                    self.tasks,
                    self.client.clone(),
                    self.scope.clone(),
                    api.clone(),
                    appeared,
                );
                (store, rx, Some(api))
            }
        };
        self.caches.insert::<K>(store, api);
        self.triggers
            .push(Box::new(move |c| c.owns_stream(rx.map(Ok))));
    }
}

/// Drive a metadata reflector for a child kind; forward every object touched
/// after its first list (including deletions) to the controller as an owner
/// trigger (the controller waits for this cache, then reconciles every
/// service once).
fn child_reflector<K: Child>(
    tasks: &mut JoinSet<()>,
    client: &Client,
    scope: &Scope,
) -> ChildWatch<K> {
    let (reader, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded();
    tasks.spawn(forward_children(
        client.clone(),
        scope.clone(),
        writer,
        tx,
        false,
    ));
    (reader, rx)
}

/// Children of an optional CRD (HTTPRoute, RayService, PodMonitor,
/// InferencePool) are
/// watched once it is installed. A CRD that was missing and appears is
/// announced on `appeared` (so every service can be reconciled once).
fn optional_reflector<K: Child>(
    tasks: &mut JoinSet<()>,
    client: Client,
    scope: Scope,
    discovery: Arc<ApiDiscovery>,
    appeared: Option<mpsc::UnboundedSender<()>>,
) -> ChildWatch<K> {
    let (reader, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded();
    let kind = K::kind(&()).into_owned();
    tasks.spawn(async move {
        let mut missing = false;
        loop {
            match discovery.installed(&client).await {
                Ok(true) => break,
                Ok(false) => {
                    debug!(kind = %kind, "CRD not installed; not watched yet");
                    missing = true;
                }
                Err(e) => warn!(kind = %kind, error = %e, "API discovery failed"),
            }
            tokio::time::sleep(DISCOVERY_TTL_MISSING).await;
        }
        if missing && let Some(appeared) = appeared {
            info!(kind = %kind, "CRD installed; watching it and reconciling every service");
            let _ = appeared.unbounded_send(());
        }
        // The controller does not wait for an optional cache: its first
        // list triggers the services it names.
        forward_children(client, scope, writer, tx, true).await;
    });
    (reader, rx)
}

/// Watch the children of one kind (by infergate's label, metadata only)
/// into `writer`, and forward every touched object (deletions included) to
/// the controller as an owner trigger, until the controller is gone; the
/// first list's objects only when `first_list_triggers`.
async fn forward_children<K: Child>(
    client: Client,
    scope: Scope,
    writer: reflector::store::Writer<PartialObjectMeta<K>>,
    tx: mpsc::UnboundedSender<PartialObjectMeta<K>>,
    first_list_triggers: bool,
) {
    let kind = K::kind(&()).into_owned();
    let wc = crate::state::scope::list_in_pages().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    let mut stream = std::pin::pin!(
        scope
            .watch::<PartialObjectMeta<K>>(&client, wc)
            .default_backoff()
            .modify(|m| {
                m.types = None;
                keep_what_the_reconciler_reads(&mut m.metadata);
            })
            .reflect(writer)
    );
    // The first list is not handed on when the controller waits for this
    // cache: it reconciles every service once the caches are synced
    // anyway, and thousands of queued copies would only cost memory. A
    // later list (the watch expired) is: it carries what changed meanwhile.
    let mut listed = !first_list_triggers;
    while let Some(item) = stream.next().await {
        let touched = match item {
            Ok(Event::Apply(obj) | Event::Delete(obj)) => obj,
            Ok(Event::InitApply(obj)) if listed => obj,
            Ok(Event::InitDone) => {
                listed = true;
                continue;
            }
            Ok(Event::Init | Event::InitApply(_)) => continue,
            Err(e) => {
                crate::state::log_watch_error(&kind, &e, "child watch");
                continue;
            }
        };
        if tx.unbounded_send(touched).is_err() {
            return;
        }
    }
}

/// Trim a cached child's metadata to what the reconciler reads of it: its
/// name and namespace (the cache's key), uid, resourceVersion and
/// generation (whether it changed since infergate applied it), owner
/// references (whose it is; the controller's trigger), deletion timestamp,
/// and [`ANNOTATION_APPLIED`] (what infergate applied). Labels (the watch
/// selects on them on the server), other annotations, finalizers and the
/// managed fields (most of an applied object's metadata) are dropped: at a
/// few kilobytes per child they were most of the reconciler's memory.
fn keep_what_the_reconciler_reads(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.labels = None;
    meta.finalizers = None;
    meta.creation_timestamp = None;
    meta.generate_name = None;
    meta.self_link = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|k, _| k == ANNOTATION_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// The services to reconcile, from the shared watch's events: a change of
/// generation, labels or annotations triggers (templates may read labels);
/// a status-only update, our own status writes among them, does not. A
/// deletion drops the service's cached graph.
pub(super) fn service_triggers(
    events: tokio::sync::mpsc::Receiver<ServiceEvent>,
    graph_fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
) -> impl futures::Stream<Item = Arc<InferenceService>> + Send + 'static {
    let predicate = predicates::generation
        .combine(predicates::labels)
        .combine(predicates::annotations);
    let mut seen: HashMap<ObjectRef<InferenceService>, u64> = HashMap::new();
    futures::stream::unfold(events, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    })
    .filter_map(move |event| {
        let trigger = match event {
            ServiceEvent::Applied(svc) => {
                let key = ObjectRef::from_obj(svc.as_ref());
                match predicate.hash_property(svc.as_ref()) {
                    Some(hash) if seen.insert(key, hash) == Some(hash) => None,
                    _ => Some(svc),
                }
            }
            ServiceEvent::Deleted(key) => {
                if let Some(g) = graph_fetcher.get() {
                    g.forget(&resolve::cache_key_of(&key));
                }
                seen.remove(&key);
                None
            }
        };
        std::future::ready(trigger)
    })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::json;

    use super::*;

    fn svc(generation: i64, labels: serde_json::Value, phase: &str) -> Arc<InferenceService> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                "metadata": {"namespace": "team", "name": "chat", "generation": generation,
                             "labels": labels},
                "spec": {"model": {"ref": "m"}},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": phase,
                                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
            }))
            .expect("service decodes"),
        )
    }

    #[test]
    fn a_cached_child_keeps_only_what_the_reconciler_reads() {
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-11-25T10:00:00Z",
            "deletionTimestamp": "2026-11-25T11:00:00Z", "finalizers": ["x/y"],
            "labels": {"app.kubernetes.io/managed-by": "infergate", "infergate.dev/track": "primary"},
            "annotations": {ANNOTATION_APPLIED: "d1", "deployment.kubernetes.io/revision": "2"},
            "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                 "name": "chat", "uid": "svc-uid", "controller": true}],
            "managedFields": [{"manager": "infergate", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
        }))
        .expect("metadata");
        keep_what_the_reconciler_reads(&mut meta);
        assert_eq!(
            serde_json::to_value(&meta).expect("json"),
            json!({
                "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": "42",
                "generation": 3, "deletionTimestamp": "2026-11-25T11:00:00Z",
                "annotations": {ANNOTATION_APPLIED: "d1"},
                "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                     "name": "chat", "uid": "svc-uid", "controller": true}]
            })
        );
        // A child without the annotation keeps no empty map.
        let mut bare: ObjectMeta =
            serde_json::from_value(json!({"name": "x", "annotations": {"a": "b"}})).expect("meta");
        keep_what_the_reconciler_reads(&mut bare);
        assert_eq!(bare.annotations, None);
    }

    #[tokio::test]
    async fn only_spec_label_and_annotation_changes_trigger() {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let triggers = service_triggers(rx, Arc::new(std::sync::OnceLock::new()));
        let events = [
            svc(1, json!({}), "Progressing"),
            // A status-only update (our own status write): no trigger.
            svc(1, json!({}), "Available"),
            // A new generation (spec change): a trigger.
            svc(2, json!({}), "Available"),
            // A label change (templates may read labels): a trigger.
            svc(2, json!({"team": "a"}), "Available"),
        ];
        for e in events {
            tx.send(ServiceEvent::Applied(e)).await.expect("send");
        }
        // After a deletion the same object is new again.
        let gone = svc(2, json!({"team": "a"}), "Available");
        tx.send(ServiceEvent::Deleted(ObjectRef::from_obj(gone.as_ref())))
            .await
            .expect("send");
        tx.send(ServiceEvent::Applied(gone)).await.expect("send");
        drop(tx);
        let seen: Vec<(Option<i64>, usize)> = triggers
            .map(|s| {
                (
                    s.metadata.generation,
                    s.metadata.labels.as_ref().map_or(0, |l| l.len()),
                )
            })
            .collect()
            .await;
        assert_eq!(
            seen,
            [(Some(1), 0), (Some(2), 0), (Some(2), 1), (Some(2), 1)]
        );
    }
}
