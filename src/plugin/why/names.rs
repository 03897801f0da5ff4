//! Findings about the names a service serves: a denial that names one (a
//! name another service holds, an adapter a later policy disallows), a
//! route the gateway refused with the names it carries, and names the
//! route has no rule for yet.

use super::commands::Commands;
use super::finding::{Finding, Severity, finding, quote, rank};
use crate::plugin::facts::{ConditionFacts, ServiceFacts};
use crate::plugin::names::{ModelNames, NameRoute};

/// The fields of the names, adapters and their routing, as field errors
/// name them.
const NAME_FIELDS: [&str; 5] = [
    "spec.model.servedName",
    "spec.model.adapters",
    "spec.routing.match",
    "spec.routing.modelNameHeader",
    "spec.routing.hostnames",
];

/// Whether a message carries a field error about the names.
pub(super) fn names_a_name_field(message: &str) -> bool {
    NAME_FIELDS.iter().any(|f| message.contains(f))
}

/// The name and field of a name another service holds, from a denial's
/// text (`FIELD: Duplicate value: "NAME": served through Gateway ...`).
pub(super) fn held_name(message: &str) -> Option<(&str, &str)> {
    let at = message.find(": Duplicate value: \"")?;
    let rest = &message[at + ": Duplicate value: \"".len()..];
    let (name, after) = rest.split_once("\": ")?;
    if !after.starts_with("served through Gateway ") {
        return None;
    }
    let field = message[..at]
        .rsplit(|c: char| c.is_whitespace() || c == ';')
        .next()
        .filter(|f| f.starts_with("spec."))?;
    Some((name, field))
}

/// `PolicyCompliant=False` or `Reconciled=False` caused by a name: a name
/// another service holds, or a later policy's limits on adapters and
/// names (the engine keeps serving them; the next change is denied until
/// they comply). `None` when the message names no name field.
pub(super) fn denial(c: &ConditionFacts, cmd: &Commands) -> Option<Finding> {
    if let Some((name, field)) = held_name(&c.message) {
        return Some(finding(
            rank::POLICY_DENIED,
            Severity::Blocking,
            &c.reason,
            None,
            format!(
                "Another service already serves the model name \"{name}\" ({field}) through the same gateway, and one name has one owner per gateway and hostname: give this service another name, other hostnames or another gateway: {}",
                quote(&c.message)
            ),
            Some(cmd.edit()),
        ));
    }
    if !names_a_name_field(&c.message) {
        return None;
    }
    Some(finding(
        rank::POLICY_DENIED,
        Severity::Blocking,
        &c.reason,
        None,
        format!(
            "A policy adopted after the service denies its model names or adapters; the engine keeps serving what it loaded, and the next change of the service is denied until they comply: {}",
            quote(&c.message)
        ),
        Some(cmd.kubectl("get inferencepolicies,clusterinferencepolicies -o yaml")),
    ))
}

/// `names a, b` of the names in `n` routed by name that `which` selects.
fn listed(n: &ModelNames, which: impl Fn(NameRoute) -> bool) -> Vec<&str> {
    n.names
        .iter()
        .filter(|f| which(f.route))
        .map(|f| f.name.as_str())
        .collect()
}

/// The sentence a refused route carries about the names on it (empty for
/// a service not routed by name).
pub(super) fn refused_names(f: &ServiceFacts) -> String {
    let Some(n) = &f.model_names else {
        return String::new();
    };
    let refused = listed(n, |r| r == NameRoute::NotAccepted);
    if refused.is_empty() {
        return String::new();
    }
    format!(
        ", so requests for the model name{} {} (header {}) reach nothing",
        if refused.len() == 1 { "" } else { "s" },
        refused.join(", "),
        n.header
    )
}

/// Names the route has no rule for on the service's gateway: the
/// reconciler has not applied the latest names yet.
pub(super) fn missing_rules(f: &ServiceFacts, cmd: &Commands) -> Option<Finding> {
    let n = f.model_names.as_ref()?;
    let missing: Vec<&str> = listed(n, |r| r == NameRoute::NoRule);
    let first = n.names.iter().find(|x| x.route == NameRoute::NoRule)?;
    Some(finding(
        rank::ROUTE,
        Severity::Waiting,
        "NameNotRouted",
        None,
        format!(
            "The gateway does not route the model name{} {} yet: {}.",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            first.detail
        ),
        Some(cmd.watch()),
    ))
}
