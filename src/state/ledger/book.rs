//! The ledger of one namespace as data: what each service is charged,
//! read from and written to the data of the ledger's ConfigMap, and the
//! corrections the reconciler makes from the services that exist. Pure:
//! no I/O, times passed in.
//!
//! One data key per service; its value is a small JSON object:
//! `{"gpus":8,"cost":"32.80","at":"2026-01-02T03:04:05Z"}` (`cost` left out
//! when the service's class has no price; `at`: when the charge was
//! recorded at admission, or by the reconciler).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::engine::capacity::charge::{Charge, decimal, money};

/// A charge recorded this recently is an admission in flight: the
/// reconciler keeps at least it (an UPDATE not yet stored) and does not
/// drop it when its service is not there yet (a CREATE not yet stored).
pub const IN_FLIGHT: SignedDuration = SignedDuration::from_secs(10);

/// One service's recorded charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The charge.
    pub charge: Charge,
    /// When it was recorded.
    pub at: Timestamp,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    gpus: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cost: Option<String>,
    at: String,
}

/// Every service's recorded charge in one namespace, by service name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Book {
    /// The entries.
    pub entries: BTreeMap<String, Entry>,
}

impl Book {
    /// The book a ConfigMap's data holds; a value that does not parse is
    /// left out (the reconciler writes it again from its service).
    #[must_use]
    pub fn parse(data: Option<&BTreeMap<String, String>>) -> Self {
        let entries = data
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| {
                let wire: Wire = serde_json::from_str(value).ok()?;
                let at = wire.at.parse::<Timestamp>().ok()?;
                let cost = match wire.cost.as_deref() {
                    Some(c) => Some(decimal(c)?),
                    None => None,
                };
                Some((
                    name.clone(),
                    Entry {
                        charge: Charge {
                            gpus: wire.gpus,
                            cost,
                        },
                        at,
                    },
                ))
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
                    at: e.at.to_string(),
                };
                let value = serde_json::to_string(&wire).unwrap_or_default();
                (name.clone(), value)
            })
            .collect()
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

    /// Whether the book already records at least `charge` for `name` (no
    /// entry counts as a charge of nothing).
    #[must_use]
    pub fn records_at_least(&self, name: &str, charge: Charge) -> bool {
        let recorded = self.entries.get(name).map(|e| e.charge);
        covers(recorded.unwrap_or_default(), charge)
    }

    /// This book with `name` charged `charge`, recorded `at`.
    #[must_use]
    pub fn with(&self, name: &str, charge: Charge, at: Timestamp) -> Self {
        let mut next = self.clone();
        next.entries.insert(name.to_owned(), Entry { charge, at });
        next
    }
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

/// What the reconciler sees of a namespace's services.
#[derive(Clone, Debug, Default)]
pub struct ServicesSeen {
    /// The current charge of every service that exists, by name.
    pub charges: BTreeMap<String, Charge>,
    /// Services deleted, by name, and when their deletion was seen.
    pub deleted: BTreeMap<String, Timestamp>,
}

/// The book corrected from the services that exist, at `now`; `None` when
/// nothing changes. An entry whose service exists takes the service's
/// charge (at least the recorded one while [`IN_FLIGHT`]); an entry whose
/// service was deleted goes at once unless it was charged after the
/// deletion was seen (created again); an entry whose service never
/// appeared goes once no longer in flight; a service charged but not
/// recorded is added.
#[must_use]
pub fn correct(book: &Book, seen: &ServicesSeen, now: Timestamp) -> Option<Book> {
    let mut next = Book::default();
    for (name, entry) in &book.entries {
        // A time ahead of `now` (another replica's clock) counts as fresh.
        let fresh = now.duration_since(entry.at) < IN_FLIGHT;
        match seen.charges.get(name) {
            Some(current) => {
                let charge = if fresh {
                    larger(entry.charge, *current)
                } else {
                    *current
                };
                if !is_nothing(charge) {
                    let at = entry.at;
                    next.entries.insert(name.clone(), Entry { charge, at });
                }
            }
            None => {
                let deleted = seen.deleted.get(name).is_some_and(|at| entry.at <= *at);
                if fresh && !deleted {
                    next.entries.insert(name.clone(), entry.clone());
                }
            }
        }
    }
    for (name, charge) in &seen.charges {
        if !next.entries.contains_key(name) && !is_nothing(*charge) {
            next.entries.insert(
                name.clone(),
                Entry {
                    charge: *charge,
                    at: now,
                },
            );
        }
    }
    (next != *book).then_some(next)
}
