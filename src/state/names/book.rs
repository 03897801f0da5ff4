//! The names ledger of one Gateway as data: which (hostname, served name)
//! each service routed by name holds there, read from and written to the
//! data of the ledger's ConfigMap, the judgement of a service's claims on
//! it, and the corrections the reconciler makes from the services that
//! exist. Pure: no I/O; the reconciler's own clock is passed in.
//!
//! One data key per holding service, `<namespace>.<name>` (neither holds a
//! dot: both are DNS labels); its value is a small JSON object:
//! `{"names":[{"n":"llama-3-70b","h":"api.example.com"}],"uid":"…","gen":3,"seq":"4711"}`
//! (`h` left out for every hostname; `gen` and `seq` present while the
//! entry is an admission's, as in the GPU budget ledger: the generation
//! the admitted write stores and the write's name, the resourceVersion it
//! was judged on).
//!
//! As in the budget ledger no entry carries a time: an admission's entry
//! is in flight until the reconciler sees its service (that uid) at that
//! generation or a later one, or, for a write never stored, until
//! [`IN_FLIGHT`] after the reconciler first saw it ([`Sightings`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::api::v1beta1::InferenceService;
use crate::engine::FieldError;
use crate::engine::model_names::{Claim, claims, clash, clash_error};

/// How long after the reconciler first sees an admission's entry it counts
/// as in flight (the budget ledger's rule and time).
pub const IN_FLIGHT: Duration = crate::state::ledger::book::IN_FLIGHT;

/// A Gateway: (namespace, name).
pub type Gateway = (String, String);

/// One name held: the served name and the hostname (`None`: every one).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Held {
    /// The served name.
    #[serde(rename = "n")]
    pub name: String,
    /// The hostname; `None`: every hostname.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

impl Held {
    /// What `claim` holds.
    #[must_use]
    pub fn of(claim: &Claim) -> Self {
        Self {
            name: claim.name.clone(),
            hostname: claim.hostname.clone(),
        }
    }
}

/// What one service holds on the Gateway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// The names held.
    pub names: BTreeSet<Held>,
    /// The service's uid, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The generation the admitted write stores (an admission's only).
    #[serde(default, rename = "gen", skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The admission write that recorded it, while it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<String>,
}

impl Holding {
    /// Names the reconciler took from the service `uid` it saw.
    #[must_use]
    pub fn settled(names: BTreeSet<Held>, uid: Option<&str>) -> Self {
        Self {
            names,
            uid: uid.map(str::to_owned),
            generation: None,
            seq: None,
        }
    }

    /// Names an admission records for the service `uid` at `generation`,
    /// in the write `seq`.
    #[must_use]
    pub fn admitted(
        names: BTreeSet<Held>,
        uid: Option<&str>,
        generation: Option<i64>,
        seq: &str,
    ) -> Self {
        Self {
            names,
            uid: uid.map(str::to_owned),
            generation,
            seq: Some(seq.to_owned()),
        }
    }

    /// The claims these names are on `gateway` (with no field).
    fn claims(&self, gateway: &Gateway) -> Vec<Claim> {
        self.names
            .iter()
            .map(|h| Claim {
                gateway_namespace: gateway.0.clone(),
                gateway: gateway.1.clone(),
                hostname: h.hostname.clone(),
                name: h.name.clone(),
                field: String::new(),
            })
            .collect()
    }
}

/// The data key of the service `namespace/name`.
#[must_use]
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}.{name}")
}

/// The service a data key names: (namespace, name).
#[must_use]
pub fn holder(key: &str) -> (&str, &str) {
    key.split_once('.').unwrap_or(("", key))
}

/// What each service holds on one Gateway, by data key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameBook {
    /// The entries.
    pub entries: BTreeMap<String, Holding>,
}

