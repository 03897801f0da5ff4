//! The `infergate.dev/defaulted-from` annotation: where each field filled
//! in came from, kept across calls.

use std::collections::BTreeMap;

use crate::api::DEFAULTED_FROM_ANNOTATION;
use crate::api::v1beta1::InferenceService;
use crate::engine::defaulted::{DefaultedFrom, Provenance};
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

/// The annotation `svc` has once the fields of `filled` are added to it,
/// as a patch carries it: a JSON string ([`annotation_json`] is the
/// annotation itself).
pub(super) fn annotation_quoted(svc: &InferenceService, filled: &[Provenance]) -> DefaultedFrom {
    let earlier = provenance_of(svc);
    let entries = merged(&earlier, filled);
    DefaultedFrom {
        quoted: json_text::string_map_as_string(entries.iter().map(|(_, k, _, v)| (*k, *v))),
    }
}

/// The annotation `svc` has once the fields of `filled` are added to it:
/// a JSON object of field paths and sources.
pub(super) fn annotation_json(svc: &InferenceService, filled: &[Provenance]) -> String {
    let earlier = provenance_of(svc);
    let mut json = String::new();
    let entries = merged(&earlier, filled);
    json_text::push_string_map(&mut json, entries.iter().map(|(_, k, _, v)| (*k, *v)));
    json
}

/// The entries of the annotation (their heads, fields, order and
/// sources): those of `earlier` and the fields of `filled` (a field filled
/// again takes its new source), sorted by field as a map of strings
/// serialises.
fn merged<'a>(
    earlier: &'a BTreeMap<String, String>,
    filled: &'a [Provenance],
) -> Vec<(Head, &'a str, usize, &'a str)> {
    let mut entries: Vec<(Head, &str, usize, &str)> =
        Vec::with_capacity(earlier.len() + filled.len());
    entries.extend(
        earlier
            .iter()
            .map(|(k, v)| (Head::of(k), k.as_str(), 0, v.as_str())),
    );
    entries.extend(
        filled
            .iter()
            .enumerate()
            .map(|(i, p)| (Head::of(p.field), p.field, i + 1, &*p.source)),
    );
    // The last entry of a field wins: sorted by field, latest first, the
    // first of each field kept. Fields are compared by their heads first
    // (two integer comparisons), whole only when the heads are equal.
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)).then(b.2.cmp(&a.2)));
    entries.dedup_by_key(|(_, k, _, _)| *k);
    entries
}

/// The first 24 bytes of a field's path as two big-endian integers, zero
/// padded: heads in order are paths in order (a shorter path's padding
/// sorts before any byte that is not zero, and equal heads leave the order
/// to the whole paths). `spec.healthCheck.interva` and
/// `spec.autoscaling.targetC` tell apart the fields of a spec group, so
/// the whole paths are rarely compared: the sort ran most of its time in
/// `memcmp`, one call per comparison of two paths sharing their first
/// bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Head(u64, u128);

impl Head {
    fn of(path: &str) -> Self {
        let mut bytes = [0u8; 24];
        let n = path.len().min(24);
        bytes[..n].copy_from_slice(&path.as_bytes()[..n]);
        let (first, rest) = bytes.split_at(8);
        let mut a = [0u8; 8];
        a.copy_from_slice(first);
        let mut b = [0u8; 16];
        b.copy_from_slice(rest);
        Head(u64::from_be_bytes(a), u128::from_be_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Source;

    /// Heads order paths as the paths themselves order, whatever their
    /// lengths and bytes (a NUL byte, paths of 24 bytes and longer).
    #[test]
    fn heads_order_paths_as_the_paths_do() {
        let paths = [
            "",
            "a",
            "a\0",
            "a\0b",
            "spec.autoscaling.targetCPUUtilizationPercent",
            "spec.autoscaling.targetC",
            "spec.autoscaling.target",
            "spec.healthCheck.interval",
            "spec.healthCheck.path",
            "spec.healthCheck.interva",
            "spec.healthCheck.intervaz",
            "spec.engine.image",
            "spec.engine",
            "spec.\u{e9}",
            "spec.\u{7f}",
        ];
        for a in paths {
            for b in paths {
                if a <= b {
                    assert!(
                        Head::of(a) <= Head::of(b),
                        "{a:?} before {b:?}, its head after"
                    );
                }
                if Head::of(a) != Head::of(b) {
                    assert_eq!(Head::of(a).cmp(&Head::of(b)), a.cmp(b), "{a:?} {b:?}");
                }
            }
        }
    }

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
        let from = annotation_quoted(&svc, &filled);
        let json = annotation_json(&svc, &filled);
        assert_eq!(from.quoted, serde_json::to_string(&json).unwrap());
        let mut expected: BTreeMap<&str, &str> =
            BTreeMap::from([("spec.a", "x"), ("spec.c", "y \"quoted\"")]);
        for f in &filled {
            expected.insert(f.field, &f.source);
        }
        assert_eq!(json, serde_json::to_string(&expected).unwrap());
        svc.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(DEFAULTED_FROM_ANNOTATION.to_owned(), json);
        assert_eq!(
            provenance_of(&svc),
            expected
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        );
    }
}
