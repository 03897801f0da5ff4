//! The `infergate.dev/defaulted-from` annotation: where each field filled
//! in came from, kept across calls.

use std::collections::BTreeMap;

use crate::api::DEFAULTED_FROM_ANNOTATION;
use crate::api::v1beta1::InferenceService;
use crate::engine::defaulted::Provenance;
use crate::engine::json_text;

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

/// Add the fields of `filled` to `svc`'s annotation (entries already there
/// are kept; a field filled again takes its new source). The JSON object is
/// sorted by field, as a map of strings serialises. Returns the annotation
/// as a JSON string too (what a patch adding it carries), written in the
/// same pass.
pub(super) fn record_provenance(svc: &mut InferenceService, filled: &[Provenance]) -> String {
    let earlier = provenance_of(svc);
    let mut entries: Vec<(&str, usize, &str)> = Vec::with_capacity(earlier.len() + filled.len());
    entries.extend(earlier.iter().map(|(k, v)| (k.as_str(), 0, v.as_str())));
    entries.extend(
        filled
            .iter()
            .enumerate()
            .map(|(i, p)| (p.field, i + 1, &*p.source)),
    );
    // The last entry of a field wins: sorted by field, latest first, the
    // first of each field kept.
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0).then(b.1.cmp(&a.1)));
    entries.dedup_by_key(|(k, _, _)| *k);
    let (json, quoted) =
        json_text::string_map_and_its_string(entries.iter().map(|(k, _, v)| (*k, *v)));
    svc.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DEFAULTED_FROM_ANNOTATION.to_owned(), json);
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Source;

    /// Sorted by field, entries already there kept, the last source of a
    /// field filled twice winning: what a map of strings gave before.
    #[test]
    fn the_annotation_is_the_sorted_map_of_earlier_and_new_fields() {
        let mut svc = InferenceService::new("chat", Default::default());
        svc.metadata.annotations = Some(BTreeMap::from([(
            DEFAULTED_FROM_ANNOTATION.to_owned(),
            r#"{"spec.a":"x","spec.c":"y \"quoted\""}"#.to_owned(),
        )]));
        let p = |field, source: &'static str| Provenance {
            field,
            source: Source::Fixed(source),
            value: None,
        };
        let filled = [
            p("spec.c", "ClusterInferencePolicy/platform"),
            p("spec.b", "built-in"),
            p("spec.b", "InferencePolicy/team"),
        ];
        let quoted = record_provenance(&mut svc, &filled);
        assert_eq!(
            quoted,
            serde_json::to_string(
                &svc.metadata.annotations.as_ref().unwrap()[DEFAULTED_FROM_ANNOTATION]
            )
            .unwrap()
        );
        let mut expected: BTreeMap<&str, &str> =
            BTreeMap::from([("spec.a", "x"), ("spec.c", "y \"quoted\"")]);
        for f in &filled {
            expected.insert(f.field, &f.source);
        }
        assert_eq!(
            provenance_of(&svc),
            expected
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        );
        assert_eq!(
            svc.metadata.annotations.unwrap()[DEFAULTED_FROM_ANNOTATION],
            serde_json::to_string(&expected).unwrap()
        );
    }
}
