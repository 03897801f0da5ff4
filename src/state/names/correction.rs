//! The names ledgers corrected from the services the watch holds (run by
//! the reconciler's leader, as the GPU budget ledgers are): every
//! [`TICK`] all of them, and at once when a service is deleted, so a
//! deleted service's names are free within a tick. A Gateway some service
//! holds names on gets a ledger holding them; see [`correct`] for the
//! rules.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::api::v1beta1::InferenceService;
use crate::engine::model_names::{Claim, claims};
use crate::state::cluster::ClusterState;

use super::book::{Existing, Gateway, ServicesSeen, Sightings, correct, key, names_on};
use super::store::NamesLedger;

/// How often the ledgers are compared with the services (in memory; a
/// ledger is written only when it is wrong).
pub const TICK: Duration = Duration::from_secs(1);

/// A deleted service: namespace, name and uid.
pub type Deletion = (String, String, Option<String>);

/// How long a deletion is remembered: a pass that cannot use it (the
/// ledger's watch has not yet delivered the entry it releases, or its
/// write met a conflict) leaves it to the next ones. A uid is never used
/// again, so remembering it longer releases nothing it should not.
pub const REMEMBER_DELETIONS: Duration = Duration::from_secs(60);

/// Claims already worked out, by service uid, at a generation.
#[derive(Default)]
struct Known {
    claims: HashMap<String, (Option<i64>, Arc<[Claim]>)>,
    sightings: HashMap<Gateway, Sightings>,
    /// Deleted services by data key: the uids deleted (none known: any
    /// entry of that key), when last deleted.
    deleted: HashMap<String, (BTreeSet<String>, Instant)>,
}

impl Known {
    fn claims(&mut self, svc: &InferenceService) -> Arc<[Claim]> {
        let uid = svc.uid().unwrap_or_default();
        let generation = svc.metadata.generation;
        match self.claims.get(&uid) {
            Some((g, c)) if *g == generation => Arc::clone(c),
            _ => {
                let c: Arc<[Claim]> = claims(svc).into();
                self.claims.insert(uid, (generation, Arc::clone(&c)));
                c
            }
        }
    }
}

/// Correct the names ledgers until `token`.
pub async fn correct_names(
    ledger: NamesLedger,
    state: Arc<ClusterState>,
    mut deletions: mpsc::UnboundedReceiver<Deletion>,
    token: CancellationToken,
) {
    let mut known = Known::default();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = tick.tick() => {}
            Some(first) = deletions.recv() => {
                let now = Instant::now();
                let mut next = Some(first);
                while let Some((ns, name, uid)) = next {
                    let seen = known.deleted.entry(key(&ns, &name)).or_insert((BTreeSet::new(), now));
                    seen.0.extend(uid);
                    seen.1 = now;
                    next = deletions.try_recv().ok();
                }
            }
        }
        known
            .deleted
            .retain(|_, (_, at)| at.elapsed() < REMEMBER_DELETIONS);
        let deleted: BTreeMap<String, BTreeSet<String>> = known
            .deleted
            .iter()
            .map(|(k, (uids, _))| (k.clone(), uids.clone()))
            .collect();
        correct_all(&ledger, &state, &mut known, &deleted).await;
        // A deletion of no known uid releases any entry of its key: once
        // only, or it would release the entry of a service created again.
        known.deleted.retain(|_, (uids, _)| !uids.is_empty());
    }
}

/// One pass over every Gateway a service holds names on or a ledger counts.
async fn correct_all(
    ledger: &NamesLedger,
    state: &ClusterState,
    known: &mut Known,
    deleted: &BTreeMap<String, BTreeSet<String>>,
) {
    let services = state.services();
    let mut by_gateway: BTreeMap<Gateway, BTreeMap<String, Existing>> = BTreeMap::new();
    let mut uids = std::collections::HashSet::new();
    for svc in services.state() {
        uids.extend(svc.uid());
        let held = known.claims(&svc);
        let gateways: BTreeSet<Gateway> = held
            .iter()
            .map(|c| (c.gateway_namespace.clone(), c.gateway.clone()))
            .collect();
        for gw in gateways {
            let existing = Existing {
                uid: svc.uid(),
                generation: svc.metadata.generation,
                names: names_on(&gw, &held),
            };
            let k = key(&svc.namespace().unwrap_or_default(), &svc.name_any());
            by_gateway.entry(gw).or_default().insert(k, existing);
        }
    }
    known.claims.retain(|uid, _| uids.contains(uid));
    for gw in ledger.gateways() {
        by_gateway.entry(gw).or_default();
    }
    known.sightings.retain(|gw, _| by_gateway.contains_key(gw));
    let now = Instant::now();
    for (gw, holders) in by_gateway {
        let sightings = known.sightings.entry(gw.clone()).or_default();
        let written = ledger
            .correct(&gw, |book, _exists| {
                let mut seen = ServicesSeen {
                    existing: holders,
                    deleted: BTreeMap::new(),
                };
                for k in book.entries.keys() {
                    if let Some(uids) = deleted.get(k) {
                        seen.deleted.insert(k.clone(), uids.clone());
                    }
                    if seen.existing.contains_key(k) {
                        continue;
                    }
                    let (ns, name) = super::book::holder(k);
                    if let Some(svc) = services.get(&ObjectRef::new(name).within(ns)) {
                        // Not among the holders listed above: it holds
                        // nothing here, or the watch delivered it since.
                        let existing = Existing {
                            uid: svc.uid(),
                            generation: svc.metadata.generation,
                            names: names_on(&gw, &claims(&svc)),
                        };
                        seen.existing.insert(k.clone(), existing);
                    }
                }
                correct(book, &seen, sightings, now)
            })
            .await;
        match written {
            Ok(true) => debug!(gateway = %format!("{}/{}", gw.0, gw.1), "names ledger corrected"),
            Ok(false) => {}
            Err(e) => {
                debug!(gateway = %format!("{}/{}", gw.0, gw.1), error = %e, "names ledger not corrected; next time");
            }
        }
    }
}
