//! The canary track while it carries no weight: a rollout's new target
//! waiting at weight 0, or a canary going away (a rollout that ends, fails
//! or is reverted, or a manual `spec.canary` deleted). Its Deployment and
//! Service change, or are deleted, only once no HTTPRoute of the namespace
//! names it, as the API server holds the routes now (the route infergate
//! wants may not have been written, e.g. with `backendKind: InferencePool`
//! and no InferencePool CRD): no request reaches a backend that is being
//! replaced or torn down.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use kube::{ResourceExt, api::ObjectList};
use tracing::info;

use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::httproute::HTTPRoute;
use crate::reconcile::children::names_backend;
use crate::reconcile::context::Ctx;
use crate::reconcile::error::{Error, status_not_found};
use crate::reconcile::watch::watched::WatchedDeployment;

/// The routes of the service's namespace that name the backend `name`, as
/// the API server holds them (a quorum read; none without the HTTPRoute
/// CRD).
async fn routes_naming(ctx: &Ctx, ns: &str, name: &str) -> Result<Vec<String>, Error> {
    let api: Api<HTTPRoute> = Api::namespaced(ctx.client.clone(), ns);
    let routes: ObjectList<HTTPRoute> = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(s)) if status_not_found(&s) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    Ok(routes
        .items
        .iter()
        .filter(|r| names_backend(r, ns, name))
        .map(ResourceExt::name_any)
        .collect())
}

/// Apply (`wanted`) or delete (`None`) the canary `name`'s Deployment and
/// Service, once the route no longer names it; while a route still does,
/// both stay as they are. Called after the route was written. The
/// canary's Deployment as its watch keeps it afterwards.
pub(super) async fn settle(
    ctx: &Ctx,
    svc: &InferenceService,
    wanted: Option<(Deployment, Service)>,
    name: &str,
) -> Result<Option<WatchedDeployment>, Error> {
    let ns = svc.namespace().unwrap_or_default();
    let nothing_to_do = match &wanted {
        Some((deployment, service)) => ctx.holds(svc, deployment)? && ctx.holds(svc, service)?,
        None => !ctx.controls::<Deployment>(svc, name) && !ctx.controls::<Service>(svc, name),
    };
    if !nothing_to_do {
        let naming = routes_naming(ctx, &ns, name).await?;
        if !naming.is_empty() {
            info!(
                canary = name,
                routes = ?naming,
                "the canary stays as it is while a route names it"
            );
            return Ok(match wanted {
                Some(_) => ctx.cached::<Deployment>(&ns, name).map(|d| (*d).clone()),
                None => None,
            });
        }
    }
    match wanted {
        Some((deployment, service)) => {
            let d = ctx.apply_and_read(svc, &deployment).await?;
            ctx.apply(svc, &service).await?;
            Ok(Some(d))
        }
        None => {
            ctx.delete::<Deployment>(svc, name).await?;
            ctx.delete::<Service>(svc, name).await?;
            Ok(None)
        }
    }
}
