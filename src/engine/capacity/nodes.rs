//! Which nodes an AcceleratorClass's pods may be placed on, as the
//! scheduler's filters judge it: the node is Ready and schedulable, its
//! labels match the class's `nodeSelector` and the required terms of its
//! `nodeAffinity`, and the class's tolerations cover every `NoSchedule`
//! and `NoExecute` taint it carries (`PreferNoSchedule` only scores).
//!
//! A node is described by [`NodeFacts`], the little a watch keeps of it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeAffinity, NodeSelectorRequirement, Toleration};

use crate::api::AcceleratorClassSpec;
use crate::engine::selector::set_operator_matches;

/// The taint effects that keep a pod off a node it does not tolerate.
pub const BLOCKING_EFFECTS: [&str; 2] = ["NoSchedule", "NoExecute"];

/// A node's taint as far as placement reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeTaint {
    /// The taint's key.
    pub key: String,
    /// Its value (empty when none).
    pub value: String,
    /// `NoSchedule`, `NoExecute` or `PreferNoSchedule`.
    pub effect: String,
}

/// What free devices need of a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Its name (`matchFields` on `metadata.name`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Its taints (a watch keeps the blocking ones only).
    pub taints: Vec<NodeTaint>,
    /// `status.allocatable` of its extended resources, in devices.
    pub allocatable: Vec<(String, u64)>,
}

impl NodeFacts {
    /// Devices of `resource` the node offers pods (0 when it has none).
    #[must_use]
    pub fn allocatable(&self, resource: &str) -> u64 {
        self.allocatable
            .iter()
            .find(|(r, _)| r == resource)
            .map_or(0, |(_, n)| *n)
    }
}

/// Whether the scheduler may place a pod of `class` on `node`: Ready, not
/// cordoned, selected by the class's `nodeSelector` and `nodeAffinity`,
/// and every blocking taint tolerated.
#[must_use]
pub fn selects(class: &AcceleratorClassSpec, node: &NodeFacts) -> bool {
    node.ready
        && !node.unschedulable
        && class
            .node_selector
            .iter()
            .flatten()
            .all(|(k, v)| node.labels.get(k) == Some(v))
        && class
            .node_affinity
            .as_ref()
            .is_none_or(|a| affinity_matches(a, node))
        && tolerated(
            class.tolerations.as_deref().unwrap_or_default(),
            &node.taints,
        )
}

/// Whether `node` satisfies the required part of `affinity`
/// (`requiredDuringSchedulingIgnoredDuringExecution`; the preferred part
/// only scores): any one of its terms. A term with no requirement, or one
/// that cannot be parsed, matches no node, as in Kubernetes.
#[must_use]
pub fn affinity_matches(affinity: &NodeAffinity, node: &NodeFacts) -> bool {
    let Some(required) = &affinity.required_during_scheduling_ignored_during_execution else {
        return true;
    };
    required.node_selector_terms.iter().any(|term| {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        (!exprs.is_empty() || !fields.is_empty())
            && exprs
                .iter()
                .all(|r| requirement_matches(r, node.labels.get(&r.key).map(String::as_str)))
            && fields.iter().all(|r| {
                r.key == "metadata.name" && requirement_matches(r, Some(node.name.as_str()))
            })
    })
}

/// One node selector requirement against the label's (or field's) value.
fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        op @ ("Gt" | "Lt") => {
            let [bound] = values else {
                return false;
            };
            let (Ok(bound), Some(Ok(v))) = (bound.parse::<i64>(), value.map(str::parse::<i64>))
            else {
                return false;
            };
            if op == "Gt" { v > bound } else { v < bound }
        }
        "In" | "NotIn" if values.is_empty() => false,
        "Exists" | "DoesNotExist" if !values.is_empty() => false,
        op => set_operator_matches(op, values, value).unwrap_or(false),
    }
}

