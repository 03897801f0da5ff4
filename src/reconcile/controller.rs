//! The kube-runtime Controller on InferenceService for one leadership term:
//! the watches of every child kind and of the engine pods, the context
//! every reconcile shares ([`Ctx`]), and the wiring from the watches to
//! the reconcile of a service (`backend/`).

use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::runtime::Controller;
use kube::runtime::controller::{self};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::backend::{error_policy, reconcile};
use super::config::Config;
use super::context::{Ctx, GraphFetching};
use super::error::Error;
use super::pods::{self, PodStates};
use super::status::waits_for_an_optional_api;
use super::watch::echo::Echoes;
use super::watch::triggers::{ChildWatches, service_triggers};
use super::write::Writer;
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::state::ClusterState;

/// Reconciles running at once.
pub const CONCURRENCY: u16 = 16;
/// How long the first reconciles wait for the engine pods' first list.
pub const POD_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The services whose turn for a graph fetch slot came, from their cache
/// keys (`namespace/name`).
fn graph_turn_triggers(
    turns: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> impl futures::Stream<Item = ObjectRef<InferenceService>> + Send + 'static {
    futures::stream::unfold(turns, |mut rx| async move {
        rx.recv().await.map(|key| (key, rx))
    })
    .filter_map(|key| {
        std::future::ready(
            key.split_once('/')
                .map(|(ns, name)| ObjectRef::new(name).within(ns)),
        )
    })
}

/// Run the controller until `token` is cancelled (leadership lost or shutdown).
/// Policies, namespaces and services come from `state`; the children are
/// watched for this term only.
pub async fn run_controller(
    client: Client,
    config: Config,
    state: Arc<ClusterState>,
    token: CancellationToken,
) -> Result<(), Error> {
    // Subscribed before anything is read, so no change falls between the
    // first reconcile of every service and the events after it.
    let service_events = state.subscribe_services();
    let mut policy_changes = state.policy_changes();

    let mut tasks = JoinSet::new();
    // An optional CRD installed during the term (again, after a removal)
    // reconciles every service once when most services have its kind
    // (PodMonitor, InferencePool), or else the services whose status says
    // they wait for an optional CRD (Gateway API, KubeRay).
    let (crd_tx, crd_appeared) = futures::channel::mpsc::unbounded();
    // The child watches hand on no echo of this term's own writes; an
    // event during a write that turns out not to be its echo reconciles
    // the service again.
    let (retrigger, retriggered) = futures::channel::mpsc::unbounded();
    let echoes = Arc::new(Echoes::new(retrigger.clone()));
    let ChildWatches {
        caches,
        synced,
        triggers,
    } = ChildWatches::start(
        &mut tasks,
        &client,
        &config.scope,
        &config.metrics,
        &echoes,
        crd_tx,
    );
    // A service whose turn for a graph fetch slot comes is reconciled at once.
    let (graph_turns, turns) = tokio::sync::mpsc::unbounded_channel();
    let graph = GraphFetching::new(config.graph_fetcher.clone(), graph_turns);

    let Some((pod_states, pod_changes)) =
        caches_synced(&mut tasks, &client, &config, &state, synced, &token).await
    else {
        return Ok(());
    };
    info!("caches synced; reconciling");

    let (deleted_tx, deleted_rx) = tokio::sync::mpsc::unbounded_channel();
    let service_events = super::accounting::tap_deletions(
        &mut tasks,
        Arc::clone(&state),
        service_events,
        deleted_tx,
        retrigger,
    );
    // Every service once at the start of the term, then again whenever a
    // policy or a namespace's labels change after it (the caches' first
    // lists moved the counter: the first round covers them, and the
    // services' first list, still on its way through the service events).
    let (forget_tx, forget_rx) = tokio::sync::mpsc::unbounded_channel();
    let svc_stream = service_triggers(
        service_events,
        graph.fetcher.clone(),
        &state.services().state(),
        forget_tx,
    );
    policy_changes.mark_unchanged();
    let reconcile_all = futures::stream::once(std::future::ready(())).chain(
        futures::stream::unfold(policy_changes, |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        }),
    );
    let arrived = arrivals(crd_appeared, state.services());

    let reporter = Reporter {
        controller: MANAGER.to_owned(),
        instance: Some(config.identity.clone()),
    };
    let services = state.services();
    spawn_corrections(&mut tasks, &client, &config, &state, deleted_rx, &token);
    let writer = Writer::new(client.clone(), reporter, echoes);
    let ctx = Arc::new(Ctx::new(
        client, config, writer, state, caches, pod_states, graph,
    ));

    tasks.spawn(forget_deleted(forget_rx, Arc::clone(&ctx)));

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_token = token.clone();
    tasks.spawn(async move {
        stop_token.cancelled().await;
        let _ = stop_tx.send(true);
    });
    let shutdown = async move {
        let mut rx = stop_rx;
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let controller = Controller::for_shared_stream(svc_stream, services)
        .with_config(controller::Config::default().concurrency(CONCURRENCY));
    triggers
        .attach(controller)
        .reconcile_all_on(reconcile_all)
        .reconcile_on(pod_changes)
        .reconcile_on(retriggered)
        .reconcile_on(arrived)
        .reconcile_on(graph_turn_triggers(turns))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move { report(result) })
        .await;
    tasks.shutdown().await;
    info!("reconciler stopped");
    Ok(())
}

/// What the reconciler remembers of a service goes with the service.
async fn forget_deleted(
    mut deleted: tokio::sync::mpsc::UnboundedReceiver<ObjectRef<InferenceService>>,
    ctx: Arc<Ctx>,
) {
    while let Some(key) = deleted.recv().await {
        ctx.forget_service(&key);
    }
}

