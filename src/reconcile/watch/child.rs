//! The watch of one child kind: by infergate's label, each child kept as
//! its kind's [`ChildKind::Watched`] says, and which of its events are
//! news to the controller: a change someone else made that the reconciler
//! reads, never the echo of its own writes.

use std::collections::HashSet;
use std::sync::Arc;

use kube::Client;
use kube::Resource;
use kube::api::ObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};

use super::echo::{ChildSeen, Echoes};
use super::kinds::{Change, ChildKind};
use super::owned::{Owned, OwnedIndex};
use super::watched::WatchedChild;
use crate::api::MANAGER;
use crate::reconcile::children::{ANNOTATION_APPLIED, LABEL_MANAGED_BY};
use crate::state::Scope;

/// The watch of one kind's children: by infergate's label, retried with
/// backoff (trimmed to what the reconciler reads by [`Feed::take`]).
pub(super) fn child_stream<K: ChildKind>(
    client: &Client,
    scope: &Scope,
) -> impl futures::Stream<Item = watcher::Result<Event<K::Watched>>> + Send + 'static {
    let wc = crate::state::scope::list_in_pages().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    scope.watch::<K::Watched>(client, wc).default_backoff()
}

/// One kind's watch events into its cache, and the children whose events
/// are news to the controller.
pub(super) struct Feed<K: ChildKind> {
    writer: Writer<K::Watched>,
    cache: Store<K::Watched>,
    echoes: Arc<Echoes>,
    /// What infergate's field manager holds of each child.
    owned: Arc<OwnedIndex>,
    /// The first list is done: a list after it (the watch expired) carries
    /// what changed meanwhile.
    listed: bool,
    /// The children a list after the first has shown so far: those of the
    /// cache it does not show were deleted while the watch was away.
    relisted: HashSet<ObjectRef<K::Watched>>,
}

impl<K: ChildKind> Feed<K> {
    /// A feed into `writer`'s cache that asks `echoes` which events the
    /// reconciler caused.
    pub(super) fn new(
        writer: Writer<K::Watched>,
        echoes: Arc<Echoes>,
        owned: Arc<OwnedIndex>,
    ) -> Self {
        let cache = writer.as_reader();
        Self {
            writer,
            cache,
            echoes,
            owned,
            listed: false,
            relisted: HashSet::new(),
        }
    }

    /// A new watch begins (an optional CRD installed again): its first
    /// list is not handed on.
    pub(super) fn restart(&mut self) {
        self.listed = false;
    }

    /// The cache fed.
    pub(super) fn writer(&mut self) -> &mut Writer<K::Watched> {
        &mut self.writer
    }

    /// Take `event` into the cache (each child trimmed to what the
    /// reconciler reads, what infergate's field manager holds of it into
    /// the index); the children to hand on to the controller as owner
    /// triggers when the event is news: a child created, changed or
    /// deleted by someone else in a way the reconciler reads ([`matters`]).
    /// The first list is not handed on: the controller reconciles every
    /// service once its caches are synced anyway. A list after it hands on
    /// what changed meanwhile, and the cached children it no longer shows
    /// (deleted while the watch was away).
    pub(super) fn take(&mut self, mut event: Event<K::Watched>) -> Vec<K::Watched> {
        match &mut event {
            Event::Apply(obj) | Event::InitApply(obj) => {
                let owned = Owned::take(obj.meta_mut());
                obj.trim();
                self.owned.record(obj.meta(), owned);
            }
            Event::Delete(obj) => {
                obj.meta_mut().managed_fields = None;
                obj.trim();
                self.owned.forget(obj.meta());
            }
            Event::Init | Event::InitDone => {}
        }
        let news = match &event {
            Event::Apply(obj) => {
                let seen =
                    ChildSeen::Version(obj.meta().resource_version.clone().unwrap_or_default());
                let before = self.cache.get(&ObjectRef::from_obj(obj));
                let news = !self.echoes.absorbs(&key::<K>(obj.meta()), seen)
                    && matters(before.as_deref(), obj, K::CHANGE);
                one_if(news, obj)
            }
            Event::Delete(obj) => {
                let seen = ChildSeen::Gone(obj.meta().uid.clone().unwrap_or_default());
                one_if(!self.echoes.absorbs(&key::<K>(obj.meta()), seen), obj)
            }
            Event::Init => {
                self.relisted.clear();
                Vec::new()
            }
            Event::InitApply(obj) if self.listed => {
                self.relisted.insert(ObjectRef::from_obj(obj));
                let before = self.cache.get(&ObjectRef::from_obj(obj));
                one_if(matters(before.as_deref(), obj, K::CHANGE), obj)
            }
            Event::InitDone if self.listed => {
                // The cache still holds what the watch knew before the list.
                let gone: Vec<K::Watched> = self
                    .cache
                    .state()
                    .into_iter()
                    .filter(|c| !self.relisted.contains(&ObjectRef::from_obj(&**c)))
                    .map(|c| (*c).clone())
                    .collect();
                for child in &gone {
                    self.owned.forget(child.meta());
                }
                self.relisted = HashSet::new();
                gone
            }
            Event::InitDone => {
                self.listed = true;
                Vec::new()
            }
            Event::InitApply(_) => Vec::new(),
        };
        self.writer.apply_watcher_event(&event);
        news
    }
}

