//! The kube-runtime Controller on InferenceService: caches, triggers,
//! validation, server-side apply of the children, deletion of unwanted
//! children, status and events.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, PartialObjectMeta};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{Controller, Predicate, WatchStreamExt, predicates};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::apply::Writer;
use super::children::httproute::{self, HTTPRoute};
use super::children::{self as builders, Desired, LABEL_MANAGED_BY, Track};
use super::graph as resolve;
use super::status::{Observation, Outcome, PolicyResult, Rollout, Routing};
use super::{Config, Error};
use crate::api::v1beta1::{Backend, InferenceService};
use crate::api::{ClusterInferencePolicy, InferencePolicy, MANAGER};
use crate::engine::{self, PolicySnapshot, Verdict};
use crate::graph::fetch::{FetchOptions, GraphFetcher};
use crate::reconcile::children::rayservice::{self, RayService};
use crate::state::context::Watched;
use crate::state::{ClusterState, ServiceEvent, with_context};

/// Reconciles running at once.
pub const CONCURRENCY: u16 = 16;
/// Periodic re-reconcile of every service (drift that no watch event reported).
pub const RESYNC: Duration = Duration::from_secs(3600);
/// Periodic re-reconcile of `backend: RayService` services: picks up graph
/// changes on the server (a conditional GET, cheap when nothing changed).
pub const GRAPH_RESYNC: Duration = Duration::from_secs(60);
/// Re-reconcile after a transient graph failure (timeout, unreachable, 5xx).
pub const GRAPH_RETRY: Duration = Duration::from_secs(15);
/// Re-reconcile while waiting for the Gateway API to be installed.
pub const GATEWAY_API_RECHECK: Duration = Duration::from_secs(30);
/// How long a "not installed" discovery answer is trusted.
const DISCOVERY_TTL_MISSING: Duration = Duration::from_secs(30);
/// How long an "installed" discovery answer is trusted.
const DISCOVERY_TTL_PRESENT: Duration = Duration::from_secs(300);

/// Cached answer to "is this optional CRD (HTTPRoute, RayService) served?".
pub struct ApiDiscovery {
    api_version: &'static str,
    plural: &'static str,
    state: Mutex<Option<(bool, Instant)>>,
}

impl ApiDiscovery {
    /// Discovery of `gateway.networking.k8s.io/v1` `httproutes`.
    #[must_use]
    pub fn gateway() -> Self {
        Self::of(httproute::API_VERSION, httproute::PLURAL)
    }

    /// Discovery of `ray.io/v1` `rayservices`.
    #[must_use]
    pub fn rayservice() -> Self {
        Self::of(rayservice::API_VERSION, rayservice::PLURAL)
    }

    fn of(api_version: &'static str, plural: &'static str) -> Self {
        Self {
            api_version,
            plural,
            state: Mutex::new(None),
        }
    }

    /// Whether the group version serves the resource (cached).
    pub async fn installed(&self, client: &Client) -> Result<bool, kube::Error> {
        if let Ok(state) = self.state.lock()
            && let Some((known, at)) = *state
        {
            let ttl = if known {
                DISCOVERY_TTL_PRESENT
            } else {
                DISCOVERY_TTL_MISSING
            };
            if at.elapsed() < ttl {
                return Ok(known);
            }
        }
        let known = match client.list_api_group_resources(self.api_version).await {
            Ok(list) => list.resources.iter().any(|r| r.name == self.plural),
            Err(kube::Error::Api(s)) if super::status_not_found(&s) => false,
            Err(e) => return Err(e),
        };
        if let Ok(mut state) = self.state.lock() {
            *state = Some((known, Instant::now()));
        }
        Ok(known)
    }

    /// Forget the cached answer (an apply said the resource is gone).
    pub fn forget(&self) {
        if let Ok(mut state) = self.state.lock() {
            *state = None;
        }
    }
}

