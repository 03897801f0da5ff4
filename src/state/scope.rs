//! Which namespaces infergate manages: every one (the default) or a list
//! (`serve --namespaces a,b`, the namespace-scoped install of
//! `deploy/namespaced/`, whose RBAC is Roles in those namespaces).
//!
//! [`Scope::watch`] gives one watch stream for a namespaced kind either way.
//! For a list it runs one watch per namespace and merges them so that a
//! reflector sees one store: one `Init`, the initial lists of every
//! namespace, one `InitDone`; afterwards a namespace that lists again
//! (its watch expired) turns into `Apply` for what it holds and `Delete`
//! for what it no longer holds, so no other namespace's objects are dropped.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

/// Objects per page of a watch's list (kube's default is 500): a list of
/// thousands of services or children is read a page at a time, and a
/// smaller page bounds what one page holds in memory at once.
pub const LIST_PAGE: u32 = 100;

/// The watch configuration of every watch infergate runs: lists in pages
/// of [`LIST_PAGE`].
#[must_use]
pub fn list_in_pages() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// The namespaces infergate watches and reconciles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace (cluster-wide watches; the default install).
    #[default]
    All,
    /// Only these namespaces (one watch per namespace and kind).
    Namespaces(Arc<[String]>),
}

impl Scope {
    /// `--namespaces` as given: empty means every namespace.
    #[must_use]
    pub fn from_list(namespaces: &[String]) -> Self {
        let mut list: Vec<String> = namespaces
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        list.sort();
        list.dedup();
        if list.is_empty() {
            Self::All
        } else {
            Self::Namespaces(list.into())
        }
    }

    /// Whether `namespace` is managed.
    #[must_use]
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Self::All => true,
            Self::Namespaces(list) => list.iter().any(|n| n == namespace),
        }
    }

    /// An `Api` to probe `K` with: cluster-wide, or in the first managed
    /// namespace (a Role grants no cluster-wide list).
    #[must_use]
    pub fn probe_api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match self {
            Self::Namespaces(list) if !list.is_empty() => Api::namespaced(client.clone(), &list[0]),
            _ => Api::all(client.clone()),
        }
    }

    /// One watch stream of `K` over the scope.
    pub fn watch<K>(
        &self,
        client: &Client,
        config: watcher::Config,
    ) -> BoxStream<'static, watcher::Result<Event<K>>>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        match self {
            Self::All => watcher(Api::<K>::all(client.clone()), config).boxed(),
            Self::Namespaces(list) => {
                let streams = list.iter().enumerate().map(|(i, ns)| {
                    watcher(Api::<K>::namespaced(client.clone(), ns), config.clone())
                        .map(move |e| (i, e))
                        .boxed()
                });
                let mut merge = Merge::new(list.len());
                futures::stream::select_all(streams)
                    .flat_map(move |(i, e)| futures::stream::iter(merge.handle(i, e)))
                    .boxed()
            }
        }
    }
}

/// Merges the watch events of `n` namespaces into one stream a reflector
/// can apply (see the module documentation).
struct Merge<K: Resource> {
    /// Per namespace: what it holds (after its first complete list).
    known: Vec<HashMap<ObjectRef<K>, K>>,
    /// Per namespace: what a list in progress has seen.
    listing: Vec<Option<HashMap<ObjectRef<K>, K>>>,
    /// Per namespace: its first list is complete.
    listed: Vec<bool>,
    /// `Init` sent; `InitDone` sent.
    started: bool,
    done: bool,
    /// Events of namespaces that finished listing while others had not.
    held: Vec<(usize, watcher::Result<Event<K>>)>,
}

