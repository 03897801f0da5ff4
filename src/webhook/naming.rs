//! The admission side of the names ledgers ([`crate::state::names`]): what
//! admission decides about the names a service routed by name holds on
//! its Gateway: nothing (a service routed by path holds none, and an
//! UPDATE whose stored service already held every name it holds), a
//! denial naming the field of the first name another service holds
//! ([`crate::engine::model_names::clash_error`]), or names to record
//! before the write is allowed (never for a dry run). Judged here on the
//! watched ledger, and again on every fresh read when recorded
//! ([`crate::state::names::NamesLedger::record`]). HTTPRoutes infergate
//! does not own that match a served name's header on the same Gateway get
//! a warning naming them. No API call.

use std::collections::BTreeSet;

use crate::api::v1beta1::InferenceService;
use crate::engine::FieldError;
use crate::engine::model_names::{Claim, claims, header};
use crate::state::ClusterState;
use crate::state::names::book::{NameBook, key};
use crate::state::names::{Gateway, NamesLedger, Recorded};

/// What the synchronous part of admission makes of a service's names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// A name another service holds.
    pub errors: Vec<FieldError>,
    /// Routes infergate does not own that match a served name.
    pub warnings: Vec<String>,
    /// The claims the Gateway's ledger must record before the write is
    /// allowed (never for a dry run).
    pub record: Option<Vec<Claim>>,
}

/// Judge the names of `svc` (its stored version `old` on UPDATE) on the
/// watched ledger of its Gateway (without one, on the services the watch
/// holds).
#[must_use]
pub fn admit(
    state: &ClusterState,
    ledger: &NamesLedger,
    svc: &InferenceService,
    old: Option<&InferenceService>,
    dry_run: bool,
) -> Names {
    let mine = claims(svc);
    let Some(first) = mine.first() else {
        return Names::default();
    };
    let warnings = foreign_warnings(state, &mine, header(svc));
    let held = |c: &[Claim]| -> BTreeSet<(String, String, Option<String>, String)> {
        c.iter()
            .map(|c| {
                (
                    c.gateway_namespace.clone(),
                    c.gateway.clone(),
                    c.hostname.clone(),
                    c.name.clone(),
                )
            })
            .collect()
    };
    if old.is_some_and(|o| held(&claims(o)).is_superset(&held(&mine))) {
        return Names {
            warnings,
            ..Names::default()
        };
    }
    let gateway: Gateway = (first.gateway_namespace.clone(), first.gateway.clone());
    let book = ledger.cached(&gateway).unwrap_or_else(|| {
        let services = state.services().state();
        std::sync::Arc::new(NameBook::of_services(
            &gateway,
            services.iter().map(AsRef::as_ref),
        ))
    });
    let namespace = svc.metadata.namespace.as_deref().unwrap_or_default();
    let me = key(namespace, svc.metadata.name.as_deref().unwrap_or_default());
    if let Some(denial) = book.judge(&gateway, &me, &mine, namespace) {
        return Names {
            errors: vec![denial],
            warnings,
            record: None,
        };
    }
    Names {
        errors: Vec::new(),
        warnings,
        record: (!dry_run).then_some(mine),
    }
}

/// A warning for each route infergate does not own that matches one of
/// `mine`'s names in `header` on its Gateway.
fn foreign_warnings(state: &ClusterState, mine: &[Claim], header: &str) -> Vec<String> {
    let routes = state.foreign_routes();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for c in mine {
        for route in routes.matching(std::slice::from_ref(c), header) {
            if seen.insert((route.clone(), c.name.clone())) {
                out.push(format!(
                    "{}: HTTPRoute {route} on Gateway {} also matches {header}: {:?}, which this service serves; infergate does not own that route, and the Gateway may send this name's requests to it",
                    c.field,
                    c.gateway_display(),
                    c.name
                ));
            }
        }
    }
    out
}

/// The field errors of what recording came to (none when recorded).
#[must_use]
pub fn errors_of(recorded: Recorded, mine: &[Claim]) -> Vec<FieldError> {
    match recorded {
        Recorded::Written => Vec::new(),
        Recorded::Denied(e) => vec![e],
        Recorded::Failed(why) => vec![not_recorded(mine, &why)],
    }
}

/// The denial of names that could not be recorded.
#[must_use]
pub fn not_recorded(mine: &[Claim], why: &str) -> FieldError {
    let field = mine
        .first()
        .map_or("spec.model.servedName", |c| c.field.as_str());
    FieldError::forbidden(
        field,
        &format!(
            "the Gateway's names ledger could not record this service's names ({why}); try again"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, name: &str, served: &str, by_name: bool) -> InferenceService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infergate.dev/v1beta1", "kind": "InferenceService",
            "metadata": {"namespace": ns, "name": name, "uid": name},
            "spec": {"model": {"ref": "m", "servedName": served},
                     "routing": {"match": if by_name { "ModelName" } else { "Path" },
                                 "gateway": {"name": "gw", "namespace": "gateways"}}},
        }))
        .expect("fixture decodes")
    }

    #[test]
    fn names_are_judged_on_the_watched_services_and_recorded_unless_dry() {
        let state = ClusterState::default();
        let ledger = NamesLedger::default();
        let path = svc("a", "plain", "x", false);
        assert_eq!(admit(&state, &ledger, &path, None, false), Names::default());
        let chat = svc("a", "chat", "llama", true);
        let admitted = admit(&state, &ledger, &chat, None, false);
        assert!(admitted.errors.is_empty());
        assert_eq!(admitted.record.as_deref(), Some(claims(&chat).as_slice()));
        assert_eq!(admit(&state, &ledger, &chat, None, true).record, None);
        // An UPDATE holding nothing new records nothing.
        assert_eq!(
            admit(&state, &ledger, &chat, Some(&chat), false),
            Names::default()
        );
    }

    #[test]
    fn a_foreign_route_on_the_gateway_matching_a_served_name_is_named_in_a_warning() {
        let state = ClusterState::default();
        let route: crate::api::upstream::gateway_api::HTTPRoute =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"namespace": "b", "name": "by-hand"},
                "spec": {"parentRefs": [{"name": "gw", "namespace": "gateways"}],
                         "rules": [{"matches": [{"headers": [
                             {"type": "Exact", "name": "X-GATEWAY-MODEL-NAME", "value": "llama"}
                         ]}]}]}
            }))
            .expect("fixture decodes");
        state.foreign_routes().apply(&route);
        let chat = svc("a", "chat", "llama", true);
        let names = admit(&state, &NamesLedger::default(), &chat, Some(&chat), false);
        assert_eq!(
            names.warnings,
            [
                "spec.model.servedName: HTTPRoute b/by-hand on Gateway gateways/gw also matches X-Gateway-Model-Name: \"llama\", which this service serves; infergate does not own that route, and the Gateway may send this name's requests to it"
            ]
        );
        assert!(names.errors.is_empty() && names.record.is_none());
        let other = svc("a", "other", "mistral", true);
        assert!(
            admit(&state, &NamesLedger::default(), &other, None, true)
                .warnings
                .is_empty()
        );
    }

    #[test]
    fn a_failed_record_denies_on_the_first_names_field() {
        let chat = svc("a", "chat", "llama", true);
        let errors = errors_of(Recorded::Failed("x".to_owned()), &claims(&chat));
        assert_eq!(errors[0].field, "spec.model.servedName");
    }
}
