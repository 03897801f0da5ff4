//! The children of an optional CRD (HTTPRoute, RayService, PodMonitor,
//! InferencePool), followed while the CRD comes and goes: watched while
//! discovery says it is served, the watch stopped when it is removed (every
//! service is reconciled and those that use the kind report the missing
//! CRD), and started again when it is installed again (the
//! services waiting for it are reconciled).
//!
//! Discovery is asked every `DISCOVERY_POLL`, and at once when the watch
//! finds the resource gone, so a watch on a kind that vanished never keeps
//! retrying.
//!
//! No reconcile meets a served kind's cache before its first list: the
//! start of a term waits for it (`settled`), and an arrival is told once
//! the new watch has listed. A reconcile that met the cache empty would
//! apply every child of the kind again, and could take for its own a
//! child of the same name someone else made.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use kube::Client;
use kube::runtime::watcher::{self, Event};
use tracing::{debug, info, warn};

use super::child::{Feed, child_stream};
use super::discovery::{ApiDiscovery, DISCOVERY_POLL};
use super::kinds::ChildKind;
use crate::metrics::Metrics;
use crate::reconcile::error::status_not_found;
use crate::state::Scope;

/// Why a watch of an optional kind ended.
enum Ended {
    /// Discovery says the CRD is no longer served.
    Removed,
    /// The controller is gone (the term ended).
    ControllerGone,
}

/// One optional kind's children, followed for a term (see the module).
pub(super) struct OptionalChildren<K: ChildKind> {
    pub(super) client: Client,
    pub(super) scope: Scope,
    pub(super) metrics: Metrics,
    /// Whether the cluster serves the kind (shared with the reconciles).
    pub(super) discovery: Arc<ApiDiscovery>,
    /// The kind's cache, fed.
    pub(super) feed: Feed<K>,
    /// Children whose events are news, for the controller's owner triggers.
    pub(super) tx: mpsc::UnboundedSender<K::Watched>,
    /// Told of an arrival after the term began, and of a removal.
    pub(super) appeared: mpsc::UnboundedSender<bool>,
    /// What is told: reconcile every service (`true`) or only those
    /// waiting for an optional CRD.
    pub(super) reconcile_all_on_arrival: bool,
    /// Told once the start of the term may reconcile: discovery's first
    /// answer says the CRD is not served, or the first list is cached.
    pub(super) settled: Option<oneshot::Sender<()>>,
}

impl<K: ChildKind> OptionalChildren<K> {
    /// Follow the kind until the controller is gone: wait for the CRD,
    /// watch while it is served, empty the cache when it goes, and again.
    pub(super) async fn follow(mut self) {
        // Installed at the start of the term: the first reconcile of every
        // service sees it; no arrival to tell.
        let mut arrival = false;
        loop {
            arrival |= !self.until_installed().await;
            self.metrics.optional_api_installed(K::KIND, true);
            if arrival {
                info!(kind = K::KIND, "CRD installed; watching its children");
            }
            self.metrics.child_watch_started(K::KIND);
            match self.watch_while_installed(arrival).await {
                Ended::ControllerGone => return,
                Ended::Removed => {}
            }
            self.metrics.optional_api_installed(K::KIND, false);
            warn!(
                kind = K::KIND,
                "CRD removed; its children are no longer watched until it is installed again"
            );
            // The cache is emptied, then the services that had children of
            // the kind are reconciled: each reports the missing CRD.
            let writer = self.feed.writer();
            let cached = writer.as_reader().state();
            writer.apply_watcher_event(&Event::Init);
            writer.apply_watcher_event(&Event::InitDone);
            for child in cached {
                if self.tx.unbounded_send((*child).clone()).is_err() {
                    return;
                }
            }
            // The CRD's objects are deleted before it goes: their deletions
            // may have emptied the cache already, and the reconciles they
            // started may have met the CRD terminating and backed off. Every
            // service is reconciled once more, now that discovery knows.
            if self.appeared.unbounded_send(true).is_err() {
                return;
            }
            arrival = true;
        }
    }

