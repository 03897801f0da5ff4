//! The InferencePools of a service's tracks (`backendKind: InferencePool`)
//! and their endpoint pickers (`endpointPicker.mode: Owned`).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::reconcile::children::endpoint_picker;
use crate::reconcile::children::inferencepool::{self, InferencePool};
use crate::reconcile::children::{self as builders, Track};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::status::PoolReport;

/// The InferencePool of each track and, with `endpointPicker.mode:
/// Owned`, its endpoint picker (removed with `mode: None`); what gateways
/// report about the pools. `None` when the InferencePool CRD is not served.
pub(super) async fn apply_pools(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
) -> Result<Option<PoolReport>, Error> {
    if !ctx.installed::<InferencePool>().await? {
        return Ok(None);
    }
    let mut report = PoolReport::default();
    let mut tracks = vec![Track::Primary];
    if defaulted.spec.canary.is_some() {
        tracks.push(Track::Canary);
    }
    for track in tracks {
        let pool = inferencepool::inference_pool(defaulted, track)?;
        let name = builders::child_name(defaulted, track);
        // The picker first: the pool names its Service.
        if engine::names::owns_endpoint_pickers(defaulted) {
            apply_endpoint_picker(ctx, svc, defaulted, track).await?;
        } else {
            delete_endpoint_picker(ctx, svc, &name).await?;
        }
        match ctx.apply_and_read(svc, &pool).await {
            Ok(applied) => {
                let (reported, complaints) = inferencepool::parent_report(&applied);
                report.reported |= reported;
                report.complaints.extend(complaints);
                report.names.push(name);
            }
            Err(e) if e.is_api_gone() => {
                // The CRD went away between discovery and apply.
                ctx.forget::<InferencePool>();
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(report))
}

/// The endpoint picker of `track`'s pool: identity and rights first,
/// then its configuration, Deployment and Service.
async fn apply_endpoint_picker(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    track: Track,
) -> Result<(), Error> {
    let epp = endpoint_picker::endpoint_picker(defaulted, track)?;
    ctx.apply(svc, &epp.service_account).await?;
    ctx.apply(svc, &epp.role).await?;
    ctx.apply(svc, &epp.role_binding).await?;
    ctx.apply(svc, &epp.config_map).await?;
    ctx.apply(svc, &epp.deployment).await?;
    ctx.apply(svc, &epp.service).await?;
    Ok(())
}

/// Remove the endpoint picker of the pool `pool`, if there is one.
pub(super) async fn delete_endpoint_picker(
    ctx: &Ctx,
    svc: &InferenceService,
    pool: &str,
) -> Result<(), Error> {
    let name = engine::names::epp_name(pool);
    ctx.delete::<Service>(svc, &name).await?;
    ctx.delete::<Deployment>(svc, &name).await?;
    ctx.delete::<ConfigMap>(svc, &name).await?;
    ctx.delete::<RoleBinding>(svc, &name).await?;
    ctx.delete::<Role>(svc, &name).await?;
    ctx.delete::<ServiceAccount>(svc, &name).await?;
    Ok(())
}