type Deletions = tokio::sync::mpsc::UnboundedReceiver<super::accounting::Deletion>;

/// The budget ledgers' and the names ledgers' corrections, each told of
/// every deletion.
fn spawn_corrections(
    tasks: &mut JoinSet<()>,
    client: &Client,
    config: &Config,
    state: &Arc<ClusterState>,
    deleted: Deletions,
    token: &CancellationToken,
) {
    let (budget, names) = split_deletions(tasks, deleted);
    spawn_ledger_corrections(tasks, client, config, state, budget, token);
    spawn_names_corrections(tasks, client, config, state, names, token);
}

/// Every deletion, to the budget ledgers' corrections and the names
/// ledgers'.
fn split_deletions(tasks: &mut JoinSet<()>, mut deleted: Deletions) -> (Deletions, Deletions) {
    let (budget_tx, budget_rx) = tokio::sync::mpsc::unbounded_channel();
    let (names_tx, names_rx) = tokio::sync::mpsc::unbounded_channel();
    tasks.spawn(async move {
        while let Some(d) = deleted.recv().await {
            let _ = names_tx.send(d.clone());
            let _ = budget_tx.send(d);
        }
    });
    (budget_rx, names_rx)
}

/// The names ledgers, corrected from the services this term (the ledgers
/// given in the config, or ones watched from here).
fn spawn_names_corrections(
    tasks: &mut JoinSet<()>,
    client: &Client,
    config: &Config,
    state: &Arc<ClusterState>,
    deleted: Deletions,
    token: &CancellationToken,
) {
    let names = config.names.clone().unwrap_or_else(|| {
        crate::state::names::NamesLedger::start(
            client.clone(),
            &config.namespace,
            config.scope.clone(),
            token.clone(),
        )
    });
    tasks.spawn(crate::state::names::correct_names(
        names,
        Arc::clone(state),
        deleted,
        token.clone(),
    ));
}

/// The GPU budget ledgers, corrected from the services this term (the
/// ledger given in the config, or one watched from here).
fn spawn_ledger_corrections(
    tasks: &mut JoinSet<()>,
    client: &Client,
    config: &Config,
    state: &Arc<ClusterState>,
    deleted: tokio::sync::mpsc::UnboundedReceiver<super::accounting::Deletion>,
    token: &CancellationToken,
) {
    let ledger = config.ledger.clone().unwrap_or_else(|| {
        crate::state::ledger::Ledger::start(
            client.clone(),
            &config.namespace,
            config.metrics.clone(),
            token.clone(),
        )
    });
    tasks.spawn(super::accounting::correct_ledgers(
        ledger,
        Arc::clone(state),
        config.server.clone(),
        deleted,
        token.clone(),
    ));
}

/// Wait for the policy, namespace, service and child caches, then list
/// the engine pods (one list at a time keeps the start's peak memory down)
/// before the first reconcile: each service's status then says why its
/// pods do not start from the first write of the term. `None` when the
/// term ends first.
async fn caches_synced(
    tasks: &mut JoinSet<()>,
    client: &Client,
    config: &Config,
    state: &ClusterState,
    synced: impl std::future::Future<Output = ()>,
    token: &CancellationToken,
) -> Option<(
    Arc<PodStates>,
    futures::channel::mpsc::UnboundedReceiver<ObjectRef<InferenceService>>,
)> {
    info!("waiting for the policy, namespace, service and child caches");
    let ready = async {
        state.synced().await;
        synced.await;
    };
    tokio::select! {
        () = token.cancelled() => return None,
        () = ready => {}
    }
    info!("listing the engine pods");
    let pod_states = Arc::new(PodStates::default());
    let (pod_changes, pods_listed) =
        pods::watch::start(tasks, client, &config.scope, pod_states.clone());
    tokio::select! {
        () = token.cancelled() => return None,
        listed = tokio::time::timeout(POD_LIST_WAIT, pods_listed) => {
            if listed.is_err() {
                // Pods that cannot be listed (RBAC without `pods`, an API
                // server that refuses) must not hold up every service: they
                // are reconciled without the pods' reasons until the list comes.
                warn!(
                    waited = ?POD_LIST_WAIT,
                    "the engine pods are not listed yet; reconciling without why pods do not start"
                );
            }
        }
    }
    Some((pod_states, pod_changes))
}

/// Log what one reconcile came to, when it is worth a line.
fn report<T>(result: Result<T, controller::Error<Error, kube::runtime::watcher::Error>>) {
    match result {
        Ok(_) => {}
        Err(controller::Error::ObjectNotFound(obj)) => {
            debug!(object = %obj, "object gone before it was reconciled");
        }
        Err(controller::Error::ReconcilerFailed(e, obj)) => {
            warn!(object = %obj, error = %e, "reconcile failed; retrying with backoff");
        }
        Err(e) => warn!(error = %e, "controller error"),
    }
}

/// The services to reconcile when an optional CRD arrives: every one
/// (`true`) or those waiting for an optional CRD (`false`).
fn arrivals(
    appeared: futures::channel::mpsc::UnboundedReceiver<bool>,
    services: Store<InferenceService>,
) -> impl futures::Stream<Item = ObjectRef<InferenceService>> + Send + 'static {
    appeared.flat_map(move |all| {
        let refs: Vec<_> = services
            .state()
            .into_iter()
            .filter(|s| all || waits_for_an_optional_api(s))
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
}