/// Whether `tolerations` cover every blocking taint of `taints`.
#[must_use]
pub fn tolerated(tolerations: &[Toleration], taints: &[NodeTaint]) -> bool {
    taints
        .iter()
        .filter(|t| BLOCKING_EFFECTS.contains(&t.effect.as_str()))
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

/// Kubernetes' `Toleration.ToleratesTaint`: the effect (when set) and the
/// key (when set) equal the taint's; `Exists` takes any value, `Equal`
/// (or no operator) the same value. Any other operator tolerates nothing.
#[must_use]
pub fn tolerates(toleration: &Toleration, taint: &NodeTaint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    let key = toleration.key.as_deref().unwrap_or_default();
    if (!effect.is_empty() && effect != taint.effect) || (!key.is_empty() && key != taint.key) {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => toleration.value.as_deref().unwrap_or_default() == taint.value,
        "Exists" => true,
        _ => false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorTerm};

    use super::*;

    pub(crate) fn node(name: &str, labels: &[(&str, &str)]) -> NodeFacts {
        NodeFacts {
            name: name.to_owned(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ready: true,
            unschedulable: false,
            taints: Vec::new(),
            allocatable: vec![("nvidia.com/gpu".to_owned(), 8)],
        }
    }

    pub(crate) fn taint(key: &str, value: &str, effect: &str) -> NodeTaint {
        NodeTaint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect: effect.to_owned(),
        }
    }

    pub(crate) fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Toleration {
            key: some(key),
            operator: some(op),
            value: some(value),
            effect: some(effect),
            toleration_seconds: None,
        }
    }

    pub(crate) fn class(selector: &[(&str, &str)]) -> AcceleratorClassSpec {
        AcceleratorClassSpec {
            resource_name: Some("nvidia.com/gpu".to_owned()),
            devices_per_node: 8,
            node_selector: (!selector.is_empty()).then(|| {
                selector
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }),
            ..Default::default()
        }
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn affinity(terms: Vec<NodeSelectorTerm>) -> NodeAffinity {
        NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: terms,
            }),
            ..Default::default()
        }
    }

    fn term(exprs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: (!exprs.is_empty()).then_some(exprs),
            match_fields: None,
        }
    }

    const POOL: (&str, &str) = ("pool", "h100");

    #[test]
    fn a_ready_schedulable_matching_node_is_selected() {
        assert!(selects(
            &class(&[POOL]),
            &node("n1", &[POOL, ("zone", "a")])
        ));
        assert!(
            selects(&class(&[]), &node("n1", &[])),
            "no selector: any node"
        );
    }

    #[test]
    fn a_node_not_ready_or_cordoned_is_not() {
        let mut n = node("n1", &[POOL]);
        n.ready = false;
        assert!(!selects(&class(&[POOL]), &n));
        let mut n = node("n1", &[POOL]);
        n.unschedulable = true;
        assert!(!selects(&class(&[POOL]), &n));
    }

    #[test]
    fn the_node_selector_must_match_every_label() {
        let c = class(&[POOL, ("zone", "a")]);
        assert!(!selects(&c, &node("n1", &[POOL])));
        assert!(!selects(&c, &node("n1", &[POOL, ("zone", "b")])));
        assert!(selects(&c, &node("n1", &[POOL, ("zone", "a")])));
    }

    #[test]
    fn node_affinity_terms_are_ored_and_requirements_anded() {
        let mut c = class(&[]);
        c.node_affinity = Some(affinity(vec![
            term(vec![
                req("zone", "In", &["a", "b"]),
                req("spot", "DoesNotExist", &[]),
            ]),
            term(vec![req("pool", "Exists", &[])]),
        ]));
        assert!(selects(&c, &node("n", &[("zone", "b")])));
        assert!(!selects(&c, &node("n", &[("zone", "b"), ("spot", "1")])));
        assert!(
            selects(&c, &node("n", &[("zone", "c"), POOL])),
            "second term"
        );
        assert!(!selects(&c, &node("n", &[("zone", "c")])));
    }

    #[test]
    fn node_affinity_numbers_fields_and_empty_terms() {
        let mut c = class(&[]);
        c.node_affinity = Some(affinity(vec![term(vec![req("gpus", "Gt", &["4"])])]));
        assert!(selects(&c, &node("n", &[("gpus", "8")])));
        assert!(!selects(&c, &node("n", &[("gpus", "4")])));
        assert!(!selects(&c, &node("n", &[("gpus", "many")])));
        assert!(!selects(&c, &node("n", &[])));
        c.node_affinity = Some(affinity(vec![term(vec![req("gpus", "Lt", &["4"])])]));
        assert!(selects(&c, &node("n", &[("gpus", "2")])));
        c.node_affinity = Some(affinity(vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
        }]));
        assert!(selects(&c, &node("n1", &[])));
        assert!(!selects(&c, &node("n2", &[])));
        c.node_affinity = Some(affinity(vec![term(vec![])]));
        assert!(
            !selects(&c, &node("n1", &[])),
            "an empty term matches nothing"
        );
        c.node_affinity = Some(affinity(vec![]));
        assert!(!selects(&c, &node("n1", &[])), "no term matches nothing");
        c.node_affinity = Some(affinity(vec![term(vec![req("zone", "In", &[])])]));
        assert!(!selects(&c, &node("n1", &[("zone", "a")])), "invalid");
        c.node_affinity = Some(NodeAffinity::default());
        assert!(selects(&c, &node("n1", &[])), "preferred terms only score");
    }

    #[test]
    fn blocking_taints_need_a_toleration_and_prefer_no_schedule_does_not() {
        let mut c = class(&[]);
        let mut n = node("n1", &[]);
        n.taints = vec![taint("nvidia.com/gpu", "present", "NoSchedule")];
        assert!(!selects(&c, &n), "untolerated NoSchedule");
        c.tolerations = Some(vec![toleration(
            "nvidia.com/gpu",
            "Exists",
            "",
            "NoSchedule",
        )]);
        assert!(selects(&c, &n));
        n.taints.push(taint("maintenance", "", "NoExecute"));
        assert!(!selects(&c, &n), "untolerated NoExecute");
        n.taints.pop();
        n.taints.push(taint("spot", "true", "PreferNoSchedule"));
        assert!(selects(&c, &n), "PreferNoSchedule is ignored");
    }

    #[test]
    fn toleration_matching_follows_kubernetes() {
        let t = taint("k", "v", "NoSchedule");
        assert!(tolerates(&toleration("k", "Equal", "v", "NoSchedule"), &t));
        assert!(
            tolerates(&toleration("k", "", "v", ""), &t),
            "no operator is Equal; any effect"
        );
        assert!(!tolerates(&toleration("k", "Equal", "w", "NoSchedule"), &t));
        assert!(
            !tolerates(&toleration("k", "Exists", "", "NoExecute"), &t),
            "other effect"
        );
        assert!(
            !tolerates(&toleration("j", "Exists", "", ""), &t),
            "other key"
        );
        assert!(
            tolerates(&toleration("", "Exists", "", ""), &t),
            "tolerates everything"
        );
        assert!(
            !tolerates(&toleration("k", "Gt", "1", ""), &t),
            "unknown operator"
        );
    }
}