impl<K> Merge<K>
where
    K: Resource + Clone,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    fn new(n: usize) -> Self {
        Self {
            known: (0..n).map(|_| HashMap::new()).collect(),
            listing: (0..n).map(|_| None).collect(),
            listed: vec![false; n],
            started: false,
            done: n == 0,
            held: Vec::new(),
        }
    }

    fn handle(
        &mut self,
        i: usize,
        event: watcher::Result<Event<K>>,
    ) -> Vec<watcher::Result<Event<K>>> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(Ok(Event::Init));
        }
        if self.done {
            self.after_initial(i, event, &mut out);
            return out;
        }
        if self.listed[i] {
            // This namespace is done; the others are still listing.
            self.held.push((i, event));
            return out;
        }
        match event {
            Err(e) => out.push(Err(e)),
            Ok(Event::Init) => self.listing[i] = Some(HashMap::new()),
            Ok(Event::InitApply(obj)) => self.list(i, obj),
            // A namespace's first list is handed on whole when it completes.
            Ok(Event::InitDone) => {
                let listed = self.listing[i].take().unwrap_or_default();
                out.extend(listed.values().cloned().map(|o| Ok(Event::InitApply(o))));
                self.known[i] = listed;
                self.listed[i] = true;
                if self.listed.iter().all(|l| *l) {
                    self.done = true;
                    out.push(Ok(Event::InitDone));
                    for (j, e) in std::mem::take(&mut self.held) {
                        self.after_initial(j, e, &mut out);
                    }
                }
            }
            // Not expected before a namespace's list is done; keep them
            // for the list (the watcher sends them only after InitDone).
            Ok(Event::Apply(obj)) => self.list(i, obj),
            Ok(Event::Delete(obj)) => {
                if let Some(l) = self.listing[i].as_mut() {
                    l.remove(&ObjectRef::from_obj(&obj));
                }
            }
        }
        out
    }

    /// Namespace `i`'s list in progress has seen `obj`.
    fn list(&mut self, i: usize, obj: K) {
        self.listing[i]
            .get_or_insert_with(HashMap::new)
            .insert(ObjectRef::from_obj(&obj), obj);
    }

    fn after_initial(
        &mut self,
        i: usize,
        event: watcher::Result<Event<K>>,
        out: &mut Vec<watcher::Result<Event<K>>>,
    ) {
        match event {
            Err(e) => out.push(Err(e)),
            Ok(Event::Init) => self.listing[i] = Some(HashMap::new()),
            Ok(Event::InitApply(obj)) => {
                self.list(i, obj.clone());
                out.push(Ok(Event::Apply(obj)));
            }
            Ok(Event::InitDone) => {
                let listed = self.listing[i].take().unwrap_or_default();
                let gone: Vec<K> = self.known[i]
                    .iter()
                    .filter(|(k, _)| !listed.contains_key(k))
                    .map(|(_, o)| o.clone())
                    .collect();
                out.extend(gone.into_iter().map(|o| Ok(Event::Delete(o))));
                self.known[i] = listed;
            }
            Ok(Event::Apply(obj)) => {
                self.known[i].insert(ObjectRef::from_obj(&obj), obj.clone());
                out.push(Ok(Event::Apply(obj)));
            }
            Ok(Event::Delete(obj)) => {
                self.known[i].remove(&ObjectRef::from_obj(&obj));
                out.push(Ok(Event::Delete(obj)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;

    use super::*;

    fn cm(ns: &str, name: &str, v: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.to_owned());
        c.metadata.name = Some(name.to_owned());
        c.data = Some([("v".to_owned(), v.to_owned())].into());
        c
    }

    fn names(store: &reflector::Store<ConfigMap>) -> Vec<String> {
        let mut n: Vec<String> = store
            .state()
            .iter()
            .map(|c| {
                format!(
                    "{}/{}={}",
                    c.metadata.namespace.as_deref().unwrap_or_default(),
                    c.metadata.name.as_deref().unwrap_or_default(),
                    c.data
                        .as_ref()
                        .and_then(|d| d.get("v"))
                        .cloned()
                        .unwrap_or_default()
                )
            })
            .collect();
        n.sort();
        n
    }

    #[test]
    fn two_namespaces_make_one_store_and_a_relist_drops_only_its_own() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mut merge = Merge::<ConfigMap>::new(2);
        let mut feed = |i: usize, e: Event<ConfigMap>| {
            for out in merge.handle(i, Ok(e)) {
                writer.apply_watcher_event(&out.expect("no error"));
            }
        };
        feed(0, Event::Init);
        feed(1, Event::Init);
        feed(0, Event::InitApply(cm("a", "x", "1")));
        feed(1, Event::InitApply(cm("b", "y", "1")));
        feed(0, Event::InitDone);
        // a is listed, b is not: a's change waits for b's list.
        feed(0, Event::Apply(cm("a", "z", "1")));
        feed(1, Event::InitApply(cm("b", "w", "1")));
        assert!(
            names(&store).is_empty(),
            "nothing before every namespace listed"
        );
        feed(1, Event::InitDone);
        assert_eq!(names(&store), ["a/x=1", "a/z=1", "b/w=1", "b/y=1"]);
        // b's watch expires and b lists again without y, with w changed.
        feed(1, Event::Init);
        feed(1, Event::InitApply(cm("b", "w", "2")));
        feed(1, Event::InitDone);
        assert_eq!(names(&store), ["a/x=1", "a/z=1", "b/w=2"]);
        // Plain changes pass through.
        feed(0, Event::Delete(cm("a", "x", "1")));
        feed(1, Event::Apply(cm("b", "v", "1")));
        assert_eq!(names(&store), ["a/z=1", "b/v=1", "b/w=2"]);
    }

    #[test]
    fn a_namespace_that_restarts_its_first_list_leaves_nothing_stale() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mut merge = Merge::<ConfigMap>::new(1);
        let mut feed = |e: Event<ConfigMap>| {
            for out in merge.handle(0, Ok(e)) {
                writer.apply_watcher_event(&out.expect("no error"));
            }
        };
        feed(Event::Init);
        feed(Event::InitApply(cm("a", "gone", "1")));
        feed(Event::Init);
        feed(Event::InitApply(cm("a", "kept", "1")));
        feed(Event::InitDone);
        assert_eq!(names(&store), ["a/kept=1"]);
    }

    #[test]
    fn the_scope_comes_from_the_flag() {
        assert_eq!(Scope::from_list(&[]), Scope::All);
        assert_eq!(Scope::from_list(&[" ".into()]), Scope::All);
        let s = Scope::from_list(&["b".into(), "a".into(), "a".into()]);
        assert_eq!(
            s,
            Scope::Namespaces(vec!["a".to_owned(), "b".to_owned()].into())
        );
        assert!(s.contains("a") && !s.contains("c"));
        assert!(Scope::All.contains("anything"));
    }
}
