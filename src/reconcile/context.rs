//! What every reconcile of one leadership term shares: the client, the
//! configuration, the writer, the shared state, the children's caches and
//! the states of the engine pods.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::runtime::reflector::ObjectRef;

use super::apply::{Applied, Writer};
use super::config::Config;
use super::error::Error;
use super::kinds::{ChildCaches, ChildKind};
use super::pods::PodStates;
use crate::api::v1beta1::InferenceService;
use crate::graph::fetch::GraphFetcher;
use crate::state::ClusterState;

/// Shared state of one leadership term's controller.
pub struct Ctx {
    pub(super) client: Client,
    pub(super) config: Config,
    /// Applies children, deletes them, writes status and events.
    pub(super) writer: Writer,
    /// Policies, namespace labels, InferenceServices and their route claims.
    pub(super) state: Arc<ClusterState>,
    /// Every child kind's cache and, for an optional CRD, its discovery.
    pub(super) children: ChildCaches,
    /// Why the not-ready engine pods of each service's tracks are not ready.
    pub(super) pods: Arc<PodStates>,
    /// Built on first use (Deployment-only clusters never load the roots).
    pub(super) graph_fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
    /// Where the fetcher sends the cache key of a service whose turn for a
    /// fetch slot has come (it is reconciled at once).
    pub(super) graph_turns: tokio::sync::mpsc::UnboundedSender<String>,
    /// Consecutive failures per service, for backoff.
    pub(super) failures: Mutex<HashMap<ObjectRef<InferenceService>, u32>>,
}

impl Ctx {
    /// The term's context; no service has failed yet.
    pub(super) fn new(
        client: Client,
        config: Config,
        writer: Writer,
        state: Arc<ClusterState>,
        children: ChildCaches,
        pods: Arc<PodStates>,
        graph_fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
        graph_turns: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> Self {
        Self {
            client,
            config,
            writer,
            state,
            children,
            pods,
            graph_fetcher,
            graph_turns,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// [`Writer::apply`] against `K`'s cache.
    pub(super) async fn apply<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
    ) -> Result<Applied<K>, Error> {
        self.writer.apply(svc, obj, self.children.store()).await
    }

    /// [`Writer::apply_and_read`] against `K`'s cache.
    pub(super) async fn apply_and_read<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
    ) -> Result<K, Error> {
        self.writer
            .apply_and_read(svc, obj, self.children.store())
            .await
    }

    /// [`Writer::delete`] against `K`'s cache.
    pub(super) async fn delete<K: ChildKind>(
        &self,
        svc: &InferenceService,
        name: &str,
    ) -> Result<(), Error> {
        self.writer
            .delete::<K>(svc, name, self.children.store())
            .await
    }

    /// Whether the cluster serves `K` (always, unless its CRD is optional).
    pub(super) async fn installed<K: ChildKind>(&self) -> Result<bool, Error> {
        Ok(self.children.installed::<K>(&self.client).await?)
    }

    /// Ask discovery about `K` again (an apply found its CRD gone).
    pub(super) fn forget<K: ChildKind>(&self) {
        self.children.forget::<K>();
    }
}
