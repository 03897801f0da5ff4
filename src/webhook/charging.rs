//! The admission side of the GPU budget ledger ([`crate::state::ledger`]):
//! what admission decides about a service's charge on a namespace's book:
//! nothing to do (no budget, a charge of nothing, or an UPDATE that does
//! not raise what the stored service is charged), a denial listing every
//! service's charge, or a charge to record (with the Warn budgets it
//! breaks). A charge to record is always written under the ledger's
//! precondition, also when a cached book shows it already: a cache may be
//! behind a release, and only that write proves the book judged is the
//! current one. Pure; [`crate::webhook::admission`] reads the book and has
//! the charge written.

use crate::api::policy::Enforcement;
use crate::api::v1beta1::InferenceServiceSpec;
use crate::engine::capacity::budget::{Budget, budget_of, overruns};
use crate::engine::capacity::charge::{Charge, charge_of};
use crate::engine::{Context, FieldError};

use crate::state::ledger::Charged;
pub use crate::state::ledger::Judgement;
use crate::state::ledger::book::{Book, covers, is_nothing};

/// The field a budget denial names.
pub const FIELD: &str = "spec";

/// Judge `charge` of the service `name` in `namespace` on `book`: beside
/// every other service's recorded charge (its own entry is replaced).
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
    let (deny, warn): (Vec<_>, Vec<_>) = overruns(budget, namespace, &book.others(name), charge)
        .into_iter()
        .partition(|o| o.enforcement == Enforcement::Deny);
    if deny.is_empty() {
        Judgement::Charge(warn.into_iter().map(|o| o.message).collect())
    } else {
        Judgement::Deny(deny.into_iter().map(|o| o.message).collect())
    }
}

/// [`judge`] with the budgets that apply in `ctx`'s namespace.
#[must_use]
pub fn judge_in(ctx: &Context<'_>, name: &str, charge: Charge, book: &Book) -> Judgement {
    let layers = crate::engine::policy::layers(ctx);
    judge(&budget_of(&layers), ctx.namespace, name, charge, book)
}

/// What the synchronous part of admission makes of a service's charge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admit {
    /// Denials of a Deny budget.
    pub errors: Vec<FieldError>,
    /// Warn budgets broken.
    pub warnings: Vec<String>,
    /// The charge the ledger must record before the write is allowed
    /// (never for a dry run).
    pub charge: Option<Charge>,
}

/// Judge the (defaulted) `spec` of the service `name` in `ctx`'s
/// namespace on `book` (read only when a budget applies and the write
/// can raise what the namespace holds: `book` is called at most once).
/// `old` is the stored spec an UPDATE replaces: a write whose charge it
/// covers holds nothing more and needs no charge.
#[must_use]
pub fn admit(
    ctx: &Context<'_>,
    name: &str,
    spec: &InferenceServiceSpec,
    old: Option<&InferenceServiceSpec>,
    dry_run: bool,
    book: impl FnOnce() -> Book,
) -> Admit {
    let layers = crate::engine::policy::layers(ctx);
    let budget = budget_of(&layers);
    if !budget.is_set() {
        return Admit::default();
    }
    let charge = charge_of(spec, ctx.classes);
    let held = old.map(|o| charge_of(o, ctx.classes));
    if is_nothing(charge) || held.is_some_and(|h| covers(h, charge)) {
        return Admit::default();
    }
    match judge(&budget, ctx.namespace, name, charge, &book()) {
        Judgement::Unbudgeted => Admit::default(),
        Judgement::Deny(messages) => Admit {
            errors: denials(messages),
            ..Admit::default()
        },
        // The same form as the engine's other warnings and `infergate check`'s.
        Judgement::Charge(warnings) => Admit {
            warnings: warnings.iter().map(|w| format!("{FIELD}: {w}")).collect(),
            charge: (!dry_run).then_some(charge),
            ..Admit::default()
        },
    }
}

/// The field errors of what charging came to (none when recorded).
#[must_use]
pub fn errors_of(charged: Charged) -> Vec<FieldError> {
    match charged {
        Charged::Unchanged | Charged::Written(_) => Vec::new(),
        Charged::Denied(messages) => denials(messages),
        Charged::Failed(why) => vec![FieldError::forbidden(
            FIELD,
            &format!(
                "the namespace's GPU budget ledger could not record this service's charge ({why}); try again"
            ),
        )],
    }
}

