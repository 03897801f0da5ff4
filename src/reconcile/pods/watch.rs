//! The watch on the engine pods of a service's tracks (a Deployment's pods,
//! a RayService's head and workers): label-selected, decoded without the spec, folded into [`PodStates`] as
//! it arrives; the services whose summary changed are handed on to the
//! controller.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use futures::stream::BoxStream;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use tokio::task::JoinSet;

use super::classify::WatchedPod;
use super::index::{Listing, PodStates};
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::api::vocabulary::names::LABEL_COMPONENT;
use crate::reconcile::children::{LABEL_MANAGED_BY, LABEL_SERVICE};
use crate::state::Scope;

/// The engine pods of a service: infergate's, with a service. A
/// RayService's head and worker pods are among them: KubeRay gives each
/// pod of a Ray cluster the labels of its group's template, where
/// infergate puts these; so are the workers of a group (a replica that
/// spans nodes), which carry their track in a label of their own. The
/// endpoint pickers' pods (a component label) are left out.
#[must_use]
pub fn selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGER},{LABEL_SERVICE},!{LABEL_COMPONENT}")
}

/// Watch the engine pods over `scope` into `pods` until the receiver is
/// dropped; the receiver gets each service whose summary changed. The
/// second value ends once every watch has listed: the controller waits for
/// it before its first reconcile of every service, so the first list hands
/// on nothing (each service is reconciled then anyway, with its pods
/// known); a later list (the watch expired) hands on what changed.
pub fn start(
    tasks: &mut JoinSet<()>,
    client: &Client,
    scope: &Scope,
    pods: Arc<PodStates>,
) -> (
    mpsc::UnboundedReceiver<ObjectRef<InferenceService>>,
    oneshot::Receiver<()>,
) {
    let (tx, rx) = mpsc::unbounded();
    let (listed_tx, listed) = oneshot::channel();
    let config = crate::state::scope::list_in_pages().labels(&selector());
    // One watch per namespace of a list, each listing again on its own:
    // the index replaces only that namespace's entries, so no copy of the
    // pods is kept to merge the lists (as `Scope::watch` does).
    let (namespaces, streams): (Vec<Option<String>>, Vec<_>) = match scope {
        Scope::All => (
            vec![None],
            vec![watcher(Api::<WatchedPod>::all(client.clone()), config).boxed()],
        ),
        Scope::Namespaces(list) => list
            .iter()
            .map(|ns| {
                let api = Api::<WatchedPod>::namespaced(client.clone(), ns);
                (Some(ns.clone()), watcher(api, config.clone()).boxed())
            })
            .unzip(),
    };
    tasks.spawn(run(namespaces, streams, pods, tx, listed_tx));
    (rx, listed)
}

async fn run(
    namespaces: Vec<Option<String>>,
    streams: Vec<BoxStream<'static, watcher::Result<Event<WatchedPod>>>>,
    pods: Arc<PodStates>,
    tx: mpsc::UnboundedSender<ObjectRef<InferenceService>>,
    listed: oneshot::Sender<()>,
) {
    let mut feeds: Vec<Feed> = namespaces.into_iter().map(Feed::new).collect();
    let mut first_lists = vec![false; feeds.len()];
    let mut listed = Some(listed);
    let tagged = streams
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.default_backoff().map(move |e| (i, e)).boxed());
    let mut events = futures::stream::select_all(tagged);
    while let Some((i, event)) = events.next().await {
        let init_done = matches!(event, Ok(Event::InitDone));
        let mut changed = match event {
            Ok(event) => feeds[i].handle(&pods, event),
            Err(e) => {
                crate::state::watching::log_watch_error("Pod", &e, "engine pod watch");
                continue;
            }
        };
        if init_done && !first_lists[i] {
            first_lists[i] = true;
            // Before the controller's first reconcile of every service,
            // unless it stopped waiting for this list.
            if listed.as_ref().is_some_and(|l| !l.is_canceled()) {
                changed.clear();
            }
            if first_lists.iter().all(|done| *done)
                && let Some(listed) = listed.take()
            {
                let _ = listed.send(());
            }
        }
        for service in changed {
            if tx.unbounded_send(service).is_err() {
                return;
            }
        }
    }
}

/// One watch's events into the index: a change at once, a list once it
/// is complete (until then the index answers from the list before).
#[derive(Debug)]
pub struct Feed {
    /// The namespace the watch covers; `None` for every namespace.
    namespace: Option<String>,
    /// A list in progress.
    listing: Option<Listing>,
}

impl Feed {
    /// The feed of a watch over `namespace` (`None`: every namespace).
    #[must_use]
    pub fn new(namespace: Option<String>) -> Self {
        Self {
            namespace,
            listing: None,
        }
    }

    /// Take in one event; the services whose summary changed.
    pub fn handle(
        &mut self,
        pods: &PodStates,
        event: Event<WatchedPod>,
    ) -> Vec<ObjectRef<InferenceService>> {
        match event {
            Event::Apply(pod) => pods.apply(&pod).into_iter().collect(),
            Event::Delete(pod) => pods.delete(&pod).into_iter().collect(),
            Event::Init => {
                self.listing = Some(Listing::default());
                Vec::new()
            }
            Event::InitApply(pod) => {
                self.listing.get_or_insert_with(Listing::default).add(&pod);
                Vec::new()
            }
            Event::InitDone => {
                let listing = self.listing.take().unwrap_or_default();
                pods.replace(self.namespace.as_deref(), listing)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! A watch's events into the index: changes at once, a list when it is
    //! complete.

    use super::*;
    use crate::reconcile::children::Track;
    use crate::reconcile::pods::PodState;
    use crate::reconcile::pods::classify::tests::{crash_looping, pod, running};

    #[test]
    fn the_selector_leaves_out_the_pickers_and_takes_ray_pods_and_group_workers() {
        assert_eq!(
            selector(),
            "app.kubernetes.io/managed-by=infergate,infergate.dev/service,!infergate.dev/component"
        );
    }

    #[test]
    fn a_list_counts_once_it_is_complete() {
        let states = PodStates::default();
        let mut feed = Feed::new(Some("team-a".into()));
        assert_eq!(
            feed.handle(&states, Event::Apply(pod("chat-1", running(false))))
                .len(),
            1
        );
        // The watch lists again: the pod crashed meanwhile.
        assert!(feed.handle(&states, Event::Init).is_empty());
        assert!(
            feed.handle(&states, Event::InitApply(pod("chat-1", crash_looping())))
                .is_empty()
        );
        assert_eq!(
            states.worst("team-a", "chat", Track::Primary),
            Some(PodState::Starting),
            "the list before answers until this one is complete"
        );
        let changed = feed.handle(&states, Event::InitDone);
        assert_eq!(changed, [ObjectRef::new("chat").within("team-a")]);
        assert!(matches!(
            states.worst("team-a", "chat", Track::Primary),
            Some(PodState::CrashLooping { .. })
        ));
        // Deleted: the service is handed on, nothing is held.
        assert_eq!(
            feed.handle(&states, Event::Delete(pod("chat-1", crash_looping())))
                .len(),
            1
        );
        assert_eq!(states.worst("team-a", "chat", Track::Primary), None);
    }
}
