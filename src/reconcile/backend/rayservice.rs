//! The `backend: RayService` reconcile: resolve the graph (Secret, fetch,
//! validation, builder), apply the RayService and scale its Ray cluster,
//! route through the gateway to KubeRay's serve Service, and say in
//! `status.graph` which graph is live.
//!
//! A graph that cannot be had leaves the RayService as it is: the last good
//! graph keeps serving (`GraphReady=False`, `StaleGraph`). The annotation
//! [`REFRESH_ANNOTATION`] asks for a fetch, at most once per value ever and
//! no sooner than the fetcher's refresh interval after the service's last
//! fetch, nor within its backoff.

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use tracing::{debug, warn};

use super::requeue::{GRAPH_QUEUE_POLL, OPTIONAL_API_RECHECK, jitter};
use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::api::vocabulary::{CondStatus, ConditionType};
use crate::engine;
use crate::graph::GraphError;
use crate::graph::fetch::GraphFetcher;
use crate::reconcile::children::httproute::HTTPRoute;
use crate::reconcile::children::rayservice::{self, RayService, RayServiceError};
use crate::reconcile::children::{self as builders, Track};
use crate::reconcile::children::{gateway_display, rejection};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::graph as resolve;
use crate::reconcile::status::{
    AppliedGraph, GraphReport, GraphUse, Observation, Outcome, Reason, Routing, live_graph,
    pending_refresh, short_digest,
};

/// The annotation that asks for a fetch of the graph (infergate never
/// removes it). The fetch happens once the service's last fetch ended a
/// refresh interval (30 s) ago and no backoff holds it; a value that came
/// sooner is acted on then.
pub use crate::api::vocabulary::names::ANNOTATION_GRAPH_REFRESH as REFRESH_ANNOTATION;
/// Come back this often while KubeRay has not made the serve Service the
/// route names.
pub const SERVE_SERVICE_RECHECK: Duration = Duration::from_secs(10);

/// `backend: RayService`: validate, resolve the graph, apply the RayService
/// and its route. Any graph failure leaves the existing RayService as it is
/// and is reported in the `GraphReady` and `Reconciled` conditions.
pub(super) async fn reconcile(
    svc: &InferenceService,
    ctx: &Ctx,
    defaulted: &InferenceService,
    graph_internal_allowed: bool,
    class: Option<&AcceleratorClassSpec>,
    mut obs: Observation,
) -> Result<Action, Error> {
    let path = match engine::render_route_path(defaulted) {
        Ok(p) => p,
        Err(e) => {
            obs.outcome = Outcome::Invalid(e.to_string());
            ctx.writer.write_status(svc, &obs).await?;
            return Ok(Action::await_change());
        }
    };
    obs.route_path = Some(path.clone());
    obs.request_timeout =
        builders::gateway(defaulted).map(|_| builders::request_timeout(defaulted));
    if !ctx.installed::<RayService>().await? {
        return api_missing(ctx, svc, obs).await;
    }
    let fetcher = ctx
        .graph
        .get_or_build(ctx.config.graph_ca_file.as_deref())?;
    let refresh = Refresh::pending(svc, ctx, &fetcher, defaulted);
    let access = resolve::Access {
        internal_allowed: graph_internal_allowed,
        service_account: &ctx.config.service_account,
        class,
        refresh: refresh.due(),
        max_age: ctx.config.graph_resync,
    };
    let prefix = builders::serve_route_prefix(defaulted, &path);
    let resolved =
        match resolve::resolve(&ctx.client, fetcher.as_ref(), defaulted, &prefix, access).await {
            Ok(r) => r,
            Err(RayServiceError::Graph(e)) if e.is_deferral() => {
                // Waiting for the fetch (its backoff, its turn): the rest
                // of the spec is applied with the last good graph.
                if let Some(last) = ctx.last_good.rebuild(defaulted, &prefix, class)
                    && let Ok(last) = last
                    && !matches!(e, GraphError::SecretUnreadable { .. })
                {
                    let wait = deferred_wait(&fetcher, &e);
                    let applied =
                        apply_with(ctx, svc, defaulted, &path, &last, GraphUse::Waiting).await;
                    let (outcome, _) = match applied {
                        Ok(done) => done,
                        Err(stop) => return stop.report(ctx, svc, obs).await,
                    };
                    obs.outcome = outcome;
                    ctx.writer.write_status(svc, &obs).await?;
                    return Ok(Action::requeue(wait + jitter(svc)));
                }
                return deferred(ctx, svc, obs, &fetcher, e).await;
            }
            Err(e) => {
                let target = Target {
                    defaulted,
                    path: &path,
                    prefix: &prefix,
                    class,
                };
                return graph_failed(ctx, svc, &target, obs, refresh, e).await;
            }
        };
    let (outcome, recheck) =
        match apply_with(ctx, svc, defaulted, &path, &resolved, GraphUse::Current).await {
            Ok(done) => done,
            Err(stop) => return stop.report(ctx, svc, obs).await,
        };
    ctx.last_good.keep(&resolve::cache_key(svc), &resolved);
    record_applied(ctx, svc, &resolved, refresh, obs, outcome, recheck).await
}

