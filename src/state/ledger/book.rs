//! The ledger of one namespace as data: what each service is charged,
//! read from and written to the data of the ledger's ConfigMap, and the
//! corrections the reconciler makes from the services that exist. Pure:
//! no I/O; the reconciler's own clock is passed in.
//!
//! One data key per service; its value is a small JSON object:
//! `{"gpus":8,"cost":"32.80","uid":"…","gen":3,"seq":"4711"}` (`cost`
//! left out when the service's class has no price; `uid`: the service the
//! charge is for; `gen` and `seq` present while the charge is an
//! admission's: the `metadata.generation` the admitted write stores, and
//! the write's name, the ledger's resourceVersion it was judged on, `"0"`
//! when it created the ledger).
//!
//! No entry carries a time. An admission's charge is in flight until the
//! reconciler sees its service (that uid) at that generation or a later
//! one, or, for a write never stored, until [`IN_FLIGHT`] after the
//! reconciler first saw the charge ([`Sightings`]) by its own monotonic
//! clock: webhook replicas whose clocks differ change nothing. A deletion releases exactly the
//! charge of the service deleted (by uid), never one recorded for a
//! service of the same name created again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::api::v1beta1::InferenceService;
use crate::engine::Context;
use crate::engine::capacity::charge::{Charge, charge_of, decimal, money};

/// How long after the reconciler first sees an admission's charge it
/// counts as in flight: the reconciler keeps at least it (an UPDATE not
/// yet stored) and does not drop it when its service is not there yet (a
/// CREATE not yet stored).
pub const IN_FLIGHT: Duration = Duration::from_secs(10);

/// One service's recorded charge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The charge.
    pub charge: Charge,
    /// The uid of the service charged, when known.
    pub uid: Option<String>,
    /// The generation the admitted write stores (an admission's only).
    pub generation: Option<i64>,
    /// The admission write that recorded the charge, while it is one
    /// (`None`: set by the reconciler from the service it saw).
    pub seq: Option<String>,
}

impl Entry {
    /// A charge the reconciler took from the service `uid` it saw.
    #[must_use]
    pub fn settled(charge: Charge, uid: Option<&str>) -> Self {
        Self {
            charge,
            uid: uid.map(str::to_owned),
            generation: None,
            seq: None,
        }
    }

    /// A charge an admission records for the service `uid` at
    /// `generation`, in the write `seq`.
    #[must_use]
    pub fn admitted(charge: Charge, uid: Option<&str>, generation: Option<i64>, seq: &str) -> Self {
        Self {
            charge,
            uid: uid.map(str::to_owned),
            generation,
            seq: Some(seq.to_owned()),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Wire {
    gpus: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cost: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    #[serde(default, rename = "gen", skip_serializing_if = "Option::is_none")]
    generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seq: Option<String>,
}

/// Every service's recorded charge in one namespace, by service name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Book {
    /// The entries.
    pub entries: BTreeMap<String, Entry>,
}

impl Book {
    /// The book a ConfigMap's data holds; a value that does not parse is
    /// left out (the reconciler writes it again from its service). Fields
    /// it does not know (an `at` of an older ledger) are ignored.
    #[must_use]
    pub fn parse(data: Option<&BTreeMap<String, String>>) -> Self {
        let entries = data
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| {
                let wire: Wire = serde_json::from_str(value).ok()?;
                let cost = match wire.cost.as_deref() {
                    Some(c) => Some(decimal(c)?),
                    None => None,
                };
                let charge = Charge {
                    gpus: wire.gpus,
                    cost,
                };
                let entry = Entry {
                    charge,
                    uid: wire.uid,
                    generation: wire.generation,
                    seq: wire.seq,
                };
                Some((name.clone(), entry))
            })
            .collect();
        Self { entries }
    }

    /// The ConfigMap data of this book.
    #[must_use]
    pub fn to_data(&self) -> BTreeMap<String, String> {
        self.entries
            .iter()
            .map(|(name, e)| {
                let wire = Wire {
                    gpus: e.charge.gpus,
                    cost: e.charge.cost.map(money),
                    uid: e.uid.clone(),
                    generation: e.generation,
                    seq: e.seq.clone(),
                };
                let value = serde_json::to_string(&wire).unwrap_or_default();
                (name.clone(), value)
            })
            .collect()
    }

    /// The book of the services that exist, `(name, uid, charge)`: what a
    /// namespace's first ledger holds (a charge of nothing is left out).
    #[must_use]
    pub fn of_services<'a>(
        services: impl IntoIterator<Item = (String, Option<&'a str>, Charge)>,
    ) -> Self {
        let entries = services
            .into_iter()
            .filter(|(_, _, charge)| !is_nothing(*charge))
            .map(|(name, uid, charge)| (name, Entry::settled(charge, uid)))
            .collect();
        Self { entries }
    }

    /// The charges of every service but `name`.
    #[must_use]
    pub fn others(&self, name: &str) -> Vec<(&str, Charge)> {
        self.entries
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .map(|(n, e)| (n.as_str(), e.charge))
            .collect()
    }

    /// The GPUs recorded in all.
    #[must_use]
    pub fn gpus(&self) -> i64 {
        self.entries.values().map(|e| e.charge.gpus).sum()
    }

    /// This book with `name`'s entry `entry`.
    #[must_use]
    pub fn with(&self, name: &str, entry: Entry) -> Self {
        let mut next = self.clone();
        next.entries.insert(name.to_owned(), entry);
        next
    }
}

/// The charge of a stored service, defaulted in `ctx` as admission does.
#[must_use]
pub fn charge_of_service(ctx: &Context<'_>, svc: &InferenceService) -> Charge {
    let defaulted = crate::engine::default_service(svc, ctx).object;
    charge_of(&defaulted.spec, ctx.classes)
}

/// The book of `services` (those of `ctx`'s namespace that exist): what a
/// namespace's first ledger holds, before any charge is judged on it.
#[must_use]
pub fn seed(ctx: &Context<'_>, services: &[Arc<InferenceService>]) -> Book {
    Book::of_services(services.iter().map(|svc| {
        let charge = charge_of_service(ctx, svc);
        (svc.name_any(), svc.metadata.uid.as_deref(), charge)
    }))
}

/// Whether `recorded` is at least `wanted` in GPUs and in cost.
#[must_use]
pub fn covers(recorded: Charge, wanted: Charge) -> bool {
    let cost = |c: Charge| c.cost.unwrap_or(Decimal::ZERO);
    recorded.gpus >= wanted.gpus && cost(recorded) >= cost(wanted)
}

/// Whether a charge holds nothing.
#[must_use]
pub fn is_nothing(charge: Charge) -> bool {
    charge.gpus <= 0 && charge.cost.is_none_or(|c| c <= Decimal::ZERO)
}

/// The larger of two charges, in GPUs and in cost.
#[must_use]
pub fn larger(a: Charge, b: Charge) -> Charge {
    Charge {
        gpus: a.gpus.max(b.gpus),
        cost: match (a.cost, b.cost) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        },
    }
}

