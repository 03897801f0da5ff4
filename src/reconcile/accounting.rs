//! GPU budgets on the reconciler's side (leader only): the ledgers
//! corrected from the services that exist ([`correct_ledgers`]), and which
//! services, counted oldest first, no longer fit their namespace's budget
//! ([`over_budget`], for `PolicyCompliant`). Only namespaces with a budget
//! cost anything.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::api::v1beta1::InferenceService;
use crate::api::vocabulary::{CondStatus, ConditionType, Reason};
use crate::engine::capacity::budget::{Budget, Overrun, budget_of, overruns};
use crate::engine::capacity::charge::Charge;
use crate::engine::{self, Context, ServerDefaults};
use crate::state::context::Watched;
use crate::state::ledger::Ledger;
use crate::state::ledger::book::{Existing, ServicesSeen, Sightings, charge_of_service, correct};
use crate::state::{ClusterState, ServiceEvent, with_context};

/// How often the ledgers are compared with the services (an in-memory
/// comparison; a ledger is written only when it is wrong).
pub const TICK: Duration = Duration::from_secs(1);

/// A deleted service: namespace, name and uid (its charge, and not the
/// charge of a service of that name created again, is released).
pub type Deletion = (String, String, Option<String>);

/// Hand every event of `events` on (the returned receiver, for the
/// controller), and every deletion to `deletions` as well: the ledger of
/// its namespace releases the charge at once. A deletion also reconciles
/// the namespace's services marked over budget (through `marked`, which
/// the controller follows apart from the service events: their spec did
/// not change, so the service events' filter would drop them), so the room
/// it leaves clears their mark.
pub fn tap_deletions(
    tasks: &mut tokio::task::JoinSet<()>,
    state: Arc<ClusterState>,
    mut events: mpsc::Receiver<ServiceEvent>,
    deletions: mpsc::UnboundedSender<Deletion>,
    marked: futures::channel::mpsc::UnboundedSender<ObjectRef<InferenceService>>,
) -> mpsc::Receiver<ServiceEvent> {
    let (tx, rx) = mpsc::channel(crate::state::SERVICE_EVENT_BUFFER);
    tasks.spawn(async move {
        while let Some(event) = events.recv().await {
            if let ServiceEvent::Deleted(key) = &event {
                let ns = key.namespace.clone().unwrap_or_default();
                let uid = key.extra.uid.clone();
                let _ = deletions.send((ns.clone(), key.name.clone(), uid));
                for svc in state
                    .services()
                    .state()
                    .into_iter()
                    .filter(|s| s.metadata.namespace.as_deref() == Some(ns.as_str()))
                    .filter(|s| marked_over_budget(s))
                {
                    let _ = marked.unbounded_send(ObjectRef::from_obj(svc.as_ref()));
                }
            }
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// Whether `svc`'s status says it is over its namespace's budget.
fn marked_over_budget(svc: &InferenceService) -> bool {
    svc.status.as_ref().is_some_and(|st| {
        st.conditions.iter().any(|c| {
            c.type_ == ConditionType::PolicyCompliant
                && c.status == CondStatus::False
                && c.reason == Reason::OverBudget
        })
    })
}

/// Correct the ledgers until `token` (see [`ServicesSeen`] and [`correct`] for
/// the rules): every [`TICK`] all of them, and the ledger of a namespace
/// whose service was deleted at once. A namespace with a budget gets a
/// ledger holding its services' charges; one without loses its ledger.
pub async fn correct_ledgers(
    ledger: Ledger,
    state: Arc<ClusterState>,
    server: ServerDefaults,
    mut deletions: mpsc::UnboundedReceiver<Deletion>,
    token: CancellationToken,
) {
    let mut known = Known::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut deleted: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        let only = tokio::select! {
            () = token.cancelled() => return,
            _ = tick.tick() => false,
            Some(first) = deletions.recv() => {
                let mut next = Some(first);
                while let Some((ns, name, uid)) = next {
                    // No uid known: any entry of that name goes.
                    let uids = deleted.entry(ns).or_default().entry(name).or_default();
                    uids.extend(uid);
                    next = deletions.try_recv().ok();
                }
                true
            }
        };
        if !only && !any_budget(&state.policies()) && ledger.namespaces().is_empty() {
            // No policy sets a budget and no ledger is left to remove.
            continue;
        }
        let mut by_namespace: BTreeMap<String, Vec<Arc<InferenceService>>> = BTreeMap::new();
        for ns in deleted.keys() {
            by_namespace.entry(ns.clone()).or_default();
        }
        for svc in state.services().state() {
            let ns = svc.namespace().unwrap_or_default();
            if !only || deleted.contains_key(&ns) {
                by_namespace.entry(ns).or_default().push(svc);
            }
        }
        if !only {
            for ns in ledger.namespaces() {
                by_namespace.entry(ns).or_default();
            }
        }
        known.version = *state.policy_changes().borrow();
        if !only {
            let uids: std::collections::HashSet<String> = by_namespace
                .values()
                .flatten()
                .filter_map(|s| s.uid())
                .collect();
            known.charges.retain(|uid, _| uids.contains(uid));
            known
                .sightings
                .retain(|ns, _| by_namespace.contains_key(ns));
        }
        for (ns, services) in by_namespace {
            let seen = ServicesSeen {
                charges: BTreeMap::new(),
                deleted: deleted.remove(&ns).unwrap_or_default(),
            };
            let on = Watched {
                state: &state,
                server: &server,
                reconciling: None,
            };
            correct_one(&ledger, &on, &mut known, &ns, &services, seen).await;
        }
    }
}

/// The charges already worked out, by service uid, with the generation
/// and the policy version (policies, classes, namespace labels) they were
/// worked out at: a service is defaulted again only when one moved.
/// Whether any policy sets a GPU or cost budget.
fn any_budget(policies: &engine::PolicySnapshot) -> bool {
    let sets = |l: Option<&crate::api::policy::PolicyLimits>| {
        l.is_some_and(|l| {
            l.max_gpus_per_namespace.is_some() || l.max_cost_per_hour_per_namespace.is_some()
        })
    };
    policies
        .cluster
        .iter()
        .any(|p| sets(p.spec.limits.as_ref()))
        || policies
            .namespaced
            .iter()
            .any(|p| sets(p.spec.limits.as_ref()))
}

#[derive(Default)]
struct Known {
    /// The policy version now.
    version: u64,
    /// By uid: (generation, version, charge).
    charges: HashMap<String, (Option<i64>, u64, Charge)>,
    /// By namespace: when this reconciler first saw each admission's
    /// charge (its own clock, the only one any decision reads).
    sightings: HashMap<String, Sightings>,
}

impl Known {
    fn charges(
        &mut self,
        ctx: &Context<'_>,
        services: &[Arc<InferenceService>],
    ) -> Vec<(String, Existing)> {
        services
            .iter()
            .map(|svc| {
                let generation = svc.metadata.generation;
                let uid = svc.uid().unwrap_or_default();
                let charge = match self.charges.get(&uid) {
                    Some((g, v, c)) if *g == generation && *v == self.version => *c,
                    _ => {
                        let c = charge_of_service(ctx, svc);
                        self.charges.insert(uid, (generation, self.version, c));
                        c
                    }
                };
                let existing = Existing {
                    uid: svc.uid(),
                    generation,
                    charge,
                };
                (svc.name_any(), existing)
            })
            .collect()
    }
}

/// Correct the ledger of `ns` from its `services` (and what `seen` says
/// was deleted).
async fn correct_one(
    ledger: &Ledger,
    source: &Watched<'_>,
    known: &mut Known,
    ns: &str,
    services: &[Arc<InferenceService>],
    mut seen: ServicesSeen,
) {
    let charges = with_context(source, ns, |ctx| {
        let layers = engine::policy::layers(ctx);
        budget_of(&layers)
            .is_set()
            .then(|| known.charges(ctx, services))
    });
    let Some(charges) = charges else {
        if !ledger.has(ns) {
            return;
        }
        if let Err(e) = ledger.correct(ns, true, |_, _| None).await {
            debug!(namespace = %ns, error = %e, "ledger of a namespace without a budget not deleted; next time");
        }
        return;
    };
    seen.charges = charges.into_iter().collect();
    let now = Instant::now();
    let sightings = known.sightings.entry(ns.to_owned()).or_default();
    let written = ledger
        .correct(ns, false, |book, exists| {
            correct(book, &seen, sightings, now).or_else(|| (!exists).then(|| book.clone()))
        })
        .await;
    match written {
        Ok(true) => debug!(namespace = %ns, "ledger corrected"),
        Ok(false) => {}
        Err(e) => debug!(namespace = %ns, error = %e, "ledger not corrected; next time"),
    }
}

/// The charge of every service of `services` (defaulted in `ctx`).
fn charges(ctx: &Context<'_>, services: &[Arc<InferenceService>]) -> Vec<(String, Charge)> {
    services
        .iter()
        .map(|svc| (svc.name_any(), charge_of_service(ctx, svc)))
        .collect()
}

/// Why `svc` no longer fits its namespace's budget, if it does not: the
/// namespace's services are counted oldest first (creationTimestamp, then
/// name), and a service whose charge, added to every older one's, passes a
/// Deny or Warn budget is over it. `None` without a budget.
#[must_use]
pub fn over_budget(
    ctx: &Context<'_>,
    state: &ClusterState,
    svc: &InferenceService,
) -> Option<String> {
    let layers = engine::policy::layers(ctx);
    let budget = budget_of(&layers);
    if !budget.is_set() {
        return None;
    }
    let services: Vec<Arc<InferenceService>> = state
        .services()
        .state()
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(ctx.namespace))
        .collect();
    let mut counted: Vec<(String, Option<Timestamp>, Charge)> = charges(ctx, &services)
        .into_iter()
        .zip(&services)
        .map(|((name, charge), s)| {
            let created = s.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (name, created, charge)
        })
        .collect();
    let me = svc.name_any();
    if !counted.iter().any(|(n, _, _)| *n == me) {
        let created = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
        counted.push((me.clone(), created, charge_of_service(ctx, svc)));
    }
    let over = in_order(&budget, ctx.namespace, counted).remove(&me)?;
    Some(
        over.into_iter()
            .map(|o| o.message)
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// The services of `counted` (name, creation, charge) over `budget`,
/// counted oldest first, with the budgets each breaks.
#[must_use]
pub fn in_order(
    budget: &Budget<'_>,
    namespace: &str,
    mut counted: Vec<(String, Option<Timestamp>, Charge)>,
) -> BTreeMap<String, Vec<Overrun>> {
    counted.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    let mut before: Vec<(&str, Charge)> = Vec::new();
    let mut out = BTreeMap::new();
    for (name, _, charge) in &counted {
        let over = overruns(budget, namespace, &before, *charge);
        if !over.is_empty() {
            out.insert(name.clone(), over);
        }
        before.push((name, *charge));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::policy::{Enforcement, PolicyLimits};
    use crate::engine::policy::Layer;

    fn ts(s: &str) -> Option<Timestamp> {
        Some(s.parse().expect("timestamp"))
    }

    #[test]
    fn the_oldest_services_keep_their_place_in_a_lowered_budget() {
        let limits = PolicyLimits {
            max_gpus_per_namespace: Some(8),
            ..PolicyLimits::default()
        };
        let layers = [Layer {
            kind: "InferencePolicy",
            namespace: Some("team-a"),
            name: "budget",
            priority: 0,
            enforcement: Enforcement::Deny,
            defaults: None,
            limits: Some(&limits),
        }];
        let budget = budget_of(&layers);
        let gpus = |n| Charge {
            gpus: n,
            cost: None,
        };
        let over = in_order(
            &budget,
            "team-a",
            vec![
                ("new".to_owned(), ts("2026-01-03T00:00:00Z"), gpus(1)),
                ("chat".to_owned(), ts("2026-01-01T00:00:00Z"), gpus(4)),
                ("b".to_owned(), ts("2026-01-02T00:00:00Z"), gpus(4)),
                ("a".to_owned(), ts("2026-01-02T00:00:00Z"), gpus(4)),
                ("cpu".to_owned(), ts("2026-01-04T00:00:00Z"), gpus(0)),
            ],
        );
        // chat 4, then a 4 (same time, by name): 8 of 8; b and new pass it.
        assert_eq!(over.keys().collect::<Vec<_>>(), ["b", "new"]);
        assert_eq!(
            over["b"][0].message,
            "team-a uses 8 of 8 GPUs: a 4, chat 4; this service needs 4 (InferencePolicy \"team-a/budget\")"
        );
        assert_eq!(over["new"][0].enforcement, Enforcement::Deny);
    }
}