/// Why applying a RayService stopped short.
enum Stop {
    /// The RayService CRD went away between discovery and apply.
    ApiGone,
    /// A write failed.
    Failed(Error),
}

impl Stop {
    /// Say so in status and return what the reconcile returns.
    async fn report(
        self,
        ctx: &Ctx,
        svc: &InferenceService,
        obs: Observation,
    ) -> Result<Action, Error> {
        match self {
            Stop::ApiGone => api_missing(ctx, svc, obs).await,
            Stop::Failed(e) => failed(ctx, svc, obs, e).await,
        }
    }
}

/// Apply the RayService of `resolved`, scale its Ray clusters and route to
/// it: the outcome (with `graph`, which graph it runs) and when to look
/// again.
async fn apply_with(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    path: &str,
    resolved: &resolve::Resolved,
    graph: GraphUse,
) -> Result<(Outcome, Duration), Stop> {
    let applied = match ctx.apply_and_read(svc, &resolved.rayservice).await {
        Ok(applied) => applied,
        Err(e) if e.is_api_gone() => {
            ctx.forget::<RayService>();
            return Err(Stop::ApiGone);
        }
        Err(e) => return Err(Stop::Failed(e)),
    };
    let workers = scale_ray_clusters(ctx, &applied, &resolved.rayservice).await;
    let routing = route(ctx, svc, defaulted, path)
        .await
        .map_err(Stop::Failed)?;
    let recheck = match &routing {
        Routing::ServeServiceMissing { .. } => SERVE_SERVICE_RECHECK,
        Routing::GatewayApiMissing { .. } => OPTIONAL_API_RECHECK,
        _ => ctx.config.graph_resync,
    };
    // Why its pods (head and workers) are not ready, from the watch on
    // the engine pods.
    let ns = svc.namespace().unwrap_or_default();
    let blocker = ctx.pods.worst(&ns, &svc.name_any(), Track::Primary);
    let outcome = Outcome::RayServiceApplied {
        observed: rayservice::observe(&applied),
        nodes: resolved.graph.nodes.len(),
        workers,
        blocker: blocker.map(Box::new),
        graph,
        routing,
    };
    Ok((outcome, recheck))
}

/// A graph refresh asked for by [`REFRESH_ANNOTATION`], and when the
/// fetcher lets it fetch.
struct Refresh<'a> {
    /// The annotation's value, when it was not acted on before.
    token: Option<String>,
    /// How long the fetcher holds that refresh back (`None`: not at all).
    wait: Option<Duration>,
    fetcher: &'a GraphFetcher,
    /// The service's key in the fetcher.
    key: String,
    /// The graph's URL.
    url: &'a str,
}

