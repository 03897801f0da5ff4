//! What runs a track: its Deployment `S` (`S-canary`), or, when a replica
//! spans nodes, its LeaderWorkerSet `S-lws` (`S-canary-lws`), read and
//! written through one door so the rest of the backend does not care
//! which.
//!
//! A change of shape (one node per replica to several, or back) is done
//! route first: the workload of the new shape is applied beside the old
//! one, the track's Service selects the serving pods of both (the
//! Deployment's pods and the groups' leaders; workers carry no track
//! label), and the old workload goes only once the new one is complete.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tracing::info;

use crate::api::v1beta1::InferenceService;
use crate::reconcile::children::lws::LeaderWorkerSet;
use crate::reconcile::children::{ANNOTATION_ROLL_PLAN, ANNOTATION_TEMPLATE, Workload};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::watch::watched::WatchedDeployment;

/// What became of a track's workload.
pub(super) enum Applied {
    /// Applied (or already as wanted): its counts as its watch keeps them.
    Running(Box<WatchedDeployment>),
    /// A replica spans nodes and the cluster serves no LeaderWorkerSet API:
    /// nothing was applied.
    ApiMissing,
}

/// The workload's metadata (its name, and the template digest infergate
/// records).
pub(super) fn meta(w: &Workload) -> &ObjectMeta {
    match w {
        Workload::Deployment(d) => &d.metadata,
        Workload::Group(l) => &l.metadata,
    }
}

/// The workload's name.
fn name_of(w: &Workload) -> String {
    meta(w).name.clone().unwrap_or_default()
}

/// Apply `w`.
pub(super) async fn apply(
    ctx: &Ctx,
    svc: &InferenceService,
    w: &Workload,
) -> Result<Applied, Error> {
    match w {
        Workload::Deployment(d) => Ok(Applied::Running(Box::new(
            ctx.apply_and_read(svc, d.as_ref()).await?,
        ))),
        Workload::Group(l) => {
            if !ctx.installed::<LeaderWorkerSet>().await? {
                return Ok(Applied::ApiMissing);
            }
            match ctx.apply_and_read(svc, l.as_ref()).await {
                Ok(read) => Ok(Applied::Running(Box::new(read.0))),
                Err(e) if e.is_api_gone() => {
                    // The CRD went away between discovery and apply.
                    ctx.forget::<LeaderWorkerSet>();
                    Ok(Applied::ApiMissing)
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// Whether infergate's field manager holds all of `w` as wanted (no write
/// would change it).
pub(super) fn holds(ctx: &Ctx, svc: &InferenceService, w: &Workload) -> Result<bool, Error> {
    match w {
        Workload::Deployment(d) => ctx.holds(svc, d.as_ref()),
        Workload::Group(l) => ctx.holds(svc, l.as_ref()),
    }
}

/// `w`'s live counterpart as its watch keeps it.
pub(super) fn cached(ctx: &Ctx, ns: &str, w: &Workload) -> Option<WatchedDeployment> {
    let name = name_of(w);
    match w {
        Workload::Deployment(_) => ctx.cached::<Deployment>(ns, &name).map(|d| (*d).clone()),
        Workload::Group(_) => ctx
            .cached::<LeaderWorkerSet>(ns, &name)
            .map(|l| l.0.clone()),
    }
}

/// The live workload of the track whose Deployment is named `track_name`
/// as its watch keeps it: the LeaderWorkerSet when its replicas are
/// `groups`, else the Deployment.
pub(super) fn live(
    ctx: &Ctx,
    ns: &str,
    track_name: &str,
    groups: bool,
) -> Option<WatchedDeployment> {
    if groups {
        ctx.cached::<LeaderWorkerSet>(ns, &crate::engine::names::lws_name(track_name))
            .map(|l| l.0.clone())
    } else {
        ctx.cached::<Deployment>(ns, track_name)
            .map(|d| (*d).clone())
    }
}

/// Whether the service controls a workload of either shape for the track
/// whose Deployment is named `track_name`.
pub(super) fn controls_any(ctx: &Ctx, svc: &InferenceService, track_name: &str) -> bool {
    ctx.controls::<Deployment>(svc, track_name)
        || ctx.controls::<LeaderWorkerSet>(svc, &crate::engine::names::lws_name(track_name))
}

/// Delete the track's workloads of both shapes (the track goes).
pub(super) async fn delete_all(
    ctx: &Ctx,
    svc: &InferenceService,
    track_name: &str,
) -> Result<(), Error> {
    ctx.delete::<Deployment>(svc, track_name).await?;
    ctx.delete::<LeaderWorkerSet>(svc, &crate::engine::names::lws_name(track_name))
        .await
}

/// Once the workload of the wanted shape `w` is complete (`live`), the
/// track's workload of the other shape goes; until then both run and the
/// track's Service selects the serving pods of both.
pub(super) async fn retire_other_shape(
    ctx: &Ctx,
    svc: &InferenceService,
    w: &Workload,
    live: &WatchedDeployment,
    track_name: &str,
) -> Result<(), Error> {
    let lws = crate::engine::names::lws_name(track_name);
    let other_runs = match w {
        Workload::Deployment(_) => ctx.controls::<LeaderWorkerSet>(svc, &lws),
        Workload::Group(_) => ctx.controls::<Deployment>(svc, track_name),
    };
    if !other_runs {
        return Ok(());
    }
    if !live.complete() {
        info!(
            track = track_name,
            "the workload of the service's new shape is not complete yet: the old one keeps serving"
        );
        return Ok(());
    }
    match w {
        Workload::Deployment(_) => ctx.delete::<LeaderWorkerSet>(svc, &lws).await,
        Workload::Group(_) => ctx.delete::<Deployment>(svc, track_name).await,
    }
}

/// `w` (a group) with the template, template digest, rollout and plan of
/// its live LeaderWorkerSet (a read, made only while a change waits for
/// room): replicas and everything outside the template are still applied.
pub(super) async fn keep_live_template(ctx: &Ctx, ns: &str, w: &mut Workload) -> Result<(), Error> {
    let Workload::Group(lws) = w else {
        return Ok(());
    };
    let name = lws.metadata.name.clone().unwrap_or_default();
    let api: kube::Api<LeaderWorkerSet> = kube::Api::namespaced(ctx.client.clone(), ns);
    let Some(live) = api.get_opt(&name).await? else {
        return Ok(());
    };
    let annotations = lws
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.remove(ANNOTATION_ROLL_PLAN);
    for key in [ANNOTATION_TEMPLATE, ANNOTATION_ROLL_PLAN] {
        if let Some(v) = live.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
            annotations.insert(key.to_owned(), v.clone());
        }
    }
    lws.spec.leader_worker_template = live.spec.leader_worker_template;
    if annotations.contains_key(ANNOTATION_ROLL_PLAN) {
        lws.spec.rollout_strategy = live.spec.rollout_strategy;
    }
    Ok(())
}
