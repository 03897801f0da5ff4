//! Kubernetes LabelSelector matching (matchLabels and matchExpressions),
//! with the semantics of apimachinery's `LabelSelectorAsSelector`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Whether `selector` matches `labels`. An empty selector matches everything.
///
/// An invalid selector (unknown operator, `In`/`NotIn` without values,
/// `Exists`/`DoesNotExist` with values) matches nothing, as in Kubernetes.
#[must_use]
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if !selector_errors(selector).is_empty() {
        return false;
    }
    if let Some(ml) = &selector.match_labels {
        for (k, v) in ml {
            if labels.get(k) != Some(v) {
                return false;
            }
        }
    }
    if let Some(exprs) = &selector.match_expressions {
        for r in exprs {
            if !requirement_matches(r, labels) {
                return false;
            }
        }
    }
    true
}

fn requirement_matches(r: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    set_operator_matches(
        &r.operator,
        r.values.as_deref().unwrap_or_default(),
        labels.get(&r.key).map(String::as_str),
    )
    .unwrap_or(false)
}

/// Whether a label's `value` (`None`: the label is absent) satisfies the
/// set-based `operator` over `values` (`In`, `NotIn`, `Exists`,
/// `DoesNotExist`, as label and node selectors share them); `None` for
/// any other operator (a node selector's `Gt` and `Lt` are its own).
#[must_use]
pub fn set_operator_matches(
    operator: &str,
    values: &[String],
    value: Option<&str>,
) -> Option<bool> {
    let listed = |v: &str| values.iter().any(|x| x == v);
    Some(match operator {
        "In" => value.is_some_and(listed),
        "NotIn" => value.is_none_or(|v| !listed(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => return None,
    })
}

/// Problems that make a selector invalid, as `(field suffix, message)` pairs
/// relative to the selector (`matchExpressions[0].operator`, ...).
#[must_use]
pub fn selector_errors(selector: &LabelSelector) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(ml) = &selector.match_labels {
        for (k, v) in ml {
            if let Err(e) = super::names::check_label_key(k) {
                out.push((format!("matchLabels[{k:?}]"), e));
            }
            if let Err(e) = super::names::check_label_value(v) {
                out.push((
                    format!("matchLabels[{k:?}]"),
                    format!("Invalid value: {v:?}: {e}"),
                ));
            }
        }
    }
    for (i, r) in selector
        .match_expressions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let n = r.values.as_ref().map_or(0, Vec::len);
        if let Err(e) = super::names::check_label_key(&r.key) {
            out.push((format!("matchExpressions[{i}].key"), e));
        }
        match r.operator.as_str() {
            "In" | "NotIn" if n == 0 => out.push((
                format!("matchExpressions[{i}].values"),
                format!(
                    "Required value: must be specified when `operator` is {:?}",
                    r.operator
                ),
            )),
            "Exists" | "DoesNotExist" if n > 0 => out.push((
                format!("matchExpressions[{i}].values"),
                format!(
                    "Forbidden: may not be specified when `operator` is {:?}",
                    r.operator
                ),
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => out.push((
                format!("matchExpressions[{i}].operator"),
                format!(
                    "Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""
                ),
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| (*v).to_owned()).collect())
            },
        }
    }

    fn sel(ml: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
        LabelSelector {
            match_labels: if ml.is_empty() {
                None
            } else {
                Some(labels(ml))
            },
            match_expressions: if exprs.is_empty() { None } else { Some(exprs) },
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(matches(&LabelSelector::default(), &labels(&[])));
        assert!(matches(&LabelSelector::default(), &labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_all_must_match() {
        let s = sel(&[("tier", "prod"), ("team", "a")], vec![]);
        assert!(matches(
            &s,
            &labels(&[("tier", "prod"), ("team", "a"), ("x", "y")])
        ));
        assert!(!matches(&s, &labels(&[("tier", "prod")])));
        assert!(!matches(&s, &labels(&[("tier", "dev"), ("team", "a")])));
    }

    #[test]
    fn in_and_not_in() {
        let s = sel(&[], vec![expr("tier", "In", &["prod", "staging"])]);
        assert!(matches(&s, &labels(&[("tier", "staging")])));
        assert!(!matches(&s, &labels(&[("tier", "dev")])));
        assert!(!matches(&s, &labels(&[])));
        let s = sel(&[], vec![expr("tier", "NotIn", &["dev"])]);
        assert!(matches(&s, &labels(&[("tier", "prod")])));
        assert!(matches(&s, &labels(&[])), "NotIn matches a missing key");
        assert!(!matches(&s, &labels(&[("tier", "dev")])));
    }

    #[test]
    fn exists_and_does_not_exist() {
        let s = sel(&[], vec![expr("gpu", "Exists", &[])]);
        assert!(matches(&s, &labels(&[("gpu", "")])));
        assert!(!matches(&s, &labels(&[("cpu", "x")])));
        let s = sel(&[], vec![expr("gpu", "DoesNotExist", &[])]);
        assert!(!matches(&s, &labels(&[("gpu", "yes")])));
        assert!(matches(&s, &labels(&[])));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = sel(&[("tier", "prod")], vec![expr("team", "In", &["a"])]);
        assert!(matches(&s, &labels(&[("tier", "prod"), ("team", "a")])));
        assert!(!matches(&s, &labels(&[("tier", "prod"), ("team", "b")])));
        assert!(!matches(&s, &labels(&[("tier", "dev"), ("team", "a")])));
    }

    #[test]
    fn invalid_selectors_match_nothing_and_are_reported() {
        for s in [
            sel(&[], vec![expr("tier", "Equals", &["prod"])]),
            sel(&[], vec![expr("tier", "In", &[])]),
            sel(&[], vec![expr("tier", "Exists", &["x"])]),
        ] {
            assert!(!matches(&s, &labels(&[("tier", "prod")])));
            assert_eq!(selector_errors(&s).len(), 1, "{s:?}");
        }
    }
}
