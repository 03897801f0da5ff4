//! What admission decides about a service's charge on a namespace's book:
//! nothing to do (no budget, or the charge is already recorded), a denial
//! listing every service's charge, or a charge to record (with the Warn
//! budgets it breaks). Pure.

use crate::api::policy::Enforcement;
use crate::engine::Context;
use crate::engine::capacity::budget::{Budget, budget_of, overruns};
use crate::engine::capacity::charge::Charge;

use super::book::Book;

/// The decision on one charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// No budget applies to the namespace: no ledger work at all.
    Unbudgeted,
    /// The book already records at least this charge.
    Recorded,
    /// A Deny budget would be broken (the messages).
    Deny(Vec<String>),
    /// Record the charge; the Warn budgets it breaks.
    Charge(Vec<String>),
}

/// Judge `charge` of the service `name` in `namespace` on `book`.
#[must_use]
pub fn judge(
    budget: &Budget<'_>,
    namespace: &str,
    name: &str,
    charge: Charge,
    book: &Book,
) -> Judgement {
    if !budget.is_set() {
        return Judgement::Unbudgeted;
    }
    if book.records_at_least(name, charge) {
        return Judgement::Recorded;
    }
    let (deny, warn): (Vec<_>, Vec<_>) = overruns(budget, namespace, &book.others(name), charge)
        .into_iter()
        .partition(|o| o.enforcement == Enforcement::Deny);
    if deny.is_empty() {
        Judgement::Charge(warn.into_iter().map(|o| o.message).collect())
    } else {
        Judgement::Deny(deny.into_iter().map(|o| o.message).collect())
    }
}

/// Whether a budget applies to the namespace of `ctx`.
#[must_use]
pub fn budgeted(ctx: &Context<'_>) -> bool {
    budget_of(&crate::engine::policy::layers(ctx)).is_set()
}

/// [`judge`] with the budgets that apply in `ctx`'s namespace.
#[must_use]
pub fn judge_in(ctx: &Context<'_>, name: &str, charge: Charge, book: &Book) -> Judgement {
    let layers = crate::engine::policy::layers(ctx);
    judge(&budget_of(&layers), ctx.namespace, name, charge, book)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::policy::PolicyLimits;
    use crate::engine::capacity::charge::decimal;
    use crate::engine::policy::Layer;

    fn layer(limits: &PolicyLimits, enforcement: Enforcement) -> Layer<'_> {
        Layer {
            kind: "ClusterInferencePolicy",
            namespace: None,
            name: "platform",
            priority: 0,
            enforcement,
            defaults: None,
            limits: Some(limits),
        }
    }

    fn gpus(n: i64) -> Charge {
        Charge {
            gpus: n,
            cost: None,
        }
    }

    #[test]
    fn a_charge_over_a_deny_budget_lists_every_service() {
        let limits = PolicyLimits {
            max_gpus_per_namespace: Some(16),
            ..PolicyLimits::default()
        };
        let layers = [layer(&limits, Enforcement::Deny)];
        let budget = budget_of(&layers);
        let now = jiff::Timestamp::UNIX_EPOCH;
        let book = Book::default()
            .with("chat", gpus(8), now)
            .with("embed", gpus(4), now);
        assert_eq!(
            judge(&budget, "team-a", "new", gpus(8), &book),
            Judgement::Deny(vec![
                "team-a uses 12 of 16 GPUs: chat 8, embed 4; this service needs 8 (ClusterInferencePolicy \"platform\")".to_owned()
            ])
        );
        assert_eq!(
            judge(&budget, "team-a", "new", gpus(4), &book),
            Judgement::Charge(Vec::new())
        );
        // An UPDATE is judged beside the others only.
        assert_eq!(
            judge(&budget, "team-a", "chat", gpus(12), &book),
            Judgement::Charge(Vec::new())
        );
        assert_eq!(
            judge(&budget, "team-a", "chat", gpus(6), &book),
            Judgement::Recorded
        );
    }

    #[test]
    fn a_warn_budget_charges_with_a_warning_and_no_budget_does_nothing() {
        let limits = PolicyLimits {
            max_cost_per_hour_per_namespace: Some("10".to_owned()),
            ..PolicyLimits::default()
        };
        let layers = [layer(&limits, Enforcement::Warn)];
        let budget = budget_of(&layers);
        let priced = Charge {
            gpus: 4,
            cost: decimal("16.4"),
        };
        match judge(&budget, "team-a", "chat", priced, &Book::default()) {
            Judgement::Charge(w) => assert_eq!(w.len(), 1, "{w:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            judge(&Budget::default(), "team-a", "chat", priced, &Book::default()),
            Judgement::Unbudgeted
        );
    }
}
