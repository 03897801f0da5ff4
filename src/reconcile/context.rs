//! What every reconcile of one leadership term shares: the client, the
//! configuration, the writer, the shared state, the children's caches and
//! the states of the engine pods.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::runtime::reflector::ObjectRef;

use super::config::Config;
use super::error::Error;
use super::pods::PodStates;
use super::rollout::StepTimes;
use super::watch::kinds::{ChildCaches, ChildKind};
use super::write::{Applied, Writer};
use crate::api::v1beta1::InferenceService;
use crate::graph::fetch::GraphFetcher;
use crate::state::ClusterState;

/// The term's serving-graph fetcher, built on first use unless `serve` gave
/// one (Deployment-only clusters never load the roots), and the channel on
/// which it sends the cache key of each service whose turn for a fetch slot
/// has come (that service is reconciled at once).
pub(super) struct GraphFetching {
    pub(super) fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
    turns: tokio::sync::mpsc::UnboundedSender<String>,
}

impl GraphFetching {
    /// `given` (if any) made to send turns to `turns`.
    pub(super) fn new(
        given: Option<Arc<GraphFetcher>>,
        turns: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> Self {
        let fetcher = Arc::new(std::sync::OnceLock::new());
        if let Some(f) = given {
            f.notify_turns(turns.clone());
            let _ = fetcher.set(f);
        }
        Self { fetcher, turns }
    }

    /// The fetcher; on first use one with the default limits, trusting
    /// `ca_file`'s roots beside the platform's.
    pub(super) fn get_or_build(
        &self,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Arc<GraphFetcher>, Error> {
        if let Some(f) = self.fetcher.get() {
            return Ok(f.clone());
        }
        let built = Arc::new(GraphFetcher::from_ca_file(
            crate::graph::fetch::FetchOptions::default(),
            ca_file,
        )?);
        built.notify_turns(self.turns.clone());
        Ok(self.fetcher.get_or_init(|| built).clone())
    }
}

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
    /// The serving-graph fetcher and where it says whose turn has come.
    pub(super) graph: GraphFetching,
    /// The graph each Ray service was last applied with.
    pub(super) last_good: crate::reconcile::graph::LastGood,
    /// Consecutive failures per service, for backoff.
    pub(super) failures: Mutex<HashMap<ObjectRef<InferenceService>, u32>>,
    /// The current rollout step's times as this process took them.
    pub(super) step_clocks: Mutex<HashMap<ObjectRef<InferenceService>, StepTimes>>,
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
        graph: GraphFetching,
    ) -> Self {
        Self {
            client,
            config,
            writer,
            state,
            children,
            pods,
            graph,
            last_good: crate::reconcile::graph::LastGood::default(),
            failures: Mutex::new(HashMap::new()),
            step_clocks: Mutex::new(HashMap::new()),
        }
    }

    /// Forget everything remembered of the service `key` (deleted): what
    /// the writer kept of its children, its backoff, its step clock, its
    /// last good graph.
    pub(super) fn forget_service(&self, key: &ObjectRef<InferenceService>) {
        self.writer.forget_service(key);
        self.last_good
            .forget(&crate::reconcile::graph::cache_key_of(key));
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
        if let Ok(mut c) = self.step_clocks.lock() {
            c.remove(key);
        }
        self.config.metrics.reconciler_remembered(self.remembered());
    }

    /// [`Ctx::forget_service`] `svc` when the services' cache no longer
    /// has it: a reconcile (or its backoff) that ended after the service's
    /// deletion was handled leaves nothing behind.
    pub(super) fn forget_if_gone(&self, svc: &InferenceService) {
        let key = ObjectRef::from_obj(svc);
        if self.state.services().get(&key).is_none() {
            self.forget_service(&key);
        }
    }

    /// Entries remembered per service and child beyond the caches.
    #[must_use]
    pub(super) fn remembered(&self) -> usize {
        let failures = self.failures.lock().map_or(0, |f| f.len());
        let clocks = self.step_clocks.lock().map_or(0, |c| c.len());
        self.writer.remembered() + failures + clocks + self.last_good.len()
    }

    /// [`Writer::apply`] against `K`'s cache.
    pub(super) async fn apply<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
    ) -> Result<Applied<K>, Error> {
        self.writer
            .apply(
                svc,
                obj,
                self.children.store::<K>(),
                self.children.owned::<K>(),
            )
            .await
    }

    /// [`Writer::apply_and_read`] against `K`'s cache.
    pub(super) async fn apply_and_read<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
    ) -> Result<K::Watched, Error> {
        self.writer
            .apply_and_read(
                svc,
                obj,
                self.children.store::<K>(),
                self.children.owned::<K>(),
            )
            .await
    }

    /// The child `namespace/name` of kind `K` as its watch keeps it.
    pub(super) fn cached<K: ChildKind>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<std::sync::Arc<K::Watched>> {
        self.children
            .store::<K>()
            .get(&kube::runtime::reflector::ObjectRef::new(name).within(namespace))
    }

    /// [`Writer::holds`] against `K`'s cache.
    pub(super) fn holds<K: ChildKind>(
        &self,
        svc: &InferenceService,
        obj: &K,
    ) -> Result<bool, Error> {
        self.writer.holds(
            svc,
            obj,
            self.children.store::<K>(),
            self.children.owned::<K>(),
        )
    }

    /// [`Writer::controls`] against `K`'s cache.
    pub(super) fn controls<K: ChildKind>(&self, svc: &InferenceService, name: &str) -> bool {
        self.writer
            .controls::<K>(svc, name, self.children.store::<K>())
    }

    /// [`Writer::delete`] against `K`'s cache.
    pub(super) async fn delete<K: ChildKind>(
        &self,
        svc: &InferenceService,
        name: &str,
    ) -> Result<(), Error> {
        self.writer
            .delete::<K>(svc, name, self.children.store::<K>())
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
