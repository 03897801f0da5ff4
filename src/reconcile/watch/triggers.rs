//! The watches of one leadership term: the children of every kind of
//! [`each_kind`] (by infergate's label, metadata only; a kind of an optional
//! CRD while it is served, see [`super::optional`]), and the triggers taken
//! from the shared state's service events.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, Predicate, predicates};
use tokio::task::JoinSet;
use tracing::warn;

use super::child::{Feed, child_stream};
use super::echo::Echoes;
use super::kinds::{ChildCaches, ChildKind, Crd, KindVisitor, discovery, each_kind};
use super::optional::OptionalChildren;
use super::owned::OwnedIndex;
use crate::api::v1beta1::InferenceService;
use crate::graph::fetch::GraphFetcher;
use crate::metrics::Metrics;
use crate::reconcile::graph as resolve;
use crate::state::{Scope, ServiceEvent};

/// How long the start of a term waits for an optional kind's first list
/// (its CRD served): then the services are reconciled as if the kind had
/// no children yet (a warning says so).
const OPTIONAL_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Adds one kind's owner triggers to the controller.
type Trigger = Box<dyn FnOnce(Controller<InferenceService>) -> Controller<InferenceService> + Send>;

/// The children of every kind of [`each_kind`], watched for one term.
pub(in crate::reconcile) struct ChildWatches {
    /// Every kind's cache (and an optional CRD's discovery).
    pub(in crate::reconcile) caches: ChildCaches,
    /// Ends once every built-in kind's cache holds its first list, and
    /// each optional kind's is known absent or holds its first list too
    /// (waited for [`OPTIONAL_LIST_WAIT`] at most).
    pub(in crate::reconcile) synced: BoxFuture<'static, ()>,
    /// Every kind's stream of touched children, for the controller.
    pub(in crate::reconcile) triggers: Triggers,
}

impl ChildWatches {
    /// Start the watches of every child kind, in the order of
    /// [`each_kind`]. An optional CRD that is installed after the term
    /// began (again, after a removal) says so on `crd_appeared`: `true`
    /// when every service is to be reconciled, `false` when only those
    /// waiting for an optional API ([`super::optional`]).
    pub(in crate::reconcile) fn start(
        tasks: &mut JoinSet<()>,
        client: &Client,
        scope: &Scope,
        metrics: &Metrics,
        echoes: &Arc<Echoes>,
        crd_appeared: mpsc::UnboundedSender<bool>,
    ) -> Self {
        let mut starter = Starter {
            tasks,
            client,
            scope,
            metrics,
            echoes,
            crd_appeared,
            caches: ChildCaches::default(),
            synced: Vec::new(),
            triggers: Vec::new(),
        };
        each_kind(&mut starter);
        let synced = starter.synced;
        ChildWatches {
            caches: starter.caches,
            synced: all_synced(synced),
            triggers: Triggers(starter.triggers),
        }
    }
}

/// Ends once every one of `synced` has: all waited for at once, so the
/// bounded waits of the optional kinds add up to one bound, not one each.
fn all_synced(synced: Vec<BoxFuture<'static, ()>>) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        futures::future::join_all(synced).await;
    })
}

/// Ends once an optional kind's follower says the term's start may
/// reconcile (`settled`; or it is gone), or after [`OPTIONAL_LIST_WAIT`],
/// with a warning.
fn optional_settled(kind: &'static str, settled: oneshot::Receiver<()>) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        if tokio::time::timeout(OPTIONAL_LIST_WAIT, settled)
            .await
            .is_err()
        {
            warn!(
                kind,
                waited = ?OPTIONAL_LIST_WAIT,
                "the children of an optional CRD are not listed yet; reconciling meanwhile as if there were none"
            );
        }
    })
}

/// Every kind's owner triggers.
pub(in crate::reconcile) struct Triggers(Vec<Trigger>);

impl Triggers {
    /// `controller`, triggered by every kind's children (a child touches
    /// the service that owns it).
    pub(in crate::reconcile) fn attach(
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
    metrics: &'a Metrics,
    echoes: &'a Arc<Echoes>,
    crd_appeared: mpsc::UnboundedSender<bool>,
    caches: ChildCaches,
    synced: Vec<BoxFuture<'static, ()>>,
    triggers: Vec<Trigger>,
}

impl KindVisitor for Starter<'_> {
    fn visit<K: ChildKind>(&mut self) {
        let (reader, writer) = reflector::store();
        let owned = Arc::new(OwnedIndex::default());
        let feed = Feed::<K>::new(writer, Arc::clone(self.echoes), Arc::clone(&owned));
        let (tx, rx) = mpsc::unbounded();
        let api = match K::CRD {
            Crd::BuiltIn => {
                let cache = reader.clone();
                self.synced.push(Box::pin(async move {
                    let _ = cache.wait_until_ready().await;
                }));
                self.tasks.spawn(forward_children::<K>(
                    self.client.clone(),
                    self.scope.clone(),
                    self.metrics.clone(),
                    feed,
                    tx,
                ));
                None
            }
            Crd::Optional {
                reconcile_all_on_arrival,
            } => {
                let api = Arc::new(discovery::<K>());
                // The controller waits for an optional cache too where the
                // CRD is served: a reconcile that met it empty would apply
                // every child of the kind again (and take for new a child
                // someone else made). Not longer than OPTIONAL_LIST_WAIT: a
                // kind infergate may not list must not hold up every service.
                let (settled_tx, settled) = oneshot::channel();
                self.synced.push(optional_settled(K::KIND, settled));
                self.tasks.spawn(
                    OptionalChildren::<K> {
                        client: self.client.clone(),
                        scope: self.scope.clone(),
                        metrics: self.metrics.clone(),
                        discovery: api.clone(),
                        feed,
                        tx,
                        appeared: self.crd_appeared.clone(),
                        reconcile_all_on_arrival,
                        settled: Some(settled_tx),
                    }
                    .follow(),
                );
                Some(api)
            }
        };
        self.caches.insert::<K>(reader, owned, api);
        self.triggers
            .push(Box::new(move |c| c.owns_stream(rx.map(Ok))));
    }
}

