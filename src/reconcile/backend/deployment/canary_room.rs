//! A canary on its class's pool (`docs/rollouts.md`, on a full GPU pool).
//! Its new replicas are placed only where their devices are free:
//!
//! - `Wait`: a canary whose pods do not fit is not created or scaled up
//!   (no pod is left Pending), the route stays on the primary, and
//!   `CanaryReady=False` (`CanaryCapacity`) gives the numbers;
//! - `Borrow`: the primary lends the canary its replicas one at a time: it
//!   runs one replica fewer (recorded on its Deployment,
//!   [`ANNOTATION_LENT`]), and the canary's replica is made once that
//!   replica's devices are free; the primary keeps at least one replica
//!   and lends again only once every replica it runs is ready. While it
//!   lends, the route gives each track no more weight than its ready
//!   replicas carry ([`engine::full_pool::carried_weight`]). When the
//!   canary goes, the primary gets its replicas back as their devices
//!   free up.

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;

use super::full_pool::template_of;
use super::workload;
use crate::api::AcceleratorClassSpec;
use crate::api::v1beta1::InferenceService;
use crate::engine;
use crate::engine::capacity::roll_plan;
use crate::reconcile::children::{self as builders, ANNOTATION_LENT, Desired, Track};
use crate::reconcile::context::Ctx;

/// What the pool lets the canary do in this reconcile.
#[derive(Debug, Default)]
pub(super) struct CanaryRoom {
    /// `CanaryReady=False`, `CanaryCapacity`: the numbers, and what the
    /// canary does meanwhile.
    pub capacity: Option<String>,
    /// The canary's Deployment is left as it is (a new one is not made):
    /// none of its pods could be placed yet.
    pub hold: bool,
    /// Replicas the primary lends the canary: while there are some, the
    /// route's weights are carried by ready replicas.
    pub lent: i32,
    /// Come back soon: the canary waits for devices, or replicas are lent.
    pub recheck: bool,
}

/// The replicas `d` lends, as its annotation records them.
fn lent_by(d: &crate::reconcile::watch::watched::WatchedDeployment) -> i32 {
    d.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LENT))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The primary runs `lent` replicas fewer than the spec asks, and says so.
fn lend(primary: &mut Deployment, lent: i32) {
    if lent <= 0 {
        return;
    }
    if let Some(spec) = primary.spec.as_mut()
        && let Some(r) = spec.replicas.as_mut()
    {
        *r = (*r - lent).max(1);
    }
    primary
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION_LENT.to_owned(), lent.to_string());
}

/// The canary went: the replicas the primary lent it come back once it is
/// gone and their devices are free (`fits`: how many replicas fit now, when
/// the canary's workload is gone and the room is known).
fn give_back(primary: &mut Deployment, lent_before: i32, fits: Option<u64>) -> CanaryRoom {
    if lent_before == 0 {
        return CanaryRoom::default();
    }
    let back = fits.map_or(0, |f| i32::try_from(f).unwrap_or(i32::MAX).min(lent_before));
    let lent = lent_before - back;
    lend(primary, lent);
    CanaryRoom {
        lent,
        recheck: lent > 0,
        ..CanaryRoom::default()
    }
}

