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
    use super::*;

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