impl<'a> Refresh<'a> {
    /// The refresh `svc` asks for, if any.
    fn pending(
        svc: &InferenceService,
        ctx: &Ctx,
        fetcher: &'a GraphFetcher,
        defaulted: &'a InferenceService,
    ) -> Self {
        let token = pending_refresh(
            svc.annotations()
                .get(REFRESH_ANNOTATION)
                .map(String::as_str),
            svc.status.as_ref(),
            &ctx.writer.acted_on(svc).refreshes,
        );
        let key = resolve::cache_key(svc);
        let url = defaulted.spec.graph.as_ref().map_or("", |g| g.url.as_str());
        // A new refresh value fetches only when the fetcher allows it; until
        // then it waits (not recorded), and any fetch that happens meanwhile
        // (the resync, a retry after a failure) answers it.
        let wait = token.as_ref().and_then(|_| fetcher.refresh_in(&key, url));
        Refresh {
            token,
            wait,
            fetcher,
            key,
            url,
        }
    }

    /// Whether the refresh may fetch now.
    fn due(&self) -> bool {
        self.token.is_some() && self.wait.is_none()
    }
}

/// The RayService API is not served: say so and look again later.
async fn api_missing(
    ctx: &Ctx,
    svc: &InferenceService,
    mut obs: Observation,
) -> Result<Action, Error> {
    obs.outcome = Outcome::RayServiceApiMissing;
    ctx.writer.write_status(svc, &obs).await?;
    Ok(Action::requeue(OPTIONAL_API_RECHECK))
}

/// The fetch was put off (a backoff, a wait in line, an unreadable
/// Secret). Not a new state of the graph: the status keeps what it says,
/// but for a long wait in line. A refresh is acted on once the fetch it
/// asks for runs.
async fn deferred(
    ctx: &Ctx,
    svc: &InferenceService,
    mut obs: Observation,
    fetcher: &GraphFetcher,
    e: GraphError,
) -> Result<Action, Error> {
    debug!(reason = e.reason().as_str(), error = %e, "graph fetch deferred");
    if let GraphError::SecretUnreadable { .. } = &e {
        return Err(Error::SecretUnreadable(e.to_string()));
    }
    if let GraphError::Queued { waited, .. } = &e
        && *waited > fetcher.options().queued_after
        && !answered(svc)
    {
        // A long wait: news only for a service with no answer yet; one
        // whose last fetch failed keeps saying so.
        obs.outcome = Outcome::GraphQueued(e.to_string());
        ctx.writer.write_status(svc, &obs).await?;
    }
    Ok(Action::requeue(deferred_wait(fetcher, &e) + jitter(svc)))
}

/// When to look again at a fetch put off by `e`: its backoff's end, just
/// after a wait in line turns into news, or at the queue poll.
fn deferred_wait(fetcher: &GraphFetcher, e: &GraphError) -> Duration {
    match e {
        GraphError::BackingOff { retry_in } => *retry_in,
        GraphError::Queued { waited, .. } => {
            let notice = fetcher.options().queued_after;
            if *waited > notice {
                GRAPH_QUEUE_POLL
            } else {
                // Back just after the notice is due.
                (notice - *waited + Duration::from_millis(100)).min(GRAPH_QUEUE_POLL)
            }
        }
        _ => GRAPH_QUEUE_POLL,
    }
}

/// Whether a fetch of `svc`'s graph has ended before (a graph, or a
/// failure `GraphReady=False` still shows): a wait in line then keeps what
/// the status says; `FetchQueued` is only for a service with no answer yet.
fn answered(svc: &InferenceService) -> bool {
    let Some(st) = svc.status.as_ref() else {
        return false;
    };
    st.graph.as_ref().is_some_and(|g| g.last_fetch_at.is_some())
        || st.conditions.iter().any(|c| {
            c.type_ == ConditionType::GraphReady.as_str()
                && c.status != CondStatus::Unknown.as_str()
        })
}

/// What a Ray service's RayService is built for: the defaulted service,
/// its rendered route path and Serve route prefix, its accelerator class.
struct Target<'a> {
    defaulted: &'a InferenceService,
    path: &'a str,
    prefix: &'a str,
    class: Option<&'a AcceleratorClassSpec>,
}