/// Shared state of one leadership term's controller.
pub struct Ctx {
    client: Client,
    config: Config,
    /// Applies children, deletes them, writes status and events.
    writer: Writer,
    /// Policies, namespace labels, InferenceServices and their route claims.
    state: Arc<ClusterState>,
    deployments: Store<PartialObjectMeta<Deployment>>,
    /// The core/v1 Services infergate owns (not InferenceServices).
    core_services: Store<PartialObjectMeta<Service>>,
    hpas: Store<PartialObjectMeta<HorizontalPodAutoscaler>>,
    routes: Store<PartialObjectMeta<HTTPRoute>>,
    rayservices: Store<PartialObjectMeta<RayService>>,
    gateway_api: Arc<ApiDiscovery>,
    ray_api: Arc<ApiDiscovery>,
    /// Built on first use (Deployment-only clusters never load the roots).
    graph_fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
    /// Consecutive failures per service, for backoff.
    failures: Mutex<HashMap<ObjectRef<InferenceService>, u32>>,
}

/// Check that infergate's CRDs are served; tell the user how to install them if not.
pub async fn preflight(client: &Client) -> Result<(), Error> {
    let lp = ListParams::default().limit(1);
    let checks = [
        (
            "inferenceservices.infergate.dev",
            Api::<InferenceService>::all(client.clone())
                .list_metadata(&lp)
                .await
                .map(|_| ()),
        ),
        (
            "clusterinferencepolicies.infergate.dev",
            Api::<ClusterInferencePolicy>::all(client.clone())
                .list_metadata(&lp)
                .await
                .map(|_| ()),
        ),
        (
            "inferencepolicies.infergate.dev",
            Api::<InferencePolicy>::all(client.clone())
                .list_metadata(&lp)
                .await
                .map(|_| ()),
        ),
    ];
    for (crd, result) in checks {
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if super::status_not_found(&s) => {
                return Err(Error::CrdMissing(crd.to_owned()));
            }
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    Ok(())
}

/// Drive a metadata reflector for a child kind; forward every touched object
/// (including deletions) to the controller as an owner trigger.
fn child_reflector<K>(
    tasks: &mut JoinSet<()>,
    api: Api<PartialObjectMeta<K>>,
) -> (
    Store<PartialObjectMeta<K>>,
    mpsc::UnboundedReceiver<PartialObjectMeta<K>>,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded();
    let wc = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
    let kind = K::kind(&()).into_owned();
    tasks.spawn(async move {
        let mut stream = std::pin::pin!(
            watcher(api, wc)
                .default_backoff()
                .reflect(writer)
                .touched_objects()
        );
        while let Some(item) = stream.next().await {
            match item {
                Ok(obj) => {
                    if tx.unbounded_send(obj).is_err() {
                        return;
                    }
                }
                Err(e) => warn!(kind = %kind, error = %e, "child watch failed; retrying"),
            }
        }
    });
    (reader, rx)
}

/// Children of an optional CRD (HTTPRoute, RayService) are watched once it is installed.
fn optional_reflector<K>(
    tasks: &mut JoinSet<()>,
    client: Client,
    discovery: Arc<ApiDiscovery>,
) -> (
    Store<PartialObjectMeta<K>>,
    mpsc::UnboundedReceiver<PartialObjectMeta<K>>,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded();
    let kind = K::kind(&()).into_owned();
    tasks.spawn(async move {
        loop {
            match discovery.installed(&client).await {
                Ok(true) => break,
                Ok(false) => debug!(kind = %kind, "CRD not installed; not watched yet"),
                Err(e) => warn!(kind = %kind, error = %e, "API discovery failed"),
            }
            tokio::time::sleep(DISCOVERY_TTL_MISSING).await;
        }
        let wc = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}"));
        let mut stream = std::pin::pin!(
            watcher(Api::<PartialObjectMeta<K>>::all(client), wc)
                .default_backoff()
                .reflect(writer)
                .touched_objects()
        );
        while let Some(item) = stream.next().await {
            match item {
                Ok(obj) => {
                    if tx.unbounded_send(obj).is_err() {
                        return;
                    }
                }
                Err(e) => warn!(kind = %kind, error = %e, "watch failed; retrying"),
            }
        }
    });
    (reader, rx)
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
    let (deployments, deploy_rx) = child_reflector(
        &mut tasks,
        Api::<PartialObjectMeta<Deployment>>::all(client.clone()),
    );
    let (core_services, service_rx) = child_reflector(
        &mut tasks,
        Api::<PartialObjectMeta<Service>>::all(client.clone()),
    );
    let (hpas, hpa_rx) = child_reflector(
        &mut tasks,
        Api::<PartialObjectMeta<HorizontalPodAutoscaler>>::all(client.clone()),
    );
    let gateway_api = Arc::new(ApiDiscovery::gateway());
    let (routes, route_rx) =
        optional_reflector::<HTTPRoute>(&mut tasks, client.clone(), gateway_api.clone());
    let ray_api = Arc::new(ApiDiscovery::rayservice());
    let (rayservices, ray_rx) =
        optional_reflector::<RayService>(&mut tasks, client.clone(), ray_api.clone());
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
    };
    tokio::select! {
        () = token.cancelled() => return Ok(()),
        () = ready => {}
    }
    info!("caches synced; reconciling");

    let svc_stream = service_triggers(service_events, graph_fetcher.clone());
    // Every service once at the start of the term, then again whenever a
    // policy or a namespace's labels change.
    let reconcile_all = futures::stream::once(std::future::ready(())).chain(
        futures::stream::unfold(policy_changes, |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        }),
    );

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: MANAGER.to_owned(),
            instance: Some(config.identity.clone()),
        },
    );
    let services = state.services();
    let writer = Writer::new(client.clone(), recorder);
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
        gateway_api,
        ray_api,
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

