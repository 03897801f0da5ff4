//! GPU budgets offline: the services under check charged, in the order
//! given, against their namespace's `maxGPUsPerNamespace` and
//! `maxCostPerHourPerNamespace`, as admission charges them one by one.

use std::collections::BTreeMap;

use crate::api::v1beta1::InferenceService;
use crate::engine::capacity::budget::{budget_of, budget_verdict, overruns};
use crate::engine::capacity::charge::{Charge, charge_of};
use crate::engine::field_path::Path;
use crate::engine::policy::layers;
use crate::engine::{Context, Verdict};

/// The charges admitted so far, per namespace (offline: no ledger is read or written).
#[derive(Debug, Default)]
pub struct Charges {
    charges: BTreeMap<String, Vec<(String, Charge)>>,
}

impl Charges {
    /// Judge the (defaulted, valid) `svc` against the charges before it, and
    /// record its charge unless the budget denies it.
    pub fn charge(&mut self, svc: &InferenceService, ctx: &Context) -> Verdict {
        let budget = budget_of(&layers(ctx));
        if !budget.is_set() {
            return Verdict::default();
        }
        let name = svc.metadata.name.clone().unwrap_or_default();
        let this = charge_of(&svc.spec, ctx.classes);
        let entries = self.charges.entry(ctx.namespace.to_owned()).or_default();
        let others: Vec<(&str, Charge)> = entries
            .iter()
            .filter(|(n, _)| *n != name)
            .map(|(n, c)| (n.as_str(), *c))
            .collect();
        let v = budget_verdict(
            &Path::new("spec"),
            overruns(&budget, ctx.namespace, &others, this),
        );
        if v.allowed() {
            entries.retain(|(n, _)| *n != name);
            entries.push((name, this));
        }
        v
    }
}
