//! One reconcile of a service, as the controller runs it: timed and
//! counted, the prelude, then the backend its spec names; and the backoff
//! of one that failed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::{Instrument, debug, info_span};

use super::prelude::{Prelude, prelude};
use crate::api::v1beta1::{Backend, InferenceService};
use crate::reconcile::context::Ctx;
use crate::reconcile::error::Error;
use crate::reconcile::graph as resolve;

pub(in crate::reconcile) async fn reconcile(
    svc: Arc<InferenceService>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    let start = Instant::now();
    let span = info_span!(
        "reconcile",
        namespace = %svc.namespace().unwrap_or_default(),
        name = %svc.name_any()
    );
    let result = reconcile_service(&svc, &ctx).instrument(span.clone()).await;
    // What it did to the children, in one event per kind of change (also
    // when it failed half-way: what was written stays written).
    ctx.writer.announce(&svc).instrument(span.clone()).await;
    let elapsed = start.elapsed();
    let label = match &result {
        Ok(_) => "success",
        Err(e) => e.metric_label(),
    };
    ctx.config.metrics.reconcile(label, elapsed);
    ctx.forget_if_gone(&svc);
    ctx.config.metrics.reconciler_remembered(ctx.remembered());
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
pub(in crate::reconcile) fn error_policy(
    svc: Arc<InferenceService>,
    error: &Error,
    ctx: Arc<Ctx>,
) -> Action {
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
    ctx.forget_if_gone(&svc);
    let secs = 5u64
        .saturating_mul(1 << n.saturating_sub(1).min(6))
        .min(300);
    Action::requeue(Duration::from_secs(secs))
}

async fn reconcile_service(svc: &InferenceService, ctx: &Ctx) -> Result<Action, Error> {
    let ns = svc.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    if svc.metadata.deletion_timestamp.is_some() {
        // Children carry owner references: the garbage collector removes them.
        if let Some(g) = ctx.graph.fetcher.get() {
            g.forget(&resolve::cache_key(svc));
        }
        ctx.forget_service(&ObjectRef::from_obj(svc));
        return Ok(Action::await_change());
    }
    let Some(Prelude {
        defaulted,
        graph_internal_allowed,
        obs,
        class,
    }) = prelude(svc, ctx, &ns).await?
    else {
        return Ok(Action::await_change());
    };
    if svc.spec.backend == Some(Backend::RayService) {
        super::rayservice::reconcile(
            svc,
            ctx,
            &defaulted,
            graph_internal_allowed,
            class.as_ref(),
            obs,
        )
        .await
    } else {
        super::deployment::reconcile_deployment(svc, ctx, &defaulted, class.as_ref(), obs).await
    }
}
