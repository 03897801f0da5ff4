//! The watch of one child kind: by infergate's label, each child kept as
//! its kind's [`ChildKind::Watched`] says, and which of its events are
//! news to the controller: a change someone else made that the reconciler
//! reads, never the echo of its own writes.

use std::sync::Arc;

use kube::Client;
use kube::Resource;
use kube::api::ObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};

use super::children::{ANNOTATION_APPLIED, LABEL_MANAGED_BY};
use super::echo::{Echoes, Seen};
use super::kinds::{Change, ChildKind};
use super::watched::WatchedChild;
use crate::api::MANAGER;
use crate::state::Scope;

/// The watch of one kind's children: by infergate's label, trimmed to what
/// the reconciler reads, retried with backoff.
pub(super) fn child_stream<K: ChildKind>(
    client: &Client,
    scope: &Scope,
) -> impl futures::Stream<Item = watcher::Result<Event<K::Watched>>> + Send + 'static {
    let wc = crate::state::scope::list_in_pages().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    scope
        .watch::<K::Watched>(client, wc)
        .default_backoff()
        .modify(|w| w.trim())
}

/// One kind's watch events into its cache, and the children whose events
/// are news to the controller.
pub(super) struct Feed<K: ChildKind> {
    writer: Writer<K::Watched>,
    cache: Store<K::Watched>,
    echoes: Arc<Echoes>,
    /// The first list is done: a list after it (the watch expired) carries
    /// what changed meanwhile.
    listed: bool,
}

impl<K: ChildKind> Feed<K> {
    /// A feed into `writer`'s cache that asks `echoes` which events the
    /// reconciler caused.
    pub(super) fn new(writer: Writer<K::Watched>, echoes: Arc<Echoes>) -> Self {
        let cache = writer.as_reader();
        Self {
            writer,
            cache,
            echoes,
            listed: false,
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

    /// Take `event` into the cache; the child to hand on to the controller
    /// as an owner trigger when the event is news: a child created,
    /// changed or deleted by someone else in a way the reconciler reads
    /// ([`matters`]). The first list is not handed on: the controller
    /// reconciles every service once its caches are synced anyway.
    pub(super) fn take(&mut self, event: Event<K::Watched>) -> Option<K::Watched> {
        let news = match &event {
            Event::Apply(obj) => {
                let seen = Seen::Version(obj.meta().resource_version.clone().unwrap_or_default());
                let before = self.cache.get(&ObjectRef::from_obj(obj));
                (!self.echoes.absorbs(&key::<K>(obj.meta()), seen)
                    && matters(before.as_deref(), obj, K::CHANGE))
                .then(|| obj.clone())
            }
            Event::Delete(obj) => {
                let seen = Seen::Gone(obj.meta().uid.clone().unwrap_or_default());
                (!self.echoes.absorbs(&key::<K>(obj.meta()), seen)).then(|| obj.clone())
            }
            Event::InitApply(obj) if self.listed => {
                let before = self.cache.get(&ObjectRef::from_obj(obj));
                matters(before.as_deref(), obj, K::CHANGE).then(|| obj.clone())
            }
            Event::InitDone => {
                self.listed = true;
                None
            }
            Event::Init | Event::InitApply(_) => None,
        };
        self.writer.apply_watcher_event(&event);
        news
    }
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
mod tests;
