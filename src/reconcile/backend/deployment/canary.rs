//! The canary track while it carries no weight: a rollout's new target
//! waiting at weight 0, or a canary going away (a rollout that ends, fails
//! or is reverted, or a manual `spec.canary` deleted). Its Deployment and
//! Service change, or are deleted, only once no HTTPRoute of the namespace
//! names it, as the API server holds the routes now (the route infergate
//! wants may not have been written, e.g. with `backendKind: InferencePool`
//! and no InferencePool CRD): no request reaches a backend that is being
//! replaced or torn down.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use kube::{ResourceExt, api::ObjectList};
use tracing::info;

use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::httproute::HTTPRoute;
use crate::reconcile::children::{Workload, names_backend};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::{Error, status_not_found};
use crate::reconcile::watch::watched::WatchedDeployment;

use super::workload::{self, Applied};

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
    wanted: Option<(Workload, Service)>,
    name: &str,
) -> Result<Option<WatchedDeployment>, Error> {
    let ns = svc.namespace().unwrap_or_default();
    let nothing_to_do = match &wanted {
        Some((w, service)) => workload::holds(ctx, svc, w)? && ctx.holds(svc, service)?,
        None => !workload::controls_any(ctx, svc, name) && !ctx.controls::<Service>(svc, name),
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
                Some((w, _)) => workload::cached(ctx, &ns, &w),
                None => None,
            });
        }
    }
    match wanted {
        Some((w, service)) => {
            let Applied::Running(d) = workload::apply(ctx, svc, &w).await? else {
                // Without the LeaderWorkerSet API the canary has nothing
                // to run on; the primary's status says so.
                return Ok(None);
            };
            ctx.apply(svc, &service).await?;
            // A canary that changed shape: the old workload goes once the
            // new one is complete (it carries no weight meanwhile).
            workload::retire_other_shape(ctx, svc, &w, &d, name).await?;
            Ok(Some(*d))
        }
        None => {
            workload::delete_all(ctx, svc, name).await?;
            ctx.delete::<Service>(svc, name).await?;
            Ok(None)
        }
    }
}