/// A service that exists, as the reconciler sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Existing {
    /// Its uid.
    pub uid: Option<String>,
    /// Its `metadata.generation`.
    pub generation: Option<i64>,
    /// Its current charge.
    pub charge: Charge,
}

/// What the reconciler sees of a namespace's services.
#[derive(Clone, Debug, Default)]
pub struct ServicesSeen {
    /// Every service that exists, by name.
    pub charges: BTreeMap<String, Existing>,
    /// Services deleted: the uids deleted, by name.
    pub deleted: BTreeMap<String, BTreeSet<String>>,
}

/// When the reconciler first saw each admission's charge in one
/// namespace's ledger, by its own clock: the only clock any decision
/// about a charge reads.
#[derive(Clone, Debug, Default)]
pub struct Sightings {
    first: HashMap<(String, String), Instant>,
}

impl Sightings {
    /// Whether the entry of `key` written by the admission `seq` (none:
    /// not an admission's) was first seen less than [`IN_FLIGHT`] before
    /// `now` (first seen now when new). Shared by every ledger whose
    /// entries admissions write (the budget's, the names').
    pub fn in_flight(&mut self, key: &str, seq: Option<&str>, now: Instant) -> bool {
        let Some(seq) = seq else {
            return false;
        };
        let first = *self
            .first
            .entry((key.to_owned(), seq.to_owned()))
            .or_insert(now);
        now.saturating_duration_since(first) < IN_FLIGHT
    }

    /// Forget the writes a book no longer holds (`holds(key, seq)`).
    pub fn keep_only(&mut self, holds: impl Fn(&str, &str) -> bool) {
        self.first.retain(|(key, seq), _| holds(key, seq));
    }
}

/// The book corrected from the services that exist, at `now` on the
/// reconciler's clock; `None` when nothing changes. An entry whose service
/// exists takes the service's charge (at least the recorded one while the
/// admission that wrote it is in flight: its service not yet seen at its
/// generation, and first seen less than [`IN_FLIGHT`] ago, see
/// [`Sightings`]); an entry whose
/// service was deleted goes at once unless it is a charge for another
/// service of that name (created again: a different uid); an entry whose
/// service never appeared goes once no longer in flight; a service
/// charged but not recorded is added.
#[must_use]
pub fn correct(
    book: &Book,
    seen: &ServicesSeen,
    sightings: &mut Sightings,
    now: Instant,
) -> Option<Book> {
    let mut next = Book::default();
    for (name, entry) in &book.entries {
        let current = seen.charges.get(name);
        let stored = current.is_some_and(|c| {
            c.uid.is_some()
                && c.uid == entry.uid
                && c.generation
                    .zip(entry.generation)
                    .is_some_and(|(s, e)| s >= e)
        });
        // Asked even when stored: a write seen once is never new again.
        let fresh = sightings.in_flight(name, entry.seq.as_deref(), now) && !stored;
        match current {
            Some(current) => {
                let kept = if fresh {
                    Entry {
                        charge: larger(entry.charge, current.charge),
                        ..entry.clone()
                    }
                } else if entry.charge == current.charge && entry.uid == current.uid {
                    entry.clone()
                } else {
                    Entry::settled(current.charge, current.uid.as_deref())
                };
                if !is_nothing(kept.charge) {
                    next.entries.insert(name.clone(), kept);
                }
            }
            None => {
                // An entry of no known uid goes with any deletion of its name.
                let deleted = seen
                    .deleted
                    .get(name)
                    .is_some_and(|uids| entry.uid.as_ref().is_none_or(|uid| uids.contains(uid)));
                if fresh && !deleted {
                    next.entries.insert(name.clone(), entry.clone());
                }
            }
        }
    }
    for (name, current) in &seen.charges {
        if !next.entries.contains_key(name) && !is_nothing(current.charge) {
            next.entries.insert(
                name.clone(),
                Entry::settled(current.charge, current.uid.as_deref()),
            );
        }
    }
    sightings.keep_only(|name, seq| {
        next.entries
            .get(name)
            .is_some_and(|e| e.seq.as_deref() == Some(seq))
    });
    (next != *book).then_some(next)
}