/// The services to reconcile, from the shared watch's events: a change of
/// generation, labels or annotations triggers (templates may read labels);
/// a status-only update, our own status writes among them, does not. A
/// deletion drops the service's cached graph.
fn service_triggers(
    events: tokio::sync::mpsc::Receiver<ServiceEvent>,
    graph_fetcher: Arc<std::sync::OnceLock<Arc<GraphFetcher>>>,
) -> impl futures::Stream<Item = Arc<InferenceService>> + Send + 'static {
    let predicate = predicates::generation
        .combine(predicates::labels)
        .combine(predicates::annotations);
    let mut seen: HashMap<ObjectRef<InferenceService>, u64> = HashMap::new();
    futures::stream::unfold(events, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    })
    .filter_map(move |event| {
        let trigger = match event {
            ServiceEvent::Applied(svc) => {
                let key = ObjectRef::from_obj(svc.as_ref());
                match predicate.hash_property(svc.as_ref()) {
                    Some(hash) if seen.insert(key, hash) == Some(hash) => None,
                    _ => Some(svc),
                }
            }
            ServiceEvent::Deleted(key) => {
                if let Some(g) = graph_fetcher.get() {
                    g.forget(&resolve::cache_key_of(&key));
                }
                seen.remove(&key);
                None
            }
        };
        std::future::ready(trigger)
    })
}

async fn reconcile(svc: Arc<InferenceService>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let start = Instant::now();
    let span = info_span!(
        "reconcile",
        namespace = %svc.namespace().unwrap_or_default(),
        name = %svc.name_any()
    );
    let result = reconcile_service(&svc, &ctx).instrument(span.clone()).await;
    let elapsed = start.elapsed();
    let label = match &result {
        Ok(_) => "success",
        Err(e) => e.metric_label(),
    };
    ctx.config.metrics.reconcile(label, elapsed);
    let _enter = span.enter();
    debug!(
        elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        result = label,
        "reconciled"
    );
    if result.is_ok()
        && let Ok(mut f) = ctx.failures.lock()
    {
        f.remove(&ObjectRef::from_obj(svc.as_ref()));
    }
    result
}