/// Watch the children of a built-in kind through `feed` into its cache,
/// and forward every child whose event is news (see [`Feed::take`]) to
/// the controller as an owner trigger, until the controller is gone.
async fn forward_children<K: ChildKind>(
    client: Client,
    scope: Scope,
    metrics: Metrics,
    mut feed: Feed<K>,
    tx: mpsc::UnboundedSender<K::Watched>,
) {
    metrics.child_watch_started(K::KIND);
    let mut stream = std::pin::pin!(child_stream::<K>(&client, &scope));
    while let Some(item) = stream.next().await {
        let news = match item {
            Ok(event) => feed.take(event),
            Err(e) => {
                metrics.child_watch_error(K::KIND);
                crate::state::watching::log_watch_error(K::KIND, &e, "child watch");
                Vec::new()
            }
        };
        for obj in news {
            if tx.unbounded_send(obj).is_err() {
                return;
            }
        }
    }
}

/// The services to reconcile, from the shared watch's events: a change of
/// generation, labels or annotations triggers (templates may read labels);
/// a status-only update, our own status writes among them, does not. A
/// deletion drops the service's cached graph and is handed on to
/// `deleted` (what the reconciler remembers of the service goes).
///
/// `covered`: the services the term's first round reconciles (the cache as
/// the term starts); an event that shows one of them as it was then (the
/// cache's first list, handed on as it lands) is no news.
pub(in crate::reconcile) fn service_triggers(
    events: tokio::sync::mpsc::Receiver<ServiceEvent>,
    graph_fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
    covered: &[Arc<InferenceService>],
    deleted: tokio::sync::mpsc::UnboundedSender<ObjectRef<InferenceService>>,
) -> impl futures::Stream<Item = Arc<InferenceService>> + Send + 'static {
    let predicate = predicates::generation
        .combine(predicates::labels)
        .combine(predicates::annotations);
    let mut seen: HashMap<ObjectRef<InferenceService>, u64> = covered
        .iter()
        .filter_map(|svc| {
            predicate
                .hash_property(svc.as_ref())
                .map(|hash| (ObjectRef::from_obj(svc.as_ref()), hash))
        })
        .collect();
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
                let _ = deleted.send(key);
                None
            }
        };
        std::future::ready(trigger)
    })
}

#[cfg(test)]
mod tests {
    /// The start of a term waits for every optional kind's list at most
    /// OPTIONAL_LIST_WAIT in all, however many never settle; a kind that
    /// settled, or whose follower is gone, holds nothing up.
    #[tokio::test(start_paused = true)]
    async fn optional_kinds_that_never_list_hold_the_start_up_one_bound_in_all() {
        use super::{OPTIONAL_LIST_WAIT, all_synced, optional_settled};
        let mut senders = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..4 {
            let (tx, rx) = futures::channel::oneshot::channel();
            senders.push(tx);
            waits.push(optional_settled("HTTPRoute", rx));
        }
        let start = tokio::time::Instant::now();
        all_synced(waits).await;
        assert_eq!(start.elapsed(), OPTIONAL_LIST_WAIT);

        let (told, settled) = futures::channel::oneshot::channel();
        told.send(()).expect("receiver kept");
        let (gone, dropped) = futures::channel::oneshot::channel::<()>();
        drop(gone);
        let start = tokio::time::Instant::now();
        all_synced(vec![
            optional_settled("PodMonitor", settled),
            optional_settled("RayService", dropped),
        ])
        .await;
        assert_eq!(start.elapsed(), std::time::Duration::ZERO);
        drop(senders);
    }

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

    #[tokio::test]
    async fn only_spec_label_and_annotation_changes_trigger() {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let triggers = service_triggers(
            rx,
            Arc::new(std::sync::OnceLock::new()),
            &[],
            tokio::sync::mpsc::unbounded_channel().0,
        );
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

    #[tokio::test]
    async fn services_the_first_round_covers_trigger_only_when_they_change() {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let at_start = svc(3, json!({}), "Available");
        let triggers = service_triggers(
            rx,
            Arc::new(std::sync::OnceLock::new()),
            std::slice::from_ref(&at_start),
            tokio::sync::mpsc::unbounded_channel().0,
        );
        // The cache's first list, handed on late: the first round has it.
        tx.send(ServiceEvent::Applied(at_start.clone()))
            .await
            .expect("send");
        // Its status written since: still nothing new.
        tx.send(ServiceEvent::Applied(svc(3, json!({}), "Progressing")))
            .await
            .expect("send");
        // Its spec changed after the start: a trigger.
        tx.send(ServiceEvent::Applied(svc(4, json!({}), "Progressing")))
            .await
            .expect("send");
        drop(tx);
        let generations: Vec<Option<i64>> = triggers.map(|s| s.metadata.generation).collect().await;
        assert_eq!(generations, [Some(4)]);
    }
}