fn denials(messages: Vec<String>) -> Vec<FieldError> {
    messages
        .iter()
        .map(|m| FieldError::forbidden(FIELD, m))
        .collect()
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
        let book = Book::of_services([
            ("chat".to_owned(), None, gpus(8)),
            ("embed".to_owned(), None, gpus(4)),
        ]);
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
        // A charge the book already shows is judged again all the same:
        // only the write under the ledger's precondition proves the book.
        assert_eq!(
            judge(&budget, "team-a", "chat", gpus(6), &book),
            Judgement::Charge(Vec::new())
        );
    }

    fn ctx_with<R>(policies: &crate::engine::PolicySnapshot, f: impl FnOnce(&Context) -> R) -> R {
        crate::engine::context::in_team_a(policies, &crate::engine::ServerDefaults::default(), f)
    }

    fn spec(replicas: i32) -> InferenceServiceSpec {
        serde_json::from_value(serde_json::json!({
            "model": {"ref": "m"}, "replicas": replicas,
            "accelerator": {"type": "nvidia"}
        }))
        .unwrap()
    }

    #[test]
    fn admission_reads_no_book_without_a_budget_and_charges_nothing_on_a_dry_run() {
        let none = crate::engine::PolicySnapshot::default();
        let admit_none = ctx_with(&none, |ctx| {
            admit(ctx, "chat", &spec(4), None, false, || {
                panic!("no budget: no ledger read")
            })
        });
        assert_eq!(admit_none, Admit::default());

        let policy: crate::api::InferencePolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
            "metadata": {"name": "budget", "namespace": "team-a"},
            "spec": {"limits": {"maxGPUsPerNamespace": 4}}
        }))
        .unwrap();
        let budgeted = crate::engine::PolicySnapshot {
            cluster: vec![],
            namespaced: vec![policy],
        };
        let (write, dry, over) = ctx_with(&budgeted, |ctx| {
            (
                admit(ctx, "chat", &spec(4), None, false, Book::default),
                admit(ctx, "chat", &spec(4), None, true, Book::default),
                admit(ctx, "chat", &spec(5), None, true, Book::default),
            )
        });
        assert_eq!(write.charge, Some(gpus(4)));
        assert_eq!(dry, Admit::default());
        assert_eq!(over.charge, None);
        assert_eq!(over.errors.len(), 1);
        assert_eq!(over.errors[0].field, FIELD);
        // A Warn budget admits and charges, with the field named.
        let mut warn = budgeted.clone();
        warn.namespaced[0].spec.enforcement = Enforcement::Warn;
        let warned = ctx_with(&warn, |ctx| {
            admit(ctx, "chat", &spec(5), None, false, Book::default)
        });
        assert_eq!(warned.charge, Some(gpus(5)));
        assert!(warned.errors.is_empty());
        assert_eq!(
            warned.warnings,
            [
                "spec: team-a uses 0 of 4 GPUs; this service needs 5 (InferencePolicy \"team-a/budget\")"
            ]
        );
        assert_eq!(
            errors_of(Charged::Failed("x".to_owned()))[0].field,
            FIELD,
            "a charge not recorded denies"
        );
    }

    #[test]
    fn an_update_is_charged_when_it_raises_the_stored_charge_whatever_the_cached_book_shows() {
        let policy: crate::api::InferencePolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferencePolicy",
            "metadata": {"name": "budget", "namespace": "team-a"},
            "spec": {"limits": {"maxGPUsPerNamespace": 16}}
        }))
        .unwrap();
        let budgeted = crate::engine::PolicySnapshot {
            cluster: vec![],
            namespaced: vec![policy],
        };
        // A cached book still showing 8 for chat, stored at 4 since.
        let cached = || Book::of_services([("chat".to_owned(), None, gpus(8))]);
        let (raise, lower, same) = ctx_with(&budgeted, |ctx| {
            (
                admit(ctx, "chat", &spec(8), Some(&spec(4)), false, cached),
                admit(ctx, "chat", &spec(2), Some(&spec(4)), false, || {
                    panic!("a lowering reads no book")
                }),
                admit(ctx, "chat", &spec(4), Some(&spec(4)), false, || {
                    panic!("an unchanged charge reads no book")
                }),
            )
        });
        // Raised: written under the ledger's precondition, though the
        // cached book shows it.
        assert_eq!(raise.charge, Some(gpus(8)));
        assert_eq!(lower, Admit::default());
        assert_eq!(same, Admit::default());
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
            judge(
                &Budget::default(),
                "team-a",
                "chat",
                priced,
                &Book::default()
            ),
            Judgement::Unbudgeted
        );
    }
}
