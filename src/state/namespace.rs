//! The label every namespace carries with its own name.

use std::collections::BTreeMap;

/// The label every namespace carries with its own name (Kubernetes >= 1.21);
/// supplied even before the namespace watch has seen a new namespace.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Labels of a namespace nobody has described: only its name label.
#[must_use]
pub fn name_label_only(namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), namespace.to_owned())])
}

/// Add the name label to `labels` unless they hold it already.
pub fn add_name_label(labels: &mut BTreeMap<String, String>, namespace: &str) {
    labels
        .entry(NAMESPACE_NAME_LABEL.to_owned())
        .or_insert_with(|| namespace.to_owned());
}