/// `obj` alone when `news`, nothing otherwise.
fn one_if<W: Clone>(news: bool, obj: &W) -> Vec<W> {
    if news { vec![obj.clone()] } else { Vec::new() }
}

/// The writer's key of the child `meta` describes.
pub(super) fn key<K: ChildKind>(meta: &ObjectMeta) -> super::echo::ChildKey {
    (
        K::KIND,
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// Whether `now` differs from the cached `before` in anything the
/// reconciler reads: a new object, a new revision of its spec (as the
/// kind's `change` shows it), deletion begun, another applied digest or
/// owner, or another [`WatchedChild::signal`]. The deployment controller's
/// bookkeeping, an autoscaler's status, a resourceVersion moved by a write
/// of no interest: not news.
pub(super) fn matters<W: WatchedChild>(before: Option<&W>, now: &W, change: Change) -> bool {
    let Some(before) = before else {
        return true;
    };
    let (b, n) = (before.meta(), now.meta());
    let revision = |m: &ObjectMeta| match change {
        Change::Uid => None,
        Change::Revision => Some(
            m.generation
                .map(|g| g.to_string())
                .or_else(|| m.resource_version.clone()),
        ),
    };
    let applied = |m: &ObjectMeta| {
        m.annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_APPLIED).cloned())
    };
    b.uid != n.uid
        || revision(b) != revision(n)
        || b.deletion_timestamp.is_some() != n.deletion_timestamp.is_some()
        || applied(b) != applied(n)
        || b.owner_references != n.owner_references
        || before.signal() != now.signal()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};

    use super::*;
    use crate::reconcile::watch::echo::Echoes;
    use crate::reconcile::watch::watched::{WatchedDeployment, WatchedMeta};

    fn deployment(rv: &str, generation: i64, status: Value) -> WatchedDeployment {
        serde_json::from_value(json!({
            "metadata": {
                "name": "chat", "namespace": "team", "uid": "u-1", "resourceVersion": rv,
                "generation": generation, "annotations": {ANNOTATION_APPLIED: "d1"},
                "ownerReferences": [{"apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
                                     "name": "chat", "uid": "svc-uid", "controller": true}]
            },
            "spec": {"replicas": 1},
            "status": status
        }))
        .expect("deployment")
    }

    fn feed<K: ChildKind>() -> (Feed<K>, Arc<Echoes>) {
        let (_, writer) = reflector::store::<K::Watched>();
        let echoes = Arc::new(Echoes::detached());
        let owned = Arc::new(OwnedIndex::default());
        (Feed::new(writer, Arc::clone(&echoes), owned), echoes)
    }

    /// The resourceVersion of the one child handed on, if any.
    fn names<W: Resource>(news: Vec<W>) -> Option<String> {
        assert!(news.len() <= 1, "one child at most");
        news.into_iter()
            .next()
            .and_then(|w| w.meta().resource_version.clone())
    }

    #[test]
    fn the_first_list_is_not_news_and_a_change_by_someone_else_is() {
        let (mut feed, _) = feed::<Deployment>();
        assert_eq!(names(feed.take(Event::Init)), None);
        assert_eq!(
            names(feed.take(Event::InitApply(deployment("1", 1, Value::Null)))),
            None
        );
        assert_eq!(names(feed.take(Event::InitDone)), None);
        // The deployment controller's bookkeeping: not news.
        let seen = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1});
        assert_eq!(
            names(feed.take(Event::Apply(deployment("2", 1, seen.clone())))),
            None
        );
        // A pod ready: news.
        let ready = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1});
        assert_eq!(
            names(feed.take(Event::Apply(deployment("3", 1, ready.clone())))),
            Some("3".into())
        );
        // Someone edits the spec: news.
        assert_eq!(
            names(feed.take(Event::Apply(deployment("4", 2, ready.clone())))),
            Some("4".into())
        );
        // Deleted: news.
        assert_eq!(
            names(feed.take(Event::Delete(deployment("5", 2, ready)))),
            Some("5".into())
        );
    }

    #[test]
    fn the_echo_of_a_write_is_not_news() {
        let (mut feed, echoes) = feed::<Deployment>();
        feed.take(Event::Init);
        feed.take(Event::InitDone);
        let key = ("Deployment", "team".to_owned(), "chat".to_owned());
        let owner = kube::runtime::reflector::ObjectRef::new("chat").within("team");
        // Created by the writer: its event is an echo.
        echoes.begin(&key, owner.clone());
        echoes.end(&key, Some(ChildSeen::Version("1".into())));
        assert_eq!(
            names(feed.take(Event::Apply(deployment("1", 1, Value::Null)))),
            None
        );
        // Updated by the writer, the event arriving before the write's answer.
        echoes.begin(&key, owner.clone());
        assert_eq!(
            names(feed.take(Event::Apply(deployment("2", 2, Value::Null)))),
            None
        );
        echoes.end(&key, Some(ChildSeen::Version("2".into())));
        // Deleted by the writer.
        echoes.begin(&key, owner);
        echoes.end(&key, Some(ChildSeen::Gone("u-1".into())));
        assert_eq!(
            names(feed.take(Event::Delete(deployment("2", 2, Value::Null)))),
            None
        );
        assert_eq!(echoes.pending(), 0);
    }

    #[test]
    fn a_list_after_the_first_hands_on_only_what_changed_meanwhile() {
        let (mut feed, _) = feed::<Service>();
        let service = |name: &str, rv: &str| -> WatchedMeta<Service> {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "team",
                                                       "uid": name, "resourceVersion": rv}}))
            .expect("service")
        };
        feed.take(Event::Init);
        feed.take(Event::InitApply(service("a", "1")));
        feed.take(Event::InitApply(service("b", "1")));
        feed.take(Event::InitDone);
        // The watch expired; the list again.
        assert_eq!(names(feed.take(Event::Init)), None);
        assert_eq!(names(feed.take(Event::InitApply(service("a", "1")))), None);
        assert_eq!(
            names(feed.take(Event::InitApply(service("b", "7")))),
            Some("7".into())
        );
        assert_eq!(
            names(feed.take(Event::InitApply(service("c", "8")))),
            Some("8".into())
        );
        feed.take(Event::InitDone);
        // After a restart of the watch (an optional CRD installed again), the
        // first list is not handed on.
        feed.restart();
        feed.take(Event::Init);
        assert_eq!(names(feed.take(Event::InitApply(service("d", "9")))), None);
    }

    #[test]
    fn a_list_after_the_first_hands_on_the_children_deleted_meanwhile() {
        let (_, writer) = reflector::store::<WatchedMeta<Service>>();
        let owned = Arc::new(OwnedIndex::default());
        let mut feed =
            Feed::<Service>::new(writer, Arc::new(Echoes::detached()), Arc::clone(&owned));
        let service = |name: &str| -> WatchedMeta<Service> {
            serde_json::from_value(json!({"metadata": {
                "name": name, "namespace": "team", "uid": name, "resourceVersion": "1",
                "managedFields": [{"manager": "infergate", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:ports": {}}}}]
            }}))
            .expect("service")
        };
        feed.take(Event::Init);
        for name in ["a", "b", "c"] {
            feed.take(Event::InitApply(service(name)));
        }
        feed.take(Event::InitDone);
        // What infergate's field manager holds is indexed, and the cache
        // keeps no managed fields.
        assert_eq!(owned.len(), 3);
        assert!(
            feed.cache
                .state()
                .iter()
                .all(|c| c.metadata.managed_fields.is_none())
        );
        // The watch expired; "b" was deleted while it was away.
        assert!(feed.take(Event::Init).is_empty());
        assert!(feed.take(Event::InitApply(service("a"))).is_empty());
        assert!(feed.take(Event::InitApply(service("c"))).is_empty());
        let gone = feed.take(Event::InitDone);
        let gone: Vec<_> = gone.iter().map(|c| c.metadata.name.clone()).collect();
        assert_eq!(gone, [Some("b".to_owned())]);
        assert_eq!(owned.len(), 2);
        assert_eq!(feed.cache.state().len(), 2);
        // A deletion seen as such leaves the index too.
        assert_eq!(
            names(feed.take(Event::Delete(service("a")))),
            Some("1".into())
        );
        assert_eq!(owned.len(), 1);
    }

    #[test]
    fn what_matters_by_the_kinds_change_signal() {
        let before = deployment("1", 1, Value::Null);
        // Only the resourceVersion moved: not for a kind with a generation.
        assert!(!matters(
            Some(&before),
            &deployment("2", 1, Value::Null),
            Change::Revision
        ));
        assert!(matters(
            Some(&before),
            &deployment("2", 2, Value::Null),
            Change::Revision
        ));
        // A kind whose resourceVersion moves on its own: a new object only.
        assert!(!matters(
            Some(&before),
            &deployment("2", 2, Value::Null),
            Change::Uid
        ));
        let mut other = deployment("2", 1, Value::Null);
        other.metadata.uid = Some("u-2".into());
        assert!(matters(Some(&before), &other, Change::Uid));
        // Another applied digest, a deletion begun, no owner: news.
        let mut edited = deployment("2", 1, Value::Null);
        edited.metadata.annotations = None;
        assert!(matters(Some(&before), &edited, Change::Uid));
        let mut deleting = deployment("2", 1, Value::Null);
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-11-27T00:00:00Z")).ok();
        assert!(matters(Some(&before), &deleting, Change::Uid));
        let mut orphan = deployment("2", 1, Value::Null);
        orphan.metadata.owner_references = None;
        assert!(matters(Some(&before), &orphan, Change::Uid));
        // Nothing cached: news.
        assert!(matters(None, &before, Change::Uid));
    }
}