/// The graph could not be had: the status says why (and which graph still
/// serves), a due refresh is answered by the failure, and the next look
/// waits out the backoff. A failure of the source (not of the spec) keeps
/// the last good graph: the rest of the spec is applied with it, when
/// this process has it; otherwise the RayService is left as it is.
async fn graph_failed(
    ctx: &Ctx,
    svc: &InferenceService,
    target: &Target<'_>,
    mut obs: Observation,
    refresh: Refresh<'_>,
    e: RayServiceError,
) -> Result<Action, Error> {
    // A due refresh is answered by this failure; one that is not
    // due yet waits for its turn.
    let due = refresh.due();
    let token = refresh.token.filter(|_| due);
    obs.graph = Some(GraphReport {
        fetched: true,
        applied: None,
        error: Some(format!("{}: {e}", e.reason())),
        refresh: token.clone(),
    });
    let mut failure = e;
    let mut kept = false;
    if !spec_problem(&failure) {
        match ctx
            .last_good
            .rebuild(target.defaulted, target.prefix, target.class)
        {
            Some(Ok(last)) => {
                let graph = GraphUse::LastGood {
                    reason: failure.reason(),
                    message: failure.to_string(),
                    live: live_graph(svc.status.as_ref()),
                };
                let applied =
                    apply_with(ctx, svc, target.defaulted, target.path, &last, graph).await;
                match applied {
                    Ok((outcome, _)) => {
                        obs.outcome = outcome;
                        kept = true;
                    }
                    Err(stop) => return stop.report(ctx, svc, obs).await,
                }
            }
            // The spec no longer holds the last good graph: that is what
            // to fix first.
            Some(Err(spec)) => failure = spec,
            None => {}
        }
    }
    if !kept {
        debug!(reason = failure.reason().as_str(), error = %failure, "graph not resolved; RayService left as it is");
        let stale = (!spec_problem(&failure))
            .then(|| live_graph(svc.status.as_ref()))
            .flatten();
        obs.outcome = Outcome::GraphFailed {
            reason: failure.reason(),
            message: failure.to_string(),
            stale,
        };
    }
    ctx.writer.write_status(svc, &obs).await?;
    if let Some(token) = &token {
        let then = if kept {
            "the rest of the spec is applied with the last good graph"
        } else {
            "the RayService is left as it is"
        };
        let note = format!(
            "refresh {token:?}: the fetch failed ({}): {failure}; {then}",
            failure.reason()
        );
        ctx.writer
            .publish(svc, EventType::Warning, Reason::GraphRefreshFailed, note)
            .await;
    }
    // A failed fetch waits out its backoff; a Secret or graph that
    // someone must change is looked at again on the resync; a
    // refresh not due yet, when it is.
    let wait = refresh
        .fetcher
        .retry_in(&refresh.key, refresh.url)
        .unwrap_or(ctx.config.graph_resync)
        .min(ctx.config.graph_resync)
        .min(refresh.wait.unwrap_or(Duration::MAX));
    Ok(Action::requeue(wait + jitter(svc)))
}

/// A spec whose workers cannot hold the graph (or that lacks what every
/// child needs) is the spec's problem: no graph can serve it. Anything
/// else is the source's, and the last good graph keeps serving.
fn spec_problem(e: &RayServiceError) -> bool {
    matches!(
        e,
        RayServiceError::Build(_) | RayServiceError::Graph(GraphError::Unschedulable(_))
    )
}

