//! The kube-runtime Controller on InferenceService for one leadership term:
//! the context every reconcile shares, and the wiring from the watches to
//! [`super::flow`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::PartialObjectMeta;
use kube::runtime::Controller;
use kube::runtime::controller::{self};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::apply::Writer;
use super::children::httproute::HTTPRoute;
use super::children::inferencepool::InferencePool;
use super::children::podmonitor::PodMonitor;
use super::discovery::ApiDiscovery;
use super::flow::{error_policy, reconcile};
use super::watches::{child_reflector, optional_reflector, service_triggers};
use super::{Config, Error};
use crate::api::MANAGER;
use crate::api::v1beta1::InferenceService;
use crate::graph::fetch::GraphFetcher;
use crate::reconcile::children::rayservice::RayService;
use crate::state::ClusterState;

/// Reconciles running at once.
pub const CONCURRENCY: u16 = 16;
/// Periodic re-reconcile of every service (drift that no watch event reported).
pub const RESYNC: Duration = Duration::from_secs(3600);
/// Periodic re-reconcile of `backend: RayService` services: picks up graph
/// changes on the server (a conditional GET, cheap when nothing changed).
pub const GRAPH_RESYNC: Duration = Duration::from_secs(60);
/// Come back after a graph fetch was deferred because too many were in
/// flight (for the namespace, or in all).
pub const GRAPH_BUSY_RETRY: Duration = Duration::from_secs(5);
/// Re-reconcile while waiting for an optional API (Gateway API, KubeRay)
/// to be installed.
pub const OPTIONAL_API_RECHECK: Duration = Duration::from_secs(30);

/// Shared state of one leadership term's controller.
pub struct Ctx {
    pub(super) client: Client,
    pub(super) config: Config,
    /// Applies children, deletes them, writes status and events.
    pub(super) writer: Writer,
    /// Policies, namespace labels, InferenceServices and their route claims.
    pub(super) state: Arc<ClusterState>,
    pub(super) deployments: Store<PartialObjectMeta<Deployment>>,
    /// The core/v1 Services infergate owns (not InferenceServices).
    pub(super) core_services: Store<PartialObjectMeta<Service>>,
    pub(super) hpas: Store<PartialObjectMeta<HorizontalPodAutoscaler>>,
    pub(super) routes: Store<PartialObjectMeta<HTTPRoute>>,
    pub(super) rayservices: Store<PartialObjectMeta<RayService>>,
    pub(super) podmonitors: Store<PartialObjectMeta<PodMonitor>>,
    pub(super) pools: Store<PartialObjectMeta<InferencePool>>,
    pub(super) service_accounts: Store<PartialObjectMeta<ServiceAccount>>,
    pub(super) roles: Store<PartialObjectMeta<Role>>,
    pub(super) role_bindings: Store<PartialObjectMeta<RoleBinding>>,
    pub(super) config_maps: Store<PartialObjectMeta<ConfigMap>>,
    pub(super) gateway_api: Arc<ApiDiscovery>,
    pub(super) ray_api: Arc<ApiDiscovery>,
    pub(super) monitor_api: Arc<ApiDiscovery>,
    pub(super) pool_api: Arc<ApiDiscovery>,
    /// Built on first use (Deployment-only clusters never load the roots).
    pub(super) graph_fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
    /// Consecutive failures per service, for backoff.
    pub(super) failures: Mutex<HashMap<ObjectRef<InferenceService>, u32>>,
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
    policy_changes.mark_unchanged();