/// Exponential backoff per service (1 s for conflicts, 5 s doubling up to 5 min otherwise).
fn error_policy(svc: Arc<InferenceService>, error: &Error, ctx: Arc<Ctx>) -> Action {
    if error.is_conflict() {
        return Action::requeue(Duration::from_secs(1));
    }
    let n = ctx
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(ObjectRef::from_obj(svc.as_ref())).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    let secs = 5u64
        .saturating_mul(1 << n.saturating_sub(1).min(6))
        .min(300);
    Action::requeue(Duration::from_secs(secs))
}

/// Split policy findings from the object's own errors.
fn policy_result(intrinsic: &Verdict, full: &Verdict) -> PolicyResult {
    let own: Vec<String> = intrinsic.errors.iter().map(ToString::to_string).collect();
    let violations: Vec<String> = full
        .errors
        .iter()
        .map(ToString::to_string)
        .filter(|e| !own.contains(e))
        .collect();
    if !violations.is_empty() {
        return PolicyResult::Violation(violations.join("; "));
    }
    let warnings: Vec<&String> = full
        .warnings
        .iter()
        .filter(|w| !intrinsic.warnings.contains(w))
        .collect();
    if warnings.is_empty() {
        PolicyResult::Compliant
    } else {
        PolicyResult::Warning(
            warnings
                .iter()
                .map(|w| w.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    }
}

async fn reconcile_service(svc: &InferenceService, ctx: &Ctx) -> Result<Action, Error> {
    let ns = svc.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    if svc.metadata.deletion_timestamp.is_some() {
        // Children carry owner references: the garbage collector removes them.
        if let Some(g) = ctx.graph_fetcher.get() {
            g.forget(&resolve::cache_key(svc));
        }
        return Ok(Action::await_change());
    }
    if svc.spec.backend == Some(Backend::RayService) {
        return reconcile_rayservice(svc, ctx, &ns).await;
    }

    let Evaluation {
        defaulted,
        intrinsic,
        policy,
    } = ctx.evaluate(svc, &ns);
    let gateway = builders::gateway(&defaulted);
    let mut obs = Observation {
        generation: svc.metadata.generation,
        outcome: Outcome::Invalid(String::new()),
        policy,
        route_path: None,
        request_timeout: None,
    };

    if !intrinsic.allowed() {
        obs.outcome = Outcome::Invalid(intrinsic.message());
        ctx.writer.write_status(svc, &obs).await?;
        return Ok(Action::await_change());
    }
    let built = builders::desired(&defaulted).and_then(|d| {
        let path = match gateway {
            Some(_) => Some(
                engine::render_route_path(&defaulted)
                    .map_err(|e| builders::BuildError::Route(e.to_string()))?,
            ),
            None => None,
        };
        Ok((d, path))
    });
    let (desired, path) = match built {
        Ok(b) => b,
        Err(e) => {
            obs.outcome = Outcome::Invalid(e.to_string());
            ctx.writer.write_status(svc, &obs).await?;
            return Ok(Action::await_change());
        }
    };
    obs.route_path = path;
    obs.request_timeout = gateway
        .as_ref()
        .map(|_| builders::request_timeout(&defaulted));

    match ctx.apply_all(svc, &defaulted, desired).await {
        Ok(outcome) => {
            let waiting_for_gateway_api = matches!(
                outcome,
                Outcome::Applied {
                    routing: Routing::GatewayApiMissing { .. },
                    ..
                }
            );
            obs.outcome = outcome;
            ctx.writer.write_status(svc, &obs).await?;
            Ok(Action::requeue(if waiting_for_gateway_api {
                GATEWAY_API_RECHECK
            } else {
                RESYNC
            }))
        }
        Err(e) => {
            obs.outcome = Outcome::Failed(e.to_string());
            if let Err(se) = ctx.writer.write_status(svc, &obs).await {
                warn!(error = %se, "failed to record the apply failure in status");
            }
            Err(e)
        }
    }
}

/// `backend: RayService`: validate, resolve the graph, apply the RayService.
/// Any graph failure leaves the existing RayService as it is and is reported
/// in the `GraphReady` and `Reconciled` conditions with its distinct reason.
async fn reconcile_rayservice(
    svc: &InferenceService,
    ctx: &Ctx,
    ns: &str,
) -> Result<Action, Error> {
    let Evaluation {
        defaulted,
        intrinsic,
        policy,
    } = ctx.evaluate(svc, ns);
    let mut obs = Observation {
        generation: svc.metadata.generation,
        outcome: Outcome::Invalid(String::new()),
        policy,
        route_path: None,
        request_timeout: None,
    };
    if !intrinsic.allowed() {
        obs.outcome = Outcome::Invalid(intrinsic.message());
        ctx.writer.write_status(svc, &obs).await?;
        return Ok(Action::await_change());
    }
    let path = match engine::render_route_path(&defaulted) {
        Ok(p) => p,
        Err(e) => {
            obs.outcome = Outcome::Invalid(e.to_string());
            ctx.writer.write_status(svc, &obs).await?;
            return Ok(Action::await_change());
        }
    };
    obs.route_path = Some(path.clone());
    if !ctx.ray_api.installed(&ctx.client).await? {
        obs.outcome = Outcome::RayServiceApiMissing;
        ctx.writer.write_status(svc, &obs).await?;
        return Ok(Action::requeue(GATEWAY_API_RECHECK));
    }
    let fetcher = match ctx.graph_fetcher.get() {
        Some(f) => f.clone(),
        None => {
            let built = Arc::new(GraphFetcher::from_ca_file(
                FetchOptions::default(),
                ctx.config.graph_ca_file.as_deref(),
            )?);
            ctx.graph_fetcher.get_or_init(|| built).clone()
        }
    };
    let resolved = match resolve::resolve(&ctx.client, fetcher.as_ref(), &defaulted, &path).await {
        Ok(r) => r,
        Err(e) => {
            let transient = matches!(&e, rayservice::RayServiceError::Graph(g) if g.is_transient());
            debug!(reason = e.reason(), error = %e, "graph not resolved; RayService left as it is");
            obs.outcome = Outcome::GraphFailed {
                reason: e.reason(),
                message: e.to_string(),
            };
            ctx.writer.write_status(svc, &obs).await?;
            let resync = ctx.config.graph_resync;
            return Ok(Action::requeue(if transient {
                GRAPH_RETRY.min(resync)
            } else {
                resync
            }));
        }
    };
    match ctx
        .writer
        .apply(svc, &resolved.rayservice, &ctx.rayservices)
        .await
    {
        Ok(applied) => {
            obs.outcome = Outcome::RayServiceApplied {
                observed: rayservice::observe(&applied),
                nodes: resolved.graph.nodes.len(),
            };
            ctx.writer.write_status(svc, &obs).await?;
            Ok(Action::requeue(ctx.config.graph_resync))
        }
        Err(e) => {
            if e.is_not_found() {
                // The CRD went away between discovery and apply.
                ctx.ray_api.forget();
            }
            obs.outcome = Outcome::Failed(e.to_string());
            if let Err(se) = ctx.writer.write_status(svc, &obs).await {
                warn!(error = %se, "failed to record the apply failure in status");
            }
            Err(e)
        }
    }
}

/// The engine's view of one service: defaulted in memory, validated on its
/// own and against the applicable policies.
struct Evaluation {
    defaulted: InferenceService,
    intrinsic: Verdict,
    policy: PolicyResult,
}

fn gateway_display(svc: &InferenceService) -> String {
    builders::gateway(svc)
        .map(|g| format!("{}/{}", g.namespace.unwrap_or_default(), g.name))
        .unwrap_or_default()
}

/// The message of a parent's `Accepted=False`, if any.
fn rejection(route: &HTTPRoute) -> Option<String> {
    route.status.as_ref()?.parents.iter().find_map(|p| {
        p.conditions
            .iter()
            .find(|c| c.type_ == "Accepted" && c.status == "False")
            .map(|c| format!("{}: {}", c.reason, c.message))
    })
}

impl Ctx {
    /// Default and validate (synchronous: the engine's context is not `Send`).
    fn evaluate(&self, svc: &InferenceService, ns: &str) -> Evaluation {
        let source = Watched {
            state: &self.state,
            server: &self.config.server,
            reconciling: Some(svc),
        };
        with_context(&source, ns, |full_ctx| {
            let defaulted = engine::default_service(svc, full_ctx).object;
            let no_policies = PolicySnapshot::default();
            let bare_ctx = engine::Context {
                policies: &no_policies,
                ..*full_ctx
            };
            let intrinsic = engine::validate_service(&defaulted, None, &bare_ctx);
            let full = engine::validate_service(&defaulted, None, full_ctx);
            let policy = policy_result(&intrinsic, &full);
            Evaluation {
                defaulted,
                intrinsic,
                policy,
            }
        })
    }

    async fn apply_all(
        &self,
        svc: &InferenceService,
        defaulted: &InferenceService,
        desired: Desired,
    ) -> Result<Outcome, Error> {
        let primary = self
            .writer
            .apply(svc, &desired.primary, &self.deployments)
            .await?;
        self.writer
            .apply(svc, &desired.primary_service, &self.core_services)
            .await?;
        let canary_name = builders::child_name(defaulted, Track::Canary);
        let canary = match desired.canary {
            Some((deployment, service)) => {
                let d = self
                    .writer
                    .apply(svc, &deployment, &self.deployments)
                    .await?;
                self.writer
                    .apply(svc, &service, &self.core_services)
                    .await?;
                Some(Rollout::of(&d))
            }
            None => {
                self.writer
                    .delete::<Deployment>(svc, &canary_name, &self.deployments)
                    .await?;
                self.writer
                    .delete::<Service>(svc, &canary_name, &self.core_services)
                    .await?;
                None
            }
        };
        let primary_name = builders::child_name(defaulted, Track::Primary);
        match desired.hpa {
            Some(hpa) => {
                self.writer.apply(svc, &hpa, &self.hpas).await?;
            }
            None => {
                self.writer
                    .delete::<HorizontalPodAutoscaler>(svc, &primary_name, &self.hpas)
                    .await?;
            }
        }
        let routed = canary
            .as_ref()
            .map(|c| builders::routed_canary_weight(defaulted, c.ready));
        let (routing, routed_weight) = match builders::gateway(defaulted) {
            None => {
                self.writer
                    .delete::<HTTPRoute>(svc, &primary_name, &self.routes)
                    .await?;
                (Routing::NoGateway, None)
            }
            Some(_) if !self.gateway_api.installed(&self.client).await? => (
                Routing::GatewayApiMissing {
                    gateway: gateway_display(defaulted),
                },
                None,
            ),
            Some(_) => {
                let route = builders::http_route(defaulted, routed.unwrap_or(0))?
                    .ok_or(Error::MissingMetadata("spec.routing.gateway"))?;
                match self.writer.apply(svc, &route, &self.routes).await {
                    Ok(applied) => (
                        Routing::Applied {
                            gateway: gateway_display(defaulted),
                            path: engine::render_route_path(defaulted)
                                .map_err(|e| builders::BuildError::Route(e.to_string()))?,
                            rejection: rejection(&applied),
                        },
                        routed,
                    ),
                    Err(e) if e.is_not_found() => {
                        // The CRD went away between discovery and apply.
                        self.gateway_api.forget();
                        (
                            Routing::GatewayApiMissing {
                                gateway: gateway_display(defaulted),
                            },
                            None,
                        )
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        Ok(Outcome::Applied {
            primary: Rollout::of(&primary),
            canary,
            routing,
            routed_weight,
        })
    }
}