/// The RayService is applied: record the graph it runs and `outcome` in
/// status, announce a new graph or a refresh's answer, and look again
/// after `recheck`, the resync or when a refresh not answered yet is due.
async fn record_applied(
    ctx: &Ctx,
    svc: &InferenceService,
    resolved: &resolve::Resolved,
    refresh: Refresh<'_>,
    mut obs: Observation,
    outcome: Outcome,
    recheck: Duration,
) -> Result<Action, Error> {
    let before = svc
        .status
        .as_ref()
        .and_then(|s| s.graph.as_ref())
        .and_then(|g| g.digest.clone());
    // Any fetch answers a refresh; without one, it waits for its turn.
    let (token, refresh_wait) = if resolved.fetched {
        (refresh.token, None)
    } else {
        let wait = refresh.token.as_ref().map(|_| {
            refresh
                .fetcher
                .refresh_in(&refresh.key, refresh.url)
                .unwrap_or_default()
        });
        (None, wait)
    };
    obs.graph = Some(GraphReport {
        fetched: resolved.fetched,
        applied: Some(AppliedGraph {
            url: refresh.url.to_owned(),
            digest: resolved.digest.clone(),
            etag: resolved.etag.clone(),
        }),
        error: None,
        refresh: token.clone(),
    });
    let wait = recheck
        .min(ctx.config.graph_resync)
        .min(refresh_wait.map_or(Duration::MAX, |w| w + jitter(svc)));
    obs.outcome = outcome;
    ctx.writer.write_status(svc, &obs).await?;
    announce_graph(
        ctx,
        svc,
        token.as_deref(),
        before.as_deref(),
        &resolved.digest,
    )
    .await;
    Ok(Action::requeue(wait))
}

/// Record an apply failure in status (as far as it can be) and return it.
async fn failed(
    ctx: &Ctx,
    svc: &InferenceService,
    mut obs: Observation,
    e: Error,
) -> Result<Action, Error> {
    obs.outcome = Outcome::Failed(e.to_string());
    if let Err(se) = ctx.writer.write_status(svc, &obs).await {
        warn!(error = %se, "failed to record the apply failure in status");
    }
    Err(e)
}

/// The event of a graph applied: what a refresh found (the same graph or
/// a new one), or that the periodic fetch brought a new graph. Each
/// outcome has its own reason: events of one reason about one service
/// within minutes of each other are counted as one series, which keeps
/// the first one's note.
async fn announce_graph(
    ctx: &Ctx,
    svc: &InferenceService,
    refresh: Option<&str>,
    before: Option<&str>,
    digest: &str,
) {
    let now = format!("sha256:{}", short_digest(digest));
    let changed = before != Some(digest);
    let was = before.map_or_else(String::new, |b| {
        format!(" (was sha256:{})", short_digest(b))
    });
    let (reason, note) = match (refresh, changed) {
        (Some(token), false) => (
            Reason::GraphUnchanged,
            format!("refresh {token:?}: the graph is unchanged ({now})"),
        ),
        (Some(token), true) => (
            Reason::GraphRefreshed,
            format!("refresh {token:?}: a new graph {now} is applied{was}"),
        ),
        (None, true) => (
            Reason::GraphUpdated,
            format!("the serving graph {now} is applied{was}"),
        ),
        (None, false) => return,
    };
    ctx.writer
        .publish(svc, EventType::Normal, reason, note)
        .await;
}

/// HTTPRoute `S` to KubeRay's serve Service, once KubeRay has made it;
/// no route without a gateway.
async fn route(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    path: &str,
) -> Result<Routing, Error> {
    if builders::gateway(defaulted).is_none() {
        let name = builders::child_name(defaulted, Track::Primary);
        ctx.delete::<HTTPRoute>(svc, &name).await?;
        return Ok(Routing::NoGateway);
    }
    let gateway = gateway_display(defaulted);
    if !ctx.installed::<HTTPRoute>().await? {
        return Ok(Routing::GatewayApiMissing { gateway });
    }
    let service = rayservice::serve_service_name(defaulted);
    let api: kube::Api<Service> =
        kube::Api::namespaced(ctx.client.clone(), &svc.namespace().unwrap_or_default());
    let found = api.get_opt(&service).await?;
    let port = found.as_ref().and_then(|s| {
        s.spec
            .as_ref()?
            .ports
            .as_ref()?
            .iter()
            .find(|p| p.name.as_deref() == Some(rayservice::SERVE_PORT_NAME))
            .map(|p| p.port)
    });
    let Some(port) = port else {
        let detail = if found.is_some() {
            format!("it has no port named {:?}", rayservice::SERVE_PORT_NAME)
        } else {
            "it does not exist yet".to_owned()
        };
        return Ok(Routing::ServeServiceMissing {
            gateway,
            service,
            detail,
        });
    };
    let route = builders::ray_http_route(defaulted, &service, port)?
        .ok_or(Error::MissingMetadata("spec.routing.gateway"))?;
    match ctx.apply_and_read(svc, &route).await {
        Ok(applied) => Ok(Routing::Applied {
            gateway,
            path: path.to_owned(),
            rejection: rejection(&applied),
            pools: None,
        }),
        Err(e) if e.is_api_gone() => {
            ctx.forget::<HTTPRoute>();
            Ok(Routing::GatewayApiMissing { gateway })
        }
        Err(e) => Err(e),
    }
}