    let mut tasks = JoinSet::new();
    let scope = config.scope.clone();
    let (deployments, deploy_rx) = child_reflector::<Deployment>(&mut tasks, &client, &scope);
    let (core_services, service_rx) = child_reflector::<Service>(&mut tasks, &client, &scope);
    let (hpas, hpa_rx) = child_reflector::<HorizontalPodAutoscaler>(&mut tasks, &client, &scope);
    let gateway_api = Arc::new(ApiDiscovery::gateway());
    let (routes, route_rx) = optional_reflector::<HTTPRoute>(
        &mut tasks,
        client.clone(),
        scope.clone(),
        gateway_api.clone(),
        None,
    );
    let ray_api = Arc::new(ApiDiscovery::rayservice());
    let (rayservices, ray_rx) = optional_reflector::<RayService>(
        &mut tasks,
        client.clone(),
        scope.clone(),
        ray_api.clone(),
        None,
    );
    // Services wait for Gateway API and KubeRay by requeueing (they say so in
    // status); a PodMonitor is made for every service and InferencePools for
    // many, so the arrival of either CRD reconciles them all once instead.
    let (crd_tx, crd_appeared) = futures::channel::mpsc::unbounded();
    let monitor_api = Arc::new(ApiDiscovery::podmonitor());
    let (podmonitors, monitor_rx) = optional_reflector::<PodMonitor>(
        &mut tasks,
        client.clone(),
        scope.clone(),
        monitor_api.clone(),
        Some(crd_tx.clone()),
    );
    let pool_api = Arc::new(ApiDiscovery::inference_pool());
    let (pools, pool_rx) = optional_reflector::<InferencePool>(
        &mut tasks,
        client.clone(),
        scope.clone(),
        pool_api.clone(),
        Some(crd_tx),
    );
    // The endpoint pickers' own objects (Deployments and Services are above).
    let (service_accounts, sa_rx) = child_reflector::<ServiceAccount>(&mut tasks, &client, &scope);
    let (roles, role_rx) = child_reflector::<Role>(&mut tasks, &client, &scope);
    let (role_bindings, binding_rx) = child_reflector::<RoleBinding>(&mut tasks, &client, &scope);
    let (config_maps, cm_rx) = child_reflector::<ConfigMap>(&mut tasks, &client, &scope);
    let graph_fetcher = Arc::new(std::sync::OnceLock::new());
    if let Some(f) = config.graph_fetcher.clone() {
        let _ = graph_fetcher.set(f);
    }

    info!("waiting for the policy, namespace, service and child caches");
    let ready = async {
        state.synced().await;
        let _ = deployments.wait_until_ready().await;
        let _ = core_services.wait_until_ready().await;
        let _ = hpas.wait_until_ready().await;
        let _ = service_accounts.wait_until_ready().await;
        let _ = roles.wait_until_ready().await;
        let _ = role_bindings.wait_until_ready().await;
        let _ = config_maps.wait_until_ready().await;
    };
    tokio::select! {
        () = token.cancelled() => return Ok(()),
        () = ready => {}
    }
    info!("caches synced; reconciling");

    let svc_stream = service_triggers(service_events, graph_fetcher.clone());
    // Every service once at the start of the term, then again whenever a
    // policy or a namespace's labels change.
    let reconcile_all =
        futures::stream::once(std::future::ready(())).chain(futures::stream::select(
            futures::stream::unfold(policy_changes, |mut rx| async move {
                rx.changed().await.ok().map(|()| ((), rx))
            }),
            crd_appeared,
        ));

    let reporter = Reporter {
        controller: MANAGER.to_owned(),
        instance: Some(config.identity.clone()),
    };
    let services = state.services();
    let writer = Writer::new(client.clone(), reporter);
    let ctx = Arc::new(Ctx {
        client,
        config,
        writer,
        state,
        deployments,
        core_services,
        hpas,
        routes,
        rayservices,
        podmonitors,
        pools,
        service_accounts,
        roles,
        role_bindings,
        config_maps,
        gateway_api,
        ray_api,
        monitor_api,
        pool_api,
        graph_fetcher,
        failures: Mutex::new(HashMap::new()),
    });

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

    Controller::for_shared_stream(svc_stream, services)
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .owns_stream(deploy_rx.map(Ok))
        .owns_stream(service_rx.map(Ok))
        .owns_stream(hpa_rx.map(Ok))
        .owns_stream(route_rx.map(Ok))
        .owns_stream(ray_rx.map(Ok))
        .owns_stream(monitor_rx.map(Ok))
        .owns_stream(pool_rx.map(Ok))
        .owns_stream(sa_rx.map(Ok))
        .owns_stream(role_rx.map(Ok))
        .owns_stream(binding_rx.map(Ok))
        .owns_stream(cm_rx.map(Ok))
        .reconcile_all_on(reconcile_all)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
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
        })
        .await;
    tasks.shutdown().await;
    info!("reconciler stopped");
    Ok(())
}