impl NameBook {
    /// The book a ConfigMap's data holds; a value that does not parse is
    /// left out (the reconciler writes it again from its service).
    #[must_use]
    pub fn parse(data: Option<&BTreeMap<String, String>>) -> Self {
        let entries = data
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), serde_json::from_str(v).ok()?)))
            .collect();
        Self { entries }
    }

    /// The ConfigMap data of this book.
    #[must_use]
    pub fn to_data(&self) -> BTreeMap<String, String> {
        self.entries
            .iter()
            .map(|(k, h)| (k.clone(), serde_json::to_string(h).unwrap_or_default()))
            .collect()
    }

    /// The book of `services` (those that exist): what each holds on
    /// `gateway`, as a Gateway's first ledger holds it.
    #[must_use]
    pub fn of_services<'a>(
        gateway: &Gateway,
        services: impl IntoIterator<Item = &'a InferenceService>,
    ) -> Self {
        let mut book = Self::default();
        for svc in services {
            let names = names_on(gateway, &claims(svc));
            if names.is_empty() {
                continue;
            }
            let (ns, name) = (
                svc.metadata.namespace.as_deref().unwrap_or_default(),
                svc.metadata.name.as_deref().unwrap_or_default(),
            );
            let holding = Holding::settled(names, svc.metadata.uid.as_deref());
            book.entries.insert(key(ns, name), holding);
        }
        book
    }

    /// This book with `key`'s entry `holding`.
    #[must_use]
    pub fn with(&self, key: &str, holding: Holding) -> Self {
        let mut next = self.clone();
        next.entries.insert(key.to_owned(), holding);
        next
    }

    /// The denial of `mine` (the claims of the service `me`, in
    /// `requester_namespace`, all on `gateway`) on this book: the first of
    /// its claims, in field order, that another holder's name meets.
    #[must_use]
    pub fn judge(
        &self,
        gateway: &Gateway,
        me: &str,
        mine: &[Claim],
        requester_namespace: &str,
    ) -> Option<FieldError> {
        let theirs: Vec<(&str, Vec<Claim>)> = self
            .entries
            .iter()
            .filter(|(k, _)| k.as_str() != me)
            .map(|(k, h)| (k.as_str(), h.claims(gateway)))
            .collect();
        mine.iter().find_map(|m| {
            theirs.iter().find_map(|(k, t)| {
                clash(std::slice::from_ref(m), t)
                    .map(|(m, _)| clash_error(m, holder(k), requester_namespace))
            })
        })
    }
}

/// The names of `claims` that are on `gateway`.
#[must_use]
pub fn names_on(gateway: &Gateway, claims: &[Claim]) -> BTreeSet<Held> {
    claims
        .iter()
        .filter(|c| c.gateway_namespace == gateway.0 && c.gateway == gateway.1)
        .map(Held::of)
        .collect()
}

/// A service that exists, as the reconciler sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Existing {
    /// Its uid.
    pub uid: Option<String>,
    /// Its `metadata.generation`.
    pub generation: Option<i64>,
    /// What it holds on the Gateway now (maybe nothing).
    pub names: BTreeSet<Held>,
}

/// What the reconciler sees of the services of one Gateway's book.
#[derive(Clone, Debug, Default)]
pub struct ServicesSeen {
    /// Every service that holds a name on the Gateway, and every service
    /// the book has an entry for that exists, by data key.
    pub existing: BTreeMap<String, Existing>,
    /// Services deleted: the uids deleted, by data key.
    pub deleted: BTreeMap<String, BTreeSet<String>>,
}

/// When the reconciler first saw each admission's entry, as the budget
/// ledger keeps it.
pub use crate::state::ledger::book::Sightings;

/// The book corrected from the services that exist, at `now` on the
/// reconciler's clock; `None` when nothing changes. The budget ledger's
/// rules ([`crate::state::ledger::book::correct`]) with names for
/// charges: an entry whose service exists takes the service's names (all
/// it recorded as well while the admission that wrote it is in flight);
/// an entry whose service was deleted goes at once unless it is for
/// another service of that name (a different uid); an entry whose service
/// never appeared goes once no longer in flight; a service holding names
/// but not recorded is added.
#[must_use]
pub fn correct(
    book: &NameBook,
    seen: &ServicesSeen,
    sightings: &mut Sightings,
    now: Instant,
) -> Option<NameBook> {
    let mut next = NameBook::default();
    for (k, entry) in &book.entries {
        let current = seen.existing.get(k);
        let stored = current.is_some_and(|c| {
            c.uid.is_some()
                && c.uid == entry.uid
                && c.generation
                    .zip(entry.generation)
                    .is_some_and(|(s, e)| s >= e)
        });
        // Asked even when stored: a write seen once is never new again.
        let fresh = sightings.in_flight(k, entry.seq.as_deref(), now) && !stored;
        match current {
            Some(current) => {
                let kept = if fresh {
                    let mut names = entry.names.clone();
                    names.extend(current.names.iter().cloned());
                    Holding {
                        names,
                        ..entry.clone()
                    }
                } else if entry.names == current.names && entry.uid == current.uid {
                    entry.clone()
                } else {
                    Holding::settled(current.names.clone(), current.uid.as_deref())
                };
                if !kept.names.is_empty() {
                    next.entries.insert(k.clone(), kept);
                }
            }
            None => {
                let deleted = seen
                    .deleted
                    .get(k)
                    .is_some_and(|uids| entry.uid.as_ref().is_none_or(|uid| uids.contains(uid)));
                if fresh && !deleted {
                    next.entries.insert(k.clone(), entry.clone());
                }
            }
        }
    }
    for (k, current) in &seen.existing {
        if !next.entries.contains_key(k) && !current.names.is_empty() {
            next.entries.insert(
                k.clone(),
                Holding::settled(current.names.clone(), current.uid.as_deref()),
            );
        }
    }
    sightings.keep_only(|k, seq| {
        next.entries
            .get(k)
            .is_some_and(|h| h.seq.as_deref() == Some(seq))
    });
    (next != *book).then_some(next)
}