/// Give the worker group of the RayService's active and pending
/// RayClusters the replica counts infergate asks for (KubeRay copies
/// them only into a new cluster), and return `(ready, desired)` workers
/// of the first of them. A failure is logged, not fatal: the RayService
/// itself is applied, and the next reconcile tries again.
async fn scale_ray_clusters(
    ctx: &Ctx,
    applied: &rayservice::RayService,
    desired: &rayservice::RayService,
) -> Option<(i32, i32)> {
    use crate::reconcile::children::raycluster::{self, RayCluster};
    let want = raycluster::wanted_group(desired)?;
    let ns = applied.namespace()?;
    let api: kube::Api<RayCluster> = kube::Api::namespaced(ctx.client.clone(), &ns);
    let mut workers = None;
    for name in raycluster::cluster_names(applied) {
        let cluster = match api.get_opt(&name).await {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) => {
                warn!(raycluster = %name, error = %e, "cannot read the RayCluster to scale it");
                continue;
            }
        };
        if !raycluster::owned_by(&cluster, applied) {
            continue;
        }
        if let Some(patch) = raycluster::scale_patch(&cluster, want) {
            let pp = kube::api::PatchParams::default();
            match api
                .patch(&name, &pp, &kube::api::Patch::Json::<()>(patch))
                .await
            {
                Ok(_) => {
                    debug!(raycluster = %name, replicas = ?want.replicas, "scaled the worker group")
                }
                Err(e) => {
                    warn!(raycluster = %name, error = %e, "cannot scale the RayCluster's worker group");
                }
            }
        }
        if workers.is_none() {
            workers = raycluster::workers(&cluster);
        }
    }
    workers
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::answered;
    use crate::api::v1beta1::{GraphStatus, InferenceService, InferenceServiceStatus};

    fn with_status(st: Option<InferenceServiceStatus>) -> InferenceService {
        let mut svc: InferenceService = serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "chat", "namespace": "team-a"},
            "spec": {"model": {"ref": "m"}}
        }))
        .expect("service");
        svc.status = st;
        svc
    }

    fn graph_ready(status: &str) -> Condition {
        Condition {
            type_: "GraphReady".into(),
            status: status.into(),
            reason: "ConnectFailure".into(),
            message: "connection refused".into(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn a_wait_in_line_is_news_only_before_any_answer() {
        // No status yet, or an Unknown GraphReady: no answer, FetchQueued may say so.
        assert!(!answered(&with_status(None)));
        let unknown = InferenceServiceStatus {
            conditions: vec![graph_ready("Unknown")],
            ..InferenceServiceStatus::default()
        };
        assert!(!answered(&with_status(Some(unknown))));
        // A failure shown, or a fetch that ended: the status keeps its words.
        let failed = InferenceServiceStatus {
            conditions: vec![graph_ready("False")],
            ..InferenceServiceStatus::default()
        };
        assert!(answered(&with_status(Some(failed))));
        let fetched = InferenceServiceStatus {
            graph: Some(GraphStatus {
                last_fetch_at: Some(Time(Timestamp::UNIX_EPOCH)),
                ..GraphStatus::default()
            }),
            ..InferenceServiceStatus::default()
        };
        assert!(answered(&with_status(Some(fetched))));
    }
}