/// Plan the canary's new replicas on the pool of the service's class,
/// rendering the plan on `desired` (the canary's replicas, the primary's
/// lent ones). Nothing changes where the room is not known.
pub(super) fn canary_room(
    ctx: &Ctx,
    svc: &InferenceService,
    defaulted: &InferenceService,
    class: Option<&AcceleratorClassSpec>,
    desired: &mut Desired,
) -> CanaryRoom {
    let (Some(_), Some((class_name, per_replica))) = (class, engine::full_pool::pool_of(defaulted))
    else {
        return CanaryRoom::default();
    };
    let ns = svc.namespace().unwrap_or_default();
    // A replica that spans nodes is a group: its workload a LeaderWorkerSet,
    // its pods one node's devices each.
    let group = desired.group;
    let per_node = group.map_or(per_replica, |g| {
        u64::try_from(g.devices_per_pod).unwrap_or(per_replica)
    });
    let live = |name: &str| workload::live(ctx, &ns, name, group.is_some());
    let live_primary = live(&desired.primary.name_any());
    let lent_before = live_primary.as_ref().map_or(0, lent_by);
    let free = ctx.state.free_devices(class_name);
    let Some((canary, _)) = desired.canary.as_mut() else {
        let canary_gone = live(&builders::child_name(defaulted, Track::Canary)).is_none();
        let fits = free
            .as_ref()
            .filter(|_| canary_gone)
            .map(|f| f.replicas(per_replica, per_node));
        return give_back(&mut desired.primary, lent_before, fits);
    };
    let Some(free) = free else {
        // Not known: what was lent stays lent; right after a start, a new
        // canary waits for the watches to list rather than make pods the
        // pool may not hold.
        lend(&mut desired.primary, lent_before);
        let listing = ctx.state.room().listing();
        let hold = listing && live(&canary.name_any()).is_none();
        return CanaryRoom {
            hold,
            lent: lent_before,
            recheck: lent_before > 0 || listing,
            ..CanaryRoom::default()
        };
    };
    let wanted = canary.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let live_canary = live(&canary.name_any());
    // The digest of the canary's template as its workload carries it.
    let built = builders::workload(defaulted, Track::Canary, class, group, canary).ok();
    let want_digest = built.as_ref().and_then(|w| template_of(workload::meta(w)));
    // Replicas the canary's workload runs of this template already (a
    // rollout's track waits at weight 0 with none).
    let running = live_canary
        .as_ref()
        .filter(|live| template_of(&live.metadata) == want_digest)
        .map_or(0, |live| live.desired());
    let fits = i32::try_from(free.replicas(per_replica, per_node)).unwrap_or(i32::MAX);
    let manual = svc.spec.canary.is_some();
    let how = engine::full_pool::canary_mode_words(defaulted, manual);
    let numbers = |adds: i32| {
        let adds_u = u64::try_from(adds).unwrap_or(0);
        roll_plan::shortfall_spanning(class_name, &free, adds_u, (per_replica, per_node)).map(
            |short| {
                let of = if adds == 1 { "replica" } else { "replicas" };
                format!(
                    "{} for the canary's {adds} more {of}: {how}",
                    short.numbers()
                )
            },
        )
    };
    if !engine::full_pool::borrows(defaulted, manual) {
        // Wait: what was lent before (the mode changed) stays lent.
        lend(&mut desired.primary, lent_before);
        let adds = wanted - running;
        let capacity = if adds > 0 { numbers(adds) } else { None };
        let waits = capacity.is_some();
        return CanaryRoom {
            capacity,
            hold: waits,
            lent: lent_before,
            recheck: waits || lent_before > 0,
        };
    }
    // Borrow: the canary runs what fits now; the primary lends one more
    // replica when nothing fits, the canary has taken what it lent, and
    // every replica the primary runs is ready (one ready always stays).
    let target = wanted.min(running + fits);
    let asked = desired
        .primary
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let mut lent = lent_before.min(wanted);
    let primary_settled = live_primary
        .as_ref()
        .is_some_and(|p| p.desired() == asked - lent && p.ready() >= asked - lent);
    if target < wanted && fits == 0 && asked - lent > 1 && running >= lent && primary_settled {
        lent += 1;
    }
    lend(&mut desired.primary, lent);
    if let Some(spec) = canary.spec.as_mut() {
        spec.replicas = Some(target);
    }
    let hold = target == 0 && live_canary.is_none();
    CanaryRoom {
        capacity: if target < wanted {
            numbers(wanted - target)
        } else {
            None
        },
        hold,
        lent,
        recheck: target < wanted || lent > 0,
    }
}