    /// Ask discovery every [`DISCOVERY_POLL`] until the CRD is served;
    /// whether it was at the first question.
    async fn until_installed(&mut self) -> bool {
        let mut first = true;
        let mut failing = false;
        loop {
            match self.discovery.refresh(&self.client).await {
                Ok(true) => return first,
                Ok(false) => {
                    if first {
                        self.metrics.optional_api_installed(K::KIND, false);
                        debug!(kind = K::KIND, "CRD not installed; not watched until it is");
                        self.settle();
                    }
                    failing = false;
                }
                // One warning per run of failures, not one per question.
                Err(e) if !failing => {
                    warn!(kind = K::KIND, error = %e, "API discovery failed; asking again");
                    failing = true;
                }
                Err(e) => debug!(kind = K::KIND, error = %e, "API discovery failed"),
            }
            first = false;
            tokio::time::sleep(DISCOVERY_POLL).await;
        }
    }

    /// The start of the term may reconcile (said once).
    fn settle(&mut self) {
        if let Some(settled) = self.settled.take() {
            let _ = settled.send(());
        }
    }

    /// Watch the kind's children into the cache and hand every touched one
    /// to the controller, until discovery says the CRD is gone (asked every
    /// [`DISCOVERY_POLL`], and at once when the watch finds the resource
    /// gone) or the controller is. Once the first list is cached, the term's
    /// start is settled, or (`arrival`: the CRD came after the term began)
    /// the arrival is told.
    async fn watch_while_installed(&mut self, arrival: bool) -> Ended {
        self.feed.restart();
        let mut stream = std::pin::pin!(child_stream::<K>(&self.client, &self.scope));
        let mut poll =
            tokio::time::interval_at(tokio::time::Instant::now() + DISCOVERY_POLL, DISCOVERY_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first list is not handed on: at the start of the term every
        // service is reconciled anyway, and after an arrival the services
        // that wait for the kind are.
        let mut listed = false;
        loop {
            tokio::select! {
                item = stream.next() => match item {
                    Some(Ok(event)) => {
                        let list_done = matches!(event, Event::InitDone);
                        for child in self.feed.take(event) {
                            if self.tx.unbounded_send(child).is_err() {
                                return Ended::ControllerGone;
                            }
                        }
                        if list_done && !listed {
                            listed = true;
                            self.settle();
                            if arrival
                                && self
                                    .appeared
                                    .unbounded_send(self.reconcile_all_on_arrival)
                                    .is_err()
                            {
                                return Ended::ControllerGone;
                            }
                        }
                    }
                    Some(Err(e)) => {
                        self.metrics.child_watch_error(K::KIND);
                        if resource_gone(&e) {
                            // The CRD is being removed: the next retry would
                            // fail the same way; discovery tells at once.
                            debug!(kind = K::KIND, error = %e, "child watch: the resource is gone");
                            if matches!(self.discovery.refresh(&self.client).await, Ok(false)) {
                                return Ended::Removed;
                            }
                        } else {
                            crate::state::watching::log_watch_error(K::KIND, &e, "child watch");
                        }
                    }
                    None => return Ended::ControllerGone,
                },
                _ = poll.tick() => {
                    if matches!(self.discovery.refresh(&self.client).await, Ok(false)) {
                        return Ended::Removed;
                    }
                }
            }
        }
    }
}

/// Whether a watch error says the resource is not served (404).
fn resource_gone(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => status_not_found(s),
        watcher::Error::WatchError(s) => status_not_found(s),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::{Request, Response};
    use kube::client::Body;
    use kube::runtime::reflector;
    use tower_test::mock::{self, Handle};

    use super::*;
    use crate::reconcile::children::httproute::HTTPRoute;
    use crate::reconcile::watch::echo::Echoes;
    use crate::reconcile::watch::owned::OwnedIndex;

    type ApiServer = Handle<Request<Body>, Response<Body>>;

    /// HTTPRoute's children followed against a mock API server: the
    /// follower's task, its cache, and what it tells.
    struct Followed {
        server: ApiServer,
        cache: reflector::Store<HTTPRoute>,
        settled: oneshot::Receiver<()>,
        appeared: mpsc::UnboundedReceiver<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    fn follow_routes() -> Followed {
        let (service, server) = mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let (cache, writer) = reflector::store();
        let (tx, _triggers) = mpsc::unbounded();
        let (appeared_tx, appeared) = mpsc::unbounded();
        let (settled_tx, settled) = oneshot::channel();
        let follower = OptionalChildren::<HTTPRoute> {
            client,
            scope: Scope::default(),
            metrics: Metrics::default(),
            discovery: Arc::new(crate::reconcile::watch::kinds::discovery::<HTTPRoute>()),
            feed: Feed::new(
                writer,
                Arc::new(Echoes::detached()),
                Arc::new(OwnedIndex::default()),
            ),
            tx,
            appeared: appeared_tx,
            reconcile_all_on_arrival: false,
            settled: Some(settled_tx),
        };
        Followed {
            server,
            cache,
            settled,
            appeared,
            task: tokio::spawn(follower.follow()),
        }
    }

    type Reply = tower_test::mock::SendResponse<Response<Body>>;

    /// The next request, which must be to `path` (a minute at most: the
    /// follower asks discovery again every `DISCOVERY_POLL`).
    async fn next(server: &mut ApiServer, path: &str) -> Reply {
        let (request, reply) = tokio::time::timeout(Duration::from_secs(60), server.next_request())
            .await
            .expect("a request in time")
            .expect("a request");
        assert_eq!(request.uri().path(), path, "{}", request.uri());
        reply
    }

    fn reply(reply: Reply, status: u16, body: &serde_json::Value) {
        reply.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(body).expect("JSON")))
                .expect("response"),
        );
    }

    /// Answer the next request, to `path`, with `status` and `body`.
    async fn answer(server: &mut ApiServer, path: &str, status: u16, body: &serde_json::Value) {
        reply(next(server, path).await, status, body);
    }

    fn not_found() -> serde_json::Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
    }

    fn served() -> serde_json::Value {
        serde_json::json!({
            "kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": "gateway.networking.k8s.io/v1",
            "resources": [{"name": "httproutes", "singularName": "httproute",
                "namespaced": true, "kind": "HTTPRoute", "verbs": ["list", "watch"]}]
        })
    }

    fn route_list() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRouteList",
            "metadata": {"resourceVersion": "7"},
            "items": [{
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "chat", "namespace": "team", "uid": "r1", "resourceVersion": "7"},
                "spec": {}
            }]
        })
    }

    const GROUP_PATH: &str = "/apis/gateway.networking.k8s.io/v1";
    const LIST_PATH: &str = "/apis/gateway.networking.k8s.io/v1/httproutes";

    #[tokio::test]
    async fn a_served_kind_settles_the_term_start_only_once_its_first_list_is_cached() {
        let mut f = follow_routes();
        answer(&mut f.server, GROUP_PATH, 200, &served()).await;
        // Served: the start waits for the list, asked now, not answered yet.
        let list = next(&mut f.server, LIST_PATH).await;
        assert!(f.settled.try_recv().expect("not dropped").is_none());
        reply(list, 200, &route_list());
        tokio::time::timeout(Duration::from_secs(5), &mut f.settled)
            .await
            .expect("settled in time")
            .expect("settled");
        // By then the cache holds the list: a reconcile finds the route.
        assert_eq!(f.cache.state().len(), 1);
        // Served from the start: no arrival to announce.
        assert!(f.appeared.try_recv().is_err());
        f.task.abort();
    }

    #[tokio::test]
    async fn a_kind_not_served_settles_the_term_start_at_discoverys_first_answer() {
        let mut f = follow_routes();
        answer(&mut f.server, GROUP_PATH, 404, &not_found()).await;
        tokio::time::timeout(Duration::from_secs(5), &mut f.settled)
            .await
            .expect("settled in time")
            .expect("settled");
        assert!(f.cache.state().is_empty());
        f.task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_kind_installed_later_is_announced_once_its_first_list_is_cached() {
        let mut f = follow_routes();
        answer(&mut f.server, GROUP_PATH, 404, &not_found()).await;
        // The next question comes a DISCOVERY_POLL later (the clock is
        // paused: it advances when every task waits): now served.
        answer(&mut f.server, GROUP_PATH, 200, &served()).await;
        let list = next(&mut f.server, LIST_PATH).await;
        assert!(
            f.appeared.try_recv().is_err(),
            "announced before the new watch listed"
        );
        reply(list, 200, &route_list());
        let told = tokio::time::timeout(Duration::from_secs(5), f.appeared.next())
            .await
            .expect("announced in time");
        assert_eq!(told, Some(false), "the services waiting for the kind");
        assert_eq!(f.cache.state().len(), 1);
        f.task.abort();
    }

    #[test]
    fn a_404_of_the_watch_is_a_resource_gone() {
        let status = |code| kube::core::Status {
            code,
            ..kube::core::Status::default()
        };
        let gone = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(404))));
        assert!(resource_gone(&gone));
        assert!(resource_gone(&watcher::Error::WatchError(Box::new(
            status(404)
        ))));
        let forbidden = watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status(403))));
        assert!(!resource_gone(&forbidden));
        assert!(!resource_gone(&watcher::Error::NoResourceVersion));
    }
}
