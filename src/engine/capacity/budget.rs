//! A namespace's GPU and cost budgets (`limits.maxGPUsPerNamespace`,
//! `limits.maxCostPerHourPerNamespace`; the strictest applicable policy
//! wins) and the judgement of a charge against the others.

use std::fmt::Write as _;

use rust_decimal::Decimal;

use crate::api::policy::Enforcement;

use super::super::field_error::FieldError;
use super::super::field_path::Path;
use super::super::policy::{Bound, Layer, strictest};
use super::super::verdict::Verdict;
use super::charge::{Charge, decimal, money};

/// Services listed by name in a denial, at most.
pub const LISTED_SERVICES: usize = 32;

/// The budgets that apply to one namespace, per enforcement.
#[derive(Clone, Debug, Default)]
pub struct Budget<'a> {
    /// GPUs under a Deny policy.
    pub gpus_deny: Option<Bound<'a, i64>>,
    /// GPUs under a Warn policy.
    pub gpus_warn: Option<Bound<'a, i64>>,
    /// Cost per hour under a Deny policy.
    pub cost_deny: Option<Bound<'a, Decimal>>,
    /// Cost per hour under a Warn policy.
    pub cost_warn: Option<Bound<'a, Decimal>>,
}

impl Budget<'_> {
    /// Whether any budget applies.
    #[must_use]
    pub fn is_set(&self) -> bool {
        self.gpus_deny.is_some()
            || self.gpus_warn.is_some()
            || self.cost_deny.is_some()
            || self.cost_warn.is_some()
    }

    /// The strictest GPU budget (for status and messages).
    #[must_use]
    pub fn max_gpus(&self) -> Option<i64> {
        [&self.gpus_deny, &self.gpus_warn]
            .into_iter()
            .flatten()
            .map(|b| b.value)
            .min()
    }

    /// The strictest cost budget.
    #[must_use]
    pub fn max_cost(&self) -> Option<Decimal> {
        [&self.cost_deny, &self.cost_warn]
            .into_iter()
            .flatten()
            .map(|b| b.value)
            .min()
    }
}

/// The budgets of the applicable `layers`.
#[must_use]
pub fn budget_of<'a>(layers: &[Layer<'a>]) -> Budget<'a> {
    let (gpus_deny, gpus_warn) = strictest(layers, |l| l.max_gpus_per_namespace);
    let (cost_deny, cost_warn) = strictest(layers, |l| {
        l.max_cost_per_hour_per_namespace
            .as_deref()
            .and_then(decimal)
    });
    Budget {
        gpus_deny,
        gpus_warn,
        cost_deny,
        cost_warn,
    }
}

/// One budget a charge would break, and how the breaking policy enforces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overrun {
    /// Deny or Warn.
    pub enforcement: Enforcement,
    /// `team-a uses 12 of 16 GPUs: chat 8, embed 4; this service needs 8 (ClusterInferencePolicy "platform")`.
    pub message: String,
}

/// The budgets `this` breaks in `namespace` beside the `others` (name and
/// charge of every other service charged there). A charge of nothing
/// breaks nothing.
#[must_use]
pub fn overruns(
    budget: &Budget<'_>,
    namespace: &str,
    others: &[(&str, Charge)],
    this: Charge,
) -> Vec<Overrun> {
    let mut out = Vec::new();
    if this.gpus > 0 {
        let used: i64 = others.iter().map(|(_, c)| c.gpus).sum();
        for b in [&budget.gpus_deny, &budget.gpus_warn].into_iter().flatten() {
            if used.saturating_add(this.gpus) > b.value {
                let listed = list(others, |c| (c.gpus > 0).then(|| c.gpus.to_string()));
                out.push(Overrun {
                    enforcement: b.layer.enforcement,
                    message: format!(
                        "{namespace} uses {used} of {} GPUs{listed}; this service needs {} ({})",
                        b.value,
                        this.gpus,
                        b.layer.display()
                    ),
                });
                break;
            }
        }
    }
    if let Some(cost) = this.cost.filter(|c| *c > Decimal::ZERO) {
        let used: Decimal = others.iter().filter_map(|(_, c)| c.cost).sum();
        for b in [&budget.cost_deny, &budget.cost_warn].into_iter().flatten() {
            if used + cost > b.value {
                let listed = list(others, |c| c.cost.filter(|c| *c > Decimal::ZERO).map(money));
                out.push(Overrun {
                    enforcement: b.layer.enforcement,
                    message: format!(
                        "{namespace} uses {} of {} per hour{listed}; this service needs {} ({})",
                        money(used),
                        money(b.value),
                        money(cost),
                        b.layer.display()
                    ),
                });
                break;
            }
        }
    }
    out
}

/// `: chat 8, embed 4` (at most [`LISTED_SERVICES`], then `and N more`).
fn list(others: &[(&str, Charge)], shown: impl Fn(&Charge) -> Option<String>) -> String {
    let mut items: Vec<(&str, String)> = others
        .iter()
        .filter_map(|(n, c)| shown(c).map(|s| (*n, s)))
        .collect();
    if items.is_empty() {
        return String::new();
    }
    items.sort_unstable();
    let mut out = String::from(":");
    for (i, (n, s)) in items.iter().take(LISTED_SERVICES).enumerate() {
        let _ = write!(out, "{} {n} {s}", if i == 0 { "" } else { "," });
    }
    if items.len() > LISTED_SERVICES {
        let _ = write!(out, " and {} more", items.len() - LISTED_SERVICES);
    }
    out
}

/// Overruns as a verdict: a Deny overrun is a `Forbidden` error at `at`
/// (the service's spec), a Warn overrun a warning.
#[must_use]
pub fn budget_verdict(at: &Path<'_>, overruns: Vec<Overrun>) -> Verdict {
    let mut v = Verdict::default();
    for o in overruns {
        match o.enforcement {
            Enforcement::Deny => v.errors.push(FieldError::forbidden(at, &o.message)),
            Enforcement::Warn => v.warnings.push(format!("{at}: {}", o.message)),
        }
    }
    v
}
