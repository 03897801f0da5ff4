//! The `infergate.dev/defaulted-from` annotation: where each field filled
//! in came from, kept across calls.

use std::collections::BTreeMap;

use crate::api::DEFAULTED_FROM_ANNOTATION;
use crate::api::v1beta1::InferenceService;
use crate::engine::defaulted::Provenance;

/// The `defaulted-from` annotation of `svc`, parsed (empty when absent or malformed).
#[must_use]
pub fn provenance_of(svc: &InferenceService) -> BTreeMap<String, String> {
    svc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULTED_FROM_ANNOTATION))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// Add the fields of `filled` to `svc`'s annotation (entries already there are kept).
pub(super) fn record_provenance(svc: &mut InferenceService, filled: &[Provenance]) {
    let earlier = provenance_of(svc);
    let mut map: BTreeMap<&str, &str> = earlier
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for p in filled {
        map.insert(p.field, &p.source);
    }
    // A map of strings always serialises.
    let json = serde_json::to_string(&map).unwrap_or_default();
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DEFAULTED_FROM_ANNOTATION.to_owned(), json);
}
